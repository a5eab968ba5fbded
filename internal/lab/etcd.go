package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// etcdMaxTxnOps is the external members' --max-txn-ops, and the
// controller's --etcd-max-txn-ops with them.
const etcdMaxTxnOps = 1024

// startEtcd starts the lab's etcd members, detached (they outlive `lab
// up`; Down stops them by the PIDs saved in etcdDir), and waits for a
// leader.
func (l *Lab) startEtcd(ctx context.Context) error {
	c, err := etcdproc.Start(etcdproc.Config{Dir: l.etcdDir(), Members: l.Cfg.EtcdMembers, Detach: true, MaxTxnOps: etcdMaxTxnOps,
		Extra:         []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h"},
		BridgeCommand: []string{l.Cfg.LabBinary, "lab", BridgeCommandName}})
	if err != nil {
		return err
	}
	if err := c.Save(); err != nil {
		c.Stop()
		return err
	}
	s, err := store.Connect(store.Options{Endpoints: c.Endpoints()})
	if err != nil {
		return err
	}
	defer s.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := s.Ping(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the lab's etcd cluster elected no leader in 30s (logs in %s): %w", l.etcdDir(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if l.Cfg.EtcdProxies > 0 {
		// StartProxies waits until each answers /health, which it does
		// after a read from a member.
		if err := c.StartProxies(l.Cfg.EtcdProxies); err != nil {
			return fmt.Errorf("the lab's etcd proxies (logs in %s): %w", l.etcdDir(), err)
		}
	}
	return nil
}

// BridgeCommandName is the hidden `azgate-lab lab` command that runs a
// proxy's bridge (etcdproc.ServeBridge) as a process of its own, so it
// outlives `lab up`.
const BridgeCommandName = "etcd-bridge"

// proxyNodes are the nodes that point at a proxy when the lab runs
// proxies: the edges, then the hosts (their agents), in topology order;
// node k uses proxy k mod N. Round-robin, not one proxy per POP or AZ:
// the lab's POPs (two) and AZs (three) are fewer than the proxies a
// test may want, and the sets without a POP would need a rule of their
// own; the fan-out each proxy coalesces is the same.
func (l *Lab) proxyNodes() []*Node {
	return append(l.Topo.NodesByRole("edge"), l.Topo.NodesByRole("host")...)
}

// ProxyOf is the client URL of the proxy a node points at ("": none,
// the node uses every member or the embedded etcd).
func (l *Lab) ProxyOf(name string) string {
	c, err := l.Etcd()
	if err != nil || c == nil || len(c.Proxies) == 0 {
		return ""
	}
	for k, n := range l.proxyNodes() {
		if n.Name == name {
			return c.Proxies[k%len(c.Proxies)].ClientURL
		}
	}
	return ""
}

// roleEtcdFlag is an edge's or agent's --etcd-endpoints: its proxy, or
// (no proxies) the store's endpoints. One proxy only: a client given
// several would spread its requests, and its watches, over them.
func (l *Lab) roleEtcdFlag(n *Node) string {
	if p := l.ProxyOf(n.Name); p != "" {
		return p
	}
	return l.etcdFlag()
}

// Etcd returns the lab's etcd cluster (nil when the lab uses the
// controller's embedded etcd), to kill and restart members by PID.
func (l *Lab) Etcd() (*etcdproc.Cluster, error) { return etcdproc.Attach(l.etcdDir()) }

// etcdEndpoints are the store's client URLs: the etcd members' when the
// lab runs a cluster (external true), else the embedded etcd's socket.
func (l *Lab) etcdEndpoints() (eps []string, external bool) {
	if c, err := etcdproc.Attach(l.etcdDir()); err == nil && c != nil {
		return c.Endpoints(), true
	}
	return []string{"unix://" + filepath.Join(l.dataDir(), "etcd.sock")}, false
}

// etcdFlag is the roles' --etcd-endpoints.
func (l *Lab) etcdFlag() string {
	eps, _ := l.etcdEndpoints()
	return strings.Join(eps, ",")
}

// EtcdMemberView is one etcd member in `lab status`.
type EtcdMemberView struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	PID      int    `json:"pid"`
	Running  bool   `json:"running"`
}

// EtcdProxyView is one etcd gRPC proxy in `lab status`.
type EtcdProxyView struct {
	Name      string   `json:"name"`
	Endpoint  string   `json:"endpoint"` // its bridge's unix socket
	PID       int      `json:"pid"`
	BridgePID int      `json:"bridge_pid"`
	Running   bool     `json:"running"`
	Nodes     []string `json:"nodes"` // the edges and agents pointed at it
}

func (l *Lab) etcdProxyView() []EtcdProxyView {
	c, err := l.Etcd()
	if err != nil || c == nil {
		return nil
	}
	var out []EtcdProxyView
	for i, p := range c.Proxies {
		v := EtcdProxyView{Name: p.Name, Endpoint: p.ClientURL, PID: p.PID, BridgePID: p.BridgePID, Running: c.ProxyRunning(i)}
		for k, n := range l.proxyNodes() {
			if k%len(c.Proxies) == i {
				v.Nodes = append(v.Nodes, n.Name)
			}
		}
		out = append(out, v)
	}
	return out
}

func (l *Lab) etcdView() []EtcdMemberView {
	c, err := l.Etcd()
	if err != nil || c == nil {
		return nil
	}
	var out []EtcdMemberView
	for i, m := range c.Members {
		out = append(out, EtcdMemberView{Name: m.Name, Endpoint: m.ClientURL, PID: m.PID, Running: c.Running(i)})
	}
	return out
}

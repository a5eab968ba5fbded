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
		Extra: []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h"}})
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
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the lab's etcd cluster elected no leader in 30s (logs in %s): %w", l.etcdDir(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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

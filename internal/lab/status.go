package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/internal/store"
)

// controllerArgs starts the controller serving the API on a unix socket
// only (the lab takes no TCP port on the machine).
func controllerArgs(dataDir, apiSock string) []string {
	return []string{"controller", "--data-dir", dataDir, "--listen", "", "--listen-unix", apiSock}
}

// NodeStatuses reads the statuses edges and agents publish, by name.
func (l *Lab) NodeStatuses(ctx context.Context) (map[string]model.NodeStatus, error) {
	eps, _ := l.etcdEndpoints()
	st, err := store.Connect(store.Options{Endpoints: eps})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, st, "")
	if err != nil {
		return nil, err
	}
	out := map[string]model.NodeStatus{}
	for _, n := range nodes {
		if n.Err == nil {
			out[n.Status.Name] = n.Status
		}
	}
	return out, nil
}

func (l *Lab) countNodes(ctx context.Context) int {
	s, err := l.NodeStatuses(ctx)
	if err != nil {
		return 0
	}
	return len(s)
}

// NodeView is one line of `lab status`.
type NodeView struct {
	*Node
	Running bool              `json:"running"`
	Status  *model.NodeStatus `json:"status,omitempty"`
	// EtcdEndpoint is the proxy an edge or agent points at (lab up
	// --etcd-proxies); empty: every member, or the embedded etcd.
	EtcdEndpoint string `json:"etcd_endpoint,omitempty"`
}

// View is the whole lab status.
type View struct {
	Prefix     string `json:"prefix"`
	StateDir   string `json:"state_dir"`
	API        string `json:"api"`
	TokenFile  string `json:"token_file"`
	Controller bool   `json:"controller_running"`
	// Etcd lists the etcd members when the lab runs a cluster
	// (lab up --etcd-members); empty: the controller's embedded etcd.
	Etcd []EtcdMemberView `json:"etcd,omitempty"`
	// EtcdProxies lists the etcd gRPC proxies (lab up --etcd-proxies)
	// and the nodes pointed at each.
	EtcdProxies []EtcdProxyView `json:"etcd_proxies,omitempty"`
	// Bandwidth lists the shared-bandwidth stores and managers.
	Bandwidth *BWView `json:"bandwidth,omitempty"`
	// Routes are rtr's kernel routes to the prefix set's prefixes, IPv4
	// and IPv6, and to any longer prefix inside them (a pulled-out or
	// quarantined address's), each with the edges it points to
	// (RouterRoutes); RoutesErr says why there are none to show.
	Routes    map[netip.Prefix][]string `json:"router_routes,omitempty"`
	RoutesErr string                    `json:"router_routes_error,omitempty"`
	// EIPs are the region's EIPs, IPv4 and IPv6, as the controller holds
	// them (EIPsErr says why there are none to show).
	EIPs    []model.EIP `json:"eips,omitempty"`
	EIPsErr string      `json:"eips_error,omitempty"`
	Nodes   []NodeView  `json:"nodes"`
}

// Status describes every node with its namespace, role, AZ, addresses and
// whether its process runs.
func (l *Lab) Status(ctx context.Context) View {
	v := View{Prefix: l.Cfg.Prefix, StateDir: l.Cfg.StateDir, API: l.API, TokenFile: l.tokenFile()}
	if b, err := os.ReadFile(filepath.Join(l.Cfg.StateDir, "controller.pid")); err == nil {
		var pid int
		fmt.Sscan(string(b), &pid)
		v.Controller = alive(pid)
	}
	v.Etcd = l.etcdView()
	v.EtcdProxies = l.etcdProxyView()
	v.Bandwidth = l.bwView(ctx)
	if rs, err := l.RouterRoutes(); err != nil {
		v.RoutesErr = err.Error()
	} else {
		v.Routes = rs
	}
	// Bounded as NodeStatuses is: a controller that hangs does not hang
	// the status.
	ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
	if c, err := l.Client(); err != nil {
		v.EIPsErr = err.Error()
	} else if es, err := c.EIPs(ectx); err != nil {
		v.EIPsErr = err.Error()
	} else {
		v.EIPs = es
	}
	ecancel()
	st, _ := l.NodeStatuses(ctx)
	for _, n := range l.Topo.Nodes {
		nv := NodeView{Node: n, EtcdEndpoint: l.ProxyOf(n.Name)}
		if n.Process != nil {
			nv.Running = alive(n.Process.PID)
		}
		if s, ok := st[n.Name]; ok {
			nv.Status = &s
		}
		v.Nodes = append(v.Nodes, nv)
	}
	sort.SliceStable(v.Nodes, func(i, j int) bool { return roleOrder(v.Nodes[i].Role) < roleOrder(v.Nodes[j].Role) })
	return v
}

func roleOrder(r string) int {
	for i, x := range []string{"internet", "router", "edge", "underlay", "host", "guest"} {
		if r == x {
			return i
		}
	}
	return 99
}

// Exec runs a command inside a lab node's namespace, attached to the
// caller's terminal.
func (l *Lab) Exec(node string, argv []string) *exec.Cmd {
	n := l.Topo.Node(node)
	if n == nil {
		return nil
	}
	cmd := netns.Command(n.Netns, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd
}

// BWView is the shared-bandwidth part of `lab status`: each zone's
// redis-server and each manager, with whether it runs and which manager
// of a scope is active (holds the scope's election).
type BWView struct {
	Servers  []BWServerView  `json:"servers"`
	Managers []BWManagerView `json:"managers"`
}

// BWServerView is one redis-server in `lab status`.
type BWServerView struct {
	BWServer
	Running bool `json:"running"`
}

// BWManagerView is one bandwidth manager in `lab status`.
type BWManagerView struct {
	BWManager
	Running bool `json:"running"`
	Active  bool `json:"active"`
}

func (l *Lab) bwView(ctx context.Context) *BWView {
	if len(l.bw.Servers) == 0 && len(l.bw.Managers) == 0 {
		return nil
	}
	v := &BWView{}
	for _, s := range l.bw.Servers {
		v.Servers = append(v.Servers, BWServerView{BWServer: s, Running: isBWServer(s.PID, s.Dir)})
	}
	var keys []string
	for _, m := range l.bw.Managers {
		keys = append(keys, m.OwnerKey())
	}
	holders, _ := l.bwHolders(ctx, keys) // etcd down: none shown active
	for _, m := range l.bw.Managers {
		v.Managers = append(v.Managers, BWManagerView{BWManager: m, Running: isBWManager(m.PID, l.Cfg.StateDir), Active: holders[m.OwnerKey()] == m.Name})
	}
	return v
}

// MaxEIPLines is how many EIPs `lab status` lists by line (a fleet lab's
// thousands are counted, not listed).
const MaxEIPLines = 16

// EIPLines describes the EIPs for `lab status`, one line each, the IPv4
// ones first and then the IPv6 ones (each family in address order): the
// address, the family, the guest it is bound to and its dedicated set.
// Past max lines the rest are counted by family in one last line.
func EIPLines(es []model.EIP, max int) []string {
	es = append([]model.EIP(nil), es...)
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Address, es[j].Address
		if a.Is4() != b.Is4() {
			return a.Is4()
		}
		return a.Less(b)
	})
	var out []string
	var more4, more6 int
	for _, e := range es {
		if len(out) >= max {
			if e.Address.Is4() {
				more4++
			} else {
				more6++
			}
			continue
		}
		fam := "IPv4"
		if e.Address.Is6() {
			fam = "IPv6"
		}
		bound := "unbound"
		if e.Binding != nil {
			bound = "-> " + e.Binding.Host + "/" + e.Binding.Guest
		}
		line := fmt.Sprintf("%s (%s) %s", e.Address, fam, bound)
		if e.Set != "" {
			line += ", set " + e.Set
		}
		out = append(out, line)
	}
	if more4+more6 > 0 {
		out = append(out, fmt.Sprintf("... %d more (%d IPv4, %d IPv6)", more4+more6, more4, more6))
	}
	return out
}

package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// Config of a lab.
type Config struct {
	Prefix   string // namespace and pin-name prefix
	StateDir string // controller data, logs, lab.json, api socket
	// Binary is the shipped azgate binary the roles run as (controller,
	// edges, agents, ...); default: DefaultBinary, azgate beside the
	// running executable.
	Binary string
	// NodeBinary is the shipped azgate-node binary the node roles run as
	// (edges, agents: packaging.NodeRoles, as their units do); default:
	// azgate-node beside Binary.
	NodeBinary string
	// LabBinary runs the lab's servers (azgate-lab lab serve); default:
	// the running executable.
	LabBinary     string
	AZs           int
	HostsPerAZ    int
	GuestsPerHost int
	// ContextFile, when set, is written on Up so the CLI finds the lab's
	// API and token without flags (and removed on Down).
	ContextFile string
	// EtcdMembers > 0 runs the store on a cluster of that many real
	// etcd-server processes (Debian's etcd) instead of the controller's
	// embedded etcd: every role gets --etcd-endpoints with all of them
	// (issue 8, part 7). They listen on unix sockets in StateDir/etcd
	// (mode 0700), which the roles in their namespaces reach by path.
	EtcdMembers int
	// EtcdProxies > 0 (with EtcdMembers) runs that many etcd gRPC
	// proxies in front of the members (issue 19, part 2): the edges and
	// the agents point at a proxy each, round-robin (proxyNodes), the
	// controller and the other roles stay on the members. At most
	// etcdproc.MaxProxies.
	EtcdProxies int
	// Underlay is the underlay's family: UnderlayIPv4 (default),
	// UnderlayIPv6 or UnderlayMixed (lab up --underlay; topology.go).
	Underlay string
	// ControllerArgs are added to the controller's command line (a
	// test's short DDoS thresholds and cool-down, say).
	ControllerArgs []string
	// BWGrace, if set, is the bandwidth managers' --grace and the edges'
	// and agents' --bw-grace (how long without limits before the static
	// split; docs/bandwidth.md); 0 leaves their default.
	BWGrace time.Duration
	Out     io.Writer // progress messages
}

// Defaults for the lab the README's demo runs.
const (
	DefaultPrefix   = "azg-"
	DefaultStateDir = "/run/azgate-lab"
)

// Validate checks the flags that depend on each other.
func (c *Config) Validate() error {
	if c.EtcdMembers < 0 {
		return fmt.Errorf("--etcd-members %d: want 0 (the embedded etcd) or more", c.EtcdMembers)
	}
	if c.Underlay != "" {
		if err := ValidUnderlay(c.Underlay); err != nil {
			return err
		}
	}
	if c.EtcdProxies < 0 || c.EtcdProxies > etcdproc.MaxProxies {
		return fmt.Errorf("--etcd-proxies %d: want 0 to %d", c.EtcdProxies, etcdproc.MaxProxies)
	}
	if c.EtcdProxies > 0 && c.EtcdMembers == 0 {
		return fmt.Errorf("--etcd-proxies %d needs --etcd-members > 0: the proxies serve a cluster of etcd-server processes, the controller's embedded etcd has none", c.EtcdProxies)
	}
	return nil
}

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	// Absolute: the bandwidth stores' configs and the roles' flags name
	// paths in it, and a redis-server wants an absolute dir.
	if abs, err := filepath.Abs(c.StateDir); err == nil {
		c.StateDir = abs
	}
	if err := c.binaryDefaults(); err != nil {
		return err
	}
	if c.AZs == 0 {
		c.AZs = 3
	}
	if c.HostsPerAZ == 0 {
		c.HostsPerAZ = 2
	}
	if c.GuestsPerHost == 0 {
		c.GuestsPerHost = 2
	}
	if c.Underlay == "" {
		c.Underlay = UnderlayIPv4
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// Lab is a running lab.
type Lab struct {
	Cfg  Config
	Topo *Topology
	API  string // base URL of the controller API
	tok  string
	bw   bwState // the bandwidth stores and managers (bandwidth.go)
}

func (l *Lab) say(format string, a ...any) { fmt.Fprintf(l.Cfg.Out, format+"\n", a...) }

func (l *Lab) stateFile() string { return filepath.Join(l.Cfg.StateDir, "lab.json") }
func (l *Lab) dataDir() string   { return filepath.Join(l.Cfg.StateDir, "controller") }
func (l *Lab) apiSock() string   { return filepath.Join(l.Cfg.StateDir, "api.sock") }
func (l *Lab) etcdDir() string   { return filepath.Join(l.Cfg.StateDir, "etcd") }
func (l *Lab) tokenFile() string { return filepath.Join(l.dataDir(), "token") }
func (l *Lab) logDir() string    { return filepath.Join(l.Cfg.StateDir, "logs") }
func (l *Lab) pinDir(n string) string {
	return dataplane.NodePinDir(l.Cfg.Prefix + n)
}

// Client returns an API client for the lab's controller.
func (l *Lab) Client() (*client.Client, error) {
	if l.tok == "" {
		b, err := os.ReadFile(l.tokenFile())
		if err != nil {
			return nil, fmt.Errorf("lab token: %w", err)
		}
		l.tok = strings.TrimSpace(string(b))
	}
	return client.New(l.API, l.tok), nil
}

// Up builds the lab and starts every role. On failure everything made so
// far is removed again.
func Up(ctx context.Context, cfg Config) (*Lab, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cfg.CheckBinaries(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab needs root (network namespaces, XDP)")
	}
	l := &Lab{Cfg: cfg, Topo: BuildUnderlay(cfg.Prefix, cfg.AZs, cfg.HostsPerAZ, cfg.GuestsPerHost, cfg.Underlay)}
	l.API = "unix://" + l.apiSock()
	if existing, _ := netns.List(cfg.Prefix); len(existing) > 0 {
		return nil, fmt.Errorf("a lab with prefix %q is already up (%d namespaces): run `azgate-lab lab down` first", cfg.Prefix, len(existing))
	}
	if err := dataplane.EnsureBPFFS(); err != nil {
		return nil, err
	}
	if err := l.up(ctx); err != nil {
		l.say("lab up failed: %v; cleaning up", err)
		Down(cfg)
		return nil, err
	}
	return l, nil
}

func (l *Lab) up(ctx context.Context) error {
	for _, d := range []string{l.Cfg.StateDir, l.logDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	l.say("building %d namespaces", len(l.Topo.Nodes))
	if err := l.buildNetwork(); err != nil {
		return err
	}
	l.say("starting BIRD in rtr (one BGP session per edge, ECMP)")
	if err := l.startRouter(); err != nil {
		return err
	}
	if err := l.save(); err != nil {
		return err
	}
	// The bandwidth stores start meanwhile; the managers and the roles
	// need them.
	l.say("starting %d redis-servers for shared bandwidth (zones %s)", len(l.bwZones()), strings.Join(l.bwZones(), ", "))
	bwDone := make(chan error, 1)
	go func() { _, err := l.startBWServers(ctx); bwDone <- err }()
	bwStarted := false
	defer func() {
		if !bwStarted {
			<-bwDone // Down must see every server that started
		}
	}()
	if l.Cfg.EtcdMembers > 0 {
		l.say("starting %d etcd members (unix sockets in %s)", l.Cfg.EtcdMembers, l.etcdDir())
		if err := l.startEtcd(ctx); err != nil {
			return err
		}
		if l.Cfg.EtcdProxies > 0 {
			l.say("started %d etcd gRPC proxies (each in a namespace of its own, reached by unix socket in %s); the edges and agents point at them round-robin", l.Cfg.EtcdProxies, l.etcdDir())
		}
		l.say("starting the controller (store: the etcd cluster)")
	} else {
		l.say("starting the controller (embedded etcd in %s)", l.dataDir())
	}
	if err := l.startController(ctx); err != nil {
		return err
	}
	c, err := l.Client()
	if err != nil {
		return err
	}
	if _, err := c.Apply(ctx, l.Region()); err != nil {
		return fmt.Errorf("apply the lab region: %w", err)
	}
	bwStarted = true
	if err := <-bwDone; err != nil {
		return err
	}
	l.say("starting the bandwidth managers: 2 for the region, 1 per zone")
	if err := l.startBWManagers(); err != nil {
		return err
	}
	l.say("starting %d edges and the agents", len(l.Topo.NodesByRole("edge")))
	for _, n := range l.Topo.NodesByRole("edge") {
		if err := l.startEdge(n); err != nil {
			return err
		}
	}
	for _, n := range l.Topo.NodesByRole("host") {
		if err := l.startAgent(n); err != nil {
			return err
		}
	}
	l.say("starting a server (HTTP on 80 and 443, echo on 7000) in every guest and DMZ server")
	for _, n := range append(l.Topo.NodesByRole("guest"), l.Topo.NodesByRole("server")...) {
		if err := l.StartServer(n.Name); err != nil {
			return err
		}
	}
	if err := l.save(); err != nil {
		return err
	}
	if err := l.waitNodes(ctx, 60*time.Second); err != nil {
		return err
	}
	l.say("waiting for the edges' BGP sessions and the router's multipath route")
	if err := l.waitSessions(ctx, 60*time.Second); err != nil {
		return err
	}
	// Both families: the set's IPv6 prefix comes over MP-BGP on the
	// same sessions.
	for _, p := range SetPrefixes() {
		if _, err := l.WaitRoute(ctx, p, EdgesOf(PrefixSet), 30*time.Second); err != nil {
			return err
		}
	}
	if l.Cfg.ContextFile != "" {
		if err := client.WriteContext(l.Cfg.ContextFile, client.Context{API: l.API, TokenFile: l.tokenFile()}); err != nil {
			return err
		}
	}
	l.say("lab is up: %d nodes; try `azgate-lab lab status` and `azgate-lab lab demo`", len(l.Topo.Nodes))
	return nil
}

func (l *Lab) buildNetwork() error {
	nodes := map[string]*netlab.Node{}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	for _, n := range l.Topo.Nodes {
		nn, err := netlab.NewNode(n.Netns)
		if err != nil {
			return err
		}
		nodes[n.Name] = nn
		if n.Role != "guest" && n.Role != "internet" && n.Role != "server" {
			if err := nn.Forwarding(); err != nil {
				return err
			}
		}
		// The Internet side and the guests are dual-stack: set up before
		// their links are made (they take the namespace's defaults); rtr,
		// the edges and the hosts forward IPv6 as they forward IPv4 (a
		// host's kernel forwards what its agent passes while a guest's
		// neighbour is unresolved), and so does fab where the underlay
		// is IPv6 (lab up --underlay).
		if len(n.Addresses6) > 0 {
			if err := nn.IPv6(n.Role == "router" || n.Role == "edge" || n.Role == "host" || n.Role == "underlay"); err != nil {
				return err
			}
		}
	}
	for _, lk := range l.Topo.links {
		a, b := nodes[lk.a], nodes[lk.b]
		if err := netlab.Veth(netlab.End{Node: a, Dev: lk.aDev}, netlab.End{Node: b, Dev: lk.bDev}, lk.mtu); err != nil {
			return err
		}
		for _, e := range []struct {
			n         *netlab.Node
			dev, addr string
		}{{a, lk.aDev, lk.aAddr}, {b, lk.bDev, lk.bAddr}} {
			if e.addr != "" {
				if err := e.n.Addr(e.dev, e.addr); err != nil {
					return err
				}
			}
			if err := e.n.XDPReady(e.dev); err != nil {
				return err
			}
		}
	}
	for _, a := range l.Topo.addrs6 {
		if err := nodes[a.node].Addr(a.dev, a.cidr); err != nil {
			return err
		}
	}
	if err := l.bridges(nodes); err != nil {
		return err
	}
	for _, r := range l.Topo.routes {
		if err := nodes[r.node].Route(r.dst, r.gw, r.dev); err != nil {
			return err
		}
	}
	return l.attachPass(nodes)
}

// bridges makes a bridge br0 in every switch node with all its links as
// ports.
func (l *Lab) bridges(nodes map[string]*netlab.Node) error {
	for _, sw := range l.Topo.NodesByRole("switch") {
		h := nodes[sw.Name].Handle()
		// No multicast snooping: with no MLD querier on the segment a
		// snooping bridge may stop flooding the solicited-node multicast
		// that IPv6 neighbour solicitations are sent to (NDP for the
		// DMZ's IPv6 nat VIPs), where IPv4's broadcast ARP always floods.
		snoop := false
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: &snoop}
		if err := h.LinkAdd(br); err != nil {
			return fmt.Errorf("%s: add bridge: %w", sw.Name, err)
		}
		for _, lk := range l.Topo.links {
			dev := ""
			switch sw.Name {
			case lk.a:
				dev = lk.aDev
			case lk.b:
				dev = lk.bDev
			default:
				continue
			}
			port, err := h.LinkByName(dev)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", sw.Name, dev, err)
			}
			if err := h.LinkSetMaster(port, br); err != nil {
				return fmt.Errorf("%s: %s into br0: %w", sw.Name, dev, err)
			}
		}
		if err := h.LinkSetUp(br); err != nil {
			return fmt.Errorf("%s: br0 up: %w", sw.Name, err)
		}
	}
	return nil
}

// passRoles are the nodes whose interfaces get an XDP_PASS program: every
// node but the edges and hosts (whose daemons attach azgate's programs).
// A veth only kicks its peer's NAPI after XDP_TX when the peer has an XDP
// program (GRO alone delivers redirected frames but leaves XDP_TX'd ones
// in the ring until other traffic arrives): with it, the edge's and the
// agents' ICMP errors leave at once, as from a real NIC.
var passRoles = map[string]bool{"internet": true, "router": true, "underlay": true, "guest": true, "server": true, "switch": true}

func (l *Lab) passPinDir(node string) string {
	return dataplane.NodePinDir(l.Cfg.Prefix + "lab-" + node)
}

// PassPinDir is where the XDP_PASS link of a node's interfaces is pinned
// (swap the program with dataplane.AttachPinned on that directory).
func (l *Lab) PassPinDir(node string) string { return l.passPinDir(node) }

func (l *Lab) attachPass(nodes map[string]*netlab.Node) error {
	b, err := dataplane.LoadBench()
	if err != nil {
		return err
	}
	defer b.Close() // the pinned links keep the program
	for _, lk := range l.Topo.links {
		for _, e := range []struct{ node, dev string }{{lk.a, lk.aDev}, {lk.b, lk.bDev}} {
			n := l.Topo.Node(e.node)
			if !passRoles[n.Role] {
				continue
			}
			err := nodes[e.node].Do(func() error { return dataplane.AttachPinned(b.Pass(), e.dev, l.passPinDir(e.node)) })
			if err != nil {
				return fmt.Errorf("%s/%s: attach xdp_pass: %w", e.node, e.dev, err)
			}
		}
	}
	return nil
}

// underlay is the lab's underlay family (Config.Underlay, IPv4 if unset).
func (l *Lab) underlay() string {
	if l.Cfg.Underlay == "" {
		return UnderlayIPv4
	}
	return l.Cfg.Underlay
}

// Region is the declarative description of the lab region.
func (l *Lab) Region() *model.Document {
	d := &model.Document{}
	for az := 1; az <= l.Cfg.AZs; az++ {
		d.AZs = append(d.AZs, model.AZ{Name: fmt.Sprintf("az%d", az), Region: "lab"})
		for i := 1; i <= l.Cfg.HostsPerAZ; i++ {
			h := model.Host{Name: HostName(az, i), AZ: fmt.Sprintf("az%d", az), Underlay: HostUnderlayIn(l.underlay(), az, i)}
			for g := 1; g <= l.Cfg.GuestsPerHost; g++ {
				h.Guests = append(h.Guests, model.Guest{Name: fmt.Sprintf("g%d", g), Address: GuestAddr(az, i, g),
					Address6: GuestAddr6(az, i, g), VSID: GuestVSID(az, i, g)})
			}
			d.Hosts = append(d.Hosts, h)
		}
	}
	d.EdgeSets = EdgeSets()
	if l.underlay() != UnderlayIPv4 {
		for i := range d.EdgeSets {
			for j := range d.EdgeSets[i].Edges {
				e := &d.EdgeSets[i].Edges[j]
				e.Underlay6 = EdgeUnderlay6Of(e.Name)
			}
		}
	}
	for i := 7; i <= 9; i++ {
		d.EIPs = append(d.EIPs, model.EIP{Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})})
	}
	for _, a := range EIPs6 {
		d.EIPs = append(d.EIPs, model.EIP{Address: netip.MustParseAddr(a)})
	}
	return d
}

// start runs the azgate binary inside a node's namespace, detached, with
// its output in the lab's log directory.
func (l *Lab) start(n *Node, what string, args ...string) error {
	c, err := l.roleCommand(n.Name+"-"+what, args)
	if err != nil {
		return err
	}
	if err := checkConfig(n.Netns, c.Check); err != nil {
		return fmt.Errorf("%s on %s: %w", what, n.Name, err)
	}
	return l.startCmd(n, what, c.Start...)
}

// startCmd runs argv inside a node's namespace, detached, with its output
// in the lab's log directory, and records it as the node's process.
func (l *Lab) startCmd(n *Node, what string, argv ...string) error {
	p, err := l.spawn(n, what, argv...)
	if err != nil {
		return err
	}
	n.Process = p
	return nil
}

// spawn runs argv inside a node's namespace, detached (its own session),
// with its output appended to the lab's log of that node and role.
func (l *Lab) spawn(n *Node, what string, argv ...string) (*Proc, error) {
	logPath := filepath.Join(l.logDir(), n.Name+"-"+what+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := netns.Command(n.Netns, argv...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", what, n.Name, err)
	}
	go cmd.Wait() // reap; the lab tracks liveness by pid
	return &Proc{Cmd: strings.Join(argv[1:], " "), PID: cmd.Process.Pid, Log: logPath}, nil
}

func (l *Lab) startController(ctx context.Context) error {
	logPath := filepath.Join(l.logDir(), "controller.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	args := append(controllerArgs(l.dataDir(), l.apiSock()), l.Cfg.ControllerArgs...)
	if eps, external := l.etcdEndpoints(); external {
		args = append(args, "--etcd-endpoints", strings.Join(eps, ","), "--etcd-max-txn-ops", strconv.Itoa(etcdMaxTxnOps))
	}
	c, err := l.roleCommand("controller", args)
	if err != nil {
		return err
	}
	if err := checkConfig("", c.Check); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	cmd := exec.Command(c.Start[0], c.Start[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start controller: %w", err)
	}
	go cmd.Wait()
	if err := os.WriteFile(filepath.Join(l.Cfg.StateDir, "controller.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := l.Client(); err == nil {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = c.Status(sctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller did not answer within 60s (log: %s)", logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HealthCommand is the command the lab's edges list for command health
// checks: a TCP connect to the backend's check port, by a script in the
// state dir (a wrapper script is how a check with shell syntax is given).
const HealthCommand = "tcp-open"

const healthScript = `#!/bin/bash
# azgate lab: health command ` + HealthCommand + `: exit 0 if the backend accepts a TCP connection.
exec 3<>"/dev/tcp/$AZGATE_BACKEND_ADDR/$AZGATE_BACKEND_PORT"
`

func (l *Lab) startEdge(n *Node) error {
	dir, err := filepath.Abs(l.Cfg.StateDir)
	if err != nil {
		return err
	}
	script := filepath.Join(dir, "health-"+HealthCommand)
	if err := os.WriteFile(script, []byte(healthScript), 0o755); err != nil {
		return fmt.Errorf("lab: health command script: %w", err)
	}
	attach := []string{"--attach", "ext0,ul0"}
	if n.Set == PrefixSet {
		// On the DMZ segment: one member answers ARP for the VIPs and
		// the servers' gateway.
		attach = []string{"--attach", "ext0,ul0,dmz0", "--arp-iface", "dmz0", "--arp-gateway", DMZGateway, "--arp-gateway6", DMZGateway6}
	}
	args := append(append([]string{"edge", "--name", n.Name}, attach...), "--etcd-endpoints", l.roleEtcdFlag(n),
		"--pin-dir", l.pinDir(n.Name), "--icmp-rate", "1000", "--icmp-burst", "100",
		// ICMPv6 errors (time exceeded, packet too big) come from the
		// edge's own Internet-side IPv6 address, as the IPv4 ones do.
		"--icmp-source6", EdgeExt6Of(n.Name).String(),
		"--health-command", HealthCommand+"="+script, "--health-source", edgeHealth(edgeIndex(n.Name)).String(),
		"--health-source6", edgeHealth6(edgeIndex(n.Name)).String(),
		"--sync-listen", fmt.Sprintf(":%d", SyncPort), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", EdgeMetricsPort))
	return l.start(n, "edge", append(args, l.bwRoleArgs(n)...)...)
}

func (l *Lab) startAgent(n *Node) error {
	return l.start(n, "agent", append([]string{"agent", "--name", n.Name, "--underlay-if", "ul0", "--etcd-endpoints", l.roleEtcdFlag(n),
		// No --local-allow: a guest reaches nothing of its host, not the
		// host's listeners, not the other guests through the host's
		// kernel, not the underlay behind it (TestGuestIsolation).
		"--pin-dir", l.pinDir(n.Name), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", AgentMetricsPort)}, l.bwRoleArgs(n)...)...)
}

// StartServer starts the lab server of a guest or DMZ server.
func (l *Lab) StartServer(name string) error {
	n := l.Topo.Node(name)
	if n == nil || (n.Role != "guest" && n.Role != "server") {
		return fmt.Errorf("%q is not a guest or a server", name)
	}
	argv := []string{l.Cfg.LabBinary, "lab", "serve", "--name", n.Name}
	if len(n.Addresses6) > 0 {
		// Dual-stack guests and DMZ servers listen on both families (an
		// empty host is a dual-stack socket).
		argv = append(argv, "--http", fmt.Sprintf(":%d,:%d", ServePorts.HTTP, ServePorts.HTTPAlt), "--echo", fmt.Sprintf(":%d", ServePorts.Echo))
	}
	if err := l.startCmd(n, "serve", argv...); err != nil {
		return err
	}
	return l.save()
}

// StopServer stops a server: a backend dies (its connections close).
func (l *Lab) StopServer(name string) error {
	n := l.Topo.Node(name)
	if n == nil || n.Process == nil {
		return fmt.Errorf("no server on %q", name)
	}
	killWait(n.Process.PID, 10*time.Second)
	return nil
}

// RestartRole stops and starts the role process of a node (edge or agent),
// as an operator upgrading it would.
func (l *Lab) RestartRole(name string) error {
	n := l.Topo.Node(name)
	if n == nil || n.Process == nil {
		return fmt.Errorf("no role process on %q", name)
	}
	if err := StopRole(l, name); err != nil {
		return err
	}
	return l.StartRole(name)
}

// StopRole stops a node's role process (its data plane stays).
func StopRole(l *Lab, name string) error {
	n := l.Topo.Node(name)
	if n == nil || n.Process == nil {
		return fmt.Errorf("no role process on %q", name)
	}
	killWait(n.Process.PID, 10*time.Second)
	return nil
}

// StartRole starts a node's role process again.
func (l *Lab) StartRole(name string) error {
	n := l.Topo.Node(name)
	var err error
	switch n.Role {
	case "edge":
		err = l.startEdge(n)
	case "host":
		err = l.startAgent(n)
	default:
		return fmt.Errorf("%s runs no role", name)
	}
	if err != nil {
		return err
	}
	return l.save()
}

// waitNodes waits until every edge and agent reports a status.
func (l *Lab) waitNodes(ctx context.Context, timeout time.Duration) error {
	want := len(l.Topo.NodesByRole("edge")) + len(l.Topo.NodesByRole("host"))
	deadline := time.Now().Add(timeout)
	for {
		if l.countNodes(ctx) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d edges and agents reported within %v (logs in %s)", l.countNodes(ctx), want, timeout, l.logDir())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (l *Lab) save() error {
	b, err := json.MarshalIndent(l.Topo.Nodes, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.stateFile(), b, 0o600)
}

// Open attaches to a running lab.
func Open(cfg Config) (*Lab, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	l := &Lab{Cfg: cfg}
	l.API = "unix://" + l.apiSock()
	b, err := os.ReadFile(l.stateFile())
	if err != nil {
		return nil, fmt.Errorf("no lab is up (reading %s: %w); run `azgate-lab lab up`", l.stateFile(), err)
	}
	var nodes []*Node
	if err := json.Unmarshal(b, &nodes); err != nil {
		return nil, fmt.Errorf("%s: %w", l.stateFile(), err)
	}
	l.Cfg.Underlay = savedUnderlay(nodes)
	l.Topo = BuildUnderlay(cfg.Prefix, cfg.AZs, cfg.HostsPerAZ, cfg.GuestsPerHost, l.Cfg.Underlay)
	for _, n := range nodes {
		if t := l.Topo.Node(n.Name); t != nil {
			t.Process = n.Process
		}
	}
	l.loadBW()
	return l, nil
}

// savedUnderlay is the underlay family of a lab from its saved nodes: the
// hosts with an IPv6 underlay address have one on ul0.
func savedUnderlay(nodes []*Node) string {
	hosts, v6 := 0, 0
	for _, n := range nodes {
		if n.Role != "host" {
			continue
		}
		hosts++
		if n.Addresses6["ul0"] != "" {
			v6++
		}
	}
	switch {
	case v6 == 0:
		return UnderlayIPv4
	case v6 == hosts:
		return UnderlayIPv6
	}
	return UnderlayMixed
}

// Down removes every namespace, link, pinned program and process of the
// lab. It works on a partial lab and is safe to repeat.
func Down(cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	var errs []error
	names, _ := netns.List(cfg.Prefix)
	// Every process inside a lab namespace (roles, services, anything
	// started with lab exec) goes, then the controller.
	killInNamespaces(names)
	// The bandwidth managers outside the namespaces (those in an AZ's
	// went with it) by PID, while etcd is still up.
	if err := stopBWManagers(cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.StateDir, "controller.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isAzgate(pid) {
			killWait(pid, 10*time.Second)
		}
	}
	// The lab's Prometheus and its metrics proxy, by PID.
	if err := stopPrometheus(cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	// The bandwidth stores outside the namespaces by PID, and their
	// directories.
	if err := stopBWServers(cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	// The etcd members last: a role stopping revokes its status lease.
	if err := etcdproc.StopDir(filepath.Join(cfg.StateDir, "etcd")); err != nil {
		errs = append(errs, err)
	}
	pins, _ := filepath.Glob(filepath.Join(dataplane.BPFFS, "azgate", cfg.Prefix+"*"))
	for _, p := range pins {
		if err := dataplane.RemovePins(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range names {
		if err := netns.Delete(n); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.ContextFile != "" {
		os.Remove(cfg.ContextFile)
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func isAzgate(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "azgate")
}

// killInNamespaces kills every process whose network namespace is one of
// the named ones.
func killInNamespaces(names []string) {
	if len(names) == 0 {
		return
	}
	inodes := map[uint64]bool{}
	for _, n := range names {
		var st syscall.Stat_t
		if err := syscall.Stat(netns.Path(n), &st); err == nil {
			inodes[st.Ino] = true
		}
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err == nil && inodes[st.Ino] {
			pids = append(pids, pid)
		}
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(p) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is as good as gone.
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

func killWait(pid int, timeout time.Duration) {
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

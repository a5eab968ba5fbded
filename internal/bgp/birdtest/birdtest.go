// Package birdtest runs a real upstream router for BGP tests: Debian's
// BIRD 2 in a network namespace of its own, linked by veth to the
// namespace the test runs in, installing what it learns into its kernel
// table with ECMP (`merge paths on`), as the lab's router does. Tests read
// that table, which is what forwards the traffic, and `birdc show
// protocols`.
//
// Main runs a package's tests inside a fresh namespace, so the speakers
// the tests start dial from there and the host's namespace is never
// touched. BIRD is stopped through its PID file only.
package birdtest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
)

// envNS names the namespace Main moved the tests into.
const envNS = "AZGATE_BIRDTEST_NS"

// Main runs the tests (m.Run) inside a new network namespace named
// prefix+PID with only loopback up, and removes it afterwards; call it
// from TestMain. Without root it runs them in place (the tests that need
// namespaces skip themselves). Namespaces left by an earlier run that
// died (their PID is gone) are removed first.
func Main(m *testing.M, prefix string) {
	if os.Getenv(envNS) != "" || os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	removeStale(prefix)
	name := fmt.Sprintf("%s%d", prefix, os.Getpid())
	if err := netns.Create(name); err != nil {
		fmt.Fprintln(os.Stderr, "birdtest:", err)
		os.Exit(2)
	}
	code := 2
	if err := netns.Command(name, "ip", "link", "set", "lo", "up").Run(); err != nil {
		fmt.Fprintln(os.Stderr, "birdtest: lo up:", err)
	} else {
		self, _ := os.Executable()
		cmd := netns.Command(name, append([]string{self}, os.Args[1:]...)...)
		cmd.Env = append(os.Environ(), envNS+"="+name)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		// nsenter execs the test binary: it dies with us.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			fmt.Fprintln(os.Stderr, "birdtest:", err)
		}
	}
	if err := netns.Delete(name); err != nil {
		fmt.Fprintln(os.Stderr, "birdtest:", err)
	}
	os.Exit(code)
}

func removeStale(prefix string) {
	names, _ := netns.List(prefix)
	for _, n := range names {
		rest := strings.TrimPrefix(n, prefix)
		// "PID" (Main's) or "PID-..." (routers made by that run).
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		netns.Delete(n)
	}
}

// Self returns the namespace Main runs the tests in. It skips the test
// when not root, or when the package's TestMain does not call Main.
func Self(t testing.TB) *netlab.Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and a BIRD router")
	}
	name := os.Getenv(envNS)
	if name == "" {
		t.Skip("needs birdtest.Main in TestMain: the tests must run in a namespace of their own")
	}
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatal("bird not found: install Debian's bird2 (scripts/setup.sh does)")
	}
	n, err := netlab.OpenNode(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// Peer is one BGP session of the router.
type Peer struct {
	Name     string     // BIRD protocol name (letters, digits, _)
	Address  netip.Addr // the speaker's address
	ASN      uint32
	Password string // TCP MD5; empty: none
}

// Config is the router's BGP configuration.
type Config struct {
	ASN      uint32
	RouterID netip.Addr
	Peers    []Peer
	HoldTime int // seconds; 0: 3
	// Export, if set, are static routes the router sends every peer
	// (tests of a speaker that must reject what it learns); none: the
	// router exports nothing.
	Export []netip.Prefix
	// IPv6 adds the IPv6 unicast channel to every session (MP-BGP over
	// the IPv4 sessions) and installs the IPv6 routes learnt, merged
	// into multipath routes, in the kernel as well.
	IPv6 bool
}

// Router is BIRD in a namespace of its own.
type Router struct {
	Node *netlab.Node
	dir  string
	conf string
	sock string
	pid  string
	cfg  Config
	// links are the test namespace's ends of the router's veths, deleted
	// first: a namespace's devices go only when the kernel gets round to
	// destroying it, and the next test would find the name taken.
	links []string
}

// New creates the router's namespace, named after Main's (tests of one
// run share the prefix) plus suffix. It goes when the test ends.
func New(t testing.TB, suffix string) *Router {
	t.Helper()
	self := Self(t)
	name := self.Name + "-" + suffix
	n, err := netlab.NewNode(name)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "azbird")
	if err != nil {
		n.Delete()
		t.Fatal(err)
	}
	r := &Router{Node: n, dir: dir, conf: filepath.Join(dir, "bird.conf"), sock: filepath.Join(dir, "bird.ctl"), pid: filepath.Join(dir, "bird.pid")}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "bird.log")); err == nil {
				t.Logf("bird.log:\n%s", b)
			}
		}
		self := Self(t)
		for _, dev := range r.links {
			if l, err := self.Handle().LinkByName(dev); err == nil {
				if err := self.Handle().LinkDel(l); err != nil {
					t.Error(err)
				}
			}
		}
		if err := n.Delete(); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	return r
}

// Link connects the router to the test's namespace with a veth pair
// (routerDev in the router, localDev in the test's namespace) and puts
// routerAddr on the router's end and localAddrs on the other.
func (r *Router) Link(t testing.TB, routerDev, localDev string, routerAddr netip.Prefix, localAddrs ...netip.Prefix) {
	t.Helper()
	self := Self(t)
	if err := netlab.Veth(netlab.End{Node: r.Node, Dev: routerDev}, netlab.End{Node: self, Dev: localDev}, 0); err != nil {
		t.Fatal(err)
	}
	r.links = append(r.links, localDev)
	if err := addAddr(r.Node, routerDev, routerAddr); err != nil {
		t.Fatal(err)
	}
	for _, a := range localAddrs {
		if err := addAddr(self, localDev, a); err != nil {
			t.Fatal(err)
		}
	}
}

// AddAddrs puts more addresses on the router's end of a link (its IPv6
// address on a segment, say).
func (r *Router) AddAddrs(t testing.TB, routerDev string, addrs ...netip.Prefix) {
	t.Helper()
	for _, a := range addrs {
		if err := addAddr(r.Node, routerDev, a); err != nil {
			t.Fatal(err)
		}
	}
}

// addAddr adds an address; an IPv6 one without duplicate address
// detection, so it is usable at once rather than tentative for a second.
func addAddr(n *netlab.Node, dev string, p netip.Prefix) error {
	if p.Addr().Is4() {
		return n.Addr(dev, p.String())
	}
	l, err := n.Handle().LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", n.Name, dev, err)
	}
	a, err := netlink.ParseAddr(p.String())
	if err != nil {
		return err
	}
	a.Flags = unix.IFA_F_NODAD
	if err := n.Handle().AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s/%s: add %v: %w", n.Name, dev, p, err)
	}
	return nil
}

// Start writes the configuration and starts BIRD in the namespace.
func (r *Router) Start(t testing.TB, cfg Config) {
	t.Helper()
	if err := r.write(cfg); err != nil {
		t.Fatal(err)
	}
	out, err := r.Node.Cmd("bird", "-c", r.conf, "-s", r.sock, "-P", r.pid).CombinedOutput()
	if err != nil {
		t.Fatalf("bird: %v: %s", err, out)
	}
	// bird forks; the PID file appears once the daemon runs.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.daemonPID(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("bird did not write its PID file")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Reconfigure rewrites the configuration and has BIRD apply it.
func (r *Router) Reconfigure(t testing.TB, cfg Config) {
	t.Helper()
	if err := r.write(cfg); err != nil {
		t.Fatal(err)
	}
	out, err := r.birdc("configure")
	if err != nil || !strings.Contains(out, "Reconfigured") {
		t.Fatalf("birdc configure: %v: %s", err, out)
	}
}

func (r *Router) write(cfg Config) error {
	if cfg.HoldTime == 0 {
		cfg.HoldTime = 3
	}
	r.cfg = cfg
	return os.WriteFile(r.conf, []byte(cfg.Render(filepath.Join(r.dir, "bird.log"))), 0o600)
}

// Render returns the BIRD 2 configuration: one passive eBGP session per
// peer importing everything and exporting nothing (or cfg.Export), and a kernel protocol
// that installs what is learnt, equal routes from several peers merged
// into one multipath route (`merge paths on`). logFile "" logs to syslog.
func (cfg Config) Render(logFile string) string {
	hold := cfg.HoldTime
	if hold == 0 {
		hold = 3
	}
	var b strings.Builder
	if logFile != "" {
		fmt.Fprintf(&b, "log %q all;\n", logFile)
	}
	fmt.Fprintf(&b, "router id %v;\n", cfg.RouterID)
	b.WriteString("protocol device { scan time 1; }\n")
	b.WriteString("protocol kernel { ipv4 { import none; export all; }; merge paths on; }\n")
	if cfg.IPv6 {
		b.WriteString("protocol kernel { ipv6 { import none; export all; }; merge paths on; }\n")
	}
	export := "none"
	if len(cfg.Export) > 0 {
		b.WriteString("protocol static learnt_routes { ipv4;\n")
		for _, p := range cfg.Export {
			fmt.Fprintf(&b, "\troute %v blackhole;\n", p)
		}
		b.WriteString("}\n")
		export = "where proto = \"learnt_routes\""
	}
	for _, p := range cfg.Peers {
		fmt.Fprintf(&b, "protocol bgp %s {\n\tlocal as %d;\n\tneighbor %v as %d;\n", p.Name, cfg.ASN, p.Address, p.ASN)
		// The speakers dial; they do not listen.
		fmt.Fprintf(&b, "\tpassive on;\n\thold time %d;\n\tconnect retry time 1;\n\terror wait time 1, 2;\n", hold)
		if p.Password != "" {
			fmt.Fprintf(&b, "\tpassword %q;\n", p.Password)
		}
		fmt.Fprintf(&b, "\tipv4 { import all; export %s; };\n", export)
		if cfg.IPv6 {
			b.WriteString("\tipv6 { import all; export none; };\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func (r *Router) birdc(args ...string) (string, error) {
	out, err := exec.Command("birdc", append([]string{"-s", r.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// Protocols is `birdc show protocols`.
func (r *Router) Protocols() (string, error) { return r.birdc("show", "protocols") }

// State is the state column of one BGP protocol in `show protocols`
// ("up" when established) and its info ("Established", "Active", ...).
func (r *Router) State(name string) (state, info string, err error) {
	out, err := r.Protocols()
	if err != nil {
		return "", "", fmt.Errorf("birdc: %w: %s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		// name proto table state since... info
		if len(f) >= 4 && f[0] == name {
			info := ""
			if len(f) >= 6 {
				info = f[len(f)-1]
			}
			return f[3], info, nil
		}
	}
	return "", "", fmt.Errorf("no protocol %s in:\n%s", name, out)
}

// WaitEstablished waits until the named session is established.
func (r *Router) WaitEstablished(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, info, err := r.State(name)
		if err == nil && info == "Established" {
			return
		}
		if time.Now().After(deadline) {
			out, _ := r.Protocols()
			t.Fatalf("session %s not established after %v (%v):\n%s", name, timeout, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NextHops returns the next hops of the router's kernel route to exactly
// prefix (sorted; none when there is no such route).
func (r *Router) NextHops(prefix netip.Prefix) ([]netip.Addr, error) {
	_, ipn, err := net.ParseCIDR(prefix.String())
	if err != nil {
		return nil, err
	}
	family := netlink.FAMILY_V4
	if prefix.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	rs, err := r.Node.Handle().RouteListFiltered(family, &netlink.Route{Dst: ipn}, netlink.RT_FILTER_DST)
	if err != nil {
		return nil, fmt.Errorf("%s: routes: %w", r.Node.Name, err)
	}
	var out []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	for _, rt := range rs {
		if rt.Dst == nil || rt.Dst.String() != prefix.String() {
			continue
		}
		for _, nh := range rt.MultiPath {
			add(nh.Gw)
		}
		if rt.Gw != nil {
			add(rt.Gw)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// WaitNextHops waits until the route to prefix has exactly want as next
// hops (none: no route) and returns how long that took.
func (r *Router) WaitNextHops(t testing.TB, prefix netip.Prefix, want []netip.Addr, timeout time.Duration) time.Duration {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	start := time.Now()
	for {
		got, err := r.NextHops(prefix)
		if err == nil && slices.Equal(got, want) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			out, _ := r.Protocols()
			t.Fatalf("route %v: next hops %v (%v), want %v after %v\n%s\n%s", prefix, got, err, want, timeout, r.IPRoute(), out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// IPRoute is `ip -4 route show` in the router (and `ip -6 route show`
// with Config.IPv6), for failure messages.
func (r *Router) IPRoute() string {
	out, err := r.Node.Cmd("ip", "-4", "route", "show").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("ip route: %v: %s", err, out)
	}
	if r.cfg.IPv6 {
		out6, err := r.Node.Cmd("ip", "-6", "route", "show").CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%sip -6 route: %v: %s", out, err, out6)
		}
		out = append(out, out6...)
	}
	return string(out)
}

// Routes is `birdc show route` (all tables), for failure messages and
// checks of what BIRD learnt.
func (r *Router) Routes() (string, error) { return r.birdc("show", "route", "all") }

func (r *Router) daemonPID() (int, error) {
	b, err := os.ReadFile(r.pid)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bird PID file %s: %q", r.pid, b)
	}
	return pid, nil
}

// Stop stops BIRD by the PID in its PID file (after checking that the
// process is the bird started with this configuration).
func (r *Router) Stop() error {
	pid, err := r.daemonPID()
	if err != nil {
		return nil // never started
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), r.conf) {
		return nil // gone already
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("bird %d: %w", pid, err)
	}
	for range 250 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			os.Remove(r.pid)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("bird %d did not stop on SIGTERM within 5 s", pid)
}

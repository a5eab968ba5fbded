package nexthop

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/netlab"
)

// TestResolverMultipath: every next hop of a multipath route toward a kept
// address is kept resolved (a managed neighbour), not only the one a route
// lookup of the address alone picks: flows spread over all of them.
func TestResolverMultipath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, err := netlab.NewNode("azgt-mp-n")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Delete()
	p, err := netlab.NewNode("azgt-mp-p")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Delete()
	if err := netlab.Veth(netlab.End{Node: n, Dev: "ul0", MAC: "02:bb:00:00:00:01"}, netlab.End{Node: p, Dev: "fab", MAC: "02:bb:00:00:00:02"}, 1500); err != nil {
		t.Fatal(err)
	}
	if err := n.Addr("ul0", "198.18.0.1/24"); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Cmd("ip", "route", "add", "198.19.100.0/24", "nexthop", "via", "198.18.0.254", "dev", "ul0",
		"nexthop", "via", "198.18.0.252", "dev", "ul0").CombinedOutput(); err != nil {
		t.Fatalf("multipath route: %v: %s", err, out)
	}
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var managed map[netip.Addr]bool
	if err := n.Do(func() error {
		r.Keep("hosts", []netip.Addr{netip.MustParseAddr("198.19.100.7")})
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName("ul0")
		if err != nil {
			return err
		}
		managed = managedNeighs(h, l.Attrs().Index, false)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, gw := range []string{"198.18.0.254", "198.18.0.252"} {
		if !managed[netip.MustParseAddr(gw)] {
			t.Errorf("next hop %s not kept resolved: managed %v", gw, managed)
		}
	}
}

// TestResolverAdd: Add resolves the next hops of addresses new to the
// resolver at once (on-link hosts: each its own neighbour; a routed one:
// its gateway) and keeps them with the group's others.
func TestResolverAdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, kept := addLab(t, "azgt-add")
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	h1, h2, h3 := netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.6"), netip.MustParseAddr("198.19.1.1")
	gw := netip.MustParseAddr("198.18.0.254")
	if err := n.Do(func() error {
		r.Keep("hosts", []netip.Addr{h1})
		r.Add("hosts", []netip.Addr{h1, h2, h3})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	managed := kept()
	for _, a := range []netip.Addr{h1, h2, gw} {
		if !managed[a] {
			t.Errorf("next hop %v not kept resolved: managed %v", a, managed)
		}
	}
	if got := r.groups["hosts"]; len(got) != 3 {
		t.Errorf("group after Add %v, want every host once", got)
	}
}

// addLab makes a node with ul0 on 198.18.0.0/24 and 198.19.0.0/16 routed
// via 198.18.0.254, and returns a handle's view of ul0's kept neighbours.
func addLab(t *testing.T, prefix string) (*netlab.Node, func() map[netip.Addr]bool) {
	t.Helper()
	n, err := netlab.NewNode(prefix + "-n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Delete() })
	p, err := netlab.NewNode(prefix + "-p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Delete() })
	if err := netlab.Veth(netlab.End{Node: n, Dev: "ul0", MAC: "02:bb:00:00:02:01"}, netlab.End{Node: p, Dev: "fab", MAC: "02:bb:00:00:02:02"}, 1500); err != nil {
		t.Fatal(err)
	}
	if err := n.Addr("ul0", "198.18.0.1/24"); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Cmd("ip", "route", "add", "198.19.0.0/16", "via", "198.18.0.254", "dev", "ul0").CombinedOutput(); err != nil {
		t.Fatalf("route: %v: %s", err, out)
	}
	managed := func() map[netip.Addr]bool {
		var m map[netip.Addr]bool
		if err := n.Do(func() error {
			h, err := netlink.NewHandle()
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := h.LinkByName("ul0")
			if err != nil {
				return err
			}
			m = managedNeighs(h, l.Attrs().Index, false)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	return n, managed
}

// TestResolverAddRechecks: Add reads a new address's next hop from the
// kernel, not from what an earlier pass saw: a next hop whose entry was
// deleted since is managed again at once, and a permanent entry is left
// permanent.
func TestResolverAddRechecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, managed := addLab(t, "azgt-addk")
	if out, err := n.Cmd("ip", "neigh", "replace", "198.18.0.9", "lladdr", "02:bb:00:00:02:09", "nud", "permanent", "dev", "ul0").CombinedOutput(); err != nil {
		t.Fatalf("permanent neighbour: %v: %s", err, out)
	}
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	gw, perm := netip.MustParseAddr("198.18.0.254"), netip.MustParseAddr("198.18.0.9")
	if err := n.Do(func() error {
		r.Keep("hosts", []netip.Addr{netip.MustParseAddr("198.19.1.1")})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !managed()[gw] {
		t.Fatalf("gateway %v not kept resolved after Keep", gw)
	}
	if out, err := n.Cmd("ip", "neigh", "del", gw.String(), "dev", "ul0").CombinedOutput(); err != nil {
		t.Fatalf("delete neighbour: %v: %s", err, out)
	}
	if managed()[gw] {
		t.Fatalf("gateway %v still managed after its entry was deleted", gw)
	}
	if err := n.Do(func() error {
		r.Add("hosts", []netip.Addr{netip.MustParseAddr("198.19.2.2"), perm})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !managed()[gw] {
		t.Errorf("gateway %v not managed again by Add after its entry was deleted", gw)
	}
	out, err := n.Cmd("ip", "neigh", "show", perm.String(), "dev", "ul0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PERMANENT") {
		t.Errorf("permanent neighbour %v after Add: %q %v", perm, out, err)
	}
}

// TestResolverAddDuringPass: Add does not wait for a full pass (Keep) in
// progress: the pass is held in its middle until Add has returned and
// its new host is resolved. Before the resolver left its lock out of the
// netlink work, Add waited for the pass and never returned here.
func TestResolverAddDuringPass(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, managed := addLab(t, "azgt-addp")
	entered, release := make(chan struct{}), make(chan struct{})
	ensureHook = func() {
		close(entered)
		<-release
	}
	t.Cleanup(func() { ensureHook = nil })
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var hosts []netip.Addr
	for i := 10; i < 60; i++ {
		hosts = append(hosts, netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}))
	}
	kept := make(chan error, 1)
	go func() {
		kept <- n.Do(func() error { r.Keep("hosts", hosts); return nil })
	}()
	<-entered
	added := make(chan error, 1)
	h2 := netip.MustParseAddr("198.18.0.6")
	go func() {
		added <- n.Do(func() error { r.Add("hosts", []netip.Addr{h2}); return nil })
	}()
	select {
	case err := <-added:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Add still waiting for the pass in progress after 10s")
	}
	if m := managed(); !m[h2] {
		t.Errorf("host %v added during a pass not kept resolved: managed %v", h2, m)
	} else if m[hosts[0]] {
		t.Errorf("the held pass already resolved %v", hosts[0])
	}
	close(release)
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	m := managed()
	for _, a := range hosts {
		if !m[a] {
			t.Errorf("host %v of the pass not kept resolved", a)
		}
	}
	if got := r.groups["hosts"]; len(got) != len(hosts)+1 || !slices.Contains(got, h2) {
		t.Errorf("group %v, want Keep's %d hosts and the one added after", got, len(hosts))
	}
}

// TestResolverIPv6: IPv6 next hops are kept resolved as IPv4's are (the
// edge's IPv6 return path and the agent's IPv6 guests look them up with
// bpf_fib_lookup too): a routed address's gateway, an on-link address,
// every path of a multipath route, a link-local gateway given with its
// zone (the edge's IPv6 default gateway); a permanent entry is left as it
// is.
func TestResolverIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, err := netlab.NewNode("azgt-v6r-n")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Delete()
	p, err := netlab.NewNode("azgt-v6r-p")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Delete()
	if err := netlab.Veth(netlab.End{Node: n, Dev: "ul0", MAC: "02:bb:00:00:03:01"}, netlab.End{Node: p, Dev: "fab", MAC: "02:bb:00:00:03:02"}, 1500); err != nil {
		t.Fatal(err)
	}
	if err := n.IPv6(false); err != nil {
		t.Fatal(err)
	}
	if err := n.Addr("ul0", "2001:db8:ff::1/64"); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"ip", "-6", "route", "add", "2001:db8:a::/48", "via", "2001:db8:ff::fe", "dev", "ul0"},
		{"ip", "-6", "route", "add", "2001:db8:b::/48", "nexthop", "via", "2001:db8:ff::fd", "dev", "ul0",
			"nexthop", "via", "2001:db8:ff::fc", "dev", "ul0"},
		{"ip", "-6", "route", "add", "2001:db8:c::/48", "via", "2001:db8:ff::fb", "dev", "ul0"},
		{"ip", "-6", "neigh", "replace", "2001:db8:ff::fb", "lladdr", "02:bb:00:00:03:fb", "dev", "ul0", "nud", "permanent"},
	} {
		if out, err := n.Cmd(argv...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var managed map[netip.Addr]bool
	var perm netlink.Neigh
	if err := n.Do(func() error {
		r.Keep("hosts", []netip.Addr{netip.MustParseAddr("2001:db8:a::7"), netip.MustParseAddr("2001:db8:b::7"),
			netip.MustParseAddr("2001:db8:c::7"), netip.MustParseAddr("2001:db8:ff::5"), netip.MustParseAddr("fe80::1%ul0")})
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName("ul0")
		if err != nil {
			return err
		}
		managed = managedNeighs(h, l.Attrs().Index, true)
		ns, err := h.NeighList(l.Attrs().Index, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, x := range ns {
			if x.IP.Equal(netip.MustParseAddr("2001:db8:ff::fb").AsSlice()) {
				perm = x
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, nh := range []string{"2001:db8:ff::fe", "2001:db8:ff::fd", "2001:db8:ff::fc", "2001:db8:ff::5", "fe80::1"} {
		if !managed[netip.MustParseAddr(nh)] {
			t.Errorf("next hop %s not kept resolved: kept %v", nh, managed)
		}
	}
	if perm.State&netlink.NUD_PERMANENT == 0 || perm.FlagsExt&netlink.NTF_EXT_MANAGED != 0 {
		t.Errorf("the permanent neighbour 2001:db8:ff::fb was changed: state %#x flags_ext %#x", perm.State, perm.FlagsExt)
	}
}

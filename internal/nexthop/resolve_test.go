package nexthop

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"

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
		managed = managedNeighs(h, l.Attrs().Index)
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
	n, err := netlab.NewNode("azgt-add-n")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Delete()
	p, err := netlab.NewNode("azgt-add-p")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Delete()
	if err := netlab.Veth(netlab.End{Node: n, Dev: "ul0", MAC: "02:bb:00:00:01:01"}, netlab.End{Node: p, Dev: "fab", MAC: "02:bb:00:00:01:02"}, 1500); err != nil {
		t.Fatal(err)
	}
	if err := n.Addr("ul0", "198.18.0.1/24"); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Cmd("ip", "route", "add", "198.19.0.0/16", "via", "198.18.0.254", "dev", "ul0").CombinedOutput(); err != nil {
		t.Fatalf("route: %v: %s", err, out)
	}
	r := NewResolver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	h1, h2, h3 := netip.MustParseAddr("198.18.0.5"), netip.MustParseAddr("198.18.0.6"), netip.MustParseAddr("198.19.1.1")
	gw := netip.MustParseAddr("198.18.0.254")
	var managed map[netip.Addr]bool
	if err := n.Do(func() error {
		r.Keep("hosts", []netip.Addr{h1})
		r.Add("hosts", []netip.Addr{h1, h2, h3})
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName("ul0")
		if err != nil {
			return err
		}
		managed = managedNeighs(h, l.Attrs().Index)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{h1, h2, gw} {
		if !managed[a] {
			t.Errorf("next hop %v not kept resolved: managed %v", a, managed)
		}
	}
	if got := r.groups["hosts"]; len(got) != 3 {
		t.Errorf("group after Add %v, want every host once", got)
	}
}

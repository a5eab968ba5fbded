package edge

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
)

// TestRPFilterOnlyUnderlay: in a namespace of its own with an
// Internet-facing interface and an underlay one, both with strict
// rp_filter, setting up the health-check device and configuring the edge
// (the daemon's order) leaves the Internet side strict and makes only the
// underlay interface loose; when the underlay address moves to the other
// interface, the one it left is strict again.
func TestRPFilterOnlyUnderlay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, sysctls)")
	}
	ns := fmt.Sprintf("azgt-rpf-%d", os.Getpid())
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	rp := func(ifname string) string {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + ifname + "/rp_filter")
		if err != nil {
			t.Errorf("rp_filter of %s: %v", ifname, err)
		}
		return strings.TrimSpace(string(b))
	}
	err := netns.Do(ns, func() error {
		for _, name := range []string{"ext0", "ul0"} {
			// A veth pair (the lab's kind of link; dummy may be missing).
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1500}, PeerName: name + "p"}); err != nil {
				return fmt.Errorf("veth %s: %w", name, err)
			}
			for _, n := range []string{name, name + "p"} {
				l, _ := netlink.LinkByName(n)
				if err := netlink.LinkSetUp(l); err != nil {
					return err
				}
			}
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+name+"/rp_filter", []byte("1"), 0o644); err != nil {
				return err
			}
		}
		ext, _ := netlink.LinkByName("ext0")
		ul, _ := netlink.LinkByName("ul0")
		addr := func(l netlink.Link, a string) error {
			return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(24, 32)}})
		}
		if err := addr(ext, "203.0.113.1"); err != nil {
			return err
		}
		if err := addr(ul, "198.18.0.1"); err != nil {
			return err
		}
		if err := setupHealthDevice(a("198.18.255.1"), []string{"ext0", "ul0"}, quiet); err != nil {
			return err
		}
		if got := rp("ext0") + rp("ul0"); got != "11" {
			t.Errorf("after the health device's setup: rp_filter ext0, ul0 = %s, want 1, 1 (nothing loose before the underlay is known)", got)
		}
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: "edge-a1", Log: quiet, IfindexOf: ifindexOf}, fake)
		r.OnUnderlay = underlayRPFilter(quiet)
		load(t, r, 10, region()...) // edge-a1's underlay is 198.18.0.1
		if fake.Config.UnderlayIfindex != uint32(ul.Attrs().Index) {
			t.Errorf("underlay ifindex %d, want ul0's %d", fake.Config.UnderlayIfindex, ul.Attrs().Index)
		}
		if got := rp("ext0") + rp("ul0"); got != "12" {
			t.Errorf("edge configured: rp_filter ext0, ul0 = %s, want 1 (strict) on the Internet side, 2 (loose) on the underlay", got)
		}
		// The underlay moves to ext0.
		if err := addr(ext, "198.18.1.1"); err != nil {
			return err
		}
		objs := region()
		objs[4].(*model.EdgeSet).Edges[0].Underlay = a("198.18.1.1")
		watched(t, r, 11, objs[4])
		if got := rp("ext0") + rp("ul0"); got != "21" {
			t.Errorf("underlay moved to ext0: rp_filter ext0, ul0 = %s, want 2, 1", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

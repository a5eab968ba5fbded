package edge

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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
		if err := setupHealthDevice(a("198.18.255.1"), a("2001:db8:ffff::1"), []string{"ext0", "ul0"}, quiet); err != nil {
			return err
		}
		checkHealthDevice6(t, "2001:db8:ffff::1")
		// Set up again (a restart) with another IPv6 address: one rule.
		if err := setupHealthDevice(a("198.18.255.1"), a("2001:db8:ffff::2"), []string{"ext0", "ul0"}, quiet); err != nil {
			return err
		}
		checkHealthDevice6(t, "2001:db8:ffff::2")
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

// checkHealthDevice6 checks the IPv6 half of the health-check device's
// setup for address src6: on the device, usable at once (no DAD: not
// tentative), no link-local address beside it; "from src6 lookup
// HCTable" the only IPv6 rule of the table, whose default route is the
// device.
func checkHealthDevice6(t *testing.T, src6 string) {
	t.Helper()
	dev, err := netlink.LinkByName(HCDevice)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(dev, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	have := false
	for _, ad := range addrs {
		switch {
		case ad.IP.Equal(net.ParseIP(src6)):
			have = true
			if ad.Flags&unix.IFA_F_TENTATIVE != 0 {
				t.Errorf("%s on %s is tentative (DAD)", src6, HCDevice)
			}
		case ad.IP.IsLinkLocalUnicast():
			t.Errorf("%s has a link-local address %v", HCDevice, ad.IP)
		}
	}
	if !have {
		t.Errorf("%s not on %s: %v", src6, HCDevice, addrs)
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, ru := range rules {
		if ru.Table == HCTable {
			ours = append(ours, fmt.Sprint(ru.Src))
		}
	}
	if len(ours) != 1 || ours[0] != src6+"/128" {
		t.Errorf("IPv6 rules of table %d: %v, want only from %s/128", HCTable, ours, src6)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: HCTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 || routes[0].LinkIndex != dev.Attrs().Index || (routes[0].Dst != nil && routes[0].Dst.String() != "::/0") {
		t.Errorf("IPv6 routes of table %d: %+v, want the default via %s", HCTable, routes, HCDevice)
	}
}

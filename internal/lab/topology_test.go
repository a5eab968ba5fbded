package lab

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// The guests are dual-stack: each guest link a /64 of 2001:db8:f0::/48
// (the host ::1, the guest ::2 and its IPv6 default route via the host);
// az2-h1 reuses az1-h1's addresses as it does for IPv4.
func TestGuestAddresses6(t *testing.T) {
	if got := GuestAddr6(1, 1, 1).String(); got != "2001:db8:f0:1101::2" {
		t.Fatalf("az1-h1/g1 address6 %s", got)
	}
	if got := GuestGateway6(3, 2, 2).String(); got != "2001:db8:f0:3202::1" {
		t.Fatalf("az3-h2/g2 gateway %s", got)
	}
	if GuestAddr6(2, 1, 1) != GuestAddr6(1, 1, 1) {
		t.Fatal("az2-h1's guests do not share az1-h1's IPv6 addresses as they share the IPv4 ones")
	}
	topo := Build("x-", 3, 2, 2)
	guests6 := netip.MustParsePrefix("2001:db8:f0::/48")
	seen := map[string]map[netip.Addr]string{} // host -> address -> guest
	for _, n := range topo.NodesByRole("guest") {
		p, err := netip.ParsePrefix(n.Addresses6["eth0"])
		if err != nil || p.Bits() != 64 || !guests6.Contains(p.Addr()) {
			t.Fatalf("%s: IPv6 address %q", n.Name, n.Addresses6["eth0"])
		}
		if seen[n.Host] == nil {
			seen[n.Host] = map[netip.Addr]string{}
		}
		if o, dup := seen[n.Host][p.Addr()]; dup {
			t.Fatalf("%s and %s share %v on %s", n.Name, o, p.Addr(), n.Host)
		}
		seen[n.Host][p.Addr()] = n.Name
		g := strings.TrimPrefix(n.Name, n.Host+"-")
		gw, err := netip.ParsePrefix(topo.Node(n.Host).Addresses6[g])
		if err != nil || gw.Masked() != p.Masked() || gw.Addr() == p.Addr() {
			t.Fatalf("%s: host side %q beside %v", n.Name, topo.Node(n.Host).Addresses6[g], p)
		}
		var def bool
		for _, r := range topo.routes {
			if r.node == n.Name && r.dst == "::/0" && r.gw == gw.Addr().String() && r.dev == "eth0" {
				def = true
			}
		}
		if !def {
			t.Fatalf("%s: no IPv6 default route via %v", n.Name, gw.Addr())
		}
	}
	if len(seen) != 6 {
		t.Fatalf("guests on %d hosts, want 6", len(seen))
	}
}

// The lab's region as the controller takes it: every guest with its
// address6, the IPv6 EIPs beside the IPv4 ones, all accepted by the
// model; an IPv6 EIP binds to a guest on any host.
func TestRegionDualStack(t *testing.T) {
	l := &Lab{Cfg: Config{AZs: 3, HostsPerAZ: 2, GuestsPerHost: 2}}
	d := l.Region()
	st := model.NewState()
	for _, o := range d.Objects() {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("%T %s: %v", o, o.Key(), err)
		}
	}
	var v6 []netip.Addr
	for _, e := range d.EIPs {
		if e.Address.Is6() {
			v6 = append(v6, e.Address)
			if !netip.MustParsePrefix(EIPPrefix6).Contains(e.Address) {
				t.Fatalf("IPv6 EIP %v outside %s", e.Address, EIPPrefix6)
			}
		}
	}
	if len(v6) != len(EIPs6) || len(d.EIPs) != 3+len(EIPs6) {
		t.Fatalf("EIPs %v", d.EIPs)
	}
	for _, h := range d.Hosts {
		for _, g := range h.Guests {
			if !g.Address6.IsValid() {
				t.Fatalf("%s/%s has no address6", h.Name, g.Name)
			}
		}
	}
	for _, to := range []model.Binding{{Host: "az1-h1", Guest: "g1"}, {Host: "az3-h1", Guest: "g1"}} {
		if _, err := st.Put(&model.EIP{Address: v6[0], Binding: &to}); err != nil {
			t.Fatalf("bind %v to %+v: %v", v6[0], to, err)
		}
	}
}

// `lab status` lists the EIPs IPv4 first, then IPv6, and counts what is
// past its limit by family.
func TestEIPLines(t *testing.T) {
	es := []model.EIP{
		{Address: netip.MustParseAddr("2001:db8:e1::8")},
		{Address: netip.MustParseAddr("2001:db8:e1::7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		{Address: netip.MustParseAddr("198.51.100.9")},
		{Address: netip.MustParseAddr("198.51.100.7"), Binding: &model.Binding{Host: "az3-h1", Guest: "g2"}, Set: "dedicated"},
	}
	got := strings.Join(EIPLines(es, 16), "\n")
	want := "198.51.100.7 (IPv4) -> az3-h1/g2, set dedicated\n198.51.100.9 (IPv4) unbound\n2001:db8:e1::7 (IPv6) -> az1-h1/g1\n2001:db8:e1::8 (IPv6) unbound"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := EIPLines(es, 1); len(got) != 2 || got[1] != "... 3 more (1 IPv4, 2 IPv6)" {
		t.Fatalf("limited: %q", got)
	}
}

// lab up --underlay mixed: az2's hosts are on the IPv6 underlay only (no
// IPv4 address on ul0, an IPv6 default route via fab, a 1,520-byte link),
// the others on IPv4 only, and every edge is dual-stack on the underlay;
// savedUnderlay gives the family back from the saved nodes.
func TestTopologyUnderlay6(t *testing.T) {
	if err := ValidUnderlay("ipv5"); err == nil || !strings.Contains(err.Error(), "--underlay \"ipv5\"") {
		t.Fatalf("ValidUnderlay(ipv5) = %v", err)
	}
	topo := BuildUnderlay("x-", 3, 2, 2, UnderlayMixed)
	net6 := netip.MustParsePrefix(Underlay6Net)
	seen := map[netip.Addr]string{}
	mtu := map[string]int{}
	for _, lk := range topo.links {
		if lk.a == "fab" {
			mtu[lk.b] = lk.mtu
		}
		if lk.b == "fab" {
			mtu[lk.a] = lk.mtu
		}
	}
	for _, n := range append(topo.NodesByRole("host"), topo.NodesByRole("edge")...) {
		want6 := n.Role == "edge" || n.AZ == "az2"
		p6, err := netip.ParsePrefix(n.Addresses6["ul0"])
		if want6 != (err == nil) {
			t.Fatalf("%s: ul0 IPv6 %q, want one: %v", n.Name, n.Addresses6["ul0"], want6)
		}
		if want6 {
			if !net6.Contains(p6.Addr()) || seen[p6.Addr()] != "" {
				t.Fatalf("%s: ul0 %v (outside %s or also %s's)", n.Name, p6, net6, seen[p6.Addr()])
			}
			seen[p6.Addr()] = n.Name
			if mtu[n.Name] != Underlay6MTU {
				t.Fatalf("%s: underlay MTU %d, want %d", n.Name, mtu[n.Name], Underlay6MTU)
			}
		}
		if has4 := n.Addresses["ul0"] != ""; has4 != (n.Role == "edge" || n.AZ != "az2") {
			t.Fatalf("%s: ul0 IPv4 %q", n.Name, n.Addresses["ul0"])
		}
	}
	if HostUnderlayIn(UnderlayMixed, 2, 1) != HostUnderlay6(2, 1) || HostUnderlayIn(UnderlayMixed, 1, 1) != HostUnderlay(1, 1) ||
		HostUnderlay6(2, 1).String() != "2001:db8:18:21::2" || EdgeUnderlay6Of(Edges[0].Name).String() != "2001:db8:18:100::2" {
		t.Fatalf("addresses: %v %v %v", HostUnderlayIn(UnderlayMixed, 2, 1), HostUnderlay6(2, 1), EdgeUnderlay6Of(Edges[0].Name))
	}
	for u, want := range map[string]string{UnderlayIPv4: UnderlayIPv4, UnderlayIPv6: UnderlayIPv6, UnderlayMixed: UnderlayMixed} {
		if got := savedUnderlay(BuildUnderlay("x-", 3, 2, 2, u).Nodes); got != want {
			t.Fatalf("savedUnderlay of a %s lab: %s", u, got)
		}
	}
	// The region the controller takes: az2's hosts name their IPv6
	// underlay, every edge its underlay6.
	l := &Lab{Cfg: Config{AZs: 3, HostsPerAZ: 2, GuestsPerHost: 2, Underlay: UnderlayMixed}, Topo: topo}
	d := l.Region()
	for _, h := range d.Hosts {
		if h.Underlay.Is6() != (h.AZ == "az2") {
			t.Fatalf("host %s underlay %v", h.Name, h.Underlay)
		}
	}
	for _, s := range d.EdgeSets {
		for _, e := range s.Edges {
			if e.Underlay6 != EdgeUnderlay6Of(e.Name) {
				t.Fatalf("edge %s underlay6 %v", e.Name, e.Underlay6)
			}
		}
	}
	st := model.NewState()
	for _, o := range d.Objects() {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("the mixed lab's region is refused: %T %s: %v", o, o.Key(), err)
		}
	}
}

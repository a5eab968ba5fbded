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

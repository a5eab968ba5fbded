package lbplan

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestNATBackends: the reply fallback holds the nat backends of exactly
// one VIP and port; one shared by two VIPs, two ports, or behind a range
// or any-port listener is left out and counted; encap backends never.
func TestNATBackends(t *testing.T) {
	be := func(addr string, port uint16) model.Backend { return model.Backend{Address: a(addr), Port: port} }
	nat := func(name, vip string, ls []model.Listener, bs ...model.Backend) *model.Service {
		return &model.Service{Name: name, VIP: a(vip), Mode: model.ModeNAT, TableSize: 211, Listeners: ls,
			Pools: []model.Pool{{Name: "p", Backends: bs}}}
	}
	tcp := func(port, end uint16) model.Listener {
		return model.Listener{Protocol: "tcp", Port: port, PortEnd: end, Pool: "p"}
	}
	svcs := map[string]*model.Service{
		// 1: one VIP, one port, backend port 8080 and "same port".
		"one": nat("one", "198.51.100.1", []model.Listener{tcp(80, 0)}, be("198.19.1.1", 8080), be("198.19.1.2", 0)),
		// 2 and 3 share 198.19.2.1:8080: ambiguous; 198.19.2.2 only in 2.
		"two":   nat("two", "198.51.100.2", []model.Listener{tcp(80, 0)}, be("198.19.2.1", 8080), be("198.19.2.2", 0)),
		"three": nat("three", "198.51.100.3", []model.Listener{tcp(80, 0)}, be("198.19.2.1", 8080)),
		// two listener ports of one VIP to one backend port: ambiguous;
		// "same port" backends give one key per port.
		"ports": nat("ports", "198.51.100.4", []model.Listener{tcp(80, 0), tcp(81, 0)}, be("198.19.4.1", 8080), be("198.19.4.2", 0)),
		// a range with "same port": its ports of that backend are
		// ambiguous (the single port 90 is in the range, 99 is not).
		"range": nat("range", "198.51.100.5", []model.Listener{tcp(90, 0), tcp(99, 0), tcp(85, 95)}, be("198.19.5.1", 0)),
		// any-port with a fixed backend port: that port is ambiguous.
		"any": nat("any", "198.51.100.6", []model.Listener{tcp(0, 0), tcp(443, 0)}, be("198.19.6.1", 8443), be("198.19.6.2", 0)),
	}
	p := Build(Input{Services: svcs, Seed: 7})
	if len(p.Problems) != 0 {
		t.Fatalf("problems %q", p.Problems)
	}
	k := func(addr string, port uint16) NATBackend { return NATBackend{Addr: a(addr), Port: port, Proto: 6} }
	ap := netip.MustParseAddrPort
	want := map[NATBackend]netip.AddrPort{
		k("198.19.1.1", 8080): ap("198.51.100.1:80"),
		k("198.19.1.2", 80):   ap("198.51.100.1:80"),
		k("198.19.2.2", 80):   ap("198.51.100.2:80"),
		k("198.19.4.2", 80):   ap("198.51.100.4:80"),
		k("198.19.4.2", 81):   ap("198.51.100.4:81"),
		k("198.19.5.1", 99):   ap("198.51.100.5:99"),
	}
	if len(p.NATBackends) != len(want) {
		t.Errorf("fallback %v, want %v", p.NATBackends, want)
	}
	for bk, v := range want {
		if got, ok := p.NATBackends[bk]; !ok || got != v {
			t.Errorf("%v: %v (%v), want %v", bk, got, ok, v)
		}
	}
	// Left out: 198.19.2.1:8080 (two VIPs), 198.19.4.1:8080 (two ports),
	// 198.19.5.1:90 (in the range), the range's pair with 198.19.5.1, the
	// any-port listener's pairs with 198.19.6.1 (its port 8443, counted
	// once though port 443 names it too) and with 198.19.6.2, and
	// 198.19.6.2:443 (every port of it is ambiguous).
	if p.NATLeftOut != 7 {
		t.Errorf("left out %d, want 7", p.NATLeftOut)
	}
	// Encap services give none (web); dmz's two backends one each.
	if p := Build(Input{Services: services(), Hosts: hosts(), Seed: 7}); len(p.NATBackends) != 2 ||
		p.NATBackends[NATBackend{Addr: a("198.19.200.3"), Port: 8443, Proto: 6}] != ap("198.51.100.30:443") {
		t.Errorf("fallback %v", p.NATBackends)
	}
}

// TestNATBackends6: IPv6 VIPs' nat backends (issue 21) get fallback keys
// by the same rule (lb_nat_backends6), beside the IPv4 ones; the limit
// holds per family (each map holds it), the left-out count is shared; a
// health-checked IPv6 nat backend is checked at its IPv6 address.
func TestNATBackends6(t *testing.T) {
	be := func(addr string, port uint16) model.Backend { return model.Backend{Address: a(addr), Port: port} }
	nat := func(name, vip string, port uint16, bs ...model.Backend) *model.Service {
		return &model.Service{Name: name, VIP: a(vip), Mode: model.ModeNAT, TableSize: 211,
			Listeners: []model.Listener{{Protocol: "tcp", Port: port, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: bs, Health: &model.HealthCheck{Type: "tcp"}}}}
	}
	svcs := map[string]*model.Service{
		"v4":  nat("v4", "198.51.100.1", 80, be("198.19.1.1", 8080), be("198.19.1.2", 8080)),
		"v6":  nat("v6", "2001:db8:e1::1", 80, be("2001:db8:be::1", 8080), be("2001:db8:be::2", 0)),
		"v6b": nat("v6b", "2001:db8:e1::2", 443, be("2001:db8:be::1", 8080)),
	}
	ap := netip.MustParseAddrPort
	k := func(addr string, port uint16) NATBackend { return NATBackend{Addr: a(addr), Port: port, Proto: 6} }
	p := Build(Input{Services: svcs, Seed: 7})
	if len(p.Problems) != 0 {
		t.Fatalf("problems %q", p.Problems)
	}
	want := map[NATBackend]netip.AddrPort{
		k("198.19.1.1", 8080):   ap("198.51.100.1:80"),
		k("198.19.1.2", 8080):   ap("198.51.100.1:80"),
		k("2001:db8:be::2", 80): ap("[2001:db8:e1::1]:80"),
	}
	if !maps.Equal(p.NATBackends, want) || p.NATLeftOut != 1 {
		t.Errorf("fallback %v, left out %d; want %v, 1 (2001:db8:be::1:8080 serves two VIPs)", p.NATBackends, p.NATLeftOut, want)
	}
	// A limit of 1 per family: one key of each kept, the rest left out.
	fb, left := natBackends(p, 1)
	n4, n6 := 0, 0
	for bk := range fb {
		if bk.Addr.Is6() {
			n6++
		} else {
			n4++
		}
	}
	if n4 != 1 || n6 != 1 || left != 2 {
		t.Errorf("limit 1: fallback %v, left out %d; want one key of each family, 2 left out", fb, left)
	}
	p = Build(Input{Services: svcs, Seed: 7})
	found := false
	for _, c := range p.Checks {
		if c.Service == "v6" && c.Backend == be("2001:db8:be::1", 8080).Key() {
			found = c.Addr == ap("[2001:db8:be::1]:8080") && !c.Underlay.IsValid()
		}
	}
	if !found {
		t.Errorf("checks %+v: want v6's 2001:db8:be::1 checked directly at [2001:db8:be::1]:8080", p.Checks)
	}
}

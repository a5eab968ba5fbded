package edge

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestNATFallbackSync: the edge programs the reply path's stateless
// fallback from the plan: a nat backend of one VIP and port is in it, one
// shared by two VIPs is not (and counted); removing a backend from its
// service removes its entry, and a backend no longer shared gets one.
func TestNATFallbackSync(t *testing.T) {
	svc := func(name, vip string, bs ...string) *model.Service {
		s := &model.Service{Name: name, VIP: a(vip), Mode: model.ModeNAT, TableSize: 211,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}}, Pools: []model.Pool{{Name: "p"}}}
		for _, b := range bs {
			s.Pools[0].Backends = append(s.Pools[0].Backends, model.Backend{Address: a(b), Port: 8080})
		}
		return s
	}
	fake := dataplane.NewFakeLB()
	s := newLBState(fake, 7)
	x := newIndex()
	put := func(o *model.Service) { x.put(model.KindOf(o), o.Key(), o) }
	k := func(addr string) dataplane.NATBackend {
		return dataplane.NATBackend{Addr: a(addr), Port: 8080, Proto: dataplane.ProtoTCP}
	}
	check := func(step string, want map[dataplane.NATBackend]netip.AddrPort, left int) {
		t.Helper()
		if _, err := s.sync(x); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		got, _ := fake.NATBackends()
		if !maps.Equal(got, want) || s.natLeftOut != left {
			t.Errorf("%s: fallback %v, left out %d; want %v, %d", step, got, s.natLeftOut, want, left)
		}
	}
	put(svc("web", "198.51.100.20", "198.19.200.1", "198.19.200.2"))
	api := svc("api", "198.51.100.21", "198.19.200.2")
	put(api)
	check("shared", map[dataplane.NATBackend]netip.AddrPort{k("198.19.200.1"): netip.MustParseAddrPort("198.51.100.20:80")}, 1)

	put(svc("web", "198.51.100.20", "198.19.200.2"))
	check("web's .1 removed", map[dataplane.NATBackend]netip.AddrPort{}, 1)

	x.delete(model.KindOf(api), api.Key())
	check("api removed", map[dataplane.NATBackend]netip.AddrPort{k("198.19.200.2"): netip.MustParseAddrPort("198.51.100.20:80")}, 0)
}

// TestNATFallbackSync6: an IPv6 VIP's nat backends (issue 21) get fallback
// keys by the same rule, beside the IPv4 ones: one of one VIP and port is
// in it, one shared by two IPv6 VIPs is not, and the left-out count is
// one for both families.
func TestNATFallbackSync6(t *testing.T) {
	svc := func(name, vip string, bs ...string) *model.Service {
		s := &model.Service{Name: name, VIP: a(vip), Mode: model.ModeNAT, TableSize: 211,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}}, Pools: []model.Pool{{Name: "p"}}}
		for _, b := range bs {
			s.Pools[0].Backends = append(s.Pools[0].Backends, model.Backend{Address: a(b), Port: 8080})
		}
		return s
	}
	fake := dataplane.NewFakeLB()
	s := newLBState(fake, 7)
	x := newIndex()
	put := func(o *model.Service) { x.put(model.KindOf(o), o.Key(), o) }
	k := func(addr string) dataplane.NATBackend {
		return dataplane.NATBackend{Addr: a(addr), Port: 8080, Proto: dataplane.ProtoTCP}
	}
	put(svc("web", "198.51.100.20", "198.19.200.1", "198.19.200.2"))
	put(svc("api", "198.51.100.21", "198.19.200.2"))
	put(svc("web6", "2001:db8:e1::20", "2001:db8:be::1", "2001:db8:be::2"))
	put(svc("api6", "2001:db8:e1::21", "2001:db8:be::2"))
	if _, err := s.sync(x); err != nil {
		t.Fatal(err)
	}
	got, _ := fake.NATBackends()
	want := map[dataplane.NATBackend]netip.AddrPort{k("198.19.200.1"): netip.MustParseAddrPort("198.51.100.20:80"),
		k("2001:db8:be::1"): netip.MustParseAddrPort("[2001:db8:e1::20]:80")}
	if !maps.Equal(got, want) || s.natLeftOut != 2 {
		t.Errorf("fallback %v, left out %d; want %v, 2 (one shared backend of each family)", got, s.natLeftOut, want)
	}
	bs, _ := fake.Backends()
	n6 := 0
	for _, b := range bs {
		if b.Mode == dataplane.ModeNAT && b.Addr.Is6() {
			n6++
		}
	}
	if n6 != 3 {
		t.Errorf("%d IPv6 nat backend slots, want 3 (web6's two, api6's one): %v", n6, bs)
	}
}

package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/model"
)

// fakeHealthMaps records what the tunnel checks program.
type fakeHealthMaps struct {
	targets map[uint32]dataplane.HealthTarget
	err     error
}

func (f *fakeHealthMaps) SetHealthAddress(netip.Addr) error  { return nil }
func (f *fakeHealthMaps) SetHealthAddress6(netip.Addr) error { return nil }
func (f *fakeHealthMaps) SetHealthTargets(t map[uint32]dataplane.HealthTarget) error {
	if f.err != nil {
		return f.err
	}
	f.targets = t
	return nil
}

func hcTarget(svc, backend, host, guest string, vsid uint32) health.Target {
	return health.Target{Service: svc, Pool: "web", Backend: backend, Addr: netip.AddrPortFrom(netip.MustParseAddr(guest), 80),
		Check: model.HealthCheck{Type: "tcp"}, Tunnel: &health.Tunnel{Host: netip.MustParseAddr(host), VSID: vsid}}
}

func TestHCTunnelAssign(t *testing.T) {
	src := netip.MustParseAddr("198.18.255.1")
	f := &fakeHealthMaps{}
	h := newHCTunnel(f, src, netip.Addr{}, slog.New(slog.DiscardHandler))
	// Two guests with one private address on two hosts, a third backend
	// that is checked by two services, and a nat target.
	a := hcTarget("s1", "az1-h1/g1", "198.18.11.1", "198.19.11.1", 5111)
	b := hcTarget("s1", "az2-h1/g1", "198.18.21.1", "198.19.11.1", 5211)
	c1 := hcTarget("s1", "az3-h1/g1", "198.18.31.1", "198.19.31.1", 5311)
	c2 := hcTarget("s2", "az3-h1/g1", "198.18.31.1", "198.19.31.1", 5311)
	nat := health.Target{Service: "dmz", Pool: "web", Backend: "198.19.200.1", Addr: netip.MustParseAddrPort("198.19.200.1:80"), Check: model.HealthCheck{Type: "tcp"}}

	out := h.assign([]health.Target{a, b, c1, c2, nat})
	if len(out) != 5 {
		t.Fatalf("%d targets out, want 5", len(out))
	}
	marks := map[string]uint32{}
	for _, o := range out {
		if o.Backend == "198.19.200.1" {
			if o.Tunnel != nil {
				t.Errorf("nat target got a tunnel: %+v", o.Tunnel)
			}
			continue
		}
		if o.Tunnel == nil || o.Tunnel.Source != src || o.Tunnel.Mark&0xfff00000 != hcMarkBase {
			t.Fatalf("%s/%s: tunnel %+v", o.Service, o.Backend, o.Tunnel)
		}
		marks[o.Service+"/"+o.Backend] = o.Tunnel.Mark
	}
	if marks["s1/az1-h1/g1"] == marks["s1/az2-h1/g1"] {
		t.Errorf("two guests with one address on two hosts share mark %#x", marks["s1/az1-h1/g1"])
	}
	if marks["s1/az3-h1/g1"] != marks["s2/az3-h1/g1"] {
		t.Errorf("one backend checked by two services has marks %#x and %#x", marks["s1/az3-h1/g1"], marks["s2/az3-h1/g1"])
	}
	if len(f.targets) != 3 {
		t.Fatalf("programmed %d marks, want 3: %v", len(f.targets), f.targets)
	}
	if got := f.targets[marks["s1/az2-h1/g1"]]; got != (dataplane.HealthTarget{Host: netip.MustParseAddr("198.18.21.1"), Guest: netip.MustParseAddr("198.19.11.1"), VSID: 5211}) {
		t.Errorf("mark of az2-h1/g1 programmed as %+v", got)
	}
	// The input is not modified (the reconciler keeps it).
	if a.Tunnel.Mark != 0 || a.Tunnel.Source.IsValid() {
		t.Errorf("assign modified its input: %+v", a.Tunnel)
	}

	// Marks are stable while a backend stays; a gone backend's mark goes.
	out2 := h.assign([]health.Target{b, c1})
	for _, o := range out2 {
		if o.Tunnel.Mark != marks[o.Service+"/"+o.Backend] {
			t.Errorf("%s/%s: mark %#x changed to %#x", o.Service, o.Backend, marks[o.Service+"/"+o.Backend], o.Tunnel.Mark)
		}
	}
	if len(f.targets) != 2 {
		t.Errorf("programmed %d marks after a backend left, want 2", len(f.targets))
	}
	if _, ok := f.targets[marks["s1/az1-h1/g1"]]; ok {
		t.Errorf("the mark of the backend that left is still programmed")
	}

	// A failing map write keeps the checks (they fail until it works).
	f.err = errors.New("map full")
	if out := h.assign([]health.Target{a}); len(out) != 1 || out[0].Tunnel == nil {
		t.Errorf("a failed write dropped the target: %+v", out)
	}

	// No health-check address: probed directly, nothing programmed.
	d := &fakeHealthMaps{}
	out = newHCTunnel(d, netip.Addr{}, netip.Addr{}, slog.New(slog.DiscardHandler)).assign([]health.Target{a, nat})
	if out[0].Tunnel != nil || d.targets != nil {
		t.Errorf("without a health-check address: tunnel %+v, programmed %v", out[0].Tunnel, d.targets)
	}
}

// An IPv6 VIP's backend (Tunnel.Guest6) is checked at its guest's IPv6
// address from the IPv6 health-check address, with a mark of its own (the
// same guest's IPv4 address, checked for an IPv4 VIP, keeps another);
// without an IPv6 health-check address it is checked at its IPv4 address
// from the IPv4 one, as before.
func TestHCTunnelAssign6(t *testing.T) {
	src, src6 := netip.MustParseAddr("198.18.255.1"), netip.MustParseAddr("2001:db8:ffff::1")
	g6 := netip.MustParseAddr("2001:db8:f0::5")
	v4 := hcTarget("web4", "az1-h1/g1", "198.18.11.1", "198.19.11.1", 5111)
	v6 := hcTarget("web6", "az1-h1/g1", "198.18.11.1", "198.19.11.1", 5111)
	v6.Tunnel.Guest6 = g6

	f := &fakeHealthMaps{}
	out := newHCTunnel(f, src, src6, slog.New(slog.DiscardHandler)).assign([]health.Target{v4, v6})
	if len(out) != 2 {
		t.Fatalf("%d targets, want 2", len(out))
	}
	if o := out[0]; o.Addr != netip.MustParseAddrPort("198.19.11.1:80") || o.Tunnel.Source != src {
		t.Errorf("IPv4 VIP's backend: %v from %v", o.Addr, o.Tunnel.Source)
	}
	o := out[1]
	if o.Addr != netip.AddrPortFrom(g6, 80) || o.Tunnel.Source != src6 {
		t.Errorf("IPv6 VIP's backend: %v from %v, want [%v]:80 from %v", o.Addr, o.Tunnel.Source, g6, src6)
	}
	if o.Tunnel.Mark == out[0].Tunnel.Mark {
		t.Errorf("the IPv6 check shares the IPv4 check's mark %#x", o.Tunnel.Mark)
	}
	want := dataplane.HealthTarget{Host: netip.MustParseAddr("198.18.11.1"), Guest: g6, VSID: 5111}
	if got := f.targets[o.Tunnel.Mark]; got != want || len(f.targets) != 2 {
		t.Errorf("programmed %v, want the IPv6 mark as %+v and 2 marks", f.targets, want)
	}

	// No IPv6 health-check address: its IPv4 address, as before.
	f = &fakeHealthMaps{}
	out = newHCTunnel(f, src, netip.Addr{}, slog.New(slog.DiscardHandler)).assign([]health.Target{v6})
	if o := out[0]; o.Addr != netip.MustParseAddrPort("198.19.11.1:80") || o.Tunnel.Source != src || len(f.targets) != 1 {
		t.Errorf("without --health-source6: %v from %v, %d marks", o.Addr, o.Tunnel.Source, len(f.targets))
	}
	// Only an IPv6 one: the IPv6 VIP's backend through the tunnel, the
	// IPv4 VIP's probed directly.
	f = &fakeHealthMaps{}
	out = newHCTunnel(f, netip.Addr{}, src6, slog.New(slog.DiscardHandler)).assign([]health.Target{v4, v6})
	if out[0].Tunnel != nil || out[1].Tunnel == nil || out[1].Tunnel.Source != src6 || len(f.targets) != 1 {
		t.Errorf("only --health-source6: %+v %+v, %d marks", out[0].Tunnel, out[1].Tunnel, len(f.targets))
	}
}

// The edge's plan names an IPv6 encap VIP's backend guest's IPv6 address
// (from the host, or its guest copy) in its check (Addr6), which the
// reconciler's targets carry as Tunnel.Guest6; an IPv4 VIP's check has
// none.
func TestPlanChecksGuest6(t *testing.T) {
	x := newIndex()
	h := &model.Host{Name: "az1-h1", AZ: "az1", Underlay: netip.MustParseAddr("198.18.11.1"), Guests: []model.Guest{
		{Name: "g1", Address: netip.MustParseAddr("198.19.11.1"), Address6: netip.MustParseAddr("2001:db8:11::1"), VSID: 5111}}}
	x.put(model.KindHost, h.Key(), h)
	c := &model.GuestCopy{Host: "az2-h1", Underlay: netip.MustParseAddr("198.18.21.1"),
		Guest: model.Guest{Name: "g1", Address: netip.MustParseAddr("198.19.21.1"), Address6: netip.MustParseAddr("2001:db8:21::1"), VSID: 5211}}
	x.put(model.KindGuestCopy, model.GuestCopyKey(c.Host, c.Guest.Name), c)
	pool := []model.Pool{{Name: "web", Health: &model.HealthCheck{Type: "tcp"},
		Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}, {Host: "az2-h1", Guest: "g1"}}}}
	for _, s := range []*model.Service{
		{Name: "web6", VIP: netip.MustParseAddr("2001:db8:e1::20"), Mode: model.ModeEncap, Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: pool},
		{Name: "web4", VIP: netip.MustParseAddr("198.51.100.20"), Mode: model.ModeEncap, Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: pool},
	} {
		x.put(model.KindService, s.Key(), s)
	}
	got := map[string]netip.AddrPort{}
	for _, ch := range planOf(x, 7).Checks {
		got[ch.Service+" "+ch.Backend] = ch.Addr6
	}
	want := map[string]netip.AddrPort{
		"web6 az1-h1/g1": netip.MustParseAddrPort("[2001:db8:11::1]:80"),
		"web6 az2-h1/g1": netip.MustParseAddrPort("[2001:db8:21::1]:80"),
		"web4 az1-h1/g1": {},
		"web4 az2-h1/g1": {},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("checks' Addr6 %v, want %v", got, want)
	}
}

package edge

import (
	"errors"
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

func (f *fakeHealthMaps) SetHealthAddress(netip.Addr) error { return nil }
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
	h := newHCTunnel(f, src, slog.New(slog.DiscardHandler))
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
	out = newHCTunnel(d, netip.Addr{}, slog.New(slog.DiscardHandler)).assign([]health.Target{a, nat})
	if out[0].Tunnel != nil || d.targets != nil {
		t.Errorf("without a health-check address: tunnel %+v, programmed %v", out[0].Tunnel, d.targets)
	}
}

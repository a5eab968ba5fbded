package edge

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

// web6 is an encap service with an IPv6 VIP in pop-a's IPv6 prefix
// (region6), its pool both hosts' dual-stack g1, rate limits, and a tcp
// range beside its port.
func web6() *model.Service {
	return &model.Service{Name: "web6", VIP: a("2001:db8:a::80"), Mode: model.ModeEncap,
		Limits:    &model.Limits{SourcePPS: 100, SourceBurst: 200},
		Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "web"}, {Protocol: "tcp", Port: 8000, PortEnd: 8002, Pool: "web"}},
		Pools: []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}, {Host: "az2-h1", Guest: "g1"}},
			Health: &model.HealthCheck{Type: "tcp"}}}}
}

// TestServicesIPv6VIP: the edge reconciler programs an IPv6 VIP's service
// as an IPv4 one's (issue 21): its VIP mark, its listeners keyed by the
// IPv6 VIP, a table over its encap backends (host underlay, the guest's
// IPv4 address and VSID, as contract.md asks), its rate limits, its /128
// in the anti-spoofing sources, a firewall rule naming it, health checks
// to the guests' IPv4 addresses through the tunnel; a restarted
// reconciler adopts what the data plane holds; the service's deletion
// removes it all.
func TestServicesIPv6VIP(t *testing.T) {
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	var checks []health.Target
	r.OnTargets = func(ts []health.Target) { checks = ts }
	bad := netip.MustParsePrefix("2001:db8:bad::/48")
	rule := &model.FirewallRule{Name: "v6-deny", Action: model.FirewallDeny, Sources: []netip.Prefix{bad}, Address: a("2001:db8:a::80")}
	load(t, r, 10, append(region6(), web6(), rule)...)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	vip := a("2001:db8:a::80")
	if !fake.VIPSet[vip] {
		t.Fatalf("VIPs %v: want %v", fake.VIPSet, vip)
	}
	port, ok := fake.ListenerM[dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 443}]
	rng, ok2 := fake.ListenerM[dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 8000, Last: 8002}]
	if !ok || !ok2 || len(fake.ListenerM) != 2 || port.Table != rng.Table {
		t.Fatalf("listeners %v", fake.ListenerM)
	}
	tbl := fake.Tables[port.Table]
	if len(tbl) != model.DefaultTableSize {
		t.Fatalf("table of %d slots", len(tbl))
	}
	seen := map[netip.Addr]bool{}
	for _, idx := range tbl {
		b := fake.BackendM[idx]
		seen[b.Addr] = true
		switch b.Addr {
		case a("198.18.11.1"):
			if b.Guest != a("198.19.11.1") || b.VSID != 5001 || b.Mode != dataplane.ModeEncap {
				t.Fatalf("backend %+v", b)
			}
		case a("198.18.21.1"):
			if b.Guest != a("198.19.21.1") || b.VSID != 6001 || b.Mode != dataplane.ModeEncap {
				t.Fatalf("backend %+v", b)
			}
		default:
			t.Fatalf("backend %+v of no host", b)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("the table names %d hosts, want 2", len(seen))
	}
	// Health checks as for an IPv4 VIP: through the tunnel, to the
	// guest's IPv4 address (contract.md).
	if len(checks) != 2 {
		t.Fatalf("health targets %+v", checks)
	}
	for _, c := range checks {
		if g := c.Addr.Addr(); (g != a("198.19.11.1") && g != a("198.19.21.1")) || c.Addr.Port() != 443 || c.Tunnel == nil {
			t.Fatalf("health target %+v: want a guest's IPv4 address, port 443, through the tunnel", c)
		}
	}
	if l := fake.LimitMap[vip]; l.SourcePPS != 100 {
		t.Fatalf("limits %v: want the VIP's", fake.LimitMap)
	}
	if !slices.Contains(fake.SpoofOwn, netip.PrefixFrom(vip, 128)) {
		t.Fatalf("anti-spoofing sources %v: want %v/128", fake.SpoofOwn, vip)
	}
	d, ok := fake.FW.FWDests[vip]
	if !ok || d.Scope == 0 {
		t.Fatalf("firewall destinations %v: want %v", fake.FW.FWDests, vip)
	}
	if e := fake.FW.FWEntries[fwplan.Key{Scope: d.Scope, Source: bad}]; e.N != 1 {
		t.Fatalf("firewall entries %v", fake.FW.FWEntries)
	}

	// A restart adopts the slots: nothing is rewritten.
	r2 := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	load(t, r2, 10, append(region6(), web6(), rule)...)
	if got := fake.ListenerM[dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 443}]; got != port {
		t.Fatalf("after a restart the listener moved: %+v -> %+v", port, got)
	}

	// The listener on 8000-8002 goes: only it.
	v := web6()
	v.Listeners = v.Listeners[:1]
	watched(t, r2, 11, v)
	if len(fake.ListenerM) != 1 {
		t.Fatalf("listeners after the range went %v", fake.ListenerM)
	}
	// The service goes: VIP, listeners, table and limits go.
	r2.Delete(model.KindFirewallRule, rule.Name, 12)
	r2.Delete(model.KindService, "web6", 12)
	r2.Commit(12, false)
	if fake.VIPSet[vip] || len(fake.ListenerM) != 0 {
		t.Fatalf("after delete: VIPs %v listeners %v", fake.VIPSet, fake.ListenerM)
	}
	if _, ok := fake.Tables[port.Table]; ok {
		t.Fatal("table of a deleted service kept")
	}
	if _, ok := fake.LimitMap[vip]; ok {
		t.Fatal("limits of a deleted service kept")
	}
}

// TestLBIPv6VIPOnKernelMaps: the reconciler programs an IPv6 VIP's
// service beside an IPv4 one into a loaded edge's real maps
// (lb_listeners6, lb_ranges6, the VIP's route) through failures injected
// into 8% of the writes, converges, and prunes the IPv6 VIP's listeners
// and VIP when its service changes and goes; a restarted reconciler
// adopts what the maps hold.
func TestLBIPv6VIPOnKernelMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF objects needs root")
	}
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	faults := dataplane.NewFaults()
	faults.FailRandomly(5, 0.08)
	web4 := &model.Service{Name: "web4", VIP: a("198.51.100.20"), Mode: model.ModeEncap, TableSize: 307,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}}}}}
	v6 := web6()
	v6.TableSize = 307
	v6.Listeners = append(v6.Listeners, model.Listener{Protocol: "udp", Pool: "web"})
	converge := func(step string, s *lbState, objs ...model.Object) *lbplan.Plan {
		t.Helper()
		x := newIndex()
		for _, o := range append(region6(), objs...) {
			x.put(model.KindOf(o), o.Key(), o)
		}
		p := planOf(x, 7)
		for try := 0; ; try++ {
			if _, err = s.sync(x); err == nil {
				break
			}
			if !errors.Is(err, dataplane.ErrInjected) || try == 100 {
				t.Fatalf("%s: %v", step, err)
			}
		}
		v, err := kernelView(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkConverged(v, p); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return p
	}
	s := newLBState(dataplane.NewFaultyLB(e, faults), 7)
	p := converge("both services", s, web4, v6)
	if !p.VIPs[a("2001:db8:a::80")] || len(p.Listeners) != 4 {
		t.Fatalf("plan VIPs %v listeners %v", p.VIPs, p.Listeners)
	}
	exact, sets, ranges, err := e.ListenerEntries()
	if err != nil || exact != 2 || sets != 2 || ranges != 1 {
		t.Fatalf("entries %d exact, %d sets, %d ranges, %v: want 2 (tcp:80, tcp:443), 2 (the IPv6 VIP's tcp and udp), 1", exact, sets, ranges, err)
	}
	// A restart adopts; the IPv6 VIP loses its range and udp listeners.
	s = newLBState(dataplane.NewFaultyLB(e, faults), 7)
	v6b := web6()
	v6b.TableSize = 307
	v6b.Listeners = v6b.Listeners[:1]
	converge("narrowed", s, web4, v6b)
	if exact, sets, _, err := e.ListenerEntries(); err != nil || exact != 2 || sets != 0 {
		t.Fatalf("after narrowing: %d exact, %d range sets, %v", exact, sets, err)
	}
	converge("IPv6 service gone", s, web4)
	if vips, err := e.VIPs(); err != nil || len(vips) != 1 || vips[0] != a("198.51.100.20") {
		t.Fatalf("VIPs %v %v: want the IPv4 one only", vips, err)
	}
	if faults.Injected == 0 {
		t.Fatal("no failure was injected")
	}
}

// TestServicesIPv6NAT: the reconciler programs an IPv6 VIP in mode nat
// (issue 21): nat mode on, the VIP's listener, a table over its nat
// backends (their IPv6 addresses and ports, mode nat), the fallback's
// IPv6 key, health checks to the backends' IPv6 addresses directly (no
// tunnel); the service's deletion removes it.
func TestServicesIPv6NAT(t *testing.T) {
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	var checks []health.Target
	r.OnTargets = func(ts []health.Target) { checks = ts }
	svc := &model.Service{Name: "dmz6", VIP: a("2001:db8:a::86"), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
		Pools: []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("2001:db8:be::1"), Port: 8080}, {Address: a("fd00:be::2"), Port: 8080}},
			Health: &model.HealthCheck{Type: "tcp"}}}}
	load(t, r, 10, append(region6(), svc)...)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	vip := a("2001:db8:a::86")
	if !fake.VIPSet[vip] || !fake.LB.NAT {
		t.Fatalf("VIPs %v, nat mode %v: want %v, on", fake.VIPSet, fake.LB.NAT, vip)
	}
	l, ok := fake.ListenerM[dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 80}]
	if !ok {
		t.Fatalf("listeners %v", fake.ListenerM)
	}
	seen := map[netip.Addr]bool{}
	for _, idx := range fake.Tables[l.Table] {
		b := fake.BackendM[idx]
		if b.Mode != dataplane.ModeNAT || b.Port != 8080 || !b.Addr.Is6() {
			t.Fatalf("backend %+v: want an IPv6 nat backend on 8080", b)
		}
		seen[b.Addr] = true
	}
	if len(seen) != 2 || !seen[a("2001:db8:be::1")] || !seen[a("fd00:be::2")] {
		t.Fatalf("the table names %v", seen)
	}
	fb, _ := fake.NATBackends()
	if fb[dataplane.NATBackend{Addr: a("2001:db8:be::1"), Port: 8080, Proto: dataplane.ProtoTCP}] != netip.MustParseAddrPort("[2001:db8:a::86]:80") {
		t.Fatalf("fallback %v", fb)
	}
	if len(checks) != 2 {
		t.Fatalf("health targets %+v", checks)
	}
	for _, c := range checks {
		if !seen[c.Addr.Addr()] || c.Addr.Port() != 8080 || c.Tunnel != nil {
			t.Fatalf("health target %+v: want a backend's IPv6 address, port 8080, directly", c)
		}
	}
	r.Delete(model.KindService, "dmz6", 11)
	r.Commit(11, false)
	if fake.VIPSet[vip] || len(fake.ListenerM) != 0 {
		t.Fatalf("after delete: VIPs %v listeners %v", fake.VIPSet, fake.ListenerM)
	}
	if fb, _ := fake.NATBackends(); len(fb) != 0 {
		t.Fatalf("fallback after delete %v", fb)
	}
}

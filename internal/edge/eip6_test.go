package edge

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// region6 is a dual-stack region: pop-a owns an IPv6 prefix beside its
// IPv4 one, each host's g1 has a private IPv6 address, and h1's g1 holds
// one EIP of each family.
func region6() []model.Object {
	g := func(a4, a6 string, vsid uint32) []model.Guest {
		return []model.Guest{{Name: "g1", Address: a(a4), Address6: a(a6), VSID: vsid}}
	}
	return []model.Object{
		&model.AZ{Name: "az1"}, &model.AZ{Name: "az2"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: g("198.19.11.1", "2001:db8:11::1", 5001)},
		&model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.1"), Guests: g("198.19.21.1", "2001:db8:21::1", 6001)},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:a::/48")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: a("198.18.0.2")}}},
		eipB("198.51.100.7", "az1-h1", "g1"),
		eipB("2001:db8:a::7", "az1-h1", "g1"),
		&model.EIP{Address: a("2001:db8:a::8")},
	}
}

// An IPv6 EIP is routed over the IPv4 underlay to its guest's host with
// the guest's VSID, as an IPv4 EIP is; it follows its guest (eip bind to
// another host), its host's underlay, and goes when it is unbound or
// deleted; its counters are in the status under its address.
func TestReconcileIPv6EIP(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	load(t, r, 10, region6()...)
	routes := fake.Routes()
	if len(routes) != 2 || r.routes != 2 {
		t.Fatalf("routes %v (count %d), want the two bound EIPs", routes, r.routes)
	}
	v4, v6 := routes[a("198.51.100.7")], routes[a("2001:db8:a::7")]
	if v6.Host != a("198.18.11.1") || v6.VSID != 5001 {
		t.Fatalf("IPv6 route %+v", v6)
	}
	if v6.StatsIdx == v4.StatsIdx {
		t.Fatalf("the IPv4 and the IPv6 EIP share counter slot %d", v6.StatsIdx)
	}
	slot := v6.StatsIdx

	// Moved to a guest of another host: the route follows, its slot stays,
	// the IPv4 EIP of the guest it left is untouched.
	watched(t, r, 11, eipB("2001:db8:a::7", "az2-h1", "g1"))
	if rt := routeOf(t, fake, "2001:db8:a::7"); rt.Host != a("198.18.21.1") || rt.VSID != 6001 || rt.StatsIdx != slot {
		t.Fatalf("after the move %+v (slot was %d)", rt, slot)
	}
	if rt := routeOf(t, fake, "198.51.100.7"); rt != v4 {
		t.Fatalf("the IPv4 EIP changed: %+v -> %+v", v4, rt)
	}

	// The host's underlay moves: its IPv6 EIP follows.
	watched(t, r, 12, &model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.9"),
		Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), Address6: a("2001:db8:21::1"), VSID: 6001}}})
	if rt := routeOf(t, fake, "2001:db8:a::7"); rt.Host != a("198.18.21.9") {
		t.Fatalf("host move not followed: %+v", rt)
	}

	// The status names it by its address.
	fake.Counters[slot] = dataplane.Counters{RxPackets: 7}
	st := r.Status(time.Now(), nil)
	if c, ok := st.EIPs["2001:db8:a::7"]; !ok || c.RxPackets != 7 {
		t.Fatalf("status EIPs %v", st.EIPs)
	}

	// Bound, the second one gets a slot of its own; unbound, it goes.
	watched(t, r, 13, eipB("2001:db8:a::8", "az1-h1", "g1"))
	if rt := routeOf(t, fake, "2001:db8:a::8"); rt.Host != a("198.18.11.1") || rt.StatsIdx == slot || rt.StatsIdx == v4.StatsIdx {
		t.Fatalf("second IPv6 EIP %+v", rt)
	}
	watched(t, r, 14, &model.EIP{Address: a("2001:db8:a::8")})
	if _, ok := fake.Routes()[a("2001:db8:a::8")]; ok {
		t.Fatal("unbound IPv6 EIP still routed")
	}

	// Deleted: its route goes.
	r.Delete(model.KindEIP, "2001:db8:a::7", 15)
	r.Commit(15, false)
	if _, ok := fake.Routes()[a("2001:db8:a::7")]; ok || r.routes != 1 {
		t.Fatalf("after delete: routes %v count %d", fake.Routes(), r.routes)
	}
}

// A restarted edge adopts the IPv6 routes it finds (and their counter
// slots), deletes a stale one, and never hands out a slot an IPv6 route
// holds.
func TestRestartAdoptsIPv6Routes(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	load(t, NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake), 5, region6()...)
	before := routeOf(t, fake, "2001:db8:a::7")
	fake.RouteMap[a("2001:db8:a::99")] = dataplane.Route{Host: a("198.18.11.1"), VSID: 5001, StatsIdx: 77}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	objs := append(region6(), eipB("198.51.100.8", "az2-h1", "g1"))
	load(t, r, 6, objs...)
	if after := routeOf(t, fake, "2001:db8:a::7"); after != before {
		t.Fatalf("IPv6 route changed across restart: %+v -> %+v", before, after)
	}
	if _, ok := fake.Routes()[a("2001:db8:a::99")]; ok {
		t.Fatal("stale IPv6 route kept")
	}
	if s := routeOf(t, fake, "198.51.100.8").StatsIdx; s == before.StatsIdx {
		t.Fatal("a new EIP got the slot of an adopted IPv6 one")
	}
	if r.routes != 3 {
		t.Fatalf("routes count %d, want 3", r.routes)
	}
}

// Through the guest copies of a set scope (--follow-share): a guest's
// change reaches both its EIPs, the IPv4 and the IPv6 one.
func TestGuestCopyIPv6EIP(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	set := gcSet()
	set.Prefixes = append(set.Prefixes, netip.MustParsePrefix("2001:db8:a::/48"))
	g := func(vsid uint32) *model.GuestCopy {
		c := gc("h1", "198.18.11.1", "g1", "198.19.11.1", vsid)
		c.Guest.Address6 = a("2001:db8:11::1")
		return c
	}
	r.Reset()
	put(t, r, 1, set, eipB("198.51.100.7", "h1", "g1"), eipB("2001:db8:a::7", "h1", "g1"))
	putGC(t, r, 1, g(5001))
	r.Commit(1, true)
	if rt := routeOf(t, fake, "2001:db8:a::7"); rt.Host != a("198.18.11.1") || rt.VSID != 5001 {
		t.Fatalf("IPv6 route %+v", rt)
	}
	putGC(t, r, 2, g(5777)) // the guest's VSID changes: both its EIPs follow
	r.Commit(2, false)
	for _, e := range []string{"198.51.100.7", "2001:db8:a::7"} {
		if rt := routeOf(t, fake, e); rt.VSID != 5777 {
			t.Errorf("%s kept VSID %d", e, rt.VSID)
		}
	}
}

// An IPv6 EIP pulled out into a dedicated set is announced as its /128
// by that set's edges, and routed by them and by its prefix set's.
func TestIPv6EIPPullOut(t *testing.T) {
	objs := append(region6(), &model.EIP{Address: a("2001:db8:a::7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Set: "hot"})
	for _, edge := range []string{"edge-a1", "edge-d1"} {
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: edge, Log: quiet}, fake)
		load(t, r, 1, objs...)
		if rt := routeOf(t, fake, "2001:db8:a::7"); rt.Host != a("198.18.11.1") {
			t.Fatalf("%s: route %+v", edge, rt)
		}
		p := r.AnnouncePlan()
		host := netip.MustParsePrefix("2001:db8:a::7/128")
		if edge == "edge-d1" && !slices.Equal(p.Prefixes, []netip.Prefix{host}) {
			t.Errorf("%s announces %v, want %v", edge, p.Prefixes, host)
		}
		if edge == "edge-a1" && slices.Contains(p.Prefixes, host) {
			t.Errorf("%s announces %v: the pulled-out /128 is the dedicated set's", edge, p.Prefixes)
		}
	}
	// Returned (no set): the dedicated set announces nothing.
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-d1", Log: quiet}, fake)
	load(t, r, 1, objs...)
	watched(t, r, 2, eipB("2001:db8:a::7", "az1-h1", "g1"))
	if p := r.AnnouncePlan(); len(p.Prefixes) != 0 {
		t.Errorf("after the return edge-d1 announces %v", p.Prefixes)
	}
}

// A failed write of an IPv6 route keeps what was programmed and is
// retried by itself.
func TestIPv6EIPFailureRecovers(t *testing.T) {
	faulty := &dataplane.FaultyEdge{EdgeMaps: dataplane.NewFakeEdge()}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, faulty)
	t.Cleanup(r.Stop)
	load(t, r, 1, region6()...)
	faulty.SetFail(true)
	watched(t, r, 2, eipB("2001:db8:a::7", "az2-h1", "g1"))
	if rt, _, _ := faulty.Route(a("2001:db8:a::7")); rt.Host != a("198.18.11.1") {
		t.Fatalf("failed write changed the route: %+v", rt)
	}
	faulty.SetFail(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		rev, errs := r.rev, len(r.errs)
		r.mu.Unlock()
		rt, _, _ := faulty.Route(a("2001:db8:a::7"))
		if rev == 2 && errs == 0 && rt.Host == a("198.18.21.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not retried within 10 s: %+v rev %d", rt, rev)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An IPv6 EIP's rate limits are programmed beside the IPv4 ones
// (edge_limits6), follow a change and go with the limits or the EIP.
func TestReconcileIPv6EIPLimits(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	objs := region6()
	lim4 := eipB("198.51.100.7", "az1-h1", "g1")
	lim4.Limits = &model.Limits{SourcePPS: 1000, SourceBurst: 100}
	lim6 := eipB("2001:db8:a::7", "az1-h1", "g1")
	lim6.Limits = &model.Limits{SourcePPS: 500, SourceBurst: 50, SYNRate: 200, SYNBurst: 20}
	load(t, r, 10, append(objs, lim4, lim6)...)
	got := fake.LimitMap[a("2001:db8:a::7")]
	if want := (dataplane.Limits{SourcePPS: 500, SourceBurst: 50, SYNRate: 200, SYNBurst: 20}).Normal(); got != want {
		t.Fatalf("IPv6 EIP limits %+v, want %+v (all: %v)", got, want, fake.LimitMap)
	}
	if _, ok := fake.LimitMap[a("198.51.100.7")]; !ok || len(fake.LimitMap) != 2 {
		t.Fatalf("limits %v: want both EIPs'", fake.LimitMap)
	}
	lim6.Limits = &model.Limits{SourcePPS: 800, SourceBurst: 80}
	watched(t, r, 11, lim6)
	if got := fake.LimitMap[a("2001:db8:a::7")]; got.SourcePPS != 800 || got.SYNRate != 0 {
		t.Fatalf("changed IPv6 limits %+v", got)
	}
	lim6.Limits = nil
	watched(t, r, 12, lim6)
	if _, ok := fake.LimitMap[a("2001:db8:a::7")]; ok {
		t.Fatal("the IPv6 EIP's limits stayed after they were removed")
	}
	lim6.Limits = &model.Limits{SourcePPS: 800, SourceBurst: 80}
	watched(t, r, 13, lim6)
	r.Delete(model.KindEIP, "2001:db8:a::7", 14)
	r.Commit(14, false)
	if _, ok := fake.LimitMap[a("2001:db8:a::7")]; ok || len(fake.LimitMap) != 1 {
		t.Fatalf("limits %v after the IPv6 EIP was deleted", fake.LimitMap)
	}
}

package edge

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// bwRegion: edge-a1 and edge-a2 in pop-a (198.51.100.0/24, edge-a2 with
// BGP), pop-b for 203.0.113.0/24; package shop of .7 and .9 (bound, in
// pop-a), 203.0.113.5 (bound, pop-b's) and .8 (unbound).
func bwRegion() []model.Object {
	objs := region()
	objs[4] = &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		BGP: &model.SetBGP{ASN: 64512},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")},
			{Name: "edge-a2", Underlay: a("198.18.0.2"), BGP: &model.NodeBGP{RouterID: a("198.18.0.2"),
				NextHop: a("198.18.100.2"), Peers: []model.BGPPeer{{Address: a("198.18.100.0"), ASN: 64500}}}}}}
	return append(objs,
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-b1", Underlay: a("198.18.0.9")}}},
		&model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}},
		&model.EIP{Address: a("203.0.113.5"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}},
		&model.BandwidthPackage{Name: "shop", Capacity: 120_000_000, EIPs: []model.PackageEIP{
			{Address: a("198.51.100.7")}, {Address: a("198.51.100.8")}, {Address: a("198.51.100.9")}, {Address: a("203.0.113.5")}}},
	)
}

// TestEdgeBandwidth: the edge carries the packaged EIPs its set may see
// (routed, in its set's prefix), enforces the static split divided over
// its set's live members, reports their ingress (the rx counters) to its
// zone, and enforces the limits pushed for it.
func TestEdgeBandwidth(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	mem := bwstore.NewMem(nil)
	limits := &dataplane.FakeBandwidth{}
	meter := newRateMeter(RateConfig{})
	h, err := r.EnableBandwidth(BandwidthConfig{Store: mem, Zone: "pop", Interval: 50 * time.Millisecond}, meter, limits, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A limit a previous run left: kept until the desired state is read,
	// then removed (.8 is unbound: not carried).
	limits.SetEIPBandwidth(a("198.51.100.8"), 8_000_000, 0)
	h.Step(ctx)
	if got, _ := limits.EIPBandwidths(); len(got) != 1 {
		t.Fatalf("limits changed before the first commit: %v", got)
	}
	load(t, r, 10, bwRegion()...)
	h.Step(ctx)
	// 120 Mbit/s over 4 EIPs: 30 Mbit/s each; edge-a2 speaks BGP and
	// does not announce yet, so edge-a1 is pop-a's only live member.
	want := map[netip.Addr]dataplane.Bandwidth{
		a("198.51.100.7"): {Rate: 30_000_000, Burst: 75_000},
		a("198.51.100.9"): {Rate: 30_000_000, Burst: 75_000},
	}
	if got, _ := limits.EIPBandwidths(); !sameBW(got, want) {
		t.Fatalf("static split: %v, want %v", got, want)
	}
	// edge-a2 announces: two live members share each EIP's static share.
	r.SetAnnouncements(map[string]model.Announcement{"k": {Set: "pop-a", Edge: "edge-a2"}})
	h.Enforce()
	for k := range want {
		want[k] = dataplane.Bandwidth{Rate: 15_000_000, Burst: 37_500}
	}
	if got, _ := limits.EIPBandwidths(); !sameBW(got, want) {
		t.Fatalf("static split over 2 edges: %v, want %v", got, want)
	}
	// .9 pulled out into the dedicated set hot (one edge): pop-a still
	// carries it (traffic may come its way while routes converge), and
	// the static share divides over the three live edges of both sets.
	watched(t, r, 11, &model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-h1", Underlay: a("198.18.0.20")}}},
		&model.EIP{Address: a("198.51.100.9"), Set: "hot", Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	h.Enforce()
	if got, _ := limits.EIPBandwidths(); got[a("198.51.100.9")] != (dataplane.Bandwidth{Rate: 10_000_000, Burst: 25_000}) {
		t.Fatalf("pulled out: %v, want .9 at 10 Mbit/s (30 over 3 edges)", got)
	}
	watched(t, r, 12, &model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})

	// A reading of the routes' counters to measure from.
	time.Sleep(30 * time.Millisecond) // beyond the meter's freshness (interval/2)
	h.Step(ctx)
	// Traffic to .7 (its route's rx counters).
	slot := fake.Routes()[a("198.51.100.7")].StatsIdx
	fake.Counters[slot] = dataplane.Counters{RxBytes: 500_000, RxPackets: 500, TxBytes: 7}
	time.Sleep(100 * time.Millisecond) // beyond the meter's freshness (interval/2)
	h.Step(ctx)
	snap, err := mem.ReadReports(ctx, "pop")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Reports) != 2 || snap.Reports[0].EIP != a("198.51.100.7") || snap.Reports[0].Dir != bwstore.Ingress ||
		snap.Reports[0].BytesPerSec < 500_000 || snap.Reports[1].EIP != a("198.51.100.9") || snap.Reports[1].BytesPerSec != 0 {
		t.Fatalf("reports %+v: want .7's ingress and .9 at 0", snap.Reports)
	}
	// A limit for 203.0.113.5 (pop-b's) is ignored; .7's applies.
	if err := mem.WriteLimits(ctx, "pop", "edge-a1", 10*time.Second, bwstore.Limits{Generation: 5, Limits: []bwstore.Limit{
		{EIP: a("198.51.100.7"), Dir: bwstore.Ingress, RateBytes: 1_000_000, BurstBytes: 30_000},
		{EIP: a("203.0.113.5"), Dir: bwstore.Ingress, RateBytes: 1_000_000, BurstBytes: 30_000},
	}}); err != nil {
		t.Fatal(err)
	}
	h.Step(ctx)
	want[a("198.51.100.7")] = dataplane.Bandwidth{Rate: 8_000_000, Burst: 30_000}
	if got, _ := limits.EIPBandwidths(); !sameBW(got, want) {
		t.Fatalf("managed: %v, want %v", got, want)
	}
	if st := h.Status(); st.Counts.Ignored != 1 || !st.Managed {
		t.Fatalf("status %+v: want managed, one limit ignored", st)
	}
	// .9 unbound (no route): its limit goes at the next commit.
	watched(t, r, 13, &model.EIP{Address: a("198.51.100.9")})
	h.Enforce()
	delete(want, a("198.51.100.9"))
	if got, _ := limits.EIPBandwidths(); !sameBW(got, want) {
		t.Fatalf("after unbinding .9: %v, want %v", got, want)
	}
	// The package deleted: no limits at all.
	r.Delete(model.KindBandwidthPackage, "shop", 14)
	r.Commit(14, false)
	h.Enforce()
	if got, _ := limits.EIPBandwidths(); len(got) != 0 {
		t.Fatalf("package deleted: %v, want no limit", got)
	}
}

func sameBW(x, y map[netip.Addr]dataplane.Bandwidth) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if y[k] != v {
			return false
		}
	}
	return true
}

// TestEdgeBandwidthIPv6: an IPv6 EIP in a package gets its Internet ->
// EIP limit as an IPv4 one does (issue 21): carried while routed, its
// share of the static split, its ingress reported from its route's rx
// counters, the limit pushed for it enforced; unbound, its limit goes.
func TestEdgeBandwidthIPv6(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	mem := bwstore.NewMem(nil)
	limits := &dataplane.FakeBandwidth{}
	meter := newRateMeter(RateConfig{})
	h, err := r.EnableBandwidth(BandwidthConfig{Store: mem, Zone: "pop", Interval: 50 * time.Millisecond}, meter, limits, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e4, e6 := a("198.51.100.7"), a("2001:db8:a::7")
	load(t, r, 10, append(region6(), &model.BandwidthPackage{Name: "shop", Capacity: 120_000_000, EIPs: []model.PackageEIP{
		{Address: e4}, {Address: e6}, {Address: a("2001:db8:a::8")}}})...)
	h.Step(ctx)
	// 120 Mbit/s over 3 EIPs: 40 Mbit/s each; 2001:db8:a::8 is unbound
	// (no route: not carried).
	want := map[netip.Addr]dataplane.Bandwidth{e4: {Rate: 40_000_000, Burst: 100_000}, e6: {Rate: 40_000_000, Burst: 100_000}}
	if got, _ := limits.EIPBandwidths(); !sameBW(got, want) {
		t.Fatalf("static split: %v, want %v", got, want)
	}
	time.Sleep(30 * time.Millisecond) // beyond the meter's freshness (interval/2)
	h.Step(ctx)
	slot := fake.Routes()[e6].StatsIdx
	fake.Counters[slot] = dataplane.Counters{RxBytes: 500_000, RxPackets: 500}
	time.Sleep(100 * time.Millisecond)
	h.Step(ctx)
	snap, err := mem.ReadReports(ctx, "pop")
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, rep := range snap.Reports {
		if rep.EIP == e6 && rep.Dir == bwstore.Ingress && rep.BytesPerSec >= 500_000 {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("reports %+v: want %v's ingress", snap.Reports, e6)
	}
	if err := mem.WriteLimits(ctx, "pop", "edge-a1", 10*time.Second, bwstore.Limits{Generation: 5, Limits: []bwstore.Limit{
		{EIP: e6, Dir: bwstore.Ingress, RateBytes: 1_000_000, BurstBytes: 30_000},
	}}); err != nil {
		t.Fatal(err)
	}
	h.Step(ctx)
	if got, _ := limits.EIPBandwidths(); got[e6] != (dataplane.Bandwidth{Rate: 8_000_000, Burst: 30_000}) {
		t.Fatalf("managed: %v, want %v at 8 Mbit/s", got, e6)
	}
	watched(t, r, 11, &model.EIP{Address: e6})
	h.Enforce()
	if got, _ := limits.EIPBandwidths(); got[e6] != (dataplane.Bandwidth{}) {
		t.Fatalf("after unbinding %v: %v, want no limit for it", e6, got)
	}
}

package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestAgentBandwidth: the agent reports its packaged EIPs' egress (the tx
// counters of their stats slots) to its host's AZ, enforces the static
// split until limits come, then the limits its zone manager pushed; an
// EIP in no package gets no limit, and one that leaves the host loses its
// limit at once.
func TestAgentBandwidth(t *testing.T) {
	st := state(t)
	// A second EIP on az1-h1 (g2) and a package of .7 and an EIP of another host.
	for _, o := range []model.Object{
		&model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az1-h1", Guest: "g2"}},
		&model.BandwidthPackage{Name: "shop", Capacity: 100_000_000, EIPs: []model.PackageEIP{{Address: a("198.51.100.7")}, {Address: a("198.51.100.8")}}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	mem := bwstore.NewMem(nil)
	limits := &dataplane.FakeBandwidth{}
	// A limit a previous run left on .9, which is in no package.
	limits.SetEIPBandwidth(a("198.51.100.9"), 8_000_000, 0)
	h, err := r.EnableBandwidth(BandwidthConfig{Store: mem, Interval: 50 * time.Millisecond}, limits, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h.Step(ctx) // before the first Handle: nothing known, nothing changed
	if got, _ := limits.EIPBandwidths(); len(got) != 1 {
		t.Fatalf("limits changed before the state was read: %v", got)
	}
	r.Handle(st, 3, nil, true)
	h.Step(ctx)
	// .7 is the only EIP of the package on this host, and carries half of
	// it in the static split (weights 1 and 1).
	want := map[netip.Addr]dataplane.Bandwidth{a("198.51.100.7"): {Rate: 50_000_000, Burst: 125_000}}
	if got, _ := limits.EIPBandwidths(); len(got) != 1 || got[a("198.51.100.7")] != want[a("198.51.100.7")] {
		t.Fatalf("static split: %v, want %v", got, want)
	}
	// Traffic from g1 through .7: its tx counters move.
	idx := r.Programmed()[a("198.51.100.7")].StatsIdx
	fake.Counters[idx] = dataplane.Counters{TxBytes: 1_000_000, TxPackets: 1000, RxBytes: 9_999_999}
	time.Sleep(100 * time.Millisecond)
	h.Step(ctx)
	snap, err := mem.ReadReports(ctx, "az1")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Reports) != 1 || snap.Reports[0].Reporter != "az1-h1" || snap.Reports[0].EIP != a("198.51.100.7") ||
		snap.Reports[0].Dir != bwstore.Egress || snap.Reports[0].BytesPerSec < 1_000_000 || snap.Reports[0].BytesPerSec > 10_000_000 {
		t.Fatalf("reports %+v: want .7's egress (1 MB over about 0.1 s) from az1-h1 in az1", snap.Reports)
	}
	// The zone manager pushes 2 MB/s.
	if err := mem.WriteLimits(ctx, "az1", "az1-h1", 10*time.Second, bwstore.Limits{Generation: 1,
		Limits: []bwstore.Limit{{EIP: a("198.51.100.7"), Dir: bwstore.Egress, RateBytes: 2_000_000, BurstBytes: 40_000}}}); err != nil {
		t.Fatal(err)
	}
	h.Step(ctx)
	if got, _ := limits.EIPBandwidths(); got[a("198.51.100.7")] != (dataplane.Bandwidth{Rate: 16_000_000, Burst: 40_000}) {
		t.Fatalf("managed: %v, want 16 Mbit/s with a 40 kB burst", got)
	}
	ns, _ := h.NodeStatus()
	if ns.Zone != "az1" || ns.Direction != "egress" || ns.Mode != "managed" || ns.EIPs["198.51.100.7"].Limit != 16_000_000 {
		t.Fatalf("status %+v", ns)
	}
	// The host's object goes (the desired state cannot be computed):
	// the agent keeps forwarding what it holds, and .7 keeps its limit.
	gone := state(t)
	gone.Remove(model.KindHost, "az1-h1")
	r.Handle(gone, 4, nil, false)
	h.Enforce()
	h.Step(ctx)
	if got, _ := limits.EIPBandwidths(); got[a("198.51.100.7")] != (dataplane.Bandwidth{Rate: 16_000_000, Burst: 40_000}) {
		t.Fatalf("after the host's object went: %v, want .7's limit kept", got)
	}
	r.Handle(st, 5, nil, false)
	// .7 is unbound: its limit goes with the next change, without
	// waiting for the interval (the host is kicked; Enforce here).
	if _, err := st.Put(&model.EIP{Address: a("198.51.100.7")}); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 6, nil, false)
	h.Enforce()
	if got, _ := limits.EIPBandwidths(); len(got) != 0 {
		t.Fatalf("after unbinding: %v, want no limit", got)
	}
}

// TestAgentBandwidthIPv6: an IPv6 EIP in a package gets its guest ->
// Internet limit as an IPv4 one does (issue 21): its share of the static
// split beside the IPv4 EIP of its guest, then the limit its zone manager
// pushes (keyed by the IPv6 address in the store), reported by its tx
// counters; unbound, its limit goes.
func TestAgentBandwidthIPv6(t *testing.T) {
	st := state6(t)
	e4, e6 := a("198.51.100.7"), a("2001:db8:a::7")
	if _, err := st.Put(&model.BandwidthPackage{Name: "shop", Capacity: 100_000_000,
		EIPs: []model.PackageEIP{{Address: e4}, {Address: e6}}}); err != nil {
		t.Fatal(err)
	}
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	mem := bwstore.NewMem(nil)
	limits := &dataplane.FakeBandwidth{}
	h, err := r.EnableBandwidth(BandwidthConfig{Store: mem, Interval: 50 * time.Millisecond}, limits, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.Handle(st, 3, nil, true)
	h.Step(ctx)
	half := dataplane.Bandwidth{Rate: 50_000_000, Burst: 125_000}
	if got, _ := limits.EIPBandwidths(); len(got) != 2 || got[e4] != half || got[e6] != half {
		t.Fatalf("static split: %v, want half each for %v and %v", got, e4, e6)
	}
	p, ok := r.Programmed()[e6]
	if !ok {
		t.Fatalf("IPv6 EIP %v not programmed", e6)
	}
	fake.Counters[p.StatsIdx] = dataplane.Counters{TxBytes: 1_000_000, TxPackets: 1000}
	time.Sleep(100 * time.Millisecond)
	h.Step(ctx)
	snap, err := mem.ReadReports(ctx, "az1")
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, rep := range snap.Reports {
		if rep.EIP == e6 && rep.Dir == bwstore.Egress && rep.Reporter == "az1-h1" && rep.BytesPerSec >= 1_000_000 {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("reports %+v: want %v's egress from az1-h1", snap.Reports, e6)
	}
	if err := mem.WriteLimits(ctx, "az1", "az1-h1", 10*time.Second, bwstore.Limits{Generation: 1,
		Limits: []bwstore.Limit{{EIP: e6, Dir: bwstore.Egress, RateBytes: 2_000_000, BurstBytes: 40_000},
			{EIP: e4, Dir: bwstore.Egress, RateBytes: 1_000_000, BurstBytes: 20_000}}}); err != nil {
		t.Fatal(err)
	}
	h.Step(ctx)
	got, _ := limits.EIPBandwidths()
	if got[e6] != (dataplane.Bandwidth{Rate: 16_000_000, Burst: 40_000}) || got[e4] != (dataplane.Bandwidth{Rate: 8_000_000, Burst: 20_000}) {
		t.Fatalf("managed: %v, want 16 Mbit/s for %v and 8 Mbit/s for %v", got, e6, e4)
	}
	if ns, _ := h.NodeStatus(); ns.EIPs[e6.String()].Limit != 16_000_000 {
		t.Fatalf("status %+v", ns)
	}
	put6(t, st, eip6("2001:db8:a::7", "", ""))
	r.Handle(st, 4, nil, false)
	h.Enforce()
	if got, _ := limits.EIPBandwidths(); len(got) != 1 || got[e6] != (dataplane.Bandwidth{}) {
		t.Fatalf("after unbinding the IPv6 EIP: %v, want only %v's limit", got, e4)
	}
}

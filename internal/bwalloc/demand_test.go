package bwalloc

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func TestEstimator(t *testing.T) {
	type step struct {
		at      int     // seconds
		sample  *Sample // nil: no report this round
		ceiling uint64
		want    Demand
	}
	M := uint64(1_000_000)
	cases := []struct {
		name  string
		steps []step
	}{
		{"steady: peak × 1.1", []step{
			{0, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
			{1, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
		}},
		{"peak over the window, then it decays (default window 2 s)", []step{
			{0, &Sample{Rate: 20 * M, Limit: 50 * M}, 0, Demand{Rate: 22 * M}},
			{1, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 22 * M}},
			{2, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
			{3, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
		}},
		{"pinned at the limit probes upward ×2", []step{
			{0, &Sample{Rate: 19 * M, Limit: 20 * M}, 0, Demand{Rate: 40 * M, Pinned: true}},
			{1, &Sample{Rate: 40 * M, Limit: 40 * M}, 0, Demand{Rate: 80 * M, Pinned: true}},
			{2, &Sample{Rate: 50 * M, Limit: 80 * M}, 0, Demand{Rate: 55 * M}},
		}},
		{"probe bounded by the ceiling", []step{
			{0, &Sample{Rate: 20 * M, Limit: 20 * M}, 30 * M, Demand{Rate: 30 * M, Pinned: true}},
		}},
		{"drops count as demand and as pinned", []step{
			{0, &Sample{Rate: 10 * M, Dropped: 90 * M, Limit: 10 * M}, 0, Demand{Rate: 110 * M, Pinned: true}},
		}},
		{"heavy drops measure the demand: no probe beyond", []step{
			{0, &Sample{Rate: 20 * M, Dropped: 10 * M, Limit: 20 * M}, 0, Demand{Rate: 33 * M, Pinned: true}},
			{1, &Sample{Rate: 30 * M, Dropped: 3 * M, Limit: 30 * M}, 0, Demand{Rate: 36_300_000, Pinned: true}},
		}},
		{"light drops (a responsive aggregate) still probe", []step{
			{0, &Sample{Rate: 20 * M, Dropped: 1_999_999, Limit: 20 * M}, 0, Demand{Rate: 40 * M, Pinned: true}},
		}},
		{"drops well below the limit (a lagging host split) do not pin", []step{
			{0, &Sample{Rate: 9 * M, Dropped: 1 * M, Limit: 11 * M}, 0, Demand{Rate: 11 * M}},
			{1, &Sample{Rate: 10 * M, Dropped: 200_000, Limit: 25 * M}, 0, Demand{Rate: 11_220_000}},
		}},
		{"drops with no known limit pin", []step{
			{0, &Sample{Rate: 10 * M, Dropped: 100_000}, 0, Demand{Rate: 11_110_000, Pinned: true}},
		}},
		{"below 95 % of the limit is not pinned", []step{
			{0, &Sample{Rate: 94 * M, Limit: 100 * M}, 0, Demand{Rate: 103_400_000}},
		}},
		{"idle: MinDemand", []step{
			{0, &Sample{Limit: 0}, 0, Demand{Rate: M}},
		}},
		{"missing report keeps the estimate (stale), then expires", []step{
			{0, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
			{1, nil, 0, Demand{Rate: 11 * M, Stale: true}},
			{5, nil, 0, Demand{Rate: 11 * M, Stale: true}},
			{6, nil, 0, Demand{Rate: M, Expired: true}},
			{7, &Sample{Rate: 10 * M, Limit: 50 * M}, 0, Demand{Rate: 11 * M}},
		}},
		{"never reported: expired", []step{
			{0, nil, 0, Demand{Rate: M, Expired: true}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewEstimator[netip.Addr](EstimatorConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				if s.sample != nil {
					e.Observe(ip(1), sec(s.at), *s.sample)
				}
				if got := e.Demand(ip(1), sec(s.at), s.ceiling); got != s.want {
					t.Fatalf("at %ds: %+v, want %+v", s.at, got, s.want)
				}
			}
		})
	}
}

func TestEstimatorHousekeeping(t *testing.T) {
	e, _ := NewEstimator[HostKey](EstimatorConfig{})
	k := HostKey{Addr: ip(1), Host: "az1-h1"}
	e.Observe(k, sec(10), Sample{Rate: 5_000_000})
	if e.Observe(k, sec(9), Sample{Rate: 50_000_000}) {
		t.Fatal("an older report was taken")
	}
	if d := e.Demand(k, sec(10), 0); d.Rate != 5_500_000 {
		t.Fatalf("%+v", d)
	}
	if n := e.Prune(sec(14)); n != 0 || e.Len() != 1 {
		t.Fatalf("pruned %d within grace", n)
	}
	if n := e.Prune(sec(16)); n != 1 || e.Len() != 0 {
		t.Fatalf("pruned %d after grace", n)
	}
	e.Observe(k, sec(20), Sample{Rate: 5_000_000})
	e.Forget(k)
	if d := e.Demand(k, sec(20), 0); !d.Expired {
		t.Fatalf("forgotten key: %+v", d)
	}
}

func TestEstimatorConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  EstimatorConfig
		want string
	}{
		{EstimatorConfig{Margin: 1.02}, "margin 1.02: must exceed 1/pinnedRatio"},
		{EstimatorConfig{PinnedRatio: 1.5}, "pinnedRatio 1.5"},
		{EstimatorConfig{ProbeFactor: 0.5}, "probeFactor 0.5"},
		{EstimatorConfig{OfferedDrops: -1}, "offeredDrops -1"},
		{EstimatorConfig{OfferedDrops: math.NaN()}, "offeredDrops NaN"},
		{EstimatorConfig{Window: -time.Second}, "window -1s"},
		{EstimatorConfig{Grace: -time.Second}, "grace -1s"},
	} {
		if _, err := NewEstimator[int](tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	e, err := NewEstimator[int](EstimatorConfig{})
	if err != nil || e.Config() != DefaultEstimatorConfig {
		t.Fatalf("defaults: %+v %v", e.Config(), err)
	}
}

// TestClosedLoop runs estimator and allocator against EIPs with a true
// demand that the data plane caps at their limit (no drop counts: the
// hardest case for probing), starting from the static split and going
// through demand steps, and checks that after each step the limits reach
// the oracle's max-min shares (true demand known) within a few rounds,
// stay there, and the package stays used (≥ 95 % when contended).
func TestClosedLoop(t *testing.T) {
	M := uint64(1_000_000)
	capacity := 100 * M
	members := []EIP{
		{Addr: ip(1), Weight: 1},
		{Addr: ip(2), Weight: 1},
		{Addr: ip(3), Weight: 2},
		{Addr: ip(4), Weight: 1, Min: 30 * M},
		{Addr: ip(5), Weight: 1, Max: 5 * M},
	}
	phases := [][]uint64{
		{10 * M, 80 * M, 80 * M, 40 * M, 50 * M},
		{60 * M, 80 * M, 80 * M, 40 * M, 50 * M}, // step up of a small one
		{60 * M, 2 * M, 80 * M, 40 * M, 50 * M},  // step down frees capacity
		{0, 0, 0, 80 * M, 0},                     // one alone: headroom
	}
	est, _ := NewEstimator[netip.Addr](EstimatorConfig{})
	var a Allocator
	static, _ := StaticSplit(capacity, members)
	limits := make([]uint64, len(members))
	for i, g := range static.Grants {
		limits[i] = g.Limit
	}
	in := make([]EIP, len(members))
	var grants []Grant
	round := 0
	for p, truth := range phases {
		oracle := make([]EIP, len(members))
		for i := range members {
			oracle[i] = members[i]
			oracle[i].Demand = truth[i]
		}
		want, _ := a.Package(capacity, oracle, Options{HoldSpare: true}, nil)
		converged := -1
		var prev []uint64
		for r := 0; r < 15; r++ {
			now := sec(round)
			round++
			var used uint64
			for i, m := range members {
				rate := min(truth[i], limits[i])
				used += rate
				est.Observe(m.Addr, now, Sample{Rate: rate, Limit: limits[i]})
				in[i] = m
				in[i].Demand = est.Demand(m.Addr, now, capOf(m.Max, capacity)).Rate
			}
			res, err := a.Package(capacity, in, Options{}, grants)
			if err != nil {
				t.Fatal(err)
			}
			grants = res.Grants
			// Converged: every EIP gets at least 95 % of its oracle share
			// (its demand, or its fair share when contended), and a
			// contended package's EIPs get at most 115 % of it.
			ok := true
			for i, g := range grants {
				limits[i] = g.Limit
				w := float64(want.Grants[i].Limit)
				if float64(g.Limit) < 0.95*w || (want.Contended && float64(g.Limit) > 1.15*w) {
					ok = false
				}
			}
			if ok && converged < 0 {
				converged = r
			}
			// Stable when demand is stable: once the window has passed
			// since convergence, the limits do not move at all.
			if converged >= 0 && r > converged+4 && !slices.Equal(limits, prev) {
				t.Fatalf("phase %d round %d: limits moved under constant demand: %v, then %v", p, r, prev, limits)
			}
			prev = slices.Clone(limits)
			if !ok && converged >= 0 {
				t.Fatalf("phase %d round %d: left the fair shares after converging at %d: %v want %+v", p, r, converged, limits, want.Grants)
			}
			if want.Contended && converged >= 0 && r > converged+1 && float64(used) < 0.95*float64(capacity) {
				t.Fatalf("phase %d round %d: used %d of %d", p, r, used, capacity)
			}
		}
		if converged < 0 || converged > 4 {
			t.Fatalf("phase %d converged at round %d: limits %v, oracle %+v", p, converged, limits, want.Grants)
		}
		t.Logf("phase %d: converged after %d rounds: %v", p, converged, limits)
	}
}

package bwalloc

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// ip returns the i-th test address in 198.18.0.0/15.
func ip(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)})
}

func TestPackageTable(t *testing.T) {
	cases := []struct {
		name      string
		capacity  uint64
		eips      []EIP
		opts      Options
		limits    []uint64 // by address order = input order here
		contended bool
		scaled    bool
		err       string
	}{
		{name: "spare handed out as equal headroom", capacity: 100,
			eips:   []EIP{{Demand: 10}, {Demand: 20}},
			limits: []uint64{45, 55}},
		{name: "spare held", capacity: 100, opts: Options{HoldSpare: true},
			eips:   []EIP{{Demand: 10}, {Demand: 20}},
			limits: []uint64{10, 20}},
		{name: "headroom by weight", capacity: 100,
			eips:   []EIP{{Demand: 10, Weight: 3}, {Demand: 10, Weight: 1}},
			limits: []uint64{70, 30}},
		{name: "contended equal weights", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 80}, {Demand: 80}},
			limits: []uint64{50, 50}},
		{name: "contended weights 1:3", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 100, Weight: 1}, {Demand: 100, Weight: 3}},
			limits: []uint64{25, 75}},
		{name: "max-min: small demand met, rest shared", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 10}, {Demand: 100}, {Demand: 100}},
			limits: []uint64{10, 45, 45}},
		{name: "min honoured when demanded", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 100, Min: 60}, {Demand: 100}},
			limits: []uint64{60, 40}},
		{name: "min below fair share changes nothing", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 100, Min: 20}, {Demand: 100}},
			limits: []uint64{50, 50}},
		{name: "min not demanded is not reserved", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 10, Min: 60}, {Demand: 100}},
			limits: []uint64{10, 90}},
		{name: "max caps contended", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 100, Max: 20}, {Demand: 100}},
			limits: []uint64{20, 80}},
		{name: "max caps headroom", capacity: 100,
			eips:   []EIP{{Demand: 5, Max: 20}, {Demand: 5}},
			limits: []uint64{20, 80}},
		{name: "everyone capped leaves spare", capacity: 100,
			eips:   []EIP{{Demand: 5, Max: 20}, {Demand: 50, Max: 30}},
			limits: []uint64{20, 30}},
		{name: "rounding down never exceeds", capacity: 100, contended: true,
			eips:   []EIP{{Demand: 100}, {Demand: 100}, {Demand: 100}},
			limits: []uint64{33, 33, 33}},
		{name: "mins above capacity scaled", capacity: 100, contended: true, scaled: true,
			eips:   []EIP{{Demand: 100, Min: 100}, {Demand: 100, Min: 100}},
			limits: []uint64{50, 50}},
		{name: "zero capacity", capacity: 0,
			eips:   []EIP{{Demand: 100, Min: 10}, {Demand: 0}},
			limits: []uint64{0, 0}},
		{name: "no demand, headroom only", capacity: 90,
			eips:   []EIP{{}, {}, {}},
			limits: []uint64{30, 30, 30}},
		{name: "capacity above MaxRate", capacity: MaxRate + 1,
			eips: []EIP{{Demand: 1}}, err: "above the most the allocator handles"},
		{name: "capacity at MaxRate", capacity: MaxRate, contended: true,
			eips:   []EIP{{Demand: MaxRate, Weight: 1}, {Demand: MaxRate, Weight: 3}},
			limits: []uint64{MaxRate / 4, MaxRate / 4 * 3}},
		{name: "min above max", capacity: 100,
			eips: []EIP{{Demand: 1, Min: 50, Max: 40}}, err: "min 50 above max 40"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.eips {
				tc.eips[i].Addr = ip(i + 1)
			}
			var a Allocator
			res, err := a.Package(tc.capacity, tc.eips, tc.opts, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, g := range res.Grants {
				got = append(got, g.Limit)
			}
			if !slices.Equal(got, tc.limits) {
				t.Errorf("limits %v, want %v (result %+v)", got, tc.limits, res)
			}
			if res.Contended != tc.contended || res.MinsScaled != tc.scaled {
				t.Errorf("contended %v scaled %v, want %v %v", res.Contended, res.MinsScaled, tc.contended, tc.scaled)
			}
			checkProps(t, tc.capacity, tc.eips, tc.opts, res)
		})
	}
}

func TestPackageDuplicate(t *testing.T) {
	var a Allocator
	_, err := a.Package(10, []EIP{{Addr: ip(1)}, {Addr: ip(2)}, {Addr: ip(1)}}, Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "198.18.0.1 given twice") {
		t.Fatalf("error %v", err)
	}
	_, err = a.Package(10, []EIP{{}}, Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "no address") {
		t.Fatalf("error %v", err)
	}
}

// checkProps checks the allocation properties of issue 10: total ≤
// capacity; every limit ≤ max; mins honoured when demanded; equal
// limit/weight among EIPs that want more than they get (above their
// guarantee); work-conserving; sorted by address.
func checkProps(t testing.TB, capacity uint64, eips []EIP, opts Options, res Result) {
	t.Helper()
	if len(res.Grants) != len(eips) {
		t.Fatalf("%d grants for %d EIPs", len(res.Grants), len(eips))
	}
	by := map[netip.Addr]EIP{}
	for _, e := range eips {
		by[e.Addr] = e
	}
	var sum uint64
	var sumMin uint64
	for _, e := range eips {
		sumMin += e.Min
	}
	for k, g := range res.Grants {
		e := by[g.Addr]
		if k > 0 && res.Grants[k-1].Addr.Compare(g.Addr) >= 0 {
			t.Fatalf("grants not sorted at %d", k)
		}
		sum += g.Limit
		c := capOf(e.Max, capacity)
		if g.Limit > c {
			t.Fatalf("%v: limit %d above its cap %d (max %d, capacity %d)", g.Addr, g.Limit, c, e.Max, capacity)
		}
		if g.Want != min(e.Demand, c) {
			t.Fatalf("%v: want %d, expected %d", g.Addr, g.Want, min(e.Demand, c))
		}
		if !res.MinsScaled && g.Limit < min(e.Min, g.Want) {
			t.Fatalf("%v: limit %d below min(min %d, want %d)", g.Addr, g.Limit, e.Min, g.Want)
		}
		if !res.Contended && g.Limit < g.Want {
			t.Fatalf("%v: uncontended but limit %d < want %d", g.Addr, g.Limit, g.Want)
		}
		if opts.HoldSpare && g.Limit > g.Want {
			t.Fatalf("%v: spare held but limit %d > want %d", g.Addr, g.Limit, g.Want)
		}
	}
	if sum > capacity {
		t.Fatalf("total %d above capacity %d", sum, capacity)
	}
	if sum != res.Allocated {
		t.Fatalf("Allocated %d, sum %d", res.Allocated, sum)
	}
	n := uint64(len(eips))
	if res.Contended && sum+n < capacity {
		t.Fatalf("contended but total %d < capacity %d - %d", sum, capacity, n)
	}
	if !opts.HoldSpare && !res.Contended {
		var sumCap uint64
		for _, e := range eips {
			sumCap += capOf(e.Max, capacity)
		}
		if sum+n < min(capacity, sumCap) {
			t.Fatalf("spare not handed out: total %d, capacity %d, Σcap %d", sum, capacity, sumCap)
		}
	}
	// Max-min fairness by weight: an unmet EIP above its guarantee is at
	// the water level; no unmet EIP is below it. Rounding costs each
	// limit up to 2 bits/s (floor, then the excess taken back).
	if res.Contended {
		for _, g := range res.Grants {
			if !g.Unmet() {
				continue
			}
			w := float64(max(by[g.Addr].Weight, 1))
			per := float64(g.Limit) / w
			tol := 2/w + 1e-9*res.Level
			if per+tol < res.Level {
				t.Fatalf("%v unmet with %v per weight, below level %v", g.Addr, per, res.Level)
			}
			if g.Limit > g.Guarantee && per > res.Level+1e-9*res.Level+1e-9 {
				t.Fatalf("%v unmet above its guarantee with %v per weight, above level %v", g.Addr, per, res.Level)
			}
		}
	}
}

// randPackage draws a package: sizes, weights, mins (usually within
// capacity), maxes and demands spread over several orders of magnitude.
func randPackage(r *rand.Rand) (uint64, []EIP) {
	n := 1 + r.IntN(40)
	capacity := uint64(1 + r.Int64N(1e11))
	if r.IntN(10) == 0 {
		capacity = uint64(r.IntN(1000))
	}
	eips := make([]EIP, n)
	var sumMin uint64
	for i := range eips {
		e := EIP{Addr: ip(r.IntN(1 << 17))}
		for slices.ContainsFunc(eips[:i], func(x EIP) bool { return x.Addr == e.Addr }) {
			e.Addr = ip(r.IntN(1 << 17))
		}
		if r.IntN(3) == 0 {
			e.Weight = uint32(r.IntN(100))
		}
		if r.IntN(3) == 0 && capacity > 0 {
			e.Min = uint64(r.Int64N(int64(capacity/uint64(n)) + 1))
			if r.IntN(20) == 0 {
				e.Min = uint64(r.Int64N(int64(capacity) + 1)) // may exceed
			}
		}
		sumMin += e.Min
		if r.IntN(3) == 0 {
			e.Max = e.Min + uint64(r.Int64N(int64(capacity)+1))
		}
		switch r.IntN(4) {
		case 0:
			e.Demand = 0
		case 1:
			e.Demand = uint64(r.Int64N(int64(capacity)/int64(n) + 1))
		default:
			e.Demand = uint64(r.Int64N(2*int64(capacity) + 1))
		}
		eips[i] = e
	}
	return capacity, eips
}

// TestPackageProperties is the property loop: random packages, every
// property, the same result for any input order, and a small change for
// a small change of demand.
func TestPackageProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 4))
	iters := 20000
	if testing.Short() {
		iters = 2000
	}
	var a, b Allocator
	for it := 0; it < iters; it++ {
		capacity, eips := randPackage(r)
		opts := Options{HoldSpare: r.IntN(4) == 0}
		res, err := a.Package(capacity, eips, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkProps(t, capacity, eips, opts, res)

		// Same input, any order → same output.
		perm := slices.Clone(eips)
		r.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		res2, err := b.Package(capacity, perm, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Grants, res2.Grants) {
			t.Fatalf("iteration %d: order changed the allocation", it)
		}

		// Tiny noise → tiny change: move every demand by up to 0.1 %;
		// the limits move (L1) by at most 4× the noise plus rounding.
		noisy := slices.Clone(eips)
		var noise float64
		for i := range noisy {
			d := noisy[i].Demand
			delta := uint64(float64(d) * 0.001 * r.Float64())
			if r.IntN(2) == 0 {
				noisy[i].Demand = d + delta
			} else {
				noisy[i].Demand = d - delta
			}
			noise += float64(delta)
		}
		res3, err := b.Package(capacity, noisy, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkProps(t, capacity, noisy, opts, res3)
		var moved float64
		for k := range res.Grants {
			moved += math.Abs(float64(res.Grants[k].Limit) - float64(res3.Grants[k].Limit))
		}
		if moved > 4*noise+4*float64(len(eips)) {
			t.Fatalf("iteration %d: demand noise %v moved limits by %v", it, noise, moved)
		}
	}
}

func TestStaticSplit(t *testing.T) {
	eips := []EIP{
		{Addr: ip(1), Weight: 1, Demand: 12345},
		{Addr: ip(2), Weight: 3},
		{Addr: ip(3), Weight: 1, Max: 10_000_000},
		{Addr: ip(4), Weight: 1, Min: 40_000_000},
	}
	res, err := StaticSplit(100_000_000, eips)
	if err != nil {
		t.Fatal(err)
	}
	// λ: 40M to ip4 by min; ip3 capped at 10M; λ·(1+3) = 50M → 12.5M per weight.
	want := []uint64{12_500_000, 37_500_000, 10_000_000, 40_000_000}
	for k, g := range res.Grants {
		if g.Limit != want[k] {
			t.Errorf("%v: %d, want %d", g.Addr, g.Limit, want[k])
		}
	}
	// Without min or max: capacity × weight share.
	res, _ = StaticSplit(100, []EIP{{Addr: ip(1), Weight: 1}, {Addr: ip(2), Weight: 4}})
	if res.Grants[0].Limit != 20 || res.Grants[1].Limit != 80 {
		t.Errorf("weight share: %+v", res.Grants)
	}
}

package bwalloc

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"
)

// benchRegion builds 100k EIPs in 10k packages (10 per package, 1 Gbit/s
// each, weights 1-4, a third with a min, a fifth with a max), demands
// such that about half the packages are contended, each EIP on 1-3
// hosts. Sorted by address within each package, as the manager keeps them.
type benchPkg struct {
	capacity uint64
	eips     []EIP
	hosts    [][]string
}

func benchRegion(pkgs, per int) []benchPkg {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]benchPkg, pkgs)
	n := 0
	for p := range out {
		c := uint64(1_000_000_000)
		bp := benchPkg{capacity: c, eips: make([]EIP, per), hosts: make([][]string, per)}
		contended := p%2 == 0
		for i := range bp.eips {
			e := EIP{Addr: netip.AddrFrom4([4]byte{198, 18 + byte(n>>16), byte(n >> 8), byte(n)}), Weight: uint32(1 + r.IntN(4))}
			n++
			if r.IntN(3) == 0 {
				e.Min = c / uint64(per) / 2
			}
			if r.IntN(5) == 0 {
				e.Max = c / 2
			}
			if contended {
				e.Demand = r.Uint64N(c / uint64(per) * 3)
			} else {
				e.Demand = r.Uint64N(c / uint64(per))
			}
			bp.eips[i] = e
			for h := range 1 + r.IntN(3) {
				bp.hosts[i] = append(bp.hosts[i], "az"+strconv.Itoa(h+1)+"-h"+strconv.Itoa(r.IntN(100)))
			}
		}
		out[p] = bp
	}
	return out
}

// BenchmarkAllocateRound is one allocation round of the region manager:
// Allocator.Package for every package (issue 10 target: ≤ 100 ms for
// 100k EIPs in 10k packages).
func BenchmarkAllocateRound(b *testing.B) {
	region := benchRegion(10_000, 10)
	var a Allocator
	var grants []Grant
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range region {
			res, err := a.Package(p.capacity, p.eips, Options{}, grants)
			if err != nil {
				b.Fatal(err)
			}
			grants = res.Grants
		}
	}
}

// benchRounder is the work BenchmarkFullRound and BenchmarkFullRoundSorted
// share: Observe and Demand for every EIP, Allocator.Package per package
// and SplitHosts per EIP (with per-host demand from the EIP's), handing
// each host limit to emit. Its buffers are reused across rounds.
type benchRounder struct {
	est           *Estimator[netip.Addr]
	a             Allocator
	grants        []Grant
	shares, hosts []HostShare
	in            []EIP
}

func newBenchRounder(b *testing.B) *benchRounder {
	est, err := NewEstimator[netip.Addr](EstimatorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return &benchRounder{est: est, in: make([]EIP, 10)}
}

func (r *benchRounder) round(b *testing.B, region []benchPkg, now time.Time, emit func(HostKey, uint64)) {
	for _, p := range region {
		for i, e := range p.eips {
			r.est.Observe(e.Addr, now, Sample{Rate: e.Demand, Limit: e.Demand * 2})
			r.in[i] = e
			r.in[i].Demand = r.est.Demand(e.Addr, now, capOf(e.Max, p.capacity)).Rate
		}
		res, err := r.a.Package(p.capacity, r.in[:len(p.eips)], Options{}, r.grants)
		if err != nil {
			b.Fatal(err)
		}
		r.grants = res.Grants
		for i, g := range r.grants {
			r.hosts = r.hosts[:0]
			for k, h := range p.hosts[i] {
				r.hosts = append(r.hosts, HostShare{Host: h, Demand: g.Want / uint64(k+1)})
			}
			r.shares, err = SplitHosts(r.shares, g.Limit, r.hosts, DefaultHostFloor)
			if err != nil {
				b.Fatal(err)
			}
			for _, s := range r.shares {
				emit(HostKey{Addr: g.Addr, Host: s.Host}, s.Limit)
			}
		}
	}
}

// BenchmarkFullRound adds to the allocation what else a round computes
// from the same inputs: Observe and Demand for 100k EIPs, the split of
// every EIP over its hosts (with per-host demand from the EIP's), and
// the push plan against the previous round's limits.
func BenchmarkFullRound(b *testing.B) {
	region := benchRegion(10_000, 10)
	r := newBenchRounder(b)
	old := map[HostKey]uint64{}
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		now := t0.Add(time.Duration(round) * time.Second)
		round++
		new := make(map[HostKey]uint64, len(old))
		r.round(b, region, now, func(k HostKey, l uint64) { new[k] = l })
		PlanPushes(old, new)
		old = new
	}
}

// BenchmarkFullRoundSorted is BenchmarkFullRound with the limit tables
// kept as slices sorted by host and address, and PlanSorted.
func BenchmarkFullRoundSorted(b *testing.B) {
	region := benchRegion(10_000, 10)
	r := newBenchRounder(b)
	var old, new []Limit
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		now := t0.Add(time.Duration(round) * time.Second)
		round++
		new = new[:0]
		r.round(b, region, now, func(k HostKey, l uint64) { new = append(new, Limit{k, l}) })
		slices.SortFunc(new, CompareLimits)
		if _, err := PlanSorted(old, new); err != nil {
			b.Fatal(err)
		}
		old, new = new, old
	}
}

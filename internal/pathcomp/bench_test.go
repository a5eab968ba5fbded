package pathcomp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Benchmark topology (docs/pathcomp.md, BENCHMARKS.md): 1,000 relays,
// each probing 50 other relays; 10,000 origins, each probed from 20
// relays: 50,000 relay hops and 200,000 origin hops. Edges are relays
// r0, r1, ….
const (
	benchRelays, benchOrigins  = 1000, 10000
	benchRelayDeg, benchOrgDeg = 50, 20
)

func benchHops() []hopSpec {
	rng := rand.New(rand.NewPCG(42, 42))
	var hops []hopSpec
	for r := 0; r < benchRelays; r++ {
		n := 0
		for _, j := range rng.Perm(benchRelays) {
			if n == benchRelayDeg {
				break
			}
			if j != r {
				n++
				hops = append(hops, hopSpec{fmt.Sprint("r", r), fmt.Sprint("r", j), false, time.Duration(1+rng.IntN(150)) * ms, rng.Float64() * 0.02})
			}
		}
	}
	for o := 0; o < benchOrigins; o++ {
		for _, r := range rng.Perm(benchRelays)[:benchOrgDeg] {
			hops = append(hops, hopSpec{fmt.Sprint("r", r), fmt.Sprint("o", o), true, time.Duration(1+rng.IntN(150)) * ms, rng.Float64() * 0.02})
		}
	}
	return hops
}

func benchStore(b *testing.B, hops []hopSpec) *Store {
	s := NewStore(Config{MaxHops: 1 << 21})
	for _, h := range hops {
		mustIngest(b, s, meas(h, t0))
	}
	return s
}

// BenchmarkIngest: reports folded into a Store that already knows every
// hop (the steady state), one core.
func BenchmarkIngest(b *testing.B) {
	hops := benchHops()
	s := benchStore(b, hops)
	ms := make([]Measurement, len(hops))
	for i, h := range hops {
		ms[i] = meas(h, t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := ms[i%len(ms)]
		m.At = t0.Add(time.Duration(1+i/len(ms)) * time.Second)
		if err := s.Ingest(m, m.At); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
}

// BenchmarkRecompute1kx10k: a full recompute: Snapshot of the Store, then
// for every edge the best path to all 10,000 origins and the hysteresis
// against the current choice.
func BenchmarkRecompute1kx10k(b *testing.B) {
	hops := benchHops()
	s := benchStore(b, hops)
	now := t0.Add(time.Second)
	for _, edges := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("edges=%d", edges), func(b *testing.B) {
			sel := NewSelector(Hysteresis{MaxPairs: 1 << 21})
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				g := s.Snapshot(now)
				for e := 0; e < edges; e++ {
					if _, err := sel.Update(g, fmt.Sprint("r", e)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/recompute")
		})
	}
	b.Run("snapshot-only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.Snapshot(now)
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/snapshot")
	})
	b.Run("bestfrom-only/edges=1", func(b *testing.B) {
		g := s.Snapshot(now)
		var sc Search
		var out []Path
		for i := 0; i < b.N; i++ {
			out, _ = g.BestFrom(&sc, "r0", out)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/edge")
	})
	// The baseline: for each origin try every (first relay, second relay)
	// pair reachable from the edge, looking the last hop up in the hop
	// map: O(D²·O) per edge instead of O(D² + E_origin).
	b.Run("naive/edges=1", func(b *testing.B) {
		g := s.Snapshot(now)
		e := g.ids["r0"]
		for i := 0; i < b.N; i++ {
			for _, o := range g.origins {
				best := math.Inf(1)
				best = math.Min(best, g.arcCost(e, o))
				for _, a := range g.relOut[e] {
					best = math.Min(best, a.cost+g.arcCost(a.to, o))
					for _, a2 := range g.relOut[a.to] {
						if a2.to != e {
							best = math.Min(best, a.cost+a2.cost+g.arcCost(a2.to, o))
						}
					}
				}
				_ = best
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/edge")
	})
}

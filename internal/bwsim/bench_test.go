package bwsim

import "testing"

// BenchmarkScale runs the scale scenario (100k EIPs in 10k packages over
// 3 AZs, 15 simulated seconds) and reports the wall-clock time of the
// managers' rounds (median): ms/alloc is the issue's "allocation time per
// round" (Allocator.Package for every package, target ≤ 100 ms), ms/round
// the whole round (every ZoneManager.Round and the RegionManager.Round,
// one after the other, on bwstore.Mem).
func BenchmarkScale(b *testing.B) {
	sc := Scale(1, 10_000, 10)
	for b.Loop() {
		r, err := Run(Config{Seed: 1, ReportDelay: 2, PushDelay: 1, Loss: 0.01}, sc)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.RoundMedian.Total().Microseconds())/1000, "ms/round")
		b.ReportMetric(float64(r.RoundMedian.Alloc.Microseconds())/1000, "ms/alloc")
		b.ReportMetric(float64(r.RoundMax.Total().Microseconds())/1000, "ms/round-max")
	}
}

package pathcomp

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// hopSpec is one synthetic hop: from→to with RTT and loss.
type hopSpec struct {
	from, to string
	origin   bool
	rtt      time.Duration
	loss     float64
}

func meas(h hopSpec, at time.Time) Measurement {
	return Measurement{From: h.from, To: h.to, ToOrigin: h.origin, RTT: h.rtt, Loss: h.loss, Available: true, At: at}
}

func mustIngest(t testing.TB, s *Store, m Measurement) {
	t.Helper()
	if err := s.Ingest(m, m.At); err != nil {
		t.Fatalf("ingest %+v: %v", m, err)
	}
}

// bruteBest tries every direct, one-relay and two-relay path: the oracle
// BestFrom is checked against (O(N²) per origin).
func bruteBest(g *Graph, edge, origin string) float64 {
	e, o := g.ids[edge], g.ids[origin]
	c := func(a, b int32) float64 {
		return g.arcCost(a, b)
	}
	best := c(e, o)
	n := int32(len(g.names))
	for r1 := int32(0); r1 < n; r1++ {
		if r1 == e || g.origin[r1] {
			continue
		}
		best = math.Min(best, c(e, r1)+c(r1, o))
		for r2 := int32(0); r2 < n; r2++ {
			if r2 == e || r2 == r1 || g.origin[r2] {
				continue
			}
			best = math.Min(best, c(e, r1)+c(r1, r2)+c(r2, o))
		}
	}
	return best
}

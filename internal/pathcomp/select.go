package pathcomp

import (
	"fmt"
	"math"
	"time"
)

// Hysteresis says how much better a new path must be to replace the
// current one. Both margins must be exceeded: the relative one keeps long
// paths from switching on a few ms of noise, the absolute one keeps short
// paths (a 3 ms direct path) from switching on sub-millisecond jitter.
type Hysteresis struct {
	Relative float64       // default 0.10: 10 % cheaper
	Absolute time.Duration // default 5 ms cheaper
	// MaxPairs bounds the (edge, origin) pairs kept (default 1,048,576).
	MaxPairs int
}

func (h Hysteresis) withDefaults() Hysteresis {
	if h.Relative <= 0 {
		h.Relative = 0.10
	}
	if h.Absolute <= 0 {
		h.Absolute = 5 * time.Millisecond
	}
	if h.MaxPairs <= 0 {
		h.MaxPairs = 1 << 20
	}
	return h
}

// Choose is the hysteresis rule, pure: given the current path and its cost
// now (+Inf when it failed) and the best path now, it returns the path to
// use and whether that is a switch. The current path is kept unless it
// failed or best is cheaper by more than both margins.
func (h Hysteresis) Choose(cur Path, curCost float64, best Path) (Path, bool) {
	h = h.withDefaults()
	if cur.N == 0 || math.IsInf(curCost, 1) {
		if best.N == 0 || cur.Same(best) {
			return best, cur.N != best.N
		}
		return best, true
	}
	cur.Cost = curCost
	if best.N == 0 || cur.Same(best) {
		return cur, false
	}
	gain := curCost - best.Cost
	if gain > h.Relative*curCost && gain > float64(h.Absolute)/float64(time.Millisecond) {
		return best, true
	}
	return cur, false
}

type pairKey struct{ edge, origin string }

// Selector keeps the chosen path per (edge, origin) and applies
// Hysteresis on every recompute.
type Selector struct {
	h        Hysteresis
	cur      map[pairKey]Path
	switches uint64
	sc       Search
	buf      []Path
}

// NewSelector returns an empty Selector.
func NewSelector(h Hysteresis) *Selector {
	return &Selector{h: h.withDefaults(), cur: map[pairKey]Path{}}
}

// Path returns the chosen path for (edge, origin), as of the last Update.
func (s *Selector) Path(edge, origin string) (Path, bool) {
	p, ok := s.cur[pairKey{edge, origin}]
	return p, ok
}

// Switches counts path changes since the Selector was made (a first
// choice and a loss of every path count too).
func (s *Selector) Switches() uint64 { return s.switches }

// Update recomputes every origin's best path from edge in g and applies
// the hysteresis; it returns how many pairs changed path.
func (s *Selector) Update(g *Graph, edge string) (int, error) {
	var err error
	s.buf, err = g.BestFrom(&s.sc, edge, s.buf)
	if err != nil {
		return 0, err
	}
	changed := 0
	for i, o := range g.origins {
		k := pairKey{edge, g.names[o]}
		cur, had := s.cur[k]
		curCost := math.Inf(1)
		if had {
			curCost = g.PathCost(cur)
		}
		next, sw := s.h.Choose(cur, curCost, s.buf[i])
		if !had && next.N == 0 {
			continue // never had a path, still none: keep no entry
		}
		if !had && len(s.cur) >= s.h.MaxPairs {
			return changed, fmt.Errorf("selector: pairs: %w (%d)", ErrTooMany, s.h.MaxPairs)
		}
		s.cur[k] = next
		if sw {
			changed++
			s.switches++
		}
	}
	return changed, nil
}

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

// edgeState is one edge's chosen paths: a slot per origin, found by name.
// One map per edge, keyed by the origin alone, and paths updated in
// place: a map keyed by (edge, origin) pairs was two thirds of a
// recompute (BENCHMARKS.md).
type edgeState struct {
	slot  map[string]int32
	paths []Path
	since []int64 // Graph.At of the Update that chose paths[i], Unix ns
}

// Selector keeps the chosen path per (edge, origin) and applies
// Hysteresis on every recompute.
type Selector struct {
	h        Hysteresis
	edges    map[string]*edgeState
	pairs    int
	switches uint64
	sc       Search
	buf      []Path
}

// NewSelector returns an empty Selector.
func NewSelector(h Hysteresis) *Selector {
	return &Selector{h: h.withDefaults(), edges: map[string]*edgeState{}}
}

// Path returns the chosen path for (edge, origin), as of the last Update.
func (s *Selector) Path(edge, origin string) (Path, bool) {
	es := s.edges[edge]
	if es == nil {
		return Path{}, false
	}
	i, ok := es.slot[origin]
	if !ok {
		return Path{}, false
	}
	return es.paths[i], true
}

// PathSince is Path with the time the path was chosen (the At of the
// Graph of the Update that switched to it).
func (s *Selector) PathSince(edge, origin string) (Path, time.Time, bool) {
	es := s.edges[edge]
	if es == nil {
		return Path{}, time.Time{}, false
	}
	i, ok := es.slot[origin]
	if !ok {
		return Path{}, time.Time{}, false
	}
	return es.paths[i], time.Unix(0, es.since[i]), true
}

// HasEdge says whether edge had an Update.
func (s *Selector) HasEdge(edge string) bool { return s.edges[edge] != nil }

// EachPath calls fn for every origin edge has a path entry for, in no
// particular order.
func (s *Selector) EachPath(edge string, fn func(origin string, p Path, since time.Time)) {
	es := s.edges[edge]
	if es == nil {
		return
	}
	for name, i := range es.slot {
		fn(name, es.paths[i], time.Unix(0, es.since[i]))
	}
}

// Retain forgets every edge keep refuses or g does not hold, and every
// origin g does not hold: after Store.Forget, queries must not answer
// with the path of a node that is gone. It rebuilds the kept edges' slots.
func (s *Selector) Retain(g *Graph, keep func(edge string) bool) {
	pairs := 0
	for edge, es := range s.edges {
		if !g.Has(edge) || keep != nil && !keep(edge) {
			delete(s.edges, edge)
			continue
		}
		n := &edgeState{slot: make(map[string]int32, len(es.slot))}
		for name, i := range es.slot {
			if !g.Has(name) {
				continue
			}
			n.slot[name] = int32(len(n.paths))
			n.paths = append(n.paths, es.paths[i])
			n.since = append(n.since, es.since[i])
		}
		s.edges[edge] = n
		pairs += len(n.paths)
	}
	s.pairs = pairs
}

// Len returns the number of edges and (edge, origin) pairs held.
func (s *Selector) Len() (edges, pairs int) { return len(s.edges), s.pairs }

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
	es := s.edges[edge]
	if es == nil {
		es = &edgeState{slot: map[string]int32{}}
		s.edges[edge] = es
	}
	changed := 0
	for i, o := range g.origins {
		name := g.names[o]
		j, had := es.slot[name]
		var cur Path
		curCost := math.Inf(1)
		if had {
			cur = es.paths[j]
			curCost = g.PathCost(cur)
		}
		next, sw := s.h.Choose(cur, curCost, s.buf[i])
		if !had {
			if next.N == 0 {
				continue // never had a path, still none: keep no entry
			}
			if s.pairs >= s.h.MaxPairs {
				return changed, fmt.Errorf("selector: pairs: %w (%d)", ErrTooMany, s.h.MaxPairs)
			}
			j = int32(len(es.paths))
			es.paths = append(es.paths, Path{})
			es.since = append(es.since, g.at)
			es.slot[name] = j
			s.pairs++
		}
		es.paths[j] = next
		if sw {
			changed++
			s.switches++
			es.since[j] = g.at
		}
	}
	return changed, nil
}

package pathcomp

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Path is a route from an edge to an origin through at most two relays.
// Cost is the sum of its hops' HopCost in ms (+Inf when a hop failed or
// no path exists; then N is 0 for "no path").
type Path struct {
	Hops [4]string // edge, relays…, origin; Hops[:N]
	N    int
	Cost float64
	// ix caches the nodes' indexes in the Graph that made the path, so
	// PathCost skips the name lookups when they still match (a Store only
	// appends nodes, so indexes are stable across its snapshots).
	ix [4]int32
}

// Nodes returns the path's nodes, edge first, origin last.
func (p Path) Nodes() []string { return p.Hops[:p.N] }

// Relays returns the number of relays on the path (0 = direct).
func (p Path) Relays() int {
	if p.N < 2 {
		return 0
	}
	return p.N - 2
}

// Same says whether p and q go through the same nodes.
func (p Path) Same(q Path) bool { return p.N == q.N && p.Hops == q.Hops }

// index returns the graph index of p's k-th node.
func (g *Graph) index(p *Path, k int) (int32, bool) {
	if i := p.ix[k]; int(i) < len(g.names) && g.names[i] == p.Hops[k] {
		return i, true
	}
	i, ok := g.ids[p.Hops[k]]
	return i, ok
}

func (p Path) String() string {
	if p.N == 0 {
		return "no path"
	}
	return fmt.Sprintf("%s (%.1f ms)", strings.Join(p.Nodes(), "→"), p.Cost)
}

type arc struct {
	to   int32
	cost float64
}

// Graph is an immutable snapshot of the Store's costs at one time, laid
// out for the search: for every node its live arcs to non-origins
// (relay arcs) and for every origin its live arcs in. Failed hops are
// left out. A Graph is safe for concurrent reads.
type Graph struct {
	names   []string
	ids     map[string]int32
	origin  []bool
	relOut  [][]arc // node → non-origin nodes
	orgIn   [][]arc // origin ← edge/relay nodes (arc.to is the source)
	origins []int32
	at      int64 // the now of Snapshot, Unix ns: when a Selector switched
}

// At returns the time the Graph was taken at (Snapshot's now).
func (g *Graph) At() time.Time { return time.Unix(0, g.at) }

// Has says whether name is a node of the graph.
func (g *Graph) Has(name string) bool { _, ok := g.ids[name]; return ok }

// Snapshot builds the Graph of the Store's live hops at now. It copies,
// so the Store may take reports while the Graph is read.
func (s *Store) Snapshot(now time.Time) *Graph {
	t := now.UnixNano()
	n := len(s.nodes)
	g := &Graph{
		names: make([]string, n), ids: make(map[string]int32, n), origin: make([]bool, n),
		relOut: make([][]arc, n), orgIn: make([][]arc, n), at: t,
	}
	for i, nd := range s.nodes {
		g.names[i], g.origin[i] = nd.name, nd.origin
		g.ids[nd.name] = int32(i)
		if nd.origin {
			g.origins = append(g.origins, int32(i))
		}
	}
	// Count first so each node's arcs are one slice of a shared backing array.
	nOut, nIn := make([]int32, n), make([]int32, n)
	live := 0
	for i := range s.hops {
		h := &s.hops[i]
		if s.failed(h, t) {
			continue
		}
		live++
		if g.origin[h.key.to] {
			nIn[h.key.to]++
		} else {
			nOut[h.key.from]++
		}
	}
	back := make([]arc, 0, live)
	for i := 0; i < n; i++ {
		g.relOut[i] = back[len(back) : len(back) : len(back)+int(nOut[i])]
		back = back[:len(back)+int(nOut[i])]
		g.orgIn[i] = back[len(back) : len(back) : len(back)+int(nIn[i])]
		back = back[:len(back)+int(nIn[i])]
	}
	for i := range s.hops {
		h := &s.hops[i]
		c := s.cost(h, t)
		if math.IsInf(c, 1) {
			continue
		}
		if g.origin[h.key.to] {
			g.orgIn[h.key.to] = append(g.orgIn[h.key.to], arc{h.key.from, c})
		} else {
			g.relOut[h.key.from] = append(g.relOut[h.key.from], arc{h.key.to, c})
		}
	}
	return g
}

// Origins returns the names of every origin in the graph.
func (g *Graph) Origins() []string {
	out := make([]string, len(g.origins))
	for i, o := range g.origins {
		out[i] = g.names[o]
	}
	return out
}

// PathCost returns p's cost now: +Inf if any of its hops is failed or
// unknown.
func (g *Graph) PathCost(p Path) float64 {
	if p.N < 2 {
		return math.Inf(1)
	}
	sum := 0.0
	for i := 0; i+1 < p.N; i++ {
		a, ok1 := g.index(&p, i)
		b, ok2 := g.index(&p, i+1)
		if !ok1 || !ok2 {
			return math.Inf(1)
		}
		sum += g.arcCost(a, b)
	}
	return sum
}

// arcCost is the cost of the live hop a→b, +Inf if none. A linear scan of
// a's (or b's) arcs: a node's degree is its prober's fan-out (tens), and
// a hash map of every hop made each Snapshot three times slower.
func (g *Graph) arcCost(a, b int32) float64 {
	if g.origin[b] {
		for _, x := range g.orgIn[b] {
			if x.to == a {
				return x.cost
			}
		}
		return math.Inf(1)
	}
	for _, x := range g.relOut[a] {
		if x.to == b {
			return x.cost
		}
	}
	return math.Inf(1)
}

// Search holds the scratch arrays of BestFrom so a full recompute
// allocates once, not once per edge. Not safe for concurrent use: one
// Search per goroutine.
type Search struct {
	d1, d2 []float64
	p2     []int32
}

// BestFrom returns the cheapest path from edge to every origin of g, in
// the order of g.Origins (N = 0, Cost +Inf where none is live).
//
// Instead of trying every (relay, relay) pair for every origin, which is
// O(R²·O), it computes once per edge the cheapest one-relay prefix
// d1[r] = c(edge→r) and two-relay prefix d2[r] = min over r' of
// d1[r'] + c(r'→r) ending at each relay r (one pass over the relay arcs),
// then per origin o takes min(direct, min over arcs r→o of
// min(d1[r], d2[r]) + c(r→o)). That is O(E_relay + E_origin) per edge.
// Ties go to fewer relays, then to the arc seen first.
func (g *Graph) BestFrom(sc *Search, edge string, out []Path) ([]Path, error) {
	e, ok := g.ids[edge]
	if !ok {
		return out[:0], fmt.Errorf("edge %s: unknown node", edge)
	}
	if g.origin[e] {
		return out[:0], fmt.Errorf("edge %s: is an origin", edge)
	}
	n := len(g.names)
	if cap(sc.d1) < n {
		sc.d1, sc.d2, sc.p2 = make([]float64, n), make([]float64, n), make([]int32, n)
	}
	d1, d2, p2 := sc.d1[:n], sc.d2[:n], sc.p2[:n]
	inf := math.Inf(1)
	for i := range d1 {
		d1[i], d2[i] = inf, inf
	}
	for _, a := range g.relOut[e] {
		d1[a.to] = a.cost
	}
	for _, a := range g.relOut[e] { // only relays reached in one hop can be a first relay
		r1 := a.to
		for _, b := range g.relOut[r1] {
			if b.to == e {
				continue
			}
			if c := d1[r1] + b.cost; c < d2[b.to] {
				d2[b.to], p2[b.to] = c, r1
			}
		}
	}
	out = out[:0]
	for _, o := range g.origins {
		// Track the best as (cost, relays, last relay) and build the Path
		// once: copying names on every improvement doubled the time.
		bestCost, bestRelays, bestSrc := inf, -1, int32(-1)
		for _, a := range g.orgIn[o] {
			src := a.to
			if src == e {
				if c := a.cost; c < bestCost || c == bestCost && bestRelays > 0 {
					bestCost, bestRelays = c, 0
				}
				continue
			}
			if c := d1[src] + a.cost; c < bestCost || c == bestCost && bestRelays > 1 && c < inf {
				bestCost, bestRelays, bestSrc = c, 1, src
			}
			if c := d2[src] + a.cost; c < bestCost {
				bestCost, bestRelays, bestSrc = c, 2, src
			}
		}
		var p Path
		switch bestRelays {
		case -1:
			p = Path{Cost: inf}
		case 0:
			p = Path{Hops: [4]string{g.names[e], g.names[o]}, N: 2, Cost: bestCost, ix: [4]int32{e, o}}
		case 1:
			p = Path{Hops: [4]string{g.names[e], g.names[bestSrc], g.names[o]}, N: 3, Cost: bestCost, ix: [4]int32{e, bestSrc, o}}
		case 2:
			p = Path{Hops: [4]string{g.names[e], g.names[p2[bestSrc]], g.names[bestSrc], g.names[o]}, N: 4, Cost: bestCost, ix: [4]int32{e, p2[bestSrc], bestSrc, o}}
		}
		out = append(out, p)
	}
	return out, nil
}

package pathcomp

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config tunes the Store. The zero value of a field takes its default.
type Config struct {
	// RTTAlpha and LossAlpha are the EWMA gains: smoothed = α·sample +
	// (1−α)·smoothed. RTT 0.25 follows a real change within ~4 reports
	// (0.75⁴ ≈ 32 % of the old value left) while halving a single
	// sample's noise; loss 0.1 because a loss sample is a binomial
	// estimate from few probes and far noisier (defaults 0.25, 0.1).
	RTTAlpha, LossAlpha float64
	// ReportInterval is how often probers report a hop (default 5 s).
	ReportInterval time.Duration
	// MissLimit: a hop not reported for MissLimit report intervals counts
	// as failed (default 3, issue 11: "avoided within 3 missed reports").
	MissLimit int
	// LossPenalty is what one unit of loss adds to a hop's cost
	// (default 1 s; see HopCost).
	LossPenalty time.Duration
	// MaxSkew is how far in the future of now a report's At may be
	// (prober clocks drift; default 2 s). Further is refused: one report
	// stamped in the future would make every later report of its hop
	// stale and keep the hop live until then.
	MaxSkew time.Duration
	// MaxNodes and MaxHops bound the memory a flood of bogus names can
	// take (defaults 65,536 and 1,048,576).
	MaxNodes, MaxHops int
}

func (c Config) withDefaults() Config {
	if c.RTTAlpha <= 0 || c.RTTAlpha > 1 {
		c.RTTAlpha = 0.25
	}
	if c.LossAlpha <= 0 || c.LossAlpha > 1 {
		c.LossAlpha = 0.1
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = 5 * time.Second
	}
	if c.MissLimit <= 0 {
		c.MissLimit = 3
	}
	if c.LossPenalty <= 0 {
		c.LossPenalty = time.Second
	}
	if c.MaxSkew <= 0 {
		c.MaxSkew = 2 * time.Second
	}
	if c.MaxNodes <= 0 {
		c.MaxNodes = 1 << 16
	}
	if c.MaxHops <= 0 {
		c.MaxHops = 1 << 20
	}
	return c
}

// Errors Ingest returns besides validation errors.
var (
	ErrStale     = errors.New("stale: not newer than the hop's last applied report")
	ErrTooMany   = errors.New("limit reached")
	ErrKindClash = errors.New("node kind clash")
)

// Stats counts what Ingest did with each report.
type Stats struct {
	Applied  uint64 // folded into a hop's figures
	Stale    uint64 // older than or as old as the hop's last report: dropped
	Rejected uint64 // invalid, over a limit or a kind clash: dropped
}

type node struct {
	name   string
	origin bool
}

type hopKey struct{ from, to int32 }

// hop is one hop's smoothed state. RTT is kept in milliseconds.
type hop struct {
	key  hopKey
	rtt  float64
	loss float64
	up   bool
	last int64 // At of the last applied report, Unix ns
}

// Store keeps smoothed per-hop metrics in memory. Node names are interned
// to dense indexes so a recompute walks slices, not maps.
type Store struct {
	cfg    Config
	ids    map[string]int32
	nodes  []node
	hopIdx map[hopKey]int32
	hops   []hop
	stats  Stats
}

// NewStore returns an empty Store with cfg's defaults filled in.
func NewStore(cfg Config) *Store {
	return &Store{cfg: cfg.withDefaults(), ids: map[string]int32{}, hopIdx: map[hopKey]int32{}}
}

// Config returns the Store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Stats returns the counters.
func (s *Store) Stats() Stats { return s.stats }

// Len returns the number of nodes and hops known.
func (s *Store) Len() (nodes, hops int) { return len(s.nodes), len(s.hops) }

// Ingest validates m and folds it into its hop. A report not newer than
// the hop's last one is dropped with ErrStale: applying reports of a hop
// in time order is what makes regions that receive the same reports agree
// (docs/pathcomp.md, "Convergence"). An unavailable report marks the hop
// failed and leaves its RTT and loss as they were; the next available one
// brings it back.
func (s *Store) Ingest(m Measurement, now time.Time) error {
	if err := m.Validate(); err != nil {
		s.stats.Rejected++
		return err
	}
	if m.At.After(now.Add(s.cfg.MaxSkew)) {
		s.stats.Rejected++
		return fmt.Errorf("measurement %s→%s: at: %v is more than %v after now (%v)", m.From, m.To, m.At, s.cfg.MaxSkew, now)
	}
	// Look both ends up once and check everything before interning
	// either, so a refused report leaves no node behind.
	fi, fok := s.ids[m.From]
	ti, tok := s.ids[m.To]
	if fok && s.nodes[fi].origin {
		s.stats.Rejected++
		return fmt.Errorf("measurement %s→%s: from: node %s: %w: known as origin, reported as edge/relay", m.From, m.To, m.From, ErrKindClash)
	}
	if tok && s.nodes[ti].origin != m.ToOrigin {
		s.stats.Rejected++
		return fmt.Errorf("measurement %s→%s: to: node %s: %w: known as %s, reported as %s", m.From, m.To, m.To, ErrKindClash, kind(s.nodes[ti].origin), kind(m.ToOrigin))
	}
	var i int32
	ok := false
	if fok && tok {
		i, ok = s.hopIdx[hopKey{fi, ti}]
	}
	if !ok {
		newNodes := 0
		if !fok {
			newNodes++
		}
		if !tok {
			newNodes++
		}
		if len(s.nodes)+newNodes > s.cfg.MaxNodes {
			s.stats.Rejected++
			return fmt.Errorf("measurement %s→%s: nodes: %w (%d)", m.From, m.To, ErrTooMany, s.cfg.MaxNodes)
		}
		if len(s.hops) >= s.cfg.MaxHops {
			s.stats.Rejected++
			return fmt.Errorf("measurement %s→%s: hops: %w (%d)", m.From, m.To, ErrTooMany, s.cfg.MaxHops)
		}
		if !fok {
			fi = s.intern(m.From, false)
		}
		if !tok {
			ti = s.intern(m.To, m.ToOrigin)
		}
		k := hopKey{fi, ti}
		i = int32(len(s.hops))
		s.hops = append(s.hops, hop{key: k, rtt: math.NaN()})
		s.hopIdx[k] = i
	}
	h := &s.hops[i]
	at := m.At.UnixNano()
	if ok && at <= h.last {
		s.stats.Stale++
		return fmt.Errorf("measurement %s→%s at %v: %w", m.From, m.To, m.At, ErrStale)
	}
	h.last = at
	h.up = m.Available
	if m.Available {
		rtt := float64(m.RTT) / float64(time.Millisecond)
		if math.IsNaN(h.rtt) { // first available sample: no history to smooth with
			h.rtt, h.loss = rtt, m.Loss
		} else {
			h.rtt += s.cfg.RTTAlpha * (rtt - h.rtt)
			h.loss += s.cfg.LossAlpha * (m.Loss - h.loss)
		}
	}
	s.stats.Applied++
	return nil
}

// intern adds name as a node; Ingest checked the bound and the kind: a
// name first seen as an origin stays an origin (never a From, never a
// relay), and a relay never becomes an origin (ErrKindClash), so the path
// search cannot route through an origin.
func (s *Store) intern(name string, origin bool) int32 {
	i := int32(len(s.nodes))
	s.nodes = append(s.nodes, node{name: name, origin: origin})
	s.ids[name] = i
	return i
}

func kind(origin bool) string {
	if origin {
		return "origin"
	}
	return "edge/relay"
}

// HopState is one hop's smoothed figures as of a time.
type HopState struct {
	From, To string
	RTT      time.Duration // smoothed
	Loss     float64       // smoothed
	Failed   bool          // reported unavailable, or not reported for MissLimit intervals
	Last     time.Time     // At of the last applied report
	Cost     float64       // HopCost in ms; +Inf when Failed
}

// Hop returns the state of from→to at now.
func (s *Store) Hop(from, to string, now time.Time) (HopState, bool) {
	f, ok1 := s.ids[from]
	t, ok2 := s.ids[to]
	if !ok1 || !ok2 {
		return HopState{}, false
	}
	i, ok := s.hopIdx[hopKey{f, t}]
	if !ok {
		return HopState{}, false
	}
	return s.hopState(i, now.UnixNano()), true
}

// Hops returns every hop's state at now, in the order hops were first seen.
func (s *Store) Hops(now time.Time) []HopState {
	out := make([]HopState, len(s.hops))
	for i := range s.hops {
		out[i] = s.hopState(int32(i), now.UnixNano())
	}
	return out
}

func (s *Store) hopState(i int32, now int64) HopState {
	h := &s.hops[i]
	c := s.cost(h, now)
	st := HopState{
		From: s.nodes[h.key.from].name, To: s.nodes[h.key.to].name,
		Loss: h.loss, Failed: math.IsInf(c, 1), Last: time.Unix(0, h.last), Cost: c,
	}
	if !math.IsNaN(h.rtt) {
		st.RTT = time.Duration(h.rtt * float64(time.Millisecond))
	}
	return st
}

// failed says whether h counts as failed at now: reported unavailable,
// never reported available, or silent for MissLimit report intervals.
func (s *Store) failed(h *hop, now int64) bool {
	return !h.up || math.IsNaN(h.rtt) || now-h.last >= int64(s.cfg.MissLimit)*int64(s.cfg.ReportInterval)
}

func (s *Store) cost(h *hop, now int64) float64 {
	if s.failed(h, now) {
		return math.Inf(1)
	}
	return HopCost(h.rtt, h.loss, s.cfg.LossPenalty)
}

// HopCost is a hop's cost in milliseconds: rtt + loss × penalty.
//
// Why additive: a path's cost must be the sum of its hops' costs for the
// prefix search (Graph) to be exact, and an additive loss term keeps the
// cost in time units. The term is the expected delay loss adds to a
// short request: each lost packet of a small object costs about one
// retransmission timeout (Linux's minimum RTO is 200 ms), and a typical
// dynamic-acceleration request is ~5 packets, so one unit of loss costs
// ~5 × 200 ms = 1 s (the default penalty): 1 % loss weighs like 10 ms of
// RTT, 10 % like 100 ms. A multiplicative RTT/(1−loss)^k would make loss
// on a 1 ms hop nearly free, though its retransmissions cost an RTO, not
// an RTT.
func HopCost(rttMS, loss float64, penalty time.Duration) float64 {
	return rttMS + loss*float64(penalty)/float64(time.Millisecond)
}

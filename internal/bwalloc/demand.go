package bwalloc

import (
	"fmt"
	"math"
	"time"
)

// EstimatorConfig tunes demand estimation. Zero fields take the defaults
// of DefaultEstimatorConfig.
type EstimatorConfig struct {
	// Window is how far back the peak is taken (default 2 s). A longer
	// window rides out bursts; a shorter one frees capacity sooner after
	// an EIP's demand falls (an EIP keeps its share for about one window).
	Window time.Duration
	// Margin multiplies the peak (default 1.1). It must exceed
	// 1/PinnedRatio, so an EIP that steadily uses its estimate is not
	// mistaken for one pinned at its limit.
	Margin float64
	// PinnedRatio: offered (passed + dropped) ≥ PinnedRatio × limit counts
	// as pinned at the limit (default 0.95).
	PinnedRatio float64
	// ProbeFactor: a pinned EIP's estimate is at least its limit times
	// this (default 2), so its demand above the limit is discovered in a
	// few rounds (doubling per round) instead of never.
	ProbeFactor float64
	// OfferedDrops (default 0.1): a report whose drops are at least this
	// fraction of what passed measures the EIP's demand (passed +
	// dropped), and its estimate is not probed beyond that. Traffic that
	// keeps offering 10 % more than its limit passes does not adapt to the
	// limit (a responsive aggregate such as TCP loses a few % at most), so
	// what it offers is what it wants; probing it to twice its limit would
	// only blur the proportions of an EIP's hosts, all pinned, that
	// SplitHosts divides by (in bwsim's TestMatchesOracle an EIP pinned in
	// three AZs takes 25 s instead of 1 s to split by its traffic). +Inf
	// probes whatever the drops.
	OfferedDrops float64
	// MinDemand is the least estimate of any EIP (default 1 Mbit/s): an
	// idle EIP in a contended package still gets a small limit, so traffic
	// that starts can show itself and be probed upward. Without it a
	// limit of 0 would measure 0 forever when drops are not reported.
	MinDemand uint64
	// Grace is how long the last estimate is kept, flagged stale, when
	// reports stop (default 5 s). After it the EIP counts as carried
	// nowhere and its estimate falls to MinDemand (flagged expired).
	Grace time.Duration
}

// DefaultEstimatorConfig is the configuration the zero fields default to.
var DefaultEstimatorConfig = EstimatorConfig{
	Window:       2 * time.Second,
	Margin:       1.1,
	PinnedRatio:  0.95,
	ProbeFactor:  2,
	OfferedDrops: 0.1,
	MinDemand:    1_000_000,
	Grace:        5 * time.Second,
}

// Sample is one measurement of an EIP (summed over the hosts that carry
// it) or of one EIP on one host, for one reporting interval.
type Sample struct {
	// Rate is the traffic that passed, bits/s.
	Rate uint64
	// Dropped is the traffic the limit dropped, bits/s (0 when the
	// reporter does not count drops). Rate + Dropped is the offered load.
	Dropped uint64
	// Limit is the limit in force during the interval (bits/s; 0: none
	// or unknown). Pinned detection compares Rate + Dropped with it, so it must be
	// the limit the data plane enforced, not the one just computed.
	Limit uint64
}

// Demand is an estimate for one round.
type Demand struct {
	// Rate is the estimated demand, bits/s (input to Allocator.Package).
	Rate uint64
	// Pinned: the last report showed the EIP at its limit (or dropping),
	// so Rate includes the upward probe.
	Pinned bool
	// Stale: no report this round; Rate is the last estimate, kept
	// within the grace period.
	Stale bool
	// Expired: no report for longer than the grace period (or ever);
	// Rate is MinDemand.
	Expired bool
}

// Estimator keeps the recent history of each key (an EIP, or an EIP on a
// host: any comparable key) and estimates its demand. It holds no clock:
// every call takes the time. Not safe for concurrent use.
type Estimator[K comparable] struct {
	cfg   EstimatorConfig
	state map[K]*history
}

type history struct {
	at   []int64  // sample times (unix ns), oldest first, within Window
	rate []uint64 // offered rate of each sample
	est  uint64   // estimate after the last report, before the ceiling
	pin  bool
	last int64 // time of the last report
}

// NewEstimator returns an estimator with cfg (zero fields defaulted), or
// an error naming the field that is out of range.
func NewEstimator[K comparable](cfg EstimatorConfig) (*Estimator[K], error) {
	d := DefaultEstimatorConfig
	if cfg.Window == 0 {
		cfg.Window = d.Window
	}
	if cfg.Margin == 0 {
		cfg.Margin = d.Margin
	}
	if cfg.PinnedRatio == 0 {
		cfg.PinnedRatio = d.PinnedRatio
	}
	if cfg.ProbeFactor == 0 {
		cfg.ProbeFactor = d.ProbeFactor
	}
	if cfg.MinDemand == 0 {
		cfg.MinDemand = d.MinDemand
	}
	if cfg.OfferedDrops == 0 {
		cfg.OfferedDrops = d.OfferedDrops
	}
	if cfg.Grace == 0 {
		cfg.Grace = d.Grace
	}
	switch {
	case cfg.Window < 0:
		return nil, fmt.Errorf("demand estimator: window %v is negative", cfg.Window)
	case cfg.Grace < 0:
		return nil, fmt.Errorf("demand estimator: grace %v is negative", cfg.Grace)
	case !(cfg.PinnedRatio > 0 && cfg.PinnedRatio <= 1):
		return nil, fmt.Errorf("demand estimator: pinnedRatio %v: must be in (0, 1]", cfg.PinnedRatio)
	case !(cfg.Margin*cfg.PinnedRatio > 1) || math.IsInf(cfg.Margin, 0):
		return nil, fmt.Errorf("demand estimator: margin %v: must exceed 1/pinnedRatio = %.4f", cfg.Margin, 1/cfg.PinnedRatio)
	case !(cfg.ProbeFactor > 1) || math.IsInf(cfg.ProbeFactor, 0):
		return nil, fmt.Errorf("demand estimator: probeFactor %v: must be above 1", cfg.ProbeFactor)
	case !(cfg.OfferedDrops > 0):
		return nil, fmt.Errorf("demand estimator: offeredDrops %v: must be above 0 (+Inf: always probe)", cfg.OfferedDrops)
	}
	return &Estimator[K]{cfg: cfg, state: make(map[K]*history)}, nil
}

// Config returns the configuration in use (defaults filled in).
func (e *Estimator[K]) Config() EstimatorConfig { return e.cfg }

// Observe records a report for key measured over the interval ending at
// now. Reports must come in time order per key; an older one is ignored
// (and reported false).
func (e *Estimator[K]) Observe(key K, now time.Time, s Sample) bool {
	t := now.UnixNano()
	h := e.state[key]
	if h == nil {
		h = &history{}
		e.state[key] = h
	} else if t < h.last {
		return false
	}
	// Drop samples that left the window (keep t - at < Window).
	cut := 0
	for cut < len(h.at) && t-h.at[cut] >= int64(e.cfg.Window) {
		cut++
	}
	if cut > 0 {
		h.at = append(h.at[:0], h.at[cut:]...)
		h.rate = append(h.rate[:0], h.rate[cut:]...)
	}
	offered := satAdd(s.Rate, s.Dropped)
	h.at = append(h.at, t)
	h.rate = append(h.rate, offered)
	var peak uint64
	for _, r := range h.rate {
		peak = max(peak, r)
	}
	est := mulSat(peak, e.cfg.Margin)
	// Pinned: what was offered reached the limit. Drops alone do not pin
	// a key whose offered load stays well below its limit: an EIP's limit
	// is split over its hosts, and a host whose share lags its traffic
	// drops while the EIP as a whole has room (lab: 10 of 11 Mbit/s with
	// one of four edges dropping, probed to 25). Its offered load (passed
	// + dropped) already measures its demand. With no known limit, drops
	// are the only sign.
	if s.Limit > 0 {
		h.pin = float64(offered) >= e.cfg.PinnedRatio*float64(s.Limit)
	} else {
		h.pin = s.Dropped > 0
	}
	if h.pin && !(float64(s.Dropped) >= e.cfg.OfferedDrops*float64(s.Rate)) {
		est = max(est, mulSat(s.Limit, e.cfg.ProbeFactor))
	}
	h.est = max(est, e.cfg.MinDemand)
	h.last = t
	return true
}

// Demand returns key's estimate at now, at most ceiling (the EIP's max or
// its package's capacity; 0: no ceiling). A key with no report at now is
// stale (the last estimate stands) until Grace has passed since its last
// report, then expired (MinDemand). A key never observed is expired.
func (e *Estimator[K]) Demand(key K, now time.Time, ceiling uint64) Demand {
	h := e.state[key]
	var d Demand
	switch age := now.UnixNano() - lastOr(h); {
	case h == nil || age > int64(e.cfg.Grace):
		d = Demand{Rate: e.cfg.MinDemand, Expired: true}
	default:
		d = Demand{Rate: h.est, Pinned: h.pin, Stale: age > 0}
	}
	if ceiling > 0 {
		d.Rate = min(d.Rate, ceiling)
	}
	return d
}

func lastOr(h *history) int64 {
	if h == nil {
		return 0
	}
	return h.last
}

// Forget drops key's history (the EIP left its package or was deleted).
func (e *Estimator[K]) Forget(key K) { delete(e.state, key) }

// Prune drops the history of every key expired at now, so memory follows
// the EIPs that report. Demand answers the same for a pruned key.
func (e *Estimator[K]) Prune(now time.Time) int {
	t := now.UnixNano()
	n := 0
	for k, h := range e.state {
		if t-h.last > int64(e.cfg.Grace) {
			delete(e.state, k)
			n++
		}
	}
	return n
}

// Len is the number of keys with history.
func (e *Estimator[K]) Len() int { return len(e.state) }

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// mulSat is x·f rounded, saturating at 2^63 (far above any link).
func mulSat(x uint64, f float64) uint64 {
	p := math.Round(float64(x) * f)
	if p >= 1<<63 {
		return 1 << 63
	}
	return uint64(p)
}

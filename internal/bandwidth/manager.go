package bandwidth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/store"
)

// The managers of shared bandwidth (docs/bandwidth.md, "Managers"):
//
//	hosts (agents, edges) --reports--> zone store --ZoneManager--> region tier --RegionManager
//	hosts <--limits-- zone store <--ZoneManager-- region tier <--limits-- RegionManager
//
// A zone manager sums its zone's reports per EIP and direction and writes
// them to the region tier as one reporter (the zone); the region manager
// allocates every package and writes each zone its share of each EIP; the
// zone manager splits its share over the zone's hosts by their demand.
// Each runs one active replica per scope through store.Elector; the
// others wait and take over when its lease ends.

// RegionTier is the AZ name of the region tier in a bwstore.Store: zone
// managers report to it (reporter = zone) and read their zone's limits
// from it (host = zone).
const RegionTier = "region"

// MinBurstBytes is the least burst a limit carries: a bucket must hold a
// few full-size packets, whatever its rate (BW-CONTRACT.md).
const MinBurstBytes = 15_000

// Defaults of the managers' settings.
const (
	DefaultInterval = time.Second
	DefaultGrace    = 10 * time.Second
)

// Config is what both managers share.
type Config struct {
	// Interval between rounds (default 1 s); reports older than 2
	// intervals are ignored, reports written up are alive 3 intervals.
	Interval time.Duration
	// Grace is the TTL of the limits written (default 10 s): their
	// absence tells the layer below that no manager spoke for that long.
	Grace time.Duration
	// Estimator tunes demand estimation (zero: bwalloc's defaults).
	Estimator bwalloc.EstimatorConfig
	// HostFloor is SplitHosts' floor (0: bwalloc.DefaultHostFloor).
	HostFloor float64
	// Settle (region manager) is how long a limit it lowered may still be
	// in force below it: up to an interval until a zone manager's round
	// reads it, up to another until a host's poll does, and half an
	// interval of margin. The budget of increases counts a lowered limit
	// at its old value for this long (default 2.5 intervals: with rounds
	// one interval apart, the increases it makes room for go out three
	// rounds after the decrease).
	Settle time.Duration
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
	// Log (default slog.Default()).
	Log *slog.Logger
	// Metrics, if not nil, receives round figures.
	Metrics *Metrics
	// Concurrency bounds the limit writes in flight (default 16).
	Concurrency int
}

func (c Config) check() (Config, error) {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Settle == 0 {
		c.Settle = 5 * c.Interval / 2
	}
	if c.HostFloor == 0 {
		c.HostFloor = bwalloc.DefaultHostFloor
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	switch {
	case c.Interval < 10*time.Millisecond || c.Interval > time.Minute:
		return c, fmt.Errorf("bandwidth manager: interval %v: want 10ms..1m", c.Interval)
	case c.Grace < c.Interval || c.Grace > bwstore.MaxTTL:
		return c, fmt.Errorf("bandwidth manager: grace %v: want at least the interval %v and at most %v", c.Grace, c.Interval, bwstore.MaxTTL)
	case 3*c.Interval > bwstore.MaxTTL:
		return c, fmt.Errorf("bandwidth manager: interval %v: reports live 3 intervals, at most %v", c.Interval, bwstore.MaxTTL)
	case c.Settle < 0:
		return c, fmt.Errorf("bandwidth manager: settle %v is negative", c.Settle)
	case !(c.HostFloor >= 0 && c.HostFloor <= 1):
		return c, fmt.Errorf("bandwidth manager: host floor %v: want 0..1", c.HostFloor)
	}
	if _, err := bwalloc.NewEstimator[int](c.Estimator); err != nil {
		return c, fmt.Errorf("bandwidth manager: %w", err)
	}
	return c, nil
}

// fresh says whether a report is recent enough to count: younger than 2
// intervals (a missing report is not zero, and neither is an old one).
func (c Config) fresh(r bwstore.Report) bool { return r.Age < 2*c.Interval }

// Generations hands out limit generations: the writer's clock in
// microseconds since 1970, bumped to last+1 when not above the last one
// handed out (BW-CONTRACT.md). A manager that becomes active after
// another therefore writes generations above the deposed one's, and a
// late write of the deposed one is refused by the store. Safe for
// concurrent use.
type Generations struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

// NewGenerations returns a generator on clock now (nil: time.Now).
func NewGenerations(now func() time.Time) *Generations {
	if now == nil {
		now = time.Now
	}
	return &Generations{now: now}
}

// Next returns a generation above every one returned before.
func (g *Generations) Next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := uint64(max(g.now().UnixMicro(), 1))
	if n <= g.last {
		n = g.last + 1
	}
	g.last = n
	return n
}

// Above makes every later Next return more than gen: a store refused a
// write as stale because a generation above ours is stored (a clock
// behind the previous manager's), and we hold the claim.
func (g *Generations) Above(gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = max(g.last, gen)
}

// writeLimits writes one host's limits with a fresh generation. A write
// refused as stale while we act (active() nil) is retried once above the
// stored generation: the previous manager's clock ran ahead of ours.
func writeLimits(ctx context.Context, s bwstore.Store, gens *Generations, active func() error, az, host string, ttl time.Duration, ls []bwstore.Limit, now time.Time) (uint64, error) {
	for try := 0; ; try++ {
		if err := active(); err != nil {
			return 0, err
		}
		lim := bwstore.Limits{Generation: gens.Next(), Issued: now, Limits: ls}
		err := s.WriteLimits(ctx, az, host, ttl, lim)
		if err == nil {
			return lim.Generation, nil
		}
		if !errors.Is(err, bwstore.ErrStaleGeneration) || try > 0 {
			return 0, fmt.Errorf("limits of %s in %s: %w", host, az, err)
		}
		// The fence is in the refusal: LimitsGeneration would say nothing
		// once the limits expired, while the fence never does.
		var se *bwstore.StaleGenerationError
		if !errors.As(err, &se) {
			return 0, fmt.Errorf("limits of %s in %s: %w (the store did not say the stored generation)", host, az, err)
		}
		gens.Above(se.Stored)
	}
}

// alwaysActive is the guard of a round run outside an election (tests,
// the simulator).
func alwaysActive() error { return nil }

// errNotActive is returned by a round when the manager's claim ended
// before or during it: nothing more is written.
var errNotActive = errors.New("bandwidth manager: not active (claim ended)")

// scaleBurst is burst × part / whole (exact, 128-bit), at least
// MinBurstBytes: a host's or a zone's burst follows its share of the rate.
func scaleBurst(burst, part, whole uint64) uint64 {
	if whole == 0 {
		return MinBurstBytes
	}
	hi, lo := bits.Mul64(burst, part)
	if hi >= whole {
		return max(burst, MinBurstBytes)
	}
	q, _ := bits.Div64(hi, lo, whole)
	return max(q, MinBurstBytes)
}

// Metrics are a manager's Prometheus figures (GET /metrics of bwmgr).
type Metrics struct {
	Registry   *prometheus.Registry
	RoundTime  prometheus.Histogram
	Rounds     *prometheus.CounterVec
	EIPs       prometheus.Gauge
	Contended  prometheus.Gauge
	Reporters  prometheus.Gauge
	PushErrors prometheus.Counter
	Problems   prometheus.Gauge
	Malformed  prometheus.Gauge
	Active     prometheus.Gauge
	active     atomic.Bool
}

// NewMetrics registers the metrics of a manager of scope ("az" or
// "region") and zone ("" for the region).
func NewMetrics(scope, zone string) *Metrics {
	l := prometheus.Labels{"scope": scope}
	if zone != "" {
		l["zone"] = zone
	}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		RoundTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "azgate_bwmgr_round_seconds",
			Help: "Time of one manager round (read reports, allocate or split, push limits).", ConstLabels: l,
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "azgate_bwmgr_rounds_total",
			Help: "Manager rounds by outcome (ok, error).", ConstLabels: l}, []string{"outcome"}),
		EIPs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_eips",
			Help: "EIP and direction pairs given a limit in the last round.", ConstLabels: l}),
		Contended: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_contended_packages",
			Help: "Packages whose EIPs wanted more than the capacity in the last round (region).", ConstLabels: l}),
		Reporters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_reporters",
			Help: "Reporters (hosts, or zones for the region) with a fresh report in the last round.", ConstLabels: l}),
		PushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "azgate_bwmgr_push_errors_total",
			Help: "Limit writes that failed.", ConstLabels: l}),
		Problems: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_package_problems",
			Help: "Package entries skipped in the last round (an EIP that does not exist, or listed by two packages).", ConstLabels: l}),
		Malformed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_malformed_reports",
			Help: "Reports in the store that no azgate writer can have written, left out in the last round.", ConstLabels: l}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "azgate_bwmgr_active",
			Help: "1 while this replica holds its scope and acts, 0 while it stands by.", ConstLabels: l}),
	}
	m.Registry.MustRegister(m.RoundTime, m.Rounds, m.EIPs, m.Contended, m.Reporters, m.PushErrors, m.Problems, m.Malformed, m.Active)
	return m
}

func (m *Metrics) setActive(on bool) {
	if m == nil {
		return
	}
	m.active.Store(on)
	if on {
		m.Active.Set(1)
	} else {
		m.Active.Set(0)
	}
}

// IsActive reports whether the replica acts (for tests and status).
func (m *Metrics) IsActive() bool { return m != nil && m.active.Load() }

// RoundStats are the figures of one round.
type RoundStats struct {
	Reporters  int // fresh reporters (hosts; zones for the region)
	Stale      int // reports ignored as older than 2 intervals
	Malformed  int // reports the store left out as malformed (bwstore.Snapshot.Malformed)
	EIPs       int // EIP and direction pairs given limits
	Contended  int // contended packages (region)
	Problems   int // package entries skipped (region)
	Writes     int // limit sets written
	Decreases  int // limit sets written in the decrease phase
	Held       int // increases held back (zone: a decrease failed; region: over the budget)
	PushErrors int
	// Alloc is the wall-clock time the round spent in
	// bwalloc.Allocator.Package (region), for the simulator's figures.
	Alloc time.Duration
}

func (m *Metrics) round(took time.Duration, st RoundStats, err error) {
	if m == nil {
		return
	}
	m.RoundTime.Observe(took.Seconds())
	if err != nil {
		m.Rounds.WithLabelValues("error").Inc()
	} else {
		m.Rounds.WithLabelValues("ok").Inc()
	}
	m.EIPs.Set(float64(st.EIPs))
	m.Contended.Set(float64(st.Contended))
	m.Reporters.Set(float64(st.Reporters))
	m.PushErrors.Add(float64(st.PushErrors))
	m.Problems.Set(float64(st.Problems))
	m.Malformed.Set(float64(st.Malformed))
}

// malformed counts the reports the store left out as malformed and logs
// them when their number changes (not every round: a corrupt entry stays
// until its TTL or an operator removes it). last is the manager's count
// of the previous round.
func malformed(log *slog.Logger, az string, snap bwstore.Snapshot, last *int, st *RoundStats) {
	st.Malformed = len(snap.Malformed)
	if st.Malformed != *last && st.Malformed > 0 {
		log.Warn("bandwidth manager: malformed reports left out", "az", az, "count", st.Malformed, "first", snap.Malformed[:min(len(snap.Malformed), 3)])
	}
	*last = st.Malformed
}

// Rounder is one manager's work: Activate resets what a newly active
// replica must not trust from an earlier term (caches of what is in
// force, first-round handling); Round runs one round, writing only while
// active() returns nil.
type Rounder interface {
	Activate()
	Round(ctx context.Context, active func() error) (RoundStats, error)
}

// RunOptions set Run's election.
type RunOptions struct {
	// Key is the ownership scope: store.OwnerKey("bwmgr", "region") or
	// store.OwnerKey("bwmgr", "az-"+zone) (ScopeKey).
	Key, Holder string
	Claim       store.ClaimOptions
	Interval    time.Duration
	Log         *slog.Logger
	Metrics     *Metrics
}

// ScopeKey is the ownership key of a manager scope: "region", or "az"
// with its zone.
func ScopeKey(scope, zone string) string {
	if scope == "az" {
		return store.OwnerKey("bwmgr", "az-"+zone)
	}
	return store.OwnerKey("bwmgr", "region")
}

// Run campaigns for the scope and, while it holds it, runs r every
// interval; when the claim ends it stops acting at once and campaigns
// again. When ctx ends (SIGTERM) it releases the claim, so a standby takes
// over without waiting for the lease to lapse. It returns ctx's error.
func Run(ctx context.Context, el store.Elector, r Rounder, o RunOptions) error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	for ctx.Err() == nil {
		o.Metrics.setActive(false)
		cl, err := el.Campaign(ctx, o.Key, o.Holder, o.Claim)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			o.Log.Warn("bandwidth manager: campaign failed; retrying", "key", o.Key, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		o.Log.Info("bandwidth manager: active", "key", o.Key)
		o.Metrics.setActive(true)
		r.Activate()
		act(ctx, cl, r, o)
		o.Metrics.setActive(false)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if err := cl.Release(rctx); err != nil && ctx.Err() == nil {
			o.Log.Debug("bandwidth manager: release", "err", err)
		}
		cancel()
		if ctx.Err() == nil {
			o.Log.Warn("bandwidth manager: scope lost; standing by", "key", o.Key, "why", cl.Err())
		}
	}
	o.Metrics.setActive(false)
	return ctx.Err()
}

// act runs rounds until the claim ends or ctx does.
func act(ctx context.Context, cl *store.Claim, r Rounder, o RunOptions) {
	// The gauge drops as soon as the claim ends, not after the round, and
	// the round's calls end with it: at the deadline unless a renewal
	// moved it (Claim.Done). Not at the deadline the round started with:
	// the lease is renewed every third of its TTL, so that one is 1.5 to
	// 2.5 s ahead with the default lease, less than a 100k-EIP round.
	cctx, ccancel := context.WithCancel(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped; ccancel() }()
	go func() {
		defer close(stopped)
		select {
		case <-cl.Done():
			o.Metrics.setActive(false)
			ccancel()
		case <-stop:
		}
	}()
	active := func() error {
		if cl.Err() != nil || !time.Now().Before(cl.Deadline()) {
			return errNotActive
		}
		return nil
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		if active() != nil {
			return
		}
		start := time.Now()
		// A round never outlives the claim: cctx ends with it, and every
		// write checks active() first.
		st, err := r.Round(cctx, active)
		o.Metrics.round(time.Since(start), st, err)
		if err != nil && !errors.Is(err, errNotActive) && !errors.Is(err, errNoPackages) && ctx.Err() == nil {
			o.Log.Warn("bandwidth manager: round failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-cl.Done():
			return
		case <-t.C:
		}
	}
}

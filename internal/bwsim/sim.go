// Package bwsim simulates azgate's shared bandwidth (issue 10 part 7;
// docs/bandwidth.md, "Simulator"): hosts in several zones (AZs) enforce
// per-EIP token buckets and report their rates every interval into an
// in-process store (bwstore.Mem), and the real managers of
// internal/bandwidth (a ZoneManager per zone, a RegionManager) run their
// rounds on it, while an oracle that knows the true demand allocates with
// the same Allocator. The metrics (overshoot, convergence, fairness,
// utilisation) compare the two. The simulator has no round of its own.
//
// The simulation is a fluid model on a simulated clock, shared by the
// store and the managers (bandwidth.Config.Now): no sleeping, and the
// same Config (seed included) gives the same figures, apart from the
// wall-clock time of the managers' rounds, which is measured.
package bwsim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwstore"
)

// Config sets the model's clock, delays and faults. Zero fields take the
// defaults of DefaultConfig except Seed, ReportDelay, PushDelay and Loss,
// whose zero is meaningful.
type Config struct {
	// Seed drives lost reports and the scenarios' random traces.
	Seed uint64
	// Tick is the fluid model's step (default 100 ms): token buckets,
	// demand and the metrics' series advance by one tick at a time.
	Tick time.Duration
	// Interval is the reporting interval (default 1 s, a whole number of
	// ticks): hosts report every interval, the manager runs a round every
	// interval.
	Interval time.Duration
	// ReportDelay is the time, in ticks, from the end of a measurement
	// interval to the manager's round that uses it (host write, zone
	// aggregation, region read).
	ReportDelay int
	// PushDelay is the time, in ticks, from the managers' round to the
	// hosts' reading of their limits from the store: every host reads its
	// limits PushDelay ticks after each round's time, every interval (the
	// zone manager writes the decreases, then the increases, within its
	// round; a host applies the set it reads).
	PushDelay int
	// Loss is the probability that a host's report is lost (0-1). The
	// store then still holds the host's previous report (TTL three
	// intervals, as the agents write it); the zone manager counts it while
	// it is younger than two intervals.
	Loss float64
	// NoDrops: hosts report no drop counts (traffic that adapts to its
	// limit, as TCP does, shows no drops): the estimator then finds
	// demand above a limit only by probing.
	NoDrops bool
	// Burst is the token buckets' burst time (default 20 ms, the model's
	// default); a bucket holds max(rate × Burst, 15,000 bytes).
	Burst time.Duration
	// Grace is the managers' grace (default 10 s): the TTL of the limits
	// they write; a host whose limits expired uses the static split.
	Grace time.Duration
	// HostFloor is SplitHosts' floor (default bwalloc.DefaultHostFloor).
	HostFloor float64
	// Estimator configures the managers' estimators (zero: bwalloc's
	// defaults).
	Estimator bwalloc.EstimatorConfig
	// Tolerance is how close to the oracle's rate an EIP must be to count
	// as converged (default 0.05), with a slack of 0.1 % of its package's
	// capacity.
	Tolerance float64
	// SteadyAfter: ticks at least this long after the last event count as
	// steady (default 5 s).
	SteadyAfter time.Duration
	// MinSegment: convergence is measured only after events followed by
	// at least this long without another (default 4 s).
	MinSegment time.Duration
}

// DefaultConfig is what zero fields default to, and the delays the
// benchmark uses unless told otherwise: 200 ms from measurement to
// round, 100 ms per push phase, 1 % of reports lost.
var DefaultConfig = Config{
	Seed:        1,
	Tick:        100 * time.Millisecond,
	Interval:    time.Second,
	ReportDelay: 2,
	PushDelay:   1,
	Loss:        0.01,
	Burst:       20 * time.Millisecond,
	Grace:       10 * time.Second,
	HostFloor:   bwalloc.DefaultHostFloor,
	Tolerance:   0.05,
	SteadyAfter: 5 * time.Second,
	MinSegment:  4 * time.Second,
}

// minBurstBits is the least a bucket holds: 15,000 bytes (the contract's
// burst floor, about ten full packets).
const minBurstBits = 15_000 * 8

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig
	if c.Tick == 0 {
		c.Tick = d.Tick
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.Burst == 0 {
		c.Burst = d.Burst
	}
	if c.Grace == 0 {
		c.Grace = d.Grace
	}
	if c.HostFloor == 0 {
		c.HostFloor = d.HostFloor
	}
	if c.Tolerance == 0 {
		c.Tolerance = d.Tolerance
	}
	if c.SteadyAfter == 0 {
		c.SteadyAfter = d.SteadyAfter
	}
	if c.MinSegment == 0 {
		c.MinSegment = d.MinSegment
	}
	switch {
	case c.Tick < time.Millisecond:
		return c, fmt.Errorf("bandwidth simulator: tick %v: want at least 1ms", c.Tick)
	case c.Interval < c.Tick || c.Interval%c.Tick != 0:
		return c, fmt.Errorf("bandwidth simulator: interval %v: want a whole number of ticks (%v)", c.Interval, c.Tick)
	case c.ReportDelay < 0 || c.PushDelay < 0:
		return c, fmt.Errorf("bandwidth simulator: report delay %d, push delay %d: want ticks ≥ 0", c.ReportDelay, c.PushDelay)
	case 2*c.PushDelay >= int(c.Interval/c.Tick):
		return c, fmt.Errorf("bandwidth simulator: push delay %d ticks: want less than half an interval (%d ticks)", c.PushDelay, c.Interval/c.Tick)
	case !(c.Loss >= 0 && c.Loss <= 1):
		return c, fmt.Errorf("bandwidth simulator: loss %v: want a probability in [0, 1]", c.Loss)
	case c.Grace < c.Interval:
		return c, fmt.Errorf("bandwidth simulator: grace %v: want at least one interval", c.Grace)
	}
	return c, nil
}

// Host is a node that carries EIPs: an agent (egress) or an edge
// (ingress), in a zone.
type Host struct {
	Zone, Name string
}

// EIP is one member of a package: the package's terms for it
// (bwalloc.EIP; its Demand is ignored, the scenario gives demand) and the
// hosts that carry it.
type EIP struct {
	bwalloc.EIP
	Hosts []Host
}

// Package is a bandwidth package: capacity (bits/s) and EIPs.
type Package struct {
	Name     string
	Capacity uint64
	EIPs     []EIP
}

// Outage is a time during which no manager runs: hosts keep their limits
// for Config.Grace, then fall back to the static split; at To a new
// manager (with no history) takes over.
type Outage struct {
	From, To time.Duration
}

// Scenario is a topology and demand traces.
type Scenario struct {
	Name        string
	Description string
	Packages    []Package
	Duration    time.Duration
	// Events are the changes after which convergence is measured (demand
	// steps, the manager's return).
	Events []time.Duration
	// Demand is the true demand of EIP i of package p during the tick
	// starting at t, bits/s.
	Demand func(t time.Duration, p, i int) float64
	// Spread, if set, writes into dst the fraction of that demand offered
	// on each of the EIP's hosts (in EIP.Hosts order, summing to 1);
	// otherwise the demand is spread equally.
	Spread func(t time.Duration, p, i int, dst []float64)
	Outage *Outage
}

// slot is one EIP on one host: a token bucket and its counters.
type slot struct {
	eip   int32
	host  int32
	key   bwalloc.HostKey
	limit uint64  // bits/s in force
	burst float64 // bits the bucket holds at most
	// managed: the host has enforced a limit from a manager for this
	// EIP at least once (until then it is on a static split that no
	// manager may know of: its report never reached one).
	managed bool
	tokens  float64 // bits
	share   float64 // fraction of the EIP's demand offered here
	// over the current reporting interval, bits
	served, dropped float64
}

type eipState struct {
	pkg, idx int32 // package, index in the scenario's package
	addr     netip.Addr
	terms    bwalloc.EIP
	ceiling  uint64
	slots    []int32 // in EIP.Hosts order
	static   uint64  // each host's static limit: StaticSplit / hosts
}

type hostState struct {
	Host
	zone  int32
	slots []int32 // sorted by EIP: the order of the host's limits in the store
}

type pkgState struct {
	capacity uint64
	eips     []int32 // global EIP indexes, sorted by address
}

// report is a host's report on its way to the store.
type report struct {
	host    int32
	arrives int // tick it reaches the store
	rates   []bwstore.Rate
}

type sim struct {
	cfg    Config
	sc     *Scenario
	rng    *rand.Rand
	dt     float64 // tick in seconds
	tpi    int     // ticks per interval
	zones  []string
	hosts  []hostState
	pkgs   []pkgState
	eips   []eipState
	slots  []slot
	bySlot map[bwalloc.HostKey]int32

	inflight []report
	clk      *simClock
	mem      *bwstore.Mem
	bwPkgs   []bandwidth.Package
	mgrs     *managers // nil while no manager runs
	// unmanaged counts the slots not yet managed; managedFrom is the
	// tick from which every slot has been (-1: not yet).
	unmanaged, managedFrom int
}

func newSim(cfg Config, sc *Scenario) (*sim, error) {
	s := &sim{cfg: cfg, sc: sc, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6277)), dt: cfg.Tick.Seconds(), tpi: int(cfg.Interval / cfg.Tick), clk: &simClock{t: epoch}}
	s.mem = bwstore.NewMem(s.clk)
	if sc.Demand == nil {
		return nil, fmt.Errorf("scenario %s: no demand", sc.Name)
	}
	zoneIdx := map[string]int32{}
	hostIdx := map[string]int32{}
	seen := map[netip.Addr]string{}
	for p, pk := range sc.Packages {
		if pk.Capacity == 0 || pk.Capacity > bwalloc.MaxRate {
			return nil, fmt.Errorf("scenario %s: package %s: capacity %d", sc.Name, pk.Name, pk.Capacity)
		}
		terms := make([]bwalloc.EIP, len(pk.EIPs))
		for i, e := range pk.EIPs {
			terms[i] = e.EIP
		}
		st, err := bwalloc.StaticSplit(pk.Capacity, terms)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: package %s: %w", sc.Name, pk.Name, err)
		}
		ps := pkgState{capacity: pk.Capacity}
		for i, e := range pk.EIPs {
			if other, ok := seen[e.Addr]; ok {
				return nil, fmt.Errorf("scenario %s: EIP %v in packages %s and %s", sc.Name, e.Addr, other, pk.Name)
			}
			seen[e.Addr] = pk.Name
			if len(e.Hosts) == 0 {
				return nil, fmt.Errorf("scenario %s: package %s: EIP %v carried by no host", sc.Name, pk.Name, e.Addr)
			}
			ei := int32(len(s.eips))
			es := eipState{pkg: int32(p), idx: int32(i), addr: e.Addr, terms: e.EIP, ceiling: pk.Capacity}
			es.terms.Demand = 0
			if e.Max != 0 {
				es.ceiling = min(e.Max, pk.Capacity)
			}
			g, _ := slices.BinarySearchFunc(st.Grants, e.Addr, func(g bwalloc.Grant, a netip.Addr) int { return g.Addr.Compare(a) })
			es.static = st.Grants[g].Limit / uint64(len(e.Hosts))
			for _, h := range e.Hosts {
				z, ok := zoneIdx[h.Zone]
				if !ok {
					z = int32(len(s.zones))
					zoneIdx[h.Zone] = z
					s.zones = append(s.zones, h.Zone)
				}
				hi, ok := hostIdx[h.Name]
				if !ok {
					hi = int32(len(s.hosts))
					hostIdx[h.Name] = hi
					s.hosts = append(s.hosts, hostState{Host: h, zone: z})
				} else if s.hosts[hi].Zone != h.Zone {
					return nil, fmt.Errorf("scenario %s: host %s in zones %s and %s", sc.Name, h.Name, s.hosts[hi].Zone, h.Zone)
				}
				si := int32(len(s.slots))
				b := max(float64(es.static)*cfg.Burst.Seconds(), minBurstBits)
				s.slots = append(s.slots, slot{eip: ei, host: hi, key: bwalloc.HostKey{Addr: e.Addr, Host: h.Name}, limit: es.static, burst: b, tokens: b, share: 1 / float64(len(e.Hosts))})
				s.hosts[hi].slots = append(s.hosts[hi].slots, si)
				es.slots = append(es.slots, si)
			}
			s.eips = append(s.eips, es)
			ps.eips = append(ps.eips, ei)
		}
		slices.SortFunc(ps.eips, func(a, b int32) int { return s.eips[a].addr.Compare(s.eips[b].addr) })
		s.pkgs = append(s.pkgs, ps)
	}
	s.bySlot = make(map[bwalloc.HostKey]int32, len(s.slots))
	for i := range s.slots {
		k := s.slots[i].key
		if _, dup := s.bySlot[k]; dup {
			return nil, fmt.Errorf("scenario %s: EIP %v on host %s twice", sc.Name, k.Addr, k.Host)
		}
		s.bySlot[k] = int32(i)
	}
	for h := range s.hosts {
		sl := s.hosts[h].slots
		slices.SortFunc(sl, func(a, b int32) int { return s.slots[a].key.Addr.Compare(s.slots[b].key.Addr) })
	}
	s.bwPkgs = s.bwPackages()
	s.unmanaged, s.managedFrom = len(s.slots), -1
	return s, nil
}

// Run simulates sc under cfg and returns its metrics.
func Run(cfg Config, sc *Scenario) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s, err := newSim(cfg, sc)
	if err != nil {
		return nil, err
	}
	return s.run()
}

// managerUp reports whether a manager runs at tick.
func (s *sim) managerUp(tick int) bool {
	o := s.sc.Outage
	if o == nil {
		return true
	}
	t := time.Duration(tick) * s.cfg.Tick
	return t < o.From || t >= o.To
}

// epoch is the simulated clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *sim) run() (*Result, error) {
	ctx := context.Background()
	nTicks := int(s.sc.Duration / s.cfg.Tick)
	rec := newRecorder(s, nTicks)
	demand := make([]float64, len(s.eips))
	spread := []float64{}
	var roundTimes []Timing
	for tick := 0; tick < nTicks; tick++ {
		t := time.Duration(tick) * s.cfg.Tick
		s.clk.t = epoch.Add(t)
		// Reports of the interval that just ended.
		if tick > 0 && tick%s.tpi == 0 {
			s.report(tick)
		}
		k := 0
		for _, r := range s.inflight {
			if r.arrives > tick {
				s.inflight[k] = r
				k++
				continue
			}
			h := &s.hosts[r.host]
			if err := s.mem.WriteReports(ctx, h.Zone, h.Name, 3*s.cfg.Interval, r.rates); err != nil {
				return nil, fmt.Errorf("scenario %s: report of %s at %v: %w", s.sc.Name, h.Name, t, err)
			}
		}
		s.inflight = s.inflight[:k]
		// The managers' round: every interval, ReportDelay ticks after
		// the interval's end.
		since := tick - s.cfg.ReportDelay
		if up := s.managerUp(tick); !up {
			s.mgrs = nil
		} else if since > 0 && since%s.tpi == 0 {
			if s.mgrs == nil {
				m, err := newManagers(s)
				if err != nil {
					return nil, err
				}
				s.mgrs = m
			}
			tm, err := s.mgrs.round()
			roundTimes = append(roundTimes, tm)
			if err != nil {
				return nil, fmt.Errorf("scenario %s: round at %v: %w", s.sc.Name, t, err)
			}
		}
		// The hosts read their limits PushDelay ticks after each round's
		// time (whether a round ran or not).
		if since -= s.cfg.PushDelay; since > 0 && since%s.tpi == 0 {
			if err := s.poll(ctx); err != nil {
				return nil, fmt.Errorf("scenario %s: hosts reading their limits at %v: %w", s.sc.Name, t, err)
			}
		}
		if s.managedFrom < 0 && s.unmanaged == 0 {
			s.managedFrom = tick
		}
		// Limits in force, per package.
		for si := range s.slots {
			sl := &s.slots[si]
			rec.limit[s.eips[sl.eip].pkg] += float64(sl.limit)
		}
		// Demand and the fluid step.
		for ei := range s.eips {
			e := &s.eips[ei]
			demand[ei] = max(0, s.sc.Demand(t, int(e.pkg), int(e.idx)))
			if s.sc.Spread != nil && len(e.slots) > 1 {
				spread = slices.Grow(spread[:0], len(e.slots))[:len(e.slots)]
				s.sc.Spread(t, int(e.pkg), int(e.idx), spread)
				for k, si := range e.slots {
					s.slots[si].share = spread[k]
				}
			}
		}
		for si := range s.slots {
			sl := &s.slots[si]
			d := demand[sl.eip] * sl.share * s.dt
			r := float64(sl.limit)
			avail := sl.tokens + r*s.dt
			sv := min(d, avail)
			sl.tokens = min(sl.burst, avail-sv)
			sl.served += sv
			sl.dropped += d - sv
			rec.served[sl.eip] += sv / s.dt
		}
		rec.tick(tick, demand)
	}
	res := rec.result()
	res.Rounds = len(roundTimes)
	if len(roundTimes) > 0 {
		slices.SortFunc(roundTimes, func(a, b Timing) int { return cmp.Compare(a.Total(), b.Total()) })
		res.RoundMedian = roundTimes[len(roundTimes)/2]
		res.RoundMax = roundTimes[len(roundTimes)-1]
	}
	return res, nil
}

// report makes every host's report for the interval ending at tick (per
// EIP, bytes/s passed and dropped, as an agent writes it); each is lost
// with probability Loss, else reaches the store ReportDelay ticks later.
func (s *sim) report(tick int) {
	iv := s.cfg.Interval.Seconds()
	for h := range s.hosts {
		hs := &s.hosts[h]
		rates := make([]bwstore.Rate, len(hs.slots))
		for k, si := range hs.slots {
			sl := &s.slots[si]
			b := bytesOf(sl.served / iv)
			r := bwstore.Rate{EIP: sl.key.Addr, Dir: bwstore.Egress, BytesPerSec: b, PacketsPerSec: b / 1000}
			if !s.cfg.NoDrops {
				r.DropBytesPerSec = bytesOf(sl.dropped / iv)
			}
			rates[k] = r
			sl.served, sl.dropped = 0, 0
		}
		if s.cfg.Loss > 0 && s.rng.Float64() < s.cfg.Loss {
			continue
		}
		s.inflight = append(s.inflight, report{host: int32(h), arrives: tick + s.cfg.ReportDelay, rates: rates})
	}
}

// poll is every host reading its limits from the store, as an agent
// does: a limit for an EIP it carries is enforced (rate and burst); an
// EIP with none, or every EIP once the host's limits expired (no manager
// wrote for the grace), is on its static split.
func (s *sim) poll(ctx context.Context) error {
	for h := range s.hosts {
		hs := &s.hosts[h]
		hl, ok, err := s.mem.ReadLimits(ctx, hs.Zone, hs.Name)
		if err != nil {
			return err
		}
		var ls []bwstore.Limit
		if ok {
			ls = hl.Limits.Limits
		}
		for _, si := range hs.slots {
			sl := &s.slots[si]
			i, found := slices.BinarySearchFunc(ls, sl.key.Addr, func(l bwstore.Limit, a netip.Addr) int { return l.EIP.Compare(a) })
			if found && ls[i].Dir == bwstore.Egress {
				if !sl.managed {
					sl.managed = true
					s.unmanaged--
				}
				sl.limit = ls[i].RateBytes * 8
				sl.burst = max(float64(ls[i].BurstBytes)*8, minBurstBits)
				continue
			}
			sl.limit = s.eips[sl.eip].static
			sl.burst = max(float64(sl.limit)*s.cfg.Burst.Seconds(), minBurstBits)
		}
	}
	return nil
}

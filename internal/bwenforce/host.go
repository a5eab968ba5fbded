// Package bwenforce is the hosts' tier of shared bandwidth (issue 10):
// an agent (egress) or an edge (ingress) measures each packaged EIP's
// rate from the data plane's counters, reports it to its zone's store,
// polls the limits its zone manager writes and enforces them in the XDP
// token buckets (dataplane.BandwidthMaps), or the package's static split
// when no manager spoke for a grace. It is apart from internal/bandwidth
// (the managers) so that `azgate bwmgr` does not link the data plane.
package bwenforce

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// Reading is one EIP's cumulative counters for the node's direction
// (agent: guest -> Internet, edge: Internet -> EIP).
type Reading struct {
	Bytes, Packets uint64
	// Slot is the counters' stats slot: a reading from another slot
	// (the EIP moved, its slot was reused and reset) starts over.
	Slot uint32
}

// Counters reads the node's per-EIP counters.
type Counters interface {
	// ReadCounters returns every EIP's reading and when it was taken.
	ReadCounters() (map[netip.Addr]Reading, time.Time, error)
}

// CountersFunc adapts a function to Counters.
type CountersFunc func() (map[netip.Addr]Reading, time.Time, error)

// ReadCounters implements Counters.
func (f CountersFunc) ReadCounters() (map[netip.Addr]Reading, time.Time, error) { return f() }

// Carried is one EIP the node carries that belongs to a bandwidth package,
// with what the node needs of the package.
type Carried struct {
	Package  string
	Capacity uint64        // the package's capacity, bit/s
	Burst    time.Duration // the package's burst time (BandwidthPackage.BurstTime)
	// Static is the EIP's share of the package in the static split
	// (bwalloc.StaticSplit), bit/s, for all the nodes carrying it.
	Static uint64
	// Carriers is how many nodes carry the EIP in this node's direction
	// (agent: 1; edge: the live members of its set): the static share is
	// divided by it. Below 1 counts as 1.
	Carriers int
}

// View is what the Host needs of the desired state: its zone (bwstore's
// "az"; "" while unknown: nothing is reported or read) and the packaged
// EIPs it carries. EIPs nil means the desired state is not read yet: the
// Host then changes no limit (a restarted node keeps the ones it had).
type View struct {
	Zone string
	EIPs map[netip.Addr]Carried
}

// NewView builds a View from the packages: addrs are the EIPs the node
// carries (in a package or not), pkgOf says which package each belongs to
// (model.State.PackageOf), carriers how many nodes carry it (nil: 1). The
// static split is computed once per package. A package the split refuses
// (not validated) is reported in the error and its EIPs get the smallest
// limit; the others are still filled in.
func NewView(zone string, pkgs map[string]*model.BandwidthPackage, pkgOf func(netip.Addr) (string, bool),
	addrs []netip.Addr, carriers func(netip.Addr) int) (View, error) {
	v := View{Zone: zone, EIPs: map[netip.Addr]Carried{}}
	static := map[string]map[netip.Addr]uint64{}
	var errs []error
	for _, a := range addrs {
		name, ok := pkgOf(a)
		if !ok {
			continue
		}
		p, ok := pkgs[name]
		if !ok {
			continue
		}
		split, ok := static[name]
		if !ok {
			var err error
			if split, err = StaticShares(p); err != nil {
				errs = append(errs, err)
			}
			static[name] = split
		}
		n := 1
		if carriers != nil {
			n = max(carriers(a), 1)
		}
		v.EIPs[a] = Carried{Package: name, Capacity: p.Capacity, Burst: p.BurstTime(), Static: split[a], Carriers: n}
	}
	switch len(errs) {
	case 0:
	case 1:
		return v, fmt.Errorf("bandwidth: static split: %w", errs[0])
	default:
		return v, fmt.Errorf("bandwidth: static split: %w (and %d more)", errs[0], len(errs)-1)
	}
	return v, nil
}

// StaticShares is the static split of package p (bwalloc.StaticSplit):
// each EIP's share, bit/s.
func StaticShares(p *model.BandwidthPackage) (map[netip.Addr]uint64, error) {
	in := make([]bwalloc.EIP, len(p.EIPs))
	for i, e := range p.EIPs {
		in[i] = bwalloc.EIP{Addr: e.Address, Min: e.Min, Max: e.Max, Weight: e.W()}
	}
	res, err := bwalloc.StaticSplit(p.Capacity, in)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", p.Name, err)
	}
	out := make(map[netip.Addr]uint64, len(res.Grants))
	for _, g := range res.Grants {
		out[g.Addr] = g.Limit
	}
	return out, nil
}

// Mode says where an EIP's limit comes from.
type Mode string

const (
	// Managed: the limit the zone manager pushed for this node.
	Managed Mode = "managed"
	// Static: the package's static split divided by the EIP's carriers
	// (no limits from a manager, or none for this EIP).
	Static Mode = "static"
)

// Target is the limit an EIP must have on this node.
type Target struct {
	Rate  uint64 // bit/s
	Burst uint32 // bytes
	Mode  Mode
}

// HostConfig configures a Host.
type HostConfig struct {
	Store bwstore.Store
	// Reporter is the node's name in the zone's store: the host's name
	// (agents) or the edge's.
	Reporter string
	Dir      bwstore.Direction // Egress (agents) or Ingress (edges)
	Interval time.Duration     // between reports (0: bandwidth.DefaultInterval)
	// Grace is how long the node keeps limits it can no longer confirm
	// (store unreachable) before the static split (0: bandwidth.DefaultGrace). The
	// managers push limits with this TTL, so limits that expired mean no
	// manager spoke for that long: the node falls back at once.
	Grace    time.Duration
	Counters Counters
	// Limits programs the data plane. The roles wrap their Edge or Agent
	// so SetEIPBandwidth is serialised with their route and EIP writes
	// (dataplane.Edge.SetEIPBandwidth says why).
	Limits dataplane.BandwidthMaps
	// View returns the current view of the desired state (called once a
	// pass; it must be cheap).
	View func() View
	Log  *slog.Logger
	// Now is the clock (nil: time.Now); tests pass their own.
	Now func() time.Time
}

// HostCounts are a Host's event counters (monotonic).
type HostCounts struct {
	Reports        uint64 `json:"reports"`         // reports written
	ReportErrors   uint64 `json:"report_errors"`   // report writes that failed
	LimitReads     uint64 `json:"limit_reads"`     // limit sets read (a new generation)
	LimitErrors    uint64 `json:"limit_errors"`    // generation polls or limit reads that failed
	Ignored        uint64 `json:"ignored"`         // limits ignored: an EIP not carried here or in no package, or another direction
	Clamped        uint64 `json:"clamped"`         // limits clamped (rate above the package's capacity, burst out of bounds)
	ApplyErrors    uint64 `json:"apply_errors"`    // data-plane writes or reads that failed
	CounterErrors  uint64 `json:"counter_errors"`  // counter reads that failed
	StaticFallback uint64 `json:"static_fallback"` // times the node fell back from managed limits to the static split
}

// Host measures and enforces one node's shared bandwidth: every interval
// it turns the node's per-EIP counters into rates and writes them to its
// zone's store, polls the generation of its limits and reads them when it
// moved, and programs each carried EIP's limit: the managed one while it
// is in force, else the static split (issue 10 parts 2, 5 and 6).
type Host struct {
	cfg  HostConfig
	kick chan struct{}

	mu        sync.Mutex // the loop's state (Step, Enforce)
	zone      string
	prev      map[netip.Addr]Reading
	prevAt    time.Time
	prevDrops map[netip.Addr]uint64
	rates     map[netip.Addr]bwstore.Rate // the last report's rows
	lim       limitState
	applied   map[netip.Addr]Target // as programmed by the last pass
	view      View                  // of the last pass
	drops     map[netip.Addr]dataplane.BandwidthDrops
	counts    HostCounts
	errs      map[string]string // the last error of each operation ("" or absent: none)
	written   bool              // the last report written had rows

	smu        sync.Mutex // the state as of the last pass (publish, Status)
	snap       HostStatus
	snapIssued time.Time
	snapHave   bool
}

// limitState is what the node knows of its managed limits.
type limitState struct {
	have   bool
	gen    uint64
	limits map[netip.Addr]bwstore.Limit // this direction only (FilterLimits)
	// confirmed is when the store last said these limits are current;
	// issued is when they were written (as of the read: now - Age).
	confirmed, issued time.Time
}

// NewHost checks the configuration and returns a Host; Run starts it.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.Store == nil || cfg.Counters == nil || cfg.Limits == nil || cfg.View == nil {
		return nil, fmt.Errorf("bandwidth host: store, counters, limits and view are required")
	}
	if cfg.Dir != bwstore.Egress && cfg.Dir != bwstore.Ingress {
		return nil, fmt.Errorf("bandwidth host %s: direction %v is neither egress nor ingress", cfg.Reporter, cfg.Dir)
	}
	if cfg.Interval == 0 {
		cfg.Interval = bandwidth.DefaultInterval
	}
	if cfg.Grace == 0 {
		cfg.Grace = bandwidth.DefaultGrace
	}
	if cfg.Interval < 10*time.Millisecond || cfg.Interval > time.Minute {
		return nil, fmt.Errorf("bandwidth host %s: interval %v: want 10ms-1m", cfg.Reporter, cfg.Interval)
	}
	if cfg.Grace < cfg.Interval || cfg.Grace > bwstore.MaxTTL {
		return nil, fmt.Errorf("bandwidth host %s: grace %v: want at least the interval (%v) and at most %v", cfg.Reporter, cfg.Grace, cfg.Interval, bwstore.MaxTTL)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Host{cfg: cfg, kick: make(chan struct{}, 1), errs: map[string]string{}}, nil
}

// Run reports and enforces every interval until ctx ends. The first pass
// is at once: packaged EIPs start from the static split, never unlimited.
func (h *Host) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	h.Step(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.Step(ctx)
		case <-h.kick:
			h.Enforce()
		}
	}
}

// Kick asks for an enforcement pass soon (the view changed: an EIP the
// node now carries gets its limit without waiting for the interval).
func (h *Host) Kick() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Step is one interval: measure and report, poll the limits, enforce.
func (h *Host) Step(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.cfg.View()
	h.view = v
	now := h.cfg.Now()
	if v.Zone != h.zone {
		// Another zone's limits are not ours, nor is its generation.
		h.zone, h.lim = v.Zone, limitState{}
	}
	h.measure(ctx, v)
	h.poll(ctx, v, now)
	h.enforce(v, now)
	h.publish()
}

// Enforce programs the limits again from the current view, without
// measuring or reading the store.
func (h *Host) Enforce() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.view = h.cfg.View()
	h.enforce(h.view, h.cfg.Now())
	h.publish()
}

// measure reads the counters and writes the report: a row for every
// carried EIP whose rate could be measured (zeros included); an EIP whose
// counters were not read, or were reset, is left out (a missing report is
// not zero).
func (h *Host) measure(ctx context.Context, v View) {
	cur, at, err := h.cfg.Counters.ReadCounters()
	if err != nil {
		h.counts.CounterErrors++
		h.note("counters", err)
		return
	}
	h.note("counters", nil)
	drops := make(map[netip.Addr]uint64, len(v.EIPs))
	prevStatus := h.drops
	h.drops = make(map[netip.Addr]dataplane.BandwidthDrops, len(v.EIPs))
	var dropErr error
	for a := range v.EIPs {
		d, ok, err := h.cfg.Limits.EIPBandwidthDrops(a)
		if err != nil {
			h.counts.ApplyErrors++
			dropErr = cmpErr(dropErr, err)
			// Keep the last reading as the base: without one the next
			// pass would count every drop since the slot was taken as
			// dropped within one interval.
			if p, ok := h.prevDrops[a]; ok {
				drops[a] = p
				h.drops[a] = prevStatus[a]
			}
			continue
		}
		if ok {
			drops[a] = d.Bytes
			h.drops[a] = d
		}
	}
	h.note("drops", dropErr)
	first := h.prevAt.IsZero()
	dt := at.Sub(h.prevAt)
	rates := make([]bwstore.Rate, 0, len(v.EIPs))
	h.rates = make(map[netip.Addr]bwstore.Rate, len(v.EIPs))
	if !first {
		for a := range v.EIPs {
			c, ok := cur[a]
			if !ok {
				continue
			}
			p, ok := h.prev[a]
			if !ok {
				continue
			}
			bps, pps, ok := RateOf(p, c, dt)
			if !ok {
				continue
			}
			r := bwstore.Rate{EIP: a, Dir: h.cfg.Dir, BytesPerSec: bps, PacketsPerSec: pps,
				DropBytesPerSec: DropRate(h.prevDrops[a], drops[a], dt)}
			rates = append(rates, r)
			h.rates[a] = r
		}
	}
	h.prev, h.prevAt, h.prevDrops = cur, at, drops
	if h.zone == "" || first || dt <= 0 {
		return // nothing measured yet: no report rather than an empty one
	}
	if len(rates) == 0 && !h.written {
		// Nothing to say, and nothing said before: a node that carries
		// no packaged EIP takes no room among the zone's reporters.
		return
	}
	slices.SortFunc(rates, func(x, y bwstore.Rate) int { return x.EIP.Compare(y.EIP) })
	if len(rates) > bwstore.MaxRatesPerReport {
		rates = rates[:bwstore.MaxRatesPerReport]
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.Interval)
	defer cancel()
	if err := h.cfg.Store.WriteReports(cctx, h.zone, h.cfg.Reporter, 3*h.cfg.Interval, rates); err != nil {
		h.counts.ReportErrors++
		h.note("report", err)
		return
	}
	h.note("report", nil)
	h.counts.Reports++
	h.written = len(rates) > 0
}

// poll reads the generation of the node's limits and, when it moved, the
// limits themselves.
func (h *Host) poll(ctx context.Context, v View, now time.Time) {
	if h.zone == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.Interval)
	defer cancel()
	gen, ok, err := h.cfg.Store.LimitsGeneration(cctx, h.zone, h.cfg.Reporter)
	if err != nil {
		h.counts.LimitErrors++
		h.note("limits", err)
		return
	}
	if !ok {
		// Expired (pushed with TTL = grace) or never written.
		h.note("limits", nil)
		h.lim.have = false
		return
	}
	if h.lim.have && gen == h.lim.gen {
		h.note("limits", nil)
		h.lim.confirmed = now
		return
	}
	hl, ok, err := h.cfg.Store.ReadLimits(cctx, h.zone, h.cfg.Reporter)
	if err != nil {
		h.counts.LimitErrors++
		h.note("limits", err)
		return
	}
	h.note("limits", nil)
	if !ok {
		h.lim.have = false
		return
	}
	lim, ignored := FilterLimits(hl.Limits.Limits, h.cfg.Dir, v.EIPs)
	h.counts.LimitReads++
	h.counts.Ignored += uint64(ignored)
	if ignored > 0 {
		h.cfg.Log.Warn("bandwidth limits ignored: for EIPs this node does not carry in a package, or another direction",
			"zone", h.zone, "generation", hl.Generation, "ignored", ignored)
	}
	h.lim = limitState{have: true, gen: hl.Generation, limits: lim, confirmed: now, issued: now.Add(-hl.Age)}
}

// enforce programs every carried EIP's target and removes the limits of
// the EIPs the node no longer carries.
func (h *Host) enforce(v View, now time.Time) {
	if v.EIPs == nil {
		return
	}
	managed := InForce(h.lim.have, h.lim.confirmed, now, h.cfg.Grace)
	wasManaged := false
	for _, t := range h.applied {
		if t.Mode == Managed {
			wasManaged = true
			break
		}
	}
	if wasManaged && !managed {
		h.counts.StaticFallback++
		h.cfg.Log.Warn("no bandwidth limits from a manager within the grace period: static split", "zone", h.zone, "grace", h.cfg.Grace)
	}
	var lim map[netip.Addr]bwstore.Limit
	if managed {
		lim = h.lim.limits
	}
	targets, clamped := Targets(v.EIPs, lim)
	h.counts.Clamped += uint64(clamped)
	cur, err := h.cfg.Limits.EIPBandwidths()
	if err != nil {
		h.counts.ApplyErrors++
		h.note("apply", err)
		return
	}
	var firstErr error
	for a := range cur {
		if _, ok := targets[a]; ok {
			continue
		}
		if err := h.cfg.Limits.SetEIPBandwidth(a, 0, 0); err != nil {
			h.counts.ApplyErrors++
			firstErr = cmpErr(firstErr, err)
		}
	}
	applied := make(map[netip.Addr]Target, len(targets))
	for a, t := range targets {
		if cur[a] != (dataplane.Bandwidth{Rate: t.Rate, Burst: t.Burst}) {
			if err := h.cfg.Limits.SetEIPBandwidth(a, t.Rate, t.Burst); err != nil {
				h.counts.ApplyErrors++
				firstErr = cmpErr(firstErr, err)
				continue
			}
		}
		applied[a] = t
	}
	h.applied = applied
	h.note("apply", firstErr)
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// note logs an operation's error once per change (and its recovery).
func (h *Host) note(op string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if h.errs[op] == msg {
		return
	}
	if msg == "" {
		h.cfg.Log.Info("bandwidth "+op+" works again", "zone", h.zone)
		delete(h.errs, op)
		return
	}
	h.errs[op] = msg
	h.cfg.Log.Warn("bandwidth "+op+" failed", "zone", h.zone, "err", err)
}

// HostStatus is what a Host shows in the node status and metrics.
type HostStatus struct {
	Zone       string
	Dir        bwstore.Direction
	Managed    bool          // limits from a manager are in force
	Generation uint64        // of the limits in force (0: none)
	LimitsAge  time.Duration // since they were written (-1: none)
	Counts     HostCounts
	Errors     []string
	EIPs       map[netip.Addr]EIPStatus
}

// EIPStatus is one carried EIP on this node.
type EIPStatus struct {
	Package string
	Target
	Drops dataplane.BandwidthDrops // since the EIP took its stats slot
	// Measured is the last report's row (absent: not measured).
	Measured *bwstore.Rate
}

// publish makes the state of the pass just done what Status returns
// (under h.mu): Status never waits for a pass blocked on the store.
func (h *Host) publish() {
	s := HostStatus{Zone: h.zone, Dir: h.cfg.Dir, Managed: InForce(h.lim.have, h.lim.confirmed, h.cfg.Now(), h.cfg.Grace),
		LimitsAge: -1, Counts: h.counts, EIPs: make(map[netip.Addr]EIPStatus, len(h.applied))}
	if h.lim.have {
		s.Generation = h.lim.gen
	}
	for _, op := range []string{"counters", "report", "limits", "drops", "apply"} {
		if m := h.errs[op]; m != "" {
			s.Errors = append(s.Errors, "bandwidth "+op+": "+m)
		}
	}
	for a, t := range h.applied {
		e := EIPStatus{Package: h.view.EIPs[a].Package, Target: t, Drops: h.drops[a]}
		if r, ok := h.rates[a]; ok {
			e.Measured = &r
		}
		s.EIPs[a] = e
	}
	h.smu.Lock()
	h.snap, h.snapIssued, h.snapHave = s, h.lim.issued, h.lim.have
	h.smu.Unlock()
}

// Status returns the Host's state as of its last pass (the limits' age
// as of now).
func (h *Host) Status() HostStatus {
	h.smu.Lock()
	defer h.smu.Unlock()
	s := h.snap
	if h.snapHave {
		s.LimitsAge = h.cfg.Now().Sub(h.snapIssued)
	}
	return s
}

// ClearLimits removes every limit a previous run left on a node whose
// bandwidth is off (no --bw-store): a limit nobody updates any more would
// hold the EIP forever.
func ClearLimits(maps dataplane.BandwidthMaps, log *slog.Logger) {
	cur, err := maps.EIPBandwidths()
	if err != nil {
		log.Warn("cannot list bandwidth limits", "err", err)
		return
	}
	for a := range cur {
		if err := maps.SetEIPBandwidth(a, 0, 0); err != nil {
			log.Warn("cannot remove a bandwidth limit", "eip", a, "err", err)
		}
	}
	if len(cur) > 0 {
		log.Info("bandwidth off (no --bw-store): removed the limits a previous run left", "limits", len(cur))
	}
}

// ---- pure parts ----

// Counter sanity bounds: a delta above what any link could carry in the
// interval is a reset (the slot was reused and zeroed), not traffic; below
// it, a counter that went back wrapped (64-bit modular arithmetic).
const (
	maxBytesPerSec   = 1 << 40 // 8.8 Tbit/s
	maxPacketsPerSec = 1 << 32
)

// RateOf turns two readings of one EIP's counters, dt apart, into bytes
// and packets per second; ok is false when they cannot be compared: no
// time passed, another slot, or a reset (a delta above what any link
// could carry in dt). A 64-bit counter that wrapped gives the right delta
// through modular arithmetic.
func RateOf(prev, cur Reading, dt time.Duration) (bps, pps uint64, ok bool) {
	if dt <= 0 || prev.Slot != cur.Slot {
		return 0, 0, false
	}
	s := dt.Seconds()
	db, dp := cur.Bytes-prev.Bytes, cur.Packets-prev.Packets
	if float64(db) > maxBytesPerSec*s+1 || float64(dp) > maxPacketsPerSec*s+1 {
		return 0, 0, false
	}
	return perSec(db, s), perSec(dp, s), true
}

// DropRate is the rate of a drop counter (bytes): a counter that went back
// (the limit's bucket moved to another slot, or was set anew) counts from
// zero.
func DropRate(prev, cur uint64, dt time.Duration) uint64 {
	if dt <= 0 {
		return 0
	}
	if cur < prev {
		prev = 0
	}
	return perSec(cur-prev, dt.Seconds())
}

func perSec(delta uint64, s float64) uint64 {
	r := math.Round(float64(delta) / s)
	if r >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(r)
}

// InForce says whether managed limits apply: the node has some, and the
// store confirmed them within the grace period (the store may be
// unreachable meanwhile: the node keeps its last limits that long).
func InForce(have bool, confirmed, now time.Time, grace time.Duration) bool {
	return have && now.Sub(confirmed) <= grace
}

// FilterLimits keeps the limits of dir, the first of each EIP; ignored
// counts the limits never applied: another direction, a repeated EIP, an
// EIP not in carried (this node does not carry it, or it is in no
// package). The latter are kept, as Targets uses only the carried EIPs'
// limits: an EIP the node starts carrying after the read (its view lagged
// the manager's) takes its limit without waiting for the next push.
func FilterLimits(ls []bwstore.Limit, dir bwstore.Direction, carried map[netip.Addr]Carried) (map[netip.Addr]bwstore.Limit, int) {
	out := make(map[netip.Addr]bwstore.Limit, len(ls))
	ignored := 0
	for _, l := range ls {
		if l.Dir != dir {
			ignored++
			continue
		}
		if _, dup := out[l.EIP]; dup {
			ignored++
			continue
		}
		if _, ok := carried[l.EIP]; !ok {
			ignored++
		}
		out[l.EIP] = l
	}
	return out, ignored
}

// Targets chooses each carried EIP's limit: its managed limit when lim
// has one (nil lim: none in force), else its static split. Managed limits
// are clamped to the package (rate at most its capacity, burst at most
// the capacity's burst) and to what the data plane can enforce; clamped
// counts those that were.
func Targets(carried map[netip.Addr]Carried, lim map[netip.Addr]bwstore.Limit) (map[netip.Addr]Target, int) {
	out := make(map[netip.Addr]Target, len(carried))
	clamped := 0
	for a, c := range carried {
		if l, ok := lim[a]; ok {
			t, cl := managedTarget(c, l)
			if cl {
				clamped++
			}
			out[a] = t
			continue
		}
		out[a] = StaticTarget(c)
	}
	return out, clamped
}

// rateBounds are the rates a limit for c may have: the data plane's
// bounds, and at most the package's capacity.
func rateBounds(c Carried) (lo, hi uint64) {
	hi = min(c.Capacity, dataplane.MaxBandwidthRate)
	if hi < dataplane.MinBandwidthRate {
		hi = dataplane.MinBandwidthRate
	}
	return dataplane.MinBandwidthRate, hi
}

// burstOf is a rate's burst in c's package: rate × burst time, at least
// bandwidth.MinBurstBytes, at most 2^32-1.
func burstOf(c Carried, rate uint64) uint32 {
	p := model.BandwidthPackage{Burst: model.Duration(c.Burst)}
	return uint32(min(max(p.BurstBytes(rate), bandwidth.MinBurstBytes), math.MaxUint32))
}

func managedTarget(c Carried, l bwstore.Limit) (Target, bool) {
	lo, hi := rateBounds(c)
	clamped := false
	rate := hi
	if l.RateBytes <= hi/8 {
		rate = l.RateBytes * 8
	} else {
		clamped = true
	}
	if rate < lo {
		rate = lo // 0 would remove the limit: the least the data plane enforces
	}
	burst := l.BurstBytes
	maxBurst := uint64(burstOf(c, hi))
	switch {
	case burst > maxBurst:
		burst, clamped = maxBurst, true
	case burst < bandwidth.MinBurstBytes:
		burst = bandwidth.MinBurstBytes
	}
	return Target{Rate: rate, Burst: uint32(burst), Mode: Managed}, clamped
}

// StaticTarget is c's static limit on this node: its static share divided
// by its carriers, within the data plane's bounds.
func StaticTarget(c Carried) Target {
	lo, hi := rateBounds(c)
	rate := c.Static / uint64(max(c.Carriers, 1))
	rate = min(max(rate, lo), hi)
	return Target{Rate: rate, Burst: burstOf(c, rate), Mode: Static}
}

// MaxStatusEIPs bounds the EIPs a node status lists (as its per-EIP
// counters are bounded).
const MaxStatusEIPs = 4096

// NodeStatus is the Host's state for the node status and /metrics: at
// most MaxStatusEIPs EIPs; the errors are the ones of the last pass.
func (h *Host) NodeStatus() (*model.BandwidthStatus, []string) {
	s := h.Status()
	dir := "egress"
	if s.Dir == bwstore.Ingress {
		dir = "ingress"
	}
	mode := Static
	if s.Managed {
		mode = Managed
	}
	out := &model.BandwidthStatus{Zone: s.Zone, Direction: dir, Mode: string(mode), Generation: s.Generation, LimitsAgeMS: -1,
		Reports: s.Counts.Reports, ReportErrors: s.Counts.ReportErrors, LimitReads: s.Counts.LimitReads, LimitErrors: s.Counts.LimitErrors,
		Ignored: s.Counts.Ignored, Clamped: s.Counts.Clamped, ApplyErrors: s.Counts.ApplyErrors, CounterErrors: s.Counts.CounterErrors,
		StaticFallbacks: s.Counts.StaticFallback}
	if s.LimitsAge >= 0 {
		out.LimitsAgeMS = s.LimitsAge.Milliseconds()
	}
	addrs := make([]netip.Addr, 0, len(s.EIPs))
	for a := range s.EIPs {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	if len(addrs) > MaxStatusEIPs {
		out.EIPsLeftOut = len(addrs) - MaxStatusEIPs
		addrs = addrs[:MaxStatusEIPs]
	}
	if len(addrs) > 0 {
		out.EIPs = make(map[string]model.BandwidthEIP, len(addrs))
	}
	for _, a := range addrs {
		e := s.EIPs[a]
		b := model.BandwidthEIP{Package: e.Package, Mode: string(e.Mode), Limit: e.Rate, Burst: e.Burst,
			DroppedPackets: e.Drops.Packets, DroppedBytes: e.Drops.Bytes}
		if e.Measured != nil {
			r := e.Measured.BytesPerSec * 8
			b.Rate = &r
		}
		out.EIPs[a.String()] = b
	}
	return out, s.Errors
}

package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/monitor"
	"github.com/azgate/azgate/internal/nexthop"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/store"
)

// The edge daemon is a row of components, each one concern: Run
// (daemon.go) builds them over one data plane and a runner starts them
// in order and stops them in reverse (issue 18 part 4). Later components
// reach earlier ones through the pointers they are built with; what they
// read was set by the earlier one's Start, which ran before theirs.

// component is one part of the edge daemon. Start returns once the part
// runs (its goroutines end with ctx or Stop); Stop ends them and waits.
// Stop is also called when Start failed, so it undoes a partial start.
type component interface {
	Name() string
	Start(ctx context.Context) error
	Stop()
}

// runner starts components in order and stops them in reverse order.
type runner struct {
	log     *slog.Logger
	started []component
}

// Start starts each component in turn. On an error it logs the cause,
// stops what started (the failed one included) and returns the error:
// a start-up failure neither hangs nor leaves goroutines behind (issue
// 17.4: an attach that failed after the ARP owner started hung the edge
// with nothing logged).
func (r *runner) Start(ctx context.Context, cs ...component) error {
	for _, c := range cs {
		r.started = append(r.started, c)
		if err := c.Start(ctx); err != nil {
			r.log.Error("edge start failed; stopping what started", "part", c.Name(), "err", err)
			r.Stop()
			return err
		}
	}
	return nil
}

// Stop stops the started components, the last started first.
func (r *runner) Stop() {
	for i := len(r.started) - 1; i >= 0; i-- {
		r.started[i].Stop()
	}
	r.started = nil
}

// loops are a component's goroutines: Stop ends their context and waits
// for them.
type loops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// context derives the goroutines' context from the runner's.
func (l *loops) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	l.cancel = cancel
	return ctx
}

func (l *loops) run(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

func (l *loops) Stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}

// plane loads (or re-adopts) the edge data plane and builds the
// reconciler over it. What the configuration leaves to the machine is
// found first: the ICMP source (the first --attach interface's IPv4
// address) and the kernel's HZ. Stop closes the reconciler and the
// maps; the programs stay attached and keep forwarding.
type plane struct {
	cfg  *Config
	load dataplane.LoadOptions
	dp   *dataplane.Edge
	rec  *Reconciler
}

func (p *plane) Name() string { return "dataplane" }

func (p *plane) Start(context.Context) error {
	cfg := p.cfg
	if !cfg.ICMPSource.IsValid() {
		a, err := firstIPv4(cfg.Interfaces[0])
		if err != nil {
			return fmt.Errorf("edge: ICMP source: %w (set --icmp-source)", err)
		}
		cfg.ICMPSource = a
	}
	if cfg.LB.HZ == 0 {
		hz, err := measureHZ()
		if err != nil {
			return fmt.Errorf("edge: measure HZ: %w", err)
		}
		cfg.LB.HZ = hz
	}
	if off := dataplane.ForwardingOff(cfg.Interfaces); len(off) > 0 {
		cfg.Log.Warn(dataplane.ForwardingHint(off))
	}
	dp, err := dataplane.LoadEdge(p.load)
	if err != nil {
		return err
	}
	p.dp = dp
	dp.Upgrade().Log(cfg.Log) // maps migrated or not trusted (docs/upgrades.md)
	if err := dp.SetMonitor(cfg.Monitor); err != nil {
		return err
	}
	cfg.MonitorSwitch.Attach(dp)
	p.rec = NewReconciler(*cfg, dp)
	return nil
}

func (p *plane) Stop() {
	if p.rec != nil {
		p.rec.Stop()
	}
	if p.dp != nil {
		p.dp.Close()
	}
}

// healthChecks checks the backends of the services the reconciler
// programs and publishes the verdicts (hc.go). The health-check address
// goes into the programs before they are attached (a restarted edge's
// new programs start with none). Stop revokes the reports' lease while
// the store is still open.
type healthChecks struct {
	p  *plane
	st Store
	loops
	pub *health.StorePublisher
	hm  *health.Manager
}

func (h *healthChecks) Name() string { return "health" }

func (h *healthChecks) Start(ctx context.Context) error {
	ctx = h.context(ctx)
	cfg, dp, rec, log := h.p.cfg, h.p.dp, h.p.rec, h.p.cfg.Log
	h.pub = &health.StorePublisher{Ctx: ctx, Store: h.st, Edge: cfg.Name, Log: log}
	h.hm = health.NewManager(ctx, h.pub, log)
	h.hm.SetCommands(cfg.HealthCommands)
	h.hm.SetCommandConcurrency(cfg.HealthCommandConcurrency)
	if err := dp.SetHealthAddress(cfg.HealthSource); err != nil {
		return err
	}
	if err := dp.SetHealthAddress6(cfg.HealthSource6); err != nil {
		return err
	}
	if cfg.HealthSource.IsValid() || cfg.HealthSource6.IsValid() {
		if err := setupHealthDevice(cfg.HealthSource, cfg.HealthSource6, cfg.Interfaces, log); err != nil {
			return err
		}
		if err := dp.AttachHealth(HCDevice); err != nil {
			return err
		}
		rec.OnUnderlay = underlayRPFilter(log)
		log.Info("encap-mode health checks travel the tunnel", "source", cfg.HealthSource, "source6", cfg.HealthSource6, "device", HCDevice)
	}
	if !cfg.HealthSource.IsValid() {
		log.Warn("no --health-source: encap-mode backends are probed directly at their private addresses, not through the tunnel")
	}
	if !cfg.HealthSource6.IsValid() {
		log.Info("no --health-source6: the backends of IPv6 encap VIPs are checked at their guests' IPv4 addresses, not their IPv6 ones")
	}
	hct := newHCTunnel(dp, cfg.HealthSource, cfg.HealthSource6, log)
	hm := h.hm
	rec.OnTargets = func(ts []health.Target) { hm.Update(hct.assign(ts)) }
	return nil
}

func (h *healthChecks) Stop() {
	h.loops.Stop()
	if h.pub != nil {
		h.pub.Close()
	}
}

// arpPart answers ARP on the --arp-iface segments while this edge owns
// its set's ARP scope (arp.go). Stop makes it stop answering and give
// its scope up.
type arpPart struct {
	p  *plane
	st Store
	loops
	owner *arpOwner
}

func (a *arpPart) Name() string { return "arp" }

func (a *arpPart) Start(ctx context.Context) error {
	cfg := a.p.cfg
	owner, err := newARPOwner(a.p.dp, a.st, cfg.Name, cfg.ARP, cfg.Interfaces, cfg.Log)
	if err != nil {
		return err
	}
	a.owner = owner
	ctx = a.context(ctx)
	a.run(func() { owner.run(ctx) })
	return nil
}

// attachment attaches the edge program to every --attach interface. It
// has nothing to stop: the program stays attached and keeps forwarding.
type attachment struct{ p *plane }

func (a *attachment) Name() string { return "attach" }

func (a *attachment) Start(context.Context) error {
	for _, ifname := range a.p.cfg.Interfaces {
		if err := a.p.dp.Attach(ifname); err != nil {
			return err
		}
	}
	a.p.cfg.Log.Info("edge data plane attached", "interfaces", a.p.cfg.Interfaces, "pins", a.p.load.PinDir)
	return nil
}

func (a *attachment) Stop() {}

// routing makes the cached next hops follow the kernel's routes and
// neighbours, and keeps the hosts' next hops resolved whichever way
// routing goes. A link change (carrier lost) is also a reason to look at
// the announcer's conditions and the ARP interfaces' carrier at once
// rather than at their next 100 ms tick.
type routing struct {
	p   *plane
	arp *arpPart
	loops
	nb *nexthop.Resolver
	// kick is the announcer's Kick once it runs (bgpPart).
	kick atomic.Pointer[func()]
}

func (r *routing) Name() string { return "routing" }

func (r *routing) Start(ctx context.Context) error {
	ctx = r.context(ctx)
	dp, log := r.p.dp, r.p.cfg.Log
	r.nb = nexthop.NewResolver(log)
	// A host new to the edge (entering its share with a drift to it) is
	// resolved before the commit routes to it, not after it.
	r.p.rec.OnHosts = func(underlays []netip.Addr) { r.nb.Add("hosts", underlays) }
	done, err := nexthop.WatchRouting(ctx, log, func() {
		if err := dp.InvalidateNextHops(); err != nil {
			log.Warn("cannot invalidate cached next hops", "err", err)
		}
		r.nb.Refresh(time.Second)
		r.arp.owner.linkChanged()
		if k := r.kick.Load(); k != nil {
			(*k)()
		}
	})
	if err != nil {
		return err
	}
	r.run(func() { <-done }) // Stop waits until the callback runs no more
	return nil
}

func (r *routing) Stop() {
	r.loops.Stop()
	if r.nb != nil {
		r.nb.Stop()
	}
}

// syncPart runs connection sync with the other members of the set
// (sync.go) when --sync-listen is set. It stops before the data plane
// is closed.
type syncPart struct {
	p *plane
	loops
	syncer atomic.Pointer[connsync.Syncer]
	err    atomic.Pointer[string]
}

func (s *syncPart) Name() string { return "sync" }

func (s *syncPart) on() bool { return s.p.cfg.Sync.Port != 0 }

func (s *syncPart) Start(ctx context.Context) error {
	if !s.on() {
		return nil
	}
	ctx = s.context(ctx)
	cfg := *s.p.cfg
	s.run(func() {
		if err := runSync(ctx, cfg, s.p.rec, s.p.dp, s.syncer.Store); err != nil {
			msg := err.Error()
			s.err.Store(&msg)
			cfg.Log.Error("connection sync failed", "err", err)
		}
	})
	return nil
}

// ready says whether the edge holds a full copy of its set's connections
// (or needs none), and why not.
func (s *syncPart) ready() (bool, string) {
	if !s.on() {
		return true, "connection sync is off"
	}
	if sy := s.syncer.Load(); sy != nil {
		return sy.Ready(), sy.Reason()
	}
	if e := s.err.Load(); e != nil {
		return false, *e
	}
	return false, "connection sync is starting"
}

// status adds the sync state to the node status.
func (s *syncPart) status(ns *model.NodeStatus) {
	if !s.on() {
		return
	}
	sy := s.syncer.Load()
	if sy == nil {
		_, why := s.ready()
		ns.Sync = &model.SyncStatus{Reason: why}
		return
	}
	syncStatus(sy, ns)
	if lost, err := s.p.dp.ConnEventsLost(); err == nil && ns.Counters != nil {
		ns.Counters["sync_drop_ring_full"] = model.Count{Packets: lost}
	}
}

// bgpPart announces the set's routes while the edge is well
// (announce.go). A member never takes traffic with a table it knows is
// incomplete: with connection sync on, it announces only once it holds a
// full copy from a live member (or is the first of its set). Stop (on
// SIGTERM or a start-up error) withdraws, waits until every peer was
// sent the withdrawal and deletes the announce key; XDP stays attached.
type bgpPart struct {
	p       *plane
	st      Store
	sync    *syncPart
	routing *routing
	loops
	ann *Announcer
}

func (b *bgpPart) Name() string { return "bgp" }

func (b *bgpPart) Start(ctx context.Context) error {
	cfg, dp := b.p.cfg, b.p.dp
	spk := bgp.New(cfg.Log.With("component", "bgp"))
	b.ann = NewAnnouncer(AnnounceConfig{Name: cfg.Name, StoreGrace: cfg.StoreGrace, Settle: cfg.AnnounceSettle, Log: cfg.Log},
		spk, b.st, b.p.rec.AnnouncePlan, selfCheck(dp, cfg.Interfaces))
	for _, c := range cfg.Conditions {
		b.ann.AddCondition(c.Name, c.OK)
	}
	if b.sync.on() {
		b.ann.AddCondition("sync", func() bool { ok, _ := b.sync.ready(); return ok })
	}
	kick := b.ann.Kick
	b.routing.kick.Store(&kick)
	b.ann.Start(b.context(ctx))
	return nil
}

func (b *bgpPart) Stop() {
	b.loops.Stop()
	if b.ann == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.ann.Shutdown(ctx); err != nil {
		b.p.cfg.Log.Warn("withdrawal on shutdown incomplete", "err", err)
	} else {
		b.p.cfg.Log.Info("routes withdrawn")
	}
}

// afterApply acts on each commit the reconciler applied: systemd hears
// READY=1 after the first full load; the announcer, the next hops kept
// resolved, the ARP owner and the discard routes follow the new state.
type afterApply struct {
	p       *plane
	bgp     *bgpPart
	routing *routing
	arp     *arpPart
	loops
}

func (a *afterApply) Name() string { return "apply" }

func (a *afterApply) Start(ctx context.Context) error {
	applied := make(chan struct{}, 1)
	a.p.rec.OnApplied = func(int64) {
		select {
		case applied <- struct{}{}:
		default:
		}
	}
	ctx = a.context(ctx)
	a.run(func() { a.follow(ctx, applied) })
	return nil
}

func (a *afterApply) follow(ctx context.Context, applied <-chan struct{}) {
	cfg, rec, log := a.p.cfg, a.p.rec, a.p.cfg.Log
	ready := false
	var seen uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-applied:
			if !ready { // attached, and the first full load applied
				ready = true
				sdnotify.Tell(log, sdnotify.Ready)
			}
			if n := rec.Applies(); n == seen {
				continue // commits of nothing this edge holds
			} else {
				seen = n
			}
			a.bgp.ann.Kick()
			a.routing.nb.Keep("hosts", append(rec.Hosts(), defaultGateways()...))
			warnHealthSource(log, cfg.HealthSource, rec.Prefixes())
			warnHealthSource(log, cfg.HealthSource6, rec.Prefixes())
			a.arp.owner.update(rec.ARPScope(), rec.VIPs())
			if err := ensureDiscard(rec.Prefixes()); err != nil {
				log.Warn("cannot install discard routes for the set's prefixes", "err", err)
			}
		}
	}
}

// bandwidthPart reports the ingress of the packaged EIPs and enforces
// their limits (bandwidth.go) with --bw-store, reading the counters the
// rate reports read, through one meter; without it, it clears the
// limits a previous run left. It stops before the data plane and the
// store close.
type bandwidthPart struct {
	p     *plane
	st    Store
	meter *rateMeter
	loops
	host *bwenforce.Host
}

func (b *bandwidthPart) Name() string { return "bandwidth" }

func (b *bandwidthPart) Start(ctx context.Context) error {
	cfg, dp, rec := b.p.cfg, b.p.dp, b.p.rec
	if cfg.Bandwidth.Store == nil {
		bwenforce.ClearLimits(dp, cfg.Log)
		return nil
	}
	log := cfg.Log.With("part", "bandwidth")
	host, err := rec.EnableBandwidth(cfg.Bandwidth, b.meter, dp, log)
	if err != nil {
		return err
	}
	b.host = host
	ctx = b.context(ctx)
	b.run(func() { watchBandwidthAnnouncements(ctx, b.st, rec, log) })
	b.run(func() { host.Run(ctx) })
	return nil
}

// status adds the bandwidth state to the node status.
func (b *bandwidthPart) status(ns *model.NodeStatus) {
	if b.host == nil {
		return
	}
	var errs []string
	ns.Bandwidth, errs = b.host.NodeStatus()
	ns.Errors = append(ns.Errors, errs...)
}

// rateReports publishes the per-EIP rates for DDoS detection (rates.go);
// its lease is revoked on Stop, while the store is open.
type rateReports struct {
	p     *plane
	st    Store
	meter *rateMeter
	loops
}

func (r *rateReports) Name() string { return "rates" }

func (r *rateReports) Start(ctx context.Context) error {
	ctx = r.context(ctx)
	cfg := r.p.cfg
	r.run(func() { runRateReports(ctx, r.meter, cfg.Name, r.p.dp, r.st, cfg.Log.With("part", "rates")) })
	return nil
}

// statusPart publishes the node status every StatusInterval and serves
// it as metrics on metricsListen ("": not served).
type statusPart struct {
	p      *plane
	st     Store
	listen string
	hc     *healthChecks
	arp    *arpPart
	sync   *syncPart
	bgp    *bgpPart
	bw     *bandwidthPart
	loops
	ctx     context.Context
	started time.Time
}

func (s *statusPart) Name() string { return "status" }

func (s *statusPart) Start(ctx context.Context) error {
	s.ctx, s.started = s.context(ctx), time.Now().UTC()
	cfg := s.p.cfg
	s.run(func() { store.PublishStatus(s.ctx, s.st, "edge", cfg.Name, cfg.StatusInterval, s.status, cfg.Log) })
	if s.listen != "" {
		occ := &occupancyWalker{walk: s.p.dp.ConnOccupancy, slots: s.p.rec.backendSlots}
		s.run(func() { occ.run(s.ctx, OccupancyInterval) })
		reg := nodemetrics.Registry("edge", cfg.Name, s.status, health.Collector(s.healthStats, s.healthDurations), lbCollector{s.p.rec.BackendCounters},
			OccupancyCollector(occ.get))
		s.run(func() { nodemetrics.ServeRegistry(s.ctx, s.listen, reg, cfg.MetricsToken, cfg.Log) })
	}
	return nil
}

// healthStats are the edge's health checks (none before they start).
func (s *statusPart) healthStats() []health.TargetStats {
	if s.hc == nil || s.hc.hm == nil {
		return nil
	}
	return s.hc.hm.Stats()
}

// healthDurations are the edge's probe-duration histograms (none before
// the checks start).
func (s *statusPart) healthDurations() []health.PoolDurations {
	if s.hc == nil || s.hc.hm == nil {
		return nil
	}
	return s.hc.hm.Durations()
}

// status is the node status: the reconciler's, with each part's.
func (s *statusPart) status() model.NodeStatus {
	cfg, dp, rec := s.p.cfg, s.p.dp, s.p.rec
	ns := rec.Status(s.started, cfg.Interfaces)
	s.bw.status(&ns)
	// The names only (never the paths): the controller refuses a
	// service naming a command that a live edge does not list.
	ns.HealthCommands = cfg.HealthCommands.Names()
	if m, err := monitor.Status(dp); err == nil {
		ns.Monitor = m
	} else {
		ns.Errors = append(ns.Errors, err.Error())
	}
	ns.Errors = append(ns.Errors, s.hc.hm.Problems()...)
	ns.BGP = s.bgp.ann.Status(s.ctx)
	ns.ARP = s.arp.owner.Status()
	s.sync.status(&ns)
	// What each address's rate limits dropped (an address with limits is
	// listed, 0 or not), at most maxLimitDrops addresses: the status is
	// published every interval, and the limits table holds 65,536.
	for _, a := range rec.LimitedAddrs() {
		if len(ns.LimitDrops) >= maxLimitDrops {
			ns.Errors = append(ns.Errors, fmt.Sprintf("limit_drops lists the first %d addresses with limits only", maxLimitDrops))
			break
		}
		if c, ok, err := dp.LimitCounters(a); err == nil && ok {
			if ns.LimitDrops == nil {
				ns.LimitDrops = map[string]model.LimitDrops{}
			}
			ns.LimitDrops[a.String()] = model.LimitDrops{Source: c.DroppedSource, SYN: c.DroppedSYN}
		}
	}
	// The tunnel health checks' counters (hc_*) beside the others.
	if hs, err := dp.HealthStats(); err == nil && ns.Counters != nil {
		for k, v := range hs {
			ns.Counters[k] = model.Count(v)
		}
	}
	return ns
}

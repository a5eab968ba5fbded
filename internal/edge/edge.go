// Package edge is the edge role: it follows the desired state in the store
// and keeps the edge data plane's maps equal to it. The XDP program does
// the forwarding; this daemon only programs it, so it may stop and start
// again without a packet being lost (maps and links are pinned).
package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/monitor"
	"github.com/azgate/azgate/internal/store"
)

// GatewayMAC is the inner Ethernet source of encapsulated frames: the
// virtual router of every tenant subnet (dataplane.GatewayMAC).
var GatewayMAC = dataplane.GatewayMAC

// Want is what the edge must hold for one EIP.
type Want struct {
	Host netip.Addr
	VSID uint32
	// PrevHost and PrevVSID: a drifting EIP's previous binding
	// (drift.go; invalid and 0: none).
	PrevHost netip.Addr
	PrevVSID uint32
	PrevAll  bool // every packet to PrevHost (the delay; dataplane.Route)
}

// Config of an edge daemon.
type Config struct {
	Name string
	// MetricsToken, if set, is required on the metrics listener.
	MetricsToken string
	Interfaces   []string // XDP is attached to each
	ICMPSource   netip.Addr
	// ICMPSource6: the source of ICMPv6 errors about packets to IPv6
	// EIPs (a global unicast IPv6 address of the edge); unset, none are
	// sent.
	ICMPSource6 netip.Addr
	HashSeed    uint32
	ICMPRate    uint32
	ICMPBurst   uint32
	// ICMPBudgets: kinds of ICMP error with a budget of their own (the
	// others get ICMPRate and ICMPBurst, each kind its own bucket).
	ICMPBudgets      map[dataplane.ICMPKind]dataplane.ICMPBudget
	ICMPTimeExceeded bool
	// Monitor: what the program writes events for (`azgate monitor`,
	// docs/observability.md).
	Monitor dataplane.MonitorConfig
	// MonitorSwitch, when set, is attached to the loaded data plane: the
	// SIGHUP reload sets the monitor's mode through it.
	MonitorSwitch  *monitor.Switch
	StatusInterval time.Duration
	// IfindexOf finds the interface holding an address (the underlay
	// interface holds the edge's underlay address); nil: not checked.
	IfindexOf func(netip.Addr) (uint32, error)
	// LB holds the connection-table settings (HZ is measured by Run).
	LB dataplane.LBConfig
	// EIPMax, ConnMax, ListenerMax and BackendMax size the data plane's
	// maps with an entry per EIP or VIP, its connection tables, its
	// single-port listener map and its maps with an entry per backend
	// (dataplane.LoadOptions; Run loads with them over its LoadOptions';
	// the LB plan leaves out the services that would take the edge over
	// ListenerMax or BackendMax). 0: the compiled default, also the
	// ceiling (dataplane.EIPMaxDefault, ConnMaxDefault,
	// ListenerMaxDefault, BackendMaxDefault).
	EIPMax, ConnMax, ListenerMax, BackendMax uint32
	// ConnMax6 sizes the IPv6 VIPs' connection table (lb_conns6); 0: a
	// quarter of ConnMax (dataplane.LoadOptions.ConnMax6).
	ConnMax6 uint32
	// DriftFlows sizes the drifting EIPs' flow table (drift_flows,
	// docs/dataplane.md "EIP drift"; 0: dataplane.DriftFlowsDefault, at
	// most dataplane.DriftFlowsMax).
	DriftFlows uint32
	// DriftDelay: for this long after the edge first sees an EIP's
	// previous binding (model.EIP.Previous), the EIP's route stays
	// entirely on it (make-before-break: the new host's agent gets that
	// long to program the EIP); then new flows go to the new binding
	// (drift.go). Unlike most fields, 0 means none: `azgate edge`'s
	// --drift-delay defaults to DefaultDriftDelay. At most MaxDriftDelay.
	DriftDelay time.Duration
	// Now is the clock of the drift plan (nil: time.Now): a Previous is
	// active until its Until by it (wall clock), DriftDelay runs from
	// the first sight by it (monotonic, when it has a reading).
	Now func() time.Time
	// AfterFunc schedules the drift plan's wake-ups (nil: time.AfterFunc).
	AfterFunc func(time.Duration, func()) Stopper
	// FollowShare makes the edge load and watch only its set's share of
	// the store (FollowShare, docs/scale.md "Scopes") instead of the
	// whole region; `azgate edge` sets it unless --follow-share=false.
	// Moves between sets are make-before-break with it: the controller
	// keeps a leaving set's copies for its --move-grace, and the agents
	// switch replies to a gaining set once its members announce.
	FollowShare bool
	Version     string
	Log         *slog.Logger

	// HealthCommands are the only commands command health checks may run
	// (--health-command, --health-commands): a service names one.
	HealthCommands health.Commands
	// HealthCommandConcurrency bounds the commands running at once
	// (0: health.DefaultCommandConcurrency).
	HealthCommandConcurrency int
	// StoreGrace: how long the edge keeps announcing its routes without
	// reaching the store (0: DefaultStoreGrace). It forwards regardless.
	StoreGrace time.Duration
	// AnnounceSettle: how long every condition must hold before the edge
	// announces (again) (0: DefaultSettle).
	AnnounceSettle time.Duration
	// Conditions are added to the announcer's (Announcer.AddCondition):
	// the edge announces only while each holds.
	Conditions []Condition

	// Sync: connection sync with the other members of the set (sync.go;
	// Port 0: off).
	Sync SyncConfig
	// HealthSource is the edge's health-check address: encap-mode
	// backends are checked from it through the tunnel (hc.go). Invalid:
	// they are probed directly at their private addresses.
	HealthSource netip.Addr
	// HealthSource6 is the edge's IPv6 health-check address: the backends
	// of IPv6 encap VIPs are checked from it through the tunnel at their
	// guests' IPv6 addresses. Invalid: at their IPv4 addresses.
	HealthSource6 netip.Addr
	// ARP is the ARP answering on shared segments (arp.go).
	ARP ARPConfig
	// Rates: the per-EIP rate reports for DDoS detection (rates.go).
	Rates RateConfig
	// Bandwidth: shared bandwidth reporting and enforcement (bandwidth.go).
	Bandwidth BandwidthConfig
}

// Reconciler keeps an EdgeMaps equal to the desired state. It is a
// store.Sink: it keeps the compact index of what an edge needs and, at
// each commit, programs what changed (everything after a reload, a host
// change or a failed write). It is tested without a kernel, on the
// dataplane fakes.
type Reconciler struct {
	cfg  Config
	maps dataplane.EdgeMaps
	log  *slog.Logger

	mu         sync.Mutex
	idx        *index
	loading    bool
	pending    map[netip.Addr]struct{} // EIPs changed since the last commit
	hostsDirty map[string]struct{}     // hosts changed since the last commit: their EIPs are pending too
	newHosts   []netip.Addr            // underlay addresses new to the edge since the last commit (OnHosts)
	full       bool                    // next commit resyncs everything
	slots      slots
	routes     int // routes programmed
	rev        int64
	underlay   netip.Addr
	underlay6  netip.Addr                      // the edge's IPv6 underlay address (EdgeConfig.Underlay6)
	prefixes   []netip.Prefix                  // the edge set's prefixes
	spoofOwn   []netip.Prefix                  // the anti-spoofing prefixes as programmed (spoofSet: valid)
	spoofUL    []netip.Prefix                  // (underlay class)
	spoofSet   bool                            // spoofOwn and spoofUL are what the table holds
	spoofDirty bool                            // a set, service or host changed: the prefixes may have
	limits     map[netip.Addr]dataplane.Limits // the rate limits as programmed (nil: unknown)
	fwPlan     *fwplan.Plan                    // the firewall as programmed (nil: unknown, firewall.go)
	fwDirty    bool                            // the firewall's plan may have changed
	fwErr      string                          // why the rules could not be planned
	errs       []string                        // of the last commit
	syncErr    error                           // nil: the maps hold the desired state (verify)
	plan       atomic.Pointer[Plan]            // for the announcer, as of the last commit
	lbErrs     []string                        // services not fully programmed, as of the last service sync
	invalid    *store.Invalid                  // stored objects refused by validation
	lb         *lbState                        // nil when the data plane has no load balancer
	lbDirty    bool
	lbCfg      *dataplane.LBConfig // as programmed
	lastRev    int64               // the revision the last commit was asked for
	noted      bool                // a change was recorded since the last commit
	applies    uint64              // commits that programmed something, applied
	retry      *time.Timer         // pending retry of a failed commit
	backoff    time.Duration
	stopped    bool
	bw         *bwState // shared bandwidth (bandwidth.go); nil: off
	// The drift plan (drift.go): when each EIP's previous binding was
	// first seen, and the wake-up at the next change of a plan.
	driftSeen  map[netip.Addr]driftSeen
	driftTimer Stopper
	driftWake  time.Time
	// OnApplied is called after each successful commit, under the lock
	// (Applies tells the commits that programmed something from those of
	// nothing the edge holds).
	OnApplied func(rev int64)
	// OnTargets receives the backends to health-check after each change
	// of the services.
	OnTargets func([]health.Target)
	// OnHosts, if set, is called under the lock with the underlay
	// addresses of hosts the edge did not know (a host entering its
	// share, or one whose underlay moved) before the commit routes EIPs
	// to them: the data plane finds a host's next hop in the neighbour
	// table only (bpf_fib_lookup; an encapsulated packet to an
	// unresolved one is dropped), so the caller starts resolving it
	// before the first packet is sent there, not after the commit. It
	// runs under the lock, so it must stay cheap: the edge's
	// (nexthop.Resolver.Add) does netlink work per new address only and
	// never waits for the resolver's pass over every host.
	OnHosts func(underlays []netip.Addr)
	// OnUnderlay is called with the underlay interface's index when the
	// edge's underlay address is first configured or moves (only with
	// IfindexOf); an error fails the configuration, which is retried.
	OnUnderlay func(ifindex uint32) error
}

var _ store.Sink = (*Reconciler)(nil)

// NewReconciler returns a reconciler for maps; the first commit (a full
// load) adopts what the maps already hold, so routes and their counter
// slots carry over a restart.
func NewReconciler(cfg Config, maps dataplane.EdgeMaps) *Reconciler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, maps: maps, log: cfg.Log, idx: newIndex(), pending: map[netip.Addr]struct{}{},
		hostsDirty: map[string]struct{}{}, full: true, driftSeen: map[netip.Addr]driftSeen{},
		invalid: &store.Invalid{Log: cfg.Log}, syncErr: errNoCommit}
	r.idx.self = cfg.Name
	if lbm, ok := maps.(dataplane.LBMaps); ok {
		r.lb = newLBState(lbm, cfg.HashSeed)
		r.lb.listenersMax, r.lb.backendsMax = int(cfg.ListenerMax), int(cfg.BackendMax)
	}
	r.plan.Store(&Plan{InSync: errNoCommit})
	return r
}

// Reset starts a full load.
func (r *Reconciler) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idx, r.loading = newIndex(), true
	r.idx.self = r.cfg.Name
	clear(r.pending)
	clear(r.hostsDirty)
	r.newHosts = nil
	r.invalid.Reset()
}

// Put records a stored object. One that fails the model's validation
// (written straight into etcd) counts as absent and is listed in the
// status until a valid write replaces it (store.Invalid).
func (r *Reconciler) Put(kind, key string, value []byte, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, err := model.DecodeStored(kind, key, value)
	if err != nil {
		r.invalid.Refuse(kind, key, err)
		r.note(r.idx.delete(kind, key))
		return
	}
	r.invalid.Clear(kind, key)
	r.note(r.idx.put(kind, key, o))
}

// Delete records a removed object.
func (r *Reconciler) Delete(kind, key string, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invalid.Clear(kind, key)
	r.note(r.idx.delete(kind, key))
}

// Invalid lists the stored objects refused as invalid (at most
// store.MaxInvalidShown) and how many there are.
func (r *Reconciler) Invalid() ([]model.InvalidObject, int) { return r.invalid.List() }

func (r *Reconciler) note(c change) {
	r.noted = true
	if c.lb {
		r.lbDirty = true
	}
	if c.fw {
		r.fwDirty = true
	}
	if c.spoof {
		r.spoofDirty = true
	}
	if c.bw && r.bw != nil {
		r.bw.dirty = true
	}
	if c.underlay.IsValid() {
		r.newHosts = append(r.newHosts, c.underlay)
	}
	if r.loading {
		return
	}
	// A host change reprograms the routes of the host's EIPs only (at
	// the commit, once the batch holds every binding): a host entering
	// the edge's share comes with every drift to it (--follow-share),
	// and a resync would read back every route the edge holds.
	if c.host != "" {
		r.hostsDirty[c.host] = struct{}{}
	}
	if c.eip.IsValid() {
		r.pending[c.eip] = struct{}{}
	}
	if c.eip6.IsValid() {
		r.pending[c.eip6] = struct{}{}
	}
}

// Commit programs the maps. A failure keeps the data plane's previous
// state and is retried with backoff (100 ms doubling to 5 s) until a
// commit succeeds: nothing waits for the next change in the store.
func (r *Reconciler) Commit(rev int64, resync bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	noted := r.noted
	r.noted = false
	if !resync && !noted && !r.loading && r.rev == r.lastRev && r.retry == nil && r.syncErr == nil && len(r.errs) == 0 {
		// A commit of the region that changed nothing this edge holds
		// (store.FollowScope reports every commit): what is programmed
		// is current at rev too. Nothing to program; Applies does not
		// move, so the hooks that follow changes (announcements, next
		// hops) skip it.
		r.lastRev, r.rev = rev, rev
		if r.OnApplied != nil {
			r.OnApplied(rev)
		}
		return
	}
	r.loading = false
	r.lastRev = rev
	if resync {
		r.full, r.lbDirty, r.fwDirty, r.spoofDirty = true, true, true, true
		if r.bw != nil {
			r.bw.dirty = true
		}
	}
	r.bandwidthCommitted()
	r.commit()
}

// commit applies what is pending for r.lastRev. EIP routes and services
// fail separately: a service that cannot be programmed makes the next try
// redo the services only.
func (r *Reconciler) commit() {
	r.errs = nil
	ok := true
	// A host or previous binding may have gone: the IPv6 underlay's
	// names are collected once everything is programmed (forgetUl6).
	collect := r.full || len(r.hostsDirty) > 0
	if len(r.hostsDirty) > 0 {
		if !r.full {
			r.idx.boundTo(r.hostsDirty, r.pending)
		}
		clear(r.hostsDirty)
	}
	r.idx.ensureByGuest()
	if len(r.newHosts) > 0 {
		if r.OnHosts != nil {
			r.OnHosts(r.newHosts)
		}
		r.newHosts = nil
	}
	if err := r.applyConfig(); err != nil {
		r.fail(err)
		r.full = true
		ok = false
	} else {
		var err error
		if r.full {
			err = r.sync()
		} else {
			err = r.update()
		}
		if err != nil {
			r.fail(err)
			r.full = true
			ok = false
		} else {
			clear(r.pending)
			r.full = false
		}
	}
	if err := r.syncSpoof(); err != nil {
		r.fail(err)
		ok = false
	}
	if err := r.syncLimits(); err != nil {
		r.fail(err)
		ok = false
	}
	if err := r.syncFirewall(); err != nil {
		r.fail(err)
		ok = false
	}
	lbSynced := r.lb != nil && r.lbDirty
	if lbSynced {
		if err := r.syncLB(); err != nil {
			r.fail(err)
			r.lbDirty = true
			ok = false
		}
	}
	r.scheduleDrift()
	if !ok {
		r.syncErr = fmt.Errorf("the last commit failed: %s", strings.Join(r.errs, "; "))
		r.publishPlan()
		r.scheduleRetry()
		return
	}
	if collect {
		// Not a failure of the commit: the names stay, as before.
		if err := r.forgetUl6(); err != nil {
			r.log.Warn("the IPv6 underlay's unused host names not collected", "err", err)
		}
	}
	if lbSynced || r.syncErr != nil {
		r.syncErr = r.verify()
	}
	r.publishPlan()
	r.backoff = 0
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	r.rev = r.lastRev
	r.applies++
	if r.OnApplied != nil {
		r.OnApplied(r.rev)
	}
}

// forgetUl6 collects the names the data plane gave the IPv6 underlay's
// hosts (dataplane.Ul6HostMaps) that no host, guest copy or previous
// binding of the index has any more: what the commit programmed (routes,
// previous bindings, backends) names none of them.
func (r *Reconciler) forgetUl6() error {
	um, ok := r.maps.(dataplane.Ul6HostMaps)
	if !ok {
		return nil
	}
	keep := map[netip.Addr]bool{}
	r.idx.underlays(func(u netip.Addr) { keep[u] = true })
	for _, p := range r.idx.prev {
		keep[p.Underlay] = true
	}
	return um.ForgetUl6Hosts(func(a netip.Addr) bool { return keep[a] })
}

// Applies counts the commits that applied a change or a full load: a
// commit of nothing the edge holds moves the revision only.
func (r *Reconciler) Applies() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applies
}

func (r *Reconciler) scheduleRetry() {
	if r.stopped || r.retry != nil {
		return
	}
	r.backoff = min(max(2*r.backoff, 100*time.Millisecond), 5*time.Second)
	r.retry = time.AfterFunc(r.backoff, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.retry = nil
		if r.stopped || r.loading {
			return // a full load is under way: its commit applies everything
		}
		r.log.Info("retrying the failed commit", "revision", r.lastRev)
		r.commit()
	})
}

// Stop cancels pending retries; the data plane keeps its state.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	if r.driftTimer != nil {
		r.driftTimer.Stop()
		r.driftTimer = nil
	}
}

// syncLB programs the services; problems with single services are
// reported in the status without failing the commit.
func (r *Reconciler) syncLB() error {
	problems, err := r.lb.sync(r.idx)
	if err != nil {
		r.lbDirty = true
		return err
	}
	r.lbErrs = problems
	for _, p := range problems {
		r.log.Warn("service not fully programmed", "problem", p)
	}
	if r.OnTargets != nil {
		r.OnTargets(r.lb.targets)
	}
	want := r.cfg.LB
	want.NAT = r.lb.nat
	if r.lbCfg == nil || *r.lbCfg != want {
		if err := r.lb.maps.SetLBConfig(want); err != nil {
			return err
		}
		r.lbCfg = &want
	}
	r.lbDirty = false
	return nil
}

func (r *Reconciler) fail(err error) {
	r.errs = append(r.errs, err.Error())
	r.log.Error("reconcile failed; the data plane keeps its previous state", "err", err)
}

func (r *Reconciler) applyConfig() error {
	set, me, ok := r.idx.edgeSetOf(r.cfg.Name)
	if !ok {
		return fmt.Errorf("edge %q is not a member of any edge set: add it to one (azgate set create ... --edge name=%s,underlay=ADDR)", r.cfg.Name, r.cfg.Name)
	}
	r.prefixes = append(r.prefixes[:0], set.Prefixes...)
	if me.Underlay == r.underlay && me.Underlay6 == r.underlay6 {
		return nil
	}
	var ul uint32
	if r.cfg.IfindexOf != nil {
		var err error
		if ul, err = r.cfg.IfindexOf(me.Underlay); err != nil {
			return fmt.Errorf("underlay address %v of edge %s: %w", me.Underlay, r.cfg.Name, err)
		}
	}
	err := r.maps.SetConfig(dataplane.EdgeConfig{
		Underlay: me.Underlay, Underlay6: me.Underlay6, ICMPSource: r.cfg.ICMPSource, ICMPSource6: r.cfg.ICMPSource6, HashSeed: r.cfg.HashSeed,
		ICMPRate: r.cfg.ICMPRate, ICMPBurst: r.cfg.ICMPBurst, ICMPBudgets: r.cfg.ICMPBudgets,
		ICMPTimeExceeded: r.cfg.ICMPTimeExceeded, GatewayMAC: GatewayMAC, UnderlayIfindex: ul,
	})
	if err != nil {
		return err
	}
	if r.OnUnderlay != nil && ul != 0 {
		if err := r.OnUnderlay(ul); err != nil {
			return err
		}
	}
	r.log.Info("edge configured", "underlay", me.Underlay, "underlay6", me.Underlay6, "underlay_ifindex", ul, "icmp_source", r.cfg.ICMPSource,
		"icmp_source6", r.cfg.ICMPSource6)
	r.underlay, r.underlay6 = me.Underlay, me.Underlay6
	return nil
}

// cur is a programmed route, compactly.
type cur struct {
	host [4]byte // an IPv4 host (zero for one of the IPv6 underlay: sync's hosts6)
	vsid uint32
	slot uint32
}

// sync makes the maps equal to the index: it reads what they hold (its
// counter slots are kept), writes what differs in batches and deletes the
// rest.
func (r *Reconciler) sync() error {
	// Sized for what the last commit programmed, not for what the index
	// holds: at an edge's first full load the maps hold nothing (or
	// what they kept over a restart), and a map for every EIP of its
	// set would be ~2 MB more at the load's peak for nothing.
	have := make(map[[4]byte]cur, r.routes)
	have6 := map[[16]byte]cur{} // IPv6 EIPs' routes (their host is IPv4 too)
	// The programmed routes with a previous binding (few), which cur
	// leaves out.
	drifting := map[netip.Addr]dataplane.Route{}
	// The routes whose host is of the IPv6 underlay (few), its address:
	// cur's host is zero for them.
	hosts6 := map[netip.Addr]netip.Addr{}
	r.slots.reset()
	err := r.maps.RangeRoutes(func(a netip.Addr, rt dataplane.Route) bool {
		if rt.Drifts() {
			drifting[a] = rt
		}
		var host [4]byte
		switch {
		case rt.Host.Is4():
			host = rt.Host.As4()
		case rt.Host.Is6():
			hosts6[a] = rt.Host
		default:
			return true
		}
		switch {
		case a.Is4():
			have[a.As4()] = cur{host: host, vsid: rt.VSID, slot: rt.StatsIdx}
			r.slots.use(rt.StatsIdx)
		case a.Is6():
			have6[a.As16()] = cur{host: host, vsid: rt.VSID, slot: rt.StatsIdx}
			r.slots.use(rt.StatsIdx)
		}
		return true
	})
	if err != nil {
		return err
	}
	b := r.newBatch(len(r.idx.eips) + len(r.idx.eips6))
	n := 0
	now := r.now()
	// same says whether EIP a's programmed route c (and its previous
	// binding, if any, in drifting) is w, which it completes with the
	// drift plan.
	same := func(a netip.Addr, c cur, had bool, w *Want) bool {
		if len(r.idx.prev) > 0 {
			*w = r.withDrift(a, *w, now)
		}
		if !had || c.vsid != w.VSID {
			return false
		}
		if h6, ok := hosts6[a]; ok || !w.Host.Is4() {
			if h6 != w.Host {
				return false
			}
		} else if c.host != w.Host.As4() {
			return false
		}
		d := drifting[a]
		return d.PrevHost == w.PrevHost && d.PrevVSID == w.PrevVSID && d.PrevAll == w.PrevAll
	}
	for k := range r.idx.eips {
		w, ok := r.idx.want(k)
		if !ok {
			continue
		}
		n++
		c, had := have[k]
		if had {
			delete(have, k) // what stays in have is deleted below
		}
		if (had || len(r.idx.prev) > 0) && same(netip.AddrFrom4(k), c, had, &w) {
			continue
		}
		if err := b.put(netip.AddrFrom4(k), w, c.slot, had); err != nil {
			return err
		}
	}
	for k := range r.idx.eips6 {
		w, ok := r.idx.want6(k)
		if !ok {
			continue
		}
		n++
		c, had := have6[k]
		if had {
			delete(have6, k)
		}
		if (had || len(r.idx.prev) > 0) && same(netip.AddrFrom16(k), c, had, &w) {
			continue
		}
		if err := b.put(netip.AddrFrom16(k), w, c.slot, had); err != nil {
			return err
		}
	}
	for k, c := range have {
		if err := b.del(netip.AddrFrom4(k), c.slot); err != nil {
			return err
		}
	}
	for k, c := range have6 {
		if err := b.del(netip.AddrFrom16(k), c.slot); err != nil {
			return err
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	r.routes = n
	return nil
}

// update programs the EIPs changed since the last commit.
func (r *Reconciler) update() error {
	b := r.newBatch(len(r.pending))
	now := r.now()
	for a := range r.pending {
		c, had, err := r.maps.Route(a)
		if err != nil {
			return err
		}
		w, ok := r.idx.wantAddr(a)
		if ok {
			w = r.withDrift(a, w, now)
		} else {
			delete(r.driftSeen, a)
		}
		switch {
		case !ok && had:
			if err := b.del(a, c.StatsIdx); err != nil {
				return err
			}
			r.routes--
		case ok && had && routeIs(c, w):
		case ok:
			if err := b.put(a, w, c.StatsIdx, had); err != nil {
				return err
			}
			if !had {
				r.routes++
			}
		}
	}
	return b.flush()
}

// batch collects route writes and deletes.
type batch struct {
	r    *Reconciler
	puts map[netip.Addr]dataplane.Route
	dels []netip.Addr
	// slots of deleted routes are freed only once the delete is written
	freed []uint32
}

const batchMax = 8192

// newBatch sizes the batch for about n writes: an incremental commit of
// one EIP must not allocate a map for batchMax (about 500 kB, which every
// edge of a fleet then collected for each rebind: most of an edge's CPU
// per change in `azgate-lab bench fleet`).
func (r *Reconciler) newBatch(n int) *batch {
	return &batch{r: r, puts: make(map[netip.Addr]dataplane.Route, min(n, batchMax))}
}

func (b *batch) put(a netip.Addr, w Want, slot uint32, had bool) error {
	if !had {
		var err error
		if slot, err = b.r.alloc(); err != nil {
			return err
		}
	}
	b.puts[a] = dataplane.Route{Host: w.Host, VSID: w.VSID, StatsIdx: slot, PrevHost: w.PrevHost, PrevVSID: w.PrevVSID, PrevAll: w.PrevAll}
	if len(b.puts) >= batchMax {
		return b.flush()
	}
	return nil
}

func (b *batch) del(a netip.Addr, slot uint32) error {
	b.dels = append(b.dels, a)
	b.freed = append(b.freed, slot)
	if len(b.dels) >= batchMax {
		return b.flush()
	}
	return nil
}

func (b *batch) flush() error {
	if len(b.puts) > 0 {
		if err := b.r.maps.PutRoutes(b.puts); err != nil {
			return err
		}
		clear(b.puts)
	}
	if len(b.dels) > 0 {
		if err := b.r.maps.DeleteRoutes(b.dels); err != nil {
			return err
		}
		for _, s := range b.freed {
			b.r.slots.free(s)
		}
		b.dels, b.freed = b.dels[:0], b.freed[:0]
	}
	return nil
}

func (r *Reconciler) alloc() (uint32, error) {
	idx := r.slots.alloc()
	return idx, r.maps.ResetEIPStats(idx)
}

// Prefixes returns the prefixes of the edge's set.
func (r *Reconciler) Prefixes() []netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]netip.Prefix(nil), r.prefixes...)
}

// VIPs returns the services' VIPs.
func (r *Reconciler) VIPs() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []netip.Addr
	for _, s := range r.idx.services {
		out = append(out, s.VIP)
	}
	return out
}

// ARPScope is the ownership scope of ARP answering this edge campaigns
// for: ARPConfig.Scope, or by default its set's name; "" (none) when it
// is in no set or drained, so a drained owner gives ownership up.
func (r *Reconciler) ARPScope() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	set, me, ok := r.idx.edgeSetOf(r.cfg.Name)
	if !ok || me.Drained {
		return ""
	}
	if r.cfg.ARP.Scope != "" {
		return r.cfg.ARP.Scope
	}
	return set.Name
}

// Hosts returns the underlay addresses of the hosts EIPs may be bound to.
func (r *Reconciler) Hosts() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]netip.Addr, 0, len(r.idx.hosts)+len(r.idx.copied))
	r.idx.underlays(func(u netip.Addr) { out = append(out, u) })
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return slices.Compact(out)
}

// maxStatusEIPs bounds the per-EIP counters published in the status key
// (and so the edge's azgate_eip_packets_total series): with more routes,
// the status carries the maxStatusEIPs EIPs with the most traffic.
const maxStatusEIPs = 4096

// Status builds the node status. With more than maxStatusEIPs routes its
// EIPs are the top maxStatusEIPs by bytes (received and sent), read
// outside the reconciler's lock in one batched pass over the counters.
func (r *Reconciler) Status(started time.Time, ifaces []string) model.NodeStatus {
	s, many := r.status(started, ifaces)
	if many {
		if top, err := topEIPs(r.maps, maxStatusEIPs); err == nil {
			s.EIPs = top
		} else {
			s.Errors = append(s.Errors, "per-EIP counters: "+err.Error())
		}
	}
	return s
}

// topEIPs returns the counters of the n routed EIPs with the most bytes
// (received and sent, since the EIP took its counter slot): a bounded
// min-heap over one batched read of every slot (dataplane.EIPStatsReader).
func topEIPs(maps dataplane.EdgeMaps, n int) (map[string]model.EIPCounters, error) {
	type eip struct {
		a    netip.Addr
		slot uint32
	}
	var routes []eip
	maxSlot := -1
	if err := maps.RangeRoutes(func(a netip.Addr, rt dataplane.Route) bool {
		routes = append(routes, eip{a, rt.StatsIdx})
		maxSlot = max(maxSlot, int(rt.StatsIdx))
		return true
	}); err != nil {
		return nil, err
	}
	stats := make([]dataplane.Counters, maxSlot+1)
	if br, ok := maps.(dataplane.EIPStatsReader); ok {
		if err := br.ReadEIPStats(stats); err != nil {
			return nil, err
		}
	} else {
		for _, e := range routes {
			c, err := maps.EIPStats(e.slot)
			if err != nil {
				return nil, err
			}
			stats[e.slot] = c
		}
	}
	bytes := func(e eip) uint64 { return stats[e.slot].RxBytes + stats[e.slot].TxBytes }
	less := func(x, y eip) bool { // the heap's order: fewest bytes first, then the higher address
		if bx, by := bytes(x), bytes(y); bx != by {
			return bx < by
		}
		return y.a.Less(x.a)
	}
	h := topN(routes, n, less)
	out := make(map[string]model.EIPCounters, len(h))
	for _, e := range h {
		out[e.a.String()] = model.EIPCounters(stats[e.slot])
	}
	return out, nil
}

// status builds the node status but for the EIPs of an edge with more
// than maxStatusEIPs routes (many: Status adds them).
func (r *Reconciler) status(started time.Time, ifaces []string) (_ model.NodeStatus, many bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := model.NodeStatus{Role: "edge", Name: r.cfg.Name, Version: r.cfg.Version, Started: started, Updated: time.Now().UTC(),
		AppliedRevision: r.rev, Interfaces: ifaces, Routes: r.routes, Errors: append(slices.Clip(r.errs), r.lbErrs...)}
	if r.fwErr != "" {
		s.Errors = append(s.Errors, r.fwErr)
	}
	s.Draining = r.draining(r.now())
	s.Firewall = r.firewallStatus()
	if c, err := r.maps.Stats(); err == nil {
		s.Counters = map[string]model.Count{}
		for k, v := range c {
			s.Counters[k] = model.Count(v)
		}
	}
	if r.lb != nil && len(r.lb.tables) > 0 {
		s.Tables = r.lb.tableStatus()
	}
	if r.lb != nil {
		s.NATBackendsLeftOut = r.lb.natLeftOut
	}
	r.invalid.Into(&s)
	if r.routes <= maxStatusEIPs {
		s.EIPs = map[string]model.EIPCounters{}
		add := func(a netip.Addr) {
			rt, ok, err := r.maps.Route(a)
			if err != nil || !ok {
				return
			}
			if c, err := r.maps.EIPStats(rt.StatsIdx); err == nil {
				s.EIPs[a.String()] = model.EIPCounters(c)
			}
		}
		for k := range r.idx.eips {
			add(netip.AddrFrom4(k))
		}
		for k := range r.idx.eips6 {
			add(netip.AddrFrom16(k))
		}
	}
	return s, r.routes > maxStatusEIPs
}

// ErrStop is returned when the daemon is asked to stop.
var ErrStop = errors.New("stopped")

// syncSpoof programs the ingress anti-spoofing prefixes (docs/dataplane.md,
// "Ingress anti-spoofing") when a set, service or host changed (spoofDirty)
// and the prefixes differ from those programmed: every set's prefixes and
// every VIP (own), every host's and edge's underlay address (underlay).
// Most commits are EIP changes, which cannot change them: those skip the
// walk over every host. Only with a data plane that has the table
// (dataplane.SpoofMaps).
func (r *Reconciler) syncSpoof() error {
	sm, ok := r.maps.(dataplane.SpoofMaps)
	if !ok || !r.spoofDirty {
		return nil
	}
	own, underlay := r.idx.spoofPrefixes()
	if r.spoofSet && slices.Equal(own, r.spoofOwn) && slices.Equal(underlay, r.spoofUL) {
		r.spoofDirty = false
		return nil
	}
	r.spoofSet = false // unknown until the write succeeded
	if err := sm.SetSpoofPrefixes(own, underlay); err != nil {
		return fmt.Errorf("anti-spoofing prefixes: %w", err)
	}
	r.spoofOwn, r.spoofUL, r.spoofSet, r.spoofDirty = own, underlay, true, false
	return nil
}

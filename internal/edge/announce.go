package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Plan is what the desired state says the edge should announce, with the
// reconciler's verdict on its maps (Reconciler.AnnouncePlan).
type Plan struct {
	Member   bool // the edge is in a set
	Set      string
	Node     model.EdgeNode
	SetBGP   *model.SetBGP
	Prefixes []netip.Prefix // setplan.Announcements
	// InSync is nil when the maps hold the desired state: the last commit
	// succeeded and every LB table's checksum is the plan's.
	InSync error
}

// Built-in conditions, by the names the status lists when they fail.
const (
	CondMember    = "member"    // the edge is in an edge set
	CondBGPConfig = "bgp"       // the edge and its set have BGP settings, and the speaker took them
	CondDataplane = "dataplane" // programs attached on every --attach interface, maps readable
	CondDrained   = "drained"   // an operator drained the edge (EdgeNode.Drained)
	CondStore     = "store"     // the store answered within the grace period
	CondMaps      = "maps"      // the maps hold the desired state
	CondAnnounce  = "announce"  // the speaker took the routes (set by a failed Announce until it succeeds)
)

// AnnounceConfig tunes the announcer; zero values take the defaults.
type AnnounceConfig struct {
	Name string // the edge
	// StoreGrace: how long the edge keeps announcing without reaching
	// the store (it keeps forwarding with the last state either way).
	StoreGrace time.Duration // default 10 s
	// Settle: how long every condition must hold before the edge
	// announces (again): a flapping condition does not flap routes.
	// Withdrawal is immediate.
	Settle time.Duration // default 1 s
	// Interval between evaluations of the conditions.
	Interval time.Duration // default 100 ms
	// LeaseTTL of the announce key and Renew, how often the lease is
	// renewed (each renewal is also the store's reachability probe).
	LeaseTTL time.Duration // default 2 s (etcd's shortest useful lease)
	Renew    time.Duration // default 500 ms
	// WithdrawWait bounds the wait for the withdrawal on shutdown.
	WithdrawWait time.Duration // default 5 s
	Log          *slog.Logger
}

// Defaults of AnnounceConfig.
const (
	DefaultStoreGrace = 10 * time.Second
	DefaultSettle     = time.Second
	DefaultLeaseTTL   = 2 * time.Second
	DefaultRenew      = 500 * time.Millisecond
)

func (c *AnnounceConfig) defaults() {
	if c.StoreGrace == 0 {
		c.StoreGrace = DefaultStoreGrace
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Renew == 0 {
		c.Renew = DefaultRenew
	}
	if c.WithdrawWait == 0 {
		c.WithdrawWait = 5 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Condition is a named condition of announcing (Config.Conditions).
type Condition struct {
	Name string
	OK   func() bool // must not block
}

// Announcer decides whether the edge announces its set's routes: only
// while every condition holds (it is a member with BGP settings, its data
// plane passes the self-check, it is not drained, the store answered
// within the grace period, its maps hold the desired state, and each
// condition added with AddCondition holds), and for Settle already. It
// withdraws as soon as one fails. While it announces it keeps its
// model.Announcement at store.AnnounceKey with a short lease, for the
// agents.
type Announcer struct {
	cfg       AnnounceConfig
	spk       bgp.SpeakerAPI
	leases    store.Leases
	plan      func() Plan
	dataplane func() error

	mu         sync.Mutex
	extra      []Condition
	lastStore  time.Time // the store's last answer
	okSince    time.Time // all conditions hold since (zero: they do not)
	told       bool      // the speaker has been told at least once
	announced  []netip.Prefix
	announcing bool
	since      time.Time // announcing since
	failing    []string
	bgpCfg     *bgp.Config // applied to the speaker
	bgpErr     error
	key        string // the announce key wanted ("" none)
	keyVal     []byte
	lease      store.LeaseID // the store loop's, once it ended
	kick       chan struct{}
	keyChanged chan struct{} // Step changed the wanted announce key: write it now
	done       chan struct{}
	cancel     context.CancelFunc
	shut       bool
}

// NewAnnouncer returns an announcer; Start runs it. plan is read at every
// evaluation (it must be cheap), dataplane is the data plane's
// self-check (nil error: well).
func NewAnnouncer(cfg AnnounceConfig, spk bgp.SpeakerAPI, leases store.Leases, plan func() Plan, dataplane func() error) *Announcer {
	cfg.defaults()
	return &Announcer{cfg: cfg, spk: spk, leases: leases, plan: plan, dataplane: dataplane, kick: make(chan struct{}, 1), keyChanged: make(chan struct{}, 1)}
}

// AddCondition adds a condition the edge needs to announce (for example
// "sync": a full copy of the set's connections received). ok is called
// at every evaluation and must not block.
func (a *Announcer) AddCondition(name string, ok func() bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extra = append(a.extra, Condition{name, ok})
}

// Kick asks for an evaluation now (the desired state changed).
func (a *Announcer) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Start runs the evaluation and the store loops until ctx ends or
// Shutdown.
func (a *Announcer) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	a.mu.Lock()
	a.cancel, a.done = cancel, make(chan struct{})
	a.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.storeLoop(ctx) }()
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.cfg.Interval)
		defer t.Stop()
		for {
			a.Step(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-a.kick:
			}
		}
	}()
	go func() { wg.Wait(); close(a.done) }()
}

// results evaluates every condition; failing are "name" or "name: why".
func (a *Announcer) results(p Plan, now time.Time) (failing []string) {
	fail := func(name string, err error) {
		if err != nil {
			failing = append(failing, name+": "+err.Error())
		} else {
			failing = append(failing, name)
		}
	}
	if !p.Member {
		fail(CondMember, nil)
	}
	if a.bgpErr != nil {
		fail(CondBGPConfig, a.bgpErr)
	}
	if a.dataplane != nil {
		if err := a.dataplane(); err != nil {
			fail(CondDataplane, err)
		}
	}
	if p.Node.Drained {
		fail(CondDrained, nil)
	}
	if a.lastStore.IsZero() {
		fail(CondStore, errors.New("not reached yet"))
	} else if now.Sub(a.lastStore) > a.cfg.StoreGrace {
		// Stable text: the list is logged when it changes.
		fail(CondStore, fmt.Errorf("no answer since %s (grace %v)", a.lastStore.UTC().Format(time.RFC3339), a.cfg.StoreGrace))
	}
	if p.InSync != nil {
		fail(CondMaps, p.InSync)
	}
	for _, c := range a.extra {
		if !c.OK() {
			fail(c.Name, nil)
		}
	}
	return failing
}

// Step evaluates the conditions once and tells the speaker (Start calls
// it every Interval).
func (a *Announcer) Step(ctx context.Context) {
	p := a.plan()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shut {
		return
	}
	a.configure(ctx, p)
	now := time.Now()
	failing := a.results(p, now)
	if !slices.Equal(failing, a.failing) && len(failing) > 0 {
		a.cfg.Log.Warn("edge cannot announce", "failing", failing)
	}
	a.failing = failing
	announce := false
	if len(failing) == 0 {
		if a.okSince.IsZero() {
			a.okSince = now
		}
		announce = now.Sub(a.okSince) >= a.cfg.Settle
	} else {
		a.okSince = time.Time{}
	}
	var want []netip.Prefix
	if announce {
		want = p.Prefixes
	}
	if !a.told || !slices.Equal(want, a.announced) {
		if err := a.spk.Announce(ctx, want); err != nil {
			a.cfg.Log.Error("bgp: cannot set the announced routes", "err", err)
			// Agents count an edge live by its announce key: no key while
			// the routes may not be out (it is retried at the next Step).
			if announce {
				announce = false
				a.failing = append(slices.Clone(a.failing), CondAnnounce)
			}
		} else {
			a.told = true
			a.announced = slices.Clone(want)
		}
	}
	if announce != a.announcing {
		if announce {
			a.since = now.UTC()
			a.cfg.Log.Info("edge announces its set's routes", "set", p.Set, "prefixes", want)
		} else {
			a.cfg.Log.Warn("edge withdraws its routes", "failing", failing)
		}
		a.announcing = announce
	}
	oldKey, oldVal := a.key, a.keyVal
	a.key, a.keyVal = "", nil
	if announce {
		a.key = store.AnnounceKey(p.Set, a.cfg.Name)
		a.keyVal, _ = json.Marshal(model.Announcement{Set: p.Set, Edge: a.cfg.Name, Underlay: p.Node.Underlay,
			Prefixes: slices.Clone(p.Prefixes), Since: a.since})
	}
	if a.key != oldKey || !bytes.Equal(a.keyVal, oldVal) {
		// The agents follow the key: a withdrawal must reach them now,
		// not at the next renewal.
		select {
		case a.keyChanged <- struct{}{}:
		default:
		}
	}
}

// configure gives the speaker the plan's BGP settings when they change.
func (a *Announcer) configure(ctx context.Context, p Plan) {
	if !p.Member || p.Node.BGP == nil || p.SetBGP == nil {
		if a.bgpCfg != nil {
			a.spk.Stop() // closes the sessions: the routers drop our routes
			a.bgpCfg, a.told, a.announced = nil, false, nil
		}
		switch {
		case !p.Member:
			a.bgpErr = nil // CondMember says it
		case p.SetBGP == nil:
			a.bgpErr = fmt.Errorf("edge set %s has no bgp settings (azgate set bgp)", p.Set)
		default:
			a.bgpErr = fmt.Errorf("edge %s has no bgp settings (azgate set edge-bgp)", a.cfg.Name)
		}
		return
	}
	c := speakerConfig(p)
	if a.bgpCfg != nil && a.bgpErr == nil && sameConfig(*a.bgpCfg, c) {
		return
	}
	err := a.spk.Configure(ctx, c)
	a.bgpCfg, a.bgpErr = &c, err
	if err != nil {
		a.cfg.Log.Error("bgp: configuration refused", "err", err)
	}
}

func speakerConfig(p Plan) bgp.Config {
	hold, ka := p.SetBGP.Timers()
	c := bgp.Config{RouterID: p.Node.BGP.RouterID, ASN: p.SetBGP.ASN, NextHop: p.Node.BGP.NextHop, NextHop6: p.Node.BGP.NextHop6,
		HoldTime: time.Duration(hold) * time.Second, Keepalive: time.Duration(ka) * time.Second}
	for _, q := range p.Node.BGP.Peers {
		c.Peers = append(c.Peers, bgp.Peer{Address: q.Address, ASN: q.ASN, Password: q.Password, Port: q.Port})
	}
	return c
}

func sameConfig(a, b bgp.Config) bool {
	return a.RouterID == b.RouterID && a.ASN == b.ASN && a.NextHop == b.NextHop && a.NextHop6 == b.NextHop6 && a.HoldTime == b.HoldTime &&
		a.Keepalive == b.Keepalive && a.LocalAddress == b.LocalAddress && a.LocalAddress6 == b.LocalAddress6 && a.ConnectRetry == b.ConnectRetry &&
		slices.Equal(a.Peers, b.Peers)
}

// storeLoop renews the lease (the store's reachability probe) and keeps
// the announce key as Step wants it. Each store call has its own timeout:
// a store that hangs delays only this loop, never a withdrawal. Woken by
// a key change (a withdrawal above all: the agents stop sending replies
// here when the key goes), it writes at once, without renewing the lease
// first: the write is the store's answer (a lost lease fails it), one
// round trip instead of two (TestAnnounceKeyChangeSkipsRenewal).
func (a *Announcer) storeLoop(ctx context.Context) {
	var lease store.LeaseID
	var wroteKey string
	var wroteVal []byte
	t := time.NewTicker(a.cfg.Renew)
	defer t.Stop()
	woken := false // by a key change, not the renewal tick
	for {
		op, cancel := context.WithTimeout(ctx, a.cfg.Renew*2)
		var err error
		switch {
		case lease == 0:
			lease, err = a.leases.Grant(op, a.cfg.LeaseTTL)
			if err != nil {
				lease = 0
			}
			wroteKey, wroteVal = "", nil // keys of a lost lease are gone
		case woken:
		default:
			if err = a.leases.KeepAliveOnce(op, lease); errors.Is(err, store.ErrLeaseNotFound) {
				lease, wroteKey, wroteVal = 0, "", nil
			}
		}
		if err == nil && lease != 0 {
			a.mu.Lock()
			if !woken {
				a.lastStore = time.Now()
			}
			key, val := a.key, a.keyVal
			a.mu.Unlock()
			if key != wroteKey || !bytes.Equal(val, wroteVal) {
				var kvs []store.KV
				if wroteKey != "" && wroteKey != key {
					kvs = append(kvs, store.KV{Key: wroteKey}) // delete
				}
				if key != "" {
					kvs = append(kvs, store.KV{Key: key, Value: val})
				}
				if err := a.leases.WriteLeased(op, lease, kvs); err != nil {
					if errors.Is(err, store.ErrLeaseNotFound) {
						lease = 0
					}
					a.cfg.Log.Warn("announce key not written", "key", key, "err", err)
				} else {
					wroteKey, wroteVal = key, val
					if woken {
						a.mu.Lock()
						a.lastStore = time.Now()
						a.mu.Unlock()
					}
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			if lease != 0 {
				// Shutdown revokes its own; a cancelled run leaves the key
				// to its lease (gone within LeaseTTL).
				a.mu.Lock()
				a.lease = lease
				a.mu.Unlock()
			}
			return
		case <-t.C:
			woken = false
		case <-a.keyChanged:
			woken = true
		}
	}
}

// Shutdown withdraws every route, waits until the withdrawal has been
// sent to every established peer (bounded by WithdrawWait), deletes the
// announce key and stops the speaker. The data plane keeps forwarding
// what still arrives meanwhile.
func (a *Announcer) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.shut = true
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	var errs []error
	if err := a.spk.Announce(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	if err := a.spk.WaitWithdrawn(ctx, a.cfg.WithdrawWait); err != nil {
		errs = append(errs, err)
	}
	if cancel != nil {
		cancel()
		<-done
	}
	a.mu.Lock()
	lease := a.lease
	a.announcing, a.announced, a.key, a.keyVal = false, nil, "", nil
	a.mu.Unlock()
	if lease != 0 {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		if err := a.leases.Revoke(rctx, lease); err != nil {
			errs = append(errs, fmt.Errorf("announce key: %w (it goes with its lease)", err))
		}
		rcancel()
	}
	a.spk.Stop()
	return errors.Join(errs...)
}

// Announcing reports whether the edge announces, and the failing
// conditions when it does not.
func (a *Announcer) Announcing() (bool, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.announcing, slices.Clone(a.failing)
}

// Status is the speaker's status with the announcer's verdict.
func (a *Announcer) Status(ctx context.Context) *model.BGPStatus {
	st := a.spk.Status(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	st.Announcing, st.Failing = a.announcing, slices.Clone(a.failing)
	return st
}

// AnnouncePlan is what the announcer needs of the desired state and the
// maps, as of the last commit (the plan changes only at commits). It
// takes no lock: the announcer reads it every evaluation, and a long
// commit (a full load of a million EIPs) must not hold up a withdrawal
// for another reason.
func (r *Reconciler) AnnouncePlan() Plan { return *r.plan.Load() }

// publishPlan computes the announcer's plan; called at the end of every
// commit with r.mu held.
func (r *Reconciler) publishPlan() {
	in := r.idx.setplan()
	p := Plan{InSync: r.syncErr}
	if set, me, ok := in.SetOf(r.cfg.Name); ok {
		p = Plan{Member: true, Set: set.Name, Node: me, SetBGP: set.BGP, Prefixes: in.Announcements(r.cfg.Name), InSync: r.syncErr}
	}
	r.plan.Store(&p)
}

// errNoCommit: nothing has been programmed yet.
var errNoCommit = errors.New("no commit has succeeded yet")

// verify says whether the maps hold the desired state after a successful
// commit: every pool's table as programmed has the checksum and size of
// the plan's, and no other table is programmed. Problems of the desired
// state itself (a service whose backends are unknown: lbplan's Problems)
// do not count: they are the same on every edge, and withdrawing the
// whole set for one bad service would take every address down with it.
func (r *Reconciler) verify() error {
	if r.lb == nil {
		return nil
	}
	p := r.lb.plan(r.idx)
	seen := 0
	for _, pl := range p.Pools {
		pt := r.lb.tables[pl.ID]
		if pt == nil {
			return fmt.Errorf("table %s: not programmed", pl.ID)
		}
		if pt.checksum != pl.Checksum || pt.m != pl.M {
			return fmt.Errorf("table %s: checksum %016x (m %d), the plan's %016x (m %d)", pl.ID, pt.checksum, pt.m, pl.Checksum, pl.M)
		}
		seen++
	}
	if seen != len(r.lb.tables) {
		return fmt.Errorf("%d tables programmed, the plan has %d", len(r.lb.tables), seen)
	}
	return nil
}

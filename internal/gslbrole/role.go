// Package gslbrole is the `azgate gslb` role (issue 11, part 1 and 2): an
// authoritative DNS server (internal/gslb/dnsserver, answering from an
// internal/gslb catalog) serving the desired state's DNS zones and GSLB
// records, locating clients with internal/geo and reading target health
// from internal/probe.
//
// It follows the store through store.Node (never etcd itself): every change
// of the state rebuilds the catalog (gslbplan.Build; what does not compile
// is skipped and counted, never fatal; the last good catalog keeps serving
// while the store is away) and the probe targets. Several gslb instances
// are several vantage points: each publishes its own probe view under
// ViewRoot with a lease and reads the others'; a target is down when a
// quorum of the fresh views says so (probe.Combine). With no fresh view
// from another instance (alone, or the store unreachable) the local probes
// decide alone.
package gslbrole

import (
	"context"
	"encoding/json"
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

	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
	"github.com/azgate/azgate/internal/gslbplan"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/probe"
	"github.com/azgate/azgate/internal/store"
)

// ViewRoot is where each gslb instance publishes its probe view, one key
// per vantage point, with a lease.
const ViewRoot = "/azgate/gslb/views/"

// Role is the status key's role name.
const Role = "gslb"

// Config configures the role.
type Config struct {
	// Name is the node's name (its status key); Vantage names its probe
	// view (default Name).
	Name, Vantage string
	// Version is reported in the node status.
	Version string
	// Server is the DNS listener (Addr "127.0.0.1:5353" by default).
	Server dnsserver.ServerConfig
	// Listen, if set, are the DNS addresses instead of Server.Addr (an
	// authoritative server bound to its service addresses: one IPv4 and
	// one IPv6, say). Each is served over UDP and TCP by a server of its
	// own with Server's settings, its limits (MaxTCPConns, ...) and
	// timeouts per listener; all share the handler and the rate limiter.
	Listen []string
	// Locator locates clients (nil: no location; nearest falls back to
	// the failover order).
	Locator geo.Locator
	// Quorum is how many fresh views must say down (0: a majority).
	Quorum int
	// RRL is the UDP response rate limit (ratelimit.go); the zero value
	// is off, the command's flags default to DefaultRRL.
	RRL RRL
	// ViewEvery is how often the local view is published (default 1s);
	// a view older than ViewMaxAge (default 3 x ViewEvery, at least 3s)
	// does not count.
	ViewEvery, ViewMaxAge time.Duration
	// Monitor are the probes' options (Dial, MaxConcurrent, RootCAs,
	// OnChange); InitialUp is always true (a new record answers at once)
	// and Logger is Log.
	Monitor probe.Options
	Log     *slog.Logger
}

// GSLB is a running role.
type GSLB struct {
	cfg     Config
	st      store.Node
	log     *slog.Logger
	Handler *dnsserver.Handler
	Server  *dnsserver.Server   // the first of Servers
	Servers []*dnsserver.Server // one per listen address
	mon     *probe.Monitor
	rl      *rateLimiter           // nil: no rate limit
	listen  atomic.Pointer[string] // the UDP addresses (comma-separated), once serving
	started time.Time

	// down holds the VIPs the answers treat as down (Health.Up reads it
	// on every query).
	down atomic.Pointer[map[netip.Addr]bool]

	mu       sync.Mutex
	remote   map[string]probe.View // by vantage, read from the store
	verdict  map[string]bool       // by target key, what the answers use
	fresh    []string              // vantages of the fresh views last combined
	plan     gslbplan.Plan
	rev      int64                 // store revision of the catalog served
	invalid  []model.InvalidObject // refused by the store's decode (our kinds)
	changed  chan struct{}         // the local view changed: publish now
	updates  atomic.Uint64         // catalogs installed
	failures atomic.Uint64         // catalog builds that failed whole (kept the last)
	viewErrs atomic.Uint64         // views read from the store that did not decode
	pubErrs  atomic.Uint64         // local view publishes that failed
}

// health is gslb.Health over the combined verdicts.
type health struct{ g *GSLB }

func (h health) Up(vip netip.Addr) bool {
	d := h.g.down.Load()
	return d == nil || !(*d)[vip]
}

// Check checks cfg as New does, without a store (azgate gslb
// --check-config).
func (cfg Config) Check() error {
	if cfg.Name == "" {
		return errors.New("gslb: a node name is required")
	}
	vantage := cfg.Vantage
	if vantage == "" {
		vantage = cfg.Name
	}
	if strings.Contains(vantage, "/") {
		return fmt.Errorf("gslb: vantage %q: no '/' allowed (it is a store key)", vantage)
	}
	if err := cfg.RRL.Validate(); err != nil {
		return err
	}
	if cfg.Quorum < 0 {
		return fmt.Errorf("gslb: quorum %d: want 0 (a majority) or more", cfg.Quorum)
	}
	return nil
}

// New returns the role; Run starts it.
func New(st store.Node, cfg Config) (*GSLB, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Vantage == "" {
		cfg.Vantage = cfg.Name
	}
	if cfg.Server.Addr == "" {
		cfg.Server.Addr = "127.0.0.1:5353"
	}
	if cfg.ViewEvery <= 0 {
		cfg.ViewEvery = time.Second
	}
	if cfg.ViewMaxAge <= 0 {
		cfg.ViewMaxAge = max(3*cfg.ViewEvery, 3*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	empty, err := gslb.Compile(gslb.Config{})
	if err != nil {
		return nil, err
	}
	g := &GSLB{cfg: cfg, st: st, log: cfg.Log, started: time.Now(), remote: map[string]probe.View{}, verdict: map[string]bool{},
		changed: make(chan struct{}, 1)}
	g.Handler = dnsserver.NewHandler(empty, cfg.Locator, health{g})
	mo := cfg.Monitor
	mo.InitialUp = true // a new record answers at once, before its first checks
	mo.Logger = cfg.Log
	user := mo.OnChange
	mo.OnChange = func(s probe.State) {
		g.recompute()
		select {
		case g.changed <- struct{}{}:
		default:
		}
		if user != nil {
			user(s)
		}
	}
	g.mon = probe.NewMonitor(mo)
	if g.rl = newRateLimiter(cfg.RRL); g.rl != nil {
		cfg.Server.Allow = g.rl.Allow
	}
	addrs := cfg.Listen
	if len(addrs) == 0 {
		addrs = []string{cfg.Server.Addr}
	}
	for i, a := range addrs {
		if slices.Contains(addrs[:i], a) {
			return nil, fmt.Errorf("gslb: listen %s: given twice", a)
		}
		sc := cfg.Server
		sc.Addr = a
		g.Servers = append(g.Servers, dnsserver.NewServer(sc, g.Handler))
	}
	g.Server = g.Servers[0]
	return g, nil
}

// Run serves DNS and follows the store until ctx ends. It returns an error
// only when the listeners cannot be opened.
func (g *GSLB) Run(ctx context.Context) error {
	var addrs []string
	for i, srv := range g.Servers {
		if err := srv.Start(); err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			for _, s := range g.Servers[:i] {
				s.Shutdown(sctx)
			}
			cancel()
			return err
		}
		addrs = append(addrs, srv.UDPAddr().String())
		g.log.Info("gslb: serving DNS", "udp", srv.UDPAddr(), "tcp", srv.TCPAddr(), "vantage", g.cfg.Vantage)
	}
	addr := strings.Join(addrs, ",")
	g.listen.Store(&addr)
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(g.mon.Run)
	run(g.follow)
	run(g.publishViews)
	run(g.watchViews)
	run(func(ctx context.Context) {
		// Views age out: recompute even when nothing is written.
		t := time.NewTicker(g.cfg.ViewEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.recompute()
			}
		}
	})
	run(func(ctx context.Context) {
		store.PublishStatus(ctx, g.st, Role, g.cfg.Name, 2*time.Second, g.Status, g.log)
	})
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range g.Servers {
		errs = append(errs, srv.Shutdown(sctx))
	}
	wg.Wait()
	return errors.Join(errs...)
}

// follow rebuilds the catalog and the targets on every change of the
// desired state.
func (g *GSLB) follow(ctx context.Context) {
	for ctx.Err() == nil {
		// The whole store, not a scope (store/scope.go): the catalog is
		// the region's zones and records, and their targets are EIPs,
		// VIPs and services of every set.
		err := g.st.Follow(ctx, func(st *model.State, rev int64, _ []store.Event, _ bool) { g.apply(st, rev) })
		if ctx.Err() != nil {
			return
		}
		g.log.Warn("gslb: following the desired state failed; still serving the last catalog", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// apply installs what st describes. Nothing in it is fatal: skipped
// objects are counted, and a build that fails whole keeps the last good
// catalog.
func (g *GSLB) apply(st *model.State, rev int64) {
	plan := gslbplan.Build(st)
	cat, err := gslb.Compile(plan.Config)
	if err != nil {
		g.failures.Add(1)
		g.log.Error("gslb: the catalog does not compile; keeping the last one", "rev", rev, "err", err)
		return
	}
	if err := g.mon.Set(plan.Targets); err != nil {
		// gslbplan checked every target; keep the old targets and say so.
		g.failures.Add(1)
		g.log.Error("gslb: probe targets refused; keeping the last ones", "rev", rev, "err", err)
	}
	var inv []model.InvalidObject
	list, _ := g.st.Invalid()
	for _, o := range list {
		if o.Kind == model.KindDNSZone || o.Kind == model.KindGSLBRecord {
			inv = append(inv, o)
		}
	}
	for _, s := range plan.Skipped {
		g.log.Warn("gslb: object skipped", "kind", s.Kind, "key", s.Key, "err", s.Err)
	}
	g.mu.Lock()
	g.plan, g.invalid, g.rev = plan, inv, rev
	g.mu.Unlock()
	g.Handler.SetCatalog(cat)
	g.updates.Add(1)
	g.recompute()
	g.log.Debug("gslb: catalog installed", "rev", rev, "zones", len(plan.Config.Zones), "records", len(plan.Records), "skipped", len(plan.Skipped)+len(inv))
}

// localView is this node's probe results.
func (g *GSLB) localView(now time.Time) probe.View {
	v := probe.View{Vantage: g.cfg.Vantage, At: now, Up: map[string]bool{}}
	for _, s := range g.mon.States() {
		v.Up[s.Key] = s.Up
	}
	return v
}

// recompute combines the views into the verdicts and the down VIPs.
func (g *GSLB) recompute() {
	now := time.Now()
	states := g.mon.States()
	local := probe.View{Vantage: g.cfg.Vantage, At: now, Up: make(map[string]bool, len(states))}
	for _, s := range states {
		local.Up[s.Key] = s.Up
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	views := []probe.View{local}
	fresh := []string{g.cfg.Vantage}
	for name, v := range g.remote {
		if name == g.cfg.Vantage {
			continue
		}
		if age := now.Sub(v.At); age <= g.cfg.ViewMaxAge && age >= -g.cfg.ViewMaxAge {
			views = append(views, v)
			fresh = append(fresh, name)
		}
	}
	sort.Strings(fresh)
	verdict := local.Up
	if len(views) > 1 {
		verdict = probe.Combine(views, now, g.cfg.ViewMaxAge, g.cfg.Quorum)
	}
	down := map[netip.Addr]bool{}
	for _, s := range states {
		if up, ok := verdict[s.Key]; ok && !up {
			down[s.Addr] = true
		}
	}
	g.verdict, g.fresh = verdict, fresh
	g.down.Store(&down)
}

// viewKey is where a vantage point's view lives.
func viewKey(vantage string) string { return ViewRoot + vantage }

// publishViews writes the local view with a lease every ViewEvery and at
// once when a target flips.
func (g *GSLB) publishViews(ctx context.Context) {
	ttl := max(g.cfg.ViewMaxAge, 5*time.Second)
	callTimeout := max(g.cfg.ViewEvery, time.Second)
	var lease store.LeaseID
	t := time.NewTicker(g.cfg.ViewEvery)
	defer t.Stop()
	publish := func() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		b, _ := json.Marshal(g.localView(time.Now()))
		if lease == 0 {
			l, err := g.st.Grant(cctx, ttl)
			if err != nil {
				g.pubErrs.Add(1)
				return
			}
			lease = l
		}
		err := g.st.WriteLeased(cctx, lease, []store.KV{{Key: viewKey(g.cfg.Vantage), Value: b}})
		if err == nil {
			err = g.st.KeepAliveOnce(cctx, lease)
		}
		if err != nil {
			g.pubErrs.Add(1)
			if errors.Is(err, store.ErrLeaseNotFound) {
				lease = 0
			}
		}
	}
	for {
		publish()
		select {
		case <-ctx.Done():
			if lease != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				g.st.Revoke(rctx, lease)
				cancel()
			}
			return
		case <-t.C:
		case <-g.changed:
		}
	}
}

// maxViewBytes bounds a view read from the store.
const maxViewBytes = 1 << 20

// watchViews keeps g.remote equal to the views in the store.
func (g *GSLB) watchViews(ctx context.Context) {
	for ctx.Err() == nil {
		kvs, rev, err := g.st.GetPrefix(ctx, ViewRoot)
		if err == nil {
			m := map[string]probe.View{}
			for _, kv := range kvs {
				if name, v, ok := g.decodeView(kv.Key, kv.Value); ok {
					m[name] = v
				}
			}
			g.mu.Lock()
			g.remote = m
			g.mu.Unlock()
			g.recompute()
			err = g.st.WatchPrefix(ctx, ViewRoot, rev+1, func(cs []store.Change) {
				g.mu.Lock()
				for _, c := range cs {
					name := strings.TrimPrefix(c.Key, ViewRoot)
					if c.Delete {
						delete(g.remote, name)
						continue
					}
					if n, v, ok := g.decodeView(c.Key, c.Value); ok {
						g.remote[n] = v
					}
				}
				g.mu.Unlock()
				g.recompute()
			})
		}
		if ctx.Err() != nil {
			return
		}
		g.log.Debug("gslb: views watch ended; reading again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// decodeView reads one view; a malformed one is dropped and counted.
func (g *GSLB) decodeView(key string, value []byte) (string, probe.View, bool) {
	name := strings.TrimPrefix(key, ViewRoot)
	var v probe.View
	if name == "" || strings.Contains(name, "/") || len(value) > maxViewBytes || json.Unmarshal(value, &v) != nil || v.Vantage != name {
		g.viewErrs.Add(1)
		return "", v, false
	}
	return name, v, true
}

// Targets returns every probed target's state with its verdict.
func (g *GSLB) Targets() []model.GSLBTargetStatus {
	states := g.mon.States()
	g.mu.Lock()
	verdict := g.verdict
	g.mu.Unlock()
	out := make([]model.GSLBTargetStatus, 0, len(states))
	for _, s := range states {
		up, ok := verdict[s.Key]
		if !ok {
			up = s.Up
		}
		out = append(out, model.GSLBTargetStatus{Key: s.Key, VIP: s.Addr, Up: b01(up), LocalUp: b01(s.Up), Since: s.Since,
			Checks: s.Checks, Failures: s.Failures, LastErr: s.LastErr, RTTMS: float64(s.LastRTT) / float64(time.Millisecond)})
	}
	return out
}

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Status is the node status the role publishes (and the API shows).
func (g *GSLB) Status() model.NodeStatus {
	targets := g.Targets()
	g.mu.Lock()
	listen := ""
	if l := g.listen.Load(); l != nil {
		listen = *l
	}
	gs := &model.GSLBStatus{Listen: listen, Vantage: g.cfg.Vantage, Zones: len(g.plan.Config.Zones),
		Records: len(g.plan.Records), Views: g.fresh, Quorum: g.cfg.Quorum, Targets: targets}
	for _, s := range g.plan.Skipped {
		gs.Skipped = append(gs.Skipped, model.InvalidObject{Kind: s.Kind, Key: s.Key, Reason: s.Err})
	}
	gs.Skipped = append(gs.Skipped, g.invalid...)
	rev := g.rev
	g.mu.Unlock()
	st := model.NodeStatus{Role: Role, Name: g.cfg.Name, Version: g.cfg.Version, Started: g.started, Updated: time.Now(), AppliedRevision: rev, GSLB: gs}
	store.ReportInvalid(&st, g.st.Invalid)
	return st
}

// Skipped is how many zones and records read back are not served.
func (g *GSLB) Skipped() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.plan.Skipped) + len(g.invalid)
}

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/ddos"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// DDoS detection (docs/ddos.md): the edges publish per-EIP rates under
// model.RatesRoot; every controller watches them, and the one that holds
// the "ddos" ownership scope in the store (store.Elector, the same
// leases the edges' ARP ownership uses) runs the detector every interval
// and writes or deletes Quarantine objects with by "ddos" through the
// controller's commit path. Several controllers may run against one
// store: only the holder acts; another takes over when its lease ends,
// with a fresh detector (its baselines start over, and the quarantines it
// finds start their cool-down). A controller campaigns only once there is
// something to decide on (waitNeeded) and then keeps the scope.

// Defaults of the DDoS settings.
const (
	DefaultDDoSInterval = 250 * time.Millisecond
	DefaultDDoSEvents   = 1000
	// DDoSScope is the ownership scope the acting controller holds.
	DDoSScope = "region"
)

// DDoSConfig sets the controller's DDoS detection.
type DDoSConfig struct {
	// Off turns detection off (the controller still serves the events
	// endpoint, empty).
	Off bool
	// Detector: thresholds, baseline and hysteresis (ddos.Config.Check
	// fills the defaults).
	Detector ddos.Config
	// Interval between decisions (0: DefaultDDoSInterval).
	Interval time.Duration
	// Events bounds the decisions kept for GET /v1/ddos/events (0:
	// DefaultDDoSEvents).
	Events int
	// Owner: the lease of the ownership scope (zero: the store's
	// defaults).
	Owner store.ClaimOptions
}

func (c DDoSConfig) check() (DDoSConfig, error) {
	var err error
	if c.Detector, err = c.Detector.Check(); err != nil {
		return c, err
	}
	if c.Interval < 0 || c.Events < 0 {
		return c, fmt.Errorf("ddos: interval %v and events %d must be positive", c.Interval, c.Events)
	}
	if c.Interval == 0 {
		c.Interval = DefaultDDoSInterval
	}
	if c.Events == 0 {
		c.Events = DefaultDDoSEvents
	}
	if c.Owner, err = c.Owner.Check(); err != nil {
		return c, fmt.Errorf("ddos: %w", err)
	}
	return c, nil
}

type edgeRates struct {
	rep  model.RateReport
	seen time.Time
}

// ddosRunner watches the rate reports and, while it holds the scope,
// decides.
type ddosRunner struct {
	s      *Core
	cfg    DDoSConfig
	log    *slog.Logger
	holder string

	mu      sync.Mutex
	reports map[string]edgeRates // by edge
	bad     map[string]string    // undecodable report keys -> why
	gen     uint64               // bumped on every report change
	events  []model.DDoSEvent    // ring, oldest first once full
	seq     uint64
	acting  bool
	tracked int
}

func newDDoSRunner(s *Core, cfg DDoSConfig) *ddosRunner {
	host, _ := os.Hostname()
	return &ddosRunner{s: s, cfg: cfg, log: s.log.With("part", "ddos"), holder: fmt.Sprintf("%s/%d", host, os.Getpid()),
		reports: map[string]edgeRates{}, bad: map[string]string{}}
}

// start runs the watch and the decisions until ctx ends; done is closed
// when both have returned.
func (d *ddosRunner) start(ctx context.Context) (done chan struct{}) {
	done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.watch(ctx) }()
	go func() { defer wg.Done(); d.campaign(ctx) }()
	go func() { wg.Wait(); close(done) }()
	return done
}

// watch keeps d.reports equal to what is under model.RatesRoot (as the
// health aggregator does for health reports).
func (d *ddosRunner) watch(ctx context.Context) {
	st := d.s.store
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		kvs, rev, err := st.GetPrefix(ctx, model.RatesRoot)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("reading rate reports failed; retrying", "err", err, "in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		d.mu.Lock()
		d.reports, d.bad = map[string]edgeRates{}, map[string]string{}
		for _, kv := range kvs {
			d.put(kv.Key, kv.Value)
		}
		d.gen++
		d.mu.Unlock()
		err = st.WatchPrefix(ctx, model.RatesRoot, rev+1, func(cs []store.Change) {
			d.mu.Lock()
			for _, c := range cs {
				if c.Delete {
					delete(d.bad, c.Key)
					if e, ok := model.ParseRateReportKey(c.Key); ok {
						delete(d.reports, e)
					}
				} else {
					d.put(c.Key, c.Value)
				}
			}
			d.gen++
			d.mu.Unlock()
		})
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("rate report watch ended; reading every report again", "err", err)
	}
}

// put records one report; d.mu must be held. A malformed one is dropped
// (and listed by GET /v1/ddos/events); so are its rates.
func (d *ddosRunner) put(k string, v []byte) {
	e, ok := model.ParseRateReportKey(k)
	if !ok {
		d.bad[k] = "not a " + model.RatesRoot + "EDGE key"
		return
	}
	var r model.RateReport
	if err := json.Unmarshal(v, &r); err != nil {
		d.bad[k] = err.Error()
		delete(d.reports, e)
		return
	}
	delete(d.bad, k)
	d.reports[e] = edgeRates{rep: r, seen: time.Now()}
}

// observations sums the reported rates per address over the edges. A
// report counts only as what its edge can see: the edge must be a member
// of a set in the desired state, an address must be an EIP that set
// carries (carries: it serves it, or would without its quarantine or
// pull-out), and an address listed twice counts once. So a stray key under
// model.RatesRoot, or one edge's report about addresses it does not
// carry, cannot quarantine an arbitrary EIP (docs/ddos.md).
func (d *ddosRunner) observations() (map[netip.Addr]ddos.Observation, uint64, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[netip.Addr]ddos.Observation{}
	now := time.Now()
	v := d.s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	st := v.st
	// Only the reported addresses are looked up (at most maxRates per
	// edge), not every EIP of the state.
	in := setplan.Input{Sets: st.EdgeSets, PulledOut: map[netip.Addr]string{}, Quarantined: map[netip.Addr]bool{}}
	for _, er := range d.reports {
		for _, r := range er.rep.Rates {
			if !r.Address.IsValid() {
				continue
			}
			key := r.Address.String()
			if e, ok := st.EIPs[key]; ok && e.Set != "" {
				in.PulledOut[r.Address] = e.Set
			}
			if _, ok := st.Quarantines[key]; ok {
				in.Quarantined[r.Address] = true
			}
		}
	}
	// The sets that may see an address depend on the address only: worked
	// out once a round, not once for every edge that reports it.
	sets := map[netip.Addr][3]string{}
	edges := 0 // whose reports count
	for edge, er := range d.reports {
		set, _, ok := in.SetOf(edge)
		if !ok {
			continue
		}
		// An edge rewrites its report every interval while it has
		// anything to say: one not rewritten for 4 intervals and a
		// second is from an edge that hangs with its lease alive.
		iv := time.Duration(min(max(er.rep.IntervalMS, 1), 60_000)) * time.Millisecond
		if now.Sub(er.seen) > 4*iv+time.Second {
			continue
		}
		edges++
		seen := make(map[netip.Addr]bool, len(er.rep.Rates))
		for _, r := range er.rep.Rates {
			if !r.Address.IsValid() || seen[r.Address] || r.PPS < 0 || r.BPS < 0 || r.SYNPS < 0 {
				continue
			}
			seen[r.Address] = true
			if _, ok := st.EIPs[r.Address.String()]; !ok {
				continue
			}
			c, ok := sets[r.Address]
			if !ok {
				c = in.Carriers(r.Address) // the sets that may see its traffic
				sets[r.Address] = c
			}
			if !slices.Contains(c[:], set.Name) {
				continue
			}
			o := out[r.Address]
			o.Set = policySet(st.DDoSPolicies, c)
			o.PPS += r.PPS
			o.BPS += r.BPS
			o.SYN += r.SYNPS
			o.Edges++
			out[r.Address] = o
		}
	}
	return out, d.gen, edges
}

// policySet names the set policy that judges an address whose carriers
// are c (setplan.Input.Carriers): the policy of the set serving it without
// its quarantine (a dedicated set it is pulled out into, or its prefix
// set), else the one of its prefix set; "" when neither has one (the
// region policy and the flags judge it).
func policySet(pols map[string]*model.DDoSPolicy, c [3]string) string {
	for _, s := range c[1:] {
		if s != "" && s != model.DDoSPolicyRegion && pols[s] != nil {
			return s
		}
	}
	return ""
}

// toRates turns a policy's thresholds into the detector's (0 inherits, -1
// is off, as in ddos.Config).
func toRates(t model.DDoSThresholds) ddos.Rates {
	return ddos.Rates{PPS: float64(t.PPS), BPS: float64(t.BPS), SYN: float64(t.SYNPS)}
}

// policyConfig is the detector's configuration under the DDoS policies
// (docs/ddos.md, "Policy"): base (the --ddos-* flags, checked) with the
// region policy's fields over it, its addresses over --ddos-eip's entries,
// and the set policies' thresholds. The policies passed their own
// validation when written; what is checked here is the whole (every
// threshold of the region off, between the flags and the policy).
func policyConfig(base ddos.Config, pols map[string]*model.DDoSPolicy) (ddos.Config, error) {
	c := base
	c.Override = maps.Clone(base.Override)
	if c.Override == nil {
		c.Override = map[netip.Addr]ddos.Rates{}
	}
	c.SetThreshold = map[string]ddos.Rates{}
	for name, p := range pols {
		if name != model.DDoSPolicyRegion {
			c.SetThreshold[name] = toRates(p.Thresholds)
			continue
		}
		c.Threshold = toRates(p.Thresholds).Over(base.Threshold)
		if p.BaselineFactor != 0 {
			c.K = p.BaselineFactor
		}
		if p.BaselineWeight != 0 {
			c.Alpha = p.BaselineWeight
		}
		if p.EnterRounds != 0 {
			c.Enter = p.EnterRounds
		}
		if p.ReleaseFraction != 0 {
			c.Release = p.ReleaseFraction
		}
		if p.Cooldown != 0 {
			c.Cooldown = time.Duration(p.Cooldown)
		}
		for _, a := range p.Addresses {
			c.Override[a.Address] = toRates(a.Thresholds)
		}
	}
	return c.Check()
}

// policies returns the DDoS policies of the desired state (the objects
// are never changed in place: a write replaces them).
func (d *ddosRunner) policies() map[string]*model.DDoSPolicy {
	v := d.s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	return maps.Clone(v.st.DDoSPolicies)
}

// reconfigure gives det the configuration of the policies pols when they
// differ from last (by object): the policies apply from the next round,
// without a restart and without losing what det learned. A whole the
// detector refuses keeps the configuration it has, and is logged.
func (d *ddosRunner) reconfigure(det *ddos.Detector, last, pols map[string]*model.DDoSPolicy) {
	if maps.Equal(last, pols) {
		return
	}
	cfg, err := policyConfig(d.cfg.Detector, pols)
	if err != nil {
		d.log.Warn("DDoS policies not applied: the detector keeps its settings", "err", err)
		return
	}
	det.SetConfig(cfg)
	d.log.Info("DDoS policies applied", "policies", len(pols), "pps", cfg.Threshold.PPS, "bps", cfg.Threshold.BPS, "synps", cfg.Threshold.SYN)
}

// campaign takes the DDoS scope and decides while it holds it; it
// campaigns again when the claim is lost.
func (d *ddosRunner) campaign(ctx context.Context) {
	if d.cfg.Off {
		return
	}
	key := store.OwnerKey("ddos", DDoSScope)
	for ctx.Err() == nil {
		if !d.waitNeeded(ctx) {
			return
		}
		cl, err := d.s.store.Campaign(ctx, key, d.holder, d.cfg.Owner)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("campaign for DDoS detection failed; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		d.log.Info("acting for DDoS detection", "holder", d.holder)
		d.s.metrics.ddosActing.Set(1)
		d.mu.Lock()
		d.acting = true
		d.mu.Unlock()
		d.decide(ctx, cl)
		d.mu.Lock()
		d.acting = false
		d.mu.Unlock()
		d.s.metrics.ddosActing.Set(0)
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cl.Release(rctx)
		cancel()
		if ctx.Err() == nil {
			d.log.Warn("DDoS detection ownership lost; campaigning again", "err", cl.Err())
		}
	}
}

// waitNeeded waits until there is something to decide on: an edge
// reports rates or an automatic quarantine exists. Until then the
// controller does not campaign, so an idle region's store sees no writes
// for DDoS detection (the claim is a leased key). It returns false when
// ctx ends.
func (d *ddosRunner) waitNeeded(ctx context.Context) bool {
	for {
		d.mu.Lock()
		n := len(d.reports)
		d.mu.Unlock()
		if n > 0 {
			return true
		}
		for _, by := range d.quarantined() {
			if by == "ddos" {
				return true
			}
		}
		if !sleep(ctx, d.cfg.Interval) {
			return false
		}
	}
}

// decide runs the detector every interval until ctx ends or the claim is
// lost.
func (d *ddosRunner) decide(ctx context.Context, cl *store.Claim) {
	det := ddos.New(d.cfg.Detector)
	pols := d.policies()
	d.reconfigure(det, nil, pols)
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	var lastGen uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-cl.Done():
			return
		case now := <-t.C:
			if time.Now().After(cl.Deadline()) {
				return
			}
			cur := d.policies()
			d.reconfigure(det, pols, cur)
			pols = cur
			obs, gen, edges := d.observations()
			fresh := gen != lastGen
			lastGen = gen
			q := d.quarantined()
			ds := det.Step(now, obs, fresh, q)
			d.s.metrics.ddosReports.Set(float64(edges))
			d.s.metrics.ddosTracked.Set(float64(det.Tracked()))
			for _, x := range ds {
				if cl.Err() != nil || time.Now().After(cl.Deadline()) {
					return // no longer ours to act on
				}
				d.apply(ctx, det, x)
			}
			if len(ds) > 0 {
				d.quarantined() // the gauge, after the writes
			}
		}
	}
}

// quarantined maps every quarantined address to who decided it; it also
// sets the gauge of the automatic ones.
func (d *ddosRunner) quarantined() map[netip.Addr]string {
	v := d.s.view
	v.mu.RLock()
	out := make(map[netip.Addr]string, len(v.st.Quarantines))
	n := 0
	for _, q := range v.st.Quarantines {
		by := q.By
		if by == "" {
			by = "operator"
		}
		out[q.Address] = by
		if by == "ddos" {
			n++
		}
	}
	v.mu.RUnlock()
	d.s.metrics.ddosQuarantined.Set(float64(n))
	return out
}

// apply carries a decision out and records it as an event. A quarantine
// that cannot be written (no quarantine set, not an EIP any more, the
// store) is recorded as a skip and the detector forgets the address, so
// it is tried again only after Enter more rounds above its trigger level.
func (d *ddosRunner) apply(ctx context.Context, det *ddos.Detector, x ddos.Decision) {
	ev := model.DDoSEvent{Time: time.Now().UTC(), Action: x.Action, Address: x.Addr, PPS: x.Rates.PPS, BPS: x.Rates.BPS,
		SYNPS: x.Rates.SYN, LimitPPS: x.Limit.PPS, LimitBPS: x.Limit.BPS, LimitSYNS: x.Limit.SYN, Edges: x.Edges, Reason: x.Reason}
	key := x.Addr.String()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	switch x.Action {
	case ddos.Quarantine:
		_, err = d.s.write(wctx, func(tx *txn) error {
			if _, ok := tx.st.Quarantines[key]; ok {
				return nil // quarantined meanwhile (an operator)
			}
			_, err := tx.put(&model.Quarantine{Address: x.Addr, Reason: x.Reason, By: "ddos"})
			return err
		})
	case ddos.Release:
		_, err = d.s.write(wctx, func(tx *txn) error {
			if q, ok := tx.st.Quarantines[key]; !ok || q.By != "ddos" {
				return nil // released or taken over by an operator meanwhile
			}
			return tx.delete(model.KindQuarantine, key)
		})
	}
	if err != nil {
		ev.Action = "skip"
		ev.Reason = fmt.Sprintf("%s not carried out: %v (%s)", x.Action, err, x.Reason)
		det.Forget(x.Addr)
		d.log.Warn("DDoS decision not carried out", "action", x.Action, "address", key, "err", err)
	} else {
		d.log.Info("DDoS decision", "action", x.Action, "address", key, "pps", int64(x.Rates.PPS), "bps", int64(x.Rates.BPS),
			"synps", int64(x.Rates.SYN), "edges", x.Edges, "reason", x.Reason)
	}
	d.s.metrics.ddosDecisions.WithLabelValues(ev.Action).Inc()
	d.record(ev)
}

// record appends an event to the bounded history.
func (d *ddosRunner) record(ev model.DDoSEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	ev.Seq = d.seq
	if len(d.events) >= d.cfg.Events {
		copy(d.events, d.events[1:])
		d.events = d.events[:len(d.events)-1]
	}
	d.events = append(d.events, ev)
}

// rates returns the summed rates, highest packet rate first (at most n),
// and how many edges' reports count.
func (d *ddosRunner) rates(n int) ([]api.DDoSRate, int) {
	obs, _, edges := d.observations()
	out := make([]api.DDoSRate, 0, len(obs))
	for a, o := range obs {
		out = append(out, api.DDoSRate{Address: a, PPS: o.PPS, BPS: o.BPS, SYNPS: o.SYN, Edges: o.Edges})
	}
	sortRates(out)
	if len(out) > n {
		out = out[:n]
	}
	return out, edges
}

// ddosEvents serves GET /v1/ddos/events[?since=SEQ]: the decisions this
// controller made (after SEQ), oldest first, and whether it is the one
// acting.
func (s *Server) ddosEvents(w http.ResponseWriter, r *http.Request) error {
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("since %q: not a sequence number", v)}
		}
		since = n
	}
	writeJSON(w, http.StatusOK, s.Core.Revision(), s.Core.DDoSEvents(since))
	return nil
}

// ddosRates serves GET /v1/ddos/rates[?top=N]: the rates the edges report,
// summed per address (default top 100, at most 10,000).
func (s *Server) ddosRates(w http.ResponseWriter, r *http.Request) error {
	n := 100
	if v := r.URL.Query().Get("top"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 || x > 10000 {
			return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("top %q: want 1..10000", v)}
		}
		n = x
	}
	writeJSON(w, http.StatusOK, s.Core.Revision(), s.Core.DDoSRates(n))
	return nil
}

func sortRates(rs []api.DDoSRate) {
	slices.SortFunc(rs, func(x, y api.DDoSRate) int {
		if x.PPS != y.PPS {
			if x.PPS > y.PPS {
				return -1
			}
			return 1
		}
		return x.Address.Compare(y.Address)
	})
}

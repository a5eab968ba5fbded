package bandwidth

import (
	"context"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/model"
)

// Package is a bandwidth package as the region manager allocates it:
// checked against the EIPs of the region (PackagesFrom).
type Package struct {
	Name     string
	Capacity uint64 // bits/s
	Burst    time.Duration
	EIPs     []bwalloc.EIP // sorted by address; Demand unset
}

// burstBytes is the bucket size of a share of rate bytes/s: rate × burst
// time, at least MinBurstBytes.
func (p *Package) burstBytes(rateBytes uint64) uint64 {
	hi, lo := bits.Mul64(rateBytes, uint64(p.Burst))
	if hi >= uint64(time.Second) {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, uint64(time.Second))
	return max(q, MinBurstBytes)
}

// Problem is a package entry the region manager skips, and why.
type Problem struct {
	Package string
	EIP     netip.Addr // invalid: the whole package
	Reason  string
}

func (p Problem) String() string {
	if !p.EIP.IsValid() {
		return fmt.Sprintf("bandwidth package %s: %s", p.Package, p.Reason)
	}
	return fmt.Sprintf("bandwidth package %s: EIP %s: %s", p.Package, p.EIP, p.Reason)
}

// PackagesFrom reads the packages of st and checks them again (the store
// may hold what an older controller or a hand-written key put there): an
// EIP that does not exist, one listed twice in a package or listed by two
// packages, or with a min above its max is skipped (in every package that
// lists it) and reported; a package with a capacity the allocator cannot
// take is skipped whole. Never an error: one bad entry must not stop the
// allocation of the others. Packages come sorted by name.
func PackagesFrom(st *model.State) ([]Package, []Problem) {
	var probs []Problem
	owners := map[netip.Addr][]string{}
	names := make([]string, 0, len(st.BandwidthPackages))
	for name, p := range st.BandwidthPackages {
		names = append(names, name)
		seen := map[netip.Addr]bool{}
		for _, e := range p.EIPs {
			a := e.Address.Unmap()
			if seen[a] {
				continue
			}
			seen[a] = true
			owners[a] = append(owners[a], name)
		}
	}
	slices.Sort(names)
	out := make([]Package, 0, len(names))
	for _, name := range names {
		p := st.BandwidthPackages[name]
		if p.Capacity == 0 || p.Capacity > bwalloc.MaxRate {
			probs = append(probs, Problem{Package: name, Reason: fmt.Sprintf("capacity %d bit/s: want 1..%d; package skipped", p.Capacity, uint64(bwalloc.MaxRate))})
			continue
		}
		pk := Package{Name: name, Capacity: p.Capacity, Burst: p.BurstTime()}
		count := map[netip.Addr]int{}
		for _, e := range p.EIPs {
			count[e.Address.Unmap()]++
		}
		done := map[netip.Addr]bool{}
		for _, e := range p.EIPs {
			a := e.Address.Unmap()
			if done[a] {
				continue
			}
			done[a] = true
			switch {
			case !a.IsValid():
				probs = append(probs, Problem{Package: name, EIP: a, Reason: "not an address; skipped"})
				continue
			case st.EIPs[a.String()] == nil:
				probs = append(probs, Problem{Package: name, EIP: a, Reason: "no such EIP; skipped"})
				continue
			case count[a] > 1:
				probs = append(probs, Problem{Package: name, EIP: a, Reason: "listed twice in the package; skipped"})
				continue
			case len(owners[a]) > 1:
				probs = append(probs, Problem{Package: name, EIP: a, Reason: fmt.Sprintf("listed by packages %v; skipped in all of them", owners[a])})
				continue
			case e.Max != 0 && e.Min > e.Max:
				probs = append(probs, Problem{Package: name, EIP: a, Reason: fmt.Sprintf("min %d above max %d; skipped", e.Min, e.Max)})
				continue
			}
			pk.EIPs = append(pk.EIPs, bwalloc.EIP{Addr: a, Min: e.Min, Max: e.Max, Weight: e.W()})
		}
		slices.SortFunc(pk.EIPs, func(x, y bwalloc.EIP) int { return x.Addr.Compare(y.Addr) })
		out = append(out, pk)
	}
	return out, probs
}

// RegionManager is the region manager of shared bandwidth (`azgate bwmgr
// --scope region`). Every round it
//
//  1. reads the zones' reports from the region tier (each zone manager
//     writes one, summed over its hosts), drops those older than 2
//     intervals;
//  2. estimates each EIP's demand per direction from the sum over the
//     zones (bwalloc.Estimator: recent peak × 1.1, probing upward while
//     the EIP is pinned at the limit in force) and each zone's own;
//  3. allocates every package per direction (bwalloc.Allocator: weighted
//     max-min fairness with min and max) and splits each EIP's limit over
//     the zones that carry it by their demand (bwalloc.SplitHosts);
//  4. writes each zone its shares (host = the zone), decreases first.
//
// Increases are budgeted so that no order of arrival below can take a
// package over its capacity: a limit lowered within the last Settle may
// still be in force below (a zone manager's round plus a host's poll), so
// it counts at its old value, and an EIP with no limit of ours in force
// counts at its static split (the hosts enforce that). Increases get what
// the capacity leaves above those, in proportion to their size; the rest
// waits for the next rounds, once the decreases are in force. So a newly
// active manager (failover) with no history first reads what is in force
// from the region tier, estimates from the current rates, and grants no
// more than min(new, in force or static split) until its decreases have
// settled. Not safe for concurrent use but for SetPackages.
type RegionManager struct {
	Store bwstore.Store // the region tier

	cfg   Config
	gens  *Generations
	est   *bwalloc.Estimator[bwstore.RateKey]
	zest  *bwalloc.Estimator[hostRateKey]
	alloc bwalloc.Allocator

	mu    sync.Mutex
	pkgs  []Package
	probs []Problem

	force  map[string]written          // by zone
	recent map[hostRateKey][]stampRate // recent writes per EIP, direction and zone, within Settle
	first  bool
}

type stampRate struct {
	at   time.Time
	rate uint64
}

// NewRegionManager returns a region manager; cfg's zero fields default.
func NewRegionManager(region bwstore.Store, cfg Config) (*RegionManager, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	est, err := bwalloc.NewEstimator[bwstore.RateKey](cfg.Estimator)
	if err != nil {
		return nil, err
	}
	zest, err := bwalloc.NewEstimator[hostRateKey](cfg.Estimator)
	if err != nil {
		return nil, err
	}
	r := &RegionManager{Store: region, cfg: cfg, gens: NewGenerations(cfg.Now), est: est, zest: zest}
	r.Activate()
	return r, nil
}

// SetPackages replaces the packages allocated from the next round on.
func (r *RegionManager) SetPackages(p []Package, probs []Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pkgs, r.probs = p, probs
}

// SetState takes the packages from a model state (PackagesFrom) and logs
// the problems that are new.
func (r *RegionManager) SetState(st *model.State) {
	p, probs := PackagesFrom(st)
	r.mu.Lock()
	old := map[string]bool{}
	for _, x := range r.probs {
		old[x.String()] = true
	}
	r.mu.Unlock()
	for _, x := range probs {
		if !old[x.String()] {
			r.cfg.Log.Warn("bandwidth region manager: " + x.String())
		}
	}
	r.SetPackages(p, probs)
}

// Activate forgets what this replica believes is in force; the estimates
// start over too, so a newly active replica judges from current rates.
func (r *RegionManager) Activate() {
	r.force = map[string]written{}
	r.recent = map[hostRateKey][]stampRate{}
	r.first = true
	r.est, _ = bwalloc.NewEstimator[bwstore.RateKey](r.cfg.Estimator)
	r.zest, _ = bwalloc.NewEstimator[hostRateKey](r.cfg.Estimator)
}

// Round runs one region round.
func (r *RegionManager) Round(ctx context.Context, active func() error) (RoundStats, error) {
	if active == nil {
		active = alwaysActive
	}
	var st RoundStats
	now := r.cfg.Now()
	r.mu.Lock()
	pkgs, probs := r.pkgs, r.probs
	r.mu.Unlock()
	st.Problems = len(probs)
	snap, err := r.Store.ReadReports(ctx, RegionTier)
	if err != nil {
		return st, fmt.Errorf("region: reading the zones' reports: %w", err)
	}
	type tot struct{ bytes, drops uint64 }
	totals := map[bwstore.RateKey]*tot{}
	carriers := map[bwstore.RateKey][]string{}
	zones := map[string]bool{}
	rateOf := map[hostRateKey]bwstore.Rate{}
	for _, rep := range snap.Reports {
		if !r.cfg.fresh(rep) {
			st.Stale++
			continue
		}
		zones[rep.Reporter] = true
		k := bwstore.RateKey{EIP: rep.EIP, Dir: rep.Dir}
		t := totals[k]
		if t == nil {
			t = &tot{}
			totals[k] = t
		}
		t.bytes = satAdd(t.bytes, rep.BytesPerSec)
		t.drops = satAdd(t.drops, rep.DropBytesPerSec)
		carriers[k] = append(carriers[k], rep.Reporter)
		rateOf[hostRateKey{k, rep.Reporter}] = rep.Rate
	}
	st.Reporters = len(zones)
	// What is in force: read back from the region tier when newly active.
	if r.first {
		for z := range zones {
			hl, ok, err := r.Store.ReadLimits(ctx, RegionTier, z)
			if err != nil {
				return st, fmt.Errorf("region: reading the limits in force of zone %s: %w", z, err)
			}
			if ok {
				at := now.Add(-hl.Age)
				w := written{limits: byKey(hl.Limits.Limits), at: at}
				r.force[z] = w
				r.remember(z, w.limits, at)
			}
		}
		r.first = false
	}
	// A zone's limits count as possibly in force for 2 graces: the zone
	// manager pushes them until they expire here, its hosts keep them for
	// another grace.
	for z, w := range r.force {
		if now.Sub(w.at) >= 2*r.cfg.Grace {
			delete(r.force, z)
		}
	}
	for k, ss := range r.recent {
		i := 0
		for i < len(ss) && now.Sub(ss[i].at) >= r.cfg.Settle {
			i++
		}
		if i == len(ss) {
			delete(r.recent, k)
		} else {
			r.recent[k] = ss[i:]
		}
	}
	// Estimates, each with the limit in force while it was measured.
	for k, t := range totals {
		var lim uint64
		for _, z := range carriers[k] {
			if w, ok := r.force[z]; ok {
				lim += w.limits[k].RateBytes
			}
		}
		r.est.Observe(k, now, bwalloc.Sample{Rate: t.bytes * 8, Dropped: t.drops * 8, Limit: lim * 8})
	}
	for hk, rate := range rateOf {
		var lim uint64
		if w, ok := r.force[hk.Host]; ok {
			lim = w.limits[hk.RateKey].RateBytes
		}
		r.zest.Observe(hk, now, bwalloc.Sample{Rate: rate.BytesPerSec * 8, Dropped: rate.DropBytesPerSec * 8, Limit: lim * 8})
	}
	r.est.Prune(now)
	r.zest.Prune(now)

	next := map[string]map[bwstore.RateKey]bwstore.Limit{}
	for z := range zones {
		next[z] = map[bwstore.RateKey]bwstore.Limit{}
	}
	inForce := r.possiblyInForce()
	var in []bwalloc.EIP
	var grants []bwalloc.Grant
	var shares []bwalloc.HostShare
	for pi := range pkgs {
		p := &pkgs[pi]
		contended := false
		for _, dir := range []bwstore.Direction{bwstore.Egress, bwstore.Ingress} {
			carried := false
			in = in[:0]
			for _, e := range p.EIPs {
				k := bwstore.RateKey{EIP: e.Addr, Dir: dir}
				carried = carried || len(carriers[k]) > 0
				e.Demand = r.est.Demand(k, now, capOf(e.Max, p.Capacity)).Rate
				in = append(in, e)
			}
			if !carried {
				continue // nobody measures or enforces this direction
			}
			res, err := r.alloc.Package(p.Capacity, in, bwalloc.Options{}, grants)
			if err != nil {
				st.Problems++
				r.cfg.Log.Warn("bandwidth region manager: package skipped", "package", p.Name, "dir", dir.String(), "err", err)
				continue
			}
			grants = res.Grants
			contended = contended || res.Contended
			// The new zone shares, bytes/s.
			var want []zoneRate
			for _, g := range res.Grants {
				k := bwstore.RateKey{EIP: g.Addr, Dir: dir}
				cs := carriers[k]
				if len(cs) == 0 {
					continue
				}
				hs := make([]bwalloc.HostShare, len(cs))
				for i, z := range cs {
					hs[i] = bwalloc.HostShare{Host: z, Demand: r.zest.Demand(hostRateKey{k, z}, now, 0).Rate}
				}
				shares, err = bwalloc.SplitHosts(shares, g.Limit/8, hs, r.cfg.HostFloor)
				if err != nil {
					return st, fmt.Errorf("region: package %s: splitting %s/%s: %w", p.Name, g.Addr, dir, err)
				}
				st.EIPs++
				for _, s := range shares {
					want = append(want, zoneRate{hostRateKey{k, s.Host}, s.Limit})
				}
			}
			held := r.budget(p, dir, in, want, inForce)
			st.Held += held
			for _, w := range want {
				if w.rate == 0 {
					continue // an addition held back entirely: next round
				}
				next[w.Host][w.RateKey] = bwstore.Limit{EIP: w.EIP, Dir: w.Dir, RateBytes: w.rate, BurstBytes: p.burstBytes(w.rate)}
			}
		}
		if contended {
			st.Contended++
		}
	}
	// Push: decreases first, then the rest. The budget already makes any
	// order safe; the order makes room before it is used.
	alive := map[string]written{}
	for z, w := range r.force {
		if now.Sub(w.at) < r.cfg.Grace {
			alive[z] = w
		}
	}
	p1, p2 := phases(alive, next, now, r.cfg.Grace)
	st.Decreases = len(p1)
	res := writeAll(ctx, r.Store, r.gens, active, RegionTier, r.cfg.Grace, p1, now, r.cfg.Concurrency)
	for z, err := range res {
		if err != nil {
			st.PushErrors++
			r.cfg.Log.Warn("bandwidth region manager: zone limits not written", "zone", z, "err", err)
			continue
		}
		r.force[z] = written{limits: p1[z], at: now}
		r.remember(z, p1[z], now)
		st.Writes++
	}
	if err := active(); err != nil {
		return st, err
	}
	if st.PushErrors > 0 {
		st.Held += len(p2)
		return st, fmt.Errorf("region: %d decrease writes failed; increases held", st.PushErrors)
	}
	res = writeAll(ctx, r.Store, r.gens, active, RegionTier, r.cfg.Grace, p2, now, r.cfg.Concurrency)
	for z, err := range res {
		if err != nil {
			st.PushErrors++
			r.cfg.Log.Warn("bandwidth region manager: zone limits not written", "zone", z, "err", err)
			continue
		}
		r.force[z] = written{limits: p2[z], at: now}
		r.remember(z, p2[z], now)
		st.Writes++
	}
	if st.PushErrors > 0 {
		return st, fmt.Errorf("region: %d limit writes failed", st.PushErrors)
	}
	return st, active()
}

type zoneRate struct {
	hostRateKey
	rate uint64 // bytes/s
}

// remember records the rates written to zone at `at` for the budget.
func (r *RegionManager) remember(zone string, ls map[bwstore.RateKey]bwstore.Limit, at time.Time) {
	for k, l := range ls {
		hk := hostRateKey{k, zone}
		r.recent[hk] = append(r.recent[hk], stampRate{at, l.RateBytes})
	}
}

// prev is the most that may be in force for key in zone: the current
// limit and anything written within Settle.
func (r *RegionManager) prev(hk hostRateKey) (uint64, bool) {
	var p uint64
	ok := false
	if w, in := r.force[hk.Host]; in {
		if l, has := w.limits[hk.RateKey]; has {
			p, ok = l.RateBytes, true
		}
	}
	for _, s := range r.recent[hk] {
		p, ok = max(p, s.rate), true
	}
	return p, ok
}

// possiblyInForce sums, per EIP and direction, the most that may be in
// force over the zones (prev of each zone key); computed once a round.
func (r *RegionManager) possiblyInForce() map[bwstore.RateKey]uint64 {
	keys := map[hostRateKey]bool{}
	for hk := range r.recent {
		keys[hk] = true
	}
	for z, w := range r.force {
		for k := range w.limits {
			keys[hostRateKey{k, z}] = true
		}
	}
	out := map[bwstore.RateKey]uint64{}
	for hk := range keys {
		if v, ok := r.prev(hk); ok {
			out[hk.RateKey] = satAdd(out[hk.RateKey], v)
		}
	}
	return out
}

// budget lowers the increases of one package and direction (want, in
// place) so that the package stays within its capacity whatever is in
// force below while the writes travel: Σ over its keys of
// max(possibly in force, written) ≤ capacity. inForce is
// possiblyInForce's. It returns how many increases it held back (in part
// or whole).
func (r *RegionManager) budget(p *Package, dir bwstore.Direction, eips []bwalloc.EIP, want []zoneRate, inForce map[bwstore.RateKey]uint64) int {
	capBytes := p.Capacity / 8
	// Possibly in force: ours where we have written; an EIP with nothing
	// of ours in force anywhere is at its static split (over whichever
	// hosts carry it).
	var total uint64
	for _, e := range p.EIPs {
		total = satAdd(total, inForce[bwstore.RateKey{EIP: e.Addr, Dir: dir}])
	}
	var static map[netip.Addr]uint64
	wantTotal := map[netip.Addr]uint64{}
	for _, w := range want {
		wantTotal[w.EIP] += w.rate
	}
	base := make([]uint64, len(want))
	for i, w := range want {
		if v, ok := r.prev(w.hostRateKey); ok {
			base[i] = v
			continue
		}
		if _, ok := inForce[w.RateKey]; ok {
			continue // a zone new to the EIP: an addition from 0
		}
		if static == nil {
			static = map[netip.Addr]uint64{}
			if res, err := bwalloc.StaticSplit(p.Capacity, eips); err == nil {
				for _, g := range res.Grants {
					static[g.Addr] = g.Limit / 8
				}
			}
		}
		// The EIP's static split, attributed to its zones as the new
		// split is.
		hi, lo := bits.Mul64(static[w.EIP], w.rate)
		if t := wantTotal[w.EIP]; t > 0 && hi < t {
			base[i], _ = bits.Div64(hi, lo, t)
		}
		total = satAdd(total, base[i])
	}
	var incs uint64
	for i, w := range want {
		if w.rate > base[i] {
			incs += w.rate - base[i]
		}
	}
	if incs == 0 {
		return 0
	}
	var room uint64
	if capBytes > total {
		room = capBytes - total
	}
	if room >= incs {
		return 0
	}
	held := 0
	for i := range want {
		if want[i].rate <= base[i] {
			continue
		}
		inc := want[i].rate - base[i]
		hi, lo := bits.Mul64(room, inc)
		part, _ := bits.Div64(hi, lo, incs) // room < incs
		want[i].rate = base[i] + part
		held++
	}
	return held
}

func (p *Package) has(a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(p.EIPs, a, func(e bwalloc.EIP, a netip.Addr) int { return e.Addr.Compare(a) })
	return ok
}

func capOf(maxBps, capacity uint64) uint64 {
	if maxBps == 0 {
		return capacity
	}
	return min(maxBps, capacity)
}

package bandwidth

import (
	"context"
	"errors"
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

// addStatic puts each EIP's static split (bwalloc.StaticSplit) into dst,
// in bytes/s; nothing when the split refuses the package.
func (p *Package) addStatic(dst map[netip.Addr]uint64) {
	if res, err := bwalloc.StaticSplit(p.Capacity, p.EIPs); err == nil {
		for _, g := range res.Grants {
			dst[g.Addr] = g.Limit / 8
		}
	}
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
	for _, o := range owners {
		slices.Sort(o)
	}
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
// settled. A zone whose reports stop (its zone manager or store lost)
// has its hosts on their last limits, then their static split: its last
// EIPs count at that as a reservation off the capacity (reserve) until it
// reports again, for at most SilentGraces × grace. Not safe for
// concurrent use but for SetPackages.
type RegionManager struct {
	Store bwstore.Store // the region tier

	cfg   Config
	gens  *Generations
	est   *bwalloc.Estimator[bwstore.RateKey]
	zest  *bwalloc.Estimator[zoneKey]
	zidx  map[string]uint16 // zone names, interned for zest's keys
	alloc bwalloc.Allocator

	mu     sync.Mutex
	pkgs   []Package
	probs  []Problem
	loaded bool // SetPackages was called: until then no round runs
	// placed: where the model says each EIP is enforced (SetState; nil
	// with SetPackages alone): a silent zone's remembered key whose EIP
	// the model has moved elsewhere is forgotten (reserve).
	placed *placement

	force      map[string]written       // by zone
	staticBase map[hostRateKey]uint64   // this round: static split a zone key replaces
	hold       map[hostRateKey]holdRate // lowered limits that may still be in force below
	first      bool
	// quiet: until then no increase is granted. A newly active manager
	// reads back what the previous one wrote last, not what that write
	// lowered: a decrease written within Settle before the takeover may
	// not be in force below yet (SIGTERM hands over in milliseconds).
	quiet time.Time
	bad   int // malformed reports in the last round (logged on change)
	// seen: per zone, the keys of its last fresh report. While a zone is
	// silent (no fresh report) its hosts enforce their last limits, then
	// their static split: reserve counts each remembered key at the most
	// of those until the EIP leaves its package or SilentGraces × grace
	// after the zone's last report.
	seen map[string]zoneSeen
	// lastSeen: per zone key, the round of the zone's last fresh report
	// of it (forgotten a grace later). A fresh zone whose report lacks a
	// key it reported within the grace keeps its share of it (kept).
	lastSeen map[hostRateKey]time.Time
	// observed: per zone key, its share in force at the last round's
	// observe (what the zone's hosts enforced over this round's reports).
	observed map[zoneKey]uint64
}

// SilentGraces × grace is how long the region manager keeps counting a
// silent zone's EIPs at their static split (100 s at the default 10 s
// grace). A zone manager or zone store lost for longer is forgotten, and
// its hosts' static split goes uncounted again (the package can then go
// over its capacity until the zone returns); a zone decommissioned (or
// whose last EIP left: an empty report has no rows, so it reads as
// silent) holds capacity no longer than that.
const SilentGraces = 10

// zoneSeen is what a zone carried in its last fresh report.
type zoneSeen struct {
	keys   []bwstore.RateKey
	at     time.Time // that report's round
	silent bool      // logged as silent
}

// holdRate is the most a zone key had before it was lowered, counted
// as possibly in force until `until` (the write plus Settle).
type holdRate struct {
	rate  uint64
	until time.Time
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
	zest, err := bwalloc.NewEstimator[zoneKey](cfg.Estimator)
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
	r.pkgs, r.probs, r.loaded = p, probs, true
}

// SetState takes the packages from a model state (PackagesFrom) and logs
// the problems that are new.
func (r *RegionManager) SetState(st *model.State) {
	p, probs := PackagesFrom(st)
	pl := placementFrom(st)
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
	r.mu.Lock()
	r.placed = pl
	r.mu.Unlock()
}

// placement is where the model has each bound EIP: the AZ of its host
// (its egress is enforced by that host's agent, in that zone).
type placement struct {
	az map[netip.Addr]string
}

func placementFrom(st *model.State) *placement {
	pl := &placement{az: map[netip.Addr]string{}}
	for _, e := range st.EIPs {
		if e == nil || e.Binding == nil {
			continue
		}
		az := ""
		if h := st.Hosts[e.Binding.Host]; h != nil {
			az = h.AZ
		}
		pl.az[e.Address.Unmap()] = az
	}
	return pl
}

// mayEnforce says whether a zone's hosts may still enforce k. Only a
// positive answer elsewhere forgets: an EIP's egress bound to a host in
// another AZ (a drift moves it, and the old host's agent removes it).
// Anything else (ingress, an unbound EIP, no model) may still be
// enforced: counting it is the safe side.
func (pl *placement) mayEnforce(zone string, k bwstore.RateKey) bool {
	if pl == nil || k.Dir != bwstore.Egress {
		return true
	}
	az, bound := pl.az[k.EIP.Unmap()]
	return !bound || az == "" || az == zone
}

// mayCarry says whether some host may enforce k: anything but an egress
// key whose EIP the model has bound to no host (no model: anything).
func (pl *placement) mayCarry(k bwstore.RateKey) bool {
	if pl == nil || k.Dir != bwstore.Egress {
		return true
	}
	_, bound := pl.az[k.EIP.Unmap()]
	return bound
}

// Activate forgets what this replica believes is in force; the estimates
// start over too, so a newly active replica judges from current rates.
func (r *RegionManager) Activate() {
	r.force = map[string]written{}
	r.hold = map[hostRateKey]holdRate{}
	r.first = true
	r.quiet = time.Time{}
	r.seen = map[string]zoneSeen{}
	r.lastSeen = map[hostRateKey]time.Time{}
	r.observed = map[zoneKey]uint64{}
	r.est, _ = bwalloc.NewEstimator[bwstore.RateKey](r.cfg.Estimator)
	r.zest, _ = bwalloc.NewEstimator[zoneKey](r.cfg.Estimator)
}

// Round runs one region round, in its phases: gather the zones' reports
// (and, newly active, what is in force), observe them into the
// estimates, compute the zones' next shares (allocate every package and
// direction, split each EIP's limit over its zones, budget the
// increases), and publish them, decreases first.
func (r *RegionManager) Round(ctx context.Context, active func() error) (RoundStats, error) {
	if active == nil {
		active = alwaysActive
	}
	var st RoundStats
	now := r.cfg.Now()
	r.mu.Lock()
	pkgs, probs, loaded, placed := r.pkgs, r.probs, r.loaded, r.placed
	r.mu.Unlock()
	if !loaded {
		// Without the packages every zone's shares would look removed:
		// write nothing until the desired state has been read.
		return st, errNoPackages
	}
	st.Problems = len(probs)
	g, err := r.gather(ctx, now, &st)
	if err != nil {
		return st, err
	}
	r.observe(g, now)
	next, err := r.compute(g, pkgs, placed, now, &st)
	if err != nil {
		return st, err
	}
	return r.publish(ctx, active, next, now, st)
}

// gathered is one round's fresh reports: per EIP and direction the total
// and each zone's part (one map entry per EIP: a round runs over every
// EIP of the region), the size of each zone's report (its next set's
// size at most) and the keys each zone carries.
type gathered struct {
	obs     map[bwstore.RateKey]*eipObs
	zones   map[string]int
	carries map[string][]bwstore.RateKey
	// kept: per EIP and direction, the fresh zones whose report lacks it
	// though they reported it within the grace (compute fills it).
	kept map[bwstore.RateKey][]string
}

// gather reads the zones' fresh reports; newly active, it reads back
// what is in force from the region tier; and it forgets the limits and
// holds that can no longer be in force below.
func (r *RegionManager) gather(ctx context.Context, now time.Time, st *RoundStats) (gathered, error) {
	snap, err := r.Store.ReadReports(ctx, RegionTier)
	if err != nil {
		return gathered{}, fmt.Errorf("region: reading the zones' reports: %w", err)
	}
	malformed(r.cfg.Log, RegionTier, snap, &r.bad, st)
	g := gathered{obs: make(map[bwstore.RateKey]*eipObs, len(snap.Reports)), zones: map[string]int{}, carries: map[string][]bwstore.RateKey{}}
	for _, rep := range snap.Reports {
		if !r.cfg.fresh(rep) {
			st.Stale++
			continue
		}
		g.zones[rep.Reporter]++
		k := bwstore.RateKey{EIP: rep.EIP, Dir: rep.Dir}
		g.carries[rep.Reporter] = append(g.carries[rep.Reporter], k)
		r.lastSeen[hostRateKey{k, rep.Reporter}] = now
		o := g.obs[k]
		if o == nil {
			o = &eipObs{}
			g.obs[k] = o
		}
		o.bytes = satAdd(o.bytes, rep.BytesPerSec)
		o.drops = satAdd(o.drops, rep.DropBytesPerSec)
		o.zones = append(o.zones, zoneObs{zone: rep.Reporter, zi: r.zoneIndex(rep.Reporter), bytes: rep.BytesPerSec, drops: rep.DropBytesPerSec})
	}
	st.Reporters = len(g.zones)
	// What is in force: read back from the region tier when newly active.
	if r.first {
		for z := range g.zones {
			hl, ok, err := r.Store.ReadLimits(ctx, RegionTier, z)
			if err != nil {
				return g, fmt.Errorf("region: reading the limits in force of zone %s: %w", z, err)
			}
			if ok {
				at := now.Add(-hl.Age)
				r.force[z] = written{limits: byKey(hl.Limits.Limits), at: at}
				if q := at.Add(r.cfg.Settle); q.After(r.quiet) {
					r.quiet = q
				}
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
	for k, h := range r.hold {
		if !now.Before(h.until) {
			delete(r.hold, k)
		}
	}
	return g, nil
}

// observe feeds the estimates, each with the limit in force while it
// was measured: per EIP (the allocation's demand) and per EIP and zone
// (the zone split's). A zone's share reaches its hosts a zone round
// after the region wrote it, so what the hosts enforced over the
// interval just reported is the share that was in force at the previous
// round (observed), not the one written since: judged against that, an
// EIP pinned at its old limit would look unpinned every other round and
// its probe (no drop counts) would fall back as often as it doubled.
func (r *RegionManager) observe(g gathered, now time.Time) {
	observed := make(map[zoneKey]uint64, len(r.observed))
	for k, o := range g.obs {
		var lim uint64
		for _, z := range o.zones {
			var zl uint64
			if w, ok := r.force[z.zone]; ok {
				zl = w.limits[k].RateBytes
			}
			zk := zoneKey{k, z.zi}
			observed[zk] = zl
			if p, ok := r.observed[zk]; ok {
				zl = p
			}
			lim += zl
			r.zest.Observe(zk, now, bwalloc.Sample{Rate: bitRate(z.bytes), Dropped: bitRate(z.drops), Limit: zl * 8})
		}
		r.est.Observe(k, now, bwalloc.Sample{Rate: bitRate(o.bytes), Dropped: bitRate(o.drops), Limit: bitRate(lim)})
	}
	r.observed = observed
	r.est.Prune(now)
	r.zest.Prune(now)
}

// compute returns each fresh zone's next shares: every package and
// direction allocated (allocate), with what silent zones may enforce
// reserved off the capacities.
func (r *RegionManager) compute(g gathered, pkgs []Package, placed *placement, now time.Time, st *RoundStats) (map[string]map[bwstore.RateKey]bwstore.Limit, error) {
	next := map[string]map[bwstore.RateKey]bwstore.Limit{}
	for z, n := range g.zones {
		next[z] = make(map[bwstore.RateKey]bwstore.Limit, n) // sized: no rehash while a round fills it
	}
	inForce := r.possiblyInForce()
	reserved := r.reserve(g.carries, pkgs, placed, inForce, now)
	// A key a fresh zone reported within the grace but not now: the
	// zone's host that carries it has no fresh report (its reports lost
	// or late), and keeps enforcing the last limits its zone manager
	// wrote. Removing the zone's share would put that host on its static
	// split once it reports again (its zone manager would have no share
	// to split), which the budget does not count; so the zone keeps a
	// share, split by its last demand estimate, until the grace ends
	// (or the model moves the EIP's egress elsewhere).
	g.kept = map[bwstore.RateKey][]string{}
	for hk, at := range r.lastSeen {
		switch {
		case now.Sub(at) >= r.cfg.Grace:
			delete(r.lastSeen, hk)
		case at.Equal(now):
		case g.zones[hk.Host] > 0 && placed.mayEnforce(hk.Host, hk.RateKey):
			g.kept[hk.RateKey] = append(g.kept[hk.RateKey], hk.Host)
		}
	}
	r.staticBase = map[hostRateKey]uint64{}
	var sc allocScratch
	for pi := range pkgs {
		p := &pkgs[pi]
		contended := false
		for _, dir := range []bwstore.Direction{bwstore.Egress, bwstore.Ingress} {
			c, err := r.allocate(p, dir, g.obs, g.kept, reserved, inForce, placed, now, next, &sc, st)
			if err != nil {
				return nil, err
			}
			contended = contended || c
		}
		if contended {
			st.Contended++
		}
	}
	return next, nil
}

// allocScratch is what allocate reuses from one package to the next.
type allocScratch struct {
	in     []bwalloc.EIP
	grants []bwalloc.Grant
	shares []bwalloc.HostShare
	hs     []bwalloc.HostShare
}

// allocate allocates one package in one direction and puts its zones'
// shares into next: the EIPs that are carried somewhere (reported now,
// within the estimator's grace, or with a limit of ours possibly in
// force) share the capacity less what silent zones may enforce; each
// EIP's limit is split over the zones reporting it by their demand; the
// increases are budgeted. It says whether the package was contended; a
// package the allocator refuses is skipped (counted in st.Problems).
func (r *RegionManager) allocate(p *Package, dir bwstore.Direction, obs map[bwstore.RateKey]*eipObs, kept map[bwstore.RateKey][]string, reserved, inForce map[bwstore.RateKey]uint64,
	placed *placement, now time.Time, next map[string]map[bwstore.RateKey]bwstore.Limit, sc *allocScratch, st *RoundStats) (bool, error) {
	// One EIP that is carried nowhere takes no capacity (a host that
	// starts carrying it reports it, and until its limit comes it holds
	// the EIP to its static split).
	//
	// What silent zones may enforce is a fixed reservation: the live EIPs
	// share the rest (an EIP also carried in a live zone gets its live
	// part there, its min and max less the reservation), and one carried
	// only in silent zones takes nothing more.
	carried := false
	capLive := p.Capacity
	sc.in = sc.in[:0]
	for _, e := range p.EIPs {
		k := bwstore.RateKey{EIP: e.Addr, Dir: dir}
		o := obs[k]
		if rb := min(bitRate(reserved[k]), p.Capacity); rb > 0 {
			capLive -= min(capLive, rb)
			if o == nil {
				continue
			}
			if e.Max != 0 {
				e.Max = max(e.Max, rb+8) - rb // at least 1 byte/s
			}
			e.Min -= min(e.Min, rb)
			if e.Max != 0 {
				e.Min = min(e.Min, e.Max)
			}
		}
		d := r.est.Demand(k, now, capOf(e.Max, p.Capacity))
		_, held := inForce[k]
		if o == nil && d.Expired && !held {
			continue
		}
		carried = carried || o != nil || len(kept[k]) > 0
		e.Demand = d.Rate
		sc.in = append(sc.in, e)
	}
	if !carried {
		return false, nil // nobody measures or enforces this direction
	}
	t0 := time.Now()
	res, err := r.alloc.Package(capLive, sc.in, bwalloc.Options{}, sc.grants)
	st.Alloc += time.Since(t0)
	if err != nil {
		st.Problems++
		r.cfg.Log.Warn("bandwidth region manager: package skipped", "package", p.Name, "dir", dir.String(), "err", err)
		return false, nil
	}
	sc.grants = res.Grants
	// The new zone shares, bytes/s.
	var want []zoneRate
	for _, g := range res.Grants {
		k := bwstore.RateKey{EIP: g.Addr, Dir: dir}
		o := obs[k]
		kz := kept[k]
		if o == nil && len(kz) == 0 {
			continue
		}
		sc.hs = sc.hs[:0]
		var zs []zoneObs
		if o != nil {
			zs = o.zones
		}
		n := len(zs) + len(kz)
		for _, z := range zs {
			var d uint64
			if n > 1 { // one zone takes it all, whatever its demand
				d = r.zest.Demand(zoneKey{k, z.zi}, now, 0).Rate
			}
			sc.hs = append(sc.hs, bwalloc.HostShare{Host: z.zone, Demand: d})
		}
		for _, z := range kz {
			var d uint64
			if n > 1 {
				d = r.zest.Demand(zoneKey{k, r.zoneIndex(z)}, now, 0).Rate
			}
			sc.hs = append(sc.hs, bwalloc.HostShare{Host: z, Demand: d})
		}
		sc.shares, err = bwalloc.SplitHosts(sc.shares, g.Limit/8, sc.hs, r.cfg.HostFloor)
		if err != nil {
			return false, fmt.Errorf("region: package %s: splitting %s/%s: %w", p.Name, g.Addr, dir, err)
		}
		st.EIPs++
		for _, s := range sc.shares {
			want = append(want, zoneRate{hostRateKey{k, s.Host}, s.Limit})
		}
	}
	st.Held += r.budget(p, dir, want, inForce, placed, now.Before(r.quiet))
	for _, w := range want {
		if w.rate == 0 {
			continue // an addition held back entirely: next round
		}
		next[w.Host][w.RateKey] = bwstore.Limit{EIP: w.EIP, Dir: w.Dir, RateBytes: w.rate, BurstBytes: p.burstBytes(w.rate)}
	}
	return res.Contended, nil
}

// publish writes each zone its next shares: decreases first, then the
// rest. The budget already makes any order safe; the order makes room
// before it is used. No increase is written after a decrease failed.
func (r *RegionManager) publish(ctx context.Context, active func() error, next map[string]map[bwstore.RateKey]bwstore.Limit, now time.Time, st RoundStats) (RoundStats, error) {
	alive := map[string]written{}
	for z, w := range r.force {
		if now.Sub(w.at) < r.cfg.Grace {
			alive[z] = w
		}
	}
	p1, p2 := phases(alive, next, now, r.cfg.Grace)
	st.Decreases = len(p1)
	r.write(ctx, active, p1, now, &st)
	if err := active(); err != nil {
		return st, err
	}
	if st.PushErrors > 0 {
		st.Held += len(p2)
		return st, fmt.Errorf("region: %d decrease writes failed; increases held", st.PushErrors)
	}
	r.write(ctx, active, p2, now, &st)
	if st.PushErrors > 0 {
		return st, fmt.Errorf("region: %d limit writes failed", st.PushErrors)
	}
	return st, active()
}

// write writes one phase's zone limits and remembers those written.
func (r *RegionManager) write(ctx context.Context, active func() error, ph map[string]map[bwstore.RateKey]bwstore.Limit, now time.Time, st *RoundStats) {
	res := writeAll(ctx, r.Store, r.gens, active, RegionTier, r.cfg.Grace, ph, now, r.cfg.Concurrency)
	for z, err := range res {
		if err != nil {
			st.PushErrors++
			r.cfg.Log.Warn("bandwidth region manager: zone limits not written", "zone", z, "err", err)
			continue
		}
		r.remember(z, ph[z], now)
		st.Writes++
	}
}

// eipObs is one EIP and direction's reports in a round.
type eipObs struct {
	bytes, drops uint64
	zones        []zoneObs
}

type zoneObs struct {
	zone         string
	zi           uint16
	bytes, drops uint64
}

// zoneKey is an EIP and direction in one zone, the zone interned.
type zoneKey struct {
	bwstore.RateKey
	zone uint16
}

// zoneIndex interns a zone name (a region has at most
// bwstore.MaxReporters zones reporting, far below 2^16; the table is
// rebuilt if it ever fills).
func (r *RegionManager) zoneIndex(z string) uint16 {
	if i, ok := r.zidx[z]; ok {
		return i
	}
	if r.zidx == nil || len(r.zidx) >= 1<<16-1 {
		r.zidx = map[string]uint16{}
		r.zest, _ = bwalloc.NewEstimator[zoneKey](r.cfg.Estimator)
	}
	i := uint16(len(r.zidx))
	r.zidx[z] = i
	return i
}

var errNoPackages = errors.New("region: the bandwidth packages are not loaded yet")

type zoneRate struct {
	hostRateKey
	rate uint64 // bytes/s
}

// remember makes ls zone's limits in force from `at`. A limit it lowers
// (or removes, or the static split it replaces) keeps counting at its old
// value for Settle more: the zone manager and the hosts may not have
// applied the change yet.
func (r *RegionManager) remember(zone string, ls map[bwstore.RateKey]bwstore.Limit, at time.Time) {
	lower := func(hk hostRateKey, old, now uint64) {
		if old <= now {
			return
		}
		h := r.hold[hk]
		if !at.Before(h.until) {
			h.rate = 0
		}
		r.hold[hk] = holdRate{rate: max(h.rate, old), until: at.Add(r.cfg.Settle)}
	}
	for k, l := range r.force[zone].limits {
		lower(hostRateKey{k, zone}, l.RateBytes, ls[k].RateBytes)
	}
	for hk, b := range r.staticBase {
		if hk.Host == zone {
			lower(hk, b, ls[hk.RateKey].RateBytes)
		}
	}
	r.force[zone] = written{limits: ls, at: at}
}

// prev is the most that may be in force for key in zone: the current
// limit, or one lowered within Settle.
func (r *RegionManager) prev(hk hostRateKey) (uint64, bool) {
	var p uint64
	ok := false
	if w, in := r.force[hk.Host]; in {
		if l, has := w.limits[hk.RateKey]; has {
			p, ok = l.RateBytes, true
		}
	}
	if h, in := r.hold[hk]; in {
		p, ok = max(p, h.rate), true
	}
	return p, ok
}

// reserve updates what each zone carried (carries: this round's fresh
// reports by zone) and returns, per EIP and direction, what the silent
// zones may enforce: each key of a silent zone's last fresh report whose
// EIP is still in a package counts at max(its last share, possibly still
// in force, and the EIP's static split): the zone's hosts keep their last
// limits for their grace, then enforce the static split (divided over the
// carriers, so a zone's hosts together at most the EIP's static share).
// The amounts are added to inForce, so the budget of increases counts
// them too. A silent zone is forgotten SilentGraces × grace after its last
// report. A returning zone's fresh report replaces its memory; what it
// was counted at stays possibly in force for Settle more (a hold), as a
// lowered share does: its hosts are on their static split until its
// shares reach them, even if the region still holds its last (lower)
// shares as in force.
func (r *RegionManager) reserve(carries map[string][]bwstore.RateKey, pkgs []Package, placed *placement, inForce map[bwstore.RateKey]uint64, now time.Time) map[bwstore.RateKey]uint64 {
	var static map[netip.Addr]uint64 // by EIP, bytes/s; only when a zone is or was silent
	staticOf := func(a netip.Addr) (uint64, bool) {
		if static == nil {
			static = map[netip.Addr]uint64{}
			for i := range pkgs {
				pkgs[i].addStatic(static)
			}
		}
		v, ok := static[a]
		return v, ok
	}
	for z, ks := range carries {
		if s, ok := r.seen[z]; ok && s.silent {
			r.cfg.Log.Info("bandwidth region manager: zone reports again", "zone", z, "silent_for", now.Sub(s.at))
			for _, k := range s.keys {
				st, ok := staticOf(k.EIP)
				if !ok {
					continue
				}
				hk := hostRateKey{k, z}
				p, _ := r.prev(hk)
				if st > p {
					r.hold[hk] = holdRate{rate: st, until: now.Add(r.cfg.Settle)}
					inForce[k] = satAdd(inForce[k], st-p)
				}
			}
		}
		r.seen[z] = zoneSeen{keys: ks, at: now}
	}
	var out map[bwstore.RateKey]uint64
	for z, s := range r.seen {
		if _, fresh := carries[z]; fresh {
			continue
		}
		if now.Sub(s.at) >= SilentGraces*r.cfg.Grace {
			r.cfg.Log.Warn("bandwidth region manager: zone silent too long; its static split is no longer counted", "zone", z, "silent_for", now.Sub(s.at))
			delete(r.seen, z)
			continue
		}
		if !s.silent {
			r.cfg.Log.Warn("bandwidth region manager: zone silent; counting its EIPs at their static split", "zone", z, "eips", len(s.keys))
			s.silent = true
		}
		if out == nil {
			out = map[bwstore.RateKey]uint64{}
		}
		kept := s.keys[:0]
		for _, k := range s.keys {
			st, ok := staticOf(k.EIP)
			if !ok || !placed.mayEnforce(z, k) {
				continue // left its package, deleted or moved away: forgotten
			}
			kept = append(kept, k)
			p, _ := r.prev(hostRateKey{k, z}) // what possiblyInForce counted
			v := max(p, st)
			out[k] = satAdd(out[k], v)
			inForce[k] = satAdd(inForce[k], v-p)
		}
		s.keys = kept
		if len(kept) == 0 {
			delete(r.seen, z)
			continue
		}
		r.seen[z] = s
	}
	return out
}

// possiblyInForce sums, per EIP and direction, the most that may be in
// force over the zones (prev of each zone key); computed once a round.
func (r *RegionManager) possiblyInForce() map[bwstore.RateKey]uint64 {
	n := 0
	for _, w := range r.force {
		n = max(n, len(w.limits))
	}
	out := make(map[bwstore.RateKey]uint64, n)
	for _, w := range r.force {
		for k, l := range w.limits {
			out[k] = satAdd(out[k], l.RateBytes)
		}
	}
	for hk, h := range r.hold {
		cur := r.force[hk.Host].limits[hk.RateKey].RateBytes
		if h.rate > cur {
			out[hk.RateKey] = satAdd(out[hk.RateKey], h.rate-cur)
		} else if _, ok := out[hk.RateKey]; !ok {
			out[hk.RateKey] = 0
		}
	}
	return out
}

// budget lowers the increases of one package and direction (want, in
// place) so that the package stays within its capacity whatever is in
// force below while the writes travel: Σ over its keys of
// max(possibly in force, written) ≤ capacity. inForce is
// possiblyInForce's. An EIP of the package that no zone reports and that
// has nothing of ours in force may still be carried by a host whose
// reports are lost or late (or that has just started carrying it): that
// host enforces its static split, so it counts at that unless the model
// says the EIP is not bound anywhere (placed). quiet holds every
// increase (room 0: see RegionManager.quiet). It returns how many
// increases it held back (in part or whole).
func (r *RegionManager) budget(p *Package, dir bwstore.Direction, want []zoneRate, inForce map[bwstore.RateKey]uint64, placed *placement, quiet bool) int {
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
		if static == nil {
			static = map[netip.Addr]uint64{}
			p.addStatic(static)
		}
		if _, ok := inForce[w.RateKey]; ok {
			// A zone new to an EIP other zones have limits of ours for
			// (a guest that moved): until its share comes its hosts
			// enforce the EIP's static split, not 0.
			base[i] = static[w.EIP]
		} else {
			// Nothing of ours anywhere: the EIP's static split,
			// attributed to its zones as the new split is.
			hi, lo := bits.Mul64(static[w.EIP], w.rate)
			if t := wantTotal[w.EIP]; t > 0 && hi < t {
				base[i], _ = bits.Div64(hi, lo, t)
			}
		}
		total = satAdd(total, base[i])
		r.staticBase[w.hostRateKey] = base[i]
	}
	for _, e := range p.EIPs {
		k := bwstore.RateKey{EIP: e.Addr, Dir: dir}
		if _, in := inForce[k]; in {
			continue
		}
		if _, reported := wantTotal[e.Addr]; reported || !placed.mayCarry(k) {
			continue
		}
		if static == nil {
			static = map[netip.Addr]uint64{}
			p.addStatic(static)
		}
		total = satAdd(total, static[e.Addr])
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
	if capBytes > total && !quiet {
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

func capOf(maxBps, capacity uint64) uint64 {
	if maxBps == 0 {
		return capacity
	}
	return min(maxBps, capacity)
}

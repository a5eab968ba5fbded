package bandwidth

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwstore"
)

// ZoneManager is the zone (AZ) manager of shared bandwidth (`azgate
// bwmgr --scope az`). Every round it
//
//  1. reads its zone's reports, drops those older than 2 intervals;
//  2. sums them per EIP and direction and writes the sums to the region
//     tier as reporter Zone (alive 3 intervals);
//  3. reads the zone's share of each EIP from the region tier (host =
//     Zone) and splits it over the zone's reporters that carry the EIP in
//     proportion to their demand estimates (bwalloc.SplitHosts; each
//     reporter's demand through a bwalloc.Estimator keyed by EIP,
//     direction and host);
//  4. writes each host its limits: first the hosts whose limits go down
//     (with increases of the same host held at their old value), and once
//     every one of those writes succeeded, the increases
//     (bwalloc.PlanPushes). If a decrease fails the increases wait for
//     the next round.
//
// A host with no fresh report gets no new limits: what it had expires
// into its static split. With no limits from the region (no region
// manager for the grace period) nothing is written at all. Not safe for
// concurrent use; one round at a time.
type ZoneManager struct {
	Zone   string
	Store  bwstore.Store // the zone's store
	Region bwstore.Store // the region tier (AZ RegionTier)

	cfg   Config
	gens  *Generations
	est   *bwalloc.Estimator[hostRateKey]
	force map[string]written // by host: what we last wrote (or read back)
	first bool
}

// zoneName is bwstore's rule for AZ and reporter names.
var zoneName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

type hostRateKey struct {
	bwstore.RateKey
	Host string
}

// written is a host's (or a zone's) limits as last written or read back.
type written struct {
	limits map[bwstore.RateKey]bwstore.Limit
	at     time.Time
}

// NewZoneManager returns a zone manager; cfg's zero fields default.
func NewZoneManager(zone string, zoneStore, region bwstore.Store, cfg Config) (*ZoneManager, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if !zoneName.MatchString(zone) || zone == RegionTier {
		return nil, fmt.Errorf("bandwidth zone manager: zone %q: want 1-63 of [A-Za-z0-9._-], starting alphanumeric, other than %q", zone, RegionTier)
	}
	z := &ZoneManager{Zone: zone, Store: zoneStore, Region: region, cfg: cfg, gens: NewGenerations(cfg.Now)}
	z.Activate()
	return z, nil
}

// Activate forgets what this replica believes is in force (a newly
// active manager reads it back from the store in its first round) and
// its estimates (they start over from the current rates).
func (z *ZoneManager) Activate() {
	z.force = map[string]written{}
	z.first = true
	z.est, _ = bwalloc.NewEstimator[hostRateKey](z.cfg.Estimator)
}

// Round runs one zone round.
func (z *ZoneManager) Round(ctx context.Context, active func() error) (RoundStats, error) {
	if active == nil {
		active = alwaysActive
	}
	var st RoundStats
	now := z.cfg.Now()
	snap, err := z.Store.ReadReports(ctx, z.Zone)
	if err != nil {
		return st, fmt.Errorf("zone %s: reading reports: %w", z.Zone, err)
	}
	// 1. Fresh reports only, per host and key.
	type sum struct{ bytes, packets, drops uint64 }
	sums := map[bwstore.RateKey]*sum{}
	carriers := map[bwstore.RateKey][]string{}
	hosts := map[string]bool{}
	rateOf := map[hostRateKey]bwstore.Rate{}
	for _, r := range snap.Reports {
		if !z.cfg.fresh(r) {
			st.Stale++
			continue
		}
		hosts[r.Reporter] = true
		k := bwstore.RateKey{EIP: r.EIP, Dir: r.Dir}
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k] = s
		}
		s.bytes = satAdd(s.bytes, r.BytesPerSec)
		s.packets = satAdd(s.packets, r.PacketsPerSec)
		s.drops = satAdd(s.drops, r.DropBytesPerSec)
		carriers[k] = append(carriers[k], r.Reporter)
		rateOf[hostRateKey{k, r.Reporter}] = r.Rate
	}
	st.Reporters = len(hosts)
	// 2. Up to the region tier.
	up := make([]bwstore.Rate, 0, len(sums))
	for k, s := range sums {
		up = append(up, bwstore.Rate{EIP: k.EIP, Dir: k.Dir, BytesPerSec: s.bytes, PacketsPerSec: s.packets, DropBytesPerSec: s.drops})
	}
	slices.SortFunc(up, func(a, b bwstore.Rate) int {
		if c := a.EIP.Compare(b.EIP); c != 0 {
			return c
		}
		return int(a.Dir) - int(b.Dir)
	})
	if err := active(); err != nil {
		return st, err
	}
	if err := z.Region.WriteReports(ctx, RegionTier, z.Zone, 3*z.cfg.Interval, up); err != nil {
		return st, fmt.Errorf("zone %s: reporting to the region: %w", z.Zone, err)
	}
	// What is in force: read back on the first round as active, and for
	// any host we have no fresh record of.
	for h := range hosts {
		if w, ok := z.force[h]; ok && now.Sub(w.at) < z.cfg.Grace {
			continue
		}
		delete(z.force, h)
		if !z.first {
			continue // we wrote nothing to it within the grace: nothing of ours is in force
		}
		hl, ok, err := z.Store.ReadLimits(ctx, z.Zone, h)
		if err != nil {
			return st, fmt.Errorf("zone %s: reading the limits in force of %s: %w", z.Zone, h, err)
		}
		if ok {
			z.force[h] = written{limits: byKey(hl.Limits.Limits), at: now.Add(-hl.Age)}
		}
	}
	z.first = false
	for h, w := range z.force {
		if now.Sub(w.at) >= z.cfg.Grace {
			delete(z.force, h) // expired at the host
		}
	}
	// Per-host demand estimates, with the limit each host enforced.
	for hk, r := range rateOf {
		var lim uint64
		if w, ok := z.force[hk.Host]; ok {
			lim = w.limits[hk.RateKey].RateBytes * 8
		}
		z.est.Observe(hk, now, bwalloc.Sample{Rate: r.BytesPerSec * 8, Dropped: r.DropBytesPerSec * 8, Limit: lim})
	}
	z.est.Prune(now)
	// 3. The zone's shares from the region.
	zl, ok, err := z.Region.ReadLimits(ctx, RegionTier, z.Zone)
	if err != nil {
		return st, fmt.Errorf("zone %s: reading the zone's limits from the region: %w", z.Zone, err)
	}
	if !ok {
		// No region manager for the grace period: write nothing, the
		// hosts' limits expire into their static split.
		return st, nil
	}
	next := map[string]map[bwstore.RateKey]bwstore.Limit{}
	var shares []bwalloc.HostShare
	for _, l := range zl.Limits.Limits {
		k := bwstore.RateKey{EIP: l.EIP, Dir: l.Dir}
		cs := carriers[k]
		if len(cs) == 0 {
			continue // carried by no host of the zone now
		}
		in := make([]bwalloc.HostShare, len(cs))
		for i, h := range cs {
			in[i] = bwalloc.HostShare{Host: h, Demand: z.est.Demand(hostRateKey{k, h}, now, 0).Rate}
		}
		shares, err = bwalloc.SplitHosts(shares, l.RateBytes, in, z.cfg.HostFloor)
		if err != nil {
			return st, fmt.Errorf("zone %s: splitting %s/%s: %w", z.Zone, l.EIP, l.Dir, err)
		}
		st.EIPs++
		for _, s := range shares {
			m := next[s.Host]
			if m == nil {
				m = map[bwstore.RateKey]bwstore.Limit{}
				next[s.Host] = m
			}
			// A rate of 0 would read as "no limit" at the host: at
			// least 1 byte/s (a few bytes/s over the share at most).
			rate := max(s.Limit, 1)
			m[k] = bwstore.Limit{EIP: l.EIP, Dir: l.Dir, RateBytes: rate, BurstBytes: scaleBurst(l.BurstBytes, rate, l.RateBytes)}
		}
	}
	// Every fresh reporter gets a set (possibly empty: the manager speaks,
	// none of its EIPs has a share in this zone now).
	for h := range hosts {
		if next[h] == nil {
			next[h] = map[bwstore.RateKey]bwstore.Limit{}
		}
	}
	return z.push(ctx, active, now, next, st)
}

// push writes the new limits, decreases first.
func (z *ZoneManager) push(ctx context.Context, active func() error, now time.Time, next map[string]map[bwstore.RateKey]bwstore.Limit, st RoundStats) (RoundStats, error) {
	p1, p2 := phases(z.force, next, now, z.cfg.Grace)
	res := writeAll(ctx, z.Store, z.gens, active, z.Zone, z.cfg.Grace, p1, now, z.cfg.Concurrency)
	st.Decreases = len(p1)
	for h, err := range res {
		if err != nil {
			st.PushErrors++
			z.cfg.Log.Warn("bandwidth zone manager: limits not written", "zone", z.Zone, "host", h, "err", err)
			continue
		}
		z.force[h] = written{limits: p1[h], at: now}
		st.Writes++
	}
	if err := active(); err != nil {
		return st, err
	}
	if st.PushErrors > 0 {
		// A decrease not in force: hold every increase to the next round
		// (the zone does not know the packages, so all of them).
		st.Held = len(p2)
		return st, fmt.Errorf("zone %s: %d decrease writes failed; increases held", z.Zone, st.PushErrors)
	}
	res = writeAll(ctx, z.Store, z.gens, active, z.Zone, z.cfg.Grace, p2, now, z.cfg.Concurrency)
	for h, err := range res {
		if err != nil {
			st.PushErrors++
			z.cfg.Log.Warn("bandwidth zone manager: limits not written", "zone", z.Zone, "host", h, "err", err)
			continue
		}
		z.force[h] = written{limits: p2[h], at: now}
		st.Writes++
	}
	if st.PushErrors > 0 {
		return st, fmt.Errorf("zone %s: %d limit writes failed", z.Zone, st.PushErrors)
	}
	return st, active()
}

// phases splits the writes from the limits in force (old, per host) to
// next into the decrease phase (hosts with a lower or removed limit: the
// new set with its increases held at their old value and its additions
// left out) and the increase phase (the complete new sets of hosts with
// an increase, an addition, a burst that changed alone, or limits older
// than half the grace, which are written again so they do not expire).
// Hosts not in next are left alone (their limits expire). The hosts with
// a decrease and those with an increase are those of
// bwalloc.PlanPushes(old, next) (TestPhasesMatchPlan), found here in one
// pass over each host's set instead of through two maps of every
// (host, EIP) pair: a region has hundreds of thousands.
func phases(old map[string]written, next map[string]map[bwstore.RateKey]bwstore.Limit, now time.Time, grace time.Duration) (p1, p2 map[string]map[bwstore.RateKey]bwstore.Limit) {
	p1, p2 = map[string]map[bwstore.RateKey]bwstore.Limit{}, map[string]map[bwstore.RateKey]bwstore.Limit{}
	for h, set := range next {
		w, had := old[h]
		down, up := false, false
		for k, o := range w.limits {
			if n, ok := set[k]; !ok || n.RateBytes < o.RateBytes {
				down = true
				break
			}
		}
		for k, n := range set {
			if o, ok := w.limits[k]; !ok || n.RateBytes > o.RateBytes {
				up = true
				break
			}
		}
		if down {
			// The increases held at their old value, additions left out.
			d := make(map[bwstore.RateKey]bwstore.Limit, len(set))
			for k, n := range set {
				if o, ok := w.limits[k]; ok {
					if o.RateBytes < n.RateBytes {
						n = o
					}
					d[k] = n
				}
			}
			p1[h] = d
			if !sameLimits(d, set) {
				p2[h] = set
			}
			continue
		}
		switch {
		case up:
			p2[h] = set
		case !had:
			// Nothing of ours in force and nothing added: leave it alone.
		case !sameLimits(w.limits, set):
			p2[h] = set // a burst that changed alone
		case now.Sub(w.at) >= grace/2:
			p2[h] = set // written again before it expires
		}
	}
	return p1, p2
}

func sameLimits(a, b map[bwstore.RateKey]bwstore.Limit) bool {
	return maps.Equal(a, b)
}

// writeAll writes every host's set with at most conc writes in flight and
// returns each host's outcome.
func writeAll(ctx context.Context, s bwstore.Store, gens *Generations, active func() error, az string, ttl time.Duration, sets map[string]map[bwstore.RateKey]bwstore.Limit, now time.Time, conc int) map[string]error {
	out := make(map[string]error, len(sets))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for _, h := range slices.Sorted(maps.Keys(sets)) {
		ls := limitList(sets[h])
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := writeLimits(ctx, s, gens, active, az, h, ttl, ls, now)
			mu.Lock()
			out[h] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func limitList(m map[bwstore.RateKey]bwstore.Limit) []bwstore.Limit {
	ls := slices.Collect(maps.Values(m))
	slices.SortFunc(ls, func(a, b bwstore.Limit) int {
		if c := a.EIP.Compare(b.EIP); c != 0 {
			return c
		}
		return int(a.Dir) - int(b.Dir)
	})
	return ls
}

func byKey(ls []bwstore.Limit) map[bwstore.RateKey]bwstore.Limit {
	m := make(map[bwstore.RateKey]bwstore.Limit, len(ls))
	for _, l := range ls {
		m[bwstore.RateKey{EIP: l.EIP.Unmap(), Dir: l.Dir}] = l
	}
	return m
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

package bandwidth

import (
	"context"
	"fmt"
	"maps"
	"math/bits"
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
//     Zone) and splits it, less the limits in force at hosts with no
//     fresh report (they get no new ones), over the zone's reporters that carry the EIP in
//     proportion to their demand estimates (bwalloc.SplitHosts; each
//     reporter's demand through a bwalloc.Estimator keyed by EIP,
//     direction and host);
//  4. budgets each EIP's increases so that the hosts' limits, a lowered
//     one counted at its old value until the host has polled, never sum
//     above the share (budget);
//  5. writes each host its limits: first the hosts whose limits go down
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
	force map[string]written       // by host: what we last wrote (or read back)
	hold  map[hostRateKey]holdRate // lowered host limits that may still be in force
	first bool
	bad   int // malformed reports in the last round (logged on change)
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

func checkZone(zone string) error {
	if !zoneName.MatchString(zone) || zone == RegionTier {
		return fmt.Errorf("bandwidth zone manager: zone %q: want 1-63 of [A-Za-z0-9._-], starting alphanumeric, other than %q", zone, RegionTier)
	}
	return nil
}

// CheckManager checks a manager's settings as NewZoneManager (zone not
// empty) or NewRegionManager (zone empty) does, without a store (azgate
// bwmgr --check-config).
func CheckManager(zone string, cfg Config) error {
	if _, err := cfg.check(); err != nil {
		return err
	}
	if zone != "" {
		return checkZone(zone)
	}
	return nil
}

// NewZoneManager returns a zone manager; cfg's zero fields default.
func NewZoneManager(zone string, zoneStore, region bwstore.Store, cfg Config) (*ZoneManager, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if err := checkZone(zone); err != nil {
		return nil, err
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
	z.hold = map[hostRateKey]holdRate{}
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
	malformed(z.cfg.Log, z.Zone, snap, &z.bad, &st)
	// 1. Fresh reports only, per host and key.
	type sum struct{ bytes, packets, drops uint64 }
	sums := map[bwstore.RateKey]*sum{}
	carriers := map[bwstore.RateKey][]string{}
	hosts := map[string]int{} // fresh rows of each host: its next set's size at most
	rateOf := map[hostRateKey]bwstore.Rate{}
	for _, r := range snap.Reports {
		if !z.cfg.fresh(r) {
			st.Stale++
			continue
		}
		hosts[r.Reporter]++
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
		z.est.Observe(hk, now, bwalloc.Sample{Rate: bitRate(r.BytesPerSec), Dropped: bitRate(r.DropBytesPerSec), Limit: lim})
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
	// A host with no fresh report gets no new limits but keeps enforcing
	// the last ones we wrote (until they expire): its carriers share what
	// those leave of the zone's share.
	stale := map[bwstore.RateKey]uint64{}
	for h, w := range z.force {
		if _, fresh := hosts[h]; fresh {
			continue
		}
		for k, l := range w.limits {
			stale[k] = satAdd(stale[k], max(l.RateBytes, z.hold[hostRateKey{k, h}].rate))
		}
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
		shares, err = bwalloc.SplitHosts(shares, l.RateBytes-min(stale[k], l.RateBytes), in, z.cfg.HostFloor)
		if err != nil {
			return st, fmt.Errorf("zone %s: splitting %s/%s: %w", z.Zone, l.EIP, l.Dir, err)
		}
		st.EIPs++
		for _, s := range shares {
			m := next[s.Host]
			if m == nil {
				m = make(map[bwstore.RateKey]bwstore.Limit, hosts[s.Host]) // sized: no rehash while it fills
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
	st.Held += z.budget(zl.Limits.Limits, carriers, next, now)
	return z.push(ctx, active, now, next, st)
}

// hostSettle is how long a host limit the zone manager lowered may still
// be in force at the host: its poll (an interval) and margin, Settle
// less the zone round the region's Settle also counts.
func (z *ZoneManager) hostSettle() time.Duration { return max(z.cfg.Settle-z.cfg.Interval, 0) }

// budget lowers, in next, the increases of each EIP's split so that the
// hosts' limits never sum above the zone's share while the writes
// travel: the hosts poll at their own times, so a host may apply its
// increase before another applies the decrease that made room for it
// (demand moving between the edges that carry an EIP, every round). A
// limit lowered within hostSettle counts at its old value; increases get
// what the share leaves above those, in proportion to their size. A host
// with no limit of ours for the EIP counts at 0: the zone does not know
// the packages, so not the static split it is on (the region counts
// that). A host with no fresh report (its reports lost or late) gets no
// new limits but keeps enforcing the last ones we wrote until they
// expire: it counts at those, as a carrier does. It returns how many
// increases it held back (in part or whole).
func (z *ZoneManager) budget(shares []bwstore.Limit, carriers map[bwstore.RateKey][]string, next map[string]map[bwstore.RateKey]bwstore.Limit, now time.Time) int {
	for hk, h := range z.hold {
		if !now.Before(h.until) {
			delete(z.hold, hk)
		}
	}
	// The hosts that may hold a limit of ours for an EIP: the carriers,
	// those with a lowered one still held, and those with no fresh report
	// that still have one in force.
	held := map[bwstore.RateKey][]string{}
	for hk := range z.hold {
		held[hk.RateKey] = append(held[hk.RateKey], hk.Host)
	}
	for h, w := range z.force {
		if _, fresh := next[h]; fresh {
			continue // every fresh reporter has a set in next
		}
		for k := range w.limits {
			if _, ok := z.hold[hostRateKey{k, h}]; !ok {
				held[k] = append(held[k], h)
			}
		}
	}
	inForce := func(hk hostRateKey) uint64 {
		var v uint64
		if w, ok := z.force[hk.Host]; ok {
			v = w.limits[hk.RateKey].RateBytes
		}
		return max(v, z.hold[hk].rate)
	}
	n := 0
	for _, l := range shares {
		k := bwstore.RateKey{EIP: l.EIP, Dir: l.Dir}
		cs := carriers[k]
		if len(cs) == 0 {
			continue
		}
		var total, incs uint64
		for _, h := range cs {
			b := inForce(hostRateKey{k, h})
			total = satAdd(total, b)
			if r := next[h][k].RateBytes; r > b {
				incs += r - b
			}
		}
		for _, h := range held[k] {
			if !slices.Contains(cs, h) {
				total = satAdd(total, inForce(hostRateKey{k, h}))
			}
		}
		var room uint64
		if l.RateBytes > total {
			room = l.RateBytes - total
		}
		if incs == 0 || room >= incs {
			continue
		}
		for _, h := range cs {
			nl := next[h][k]
			b := inForce(hostRateKey{k, h})
			if nl.RateBytes <= b {
				continue
			}
			hi, lo := bits.Mul64(room, nl.RateBytes-b)
			part, _ := bits.Div64(hi, lo, incs) // room < incs
			rate := max(b+part, 1)
			nl.BurstBytes = scaleBurst(nl.BurstBytes, rate, nl.RateBytes)
			nl.RateBytes = rate
			next[h][k] = nl
			n++
		}
	}
	return n
}

// remember makes ls host's limits in force from now; a limit it lowers
// or removes keeps counting at its old value for hostSettle.
func (z *ZoneManager) remember(h string, ls map[bwstore.RateKey]bwstore.Limit, now time.Time) {
	if d := z.hostSettle(); d > 0 {
		for k, o := range z.force[h].limits {
			if n := ls[k].RateBytes; n < o.RateBytes {
				hk := hostRateKey{k, h}
				z.hold[hk] = holdRate{rate: max(o.RateBytes, z.hold[hk].rate), until: now.Add(d)}
			}
		}
	}
	z.force[h] = written{limits: ls, at: now}
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
		z.remember(h, p1[h], now)
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
		z.remember(h, p2[h], now)
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

// bitRate is bytes/s as bits/s, saturating: a report's rates are
// whatever a host wrote, and a wrapped product would read as an idle EIP.
func bitRate(bytes uint64) uint64 {
	if bytes > ^uint64(0)/8 {
		return ^uint64(0)
	}
	return bytes * 8
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

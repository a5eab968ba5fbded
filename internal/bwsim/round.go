package bwsim

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
)

// manager is the managers' side of one round, as BW-CONTRACT.md lays it
// out, in one process: the zone managers sum their hosts' reports per
// EIP and estimate each host's demand; the region manager estimates each
// EIP's demand (for the allocation) and each zone's (for the zone
// split), allocates every package, splits each EIP's limit over its
// zones, and each zone's share over its hosts; the push plan is made
// against the limits in force. Everything it computes is bwalloc's.
type manager struct {
	s    *sim
	est  *bwalloc.Estimator[netip.Addr]      // region: per EIP
	zest *bwalloc.Estimator[bwalloc.HostKey] // region: per EIP and zone
	hest *bwalloc.Estimator[bwalloc.HostKey] // zone managers: per EIP and host

	alloc      bwalloc.Allocator
	in         []bwalloc.EIP
	grants     []bwalloc.Grant
	zin, zout  []bwalloc.HostShare
	hin, hout  []bwalloc.HostShare
	table, old []bwalloc.Limit

	sample []bwalloc.Sample // per slot, this round
	fresh  []int            // per slot: the round tick its sample is from
	zsums  []zoneSum        // per EIP and zone, this round
	zlim   []uint64         // per EIP and zone: the zone's share
	all    []bwalloc.Grant  // every package's grants, in package order
}

func newManager(s *sim) (*manager, error) {
	m := &manager{s: s, sample: make([]bwalloc.Sample, len(s.slots)), fresh: make([]int, len(s.slots))}
	var err error
	if m.est, err = bwalloc.NewEstimator[netip.Addr](s.cfg.Estimator); err != nil {
		return nil, err
	}
	m.zest, _ = bwalloc.NewEstimator[bwalloc.HostKey](s.cfg.Estimator)
	m.hest, _ = bwalloc.NewEstimator[bwalloc.HostKey](s.cfg.Estimator)
	for i := range m.fresh {
		m.fresh[i] = -1
	}
	return m, nil
}

// Timing is the wall-clock time of one round's parts: what the zone
// managers do (read and sum the reports, estimate per host, split each
// zone's share over its hosts, sort the table, plan the pushes), what the
// region manager does besides allocating (estimate per EIP and per zone,
// split each EIP's limit over its zones), and the allocation itself
// (Allocator.Package for every package).
type Timing struct {
	Zones, Region, Alloc time.Duration
}

// Total is the whole round in one process.
func (t Timing) Total() time.Duration { return t.Zones + t.Region + t.Alloc }

// round runs one round at now (simulated time; tick is its index) on the
// reports in the store that are younger than two intervals, and returns
// the push plan.
func (m *manager) round(now time.Time, tick int) (bwalloc.Plan, Timing, error) {
	s := m.s
	var tm Timing
	t0 := time.Now()
	// The zone managers read their AZ's live reports, estimate each
	// host's demand and sum the reports per EIP (zone -> region).
	for _, r := range s.store {
		if r == nil || tick-r.arrives >= 2*s.tpi {
			continue
		}
		for _, rw := range r.rows {
			m.sample[rw.slot] = bwalloc.Sample{Rate: rw.rate, Dropped: rw.dropped, Limit: rw.limit}
			m.fresh[rw.slot] = tick
		}
	}
	m.zsums = m.zsums[:0]
	for ei := range s.eips {
		e := &s.eips[ei]
		for _, z := range e.zones {
			var zs bwalloc.Sample
			has := false
			for _, si := range z.slots {
				if m.fresh[si] != tick {
					continue
				}
				x := m.sample[si]
				m.hest.Observe(s.slots[si].key, now, x)
				zs.Rate += x.Rate
				zs.Dropped += x.Dropped
				zs.Limit += x.Limit
				has = true
			}
			m.zsums = append(m.zsums, zoneSum{zs, has})
		}
	}
	t1 := time.Now()
	tm.Zones += t1.Sub(t0)
	// The region: estimates per EIP (for the allocation) and per zone
	// (for the zone split).
	k := 0
	for ei := range s.eips {
		e := &s.eips[ei]
		var sum bwalloc.Sample
		any := false
		for _, z := range e.zones {
			zs := m.zsums[k]
			k++
			if !zs.has {
				continue
			}
			m.zest.Observe(bwalloc.HostKey{Addr: e.addr, Host: s.zones[z.zone]}, now, zs.Sample)
			sum.Rate += zs.Rate
			sum.Dropped += zs.Dropped
			sum.Limit += zs.Limit
			any = true
		}
		if any {
			m.est.Observe(e.addr, now, sum)
		}
	}
	m.in = m.in[:0]
	for p := range s.pkgs {
		for _, ei := range s.pkgs[p].eips {
			e := &s.eips[ei]
			x := e.terms
			x.Demand = m.est.Demand(e.addr, now, e.ceiling).Rate
			m.in = append(m.in, x)
		}
	}
	t2 := time.Now()
	tm.Region += t2.Sub(t1)
	// Allocate every package.
	m.all = m.all[:0]
	off := 0
	for p := range s.pkgs {
		pk := &s.pkgs[p]
		res, err := m.alloc.Package(pk.capacity, m.in[off:off+len(pk.eips)], bwalloc.Options{}, m.grants)
		if err != nil {
			return bwalloc.Plan{}, tm, err
		}
		off += len(pk.eips)
		m.grants = res.Grants
		m.all = append(m.all, res.Grants...)
	}
	t3 := time.Now()
	tm.Alloc += t3.Sub(t2)
	// Split each EIP's limit over its zones (region), then each zone's
	// share over its hosts (zone managers).
	m.zlim = m.zlim[:0]
	k = 0
	for p := range s.pkgs {
		for _, ei := range s.pkgs[p].eips {
			e := &s.eips[ei]
			g := m.all[k]
			k++
			if g.Addr != e.addr {
				return bwalloc.Plan{}, tm, fmt.Errorf("package %d: grant for %v, want %v", p, g.Addr, e.addr)
			}
			m.zin = m.zin[:0]
			for _, z := range e.zones {
				zn := s.zones[z.zone]
				m.zin = append(m.zin, bwalloc.HostShare{Host: zn, Demand: m.zest.Demand(bwalloc.HostKey{Addr: e.addr, Host: zn}, now, e.ceiling).Rate})
			}
			var err error
			if m.zout, err = bwalloc.SplitHosts(m.zout, g.Limit, m.zin, s.cfg.HostFloor); err != nil {
				return bwalloc.Plan{}, tm, err
			}
			for _, z := range m.zout {
				m.zlim = append(m.zlim, z.Limit)
			}
		}
	}
	t4 := time.Now()
	tm.Region += t4.Sub(t3)
	m.table = m.table[:0]
	k = 0
	for p := range s.pkgs {
		for _, ei := range s.pkgs[p].eips {
			e := &s.eips[ei]
			for _, z := range e.zones {
				m.hin = m.hin[:0]
				for _, si := range z.slots {
					key := s.slots[si].key
					m.hin = append(m.hin, bwalloc.HostShare{Host: key.Host, Demand: m.hest.Demand(key, now, e.ceiling).Rate})
				}
				var err error
				if m.hout, err = bwalloc.SplitHosts(m.hout, m.zlim[k], m.hin, s.cfg.HostFloor); err != nil {
					return bwalloc.Plan{}, tm, err
				}
				k++
				for _, hs := range m.hout {
					m.table = append(m.table, bwalloc.Limit{HostKey: bwalloc.HostKey{Addr: e.addr, Host: hs.Host}, Bps: hs.Limit})
				}
			}
		}
	}
	slices.SortFunc(m.table, bwalloc.CompareLimits)
	// What is in force, as the agents report it.
	m.old = m.old[:0]
	for _, si := range s.sorted {
		m.old = append(m.old, bwalloc.Limit{HostKey: s.slots[si].key, Bps: s.slots[si].limit})
	}
	plan, err := bwalloc.PlanSorted(m.old, m.table)
	tm.Zones += time.Since(t4)
	return plan, tm, err
}

type zoneSum struct {
	bwalloc.Sample
	has bool
}

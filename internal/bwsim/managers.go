package bwsim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwstore"
)

// simClock is the simulated clock, shared by the store and the managers.
type simClock struct{ t time.Time }

func (c *simClock) Now() time.Time { return c.t }

// managers are the real bandwidth managers (internal/bandwidth): one
// ZoneManager per zone and a RegionManager, on the simulator's
// in-process store (bwstore.Mem) and clock. A new set stands for a newly
// active replica (after an outage): no history, what is in force read
// back from the store.
type managers struct {
	zones  []*bandwidth.ZoneManager // in s.zones order
	region *bandwidth.RegionManager
}

func newManagers(s *sim) (*managers, error) {
	cfg := bandwidth.Config{
		Interval:    s.cfg.Interval,
		Grace:       s.cfg.Grace,
		Estimator:   s.cfg.Estimator,
		HostFloor:   s.cfg.HostFloor,
		Now:         s.clk.Now,
		Log:         slog.New(slog.DiscardHandler),
		Concurrency: 1,
	}
	m := &managers{}
	for _, z := range s.zones {
		zm, err := bandwidth.NewZoneManager(z, s.mem, s.mem, cfg)
		if err != nil {
			return nil, err
		}
		m.zones = append(m.zones, zm)
	}
	rm, err := bandwidth.NewRegionManager(s.mem, cfg)
	if err != nil {
		return nil, err
	}
	rm.SetPackages(s.bwPkgs, nil)
	m.region = rm
	return m, nil
}

// Timing is the wall-clock time of one round's parts: every zone
// manager's ZoneManager.Round (one after the other), the region
// manager's RegionManager.Round less its allocation, and the allocation
// (Allocator.Package for every package and direction, RoundStats.Alloc).
type Timing struct {
	Zones, Region, Alloc time.Duration
}

// Total is the whole round in one process.
func (t Timing) Total() time.Duration { return t.Zones + t.Region + t.Alloc }

// round runs one round of every manager: the zone managers (each sums
// its hosts' reports up to the region tier and splits the shares the
// region wrote last over its hosts), then the region manager (allocates
// on the zones' sums just written). The managers run in a fixed order
// at the same simulated instant; in production their rounds are not
// aligned.
func (m *managers) round() (Timing, error) {
	ctx := context.Background()
	var tm Timing
	for _, zm := range m.zones {
		t0 := time.Now()
		_, err := zm.Round(ctx, nil)
		tm.Zones += time.Since(t0)
		if err != nil {
			return tm, err
		}
	}
	t0 := time.Now()
	st, err := m.region.Round(ctx, nil)
	tm.Alloc = st.Alloc
	tm.Region = time.Since(t0) - st.Alloc
	return tm, err
}

// bwPackages are the scenario's packages as the region manager takes
// them (bandwidth.PackagesFrom's shape): EIPs sorted by address.
func (s *sim) bwPackages() []bandwidth.Package {
	out := make([]bandwidth.Package, len(s.pkgs))
	for p := range s.pkgs {
		pk := bandwidth.Package{Name: s.sc.Packages[p].Name, Capacity: s.pkgs[p].capacity, Burst: s.cfg.Burst}
		if pk.Name == "" {
			pk.Name = fmt.Sprintf("pkg%d", p)
		}
		for _, ei := range s.pkgs[p].eips {
			pk.EIPs = append(pk.EIPs, s.eips[ei].terms)
		}
		out[p] = pk
	}
	return out
}

// bytesOf is a rate in bits/s as the store's bytes/s.
func bytesOf(bits float64) uint64 { return uint64(max(bits, 0) / 8) }

var _ bwstore.Clock = (*simClock)(nil)

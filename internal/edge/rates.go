package edge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Rate reporting for DDoS detection (docs/ddos.md): every interval the
// edge reads its per-EIP counters (eip_stats: packets, bytes and SYNs
// from the Internet side), turns the deltas into rates and publishes the
// EIPs above a small floor, its top N by packet rate, under
// model.RateReportKey with a lease. The controller sums them over the
// edges and decides.

// Rate reporting defaults.
const (
	DefaultRateInterval = 250 * time.Millisecond
	DefaultRateFloorPPS = 1000
	DefaultRateFloorBPS = 10_000_000
	DefaultRateFloorSYN = 100
	DefaultRateTopN     = 1024
)

// RateConfig sets the edge's rate reports.
type RateConfig struct {
	// Interval between measurements (0: DefaultRateInterval; negative:
	// no reports).
	Interval time.Duration
	// Floor: an EIP is reported when any of its rates reaches the floor's
	// (0: the defaults).
	FloorPPS, FloorBPS, FloorSYN float64
	// TopN bounds the EIPs in one report (0: DefaultRateTopN).
	TopN int
}

func (c *RateConfig) defaults() {
	if c.Interval == 0 {
		c.Interval = DefaultRateInterval
	}
	if c.FloorPPS == 0 {
		c.FloorPPS = DefaultRateFloorPPS
	}
	if c.FloorBPS == 0 {
		c.FloorBPS = DefaultRateFloorBPS
	}
	if c.FloorSYN == 0 {
		c.FloorSYN = DefaultRateFloorSYN
	}
	if c.TopN == 0 {
		c.TopN = DefaultRateTopN
	}
}

// rateMeter turns successive counter readings into rates. Its buffers
// are indexed by counter slot and reused, so a reading of a million EIPs
// allocates nothing: one batched walk of the routes, one batched read of
// the counters (dataplane.EIPStatsReader), one pass over both. The
// bandwidth reports read the same readings (counters), so the edge reads
// its counters once for both.
type rateMeter struct {
	cfg RateConfig

	mu        sync.Mutex // measure (the rate loop) and counters (the bandwidth host)
	routes    []routeSlot
	stats     []dataplane.Counters
	prev, cur []slotReading
	at        time.Time // of prev
}

type routeSlot struct {
	addr netip.Addr
	slot uint32
}

// slotReading is one slot's counters as read, and the EIP it belonged to.
type slotReading struct {
	addr netip.Addr
	c    dataplane.Counters
}

func newRateMeter(cfg RateConfig) *rateMeter {
	cfg.defaults()
	return &rateMeter{cfg: cfg}
}

// grow returns b with length n, reusing its array when it can.
func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n, n+n/4)
}

// read reads every EIP route's counters into m.cur.
func (m *rateMeter) read(maps dataplane.EdgeMaps) error {
	m.routes = m.routes[:0]
	maxSlot := -1
	if err := maps.RangeRoutes(func(a netip.Addr, r dataplane.Route) bool {
		m.routes = append(m.routes, routeSlot{a, r.StatsIdx})
		maxSlot = max(maxSlot, int(r.StatsIdx))
		return true
	}); err != nil {
		return err
	}
	n := maxSlot + 1
	m.stats = grow(m.stats, n)
	if br, ok := maps.(dataplane.EIPStatsReader); ok {
		if err := br.ReadEIPStats(m.stats); err != nil {
			return err
		}
	} else {
		for _, r := range m.routes {
			c, err := maps.EIPStats(r.slot)
			if err != nil {
				return err
			}
			m.stats[r.slot] = c
		}
	}
	m.cur = grow(m.cur, n)
	clear(m.cur)
	for _, r := range m.routes {
		m.cur[r.slot] = slotReading{r.addr, m.stats[r.slot]}
	}
	return nil
}

// measure reads every EIP route's counters at now and returns the report
// of the rates since the previous reading (nil on the first). An EIP
// whose slot changed or whose counters went back (a reused, reset slot)
// starts over.
func (m *rateMeter) measure(maps dataplane.EdgeMaps, now time.Time) (*model.RateReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.read(maps); err != nil {
		return nil, err
	}
	prevAt := m.at
	dt := now.Sub(prevAt).Seconds()
	var rep *model.RateReport
	if !prevAt.IsZero() && dt > 0 {
		rep = &model.RateReport{IntervalMS: now.Sub(prevAt).Milliseconds(), At: now.UTC()}
	}
	for _, r := range m.routes {
		if rep == nil || int(r.slot) >= len(m.prev) {
			continue
		}
		c, p := m.cur[r.slot].c, m.prev[r.slot]
		if p.addr != r.addr || c.RxPackets < p.c.RxPackets || c.RxBytes < p.c.RxBytes || c.RxSyns < p.c.RxSyns {
			continue
		}
		x := model.EIPRate{Address: r.addr,
			PPS:   float64(c.RxPackets-p.c.RxPackets) / dt,
			BPS:   8 * float64(c.RxBytes-p.c.RxBytes) / dt,
			SYNPS: float64(c.RxSyns-p.c.RxSyns) / dt}
		if x.PPS >= m.cfg.FloorPPS || x.BPS >= m.cfg.FloorBPS || x.SYNPS >= m.cfg.FloorSYN {
			rep.Rates = append(rep.Rates, x)
		}
	}
	m.prev, m.cur = m.cur, m.prev
	m.at = now
	if rep == nil {
		return nil, nil
	}
	slices.SortFunc(rep.Rates, func(x, y model.EIPRate) int {
		if x.PPS != y.PPS {
			if x.PPS > y.PPS {
				return -1
			}
			return 1
		}
		return x.Address.Compare(y.Address)
	})
	if len(rep.Rates) > m.cfg.TopN {
		rep.Omitted = len(rep.Rates) - m.cfg.TopN
		rep.Rates = rep.Rates[:m.cfg.TopN]
	}
	return rep, nil
}

// counters returns the Internet -> EIP counters of the EIPs in want and
// when they were read: the rate loop's last reading when it is at most
// maxAge old, else a new reading (the next rate report then measures from
// it, over a shorter interval).
func (m *rateMeter) counters(maps dataplane.EdgeMaps, now time.Time, maxAge time.Duration, want map[netip.Addr]bwenforce.Carried) (map[netip.Addr]bwenforce.Reading, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() || now.Sub(m.at) > maxAge || now.Before(m.at) {
		if err := m.read(maps); err != nil {
			return nil, now, err
		}
		m.prev, m.cur = m.cur, m.prev
		m.at = now
	}
	out := make(map[netip.Addr]bwenforce.Reading, len(want))
	for i, r := range m.prev {
		if _, ok := want[r.addr]; ok && r.addr.IsValid() {
			out[r.addr] = bwenforce.Reading{Bytes: r.c.RxBytes, Packets: r.c.RxPackets, Slot: uint32(i)}
		}
	}
	return out, m.at, nil
}

// runRateReports measures every interval and publishes the report under
// the edge's rate key until ctx ends; an empty report deletes the key
// (written once: an idle edge writes nothing). The key carries a lease of
// its own (model.DefaultRateReportTTL, renewed every second even while
// idle), revoked on return. A store write that fails is logged and the next interval tries
// again: detection is best effort, forwarding does not wait for it.
func runRateReports(ctx context.Context, m *rateMeter, name string, maps dataplane.EdgeMaps, st store.Leases, log *slog.Logger) {
	if m.cfg.Interval < 0 {
		return
	}
	key := model.RateReportKey(name)
	var lease store.LeaseID
	var renewed time.Time
	written := true // a stale key of an earlier run is deleted first
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	defer func() {
		if lease != 0 {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st.Revoke(rctx, lease)
			cancel()
		}
	}()
	warned := time.Time{}
	warn := func(msg string, err error) {
		if ctx.Err() == nil && time.Since(warned) > 10*time.Second {
			warned = time.Now()
			log.Warn(msg, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rep, err := m.measure(maps, now)
			if err != nil {
				warn("rate measurement failed", err)
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			// The lease is held and renewed even while there is nothing
			// to write, so the first report of a flood goes out at once.
			if lease == 0 {
				if lease, err = st.Grant(cctx, model.DefaultRateReportTTL); err != nil {
					lease = 0
					cancel()
					warn("rate report lease grant failed", err)
					continue
				}
				renewed = now
			} else if now.Sub(renewed) >= time.Second {
				if err = st.KeepAliveOnce(cctx, lease); err == nil {
					renewed = now
				} else if errors.Is(err, store.ErrLeaseNotFound) {
					lease = 0
					cancel()
					warn("rate report lease lost", err)
					continue
				}
			}
			if rep == nil || len(rep.Rates) == 0 && !written {
				cancel()
				continue
			}
			kv := store.KV{Key: key}
			if len(rep.Rates) > 0 {
				kv.Value, _ = json.Marshal(rep)
			}
			err = st.WriteLeased(cctx, lease, []store.KV{kv})
			cancel()
			if err != nil {
				if errors.Is(err, store.ErrLeaseNotFound) {
					lease = 0
				}
				warn("rate report write failed", err)
				continue
			}
			written = len(rep.Rates) > 0
		}
	}
}

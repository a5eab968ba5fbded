package health

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// DurationBuckets are the upper bounds, in seconds, of the probe-duration
// histogram (azgate_health_check_probe_duration_seconds): from 1 ms (a
// TCP connect on the same fabric) to 5 s (above the largest timeout a
// check is given by default, 1 s, and the usual configured ones).
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// PoolDurations is the histogram of one service pool's probes of one
// result (ok, failed) on this edge: Buckets[i] counts the probes that
// took at most DurationBuckets[i] (cumulative), Count all of them, Sum
// their seconds.
type PoolDurations struct {
	Service, Pool string
	OK            bool
	Buckets       []uint64
	Count         uint64
	Sum           float64
}

type poolResult struct {
	service, pool string
	ok            bool
}

type durationHist struct {
	counts []uint64 // per bucket, not cumulative; above the last: in count only
	count  uint64
	sum    float64
}

// observe counts a probe of t. ctx is its checker's: a checker stopped
// (its ctx cancelled before Update drops its pool's histogram) counts
// nothing, so a pool no longer checked does not come back.
func (m *Manager) observe(ctx context.Context, t Target, ok bool, took time.Duration) {
	k := poolResult{t.Service, t.Pool, ok}
	sec := took.Seconds()
	m.durMu.Lock()
	defer m.durMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	h := m.durations[k]
	if h == nil {
		h = &durationHist{counts: make([]uint64, len(DurationBuckets))}
		m.durations[k] = h
	}
	h.count++
	h.sum += sec
	if i, _ := slices.BinarySearch(DurationBuckets, sec); i < len(h.counts) {
		h.counts[i]++
	}
}

// dropDurations forgets the histograms of the pools none of want checks
// (m.mu held).
func (m *Manager) dropDurations(want map[string]Target) {
	keep := map[[2]string]bool{}
	for _, t := range want {
		keep[[2]string{t.Service, t.Pool}] = true
	}
	m.durMu.Lock()
	defer m.durMu.Unlock()
	for k := range m.durations {
		if !keep[[2]string{k.service, k.pool}] {
			delete(m.durations, k)
		}
	}
}

// Durations returns the probe-duration histograms, one per service pool
// and result, sorted.
func (m *Manager) Durations() []PoolDurations {
	m.durMu.Lock()
	out := make([]PoolDurations, 0, len(m.durations))
	for k, h := range m.durations {
		d := PoolDurations{Service: k.service, Pool: k.pool, OK: k.ok, Count: h.count, Sum: h.sum, Buckets: make([]uint64, len(h.counts))}
		var cum uint64
		for i, n := range h.counts {
			cum += n
			d.Buckets[i] = cum
		}
		out = append(out, d)
	}
	m.durMu.Unlock()
	slices.SortFunc(out, func(a, b PoolDurations) int {
		if c := cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Pool, b.Pool)); c != 0 {
			return c
		}
		if a.OK == b.OK {
			return 0
		}
		if a.OK {
			return -1
		}
		return 1
	})
	return out
}

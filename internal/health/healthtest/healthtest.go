// Package healthtest holds the health checker's figures tests feed to
// the metrics collectors (health.Collector) in place of a running
// checker. Nothing in the shipped binaries imports it.
package healthtest

import "github.com/azgate/azgate/internal/health"

// Durations are an edge's probe-duration histograms: one pool, 3 probes
// ok (within 2.5 ms), 3 failed (timed out at 1 s).
func Durations() []health.PoolDurations {
	ok := make([]uint64, len(health.DurationBuckets))
	failed := make([]uint64, len(health.DurationBuckets))
	for i, le := range health.DurationBuckets {
		if le >= 0.0025 {
			ok[i] = 3
		}
		if le >= 1 {
			failed[i] = 3
		}
	}
	return []health.PoolDurations{{Service: "web", Pool: "main", OK: true, Buckets: ok, Count: 3, Sum: 0.006},
		{Service: "web", Pool: "main", Buckets: failed, Count: 3, Sum: 3}}
}

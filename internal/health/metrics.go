package health

import "github.com/prometheus/client_golang/prometheus"

var (
	descCheckUp = prometheus.NewDesc("azgate_health_check_up",
		"This edge's verdict on a backend after rise/fall: 1 up, 0 down (absent until the first verdict).", []string{"service", "pool", "backend"}, nil)
	descProbes = prometheus.NewDesc("azgate_health_check_probes_total",
		"Health-check probes of a backend by result (ok, failed).", []string{"service", "pool", "backend", "result"}, nil)
	descDuration = prometheus.NewDesc("azgate_health_check_duration_seconds",
		"How long the last health-check probe of a backend took (a failed one: until it failed or timed out).", []string{"service", "pool", "backend"}, nil)
	descProbeDurations = prometheus.NewDesc("azgate_health_check_probe_duration_seconds",
		"How long this edge's health-check probes of a service pool's backends took, by result (ok; failed: until it failed or timed out), since the pool's first checked backend.", []string{"service", "pool", "result"}, nil)
)

// Collector exports the checks of the targets stats returns (a Manager's
// Stats, or nil before there is one) and the probe-duration histograms
// durations returns (a Manager's Durations; nil: none). Its series are
// bounded by the backends the edge checks (the per-backend ones) and by
// the service pools (the histograms: a pool's backends share one check,
// and a histogram per backend would be 15 series each).
func Collector(stats func() []TargetStats, durations func() []PoolDurations) prometheus.Collector {
	return collector{stats, durations}
}

type collector struct {
	stats     func() []TargetStats
	durations func() []PoolDurations
}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCheckUp
	ch <- descProbes
	ch <- descDuration
	ch <- descProbeDurations
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		if s.Known {
			up := 0.0
			if s.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descCheckUp, prometheus.GaugeValue, up, s.Service, s.Pool, s.Backend)
		}
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(s.OK), s.Service, s.Pool, s.Backend, "ok")
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(s.Failed), s.Service, s.Pool, s.Backend, "failed")
		if s.OK+s.Failed > 0 {
			ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, s.LastDuration.Seconds(), s.Service, s.Pool, s.Backend)
		}
	}
	if c.durations == nil {
		return
	}
	for _, d := range c.durations() {
		buckets := make(map[float64]uint64, len(d.Buckets))
		for i, n := range d.Buckets {
			buckets[DurationBuckets[i]] = n
		}
		result := "failed"
		if d.OK {
			result = "ok"
		}
		ch <- prometheus.MustNewConstHistogram(descProbeDurations, d.Count, d.Sum, buckets, d.Service, d.Pool, result)
	}
}

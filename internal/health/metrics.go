package health

import "github.com/prometheus/client_golang/prometheus"

var (
	descCheckUp = prometheus.NewDesc("azgate_health_check_up",
		"This edge's verdict on a backend after rise/fall: 1 up, 0 down (absent until the first verdict).", []string{"service", "pool", "backend"}, nil)
	descProbes = prometheus.NewDesc("azgate_health_check_probes_total",
		"Health-check probes of a backend by result (ok, failed).", []string{"service", "pool", "backend", "result"}, nil)
	descDuration = prometheus.NewDesc("azgate_health_check_duration_seconds",
		"How long the last health-check probe of a backend took (a failed one: until it failed or timed out).", []string{"service", "pool", "backend"}, nil)
)

// Collector exports the checks of the targets stats returns (a Manager's
// Stats, or nil before there is one). Its series are bounded by the
// backends the edge checks.
func Collector(stats func() []TargetStats) prometheus.Collector { return collector{stats} }

type collector struct{ stats func() []TargetStats }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCheckUp
	ch <- descProbes
	ch <- descDuration
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
}

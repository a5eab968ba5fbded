package prober

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a prober's Stats (docs/prober.md, "Metrics").
type Collector struct{ p *Prober }

// NewRegistry returns a registry with p's metrics.
func NewRegistry(p *Prober) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector{p})
	return reg
}

var (
	descRounds   = prometheus.NewDesc("azgate_prober_rounds_total", "Measurement rounds done.", nil, nil)
	descMeasured = prometheus.NewDesc("azgate_prober_measurements_total", "Measurements queued for pathd.", nil, nil)
	descSent     = prometheus.NewDesc("azgate_prober_sent_total", "Measurements a pathd acknowledged.", nil, nil)
	descPostErr  = prometheus.NewDesc("azgate_prober_post_errors_total", "POSTs that failed and were retried.", nil, nil)
	descRejected = prometheus.NewDesc("azgate_prober_rejected_total", "Measurements pathd refused as invalid (dropped).", nil, nil)
	descDropped  = prometheus.NewDesc("azgate_prober_dropped_total", "Measurements dropped from a full queue.", nil, nil)
	descQueued   = prometheus.NewDesc("azgate_prober_queued", "Measurements waiting for pathd.", nil, nil)
	descResolves = prometheus.NewDesc("azgate_prober_resolves_total", "Resolutions of the report host, by result.", []string{"result"}, nil)
	descMoves    = prometheus.NewDesc("azgate_prober_moves_total", "Times the report host's address changed.", nil, nil)
	descAddr     = prometheus.NewDesc("azgate_prober_report_address", "The address reports go to (1 for the current one).", []string{"address"}, nil)
)

// Describe implements prometheus.Collector.
func (Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRounds, descMeasured, descSent, descPostErr, descRejected, descDropped, descQueued, descResolves, descMoves, descAddr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	counter(descRounds, s.Rounds)
	counter(descMeasured, s.Measurements)
	counter(descSent, s.Sent)
	counter(descPostErr, s.PostErrors)
	counter(descRejected, s.Rejected)
	counter(descDropped, s.Dropped)
	counter(descResolves, s.Resolves, "ok")
	counter(descResolves, s.ResolveErrs, "error")
	counter(descMoves, s.Moves)
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(s.Queued))
	if s.Addr.IsValid() {
		ch <- prometheus.MustNewConstMetric(descAddr, prometheus.GaugeValue, 1, s.Addr.String())
	}
}

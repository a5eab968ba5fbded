package gslbrole

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/geo"
)

var (
	descTargetUp   = prometheus.NewDesc("azgate_gslb_target_up", "1 while a GSLB target is up (the heartbeat): source combined is what the answers use (every vantage point), local is this node's probe.", []string{"target", "vip", "source"}, nil)
	descQueries    = prometheus.NewDesc("azgate_gslb_queries_total", "DNS queries the GSLB handled (responses are not answered and not counted).", nil, nil)
	descAnswers    = prometheus.NewDesc("azgate_gslb_answers_total", "DNS answers by outcome: formerr, refused, nxdomain, nodata, servfail, failopen (every target down, answered anyway), truncated, notimp.", []string{"outcome"}, nil)
	descTCPReject  = prometheus.NewDesc("azgate_gslb_tcp_rejected_total", "TCP connections closed at once because MaxTCPConns were open (or MaxTCPConnsPerNet from the source network).", nil, nil)
	descSkipped    = prometheus.NewDesc("azgate_gslb_skipped_objects", "DNS zones and GSLB records read back that are not served (invalid, or not compiling with their zone).", nil, nil)
	descUpdates    = prometheus.NewDesc("azgate_gslb_catalog_updates_total", "Catalogs installed (one per change of the desired state).", nil, nil)
	descFailures   = prometheus.NewDesc("azgate_gslb_catalog_failures_total", "Catalog builds that failed whole; the last good catalog kept serving.", nil, nil)
	descViews      = prometheus.NewDesc("azgate_gslb_views_fresh", "Vantage points whose fresh views the verdicts combine (this one included).", nil, nil)
	descViewErrs   = prometheus.NewDesc("azgate_gslb_view_errors_total", "Views of other vantage points that did not decode (dropped), and failed publishes of this node's view.", []string{"kind"}, nil)
	descRateLimit  = prometheus.NewDesc("azgate_gslb_rate_limited_total", "UDP answers over the response rate limit (--rrl-*): replaced by an empty one with TC=1 (slipped) or dropped.", []string{"action"}, nil)
	descUDP        = prometheus.NewDesc("azgate_gslb_udp_total", "UDP datagrams by what the batched loop did with them: fast (answered by the wire-level fast path), oversize and short (dropped unanswered), write_error (answers the kernel refused or that timed out).", []string{"kind"}, nil)
	descGeoReloads = prometheus.NewDesc("azgate_gslb_geoip_reloads_total", "GeoIP database reloads by result (a failed one keeps the database in use).", []string{"result"}, nil)
)

// Collector returns the role's Prometheus collector.
func (g *GSLB) Collector(db *geo.DB) prometheus.Collector { return collector{g, db} }

type collector struct {
	g  *GSLB
	db *geo.DB
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTargetUp, descQueries, descAnswers, descTCPReject, descSkipped, descUpdates, descFailures, descViews, descViewErrs, descRateLimit, descUDP, descGeoReloads} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	for _, t := range g.Targets() {
		ch <- prometheus.MustNewConstMetric(descTargetUp, prometheus.GaugeValue, float64(t.Up), t.Key, t.VIP.String(), "combined")
		ch <- prometheus.MustNewConstMetric(descTargetUp, prometheus.GaugeValue, float64(t.LocalUp), t.Key, t.VIP.String(), "local")
	}
	s := &g.Handler.Stats
	ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, float64(s.Queries.Load()))
	for _, o := range []struct {
		name string
		v    uint64
	}{{"formerr", s.FormErr.Load()}, {"refused", s.Refused.Load()}, {"nxdomain", s.NXDomain.Load()}, {"nodata", s.NoData.Load()},
		{"servfail", s.ServFail.Load()}, {"failopen", s.FailOpen.Load()}, {"truncated", s.Truncated.Load()}, {"notimp", s.NotImp.Load()}} {
		ch <- prometheus.MustNewConstMetric(descAnswers, prometheus.CounterValue, float64(o.v), o.name)
	}
	if g.listen.Load() != nil {
		// Summed over the listeners (one per --listen address).
		var rejected, fast, oversize, short, writeErrs uint64
		for _, srv := range g.Servers {
			rejected += srv.RejectedTCP()
			u := srv.UDPStats()
			fast, oversize, short, writeErrs = fast+u.Fast.Load(), oversize+u.Oversize.Load(), short+u.Short.Load(), writeErrs+u.WriteErrors.Load()
		}
		ch <- prometheus.MustNewConstMetric(descTCPReject, prometheus.CounterValue, float64(rejected))
		for _, o := range []struct {
			kind string
			v    uint64
		}{{"fast", fast}, {"oversize", oversize}, {"short", short}, {"write_error", writeErrs}} {
			ch <- prometheus.MustNewConstMetric(descUDP, prometheus.CounterValue, float64(o.v), o.kind)
		}
	}
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.GaugeValue, float64(g.Skipped()))
	ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(g.updates.Load()))
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(g.failures.Load()))
	g.mu.Lock()
	fresh := len(g.fresh)
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descViews, prometheus.GaugeValue, float64(fresh))
	ch <- prometheus.MustNewConstMetric(descViewErrs, prometheus.CounterValue, float64(g.viewErrs.Load()), "decode")
	ch <- prometheus.MustNewConstMetric(descViewErrs, prometheus.CounterValue, float64(g.pubErrs.Load()), "publish")
	if g.rl != nil {
		ch <- prometheus.MustNewConstMetric(descRateLimit, prometheus.CounterValue, float64(g.rl.Slipped.Load()), "slipped")
		ch <- prometheus.MustNewConstMetric(descRateLimit, prometheus.CounterValue, float64(g.rl.Dropped.Load()), "dropped")
	}
	if c.db != nil {
		st := c.db.Stats()
		ch <- prometheus.MustNewConstMetric(descGeoReloads, prometheus.CounterValue, float64(st.Reloads), "ok")
		ch <- prometheus.MustNewConstMetric(descGeoReloads, prometheus.CounterValue, float64(st.Failures), "failed")
	}
}

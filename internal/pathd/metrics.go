package pathd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/nodemetrics"
)

var (
	descReports    = prometheus.NewDesc("azgate_pathd_reports_total", "Reports by where they came from (local: a prober; forward: another region) and what became of them (applied, stale, rejected, duplicate).", []string{"from", "outcome"}, nil)
	descInvalid    = prometheus.NewDesc("azgate_pathd_bodies_refused_total", "Request bodies refused whole (malformed, invalid report, too large), by endpoint.", []string{"endpoint"}, nil)
	descUnauth     = prometheus.NewDesc("azgate_pathd_unauthorized_total", "Requests refused for a missing or wrong bearer token.", nil, nil)
	descWrongReg   = prometheus.NewDesc("azgate_pathd_forward_wrong_region_total", "Forwarded reports rejected because their source is not of the region whose peer token sent them.", nil, nil)
	descFwdSources = prometheus.NewDesc("azgate_pathd_forward_sources", "Report sources held in the duplicate filter, by origin region (each region's table is bounded on its own).", []string{"region"}, nil)
	descQueue      = prometheus.NewDesc("azgate_pathd_forward_queue_depth", "Reports waiting to be forwarded to a peer region (in flight included).", []string{"peer"}, nil)
	descFwdSent    = prometheus.NewDesc("azgate_pathd_forwarded_total", "Reports a peer region took.", []string{"peer"}, nil)
	descFwdDrop    = prometheus.NewDesc("azgate_pathd_forward_dropped_total", "Reports dropped from a peer's full queue (oldest first).", []string{"peer"}, nil)
	descFwdErr     = prometheus.NewDesc("azgate_pathd_forward_errors_total", "Forward POSTs that failed and were retried.", []string{"peer"}, nil)
	descFwdRefused = prometheus.NewDesc("azgate_pathd_forward_refused_total", "Reports in batches a peer refused as invalid (not retried).", []string{"peer"}, nil)
	descRecompute  = prometheus.NewDesc("azgate_pathd_recompute_seconds", "Duration of the last recompute (snapshot and every edge's update).", nil, nil)
	descRecomputes = prometheus.NewDesc("azgate_pathd_recomputes_total", "Recomputes run.", nil, nil)
	descSwitches   = prometheus.NewDesc("azgate_pathd_path_switches_total", "(edge, origin) pairs whose chosen path changed.", nil, nil)
	descHops       = prometheus.NewDesc("azgate_pathd_hops", "Hops held.", nil, nil)
	descNodes      = prometheus.NewDesc("azgate_pathd_nodes", "Nodes (edges, relays, origins) held.", nil, nil)
	descEdges      = prometheus.NewDesc("azgate_pathd_edges", "Edges whose paths are recomputed (queried within the expiry time).", nil, nil)
	descForgot     = prometheus.NewDesc("azgate_pathd_forgotten_total", "Hops and nodes forgotten for not being reported within the expiry time.", []string{"kind"}, nil)
	descStore      = prometheus.NewDesc("azgate_pathd_hopstore_events_total", "Hop store events: rows saved, restored (newer than held), refused (invalid for the store), malformed (skipped), reset (the store's version went back: every hop written back), and errors by operation.", []string{"event"}, nil)
)

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReports, descInvalid, descUnauth, descWrongReg, descFwdSources, descQueue, descFwdSent, descFwdDrop, descFwdErr, descFwdRefused,
		descRecompute, descRecomputes, descSwitches, descHops, descNodes, descEdges, descForgot, descStore} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	k := s.cnt
	nodes, hops := s.store.Len()
	srcs := map[string]int{}
	for r := range s.cfg.PeerTokens {
		srcs[r] = s.dedup.RegionSources(r)
	}
	s.mu.Unlock()
	s.selMu.RLock()
	edges := len(s.edges)
	s.selMu.RUnlock()
	cnt := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, x := range []struct {
		from string
		o    outcome
	}{{"local", k.local}, {"forward", k.fwd}} {
		cnt(descReports, x.o.applied, x.from, "applied")
		cnt(descReports, x.o.stale, x.from, "stale")
		cnt(descReports, x.o.rejected, x.from, "rejected")
		if x.from == "forward" {
			cnt(descReports, x.o.duplicate, x.from, "duplicate")
		}
	}
	cnt(descInvalid, k.invalid[0], "reports")
	cnt(descInvalid, k.invalid[1], "forward")
	cnt(descUnauth, k.unauth)
	cnt(descWrongReg, k.wrongRegion)
	for r, n := range srcs {
		gauge(descFwdSources, float64(n), r)
	}
	for _, p := range s.peers {
		p.mu.Lock()
		sent, dropped, errs, refused := p.sent, p.dropped, p.errors, p.refused
		p.mu.Unlock()
		gauge(descQueue, float64(p.depth()), p.region)
		cnt(descFwdSent, sent, p.region)
		cnt(descFwdDrop, dropped, p.region)
		cnt(descFwdErr, errs, p.region)
		cnt(descFwdRefused, refused, p.region)
	}
	gauge(descRecompute, k.recomputeLast.Seconds())
	cnt(descRecomputes, k.recomputes)
	cnt(descSwitches, k.switches)
	gauge(descHops, float64(hops))
	gauge(descNodes, float64(nodes))
	gauge(descEdges, float64(edges))
	cnt(descForgot, k.forgotHops, "hop")
	cnt(descForgot, k.forgotNodes, "node")
	cnt(descStore, k.saved, "saved")
	cnt(descStore, k.restored, "restored")
	cnt(descStore, k.refused, "refused")
	cnt(descStore, k.malformed, "malformed")
	cnt(descStore, k.saveErrors, "save_error")
	cnt(descStore, k.loadErrors, "load_error")
	cnt(descStore, k.changesErrors, "changes_error")
	cnt(descStore, k.expireErrors, "expire_error")
	cnt(descStore, k.resets, "reset")
}

func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s})
	return promhttp.HandlerFor(nodemetrics.WithNode(reg, s.cfg.Node), promhttp.HandlerOpts{})
}

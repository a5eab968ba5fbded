package controller

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/azgate/azgate/internal/model"
)

// metrics of one controller, in a registry of its own so several
// controllers can run in one process (tests).
type metrics struct {
	reg           *prometheus.Registry
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	commits       *prometheus.CounterVec
	commitSeconds prometheus.Histogram
	conflicts     prometheus.Counter
	backendsDown  *prometheus.GaugeVec
	healthReports prometheus.Gauge
	healthWrites  prometheus.Counter
	// scopeCopies counts the scope copies written, by who wrote them
	// (a write, the repair) and op (put, delete); scopeRepairs the
	// repairs by result.
	scopeCopies  *prometheus.CounterVec
	scopeRepairs *prometheus.CounterVec
	// DDoS detection (ddos.go).
	ddosDecisions   *prometheus.CounterVec
	ddosQuarantined prometheus.Gauge
	ddosReports     prometheus.Gauge
	ddosTracked     prometheus.Gauge
	ddosActing      prometheus.Gauge
}

func newMetrics(v *view) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "azgate_controller_http_requests_total",
			Help: "API requests by route pattern, method and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "azgate_controller_http_request_duration_seconds",
			Help:    "API request latency by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10), // 0.5ms .. ~131s
		}, []string{"route"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "azgate_controller_commits_total",
			Help: "Store commits by result: ok, conflict (retried), precondition (an If-Match revision was stale: 412), lease (the lease of a copy kept after a move had ended: retried) or error.",
		}, []string{"result"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "azgate_controller_commit_duration_seconds",
			Help:    "Time to commit one change to the store.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "azgate_controller_commit_conflicts_total",
			Help: "Commits that found the store changed by another writer.",
		}),
		backendsDown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "azgate_controller_backends_down",
			Help: "Backends the majority of the edges' health checks finds down, by service (as last written).",
		}, []string{"service"}),
		healthReports: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "azgate_controller_health_reports",
			Help: "Health reports (one per edge and backend) the controller currently sees.",
		}),
		healthWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "azgate_controller_health_writes_total",
			Help: "Health objects written or deleted because the majority view changed.",
		}),
		scopeCopies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "azgate_controller_scope_copies_total",
			Help: "Scope copies (docs/scale.md, Scopes) written (op put) or deleted (op delete), by a write, by the repair the controller runs at start and after a partial commit, or at the end of a move's grace (by linger, --move-grace).",
		}, []string{"by", "op"}),
		scopeRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "azgate_controller_scope_repairs_total",
			Help: "Repairs of the scope copies by result: ok, or failed (retried later).",
		}, []string{"result"}),
		ddosDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "azgate_controller_ddos_decisions_total",
			Help: "DDoS detection decisions by action: quarantine, release, or skip (a decision the store refused).",
		}, []string{"action"}),
		ddosQuarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "azgate_controller_ddos_quarantined",
			Help: "Addresses currently quarantined by DDoS detection (by ddos), as seen by the acting controller.",
		}),
		ddosReports: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "azgate_controller_ddos_rate_reports",
			Help: "Edges currently reporting EIPs above their rate floor.",
		}),
		ddosTracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "azgate_controller_ddos_tracked",
			Help: "Addresses the DDoS detector keeps a baseline or state for.",
		}),
		ddosActing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "azgate_controller_ddos_acting",
			Help: "1 while this controller holds the DDoS ownership scope and decides, 0 otherwise.",
		}),
	}
	m.ddosDecisions.WithLabelValues("quarantine")
	m.ddosDecisions.WithLabelValues("release")
	m.ddosDecisions.WithLabelValues("skip")
	for _, by := range []string{"write", "repair", "linger"} {
		m.scopeCopies.WithLabelValues(by, "put")
		m.scopeCopies.WithLabelValues(by, "delete")
	}
	m.scopeRepairs.WithLabelValues("ok")
	m.scopeRepairs.WithLabelValues("failed")
	m.reg.MustRegister(m.scopeCopies, m.scopeRepairs)
	m.reg.MustRegister(m.ddosDecisions, m.ddosQuarantined, m.ddosReports, m.ddosTracked, m.ddosActing)
	m.reg.MustRegister(m.requests, m.latency, m.commits, m.commitSeconds, m.conflicts, m.backendsDown, m.healthReports, m.healthWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "azgate_controller_store_revision",
		Help: "Store revision of the last commit the controller's view reflects.",
	}, func() float64 { return float64(v.revision()) }))
	for i, kind := range model.Kinds {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "azgate_controller_objects",
			Help:        "Objects in the desired state by kind.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(v.pubCount[i].Load()) }))
	}
	return m
}

func (m *metrics) observe(route string, code int, seconds float64) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(seconds)
}

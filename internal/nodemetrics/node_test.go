package nodemetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/promcheck"
)

// TestWithNode: every series of a wrapped registry gets the node label,
// in order among its labels, and the exposition passes promtool; a series
// with a node label of its own keeps it; an empty node changes nothing.
func TestWithNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "azgate_test_events_total", Help: "Test events."}, []string{"a", "z"})
	c.WithLabelValues("x", "y").Add(3)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "azgate_test_seconds", Help: "Test durations.", Buckets: []float64{1}})
	h.Observe(0.5)
	own := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "azgate_test_peer", Help: "A series naming a node."}, []string{"node"})
	own.WithLabelValues("other").Set(1)
	reg.MustRegister(c, h, own)
	promcheck.Promtool(t)
	body := string(promcheck.Scrape(t, Handler(WithNode(reg, "ctl-1"), "")))
	promcheck.Lint(t, []byte(body))
	for _, want := range []string{
		`azgate_test_events_total{a="x",node="ctl-1",z="y"} 3`,
		`azgate_test_seconds_bucket{node="ctl-1",le="1"} 1`,
		`azgate_test_seconds_count{node="ctl-1"} 1`,
		`azgate_test_peer{node="other"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
	if body := string(promcheck.Scrape(t, Handler(WithNode(reg, ""), ""))); strings.Contains(body, "ctl-1") || !strings.Contains(body, `azgate_test_events_total{a="x",z="y"} 3`) {
		t.Errorf("an empty node changed the series:\n%s", body)
	}
}

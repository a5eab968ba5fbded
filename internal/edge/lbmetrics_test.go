package edge

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/promcheck"
)

// TestBackendCounters: each programmed backend's data-plane counters, by
// service, pool and backend key, as series that pass promtool.
func TestBackendCounters(t *testing.T) {
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	load(t, r, 1, svcRegion()...)
	r.mu.Lock()
	fake.BackendC = map[uint32]dataplane.LBCounters{}
	want := map[string]bool{}
	for id, b := range r.lb.backends {
		fake.BackendC[b.idx] = dataplane.LBCounters{Packets: 10, Bytes: 1500, Conns: 2}
		want[id] = true
	}
	r.mu.Unlock()
	got := r.BackendCounters()
	if len(got) != len(want) || len(got) < 3 {
		t.Fatalf("%d backends counted, want %d (>= 3): %+v", len(got), len(want), got)
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if [3]string{a.Service, a.Pool, a.Backend} == [3]string{b.Service, b.Pool, b.Backend} ||
			a.Service > b.Service || a.Service == b.Service && (a.Pool > b.Pool || a.Pool == b.Pool && a.Backend > b.Backend) {
			t.Errorf("backends %d and %d out of order (service, pool, backend): %+v, %+v", i-1, i, a, b)
		}
	}
	for _, b := range got {
		if !want[b.Service+"/"+b.Pool+"/"+b.Backend] || b.Packets != 10 || b.Bytes != 1500 || b.Conns != 2 {
			t.Errorf("backend %+v: not programmed, or not its counters", b)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lbCollector{r.BackendCounters})
	body := promcheck.Scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	promcheck.Lint(t, body)
	b0 := got[0]
	if line := `azgate_lb_backend_connections_total{backend="` + b0.Backend + `",pool="` + b0.Pool + `",service="` + b0.Service + `"} 2`; !strings.Contains(string(body), line) {
		t.Errorf("scrape lacks %s:\n%s", line, body)
	}
}

package edge

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/promcheck"
)

// TestOccupancy: a walk's counts are named (backend slots by the
// programmed backends; a slot no backend holds is left out), cut to the
// top VIPs and backends by entries, and exported as gauges that pass
// promtool.
func TestOccupancy(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("198.51.100.9")
	walk := dataplane.ConnOccupancy{Total: 160, Capacity: 1024,
		ByVIP:     map[netip.Addr]uint32{a: 100, b: 50, c: 10},
		ByBackend: map[uint32]uint32{0: 90, 1: 60, 2: 7, 9: 3}}
	slots := map[uint32]string{0: "web/main/az1-h1/g1:80", 1: "web/main/az1-h2/g1:80", 2: "api/p/az1-h3/g1:443"}
	o := occupancyFrom(walk, slots, 2, 2)
	if o.Total != 160 || o.Capacity != 1024 || len(o.VIPs) != 2 || o.VIPs[a] != 100 || o.VIPs[b] != 50 || o.VIPsLeftOut != 1 {
		t.Errorf("VIPs %v (left out %d), total %d of %d; want %s 100, %s 50, 1 left out, 160 of 1024", o.VIPs, o.VIPsLeftOut, o.Total, o.Capacity, a, b)
	}
	got := map[string]uint32{}
	for _, be := range o.Backends {
		got[be.Service+"/"+be.Pool+"/"+be.Backend] = be.Entries
	}
	if len(got) != 2 || got["web/main/az1-h1/g1:80"] != 90 || got["web/main/az1-h2/g1:80"] != 60 || o.BackendsLeftOut != 1 {
		t.Errorf("backends %v (left out %d), want web/main's two (90, 60), 1 left out", got, o.BackendsLeftOut)
	}
	promcheck.Promtool(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(OccupancyCollector(func() (*Occupancy, uint64) { return &o, 1 }))
	body := string(promcheck.Scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	promcheck.Lint(t, []byte(body))
	for _, want := range []string{
		"azgate_lb_conn_table_entries 160", "azgate_lb_conn_table_capacity 1024",
		`azgate_lb_conn_table_vip_entries{vip="198.51.100.7"} 100`,
		`azgate_lb_conn_table_backend_entries{backend="az1-h2/g1:80",pool="main",service="web"} 60`,
		"azgate_lb_conn_table_walk_errors_total 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
}

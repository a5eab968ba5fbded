package nodemetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/health/healthtest"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
)

// fullStatus is a status with every part a node reports filled in (a fake
// data plane): every series the collector can export appears in a scrape.
func fullStatus() model.NodeStatus {
	rate := uint64(7_600_000)
	return model.NodeStatus{
		AppliedRevision: 42, Routes: 3,
		Counters: map[string]model.Count{"encap_tx": {Packets: 10, Bytes: 1000}, "drop_ip_csum": {Packets: 1, Bytes: 60},
			"sync_applied": {Packets: 4}, "sync_sent": {Packets: 5, Bytes: 700}},
		EIPs:       map[string]model.EIPCounters{"198.51.100.7": {RxPackets: 5, TxPackets: 6}, "2001:db8:a::7": {RxPackets: 8, TxPackets: 9}},
		LimitDrops: map[string]model.LimitDrops{"198.51.100.8": {Source: 1, SYN: 2}},
		Firewall:   map[string]model.Count{"block-ssh": {Packets: 7, Bytes: 420}},
		Invalid:    []model.InvalidObject{{}},
		BGP: &model.BGPStatus{Announcing: true, Advertised: []string{"198.51.100.0/24"}, Failing: []string{"drained"},
			Sessions: []model.BGPSession{{Peer: "192.0.2.1", State: "established"}}},
		Sync: &model.SyncStatus{Ready: true, LagP50MS: 1, LagP99MS: 2, LagMaxMS: 3, Peers: []model.SyncPeerStatus{{Name: "edge-b", Connected: true}}},
		Bandwidth: &model.BandwidthStatus{Mode: "managed", LimitsAgeMS: 1500, Reports: 9,
			EIPs: map[string]model.BandwidthEIP{"198.51.100.7": {Mode: "managed", Limit: 8_000_000, DroppedBytes: 3000, DroppedPackets: 2, Rate: &rate}}},
		Tables:   map[string]model.TableStatus{"web/main": {Checksum: "0123456789abcdef", Backends: 3, Healthy: 2, M: 65537}},
		Monitor:  &model.MonitorStatus{Mode: "drops", Sent: 12, LostRate: 3, LostFull: 1},
		Draining: 2,
	}
}

// fakeChecks are an edge's health checks: one backend, up.
func fakeChecks() []health.TargetStats {
	return []health.TargetStats{{Service: "web", Pool: "main", Backend: "az1-h1/g1:80", Known: true, Up: true, OK: 3, LastDuration: 2 * time.Millisecond}}
}

// TestPromtool: an edge's and an agent's /metrics, scraped over HTTP from
// the handler the roles serve, pass "promtool check metrics".
func TestPromtool(t *testing.T) {
	promcheck.Promtool(t)
	for _, role := range []string{"edge", "agent"} {
		body := promcheck.Scrape(t, Handler(Registry(role, role+"-1", fullStatus, health.Collector(fakeChecks, healthtest.Durations)), ""))
		promcheck.Lint(t, body)
		if want := `azgate_routes{node="` + role + `-1",role="` + role + `"} 3`; !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s (the node label)", want)
		}
		if strings.Contains(string(body), `outcome="sync_`) {
			t.Error("connection sync's events are in azgate_dataplane_*_total")
		}
		for _, want := range []string{
			`azgate_lb_table_checksum{node="` + role + `-1",role="` + role + `",table="web/main"} 7.6310993685999e+13`, // 0x456789abcdef
			`azgate_lb_table_backends{node="` + role + `-1",role="` + role + `",state="failed",table="web/main"} 1`,
			`azgate_bandwidth_rate_bytes_per_second{eip="198.51.100.7",node="` + role + `-1",role="` + role + `"} 950000`,
			`azgate_eip_packets_total{direction="rx",eip="2001:db8:a::7",node="` + role + `-1",role="` + role + `"} 8`, // an IPv6 EIP
			`azgate_eips_draining{node="` + role + `-1",role="` + role + `"} 2`,
			`azgate_sync_events_total{event="applied",node="` + role + `-1",role="` + role + `"} 4`,
			`azgate_sync_events_total{event="sent",node="` + role + `-1",role="` + role + `"} 5`,
			`azgate_sync_sent_bytes_total{node="` + role + `-1",role="` + role + `"} 700`,
			`azgate_health_check_up{backend="az1-h1/g1:80",node="` + role + `-1",pool="main",role="` + role + `",service="web"} 1`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("scrape lacks %s", want)
			}
		}
	}
}

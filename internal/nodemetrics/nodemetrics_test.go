package nodemetrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/azgate/azgate/internal/model"
)

func TestBGPMetrics(t *testing.T) {
	got := gather(t, "edge", model.NodeStatus{BGP: &model.BGPStatus{Failing: []string{"drained", "store: unreachable for 12s (grace 10s)"},
		Sessions: []model.BGPSession{{Peer: "192.0.2.1", State: "established"}, {Peer: "192.0.2.9", State: "active"}}}})
	for k, v := range map[string]float64{
		"azgate_bgp_announcing": 0, "azgate_bgp_condition_failing,drained": 1, "azgate_bgp_condition_failing,store": 1,
		"azgate_bgp_session_established,192.0.2.1": 1, "azgate_bgp_session_established,192.0.2.9": 0,
		"azgate_bgp_session_state,192.0.2.9,active": 1, "azgate_bgp_session_state,192.0.2.9,established": 0,
		"azgate_bgp_session_state,192.0.2.1,established": 1, "azgate_bgp_session_state,192.0.2.1,idle": 0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestHandlerToken: with a token, /metrics answers 401 without it or with
// a wrong one; without a token it is open (the default).
func TestHandlerToken(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(statusCollector{role: "edge", get: func() model.NodeStatus { return model.NodeStatus{Routes: 3} }})
	for _, tc := range []struct {
		token, sent string
		code        int
	}{
		{"", "", 200},
		{"s3cret", "", 401},
		{"s3cret", "Bearer wrong", 401},
		{"s3cret", "Bearer s3cret", 200},
	} {
		srv := httptest.NewServer(Handler(reg, tc.token))
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if tc.sent != "" {
			req.Header.Set("Authorization", tc.sent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("token %q, sent %q: HTTP %d, want %d", tc.token, tc.sent, resp.StatusCode, tc.code)
		}
		if tc.code == 200 && !strings.Contains(string(body), "azgate_routes") {
			t.Errorf("token %q: no azgate_routes in %s", tc.token, body)
		}
	}
}

// TestLimitMetrics: what each address's rate limits dropped, by reason.
func TestLimitMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(statusCollector{role: "edge", get: func() model.NodeStatus {
		return model.NodeStatus{LimitDrops: map[string]model.LimitDrops{"198.51.100.7": {Source: 5, SYN: 7}}}
	}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "azgate_limit_dropped_packets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			k := ""
			for _, l := range m.GetLabel() {
				k += l.GetName() + "=" + l.GetValue() + ","
			}
			got[k] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"address=198.51.100.7,reason=source,role=edge,": 5, "address=198.51.100.7,reason=syn,role=edge,": 7}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestFirewallMetrics: each rule's counters from the status, by rule name.
func TestFirewallMetrics(t *testing.T) {
	got := gather(t, "edge", model.NodeStatus{Firewall: map[string]model.Count{"block-ssh": {Packets: 7, Bytes: 420}}})
	if got["azgate_firewall_rule_packets_total,block-ssh"] != 7 || got["azgate_firewall_rule_bytes_total,block-ssh"] != 420 {
		t.Errorf("firewall metrics %v", got)
	}
}

// TestMonitorMetrics: the monitor's events written and lost (by reason)
// as counters, its mode as a 0/1 gauge per mode; none without a monitor.
func TestMonitorMetrics(t *testing.T) {
	got := gather(t, "edge", model.NodeStatus{Monitor: &model.MonitorStatus{Mode: "trace", Sent: 12, LostRate: 3, LostFull: 1}})
	want := map[string]float64{"azgate_monitor_events_total": 12, "azgate_monitor_lost_events_total,rate_limit": 3,
		"azgate_monitor_lost_events_total,ring_full": 1, "azgate_monitor_mode,trace": 1, "azgate_monitor_mode,drops": 0, "azgate_monitor_mode,off": 0}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k := range gather(t, "edge", model.NodeStatus{}) {
		if strings.HasPrefix(k, "azgate_monitor_") {
			t.Errorf("%s without a monitor", k)
		}
	}
}

// TestBandwidthMetrics: per-EIP limit, drops and mode, the node's mode,
// the limits' age and its events.
func TestBandwidthMetrics(t *testing.T) {
	got := gather(t, "agent", model.NodeStatus{Bandwidth: &model.BandwidthStatus{Zone: "az1", Direction: "egress", Mode: "managed", LimitsAgeMS: 1500,
		Reports: 9, Ignored: 2, EIPs: map[string]model.BandwidthEIP{
			"198.51.100.7": {Package: "shop", Mode: "managed", Limit: 8_000_000, DroppedBytes: 3000, DroppedPackets: 2},
			"198.51.100.8": {Package: "shop", Mode: "static", Limit: 1_000_000}}}})
	for k, v := range map[string]float64{
		"azgate_bandwidth_managed": 1, "azgate_bandwidth_limits_age_seconds": 1.5,
		"azgate_bandwidth_events_total,reports": 9, "azgate_bandwidth_events_total,ignored": 2,
		"azgate_bandwidth_limit_bytes_per_second,198.51.100.7": 1e6, "azgate_bandwidth_limit_bytes_per_second,198.51.100.8": 125e3,
		"azgate_bandwidth_dropped_bytes_total,198.51.100.7": 3000, "azgate_bandwidth_dropped_packets_total,198.51.100.7": 2,
		"azgate_bandwidth_eip_mode,198.51.100.7,managed": 1, "azgate_bandwidth_eip_mode,198.51.100.8,static": 1,
		"azgate_bandwidth_eip_mode,198.51.100.8,managed": 0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// gather collects st's metrics as the role's collector exports them, keyed
// by name and then every label value but the role's, comma-separated.
func gather(t *testing.T, role string, st model.NodeStatus) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(statusCollector{role: role, get: func() model.NodeStatus { return st }})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "role" {
					k += "," + l.GetValue()
				}
			}
			if m.GetCounter() != nil {
				got[k] = m.GetCounter().GetValue()
			} else {
				got[k] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

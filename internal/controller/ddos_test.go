package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/ddos"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
	"github.com/azgate/azgate/internal/store"
)

// publishRates writes an edge's rate report as the edge does (leased key).
func publishRates(t *testing.T, s *Server, lease store.LeaseID, edge string, rates ...model.EIPRate) {
	t.Helper()
	kv := store.KV{Key: model.RateReportKey(edge)}
	if len(rates) > 0 {
		kv.Value, _ = json.Marshal(model.RateReport{IntervalMS: 250, At: time.Now(), Rates: rates})
	}
	if err := s.Store().WriteLeased(context.Background(), lease, []store.KV{kv}); err != nil {
		t.Fatal(err)
	}
}

func ddosEvents(t *testing.T, s *Server) api.DDoSEvents {
	t.Helper()
	var ev api.DDoSEvents
	r := call(t, s, http.MethodGet, "/v1/ddos/events", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET /v1/ddos/events: HTTP %d %s", r.code, r.body)
	}
	r.decode(t, &ev)
	return ev
}

// TestDDoSQuarantineAndRelease: rates reported by two edges are summed;
// above the trigger level for Enter rounds the EIP is quarantined (by
// ddos, the reason naming the figures), the other EIP is not; when the
// reports stop it is released after the cool-down; an operator's
// quarantine is never released; every decision is an event and counted.
func TestDDoSQuarantineAndRelease(t *testing.T) {
	s := startServer(t, Config{DDoS: DDoSConfig{Interval: 50 * time.Millisecond,
		Detector: ddos.Config{Threshold: ddos.Rates{PPS: 10_000, BPS: -1, SYN: 1000}, Enter: 2, Cooldown: 500 * time.Millisecond}}})
	doc := `{"edgesets":[{"name":"p","prefixes":["198.51.100.0/24"],"edges":[{"name":"e1","underlay":"198.18.0.1"},{"name":"e2","underlay":"198.18.0.2"}]},
		{"name":"q","role":"quarantine","prefixes":[],"edges":[{"name":"e3","underlay":"198.18.0.3"}]}],
		"eips":[{"address":"198.51.100.7"},{"address":"198.51.100.8"},{"address":"198.51.100.9"}]}`
	if r := call(t, s, http.MethodPost, "/v1/apply", doc); r.code != http.StatusOK {
		t.Fatalf("apply: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, http.MethodPost, "/v1/quarantines", `{"address":"198.51.100.9","reason":"by hand"}`); r.code != http.StatusCreated {
		t.Fatalf("operator quarantine: HTTP %d %s", r.code, r.body)
	}
	ctx := context.Background()
	lease, err := s.Store().Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 2 x 6,000 pps and 2 x 800 SYN/s: each edge alone is below the
	// thresholds, the sum is above.
	t0 := time.Now()
	publishRates(t, s, lease, "e1", model.EIPRate{Address: mustAddr("198.51.100.7"), PPS: 6000, SYNPS: 800},
		model.EIPRate{Address: mustAddr("198.51.100.8"), PPS: 1500}, model.EIPRate{Address: mustAddr("198.51.100.9"), PPS: 90000})
	publishRates(t, s, lease, "e2", model.EIPRate{Address: mustAddr("198.51.100.7"), PPS: 6000, SYNPS: 800},
		model.EIPRate{Address: mustAddr("198.51.100.8"), PPS: 1}, model.EIPRate{Address: mustAddr("198.51.100.8"), PPS: 1e9})
	// Not counted: a key of no edge of the state, and e2's second line
	// for 198.51.100.8 (an address counts once).
	publishRates(t, s, lease, "stray", model.EIPRate{Address: mustAddr("198.51.100.8"), PPS: 1e9, SYNPS: 1e9})
	// Nor an edge's rates for an address its set does not carry (the
	// quarantine set's edge, about an address not quarantined).
	publishRates(t, s, lease, "e3", model.EIPRate{Address: mustAddr("198.51.100.8"), PPS: 1e9})
	// Enter counts rounds with new reports: keep reporting.
	var q *model.Quarantine
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(60 * time.Millisecond) {
		if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.7", nil); r.code == http.StatusOK {
			q = &model.Quarantine{}
			r.decode(t, q)
			break
		}
		publishRates(t, s, lease, "e2", model.EIPRate{Address: mustAddr("198.51.100.7"), PPS: 6000, SYNPS: 800})
	}
	if q == nil {
		t.Fatalf("198.51.100.7 not quarantined within 5 s; events %+v", ddosEvents(t, s).Events)
	}
	t.Logf("quarantined %v after the first report: %q", time.Since(t0), q.Reason)
	if q.By != "ddos" || !strings.Contains(q.Reason, "pps 12000 > 10000") || !strings.Contains(q.Reason, "SYN/s 1600 > 1000") {
		t.Errorf("quarantine %+v: want by ddos and a reason naming the figures", q)
	}
	if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.8", nil); r.code != http.StatusNotFound {
		t.Errorf("198.51.100.8 (1,500 pps): HTTP %d, want 404", r.code)
	}
	var rates api.DDoSRates
	call(t, s, http.MethodGet, "/v1/ddos/rates", nil).decode(t, &rates)
	// The stray key's 1e9 pps for 198.51.100.8 is not counted; the
	// prefix set's edges still count for the quarantined addresses (the
	// set they came from).
	// Edges: the members of a set whose reports are read (e1, e2, e3).
	if rates.Edges != 3 || len(rates.Rates) != 3 || rates.Rates[1].Address != mustAddr("198.51.100.7") || rates.Rates[1].PPS != 12000 || rates.Rates[1].Edges != 2 ||
		rates.Rates[2].Address != mustAddr("198.51.100.8") || rates.Rates[2].PPS != 1500 {
		t.Errorf("rates %+v", rates)
	}

	// The flood stops: the edges delete their reports.
	publishRates(t, s, lease, "e1")
	publishRates(t, s, lease, "e2")
	publishRates(t, s, lease, "stray")
	publishRates(t, s, lease, "e3")
	t1 := time.Now()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.7", nil); r.code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not released within 5 s of the reports stopping (cool-down 500 ms)")
		}
	}
	if d := time.Since(t1); d < 500*time.Millisecond {
		t.Errorf("released %v after the reports stopped, before the 500 ms cool-down", d)
	}
	if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.9", nil); r.code != http.StatusOK {
		t.Errorf("operator's quarantine of 198.51.100.9: HTTP %d, want it kept", r.code)
	}
	ev := ddosEvents(t, s)
	if !ev.Enabled || !ev.Acting || len(ev.Events) != 2 {
		t.Fatalf("events %+v: want enabled, acting, 2 events", ev)
	}
	if e := ev.Events[0]; e.Action != "quarantine" || e.Address != mustAddr("198.51.100.7") || e.PPS != 12000 || e.SYNPS != 1600 ||
		e.LimitPPS != 10000 || e.Edges != 2 || e.Seq != 1 {
		t.Errorf("first event %+v", e)
	}
	if e := ev.Events[1]; e.Action != "release" || e.Seq != 2 || !strings.Contains(e.Reason, "below the release marks") {
		t.Errorf("second event %+v", e)
	}
	var since api.DDoSEvents
	call(t, s, http.MethodGet, "/v1/ddos/events?since=1", nil).decode(t, &since)
	if len(since.Events) != 1 || since.Events[0].Seq != 2 {
		t.Errorf("since=1: %+v", since.Events)
	}
	if r := call(t, s, http.MethodGet, "/v1/ddos/events?since=x", nil); r.code != http.StatusBadRequest {
		t.Errorf("since=x: HTTP %d, want 400", r.code)
	}
	if r := call(t, s, http.MethodGet, "/v1/ddos/events", nil, ""); r.code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", r.code)
	}
	m := call(t, s, http.MethodGet, "/metrics", nil).body
	promcheck.Lint(t, m)
	for _, want := range []string{`azgate_controller_ddos_decisions_total{action="quarantine"} 1`, `azgate_controller_ddos_decisions_total{action="release"} 1`,
		"azgate_controller_ddos_quarantined 0", "azgate_controller_ddos_acting 1"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestDDoSOneActs: of two controllers on one store exactly one decides,
// and only once an edge reports rates.
func TestDDoSOneActs(t *testing.T) {
	cfg := Config{DDoS: DDoSConfig{Interval: 50 * time.Millisecond, Owner: store.ClaimOptions{TTL: time.Second, Margin: 200 * time.Millisecond}}}
	a := startServer(t, cfg)
	cfg.EtcdEndpoints = []string{"unix://" + a.cfg.DataDir + "/etcd.sock"}
	cfg.TxnOps = 0
	b := startServer(t, cfg)
	// Nobody campaigns before there is something to decide on.
	time.Sleep(200 * time.Millisecond)
	if ddosEvents(t, a).Acting || ddosEvents(t, b).Acting {
		t.Error("a controller acts with no rate report and no automatic quarantine")
	}
	lease, err := a.Store().Grant(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	publishRates(t, a, lease, "e1", model.EIPRate{Address: mustAddr("198.51.100.7"), PPS: 2000})
	one := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && one < 10; time.Sleep(50 * time.Millisecond) {
		x, y := ddosEvents(t, a).Acting, ddosEvents(t, b).Acting
		if x && y {
			t.Fatal("both controllers act")
		}
		if x != y {
			one++
		}
	}
	if one < 10 {
		t.Fatal("no controller acts within 5 s")
	}
}

//go:build !node

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/ddos"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// TestCLIDDoS: `azgate ddos rates` shows what the edges report, summed;
// `azgate ddos events` the automatic quarantine with its figures, and
// `quarantine list` says by ddos.
func TestCLIDDoS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		DDoS: controller.DDoSConfig{Interval: 50 * time.Millisecond, Detector: ddos.Config{Threshold: ddos.Rates{PPS: 1000}, Enter: 1, Cooldown: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	out := must(t, s, "ddos", "events")
	if !strings.Contains(out, "(no decisions)") {
		t.Errorf("events before any report:\n%s", out)
	}
	must(t, s, "set", "create", "p", "--prefix", "198.51.100.0/24", "--edge", "name=edge-a1,underlay=198.18.0.1")
	must(t, s, "set", "create", "quar", "--role", "quarantine", "--edge", "name=edge-q1,underlay=198.18.0.32")
	must(t, s, "eip", "create", "198.51.100.7")
	lease, err := s.Store().Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(model.RateReport{IntervalMS: 250, At: time.Now(), Rates: []model.EIPRate{{Address: netip.MustParseAddr("198.51.100.7"), PPS: 4321, SYNPS: 4000}}})
	if err := s.Store().WriteLeased(ctx, lease, []store.KV{{Key: model.RateReportKey("edge-a1"), Value: b}}); err != nil {
		t.Fatal(err)
	}
	// The controller learns the report from its watch: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out = must(t, s, "ddos", "rates")
		if strings.Contains(out, "198.51.100.7") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report is not in the rates within 5 s:\n%s", out)
		}
	}
	if !strings.Contains(out, "4321") {
		t.Errorf("rates:\n%s", out)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out = must(t, s, "ddos", "events")
		if strings.Contains(out, "quarantine") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no quarantine event within 5 s:\n%s", out)
		}
	}
	if !strings.Contains(out, "198.51.100.7") || !strings.Contains(out, "pps 4321 > 1000") {
		t.Errorf("events:\n%s", out)
	}
	out = must(t, s, "quarantine", "list")
	if !strings.Contains(out, "ddos") || !strings.Contains(out, "pps 4321 > 1000") {
		t.Errorf("quarantine list:\n%s", out)
	}
	out = must(t, s, "--json", "ddos", "events", "--since", "1")
	var ev struct{ Events []any }
	if err := json.Unmarshal([]byte(out), &ev); err != nil || len(ev.Events) != 0 {
		t.Errorf("--since 1 --json: %v\n%s", err, out)
	}
}

func TestParseDDoSOverrides(t *testing.T) {
	got, err := parseDDoSOverrides([]string{"198.51.100.7:pps=100000,syn=-1", "198.51.100.8:bps=5e9"})
	if err != nil {
		t.Fatal(err)
	}
	if got[netip.MustParseAddr("198.51.100.7")] != (ddos.Rates{PPS: 100000, SYN: -1}) || got[netip.MustParseAddr("198.51.100.8")] != (ddos.Rates{BPS: 5e9}) {
		t.Errorf("parsed %+v", got)
	}
	for _, bad := range []string{"198.51.100.7", "198.51.100.7:", "x:pps=1", "198.51.100.7:pps=0", "198.51.100.7:pps=NaN",
		"198.51.100.7:rate=5", "198.51.100.7:pps"} {
		if _, err := parseDDoSOverrides([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parseDDoSOverrides([]string{"198.51.100.7:pps=1", "198.51.100.7:syn=1"}); err == nil {
		t.Error("an address given twice: no error")
	}
}

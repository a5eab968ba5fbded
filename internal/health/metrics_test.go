package health

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
)

// TestStatsMetrics: a real TCP check of a loopback listener shows in
// Stats (its verdict, its probes, the last probe's duration) and in the
// collector's series, which pass promtool; a closed listener turns the
// verdict down and counts failed probes.
func TestStatsMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := Target{Service: "web", Pool: "main", Backend: "az1-h1/g1:80", Addr: addrOf(t, ln.Addr().String()),
		Check: model.HealthCheck{Type: "tcp", Interval: model.Duration(20 * time.Millisecond), Timeout: model.Duration(10 * time.Millisecond), Rise: 1, Fall: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, &memPub{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Update([]Target{target})
	one := func() TargetStats {
		st := m.Stats()
		if len(st) != 1 {
			t.Fatalf("stats of %d targets, want 1", len(st))
		}
		return st[0]
	}
	waitFor(t, func() bool { s := one(); return s.Known && s.OK > 0 })
	if s := one(); !s.Up || s.Service != "web" || s.Backend != "az1-h1/g1:80" || s.LastDuration <= 0 {
		t.Fatalf("stats %+v, want web's backend up with a probe duration", s)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(m.Stats))
	body := string(promcheck.Scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	promcheck.Lint(t, []byte(body))
	for _, want := range []string{
		`azgate_health_check_up{backend="az1-h1/g1:80",pool="main",service="web"} 1`,
		`azgate_health_check_probes_total{backend="az1-h1/g1:80",pool="main",result="ok",service="web"}`,
		`azgate_health_check_duration_seconds{backend="az1-h1/g1:80",pool="main",service="web"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
	ln.Close()
	waitFor(t, func() bool { s := one(); return !s.Up && s.Failed > 0 })
	m.Update(nil)
	if len(m.Stats()) != 0 {
		t.Error("a target no longer checked is still in Stats")
	}
}

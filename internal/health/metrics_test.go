package health

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
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
	reg.MustRegister(Collector(m.Stats, m.Durations))
	body := string(promcheck.Scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	promcheck.Lint(t, []byte(body))
	for _, want := range []string{
		`azgate_health_check_up{backend="az1-h1/g1:80",pool="main",service="web"} 1`,
		`azgate_health_check_probes_total{backend="az1-h1/g1:80",pool="main",result="ok",service="web"}`,
		`azgate_health_check_duration_seconds{backend="az1-h1/g1:80",pool="main",service="web"}`,
		`azgate_health_check_probe_duration_seconds_bucket{pool="main",result="ok",service="web",le="5"}`,
		`azgate_health_check_probe_duration_seconds_count{pool="main",result="ok",service="web"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, body)
		}
	}
	ln.Close()
	waitFor(t, func() bool { s := one(); return !s.Up && s.Failed > 0 })
	d := m.Durations()
	if len(d) != 2 || !d[0].OK || d[1].OK || d[0].Count == 0 || d[1].Count == 0 {
		t.Fatalf("durations %+v, want web/main's ok and failed probes", d)
	}
	m.Update(nil)
	if len(m.Stats()) != 0 {
		t.Error("a target no longer checked is still in Stats")
	}
	if d := m.Durations(); len(d) != 0 {
		t.Errorf("durations %+v of a pool no longer checked", d)
	}
}

// TestDurations: probes fall in the buckets of their duration
// (cumulative), one histogram per pool and result, and a pool's
// histograms go with its last checked target (another pool's stay).
func TestDurations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, &memPub{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	web := Target{Service: "web", Pool: "main", Backend: "b1"}
	api := Target{Service: "api", Pool: "p", Backend: "b2"}
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 7 * time.Second} {
		m.observe(ctx, web, true, d)
	}
	m.observe(ctx, web, false, time.Second)
	m.observe(ctx, api, true, 40*time.Millisecond)
	got := m.Durations()
	if len(got) != 3 || got[0].Service != "api" || got[1].Service != "web" || !got[1].OK || got[2].OK {
		t.Fatalf("durations %+v, want api ok, web ok, web failed", got)
	}
	ok := got[1]
	// Buckets .001 .0025 .005 .01 ... 5: 0.5 ms and 1 ms in the first
	// (le is inclusive), 3 ms from .005 on, 7 s in none (count only).
	want := []uint64{2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}
	if !slices.Equal(ok.Buckets, want) || ok.Count != 4 || math.Abs(ok.Sum-7.0045) > 1e-9 {
		t.Errorf("web ok: buckets %v count %d sum %g, want %v, 4, 7.0045", ok.Buckets, ok.Count, ok.Sum, want)
	}
	if f := got[2]; f.Count != 1 || f.Buckets[8] != 0 || f.Buckets[9] != 1 {
		t.Errorf("web failed: %+v, want one probe in le=1", f)
	}
	// web's pool no longer checked (api's checker starts and may add
	// its own failed probes of an unset address: api's only are kept).
	m.Update([]Target{api})
	onlyAPI := func(what string) {
		got := m.Durations()
		if len(got) == 0 || got[0].Service != "api" || !got[0].OK || got[0].Count != 1 {
			t.Errorf("%s: durations %+v, want api's", what, got)
		}
		for _, d := range got {
			if d.Service != "api" {
				t.Errorf("%s: durations %+v, want api's only", what, got)
			}
		}
	}
	onlyAPI("after web's pool went")
	stopped, stop := context.WithCancel(ctx)
	stop()
	m.observe(stopped, web, true, time.Millisecond) // a stopped checker's last probe
	onlyAPI("after a stopped checker's probe")
}

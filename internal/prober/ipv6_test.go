package prober

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
	"github.com/azgate/azgate/internal/pathd"
)

// listen6 opens a TCP listener on [::1] that accepts and closes, or
// skips the test without an IPv6 loopback.
func listen6(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): the hops listen on [::1]", err)
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
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestProberOverIPv6: every hop IPv6. The prober measures a relay and an
// origin listening on [::1] (TCP connects to [::1]:PORT) and one whose
// port is closed; it finds pathd through a real GSLB server on [::1]
// whose record has only an IPv6 target (the A query gets NODATA, the
// AAAA one ::1), reports to a real pathd server listening on [::1], and
// pathd computes the edge's paths from those reports.
func TestProberOverIPv6(t *testing.T) {
	relay, origin := listen6(t), listen6(t)
	closed := listen6(t)
	closedAddr := closed.Addr().String()
	closed.Close()

	pdAddr := startPathd6(t)
	dnsSrv := startGSLB(t, netip.IPv6Loopback())
	_, port, _ := net.SplitHostPort(pdAddr)
	p, err := New(Config{Node: "edge-1", Probes: 3, Interval: time.Second, Timeout: 500 * time.Millisecond,
		Targets: []Target{
			{Name: "r1", Addr: relay.Addr().String()},
			{Name: "o1", Addr: origin.Addr().String(), Origin: true},
			{Name: "o-down", Addr: closedAddr, Origin: true},
		},
		ReportURL: "http://pathd.example:" + port + "/v1/reports", DNS: []string{dnsSrv.UDPAddr().String()}, Token: pathdTok})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Round(ctx)
	ms, _ := p.peek(10)
	got := map[string]bool{}
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: invalid measurement: %v", m.To, err)
		}
		got[m.To] = m.Available && m.Loss == 0 && m.RTT > 0
	}
	if !got["r1"] || !got["o1"] || got["o-down"] || len(got) != 3 {
		t.Fatalf("measurements %+v: want r1 and o1 available without loss, o-down unavailable", ms)
	}

	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.sendLoop(sctx) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Queued > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := p.Stats(); s.Queued != 0 || s.Sent != 3 || s.Addr != netip.IPv6Loopback() || s.Resolves < 1 {
		t.Fatalf("stats %+v: want 3 sent to pathd at ::1 (resolved by AAAA)", s)
	}

	// pathd computed the direct path edge-1 → o1 from the reports.
	var path pathd.PathReply
	deadline = time.Now().Add(5 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+pdAddr+"/v1/paths?edge=edge-1&origin=o1", nil)
		req.Header.Set("Authorization", "Bearer "+pathdTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(b, &path); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/paths from [::1]: %d %s", resp.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Join(path.Path, ",") != "edge-1,o1" || path.Relays != 0 || path.CostMS <= 0 {
		t.Errorf("path %+v, want edge-1,o1 direct with a cost", path)
	}
}

const pathdTok = "prober-token-0123456789abcdef"

// startPathd6 starts a real pathd server (region eu) listening on [::1]
// and returns its address.
func startPathd6(t *testing.T) string {
	t.Helper()
	pd, err := pathd.New(pathd.Config{Region: "eu", Instance: "s1", Token: pathdTok, Recompute: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, ran := make(chan struct{}), make(chan struct{})
	go func() { defer close(served); pd.Serve(ctx, ln, "", "") }()
	go func() { defer close(ran); pd.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-served; <-ran })
	return ln.Addr().String()
}

// startGSLB starts a real GSLB server on [::1] for pathd.example. with one
// region (eu) holding vips (one per family).
func startGSLB(t *testing.T, vips ...netip.Addr) *dnsserver.Server {
	t.Helper()
	var targets []gslb.Target
	for _, v := range vips {
		targets = append(targets, gslb.Target{VIP: v, Region: "eu", Order: 1})
	}
	cat, err := gslb.Compile(gslb.Config{Zones: []gslb.Zone{{
		Origin: "example.", NS: []string{"ns1.example."},
		SOA:     gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minimum: 30},
		Records: []gslb.Record{{Name: "ns1", Type: "AAAA", Value: "2001:db8::53"}},
		GSLB:    []gslb.GSLBRecord{{Name: "pathd", TTL: 5, Policy: gslb.PolicyFailover, Targets: targets}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := dnsserver.NewServer(dnsserver.ServerConfig{Addr: "[::1]:0"}, dnsserver.NewHandler(cat, nil, nil))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return srv
}

// TestReportFamily: pathd.example. is dual-stack (127.0.0.1 and ::1) but
// pathd listens on [::1] only, as for a prober whose host has IPv6 only.
// The default (A first) resolves 127.0.0.1 and its POSTs fail, queued;
// with ReportFamily "ipv6" (AAAA first) the prober resolves ::1 and
// pathd acknowledges every report.
func TestReportFamily(t *testing.T) {
	relay := listen6(t)
	pdAddr := startPathd6(t)
	dnsSrv := startGSLB(t, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	_, port, _ := net.SplitHostPort(pdAddr)
	for _, tc := range []struct {
		family string
		addr   netip.Addr
		sent   bool
	}{
		{"", netip.MustParseAddr("127.0.0.1"), false},
		{"ipv6", netip.IPv6Loopback(), true},
	} {
		p, err := New(Config{Node: "edge-1", Probes: 1, Targets: []Target{{Name: "r1", Addr: relay.Addr().String()}},
			ReportURL: "http://pathd.example:" + port + "/v1/reports", DNS: []string{dnsSrv.UDPAddr().String()},
			ReportFamily: tc.family, Token: pathdTok, PostTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		p.Round(ctx)
		done := make(chan struct{})
		go func() { defer close(done); p.sendLoop(ctx) }()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if s := p.Stats(); s.Sent == 1 || s.PostErrors >= 2 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		<-done
		s := p.Stats()
		if s.Addr != tc.addr || (s.Sent == 1) != tc.sent || (s.Queued == 0) != tc.sent {
			t.Errorf("family %q: %+v, want the report host at %v, sent %v", tc.family, s, tc.addr, tc.sent)
		}
	}
	if err := (Config{Node: "e", Targets: []Target{{Name: "r", Addr: "192.0.2.1:80"}}, ReportURL: "http://x/", ReportFamily: "inet6"}).Validate(); err == nil || !strings.Contains(err.Error(), `report family "inet6": want ipv4 or ipv6`) {
		t.Errorf("ReportFamily inet6: %v", err)
	}
}

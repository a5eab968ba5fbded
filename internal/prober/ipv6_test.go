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

	const tok = "prober-token-0123456789abcdef"
	pd, err := pathd.New(pathd.Config{Region: "eu", Instance: "s1", Token: tok, Recompute: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	pdAddr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() { defer close(served); pd.Serve(ctx, ln, "", "") }()
	go pd.Run(ctx)
	defer func() { cancel(); <-served }()

	cat, err := gslb.Compile(gslb.Config{Zones: []gslb.Zone{{
		Origin: "example.", NS: []string{"ns1.example."},
		SOA:     gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minimum: 30},
		Records: []gslb.Record{{Name: "ns1", Type: "AAAA", Value: "2001:db8::53"}},
		GSLB: []gslb.GSLBRecord{{Name: "pathd", TTL: 5, Policy: gslb.PolicyFailover, Targets: []gslb.Target{
			{VIP: netip.IPv6Loopback(), Region: "eu", Order: 1},
		}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	dnsSrv := dnsserver.NewServer(dnsserver.ServerConfig{Addr: "[::1]:0"}, dnsserver.NewHandler(cat, nil, nil))
	if err := dnsSrv.Start(); err != nil {
		t.Fatal(err)
	}
	defer dnsSrv.Shutdown(context.Background())

	_, port, _ := net.SplitHostPort(pdAddr)
	p, err := New(Config{Node: "edge-1", Probes: 3, Interval: time.Second, Timeout: 500 * time.Millisecond,
		Targets: []Target{
			{Name: "r1", Addr: relay.Addr().String()},
			{Name: "o1", Addr: origin.Addr().String(), Origin: true},
			{Name: "o-down", Addr: closedAddr, Origin: true},
		},
		ReportURL: "http://pathd.example:" + port + "/v1/reports", DNS: []string{dnsSrv.UDPAddr().String()}, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
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
		req.Header.Set("Authorization", "Bearer "+tok)
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

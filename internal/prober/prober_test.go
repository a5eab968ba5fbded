package prober

import (
	"context"
	"github.com/azgate/azgate/internal/promcheck"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
)

// listen opens a TCP listener on loopback that accepts and closes.
func listen(t *testing.T) (string, func()) {
	t.Helper()
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
	return ln.Addr().String(), func() { ln.Close() }
}

func TestValidate(t *testing.T) {
	ok := Config{Node: "edge-1", Targets: []Target{{Name: "r1", Addr: "192.0.2.1:80"}}, ReportURL: "http://pathd.example:8080/v1/reports", DNS: []string{"127.0.0.1:53"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	v6 := Config{Node: "edge-1", Targets: []Target{{Name: "r1", Addr: "[2001:db8::1]:443"}, {Name: "o1", Addr: "[2001:db8:1::80]:80", Origin: true}},
		ReportURL: "http://[2001:db8::70]:7090/v1/reports", DNS: []string{"[2001:db8::53]:53"}}
	if err := v6.Validate(); err != nil {
		t.Fatalf("valid IPv6 config: %v", err)
	}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Node = "" }, "node"},
		{func(c *Config) { c.Node = "a b" }, "node"},
		{func(c *Config) { c.Targets = nil }, "targets: none"},
		{func(c *Config) { c.Targets = append(c.Targets, c.Targets[0]) }, "listed twice"},
		{func(c *Config) { c.Targets[0].Name = "edge-1" }, "own node"},
		{func(c *Config) { c.Targets[0].Addr = "relay.example:80" }, "want IP:port"},
		{func(c *Config) { c.Targets[0].Addr = "2001:db8::1:80" }, "an IPv6 address in brackets"},
		{func(c *Config) { c.Targets[0].Addr = "[fe80::1%eth0]:80" }, "no IPv6 zone (%eth0)"},
		{func(c *Config) { c.Targets[0].Addr = "[::ffff:192.0.2.1]:80" }, "write IPv4 as IPv4 (192.0.2.1)"},
		{func(c *Config) { c.Targets[0].Addr = "[ff02::1]:80" }, "not a unicast"},
		{func(c *Config) { c.ReportURL = "http://2001:db8::80:8080/v1/reports" }, `invalid port ":db8::80:8080"`},
		{func(c *Config) { c.ReportURL = "http://[fe80::1%25eth0]:8080/v1/reports" }, "no IPv6 zone"},
		{func(c *Config) { c.Interval = time.Millisecond }, "interval"},
		{func(c *Config) { c.Probes = 101 }, "probes"},
		{func(c *Config) { c.Timeout = time.Hour }, "timeout"},
		{func(c *Config) { c.ReportURL = "ftp://x/" }, "report URL"},
		{func(c *Config) { c.ReportURL = "http://u:p@x/" }, "user info"},
		{func(c *Config) { c.DNS = []string{"dns.example:53"} }, "DNS server"},
		{func(c *Config) { c.Batch = 20_000 }, "batch"},
	} {
		c2 := ok
		c2.Targets = append([]Target(nil), ok.Targets...)
		c.mod(&c2)
		if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v", c.want, err)
		}
	}
}

// TestMeasure: a listening target is available with no loss; a closed
// port is unavailable; a target that fails every other connect shows 50 %
// loss and the successes' RTT.
func TestMeasure(t *testing.T) {
	up, closeUp := listen(t)
	defer closeUp()
	down, closeDown := listen(t)
	closeDown() // nothing listens there any more: connects are refused
	var n atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "192.0.2.9:80" { // half the connects fail
			if n.Add(1)%2 == 0 {
				return nil, &net.OpError{Op: "dial", Err: context.DeadlineExceeded}
			}
			addr = up
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	p, err := New(Config{Node: "edge-1", Probes: 4, Interval: time.Second, Timeout: 500 * time.Millisecond,
		Targets:   []Target{{Name: "r-up", Addr: up}, {Name: "r-down", Addr: down}, {Name: "o-half", Addr: "192.0.2.9:80", Origin: true}},
		ReportURL: "http://192.0.2.80:8080/v1/reports", Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	p.Round(context.Background())
	if s := p.Stats(); s.Rounds != 1 || s.Measurements != 3 || s.Queued != 3 {
		t.Fatalf("stats %+v", s)
	}
	ms, _ := p.peek(10)
	got := map[string]int{}
	for i, m := range ms {
		got[m.To] = i
		if err := m.Validate(); err != nil {
			t.Errorf("%s: invalid measurement: %v", m.To, err)
		}
		if m.From != "edge-1" {
			t.Errorf("%s: from %q", m.To, m.From)
		}
	}
	if m := ms[got["r-up"]]; !m.Available || m.Loss != 0 || m.RTT <= 0 || m.ToOrigin {
		t.Errorf("r-up: %+v", m)
	}
	if m := ms[got["r-down"]]; m.Available {
		t.Errorf("r-down: %+v, want unavailable", m)
	}
	if m := ms[got["o-half"]]; !m.Available || m.Loss != 0.5 || !m.ToOrigin {
		t.Errorf("o-half: %+v, want available with loss 0.5", m)
	}
}

// TestQueueBound: past MaxQueue the oldest measurements go and are
// counted; an acknowledgement removes only what was sent.
func TestQueueBound(t *testing.T) {
	up, closeUp := listen(t)
	defer closeUp()
	p, err := New(Config{Node: "e", Probes: 1, Targets: []Target{{Name: "r", Addr: up}}, MaxQueue: 3, Batch: 2,
		ReportURL: "http://192.0.2.80/v1/reports"})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p.Round(context.Background())
	}
	if s := p.Stats(); s.Queued != 3 || s.Dropped != 2 {
		t.Fatalf("queue %d dropped %d, want 3 and 2", s.Queued, s.Dropped)
	}
	_, last := p.peek(2)
	p.Round(context.Background()) // overflow while "sending": drops one of the two peeked
	p.ack(last, 2, false)
	if s := p.Stats(); s.Queued != 2 || s.Sent != 2 || s.Dropped != 3 {
		t.Fatalf("after ack: %+v, want 2 queued (the newest), 2 sent, 3 dropped", s)
	}
}

// TestResolveThroughGSLB: the report host is resolved through a real
// GSLB server, cached for the answer's TTL (clamped to MinTTL), and
// resolved again at once after invalidate (a failed POST); a move is
// counted.
func TestResolveThroughGSLB(t *testing.T) {
	health := &flipHealth{}
	cat, err := gslb.Compile(gslb.Config{Zones: []gslb.Zone{{
		Origin: "example.", NS: []string{"ns1.example."},
		SOA:     gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minimum: 30},
		Records: []gslb.Record{{Name: "ns1", Type: "A", Value: "192.0.2.53"}},
		GSLB: []gslb.GSLBRecord{{Name: "pathd", TTL: 1, Policy: gslb.PolicyFailover, Targets: []gslb.Target{
			{VIP: netip.MustParseAddr("192.0.2.101"), Region: "r1", Weight: 1, Order: 1},
			{VIP: netip.MustParseAddr("192.0.2.102"), Region: "r2", Weight: 1, Order: 2},
		}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := dnsserver.NewServer(dnsserver.ServerConfig{Addr: "127.0.0.1:0"}, dnsserver.NewHandler(cat, nil, health))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	p, err := New(Config{Node: "e", Targets: []Target{{Name: "r", Addr: "192.0.2.1:80"}},
		ReportURL: "http://pathd.example:8080/v1/reports", DNS: []string{srv.UDPAddr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := p.resolve(ctx)
	if err != nil || a != netip.MustParseAddr("192.0.2.101") {
		t.Fatalf("resolve: %v %v", a, err)
	}
	health.down.Store(true) // r1 down: the GSLB answers r2 now
	if a, _ := p.resolve(ctx); a != netip.MustParseAddr("192.0.2.101") {
		t.Errorf("within the TTL: %v, want the cached 192.0.2.101", a)
	}
	p.res.invalidate()
	if a, err := p.resolve(ctx); err != nil || a != netip.MustParseAddr("192.0.2.102") {
		t.Errorf("after invalidate: %v %v, want 192.0.2.102", a, err)
	}
	if s := p.Stats(); s.Resolves != 2 || s.Moves != 1 || s.Addr != netip.MustParseAddr("192.0.2.102") {
		t.Errorf("stats %+v, want 2 resolutions and 1 move", s)
	}
	promcheck.Lint(t, promcheck.Scrape(t, promhttp.HandlerFor(NewRegistry(p), promhttp.HandlerOpts{})))
	// A dead DNS: the last address is kept and the error counted.
	dead, err := New(Config{Node: "e", Targets: []Target{{Name: "r", Addr: "192.0.2.1:80"}},
		ReportURL: "http://pathd.example:8080/v1/reports", DNS: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.resolve(ctx); err == nil {
		t.Error("resolving through a dead DNS server succeeded")
	}
}

// flipHealth marks 192.0.2.101 down when down is set.
type flipHealth struct{ down atomic.Bool }

func (h *flipHealth) Up(a netip.Addr) bool {
	return !(h.down.Load() && a == netip.MustParseAddr("192.0.2.101"))
}

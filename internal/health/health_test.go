package health

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

func addrOf(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestProbes(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ok.Close()
	httpAddr := addrOf(t, ok.Listener.Addr().String())

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo(buf[:n], from)
		}
	}()
	// A port nothing listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := addrOf(t, l.Addr().String())
	l.Close()
	silentUDP, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer silentUDP.Close()

	cases := []struct {
		name string
		addr netip.AddrPort
		c    model.HealthCheck
		up   bool
	}{
		{"tcp open", httpAddr, model.HealthCheck{Type: "tcp"}, true},
		{"tcp refused", closed, model.HealthCheck{Type: "tcp"}, false},
		{"http status matches", httpAddr, model.HealthCheck{Type: "http", Path: "/healthz", Status: 200}, true},
		{"http status differs", httpAddr, model.HealthCheck{Type: "http", Path: "/", Status: 200}, false},
		{"http expecting 503", httpAddr, model.HealthCheck{Type: "http", Path: "/", Status: 503}, true},
		{"udp answers", addrOf(t, udp.LocalAddr().String()), model.HealthCheck{Type: "udp", Send: "ping"}, true},
		{"udp silent", addrOf(t, silentUDP.LocalAddr().String()), model.HealthCheck{Type: "udp"}, false},
		{"command exits 0", httpAddr, model.HealthCheck{Type: "command", Command: "addr-is-local"}, true},
		{"command fails", httpAddr, model.HealthCheck{Type: "command", Command: "fails"}, false},
		{"command not listed", httpAddr, model.HealthCheck{Type: "command", Command: "true"}, false},
	}
	cmds := testCommands(t,
		`addr-is-local=/bin/sh -c test${IFS}"$AZGATE_BACKEND_ADDR"${IFS}=${IFS}127.0.0.1`,
		"fails=/bin/false")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := Probe(ctx, c.addr, c.c, cmds)
			if (err == nil) != c.up {
				t.Fatalf("probe says %v, want up=%v", err, c.up)
			}
		})
	}
}

type memPub struct {
	mu      sync.Mutex
	got     []model.HealthReport
	removed []string // Target.id()s
}

func (m *memPub) Remove(t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removed = append(m.removed, t.id())
}

func (m *memPub) removals() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.removed...)
}

func (m *memPub) Publish(_ context.Context, _ Target, r model.HealthReport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, r)
	return nil
}

func (m *memPub) reports() []model.HealthReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]model.HealthReport(nil), m.got...)
}

// TestRiseFall: a verdict is published once per change of state, after
// rise successes or fall failures in a row.
func TestRiseFall(t *testing.T) {
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
	target := Target{Service: "s", Pool: "p", Backend: "b", Addr: addrOf(t, ln.Addr().String()),
		Check: model.HealthCheck{Type: "tcp", Interval: model.Duration(20 * time.Millisecond), Timeout: model.Duration(10 * time.Millisecond), Rise: 2, Fall: 3}}
	pub := &memPub{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Update([]Target{target})
	waitFor(t, func() bool { return len(pub.reports()) == 1 })
	if r := pub.reports()[0]; !r.Up {
		t.Fatalf("first verdict %+v, want up", r)
	}
	ln.Close()
	waitFor(t, func() bool { return len(pub.reports()) == 2 })
	if r := pub.reports()[1]; r.Up || r.Detail == "" {
		t.Fatalf("second verdict %+v, want down with a reason", r)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(pub.reports()); n != 2 {
		t.Fatalf("%d reports: a steady state must not be republished", n)
	}
	m.Update(nil)
	if m.Targets() != 0 {
		t.Fatal("checker not stopped")
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestManagerRemoves: a target Update drops has its verdict removed; a
// changed one does not (its new checker replaces it); when the manager's
// context ends every target's verdict is removed.
func TestManagerRemoves(t *testing.T) {
	pub := &memPub{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx, pub, slog.New(slog.DiscardHandler))
	mk := func(b string) Target {
		return Target{Service: "s", Pool: "p", Backend: b, Addr: addrOf(t, "127.0.0.1:1"),
			Check: model.HealthCheck{Type: "tcp", Interval: model.Duration(time.Hour)}}
	}
	a, b, c := mk("a"), mk("b"), mk("c")
	m.Update([]Target{a, b, c})
	m.Update([]Target{a, c})
	if got := pub.removals(); len(got) != 1 || got[0] != b.id() {
		t.Fatalf("removed %v, want b", got)
	}
	c.Check.Rise = 3
	m.Update([]Target{a, c})
	if got := pub.removals(); len(got) != 1 {
		t.Fatalf("removed %v: a changed target keeps its verdict", got)
	}
	cancel()
	waitFor(t, func() bool { return len(pub.removals()) == 3 })
	if m.Targets() != 0 {
		t.Fatal("checkers left after the manager stopped")
	}
}

// TestProbesIPv6: every check type reaches a backend at ::1 on real
// listeners on [::1]: TCP connect, HTTP status (the request to
// [::1]:PORT), a UDP reply, and a command given the address without
// brackets.
func TestProbesIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): the backends listen on [::1]", err)
	}
	var host atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host.Store(r.Host)
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	httpAddr := addrOf(t, srv.Listener.Addr().String())
	udp, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo(buf[:n], from)
		}
	}()
	l, _ := net.Listen("tcp6", "[::1]:0")
	closed := addrOf(t, l.Addr().String())
	l.Close()
	cmds := testCommands(t, `addr-is-v6-lo=/bin/sh -c test${IFS}"$AZGATE_BACKEND_ADDR"${IFS}=${IFS}::1`)
	for _, c := range []struct {
		name string
		addr netip.AddrPort
		c    model.HealthCheck
		up   bool
	}{
		{"tcp open", httpAddr, model.HealthCheck{Type: "tcp"}, true},
		{"tcp refused", closed, model.HealthCheck{Type: "tcp"}, false},
		{"http 200", httpAddr, model.HealthCheck{Type: "http", Path: "/healthz", Status: 200}, true},
		{"http 503", httpAddr, model.HealthCheck{Type: "http", Path: "/", Status: 200}, false},
		{"udp answers", addrOf(t, udp.LocalAddr().String()), model.HealthCheck{Type: "udp", Send: "ping"}, true},
		{"command sees ::1", httpAddr, model.HealthCheck{Type: "command", Command: "addr-is-v6-lo"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := Probe(ctx, c.addr, c.c, cmds); (err == nil) != c.up {
				t.Fatalf("probe of %v says %v, want up=%v", c.addr, err, c.up)
			}
		})
	}
	if h, _ := host.Load().(string); h != httpAddr.String() {
		t.Errorf("HTTP Host %q, want %q", h, httpAddr)
	}
}

// TestDirectProbeIPv6: an IPv6 nat backend (issue 21) is checked as the
// manager checks any target without a tunnel (Target.dial, directly):
// "tcp" and "udp" to an IPv6 address on [::1] reach real listeners, and
// a closed port and a silent UDP port are down.
func TestDirectProbeIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): the backend listens on [::1]", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udp.WriteTo(buf[:n], from)
		}
	}()
	silent, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	l, _ := net.Listen("tcp6", "[::1]:0")
	closed := addrOf(t, l.Addr().String())
	l.Close()
	for _, c := range []struct {
		name string
		addr netip.AddrPort
		typ  string
		up   bool
	}{
		{"tcp open", addrOf(t, ln.Addr().String()), "tcp", true},
		{"tcp refused", closed, "tcp", false},
		{"udp answers", addrOf(t, udp.LocalAddr().String()), "udp", true},
		{"udp silent", addrOf(t, silent.LocalAddr().String()), "udp", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			tg := Target{Service: "web6", Pool: "p", Backend: c.addr.String(), Addr: c.addr, Check: model.HealthCheck{Type: c.typ}}
			if err := ProbeWith(ctx, tg.dial, tg.Addr, tg.Check, nil); (err == nil) != c.up {
				t.Fatalf("probe of %v says %v, want up=%v", c.addr, err, c.up)
			}
		})
	}
}

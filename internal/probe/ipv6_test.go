package probe

import (
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var loopback6 = netip.MustParseAddr("::1")

// listen6 opens a TCP listener on [::1] (skipping the test without an
// IPv6 loopback).
func listen6(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): the targets listen on [::1]", err)
	}
	return ln
}

// TestIPv6Targets: TCP, HTTP and HTTPS checks of targets at ::1 reach
// real listeners on [::1]: the HTTP request goes to [::1]:PORT (the Host
// header brackets the address), HTTPS verifies the certificate's IP SAN
// ::1; a closed TCP port goes down at the Fall-th failure and Up(::1)
// then reads down.
func TestIPv6Targets(t *testing.T) {
	tcpLn := listen6(t)
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var hosts, hostSeen atomic.Value // string: the last HTTP request's Host, and one without a port
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts.Store(r.Host)
		if !strings.Contains(r.Host, "]:") {
			hostSeen.Store(r.Host)
		}
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	newSrv := func(tls bool) *httptest.Server {
		s := httptest.NewUnstartedServer(handler)
		s.Listener.Close()
		s.Listener = listen6(t)
		if tls {
			s.StartTLS()
		} else {
			s.Start()
		}
		t.Cleanup(s.Close)
		return s
	}
	plain, secure := newSrv(false), newSrv(true)
	port := func(s string) uint16 { return netip.MustParseAddrPort(s).Port() }
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate()) // IP SANs 127.0.0.1 and ::1
	spec := func(k Kind, port uint16, path string) Spec {
		return Spec{Kind: k, Port: port, Path: path, Interval: iv, Timeout: 150 * time.Millisecond, Rise: 1, Fall: 2}
	}
	m := NewMonitor(Options{RootCAs: pool, Logger: quiet})
	targets := []Target{
		{Key: "tcp", Addr: loopback6, Spec: spec(TCP, port(tcpLn.Addr().String()), "")},
		{Key: "http", Addr: loopback6, Spec: spec(HTTP, port(plain.Listener.Addr().String()), "/healthz")},
		{Key: "https", Addr: loopback6, Spec: spec(HTTPS, port(secure.Listener.Addr().String()), "/healthz")},
		{Key: "http-503", Addr: loopback6, Spec: spec(HTTP, port(plain.Listener.Addr().String()), "/")},
	}
	// Host given as an IPv6 literal: the Host header brackets it, the TLS
	// server name is the address (the certificate's IP SAN).
	hostSpec := spec(HTTPS, port(secure.Listener.Addr().String()), "/healthz")
	hostSpec.Host = "::1"
	targets = append(targets, Target{Key: "https-host-v6", Addr: loopback6, Spec: hostSpec})
	for _, tg := range targets {
		if err := tg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Set(targets); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m)
	for _, k := range []string{"tcp", "http", "https", "https-host-v6"} {
		s := waitState(t, m, k, 5*time.Second, func(s State) bool { return s.Up })
		if s.LastErr != "" {
			t.Errorf("%s: up with error %q", k, s.LastErr)
		}
	}
	s := waitState(t, m, "http-503", 5*time.Second, func(s State) bool { return s.Checks >= 2 })
	if s.Up || s.LastErr != "HTTP 503" {
		t.Errorf("http-503: %+v, want down with HTTP 503", s)
	}
	if h, _ := hosts.Load().(string); !strings.HasPrefix(h, "[::1]") {
		t.Errorf("HTTP Host header %q, want [::1] or [::1]:PORT", h)
	}
	if h, _ := hostSeen.Load().(string); h != "[::1]" {
		t.Errorf("Host header with Spec.Host ::1: %q, want [::1]", h)
	}
	if m.Up(loopback6) {
		t.Error("Up(::1) with http-503 down")
	}
	m.Set(targets[:3]) // tcp, http, https: every ::1 target up
	waitState(t, m, "tcp", 5*time.Second, func(s State) bool { return s.Up })
	if !m.Up(loopback6) {
		t.Fatal("Up(::1) false with every ::1 target up")
	}
	tcpLn.Close()
	s = waitState(t, m, "tcp", 5*time.Second, func(s State) bool { return !s.Up })
	if s.Failures != 2 || !strings.Contains(s.LastErr, "refused") || !strings.Contains(s.LastErr, "[::1]:") {
		t.Errorf("tcp after close: %+v, want down at the 2nd refused connect to [::1]", s)
	}
	if m.Up(loopback6) {
		t.Error("Up(::1) with the tcp target down")
	}
}

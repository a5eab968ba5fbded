package probe

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	quiet    = slog.New(slog.NewTextHandler(io.Discard, nil))
	loopback = netip.MustParseAddr("127.0.0.1")
)

// runMonitor runs m until the test ends (and checks that Run returns).
func runMonitor(t *testing.T, m *Monitor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return 5 s after its context ended")
		}
	})
}

// events collects OnChange calls.
type events struct {
	ch   chan State
	busy atomic.Int32 // calls in progress: never more than one
	hook func(State)  // runs inside OnChange (reads server counters)
}

func newEvents() *events { return &events{ch: make(chan State, 64)} }

func (e *events) onChange(s State) {
	if e.busy.Add(1) != 1 {
		panic("OnChange called concurrently")
	}
	defer e.busy.Add(-1)
	if e.hook != nil {
		e.hook(s)
	}
	e.ch <- s
}

func (e *events) next(t *testing.T, timeout time.Duration) State {
	t.Helper()
	select {
	case s := <-e.ch:
		return s
	case <-time.After(timeout):
		t.Fatalf("no state change within %v", timeout)
		return State{}
	}
}

func (e *events) none(t *testing.T) {
	t.Helper()
	select {
	case s := <-e.ch:
		t.Fatalf("unexpected state change: %+v", s)
	default:
	}
}

// waitState polls m until cond holds for key, at most timeout.
func waitState(t *testing.T, m *Monitor, key string, timeout time.Duration, cond func(State) bool) State {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, ok := m.State(key)
		if ok && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("target %s: condition not met within %v: %+v", key, timeout, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func addrPort(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// iv is the tests' check interval: short, with timeouts long enough that
// a loaded machine does not fail a loopback check spuriously.
const iv = 200 * time.Millisecond

// TestTCP: a listener opened and closed moves the target up after Rise
// successes and down at exactly the Fall-th failure.
func TestTCP(t *testing.T) {
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
	ap := addrPort(t, ln.Addr())
	ev := newEvents()
	m := NewMonitor(Options{OnChange: ev.onChange, Logger: quiet})
	if err := m.Set([]Target{{Key: "redis", Addr: loopback, Spec: Spec{Kind: TCP, Port: ap.Port(), Interval: iv, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 3}}}); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.State("redis"); s.Up || s.Checks != 0 {
		t.Fatalf("before any check: %+v, want down (InitialUp false) and no checks", s)
	}
	runMonitor(t, m)
	up := ev.next(t, 5*time.Second)
	if !up.Up || up.Checks != 2 || up.Failures != 0 || up.LastErr != "" {
		t.Fatalf("up after the 2nd success: %+v", up)
	}
	ln.Close()
	down := ev.next(t, 5*time.Second)
	if down.Up || down.Failures != 3 || !strings.Contains(down.LastErr, "refused") {
		t.Fatalf("down at the 3rd failure: %+v", down)
	}
	if !down.Since.After(up.Since) {
		t.Fatalf("Since %v not after the up's %v", down.Since, up.Since)
	}
	if m.Up(loopback) {
		t.Fatal("Up(127.0.0.1) with its only target down")
	}
	ev.none(t)
}

// httpServer answers according to its mode and counts what it served.
type httpServer struct {
	*httptest.Server
	mode   atomic.Value // string: "ok", "fail", "hang", "redirect", "flap"
	served sync.Map     // mode -> *atomic.Int64
	last   atomic.Int64 // unix nanos of the last answer written
	flaps  atomic.Int64
	lost   atomic.Int64 // requests to the redirect's target
}

func (h *httpServer) count(mode string) int64 {
	v, _ := h.served.LoadOrStore(mode, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (h *httpServer) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/elsewhere" {
		h.lost.Add(1)
		w.WriteHeader(500)
		return
	}
	mode := h.mode.Load().(string)
	v, _ := h.served.LoadOrStore(mode, new(atomic.Int64))
	switch mode {
	case "hang":
		// Until the probe gives up (bounded: the test's server closes).
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		v.(*atomic.Int64).Add(1)
		return
	case "redirect":
		v.(*atomic.Int64).Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	case "fail":
		v.(*atomic.Int64).Add(1)
		h.last.Store(time.Now().UnixNano())
		w.WriteHeader(500)
	case "flap":
		v.(*atomic.Int64).Add(1)
		if h.flaps.Add(1)%2 == 0 {
			w.WriteHeader(503)
		} else {
			io.WriteString(w, strings.Repeat("x", 64<<10)) // more than the probe reads
		}
	default:
		v.(*atomic.Int64).Add(1)
		io.WriteString(w, "ok")
	}
}

func newHTTPServer(t *testing.T, tls bool) *httpServer {
	h := &httpServer{}
	h.mode.Store("ok")
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(h.handle))
	// The probes' failed handshakes are expected: keep them out of the log.
	h.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tls {
		h.StartTLS()
	} else {
		h.Start()
	}
	t.Cleanup(h.Close)
	return h
}

func (h *httpServer) port(t *testing.T) uint16 { return addrPort(t, h.Listener.Addr()).Port() }

// TestHTTP: 200 → up at the Rise-th success, 500 → down at exactly the
// Fall-th failure (within one interval of it), a timeout is a failure, a
// redirect is an answer (not followed).
func TestHTTP(t *testing.T) {
	srv := newHTTPServer(t, false)
	ev := newEvents()
	var atOK, atFail, atHang int64
	var lagMax atomic.Int64
	ev.hook = func(s State) {
		atOK, atFail, atHang = srv.count("ok"), srv.count("fail"), srv.count("hang")
		if !s.Up && s.LastErr == "HTTP 500" {
			lagMax.Store(time.Now().UnixNano() - srv.last.Load())
		}
	}
	m := NewMonitor(Options{OnChange: ev.onChange, Logger: quiet})
	spec := Spec{Kind: HTTP, Port: srv.port(t), Path: "/healthz", Interval: iv, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 3}
	if err := m.Set([]Target{{Key: "app", Addr: loopback, Spec: spec}}); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m)

	if s := ev.next(t, 5*time.Second); !s.Up || atOK != 2 || s.LastRTT <= 0 {
		t.Fatalf("up: %+v after %d answers 200, want 2", s, atOK)
	}
	srv.mode.Store("fail")
	s := ev.next(t, 5*time.Second)
	if s.Up || atFail != 3 || s.LastErr != "HTTP 500" {
		t.Fatalf("down: %+v after %d answers 500, want exactly 3", s, atFail)
	}
	// The change is made at the 3rd failing check itself: well within one
	// interval of the answer that reached the threshold.
	if lag := time.Duration(lagMax.Load()); lag > iv {
		t.Fatalf("OnChange %v after the Fall-th failing answer, want within one interval (%v)", lag, iv)
	}

	okBefore := srv.count("ok")
	srv.mode.Store("ok")
	if s := ev.next(t, 5*time.Second); !s.Up || atOK-okBefore != 2 {
		t.Fatalf("up again: %+v after %d answers 200, want 2", s, atOK-okBefore)
	}

	srv.mode.Store("hang")
	s = ev.next(t, 5*time.Second)
	if s.Up || atHang < 2 || atHang > 3 {
		// The 3rd hung request's handler may not have seen its cancel yet.
		t.Fatalf("down on timeouts: %+v (hung requests ended: %d)", s, atHang)
	}
	if !strings.Contains(strings.ToLower(s.LastErr), "timeout") && !strings.Contains(s.LastErr, "deadline") {
		t.Fatalf("LastErr %q: want a timeout", s.LastErr)
	}

	srv.mode.Store("redirect")
	s = ev.next(t, 5*time.Second)
	if !s.Up || s.LastErr != "" {
		t.Fatalf("a 302 is an answer: %+v", s)
	}
	if n := srv.lost.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

// TestHTTPS: certificates are verified against Host or the address unless
// Insecure.
func TestHTTPS(t *testing.T) {
	srv := newHTTPServer(t, true)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	port := srv.port(t)
	spec := func(host string, insecure bool) Spec {
		return Spec{Kind: HTTPS, Port: port, Host: host, Insecure: insecure, Interval: 2 * iv, Rise: 1, Fall: 1}
	}
	m := NewMonitor(Options{RootCAs: pool, Logger: quiet})
	if err := m.Set([]Target{
		{Key: "by-address", Addr: loopback, Spec: spec("", false)},         // the test cert has IP SAN 127.0.0.1
		{Key: "by-name", Addr: loopback, Spec: spec("example.com", false)}, // and example.com
		{Key: "wrong-name", Addr: loopback, Spec: spec("pathd.example", false)},
		{Key: "insecure", Addr: loopback, Spec: spec("pathd.example", true)},
	}); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m)
	for _, k := range []string{"by-address", "by-name", "insecure"} {
		waitState(t, m, k, 3*time.Second, func(s State) bool { return s.Up })
	}
	s := waitState(t, m, "wrong-name", 3*time.Second, func(s State) bool { return strings.Contains(s.LastErr, "certificate") })
	if s.Up || s.Failures != s.Checks || !strings.Contains(s.LastErr, "certificate") {
		t.Fatalf("wrong-name: %+v, want every check failing", s)
	}

	// Without the test CA (the system's roots) nothing verifies.
	m2 := NewMonitor(Options{Logger: quiet, InitialUp: true})
	if err := m2.Set([]Target{{Key: "untrusted", Addr: loopback, Spec: spec("example.com", false)}}); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m2)
	// (The first check may time out loading the system's roots.)
	s = waitState(t, m2, "untrusted", 3*time.Second, func(s State) bool { return strings.Contains(s.LastErr, "certificate") })
	if s.Up || s.Failures != s.Checks {
		t.Fatalf("untrusted: %+v", s)
	}
}

// TestFlapping: a target answering 200 and 503 in turn never reaches
// rise=fall=2, so its state never changes, whichever it started in.
func TestFlapping(t *testing.T) {
	for _, initial := range []bool{true, false} {
		t.Run(fmt.Sprint("initial_up=", initial), func(t *testing.T) {
			srv := newHTTPServer(t, false)
			srv.mode.Store("flap")
			ev := newEvents()
			m := NewMonitor(Options{OnChange: ev.onChange, InitialUp: initial, Logger: quiet})
			if err := m.Set([]Target{{Key: "flappy", Addr: loopback, Spec: Spec{Kind: HTTP, Port: srv.port(t), Interval: iv, Rise: 2, Fall: 2}}}); err != nil {
				t.Fatal(err)
			}
			runMonitor(t, m)
			s := waitState(t, m, "flappy", 15*time.Second, func(s State) bool { return s.Checks >= 12 })
			if s.Up != initial || s.Failures < 5 || s.Failures > 7 {
				t.Fatalf("after %d alternating checks: %+v, want Up=%v throughout", s.Checks, s, initial)
			}
			ev.none(t)
			if m.Up(loopback) != initial {
				t.Fatalf("Up(127.0.0.1) = %v", m.Up(loopback))
			}
		})
	}
}

// TestConcurrencyBound: 60 targets whose checks take 60 ms, on a 1 s
// ticker, with MaxConcurrent 3: the server never sees more than 3
// requests at once (and does see 3: the bound is what limits; the
// demand, 3.6 check-seconds a second, exceeds it).
//
// The server's count measures the monitor's only while no check gives
// up: a check that times out frees its slot at once, but the server's
// handler still runs (it cannot know), so the next check would make the
// server see 4. Hence a timeout (1 s) far above the handler's 60 ms,
// and the test fails, saying so, if any check failed all the same.
func TestConcurrencyBound(t *testing.T) {
	var inflight, peak, served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(60 * time.Millisecond)
		inflight.Add(-1)
		served.Add(1)
	}))
	t.Cleanup(srv.Close)
	port := addrPort(t, srv.Listener.Addr()).Port()
	m := NewMonitor(Options{MaxConcurrent: 3, Logger: quiet})
	var ts []Target
	for i := range 60 {
		ts = append(ts, Target{Key: fmt.Sprintf("t%02d", i), Addr: loopback, Spec: Spec{Kind: HTTP, Port: port, Path: fmt.Sprintf("/%d", i), Interval: time.Second, Timeout: time.Second}})
	}
	if err := m.Set(ts); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m)
	deadline := time.Now().Add(10 * time.Second)
	for served.Load() < 60 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if served.Load() < 60 {
		t.Fatalf("only %d checks served in 10 s", served.Load())
	}
	p := peak.Load()
	for _, s := range m.States() {
		if s.Failures > 0 {
			t.Fatalf("check of %s failed (%s): the server's peak (%d) no longer measures the monitor's bound", s.Key, s.LastErr, p)
		}
	}
	if p != 3 {
		t.Fatalf("peak concurrency %d, want exactly the bound 3", p)
	}
}

// TestSet: declarative updates; an invalid set changes nothing; Up per
// address.
func TestSet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	open := addrPort(t, ln.Addr()).Port()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := addrPort(t, gone.Addr()).Port()
	gone.Close()

	other := netip.MustParseAddr("127.0.0.2")
	tcp := func(port uint16) Spec { return Spec{Kind: TCP, Port: port, Interval: iv, Rise: 1, Fall: 1} }
	m := NewMonitor(Options{InitialUp: true, Logger: quiet})
	good := []Target{
		{Key: "a-open", Addr: loopback, Spec: tcp(open)},
		{Key: "b-closed", Addr: loopback, Spec: tcp(closed)},
	}
	if err := m.Set(good); err != nil {
		t.Fatal(err)
	}
	runMonitor(t, m)
	waitState(t, m, "b-closed", 3*time.Second, func(s State) bool { return !s.Up })
	waitState(t, m, "a-open", 3*time.Second, func(s State) bool { return s.Checks >= 2 })
	if m.Up(loopback) {
		t.Fatal("Up(127.0.0.1): one of its targets is down")
	}
	if !m.Up(other) {
		t.Fatal("Up of an address no target checks: want true")
	}

	// Invalid: nothing changes.
	before := m.States()
	for _, bad := range []struct {
		ts  []Target
		err string
	}{
		{[]Target{good[0], {Key: "c", Addr: other, Spec: Spec{Kind: TCP, Port: open, Interval: 10 * time.Millisecond}}}, `probe target "c": probe interval 10ms`},
		{[]Target{good[0], good[0]}, `probe target "a-open": key listed twice`},
		{[]Target{{Key: "d", Addr: other, Spec: Spec{Kind: HTTP, Path: "x"}}}, `probe target "d": probe path "x"`},
	} {
		if err := m.Set(bad.ts); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Fatalf("Set: %v, want %q", err, bad.err)
		}
	}
	after := m.States()
	if len(after) != 2 || after[0].Key != "a-open" || after[1].Key != "b-closed" || after[1].Up || after[0].Checks < before[0].Checks {
		t.Fatalf("an invalid Set changed the targets: %+v", after)
	}

	// The same targets again: state kept, checks go on.
	s0, _ := m.State("a-open")
	if err := m.Set(good); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.State("a-open"); s.Checks < s0.Checks || s.Since != s0.Since {
		t.Fatalf("unchanged target lost its state: %+v then %+v", s0, s)
	}
	// A changed spec keeps the state; a changed address starts afresh;
	// removing the down target makes its address up at once.
	ch := good[0]
	ch.Spec.Interval = 2 * iv
	moved := good[1]
	moved.Addr = other
	if err := m.Set([]Target{ch, moved}); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.State("a-open"); !s.Up || s.Checks < s0.Checks {
		t.Fatalf("changed spec: %+v", s)
	}
	if s, _ := m.State("b-closed"); !s.Up || s.Checks != 0 || s.Addr != other {
		t.Fatalf("readdressed target: %+v, want a fresh state at InitialUp", s)
	}
	if !m.Up(loopback) {
		t.Fatal("Up(127.0.0.1) after its down target moved away")
	}
	if err := m.Set(nil); err != nil {
		t.Fatal(err)
	}
	if len(m.States()) != 0 || !m.Up(other) {
		t.Fatalf("after Set(nil): %+v", m.States())
	}
}

// TestOnChangeSerialized: ten targets going down together call OnChange
// one at a time (events.onChange panics otherwise), once each; the
// Options.Dial given makes every connection.
func TestOnChangeSerialized(t *testing.T) {
	srv := newHTTPServer(t, false)
	ev := newEvents()
	ev.hook = func(State) { time.Sleep(5 * time.Millisecond) }
	var dials atomic.Int64
	d := &net.Dialer{}
	m := NewMonitor(Options{InitialUp: true, OnChange: ev.onChange, Logger: quiet,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}})
	var ts []Target
	for i := range 10 {
		ts = append(ts, Target{Key: fmt.Sprintf("t%d", i), Addr: loopback, Spec: Spec{Kind: HTTP, Port: srv.port(t), Interval: iv, Rise: 1, Fall: 1}})
	}
	if err := m.Set(ts); err != nil {
		t.Fatal(err)
	}
	srv.mode.Store("fail")
	runMonitor(t, m)
	seen := map[string]bool{}
	for range 10 {
		s := ev.next(t, 5*time.Second)
		if s.Up || seen[s.Key] {
			t.Fatalf("change %+v (seen %v)", s, seen)
		}
		seen[s.Key] = true
	}
	var checks uint64
	for _, s := range m.States() {
		checks += s.Checks
	}
	if n := dials.Load(); n < int64(checks) {
		t.Fatalf("%d dials through Options.Dial for %d checks", n, checks)
	}
}

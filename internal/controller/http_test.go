package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/azgate/azgate/internal/promcheck"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// TestSlowloris: a client that sends part of its headers, or trickles
// them, is cut off by the header timeout.
func TestSlowloris(t *testing.T) {
	s := startServer(t, Config{ReadHeaderTimeout: 300 * time.Millisecond})
	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("trickle=%v", trickle), func(t *testing.T) {
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
			if trickle {
				go func() {
					for range 100 {
						if _, err := io.WriteString(c, "X"); err != nil {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}()
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(c) // the server's 408, if any, then EOF
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection was still open after %v", time.Since(start))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cut off after %v, want about 300ms", d)
			}
		})
	}
}

// holdConn opens a TCP connection from local (nil: any) that has been
// served one authenticated request and stays kept alive.
func holdConn(t *testing.T, s *Server, local net.Addr) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: local}).Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", s.Token())
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("held connection: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetReadDeadline(time.Time{})
	return c
}

// TestConnectionCap: with MaxConns 2 held by two TCP clients, a third
// TCP one waits until one of them closes; the unix socket has its own
// cap and serves meanwhile (the local admin is never locked out by TCP
// clients).
func TestConnectionCap(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	s := startServer(t, Config{MaxConns: 2, Listen: "127.0.0.1:0", ListenUnix: sock})
	held := []net.Conn{holdConn(t, s, nil), holdConn(t, s, nil)}
	if n := s.conns.open.Load(); n != 2 {
		t.Errorf("%d open connections, want 2", n)
	}
	tcp := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	unix := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	if resp, err := tcp.Get("http://" + s.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a third TCP connection was served beyond the cap")
	}
	resp, err := unix.Get("http://unix/metrics")
	if err != nil {
		t.Fatalf("the unix socket is locked out by TCP connections: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	promcheck.Lint(t, b)
	if !strings.Contains(string(b), `azgate_controller_api_connections{listener="tcp"} 2`) {
		t.Errorf("metrics lack azgate_controller_api_connections{listener=\"tcp\"} 2")
	}
	held[0].Close()
	waitFor(t, func() bool {
		resp, err := tcp.Get("http://" + s.Addr() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestConnectionCapUnix: the unix socket's own cap holds too.
func TestConnectionCapUnix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	s := startServer(t, Config{MaxConns: 1, ListenUnix: sock})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return s.unixConns.open.Load() == 1 })
	unix := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	if resp, err := unix.Get("http://unix/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a second unix connection was served beyond the cap of 1")
	}
	c.Close()
	waitFor(t, func() bool {
		resp, err := unix.Get("http://unix/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestConnectionCapPerSource: a source address at its cap has its next
// connection closed at once (counted), while another source is served.
func TestConnectionCapPerSource(t *testing.T) {
	s := startServer(t, Config{MaxConns: 8, MaxConnsPerSource: 2})
	holdConn(t, s, nil)
	holdConn(t, s, nil)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("third connection from 127.0.0.1: read %d bytes, %v; want it closed (EOF)", n, err)
	}
	if n := s.conns.refused.Load(); n != 1 {
		t.Errorf("%d refused connections, want 1", n)
	}
	// 127.0.0.2 is another source (all of 127/8 is loopback).
	holdConn(t, s, &net.TCPAddr{IP: net.ParseIP("127.0.0.2")})
	if n := s.conns.open.Load(); n != 3 {
		t.Errorf("%d open connections, want 3", n)
	}
}

// TestConnectionCapPerSourceDefault: max(8, MaxConns/8), at most MaxConns.
func TestConnectionCapPerSourceDefault(t *testing.T) {
	for _, c := range []struct{ max, want int }{{256, 32}, {16, 8}, {4, 4}, {1000, 125}} {
		cfg, err := Config{MaxConns: c.max}.check()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MaxConnsPerSource != c.want {
			t.Errorf("MaxConns %d: per source %d, want %d", c.max, cfg.MaxConnsPerSource, c.want)
		}
	}
	if _, err := (Config{MaxConns: 4, MaxConnsPerSource: 5}).check(); err == nil || !strings.Contains(err.Error(), "max connections per source 5") {
		t.Errorf("per source above the cap: %v", err)
	}
}

// TestUnauthenticatedCloses: a request without the token (/healthz,
// /metrics, a 401) ends its connection, so that keep-alive cannot pin
// slots; one with the token keeps it.
func TestUnauthenticatedCloses(t *testing.T) {
	s := startServer(t, Config{})
	for _, req := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n",
		"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !resp.Close {
			t.Errorf("%q: HTTP %d without Connection: close", strings.Fields(req)[1], resp.StatusCode)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%q: connection still open after the answer (%v)", strings.Fields(req)[1], err)
		}
		c.Close()
	}
	c := holdConn(t, s, nil)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", s.Token())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.Close {
		t.Errorf("authenticated /healthz: %v, close %v", err, resp != nil && resp.Close)
	}
}

// TestBodyLimit: a body of the limit is taken, one byte more is a 413
// naming the flag.
func TestBodyLimit(t *testing.T) {
	const limit = 4096
	s := startServer(t, Config{MaxBodyBytes: limit})
	doc := "azs:\n  - name: az1\n#"
	fits := doc + strings.Repeat("x", limit-len(doc))
	if r := call(t, s, "POST", "/v1/apply", fits); r.code != 200 {
		t.Errorf("body of %d bytes: HTTP %d %s", len(fits), r.code, r.body)
	}
	r := call(t, s, "POST", "/v1/apply", fits+"x")
	if e := r.apiError(t); r.code != 413 || !strings.Contains(e.Error, "larger than 4096 bytes") || !strings.Contains(e.Error, "--max-body-bytes") {
		t.Errorf("body of %d bytes: HTTP %d %s", len(fits)+1, r.code, r.body)
	}
}

// TestBodyLimitFitsMillionEIPs measures the document the control-plane
// benchmark applies (internal/bench/control.go: 1,000 hosts x 1,000
// guests, 1,000,000 bound EIPs) as the CLI sends it (compact JSON) and
// holds the default limit to at least three times it.
func TestBodyLimitFitsMillionEIPs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 116 MiB document")
	}
	doc := &model.Document{AZs: []model.AZ{{Name: "az1"}}}
	for h := range 1000 {
		host := model.Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})}
		for g := range 1000 {
			host.Guests = append(host.Guests, model.Guest{Name: fmt.Sprintf("g%d", g),
				Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(model.VSIDMin + g)})
		}
		doc.Hosts = append(doc.Hosts, host)
	}
	doc.EdgeSets = []model.EdgeSet{{Name: "load", Prefixes: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")},
		Edges: []model.EdgeNode{{Name: "load-edge", Underlay: netip.MustParseAddr("198.19.255.1")}}}}
	for i := range 1_000_000 {
		a := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)})
		doc.EIPs = append(doc.EIPs, model.EIP{Address: a, Binding: &model.Binding{Host: fmt.Sprintf("h%d", i/1000), Guest: fmt.Sprintf("g%d", i%1000)}})
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1M-EIP document: %d bytes (%.1f MiB) of JSON; default limit %d MiB", len(b), float64(len(b))/(1<<20), DefaultMaxBodyBytes>>20)
	if 3*int64(len(b)) > DefaultMaxBodyBytes {
		t.Errorf("the default body limit %d is less than 3 x the %d bytes of a 1M-EIP document", DefaultMaxBodyBytes, len(b))
	}
}

// TestErrorListCapped: a document with 250 mistakes answers 422 with the
// first 100 field errors and the count of the others.
func TestErrorListCapped(t *testing.T) {
	s := startServer(t, Config{})
	var doc strings.Builder
	doc.WriteString("azs:\n")
	for i := range 250 {
		fmt.Fprintf(&doc, "  - name: Bad_%d\n", i)
	}
	r := call(t, s, "POST", "/v1/apply", doc.String())
	e := r.apiError(t)
	if r.code != 422 || len(e.Fields) != 100 || e.Omitted != 150 || !strings.Contains(e.Error, "and 150 more") || e.Fields[99].Field != "azs[99].name" {
		t.Errorf("HTTP %d, %d fields, %d omitted: %s", r.code, len(e.Fields), e.Omitted, e.Error)
	}
	if len(r.body) > 64<<10 {
		t.Errorf("a %d-byte answer", len(r.body))
	}
}

// TestReadDuringCommit holds a commit in flight (the store call has not
// even started) and reads meanwhile: the reads answer with the last
// committed state, and only then is the commit let go.
func TestReadDuringCommit(t *testing.T) {
	s := startServer(t, Config{})
	if r := call(t, s, "POST", "/v1/azs", model.AZ{Name: "az1"}); r.code != 201 {
		t.Fatalf("HTTP %d %s", r.code, r.body)
	}
	before := s.view.revision()
	inCommit, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the server's: a failure must not leave the commit held
	s.beforeCommit = func(int) {
		close(inCommit)
		<-release
	}
	done := make(chan reply, 1)
	go func() { done <- call(t, s, "POST", "/v1/azs", model.AZ{Name: "az2"}) }()
	<-inCommit
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string, string) {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+s.Token())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s while a commit is in flight: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(api.RevisionHeader)
	}
	code, body, rev := get("/v1/azs")
	if code != 200 || !strings.Contains(body, `"az1"`) || strings.Contains(body, `"az2"`) || rev != fmt.Sprint(before) {
		t.Errorf("list during the commit: HTTP %d rev %s %s; want az1 alone at %d", code, rev, body, before)
	}
	if code, _, _ := get("/v1/azs/az2"); code != 404 {
		t.Errorf("az2 during its commit: HTTP %d, want 404 (not committed yet)", code)
	}
	if code, _, _ := get("/v1/status"); code != 200 {
		t.Errorf("status during the commit: HTTP %d", code)
	}
	select {
	case r := <-done:
		t.Fatalf("the write finished while held: HTTP %d", r.code)
	default:
	}
	letGo()
	r := <-done
	s.beforeCommit = nil
	if r.code != 201 {
		t.Fatalf("the held write: HTTP %d %s", r.code, r.body)
	}
	code, body, rev = get("/v1/azs")
	if code != 200 || !strings.Contains(body, `"az2"`) || rev == fmt.Sprint(before) {
		t.Errorf("after the commit: HTTP %d rev %s %s", code, rev, body)
	}
}

// TestWriteTimeoutAfterLongCommit: the write timeout counts from the
// answer, so a commit longer than it still gets its answer through.
func TestWriteTimeoutAfterLongCommit(t *testing.T) {
	s := startServer(t, Config{WriteTimeout: 300 * time.Millisecond})
	s.beforeCommit = func(int) { time.Sleep(800 * time.Millisecond) }
	if r := call(t, s, "POST", "/v1/azs", model.AZ{Name: "az1"}); r.code != 201 {
		t.Errorf("HTTP %d %s", r.code, r.body)
	}
}

// TestStaleReloadIgnored: a full reload at an older revision than the
// view's (a lagging etcd member) does not replace the view; one at the
// same or a newer revision does, and the watch's older events are
// skipped.
func TestStaleReloadIgnored(t *testing.T) {
	v := newView()
	state := func(azs ...string) *model.State {
		st := model.NewState()
		for _, a := range azs {
			st.Set(&model.AZ{Name: a})
		}
		return st
	}
	v.handle(state("az1", "az2"), 10, nil, true)
	v.handle(state("az1"), 7, nil, true)
	if v.rev != 10 || v.st.Len(model.KindAZ) != 2 || v.staleReloads.Load() != 1 {
		t.Fatalf("after an older reload: rev %d, %d AZs, %d stale", v.rev, v.st.Len(model.KindAZ), v.staleReloads.Load())
	}
	// The watch that follows the stale reload replays 8..10: skipped.
	v.handle(nil, 9, []store.Event{{Kind: model.KindAZ, Key: "az2", Rev: 9}}, false)
	if v.rev != 10 || v.st.Len(model.KindAZ) != 2 {
		t.Errorf("an event older than the view was applied: rev %d, %d AZs", v.rev, v.st.Len(model.KindAZ))
	}
	v.handle(nil, 11, []store.Event{{Kind: model.KindAZ, Key: "az3", Obj: &model.AZ{Name: "az3"}, Rev: 11}}, false)
	if v.rev != 11 || v.st.Len(model.KindAZ) != 3 {
		t.Errorf("a newer event: rev %d, %d AZs", v.rev, v.st.Len(model.KindAZ))
	}
	v.handle(state("az9"), 12, nil, true)
	if _, ok := v.st.Get(model.KindAZ, "az9"); v.rev != 12 || !ok || v.st.Len(model.KindAZ) != 1 {
		t.Errorf("a newer reload did not replace the view: rev %d, %d AZs", v.rev, v.st.Len(model.KindAZ))
	}
}

// TestLargeBodiesOneAtATime: while one request with a large body is being
// served (its commit held), a second large one waits; reads go on.
func TestLargeBodiesOneAtATime(t *testing.T) {
	s := startServer(t, Config{})
	pad := func(doc string) string { return doc + "#" + strings.Repeat("x", largeBody) + "\n" }
	inCommit, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the server's: a failure must not leave the commit held
	first := true
	s.beforeCommit = func(int) {
		if first {
			first = false
			close(inCommit)
			<-release
		}
	}
	a, b := make(chan reply, 1), make(chan reply, 1)
	go func() { a <- call(t, s, "POST", "/v1/apply", pad("azs:\n  - name: az1\n")) }()
	<-inCommit
	go func() { b <- call(t, s, "POST", "/v1/apply", pad("azs:\n  - name: az2\n")) }()
	waitFor(t, func() bool { return s.largeWaiting.Load() == 1 })
	if r := call(t, s, "GET", "/v1/azs", nil); r.code != 200 {
		t.Errorf("read: HTTP %d", r.code)
	}
	letGo()
	if r := <-a; r.code != 200 {
		t.Errorf("first: HTTP %d %s", r.code, r.body)
	}
	if r := <-b; r.code != 200 {
		t.Errorf("second: HTTP %d %s", r.code, r.body)
	}
}

//go:build !node

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore/bwstoretest"
	"github.com/azgate/azgate/internal/pathd"
	"github.com/azgate/azgate/internal/prober"
)

func writeSecret(t *testing.T, dir, name, v string, mode os.FileMode) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(v+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
	return p
}

// TestPathdFlags: the flags' checks, each naming the flag at fault.
func TestPathdFlags(t *testing.T) {
	dir := t.TempDir()
	tok := writeSecret(t, dir, "tok", "prober-token-0123456789", 0o600)
	peer := writeSecret(t, dir, "peer", "peer-token-0123456789ab", 0o600)
	open := writeSecret(t, dir, "open", "prober-token-0123456789", 0o644)
	peer2 := writeSecret(t, dir, "peer2", "peer-token-ap-0123456789", 0o600)
	ok := pathdFlags{listen: []string{"127.0.0.1:0"}, region: "eu", instance: "a", tokenFile: tok,
		peerTokenFiles: []string{"us=" + peer, "ap=" + peer2}, peers: []string{"us=http://192.0.2.1:7090", "ap=http://192.0.2.2:7090"},
		recompute: time.Second, expire: 10 * time.Minute, reportInterval: 5 * time.Second}
	if _, err := ok.config(); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	for _, c := range []struct {
		mod  func(*pathdFlags)
		want string
	}{
		{func(f *pathdFlags) { f.region = "" }, "--region"},
		{func(f *pathdFlags) { f.tokenFile = open }, "--token-file: secret file " + open + " has mode 0644"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{"us=" + tok, "ap=" + peer2} }, "peer token of region us: same as the prober token"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{peer} }, "want REGION=FILE"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{"us=" + peer, "us=" + peer2} }, "--peer-token-file us: region given twice"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{"us=" + peer, "ap=" + peer} }, "same as region ap's"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{"us=" + peer, "ap=" + open} }, "--peer-token-file ap: secret file " + open + " has mode 0644"},
		{func(f *pathdFlags) { f.peerTokenFiles = []string{"us=" + peer} }, "peer ap: no peer token"},
		{func(f *pathdFlags) { f.peers = []string{"us"} }, `--peer "us": want REGION=URL`},
		{func(f *pathdFlags) { f.peers = []string{"us=ftp://x"} }, "peer us: url"},
		{func(f *pathdFlags) { f.redis = "redis://:pw@127.0.0.1:6379" }, "holds a password"},
		{func(f *pathdFlags) { f.redis = "tcp://127.0.0.1:6379" }, "--redis \"tcp://"},
		{func(f *pathdFlags) { f.redisReplicas = []string{"redis://127.0.0.1:1"} }, "need --redis"},
		{func(f *pathdFlags) { f.instance = "a b" }, "--instance"},
		{func(f *pathdFlags) { f.tlsCert = "x" }, "--tls-key"},
		{func(f *pathdFlags) { f.recompute = 0 }, "--recompute"},
	} {
		f := ok
		c.mod(&f)
		cfg, err := f.config()
		if err == nil {
			_, err = pathd.New(cfg) // the checks of the Config as a whole
		}
		if cfg.Hops != nil {
			cfg.Hops.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config() = %v, want %q", err, c.want)
		}
	}
}

// TestPathdCommand runs `azgate pathd` with a real redis-server: it
// serves /healthz, takes a report and answers the path.
func TestPathdCommand(t *testing.T) {
	_, srv := bwstoretest.Redis(t)
	dir := t.TempDir()
	f := pathdFlags{listen: []string{"127.0.0.1:0"}, region: "eu", instance: "a",
		tokenFile:         writeSecret(t, dir, "tok", "prober-token-0123456789", 0o600),
		peerTokenFiles:    []string{"us=" + writeSecret(t, dir, "peer", "peer-token-0123456789ab", 0o600)},
		redis:             "unix://" + srv.Socket,
		redisPasswordFile: writeSecret(t, dir, "pw", srv.Password, 0o600),
		recompute:         50 * time.Millisecond, expire: 10 * time.Minute, reportInterval: 5 * time.Second, logLevel: "error"}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runPathdCtx(ctx, f, func(a string) { addr <- a }) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		t.Fatal(err)
	}
	get := func(method, path string, body []byte) (int, string) {
		req, _ := http.NewRequest(method, url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer prober-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := get("GET", "/healthz", nil); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("healthz never 200")
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, _ := json.Marshal([]map[string]any{{"from": "e", "to": "o", "to_origin": true, "rtt_ns": 5e6, "loss": 0, "available": true, "at": time.Now()}})
	if code, b := get("POST", "/v1/reports", body); code != 200 || !strings.Contains(b, `"applied":1`) {
		t.Fatalf("report: %d %s", code, b)
	}
	for {
		code, b := get("GET", "/v1/paths?edge=e&origin=o", nil)
		if code == 200 && strings.Contains(b, `"path":["e","o"]`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("path: %d %s", code, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestProberTargetFlags: --relay and --origin take NAME=IP:PORT with an
// IPv6 address in brackets; the prober's own checks refuse the rest.
func TestProberTargetFlags(t *testing.T) {
	ts, err := parseTargets("relay", []string{"r1=[2001:db8::1]:443", "r2=192.0.2.1:443"}, false)
	if err != nil || len(ts) != 2 || ts[0].Name != "r1" || ts[0].Addr != "[2001:db8::1]:443" {
		t.Fatalf("parseTargets: %+v %v", ts, err)
	}
	cfg := prober.Config{Node: "edge-1", Targets: ts, ReportURL: "http://[2001:db8::70]:7090/v1/reports"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("IPv6 relay: %v", err)
	}
	cfg.ReportFamily = "ipv6"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--report-family ipv6: %v", err)
	}
	cfg.Targets = []prober.Target{{Name: "r1", Addr: "2001:db8::1:443"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "in brackets") {
		t.Errorf("unbracketed IPv6 relay: %v", err)
	}
}

// TestPathdListenTwo: --listen given twice, 127.0.0.1 and [::1]: a client
// reaches the API over each (IPv4 and IPv6), a report taken on one is the
// path answered on the other (one server); a listen address given twice
// is refused, one that cannot be bound fails the start naming --listen.
func TestPathdListenTwo(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here (%v)", err)
	} else {
		ln.Close()
	}
	dir := t.TempDir()
	f := pathdFlags{listen: []string{"127.0.0.1:0", "[::1]:0"}, region: "eu", instance: "a",
		tokenFile: writeSecret(t, dir, "tok", "prober-token-0123456789", 0o600),
		recompute: 50 * time.Millisecond, expire: 10 * time.Minute, reportInterval: 5 * time.Second, logLevel: "error"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 2)
	done := make(chan error, 1)
	go func() { done <- runPathdCtx(ctx, f, func(a string) { addrs <- a }) }()
	var urls []string
	for len(urls) < 2 {
		select {
		case a := <-addrs:
			urls = append(urls, "http://"+a)
		case err := <-done:
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(urls[0], "http://127.0.0.1:") || !strings.HasPrefix(urls[1], "http://[::1]:") {
		t.Fatalf("listening on %v, want 127.0.0.1 and [::1]", urls)
	}
	do := func(url, method, path string, body []byte) (int, string) {
		req, _ := http.NewRequest(method, url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer prober-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, u := range urls {
		if code, b := do(u, "GET", "/healthz", nil); code != 200 {
			t.Fatalf("%s/healthz: %d %s", u, code, b)
		}
	}
	body, _ := json.Marshal([]map[string]any{{"from": "e", "to": "o", "to_origin": true, "rtt_ns": 5e6, "loss": 0, "available": true, "at": time.Now()}})
	if code, b := do(urls[1], "POST", "/v1/reports", body); code != 200 || !strings.Contains(b, `"applied":1`) {
		t.Fatalf("report over [::1]: %d %s", code, b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, b := do(urls[0], "GET", "/v1/paths?edge=e&origin=o", nil)
		if code == 200 && strings.Contains(b, `"path":["e","o"]`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("path over 127.0.0.1: %d %s", code, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The same address twice; an address taken (the first binds, the
	// second fails: the first is closed again).
	g := f
	g.listen = []string{"[::1]:7090", "[::1]:7090"}
	if err := runPathdCtx(context.Background(), g, nil); err == nil || !strings.Contains(err.Error(), `--listen "[::1]:7090": given twice`) {
		t.Errorf("a listen address twice: %v", err)
	}
	taken, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := freeAddr(t)
	g.listen = []string{free, taken.Addr().String()}
	if err := runPathdCtx(context.Background(), g, nil); err == nil || !strings.Contains(err.Error(), "--listen: ") {
		t.Errorf("a listen address taken: %v", err)
	}
	if ln, err := net.Listen("tcp", free); err != nil {
		t.Errorf("the first listener was left open: %v", err)
	} else {
		ln.Close()
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

package pathd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/azgate/azgate/internal/promcheck"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

const (
	proberTok = "prober-token-0123456789abcdef"
	peerTok   = "peer-token-0123456789abcdef0" // the eu–us pair's
)

// testRegions are the regions the tests use; newNode gives a server a
// peer token for each of the others.
var testRegions = []string{"eu", "us", "ap"}

// pairTok is the peer token of the pair of regions a and b (either
// order): peerTok for eu and us, one of its own for every other pair.
func pairTok(a, b string) string {
	if a > b {
		a, b = b, a
	}
	if a == "eu" && b == "us" {
		return peerTok
	}
	return "peer-token-" + a + "-" + b + "-0123456789abcdef"
}

// peerTokens is region's map of pair tokens with every other of regions.
func peerTokens(region string, regions ...string) map[string]string {
	m := map[string]string{}
	for _, r := range regions {
		if r != region {
			m[r] = pairTok(region, r)
		}
	}
	return m
}

// node is one pathd server under test: a real HTTP server on loopback.
type node struct {
	t      testing.TB
	s      *Server
	url    string
	addr   string
	cancel context.CancelFunc
	done   sync.WaitGroup
	stopLn context.CancelFunc
	lnDone sync.WaitGroup
}

// listen serves n's API on addr ("127.0.0.1:0" for any port).
func (n *node) listen(addr string) {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port of a listener just closed may linger
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		n.t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	n.url = "http://" + n.addr
	ctx, cancel := context.WithCancel(context.Background())
	n.stopLn = cancel
	n.lnDone.Add(1)
	go func() { defer n.lnDone.Done(); n.s.Serve(ctx, ln, "", "") }()
}

// closeListener stops the HTTP server (the region goes dark) but not the
// Server's loops.
func (n *node) closeListener() {
	n.stopLn()
	n.lnDone.Wait()
}

func (n *node) stop() {
	n.cancel()
	n.done.Wait()
	n.closeListener()
}

// startNode starts a Server with cfg (tokens and fast intervals filled in)
// listening on its own port; peers are set by the caller before Run when
// they need the node's URL: see startRegions.
func newNode(t testing.TB, cfg Config) *node {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = proberTok
	}
	if cfg.PeerTokens == nil {
		cfg.PeerTokens = peerTokens(cfg.Region, testRegions...)
		for _, p := range cfg.Peers {
			if p.Region != cfg.Region {
				cfg.PeerTokens[p.Region] = pairTok(cfg.Region, p.Region)
			}
		}
	}
	if cfg.Recompute == 0 {
		cfg.Recompute = 20 * time.Millisecond
	}
	if cfg.Instance == "" {
		cfg.Instance = "s1"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &node{t: t, s: s}
}

func (n *node) run() {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done.Add(1)
	go func() { defer n.done.Done(); n.s.Run(ctx) }()
	n.t.Cleanup(func() {
		cancel()
		n.done.Wait()
	})
	waitFor(n.t, "the hop store loaded", 20*time.Second, func() bool {
		n.s.mu.Lock()
		defer n.s.mu.Unlock()
		return n.s.loaded
	})
}

func startNode(t testing.TB, cfg Config) *node {
	n := newNode(t, cfg)
	n.listen("127.0.0.1:0")
	t.Cleanup(n.closeListener)
	n.run()
	return n
}

// startRegions starts one server per region, each with the others as
// peers (their listeners are opened first so the URLs are known).
func startRegions(t testing.TB, regions ...string) []*node {
	return startRegionsOn(t, "127.0.0.1", regions...)
}

// startRegionsOn is startRegions with the servers listening on host
// ("::1": the peers' URLs are http://[::1]:PORT).
func startRegionsOn(t testing.TB, host string, regions ...string) []*node {
	var lns []net.Listener
	for range regions {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
	}
	var nodes []*node
	for i, r := range regions {
		var peers []Peer
		for j, o := range regions {
			if j != i {
				peers = append(peers, Peer{Region: o, URL: "http://" + lns[j].Addr().String()})
			}
		}
		n := newNode(t, Config{Region: r, Peers: peers})
		addr := lns[i].Addr().String()
		lns[i].Close()
		n.listen(addr)
		t.Cleanup(n.closeListener)
		n.run()
		nodes = append(nodes, n)
	}
	return nodes
}

func do(t testing.TB, method, url, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (n *node) post(ms ...pathcomp.Measurement) ReportsReply {
	n.t.Helper()
	code, b := do(n.t, "POST", n.url+"/v1/reports", proberTok, mustJSON(n.t, ms))
	if code != 200 {
		n.t.Fatalf("POST /v1/reports: %d %s", code, b)
	}
	var r ReportsReply
	if err := json.Unmarshal(b, &r); err != nil {
		n.t.Fatal(err)
	}
	return r
}

func (n *node) path(edge, origin string) (PathReply, int) {
	n.t.Helper()
	code, b := do(n.t, "GET", fmt.Sprintf("%s/v1/paths?edge=%s&origin=%s", n.url, edge, origin), proberTok, nil)
	var r PathReply
	if code == 200 {
		if err := json.Unmarshal(b, &r); err != nil {
			n.t.Fatal(err)
		}
	}
	return r, code
}

// records returns n's hops' smoothed state, encoded bit for bit.
func (n *node) records() map[string]string {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	out := map[string]string{}
	for _, r := range n.s.store.Records() {
		out[r.From+" "+r.To] = fmt.Sprintf("%v %b %b %v %d", r.ToOrigin, r.RTTms, r.Loss, r.Up, r.Last.UnixNano())
	}
	return out
}

func (n *node) counters() counters {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	return n.s.cnt
}

func (n *node) metrics() string {
	n.t.Helper()
	code, b := do(n.t, "GET", n.url+"/metrics", proberTok, nil)
	if code != 200 {
		n.t.Fatalf("/metrics: %d", code)
	}
	promcheck.Lint(n.t, b)
	return string(b)
}

func waitFor(t testing.TB, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func m(from, to string, origin bool, rtt time.Duration, loss float64, at time.Time) pathcomp.Measurement {
	return pathcomp.Measurement{From: from, To: to, ToOrigin: origin, RTT: rtt, Loss: loss, Available: true, At: at}
}

func metricLine(metrics, prefix string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

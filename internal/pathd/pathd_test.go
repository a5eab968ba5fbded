package pathd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

const ms = time.Millisecond

// TestDetourThroughAPI: reports through POST /v1/reports; the detour
// e→r1→o beats the lossy direct e→o through GET /v1/paths, one and bulk.
func TestDetourThroughAPI(t *testing.T) {
	n := startNode(t, Config{Region: "eu"})
	now := time.Now()
	rep := n.post(
		m("e", "o", true, 20*ms, 0.2, now), // 20 + 0.2 × 1000 = 220
		m("e", "r1", false, 10*ms, 0, now),
		m("r1", "o", true, 10*ms, 0.001, now), // 21 via r1
		m("e", "o2", true, 5*ms, 0, now),
	)
	if rep.Applied != 4 {
		t.Fatalf("applied %+v", rep)
	}
	waitFor(t, "a path for e→o", 2*time.Second, func() bool { _, code := n.path("e", "o"); return code == 200 })
	p, code := n.path("e", "o")
	if code != 200 || strings.Join(p.Path, ",") != "e,r1,o" || p.Relays != 1 || p.CostMS < 20.9 || p.CostMS > 21.1 {
		t.Fatalf("path e→o: %d %+v, want the detour e,r1,o at 21 ms", code, p)
	}
	if p.Since.IsZero() || p.Since.After(time.Now()) {
		t.Errorf("since %v", p.Since)
	}
	code, b := do(t, "GET", n.url+"/v1/paths?edge=e", proberTok, nil)
	var bulk PathsReply
	json.Unmarshal(b, &bulk)
	if code != 200 || len(bulk.Paths) != 2 || bulk.Paths[0].Origin != "o" || bulk.Paths[1].Origin != "o2" || bulk.Paths[1].Relays != 0 {
		t.Errorf("bulk: %d %s", code, b)
	}
	for _, q := range []string{"edge=e&origin=nowhere", "edge=nobody&origin=o", "edge=o&origin=o"} {
		if code, b := do(t, "GET", n.url+"/v1/paths?"+q, proberTok, nil); code != 404 {
			t.Errorf("%s: %d %s, want 404", q, code, b)
		}
	}
	for _, q := range []string{"edge=", "edge=a;b", "edge=e&origin=" + strings.Repeat("x", 64)} {
		if code, b := do(t, "GET", n.url+"/v1/paths?"+q, proberTok, nil); code != 400 {
			t.Errorf("%s: %d %s, want 400", q, code, b)
		}
	}
	// r1 reported unavailable: the detour has failed, the direct path
	// (even lossy) is taken at the next recompute; r1 back: the detour
	// again.
	if rep := n.post(pathcomp.Measurement{From: "r1", To: "o", ToOrigin: true, Available: false, At: now.Add(2 * ms)}); rep.Applied != 1 {
		t.Fatalf("unavailable report: %+v", rep)
	}
	waitFor(t, "the failed relay avoided", 2*time.Second, func() bool {
		p, code := n.path("e", "o")
		return code == 200 && p.Relays == 0
	})
	n.post(m("r1", "o", true, 10*ms, 0.001, now.Add(3*ms)))
	waitFor(t, "the detour back", 2*time.Second, func() bool {
		p, _ := n.path("e", "o")
		return p.Relays == 1
	})
	// The direct path heals: no switch before the hysteresis margin, a
	// switch once it is clearly better (loss smoothing takes reports).
	for i := 1; i <= 60; i++ {
		n.post(m("e", "o", true, 5*ms, 0, now.Add(time.Duration(i)*ms)))
	}
	waitFor(t, "switch back to direct", 2*time.Second, func() bool {
		p, _ := n.path("e", "o")
		return p.Relays == 0
	})
	if sw := metricLine(n.metrics(), "azgate_pathd_path_switches_total"); sw == "" {
		t.Error("no switches metric")
	}
}

// TestAuth: each endpoint takes only its token; /healthz is open.
func TestAuth(t *testing.T) {
	n := startNode(t, Config{Region: "eu"})
	body := mustJSON(t, []pathcomp.Measurement{m("e", "o", true, ms, 0, time.Now())})
	fwd := mustJSON(t, []fwdReport{{ID: pathcomp.ReportID{Source: "us/x", Seq: 1}, M: m("e", "o", true, ms, 0, time.Now())}})
	for _, c := range []struct {
		method, path, token string
		body                []byte
		want                int
	}{
		{"POST", "/v1/reports", "", body, 401},
		{"POST", "/v1/reports", "wrong", body, 401},
		{"POST", "/v1/reports", proberTok + "x", body, 401},
		{"POST", "/v1/reports", peerTok, body, 401},
		{"POST", "/v1/forward", proberTok, fwd, 401},
		{"POST", "/v1/forward", "", fwd, 401},
		{"GET", "/v1/paths?edge=e&origin=o", "", nil, 401},
		{"GET", "/v1/paths?edge=e&origin=o", peerTok, nil, 401},
		{"GET", "/metrics", "", nil, 401},
		{"GET", "/metrics", peerTok, nil, 401},
		{"GET", "/healthz", "", nil, 200},
		{"POST", "/v1/forward", peerTok, fwd, 200},
		{"POST", "/v1/reports", proberTok, body, 200},
		{"GET", "/metrics", proberTok, nil, 200},
		{"DELETE", "/v1/reports", proberTok, nil, 405},
	} {
		if code, b := do(t, c.method, n.url+c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s with %q: %d %s, want %d", c.method, c.path, c.token, code, b, c.want)
		}
	}
	if got := n.counters().unauth; got != 10 {
		t.Errorf("unauthorized counted %d, want 10", got)
	}
	if l := metricLine(n.metrics(), "azgate_pathd_unauthorized_total"); l != "azgate_pathd_unauthorized_total 10" {
		t.Errorf("metric: %q", l)
	}
	// Configuration: tokens required, distinct, long enough.
	for _, c := range []Config{
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": proberTok}},
		{Region: "eu", Instance: "a", Token: "short", PeerTokens: map[string]string{"us": peerTok}},
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": "short"}},
		{Region: "eu", Instance: "a", Token: proberTok, Peers: []Peer{{"us", "http://192.0.2.1"}}},                   // no token for us
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": peerTok, "ap": peerTok}}, // shared
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"eu": peerTok}},                // own region
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"u s": peerTok}},
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": peerTok}, Peers: []Peer{{"eu", "http://192.0.2.1"}}},
		{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": peerTok}, Peers: []Peer{{"us", "http://u:p@192.0.2.1"}}},
		{Region: "e u", Instance: "a", Token: proberTok, PeerTokens: map[string]string{"us": peerTok}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// TestBadBodies: a malformed or invalid body is refused whole (400,
// naming the report and the field) and nothing is applied; too large:
// 413.
func TestBadBodies(t *testing.T) {
	n := startNode(t, Config{Region: "eu", MaxBody: 64 << 10, MaxReports: 100})
	now := time.Now()
	good := m("e", "o", true, ms, 0, now)
	bad := func(f func(*pathcomp.Measurement)) []byte {
		x := good
		f(&x)
		return mustJSON(t, []pathcomp.Measurement{good, good, x})
	}
	many := make([]pathcomp.Measurement, 101)
	for i := range many {
		many[i] = m("e", fmt.Sprint("o", i), true, ms, 0, now)
	}
	for _, c := range []struct {
		name string
		body []byte
		code int
		want string
	}{
		{"not json", []byte("{"), 400, "body"},
		{"object", []byte(`{"from":"e"}`), 400, "body"},
		{"unknown field", []byte(`[{"from":"e","to":"o","color":1}]`), 400, "color"},
		{"trailing", append(mustJSON(t, []pathcomp.Measurement{good}), []byte(" []")...), 400, "after"},
		{"loss", bad(func(x *pathcomp.Measurement) { x.Loss = 2 }), 400, "report 2: measurement e→o: loss"},
		{"name", bad(func(x *pathcomp.Measurement) { x.To = "o/1" }), 400, "report 2: measurement e→o/1: to"},
		{"rtt", bad(func(x *pathcomp.Measurement) { x.RTT = -1 }), 400, "report 2: measurement e→o: rtt"},
		{"no time", bad(func(x *pathcomp.Measurement) { x.At = time.Time{} }), 400, "report 2: measurement e→o: at"},
		{"future", bad(func(x *pathcomp.Measurement) { x.At = now.Add(time.Minute) }), 400, "report 2: measurement e→o: at"},
		{"too many", mustJSON(t, many), 413, "more than 100 reports"},
		// Refused at the 101st element, before the rest is read: a
		// decoder that took the whole array first would see the syntax
		// error at its end (400).
		{"too many, read no further", []byte("[" + strings.Repeat("{},", 101) + "!"), 413, "more than 100 reports"},
		{"too large", append([]byte(`[{"from":"`), bytes.Repeat([]byte("x"), 70<<10)...), 413, "more than 65536 bytes"},
	} {
		code, b := do(t, "POST", n.url+"/v1/reports", proberTok, c.body)
		if code != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, code, b, c.code, c.want)
		}
		// the forward endpoint too, in its own shape
	}
	fb := func(id pathcomp.ReportID, x pathcomp.Measurement) []byte {
		return mustJSON(t, []fwdReport{{ID: pathcomp.ReportID{Source: "us/a", Seq: 1}, M: good}, {ID: id, M: x}})
	}
	for _, c := range []struct {
		name, want string
		body       []byte
	}{
		{"seq 0", "report 1: report us/a: seq", fb(pathcomp.ReportID{Source: "us/a"}, good)},
		{"source", "report 1: report: source", fb(pathcomp.ReportID{Source: "us a", Seq: 2}, good)},
		{"measurement", "report 1: measurement e→o: loss", fb(pathcomp.ReportID{Source: "us/a", Seq: 2}, m("e", "o", true, ms, -1, now))},
	} {
		if code, b := do(t, "POST", n.url+"/v1/forward", peerTok, c.body); code != 400 || !strings.Contains(string(b), c.want) {
			t.Errorf("forward %s: %d %s, want 400 with %q", c.name, code, b, c.want)
		}
	}
	if nodes, hops := n.s.store.Len(); nodes != 0 || hops != 0 {
		t.Errorf("refused bodies left %d nodes and %d hops", nodes, hops)
	}
	c := n.counters()
	if c.local.applied != 0 || c.fwd.applied != 0 || c.invalid[0] != 12 || c.invalid[1] != 3 {
		t.Errorf("counters %+v", c)
	}
	// A forward of this region's own report (a peer URL pointing back):
	// rejected, not applied twice.
	code, b := do(t, "POST", n.url+"/v1/forward", peerTok, mustJSON(t, []fwdReport{{ID: pathcomp.ReportID{Source: "eu/other-1", Seq: 1}, M: good}}))
	if code != 200 || !strings.Contains(string(b), `"rejected":1`) || !strings.Contains(string(b), "points back here") {
		t.Errorf("own region's report forwarded back: %d %s", code, b)
	}
	// Not validation but outcome: a stale report is counted, the rest applied.
	rep := n.post(good, m("e", "r", false, ms, 0, now), good)
	if rep.Applied != 2 || rep.Stale != 1 || len(rep.Errors) != 1 {
		t.Errorf("stale in a batch: %+v", rep)
	}
}

// TestSeenSetFullLocalStillApplied: peers' sources filling the seen-set
// (ErrTooManySources for a new forward source) do not stop this
// server's own prober reports, which need no dedup.
func TestSeenSetFullLocalStillApplied(t *testing.T) {
	n := startNode(t, Config{Region: "eu"})
	n.s.mu.Lock()
	for i := 0; ; i++ {
		if _, _, err := n.s.dedup.Decide(pathcomp.ReportID{Source: fmt.Sprintf("us/s%d", i), Seq: 1}, false); err != nil {
			break
		}
	}
	n.s.mu.Unlock()
	now := time.Now()
	if rep := n.post(m("e", "o", true, ms, 0, now)); rep.Applied != 1 {
		t.Errorf("local report with the seen-set full: %+v, want applied", rep)
	}
	fw := mustJSON(t, []fwdReport{{ID: pathcomp.ReportID{Source: "us/new", Seq: 1}, M: m("e", "r", false, ms, 0, now)}})
	if code, b := do(t, "POST", n.url+"/v1/forward", peerTok, fw); code != 200 || !strings.Contains(string(b), "too many sources") {
		t.Errorf("forward from a new source with the seen-set full: %d %s, want rejected", code, b)
	}
}

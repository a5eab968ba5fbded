package pathd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

func fuzzServer(t testing.TB) *Server {
	s, err := New(Config{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: peerTokens("eu", testRegions...), MaxBody: 16 << 10, MaxReports: 50,
		Peers: []Peer{{Region: "us", URL: "http://192.0.2.1"}}, QueueLen: 100})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fuzzSeeds(f *testing.F) {
	now := time.Now()
	good, _ := json.Marshal([]pathcomp.Measurement{m("e", "o", true, ms, 0.1, now), m("e", "r", false, 2*ms, 0, now)})
	fwd, _ := json.Marshal([]fwdReport{{ID: pathcomp.ReportID{Source: "us/a-1", Seq: 7}, M: m("e", "o", true, ms, 0, now)}})
	for _, s := range [][]byte{good, fwd, []byte("[]"), []byte("null"), []byte(`[{"from":"e","to":"e"}]`),
		[]byte(`[{"from":"e","to":"o","rtt_ns":-1,"loss":"NaN","at":"2026-12-03T00:00:00Z"}]`), []byte(`[{}`), []byte(`[1,2]`)} {
		f.Add(s, false)
		f.Add(s, true)
	}
}

// FuzzReports drives both report endpoints' handlers with arbitrary
// bodies: no panic; only 200, 400 or 413; a refused body changes
// nothing; an accepted one accounts for every report it held.
func FuzzReports(f *testing.F) {
	fuzzSeeds(f)
	s := fuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte, forward bool) {
		path, tok := "/v1/reports", proberTok
		if forward {
			path, tok = "/v1/forward", peerTok
		}
		s.mu.Lock()
		before := s.cnt
		nodes, hops := s.store.Len()
		s.mu.Unlock()
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		s.mu.Lock()
		after := s.cnt
		nodes2, hops2 := s.store.Len()
		s.mu.Unlock()
		switch w.Code {
		case http.StatusOK:
			var rep ReportsReply
			if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
				t.Fatalf("200 with a reply that does not parse: %q", w.Body.String())
			}
			var n int
			if forward {
				var fs []fwdReport
				json.Unmarshal(body, &fs)
				n = len(fs)
			} else {
				var ms []pathcomp.Measurement
				json.Unmarshal(body, &ms)
				n = len(ms)
			}
			if got := rep.Applied + rep.Stale + rep.Rejected + rep.Duplicate; got != n {
				t.Fatalf("reply accounts for %d reports, body holds %d: %+v", got, n, rep)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if after.local != before.local || after.fwd != before.fwd || nodes != nodes2 || hops != hops2 {
				t.Fatalf("refused body (%d %s) changed the store", w.Code, w.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}

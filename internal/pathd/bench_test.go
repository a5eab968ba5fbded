package pathd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
	"github.com/azgate/azgate/internal/pathd/hopstore"
)

// benchBatch is one prober POST: 100 hops of 10 probers.
func benchBatch(base time.Time, round int) []pathcomp.Measurement {
	out := make([]pathcomp.Measurement, 0, 100)
	for i := range 100 {
		to, origin := fmt.Sprint("relay", i%10), false
		if i%2 == 1 {
			to, origin = fmt.Sprint("origin", i), true
		}
		out = append(out, m(fmt.Sprint("p", i/10), to, origin, time.Duration(5+i%20)*ms, float64(i%7)/100,
			base.Add(time.Duration(round)*time.Microsecond)))
	}
	return out
}

func benchServer(b *testing.B) *Server {
	// Two peers whose forwarders do not run: every applied report is
	// queued twice (the queues fill and drop the oldest, a cost included).
	// A hop store, as with --redis: applied hops go into the dirty set
	// (not flushed here: Run does not run).
	s, err := New(Config{Region: "eu", Instance: "a", Token: proberTok, PeerTokens: peerTokens("eu", testRegions...), Hops: hopstore.NewMem(),
		Peers: []Peer{{Region: "us", URL: "http://192.0.2.1"}, {Region: "ap", URL: "http://192.0.2.2"}}})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkReportsHandler: POST /v1/reports through the handler (JSON
// decoding, validation, ingestion, queueing to 2 peers), 100 reports per
// request, on an httptest recorder (no sockets).
func BenchmarkReportsHandler(b *testing.B) {
	s := benchServer(b)
	h := s.Handler()
	base := time.Now().Add(-time.Hour)
	body, _ := json.Marshal(benchBatch(base, 0))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		body, _ = json.Marshal(benchBatch(base, i+1))
		req := httptest.NewRequest("POST", "/v1/reports", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+proberTok)
		w := httptest.NewRecorder()
		b.StartTimer()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "reports/s")
}

// BenchmarkIngestLocal: the same without HTTP and JSON: the locked part
// (sequence, ingest, dirty set, queueing to 2 peers).
func BenchmarkIngestLocal(b *testing.B) {
	s := benchServer(b)
	base := time.Now().Add(-time.Hour)
	batch := benchBatch(base, 0)
	now := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range batch {
			batch[j].At = base.Add(time.Duration(i+1) * time.Microsecond)
		}
		if rep := s.ingestLocal(batch, now); rep.Applied != 100 {
			b.Fatalf("%+v", rep)
		}
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "reports/s")
}

// BenchmarkConvergence: three regions on loopback; each iteration POSTs
// one report to eu and waits until us and ap hold it (their hop's last
// report is the one posted): the cross-region convergence time.
func BenchmarkConvergence(b *testing.B) {
	nodes := startRegions(b, "eu", "us", "ap")
	base := time.Now().Add(-time.Hour)
	var worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at := base.Add(time.Duration(i+1) * time.Millisecond)
		start := time.Now()
		nodes[0].post(m("e1", "origin1", true, 5*ms, 0, at))
		for _, n := range nodes[1:] {
			for {
				n.s.mu.Lock()
				r, ok := n.s.store.Record("e1", "origin1")
				n.s.mu.Unlock()
				if ok && r.Last.Equal(at) {
					break
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/converge")
	b.ReportMetric(float64(worst.Microseconds()), "µs-worst")
}

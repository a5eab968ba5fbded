package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// TestSendLoop: the sender against a real HTTP server that fails the
// first POST (503: retried), refuses bodies of more than 2 reports (413:
// the batch is halved until it fits) and one batch as invalid (400:
// dropped and counted). Every other report arrives, once, in order.
func TestSendLoop(t *testing.T) {
	var (
		mu       sync.Mutex
		posts    int
		accepted []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/reports" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "wrong request", http.StatusUnauthorized)
			return
		}
		var ms []pathcomp.Measurement
		if err := json.NewDecoder(r.Body).Decode(&ms); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		posts++
		switch {
		case posts == 1:
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		case len(ms) > 2:
			http.Error(w, "too many", http.StatusRequestEntityTooLarge)
			return
		}
		for _, m := range ms {
			if m.To == "m4" {
				http.Error(w, "report 0: invalid", http.StatusBadRequest)
				return
			}
		}
		for _, m := range ms {
			accepted = append(accepted, m.To)
		}
	}))
	defer srv.Close()
	p, err := New(Config{Node: "e", Targets: []Target{{Name: "r", Addr: "192.0.2.1:80"}}, Batch: 8,
		ReportURL: srv.URL + "/v1/reports", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	var ms []pathcomp.Measurement
	for i := range 10 {
		ms = append(ms, pathcomp.Measurement{From: "e", To: fmt.Sprintf("m%d", i), Available: true, At: time.Now()})
	}
	p.enqueue(ms)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.sendLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Queued > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s := p.Stats()
	mu.Lock()
	defer mu.Unlock()
	// m4 went in a batch of 2 with m5: both refused.
	want := []string{"m0", "m1", "m2", "m3", "m6", "m7", "m8", "m9"}
	if !slices.Equal(accepted, want) {
		t.Fatalf("pathd accepted %v, want %v (stats %+v)", accepted, want, s)
	}
	if s.Queued != 0 || s.Sent != 8 || s.Rejected != 2 || s.PostErrors != 1 || s.Posts != 4 {
		t.Fatalf("stats %+v: want 0 queued, 8 sent in 4 posts, 2 rejected, 1 post error", s)
	}
}

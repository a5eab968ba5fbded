package pathcomp

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
)

// FuzzMeasurement feeds API-body-shaped JSON through decoding, Validate
// and Ingest: no panic, and whatever Validate accepts holds every limit
// and is taken by a Store (or dropped as stale, never half-applied).
func FuzzMeasurement(f *testing.F) {
	f.Add([]byte(`{"from":"r1","to":"o1","to_origin":true,"rtt_ns":12000000,"loss":0.01,"available":true,"at":"2026-12-03T12:00:00Z"}`))
	f.Add([]byte(`{"from":"e","to":"r","rtt_ns":-1,"loss":2,"at":"2026-12-03T12:00:00Z"}`))
	f.Add([]byte(`{"from":"a/b","to":"","loss":1e400}`))
	f.Add([]byte(`{"from":"x","to":"x","rtt_ns":60000000000,"loss":1,"available":false,"at":"0001-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var m Measurement
		if json.Unmarshal(body, &m) != nil {
			return
		}
		s := NewStore(Config{MaxNodes: 4, MaxHops: 2})
		err := m.Validate()
		if err != nil {
			if s.Ingest(m, m.At) == nil {
				t.Fatalf("Ingest took what Validate refused (%v): %+v", err, m)
			}
			return
		}
		for _, n := range []string{m.From, m.To} {
			if len(n) < 1 || len(n) > MaxNameLen || ValidateName(n) != nil {
				t.Fatalf("accepted name %q", n)
			}
		}
		if m.RTT < 0 || m.RTT > MaxRTT || !(m.Loss >= 0 && m.Loss <= 1) || m.From == m.To || m.At.Year() < 2000 || m.At.Year() >= 2200 {
			t.Fatalf("accepted %+v", m)
		}
		if err := s.Ingest(m, m.At); err != nil {
			t.Fatalf("Ingest of a valid measurement: %v", err)
		}
		if err := s.Ingest(m, m.At); !errors.Is(err, ErrStale) {
			t.Fatalf("second Ingest of the same report: %v, want ErrStale", err)
		}
		st, ok := s.Hop(m.From, m.To, m.At)
		if !ok || st.Failed == m.Available || (m.Available && math.IsNaN(st.Cost)) {
			t.Fatalf("hop after ingest: %+v (ok %v) from %+v", st, ok, m)
		}
		g := s.Snapshot(m.At.Add(time.Second))
		var sc Search
		if _, err := g.BestFrom(&sc, m.From, nil); err != nil {
			t.Fatal(err)
		}
	})
}

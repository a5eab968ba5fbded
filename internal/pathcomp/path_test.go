package pathcomp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBestPath: tables of synthetic topologies and the path expected.
func TestBestPath(t *testing.T) {
	cases := []struct {
		name string
		hops []hopSpec
		want string // path nodes joined
	}{
		{"direct when it is cheapest", []hopSpec{
			{"e", "o", true, 30 * ms, 0}, {"e", "r", false, 20 * ms, 0}, {"r", "o", true, 20 * ms, 0},
		}, "e→o"},
		{"a detour beats a lossy direct path", []hopSpec{
			// direct: 50 + 0.10×1000 = 150 ms; detour: 20 + 40 = 60 ms
			{"e", "o", true, 50 * ms, 0.10}, {"e", "r", false, 20 * ms, 0}, {"r", "o", true, 40 * ms, 0},
		}, "e→r→o"},
		{"a clean direct path beats a faster lossy detour", []hopSpec{
			{"e", "o", true, 70 * ms, 0}, {"e", "r", false, 20 * ms, 0.05}, {"r", "o", true, 20 * ms, 0},
		}, "e→o"},
		{"two relays", []hopSpec{
			{"e", "o", true, 100 * ms, 0}, {"e", "r1", false, 10 * ms, 0}, {"r1", "r2", false, 10 * ms, 0},
			{"r2", "o", true, 10 * ms, 0}, {"e", "r2", false, 100 * ms, 0}, {"r1", "o", true, 100 * ms, 0},
		}, "e→r1→r2→o"},
		{"no path", []hopSpec{{"e", "r", false, 10 * ms, 0}, {"x", "o", true, 10 * ms, 0}}, "no path"},
		{"an edge is not its own relay", []hopSpec{
			{"e", "r", false, 10 * ms, 0}, {"r", "e", false, 10 * ms, 0}, {"e", "o", true, 500 * ms, 0},
		}, "e→o"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(Config{})
			for _, h := range tc.hops {
				mustIngest(t, s, meas(h, t0))
			}
			g := s.Snapshot(t0)
			var sc Search
			paths, err := g.BestFrom(&sc, "e", nil)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for i, o := range g.Origins() {
				if o == "o" {
					if paths[i].N == 0 {
						got = "no path"
					} else {
						got = joinArrow(paths[i].Nodes())
					}
				}
			}
			if got != tc.want {
				t.Fatalf("path = %s, want %s", got, tc.want)
			}
		})
	}
}

func joinArrow(s []string) string {
	out := s[0]
	for _, x := range s[1:] {
		out += "→" + x
	}
	return out
}

// TestBestFromMatchesBruteForce checks the prefix search against trying
// every path, on random sparse graphs with failed hops mixed in.
func TestBestFromMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		s := NewStore(Config{})
		nr, no := 2+rng.IntN(12), 1+rng.IntN(6)
		for a := 0; a < nr; a++ {
			for b := 0; b < nr; b++ {
				if a != b && rng.Float64() < 0.4 {
					m := meas(hopSpec{fmt.Sprint("r", a), fmt.Sprint("r", b), false, time.Duration(1+rng.IntN(100)) * ms, rng.Float64() * 0.1}, t0)
					m.Available = rng.Float64() < 0.9
					mustIngest(t, s, m)
				}
			}
			for o := 0; o < no; o++ {
				if rng.Float64() < 0.4 {
					mustIngest(t, s, meas(hopSpec{fmt.Sprint("r", a), fmt.Sprint("o", o), true, time.Duration(1+rng.IntN(100)) * ms, rng.Float64() * 0.1}, t0))
				}
			}
		}
		g := s.Snapshot(t0)
		var sc Search
		for e := 0; e < nr; e++ {
			edge := fmt.Sprint("r", e)
			if _, ok := g.ids[edge]; !ok {
				continue
			}
			paths, err := g.BestFrom(&sc, edge, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range g.Origins() {
				want := bruteBest(g, edge, o)
				got := paths[i].Cost
				if !(got == want || math.Abs(got-want) < 1e-9) {
					t.Fatalf("round %d %s→%s: cost %v (%v), brute force %v", round, edge, o, got, paths[i], want)
				}
				if paths[i].N > 0 && math.Abs(g.PathCost(paths[i])-got) > 1e-9 {
					t.Fatalf("round %d: %v costs %v by PathCost", round, paths[i], g.PathCost(paths[i]))
				}
			}
		}
	}
}

// TestFailedRelayAvoided: a relay that stops reporting is left within 3
// missed reports; one reported unavailable is left at once.
func TestFailedRelayAvoided(t *testing.T) {
	for _, mode := range []string{"silent", "unavailable"} {
		t.Run(mode, func(t *testing.T) {
			s := NewStore(Config{ReportInterval: 5 * time.Second})
			sel := NewSelector(Hysteresis{})
			hops := []hopSpec{
				{"e", "o", true, 200 * ms, 0},
				{"e", "r1", false, 20 * ms, 0}, {"r1", "o", true, 40 * ms, 0}, // 60 ms
				{"e", "r2", false, 30 * ms, 0}, {"r2", "o", true, 50 * ms, 0}, // 80 ms
			}
			const dieAt = 10
			switchedAt := -1
			for round := 0; round < 20; round++ {
				now := t0.Add(time.Duration(round) * 5 * time.Second)
				for _, h := range hops {
					m := meas(h, now)
					if round >= dieAt && (h.from == "r1" || h.to == "r1") {
						if mode == "silent" {
							continue
						}
						m.Available = false
					}
					mustIngest(t, s, m)
				}
				if _, err := sel.Update(s.Snapshot(now), "e"); err != nil {
					t.Fatal(err)
				}
				p, _ := sel.Path("e", "o")
				want := "e→r1→o"
				if round < dieAt && joinArrow(p.Nodes()) != want {
					t.Fatalf("round %d: %v before the failure, want %s", round, p, want)
				}
				if round >= dieAt && switchedAt < 0 && joinArrow(p.Nodes()) == "e→r2→o" {
					switchedAt = round
				}
			}
			limit := dieAt + 2 // the third missed report is due at round dieAt+2
			if mode == "unavailable" {
				limit = dieAt
			}
			if switchedAt < 0 || switchedAt > limit {
				t.Fatalf("switched to r2 at round %d, want by %d", switchedAt, limit)
			}
			t.Logf("%s: r1 died at round %d, left at round %d", mode, dieAt, switchedAt)
		})
	}
}

// TestNoFlapping: two paths 3 % apart with ±5 % jitter on every sample
// over 1,000 rounds switch at most a few times; the same run without
// hysteresis flaps (so the test can fail).
func TestNoFlapping(t *testing.T) {
	run := func(h Hysteresis) uint64 {
		rng := rand.New(rand.NewPCG(7, 7))
		s := NewStore(Config{})
		sel := NewSelector(h)
		hops := []hopSpec{
			{"e", "o", true, 110 * ms, 0},
			{"e", "r1", false, 40 * ms, 0}, {"r1", "o", true, 60 * ms, 0},
			{"e", "r2", false, 43 * ms, 0}, {"r2", "o", true, 60 * ms, 0},
		}
		for round := 0; round < 1000; round++ {
			now := t0.Add(time.Duration(round) * 5 * time.Second)
			for _, hs := range hops {
				hs.rtt = time.Duration(float64(hs.rtt) * (0.95 + 0.1*rng.Float64()))
				mustIngest(t, s, meas(hs, now))
			}
			if _, err := sel.Update(s.Snapshot(now), "e"); err != nil {
				t.Fatal(err)
			}
		}
		return sel.Switches()
	}
	with := run(Hysteresis{})
	without := run(Hysteresis{Relative: 1e-12, Absolute: 1})
	t.Logf("switches over 1,000 rounds: %d with hysteresis (10 %%, 5 ms), %d without", with, without)
	if with > 3 { // the first choice counts as one
		t.Fatalf("%d switches with hysteresis, want at most 3", with)
	}
	if without < 10 {
		t.Fatalf("only %d switches without hysteresis: the noise is too weak to test anything", without)
	}
}

func TestHysteresisChoose(t *testing.T) {
	a := Path{Hops: [4]string{"e", "a", "o"}, N: 3}
	b := Path{Hops: [4]string{"e", "b", "o"}, N: 3}
	none := Path{Cost: math.Inf(1)}
	cases := []struct {
		name    string
		cur     Path
		curCost float64
		best    Path
		want    Path
		switch_ bool
	}{
		{"first choice", Path{}, math.Inf(1), withCost(a, 50), a, true},
		{"11 % and 11 ms better: switch", a, 100, withCost(b, 89), b, true},
		{"9 % better: keep", a, 100, withCost(b, 91), a, false},
		{"12 % but 3.6 ms better: keep", a, 30, withCost(b, 26.4), a, false},
		{"current failed: switch even to a worse path", a, math.Inf(1), withCost(b, 500), b, true},
		{"current failed, none left", a, math.Inf(1), none, none, true},
		{"same path", a, 100, withCost(a, 100), a, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, sw := Hysteresis{}.Choose(tc.cur, tc.curCost, tc.best)
			if !got.Same(tc.want) || sw != tc.switch_ {
				t.Fatalf("Choose = %v, %v; want %v, %v", got, sw, tc.want, tc.switch_)
			}
		})
	}
}

func withCost(p Path, c float64) Path { p.Cost = c; return p }

func TestStoreSmoothingAndLimits(t *testing.T) {
	s := NewStore(Config{MaxNodes: 3, MaxHops: 2})
	h := hopSpec{"e", "r", false, 100 * ms, 0}
	mustIngest(t, s, meas(h, t0))
	h.rtt = 200 * ms
	mustIngest(t, s, meas(h, t0.Add(time.Second)))
	st, _ := s.Hop("e", "r", t0.Add(time.Second))
	if st.RTT != 125*ms { // 100 + 0.25 × (200 − 100)
		t.Fatalf("smoothed RTT %v, want 125ms", st.RTT)
	}
	if err := s.Ingest(meas(h, t0), t0.Add(2*time.Hour)); !errors.Is(err, ErrStale) {
		t.Fatalf("older report: %v, want ErrStale", err)
	}
	mustIngest(t, s, meas(hopSpec{"r", "e", false, ms, 0}, t0))
	if err := s.Ingest(meas(hopSpec{"e", "x", false, ms, 0}, t0), t0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("third hop: %v, want ErrTooMany", err)
	}
	if err := s.Ingest(meas(hopSpec{"r", "e", true, ms, 0}, t0.Add(time.Hour)), t0.Add(time.Hour)); !errors.Is(err, ErrKindClash) {
		t.Fatalf("relay reported as origin: %v, want ErrKindClash", err)
	}
	if err := s.Ingest(meas(hopSpec{"x", "y", false, ms, 0}, t0), t0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("fourth node: %v, want ErrTooMany", err)
	}
	if err := s.Ingest(meas(hopSpec{"e", "r", false, ms, 0}, t0.Add(time.Minute)), t0.Add(57*time.Second)); err == nil || !contains(err.Error(), "at:") {
		t.Fatalf("report 3 s in the future: %v, want an at: error", err)
	}
	if n, _ := s.Len(); n != 2 {
		t.Fatalf("%d nodes after refused reports, want 2 (nothing half-added)", n)
	}
	if got := s.Stats(); got.Applied != 3 || got.Stale != 1 || got.Rejected != 4 {
		t.Fatalf("stats %+v", got)
	}
	// Silent for 3 intervals (15 s): failed.
	if st, _ := s.Hop("e", "r", t0.Add(16*time.Second)); !st.Failed || !math.IsInf(st.Cost, 1) {
		t.Fatalf("after 15 s of silence: %+v, want failed", st)
	}
	if st, _ := s.Hop("e", "r", t0.Add(14*time.Second)); st.Failed {
		t.Fatalf("after 13 s of silence: %+v, want live", st)
	}
}

func TestValidate(t *testing.T) {
	ok := Measurement{From: "relay-1.eu", To: "origin_2", ToOrigin: true, RTT: 10 * ms, Loss: 0.01, Available: true, At: t0}
	cases := []struct {
		name  string
		edit  func(*Measurement)
		field string
	}{
		{"ok", func(*Measurement) {}, ""},
		{"empty from", func(m *Measurement) { m.From = "" }, "from:"},
		{"bad char", func(m *Measurement) { m.To = "a/b" }, "to:"},
		{"long name", func(m *Measurement) { m.To = string(make([]byte, 64)) }, "to:"},
		{"63 chars ok", func(m *Measurement) { m.To = fmt.Sprintf("%063d", 1) }, ""},
		{"self hop", func(m *Measurement) { m.To = m.From }, "to:"},
		{"negative rtt", func(m *Measurement) { m.RTT = -1 }, "rtt:"},
		{"rtt over a minute", func(m *Measurement) { m.RTT = 61 * time.Second }, "rtt:"},
		{"loss above 1", func(m *Measurement) { m.Loss = 1.01 }, "loss:"},
		{"loss NaN", func(m *Measurement) { m.Loss = math.NaN() }, "loss:"},
		{"no time", func(m *Measurement) { m.At = time.Time{} }, "at:"},
		{"time past int64 ns", func(m *Measurement) { m.At = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }, "at:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := ok
			tc.edit(&m)
			err := m.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want one naming %q", err, tc.field)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestPathCostAcrossStores: a path chosen on one Store's graph is costed
// by name on another's, whose nodes were interned in another order (the
// cached indexes must not be trusted blindly).
func TestPathCostAcrossStores(t *testing.T) {
	hops := []hopSpec{{"e", "r1", false, 10 * ms, 0}, {"r1", "r2", false, 10 * ms, 0}, {"r2", "o", true, 10 * ms, 0}}
	a, b := NewStore(Config{}), NewStore(Config{})
	mustIngest(t, b, meas(hopSpec{"x", "y", false, ms, 0}, t0))
	for i := range hops {
		mustIngest(t, a, meas(hops[i], t0))
		mustIngest(t, b, meas(hops[len(hops)-1-i], t0))
	}
	var sc Search
	paths, err := a.Snapshot(t0).BestFrom(&sc, "e", nil)
	if err != nil || len(paths) != 1 || paths[0].N != 4 {
		t.Fatalf("paths %v, %v", paths, err)
	}
	if got := b.Snapshot(t0).PathCost(paths[0]); got != 30 {
		t.Fatalf("cost on the other store's graph: %v, want 30", got)
	}
}

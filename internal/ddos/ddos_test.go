package ddos

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	victim = netip.MustParseAddr("198.51.100.7")
	other  = netip.MustParseAddr("198.51.100.8")
	t0     = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
)

func newDet(t *testing.T, c Config) *Detector {
	t.Helper()
	c, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}

func obs(r Rates) Observation { return Observation{Rates: r, Edges: 2} }

// round is one Step of a scripted scenario.
type round struct {
	at    time.Duration
	rates map[netip.Addr]Rates
	stale bool // no new report since the last round
	q     map[netip.Addr]string
	want  string // "ACTION ADDR" decisions joined by ";", "" for none
}

func run(t *testing.T, d *Detector, rs []round) {
	t.Helper()
	for i, r := range rs {
		o := map[netip.Addr]Observation{}
		for a, x := range r.rates {
			o[a] = obs(x)
		}
		ds := d.Step(t0.Add(r.at), o, !r.stale, r.q)
		var got []string
		for _, x := range ds {
			got = append(got, x.Action+" "+x.Addr.String())
			if x.Reason == "" {
				t.Errorf("round %d: decision without a reason", i)
			}
		}
		if g := strings.Join(got, ";"); g != r.want {
			t.Errorf("round %d (at %v): decisions %q, want %q", i, r.at, g, r.want)
		}
	}
}

func TestDetector(t *testing.T) {
	cfg := Config{Threshold: Rates{PPS: 1000, BPS: -1, SYN: 100}, Enter: 2, Cooldown: 2 * time.Second, K: 4, Alpha: 0.5}
	calm := Rates{PPS: 10, SYN: 1}
	flood := Rates{PPS: 50_000, SYN: 40_000}
	qd := map[netip.Addr]string{victim: "ddos"}
	ms := time.Millisecond
	tests := []struct {
		name   string
		rounds []round
	}{
		{"one round above is not enough; two are", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: calm}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 500 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
		}},
		{"a stale round does not count toward enter", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}, stale: true},
			{at: 500 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
		}},
		{"interrupted above-streak starts over", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: calm}},
			{at: 500 * ms, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 750 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
		}},
		{"SYN rate alone triggers", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: {PPS: 500, SYN: 400}}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: {PPS: 500, SYN: 400}}, want: "quarantine 198.51.100.7"},
		}},
		{"release after the cool-down, not before; a hot round restarts it", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
			{at: 500 * ms, q: qd},
			{at: 1500 * ms, q: qd},
			{at: 2000 * ms, rates: map[netip.Addr]Rates{victim: {PPS: 800}}, q: qd}, // above the release mark 500
			{at: 2600 * ms, q: qd},
			{at: 4000 * ms, q: qd},
			{at: 4600 * ms, q: qd, stale: true, want: "release 198.51.100.7"},
		}},
		{"between the marks holds the quarantine", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
			{at: 500 * ms, rates: map[netip.Addr]Rates{victim: {PPS: 700}}, q: qd},
			{at: 5000 * ms, rates: map[netip.Addr]Rates{victim: {PPS: 700}}, q: qd},
		}},
		{"an operator's quarantine is never released nor duplicated", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}, q: map[netip.Addr]string{victim: "operator"}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}, q: map[netip.Addr]string{victim: "operator"}},
			{at: 10 * time.Second, q: map[netip.Addr]string{victim: "operator"}},
		}},
		{"a ddos quarantine found at start is released after a cool-down", []round{
			{at: 0, q: qd},
			{at: 1900 * ms, q: qd},
			{at: 2000 * ms, q: qd, want: "release 198.51.100.7"},
		}},
		{"other EIPs are unaffected", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood, other: calm}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood, other: calm}, want: "quarantine 198.51.100.7"},
		}},
		{"an operator release ends the detector's state", []round{
			{at: 0, rates: map[netip.Addr]Rates{victim: flood}},
			{at: 250 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
			{at: 500 * ms, rates: map[netip.Addr]Rates{victim: flood}, q: qd},
			{at: 750 * ms, rates: map[netip.Addr]Rates{victim: flood}}, // released by hand, still flooded
			{at: 1000 * ms, rates: map[netip.Addr]Rates{victim: flood}, want: "quarantine 198.51.100.7"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, newDet(t, cfg), tc.rounds) })
	}
}

// TestBaseline: a busy EIP's trigger level follows K × its baseline, so
// its normal traffic above the threshold does not quarantine it, and a
// jump well above its normal does; the baseline follows slowly what stays
// below the trigger level (Alpha) and never learns what is above it.
func TestBaseline(t *testing.T) {
	d := newDet(t, Config{Threshold: Rates{PPS: 1000, BPS: -1, SYN: -1}, Enter: 2, K: 4, Alpha: 0.1})
	busy := Rates{PPS: 900}
	at := t0
	step := func(r Rates) []Decision {
		at = at.Add(250 * time.Millisecond)
		return d.Step(at, map[netip.Addr]Observation{victim: obs(r)}, true, nil)
	}
	for range 60 {
		if ds := step(busy); len(ds) > 0 {
			t.Fatalf("normal traffic quarantined: %+v", ds)
		}
	}
	// 3,000 pps: above the threshold, below 4 × 900.
	for range 5 {
		if ds := step(Rates{PPS: 3000}); len(ds) > 0 {
			t.Fatalf("3000 pps with a 900 pps baseline quarantined: %+v", ds)
		}
	}
	b, _ := d.Baseline(victim)
	if b.PPS < 900 || b.PPS > 2000 {
		t.Errorf("baseline %v after 60 rounds at 900 and 5 at 3000 with alpha 0.1: want 900..2000", b)
	}
	step(Rates{PPS: 10_000})
	if b2, _ := d.Baseline(victim); b2 != b {
		t.Errorf("baseline learned a rate above the trigger level: %v -> %v", b, b2)
	}
	ds := step(Rates{PPS: 10_000})
	if len(ds) != 1 || ds[0].Action != Quarantine {
		t.Fatalf("10000 pps on a 900 pps baseline: %+v, want a quarantine", ds)
	}
	if !strings.Contains(ds[0].Reason, "pps 10000 > ") {
		t.Errorf("reason %q does not name the figures", ds[0].Reason)
	}
}

// TestFirstReadingNotLearnedWhole: the first, partial interval of a flood
// (below the threshold) must not become the baseline and raise the
// trigger level (found in the lab: a 2,000 pps first reading made it
// 8,000 pps with K = 4).
func TestFirstReadingNotLearnedWhole(t *testing.T) {
	d := newDet(t, Config{Threshold: Rates{PPS: 5000, BPS: -1, SYN: -1}, Enter: 2, K: 4})
	o := func(pps float64) map[netip.Addr]Observation {
		return map[netip.Addr]Observation{victim: obs(Rates{PPS: pps})}
	}
	d.Step(t0, o(2000), true, nil)
	d.Step(t0.Add(250*time.Millisecond), o(6000), true, nil)
	if ds := d.Step(t0.Add(500*time.Millisecond), o(6000), true, nil); len(ds) != 1 {
		b, _ := d.Baseline(victim)
		t.Errorf("6000 pps over a 5000 threshold after a 2000 pps first reading: %+v (baseline %v), want a quarantine", ds, b)
	}
}

func TestOverride(t *testing.T) {
	d := newDet(t, Config{Threshold: Rates{PPS: 1000}, Enter: 1, Override: map[netip.Addr]Rates{victim: {PPS: 100_000}}})
	o := map[netip.Addr]Observation{victim: obs(Rates{PPS: 5000}), other: obs(Rates{PPS: 5000})}
	ds := d.Step(t0, o, true, nil)
	if len(ds) != 1 || ds[0].Addr != other {
		t.Errorf("decisions %+v, want only %v quarantined (%v has a higher override)", ds, other, victim)
	}
}

func TestForgetAndBound(t *testing.T) {
	d := newDet(t, Config{Threshold: Rates{PPS: 1000}, Enter: 1, MaxTracked: 1})
	o := map[netip.Addr]Observation{victim: obs(Rates{PPS: 5000})}
	if ds := d.Step(t0, o, true, nil); len(ds) != 1 {
		t.Fatalf("decisions %+v", ds)
	}
	o = map[netip.Addr]Observation{other: obs(Rates{PPS: 5000})}
	if ds := d.Step(t0, o, true, map[netip.Addr]string{victim: "ddos"}); len(ds) != 0 || d.Dropped != 1 {
		t.Errorf("beyond MaxTracked: decisions %+v dropped %d, want none and 1", ds, d.Dropped)
	}
	d.Forget(victim)
	if ds := d.Step(t0, o, true, nil); len(ds) != 1 || ds[0].Addr != other {
		t.Errorf("after Forget: %+v", ds)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{K: 0.5}, {Alpha: 2}, {Release: 1.5}, {Enter: -1}, {Cooldown: -time.Second},
		{Threshold: Rates{PPS: -1, BPS: -1, SYN: -1}}} {
		if _, err := c.Check(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	c, err := Config{}.Check()
	if err != nil || c.Enter != DefaultEnter || c.Threshold.PPS != DefaultPPS || c.Cooldown != DefaultCooldown {
		t.Errorf("defaults: %+v %v", c, err)
	}
}

// TestSetThresholdsAndSetConfig: a set's thresholds replace the global
// ones for the addresses observed with that set (a zero field inherits),
// an address override beats both, and SetConfig changes the levels from
// the next round while keeping the rounds above and the quarantines.
func TestSetThresholdsAndSetConfig(t *testing.T) {
	third := netip.MustParseAddr("198.51.100.9")
	d := newDet(t, Config{Threshold: Rates{PPS: 10_000, BPS: -1, SYN: 1000}, Enter: 2, Cooldown: time.Minute, Alpha: 0.01,
		SetThreshold: map[string]Rates{"busy": {PPS: 50_000}}, Override: map[netip.Addr]Rates{third: {PPS: 100_000}}})
	q := map[netip.Addr]string{} // the quarantines the decisions made
	step := func(at time.Duration, o map[netip.Addr]Observation) []string {
		var got []string
		for _, x := range d.Step(t0.Add(at), o, true, q) {
			got = append(got, x.Action+" "+x.Addr.String()+" "+x.Reason)
			if x.Action == Quarantine {
				q[x.Addr] = "ddos"
			}
		}
		return got
	}
	o := map[netip.Addr]Observation{
		victim: {Rates: Rates{PPS: 20_000}, Edges: 1},              // global 10,000: above
		other:  {Rates: Rates{PPS: 20_000}, Edges: 1, Set: "busy"}, // its set's 50,000: below
		third:  {Rates: Rates{PPS: 20_000}, Edges: 1, Set: "busy"}, // its own 100,000: below
	}
	if got := step(0, o); len(got) != 0 {
		t.Fatalf("round 1: %q", got)
	}
	got := step(250*time.Millisecond, o)
	if len(got) != 1 || !strings.HasPrefix(got[0], "quarantine 198.51.100.7 ") || !strings.Contains(got[0], "pps 20000 > 10000") {
		t.Fatalf("round 2: %q, want 198.51.100.7 alone quarantined against the global 10,000", got)
	}
	// The SYN threshold left out of the set's entry is the global one.
	if lim := d.limit(other, d.eips[other]); lim.SYN != 1000 || lim.PPS != 50_000 {
		t.Errorf("limit of a set address %+v: want pps 50,000 (the set's), SYN 1,000 (inherited)", lim)
	}

	// At run time the set's threshold drops to 15,000: 198.51.100.8 is
	// now above it; its round above (one, counting this) starts with the
	// change, the quarantine of .7 stays.
	c := d.Config()
	c.SetThreshold = map[string]Rates{"busy": {PPS: 15_000}}
	d.SetConfig(c)
	if got := step(500*time.Millisecond, o); len(got) != 0 {
		t.Fatalf("round 3: %q", got)
	}
	got = step(750*time.Millisecond, o)
	if len(got) != 1 || !strings.HasPrefix(got[0], "quarantine 198.51.100.8 ") || !strings.Contains(got[0], "pps 20000 > 15000") {
		t.Fatalf("round 4: %q, want 198.51.100.8 quarantined against the new 15,000", got)
	}
	if d.eips[victim] == nil || !d.eips[victim].quarantined {
		t.Error("SetConfig lost the quarantine state of 198.51.100.7")
	}
	// Quiet and unobserved, an address keeps the set it was seen with.
	if lim := d.limit(other, d.eips[other]); lim.PPS != 15_000 {
		t.Errorf("limit %+v after the change", lim)
	}
}

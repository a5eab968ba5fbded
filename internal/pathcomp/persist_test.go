package pathcomp

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestRecordsRestore: a Store rebuilt from another's Records holds the
// same figures, bit for bit, and gives the same paths; an older record
// never overwrites a newer state; bad records are refused.
func TestRecordsRestore(t *testing.T) {
	a := NewStore(Config{})
	hops := []hopSpec{
		{"e", "o", true, 50 * ms, 0.2}, {"e", "r1", false, 10 * ms, 0}, {"r1", "o", true, 12 * ms, 0.01},
		{"e", "r2", false, 7 * ms, 0},
	}
	for k := 0; k < 5; k++ {
		for i, h := range hops {
			h.rtt += time.Duration(k*i) * ms
			mustIngest(t, a, meas(h, t0.Add(time.Duration(k)*time.Second)))
		}
	}
	// r2 never answered available after its first report: its RTT stays.
	mustIngest(t, a, Measurement{From: "e", To: "r2", At: t0.Add(6 * time.Second)})
	// A hop only ever reported unavailable: RTT NaN.
	mustIngest(t, a, Measurement{From: "r2", To: "o", ToOrigin: true, At: t0.Add(6 * time.Second)})

	b := NewStore(Config{})
	now := t0.Add(7 * time.Second)
	for _, r := range a.Records() {
		if ok, err := b.Restore(r, now); !ok || err != nil {
			t.Fatalf("restore %+v: %v %v", r, ok, err)
		}
	}
	ha, hb := a.Hops(now), b.Hops(now)
	if len(ha) != len(hb) {
		t.Fatalf("%d hops restored, want %d", len(hb), len(ha))
	}
	for i := range ha {
		if ha[i] != hb[i] && !(math.IsInf(ha[i].Cost, 1) && ha[i].From == hb[i].From && ha[i].To == hb[i].To && ha[i].Failed == hb[i].Failed) {
			t.Errorf("hop %d: restored %+v, want %+v", i, hb[i], ha[i])
		}
	}
	sa, sb := NewSelector(Hysteresis{}), NewSelector(Hysteresis{})
	sa.Update(a.Snapshot(now), "e")
	sb.Update(b.Snapshot(now), "e")
	pa, _ := sa.Path("e", "o")
	pb, since, _ := sb.PathSince("e", "o")
	if !pa.Same(pb) || pa.Cost != pb.Cost || pa.Relays() != 1 {
		t.Errorf("restored store's path %v, original's %v (want the detour via r1)", pb, pa)
	}
	if !since.Equal(now) {
		t.Errorf("since %v, want the snapshot's time %v", since, now)
	}

	// Older record: not taken; newer: taken.
	r, _ := a.Record("e", "o")
	old := r
	old.Last, old.RTTms = r.Last.Add(-time.Second), 1
	if ok, err := b.Restore(old, now); ok || err != nil {
		t.Errorf("older record taken: %v %v", ok, err)
	}
	if got, _ := b.Record("e", "o"); got.RTTms != r.RTTms {
		t.Errorf("older record changed the hop: %v", got.RTTms)
	}
	newer := r
	newer.Last, newer.RTTms = r.Last.Add(time.Second), 1
	if ok, err := b.Restore(newer, now); !ok || err != nil {
		t.Errorf("newer record refused: %v %v", ok, err)
	}

	for name, bad := range map[string]HopRecord{
		"rtt negative": {From: "e", To: "x", RTTms: -1, Last: t0},
		"rtt huge":     {From: "e", To: "x", RTTms: 1e9, Last: t0},
		"up no rtt":    {From: "e", To: "x", RTTms: math.NaN(), Up: true, Last: t0},
		"loss":         {From: "e", To: "x", RTTms: 1, Loss: 2, Last: t0},
		"name":         {From: "e f", To: "x", RTTms: 1, Last: t0},
		"no time":      {From: "e", To: "x", RTTms: 1},
	} {
		if ok, err := b.Restore(bad, now); ok || err == nil {
			t.Errorf("%s: record %+v taken", name, bad)
		}
	}
	if _, err := b.Restore(HopRecord{From: "e", To: "r1", ToOrigin: true, RTTms: 1, Last: now}, now); !errors.Is(err, ErrKindClash) {
		t.Errorf("relay recorded as origin: %v, want ErrKindClash", err)
	}
	// From the future (beyond MaxSkew): refused like such a report, and
	// the hop keeps its state; within MaxSkew: taken.
	future := r
	future.Last, future.RTTms = now.Add(b.Config().MaxSkew+time.Nanosecond), 2
	if ok, err := b.Restore(future, now); ok || err == nil || !strings.Contains(err.Error(), "last:") {
		t.Errorf("record from the future: taken %v, %v", ok, err)
	}
	if got, _ := b.Record("e", "o"); got.RTTms != 1 {
		t.Errorf("record from the future changed the hop: rtt %v, want 1", got.RTTms)
	}
	future.Last = now.Add(b.Config().MaxSkew)
	if ok, err := b.Restore(future, now); !ok || err != nil {
		t.Errorf("record within the skew refused: %v %v", ok, err)
	}
}

// TestForget: hops not reported since the cut are dropped with the nodes
// left without hops; what stays keeps its figures and paths; the
// Selector forgets the gone origins and edges.
func TestForget(t *testing.T) {
	s := NewStore(Config{ReportInterval: time.Hour})
	old := []hopSpec{{"e", "gone", false, ms, 0}, {"gone", "o2", true, ms, 0}, {"e", "o2", true, 100 * ms, 0}}
	for _, h := range old {
		mustIngest(t, s, meas(h, t0))
	}
	fresh := []hopSpec{{"e", "r", false, 5 * ms, 0}, {"r", "o", true, 5 * ms, 0}, {"e", "o", true, 50 * ms, 0}}
	for _, h := range fresh {
		mustIngest(t, s, meas(h, t0.Add(time.Minute)))
	}
	sel := NewSelector(Hysteresis{})
	now := t0.Add(2 * time.Minute)
	sel.Update(s.Snapshot(now), "e")
	if p, ok := sel.Path("e", "o2"); !ok || p.Relays() != 1 {
		t.Fatalf("before: e→o2 %v", p)
	}
	before, _ := s.Record("r", "o")
	hops, nodes := s.Forget(t0.Add(30 * time.Second))
	if hops != 3 || nodes != 2 {
		t.Errorf("forgot %d hops and %d nodes, want 3 (e→gone, gone→o2, e→o2) and 2 (gone, o2)", hops, nodes)
	}
	if n, h := s.Len(); n != 3 || h != 3 {
		t.Errorf("left %d nodes and %d hops, want 3 and 3", n, h)
	}
	if _, ok := s.Record("e", "gone"); ok {
		t.Error("e→gone still there")
	}
	if after, ok := s.Record("r", "o"); !ok || after != before {
		t.Errorf("r→o changed by Forget: %+v, was %+v", after, before)
	}
	g := s.Snapshot(now)
	sel.Retain(g, func(e string) bool { return true })
	if _, ok := sel.Path("e", "o2"); ok {
		t.Error("selector still answers for the forgotten origin o2")
	}
	if p, ok := sel.Path("e", "o"); !ok || p.Relays() != 1 || g.PathCost(p) != 10 {
		t.Errorf("e→o after Forget: %v (cost now %v), want e→r→o at 10 ms", p, g.PathCost(p))
	}
	if _, err := sel.Update(g, "e"); err != nil {
		t.Fatal(err)
	}
	// A name forgotten can come back, of either kind.
	mustIngest(t, s, meas(hopSpec{"e", "gone", true, ms, 0}, now))
	sel.Retain(g, func(e string) bool { return false })
	if e, p := sel.Len(); e != 0 || p != 0 {
		t.Errorf("Retain refusing every edge left %d edges, %d pairs", e, p)
	}
	if hops, nodes := s.Forget(t0); hops != 0 || nodes != 0 {
		t.Errorf("nothing older than t0, forgot %d, %d", hops, nodes)
	}
}

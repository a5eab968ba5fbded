package edge

import (
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// fakeClock is the drift plan's clock and timers in the tests: time moves
// when the test says, and a timer fires when the test calls it.
type fakeClock struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time // when it fires: the clock when scheduled + its duration
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Stopper {
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// pending is the timers scheduled and not stopped.
func (c *fakeClock) pending() []*fakeTimer {
	var out []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped {
			out = append(out, t)
		}
	}
	return out
}

// fire moves the clock to the one pending timer's instant, which must be
// want, and runs it (as time.AfterFunc would: the timer is spent).
func (c *fakeClock) fire(t *testing.T, want time.Time) {
	t.Helper()
	p := c.pending()
	if len(p) != 1 {
		t.Fatalf("%d timers pending, want 1", len(p))
	}
	if !p[0].at.Equal(want) {
		t.Fatalf("timer at %v, want %v", p[0].at, want)
	}
	c.now = p[0].at
	p[0].stopped = true
	p[0].f()
}

var (
	t0     = time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	h1     = a("198.18.11.1") // az1-h1, guest g1 VSID 5001: the EIP's previous binding
	h2     = a("198.18.21.1") // az2-h1, guest g1 VSID 6001: its live binding
	eipD   = a("198.51.100.7")
	eipD6  = a("2001:db8:e1::7")
	grace  = 10 * time.Second
	before = dataplane.Route{Host: h1, VSID: 5001}
	// holding: the delay's route, every packet to h1, replies from both.
	holding = dataplane.Route{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001, PrevAll: true}
)

// driftRegion is region() with an IPv6 EIP bound like the IPv4 one.
func driftRegion() []model.Object {
	objs := region()
	for _, o := range objs {
		if s, ok := o.(*model.EdgeSet); ok {
			s.Prefixes = append(s.Prefixes, netip.MustParsePrefix("2001:db8:e1::/48"))
		}
	}
	return append(objs, &model.EIP{Address: eipD6, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
}

// moved is EIP addr bound to az2-h1/g1, moved from az1-h1/g1 at `at`.
func moved(addr netip.Addr, at time.Time) *model.EIP {
	return &model.EIP{Address: addr, Binding: &model.Binding{Host: "az2-h1", Guest: "g1"},
		Previous: &model.PreviousBinding{Host: "az1-h1", Guest: "g1", Underlay: h1, VSID: 5001, Until: at.Add(grace)}}
}

func newDriftReconciler(delay time.Duration) (*Reconciler, *dataplane.FakeEdge, *fakeClock) {
	clk := &fakeClock{now: t0}
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, DriftDelay: delay, Now: clk.Now, AfterFunc: clk.AfterFunc}, fake)
	return r, fake, clk
}

// checkRoutes compares the IPv4 and IPv6 EIPs' routes with want (slots
// aside, which must not move).
func checkRoutes(t *testing.T, step string, fake *dataplane.FakeEdge, slots map[netip.Addr]uint32, want dataplane.Route) {
	t.Helper()
	for _, e := range []netip.Addr{eipD, eipD6} {
		got := fake.Routes()[e]
		if slots[e] != got.StatsIdx {
			t.Errorf("%s: %v's counter slot %d, was %d", step, e, got.StatsIdx, slots[e])
		}
		got.StatsIdx = 0
		if got != want {
			t.Errorf("%s: %v routed %+v, want %+v", step, e, got, want)
		}
	}
}

// TestReconcileDrift: a bind that moves an EIP (IPv4 and IPv6) to another
// host sends every packet to the previous binding (replies taken from
// both) for --drift-delay after the edge saw the move, then routes to the live binding with the
// previous one, then, when Until passes, to the live binding alone, each
// step by the reconciler's own timer (the injected clock), the counter
// slot kept; the controller's late clearing write changes nothing.
func TestReconcileDrift(t *testing.T) {
	r, fake, clk := newDriftReconciler(200 * time.Millisecond)
	defer r.Stop()
	load(t, r, 10, driftRegion()...)
	slots := map[netip.Addr]uint32{eipD: fake.Routes()[eipD].StatsIdx, eipD6: fake.Routes()[eipD6].StatsIdx}
	checkRoutes(t, "bound", fake, slots, before)
	if len(clk.pending()) != 0 || !r.DriftWake().IsZero() {
		t.Fatalf("a wake-up without a drift: %v", r.DriftWake())
	}

	clk.now = t0.Add(time.Second) // the controller's write reaches the edge a second after the move
	watched(t, r, 11, moved(eipD, t0), moved(eipD6, t0))
	checkRoutes(t, "delay", fake, slots, holding)
	if n := r.Status(t0, nil).Draining; n != 2 {
		t.Errorf("status: %d EIPs draining, want 2", n)
	}
	if w := r.DriftWake(); !w.Equal(clk.now.Add(200 * time.Millisecond)) {
		t.Errorf("wake-up at %v, want the delay's end", w)
	}
	applies := r.Applies()

	clk.fire(t, t0.Add(1200*time.Millisecond))
	live := dataplane.Route{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001}
	checkRoutes(t, "drift", fake, slots, live)
	if r.Applies() != applies+1 {
		t.Errorf("the wake-up applied %d commits, want 1", r.Applies()-applies)
	}
	if w := r.DriftWake(); !w.Equal(t0.Add(grace)) {
		t.Errorf("wake-up at %v, want Until %v", w, t0.Add(grace))
	}

	// A store commit meanwhile (another EIP) leaves the drift as it is.
	watched(t, r, 12, &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	checkRoutes(t, "drift, another commit", fake, slots, live)

	clk.fire(t, t0.Add(grace))
	checkRoutes(t, "after Until", fake, slots, dataplane.Route{Host: h2, VSID: 6001})
	if n := r.Status(t0, nil).Draining; n != 0 {
		t.Errorf("status after Until: %d EIPs draining, want 0", n)
	}
	if len(clk.pending()) != 0 || !r.DriftWake().IsZero() {
		t.Errorf("a wake-up after the drift: %v", r.DriftWake())
	}
	clk.now = clk.now.Add(3 * time.Second)
	watched(t, r, 13, &model.EIP{Address: eipD, Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}},
		&model.EIP{Address: eipD6, Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	checkRoutes(t, "cleared", fake, slots, dataplane.Route{Host: h2, VSID: 6001})
	if len(r.driftSeen) != 0 {
		t.Errorf("first sights kept after the Previous went: %v", r.driftSeen)
	}
}

// TestReconcileDriftCases: no delay (straight to the drift), a Previous
// already past its Until, one naming the live host and VSID, a full
// resync during the delay (the first sight is kept), a second move (a new
// first sight), an unbind, and Stop (no timer left).
func TestReconcileDriftCases(t *testing.T) {
	live := dataplane.Route{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001}
	t.Run("no delay", func(t *testing.T) {
		r, fake, clk := newDriftReconciler(0)
		defer r.Stop()
		load(t, r, 10, driftRegion()...)
		watched(t, r, 11, moved(eipD, t0))
		if got := fake.Routes()[eipD]; got.Host != live.Host || got.PrevHost != live.PrevHost || got.PrevVSID != live.PrevVSID {
			t.Errorf("routed %+v, want %+v", got, live)
		}
		clk.fire(t, t0.Add(grace))
		if got := fake.Routes()[eipD]; got.Drifts() || got.Host != h2 {
			t.Errorf("after Until: %+v", got)
		}
	})
	t.Run("past its Until", func(t *testing.T) {
		r, fake, clk := newDriftReconciler(200 * time.Millisecond)
		defer r.Stop()
		load(t, r, 10, driftRegion()...)
		watched(t, r, 11, moved(eipD, t0.Add(-grace)))
		if got := fake.Routes()[eipD]; got.Drifts() || got.Host != h2 || got.VSID != 6001 {
			t.Errorf("routed %+v, want the live binding alone", got)
		}
		if len(clk.pending()) != 0 {
			t.Error("a timer for an expired Previous")
		}
	})
	t.Run("previous is the live host and VSID", func(t *testing.T) {
		r, fake, _ := newDriftReconciler(200 * time.Millisecond)
		defer r.Stop()
		load(t, r, 10, driftRegion()...)
		e := moved(eipD, t0)
		e.Previous.Underlay, e.Previous.VSID, e.Previous.Guest = h2, 6001, "g0"
		watched(t, r, 11, e)
		if got := fake.Routes()[eipD]; got.Drifts() || got.Host != h2 {
			t.Errorf("routed %+v, want the live binding alone", got)
		}
	})
	t.Run("resync during the delay, then a second move", func(t *testing.T) {
		r, fake, clk := newDriftReconciler(200 * time.Millisecond)
		defer r.Stop()
		objs := append(driftRegion(), moved(eipD, t0))
		load(t, r, 10, objs...)
		if got := fake.Routes()[eipD]; got != (dataplane.Route{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001, PrevAll: true, StatsIdx: got.StatsIdx}) {
			t.Fatalf("delay: %+v", got)
		}
		clk.now = clk.now.Add(150 * time.Millisecond)
		load(t, r, 11, objs...) // a reconnection's full load: the first sight stays
		if got := fake.Routes()[eipD]; got.Host != h2 || got.PrevHost != h1 || !got.PrevAll {
			t.Fatalf("delay after the resync: %+v", got)
		}
		clk.fire(t, t0.Add(200*time.Millisecond))
		if got := fake.Routes()[eipD]; got.Host != h2 || got.PrevHost != h1 || got.PrevAll {
			t.Fatalf("drift: %+v", got)
		}
		// It moves back to az1-h1 from az2-h1: a new Previous, seen now.
		back := &model.EIP{Address: eipD, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"},
			Previous: &model.PreviousBinding{Host: "az2-h1", Guest: "g1", Underlay: h2, VSID: 6001, Until: clk.now.Add(grace)}}
		clk.now = clk.now.Add(time.Second)
		watched(t, r, 12, back)
		if got := fake.Routes()[eipD]; got.Host != h1 || got.PrevHost != h2 || got.PrevVSID != 6001 || !got.PrevAll {
			t.Fatalf("second move's delay: %+v", got)
		}
		clk.fire(t, clk.now.Add(200*time.Millisecond))
		if got := fake.Routes()[eipD]; got.Host != h1 || got.PrevHost != h2 || got.PrevVSID != 6001 || got.PrevAll {
			t.Fatalf("second move's drift: %+v", got)
		}
	})
	t.Run("unbind and stop", func(t *testing.T) {
		r, fake, clk := newDriftReconciler(200 * time.Millisecond)
		load(t, r, 10, driftRegion()...)
		watched(t, r, 11, moved(eipD, t0))
		watched(t, r, 12, &model.EIP{Address: eipD})
		if _, ok := fake.Routes()[eipD]; ok {
			t.Error("unbound EIP still routed")
		}
		if len(clk.pending()) != 0 {
			t.Error("a timer left for an unbound EIP")
		}
		watched(t, r, 13, moved(eipD, t0))
		r.Stop()
		if len(clk.pending()) != 0 {
			t.Error("a timer left after Stop")
		}
	})
}

// TestDriftPlan: the plan as a function of (live route, Previous, first
// sight, now, delay) and its next change.
func TestDriftPlan(t *testing.T) {
	w := Want{Host: h2, VSID: 6001}
	p := &model.PreviousBinding{Underlay: h1, VSID: 5001, Until: t0.Add(grace)}
	d := 200 * time.Millisecond
	for _, c := range []struct {
		name string
		now  time.Time
		want Want
		next time.Time
	}{
		{"first sight", t0, Want{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001, PrevAll: true}, t0.Add(d)},
		{"just before the delay ends", t0.Add(d - 1), Want{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001, PrevAll: true}, t0.Add(d)},
		{"the delay's end", t0.Add(d), Want{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001}, t0.Add(grace)},
		{"just before Until", t0.Add(grace - 1), Want{Host: h2, VSID: 6001, PrevHost: h1, PrevVSID: 5001}, t0.Add(grace)},
		{"Until", t0.Add(grace), w, time.Time{}},
	} {
		if got := driftPlan(w, p, t0, c.now, d); got != c.want {
			t.Errorf("%s: plan %+v, want %+v", c.name, got, c.want)
		}
		if got := driftNext(p, t0, c.now, d); !got.Equal(c.next) {
			t.Errorf("%s: next change %v, want %v", c.name, got, c.next)
		}
	}
	// A delay past Until: the previous binding alone until Until.
	if got := driftNext(p, t0, t0, grace+time.Second); !got.Equal(t0.Add(grace)) {
		t.Errorf("delay past Until: next change %v", got)
	}
	if got := driftPlan(w, nil, t0, t0, d); got != w {
		t.Errorf("no Previous: %+v", got)
	}
	// A previous host of the IPv6 underlay (issue 21): the edges drift to
	// it as to an IPv4 one (its route names it by its ul6_hosts name).
	p6 := &model.PreviousBinding{Underlay: netip.MustParseAddr("2001:db8:f0::21"), VSID: 5001, Until: t0.Add(grace)}
	if got := driftPlan(w, p6, t0, t0.Add(d), d); got != (Want{Host: h2, VSID: 6001, PrevHost: p6.Underlay, PrevVSID: 5001}) {
		t.Errorf("IPv6 previous host: plan %+v", got)
	}
	if got := driftPlan(w, &model.PreviousBinding{VSID: 5001, Until: t0.Add(grace)}, t0, t0, d); got != w {
		t.Errorf("no previous underlay: %+v", got)
	}
}

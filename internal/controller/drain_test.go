package controller

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

const driftTestGrace = 10 * time.Second

// eipPrevious reads EIP key's Previous from the controller.
func eipPrevious(t *testing.T, c *Core, key string) *model.PreviousBinding {
	t.Helper()
	o, _, _, err := c.Get(model.KindEIP, key)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*model.EIP).Previous
}

func bind(t *testing.T, c *Core, key, host, guest string) {
	t.Helper()
	if _, err := c.Bind(context.Background(), key, IfMatch{}, model.Binding{Host: host, Guest: guest}); err != nil {
		t.Fatalf("bind %s to %s/%s: %v", key, host, guest, err)
	}
}

// TestBindDrains: a bind that moves an EIP to another host records the
// binding it leaves (host, guest, the host's underlay, the guest's VSID,
// the bind's time plus the drift grace), copies the EIP into the old
// host's scope while it lasts, and the controller clears it when the
// grace ends; a move within a host and an unbind record none.
func TestBindDrains(t *testing.T) {
	c, _ := openCoreWith(t, "", Config{DriftGrace: driftTestGrace})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.now = clk.now
	ctx := context.Background()
	if _, err := c.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.7"); p != nil {
		t.Fatalf("applied EIP has a previous binding %+v", p)
	}

	start := clk.now()
	bind(t, c, "198.51.100.7", "h3", "g4")
	want := model.PreviousBinding{Host: "h1", Guest: "g1", Underlay: netip.MustParseAddr("198.18.1.1"), VSID: 5001, Until: start.Add(driftTestGrace)}
	if p := eipPrevious(t, c, "198.51.100.7"); p == nil || *p != want {
		t.Fatalf("moved h1/g1 -> h3/g4: previous %+v, want %+v", p, want)
	}
	cp := checkCopies(t, c, "move to h3")
	expectScopes(t, "move to h3", cp, model.KindEIP, "198.51.100.7", "set/prefix-a", "host/h1", "host/h3")

	// Within a host: nothing drains (the edges steer by host).
	bind(t, c, "198.51.100.130", "h2", "g3")
	if p := eipPrevious(t, c, "198.51.100.130"); p != nil {
		t.Fatalf("moved within h2: previous %+v, want none", p)
	}
	// A rebind to the same binding keeps the drain that runs.
	clk.advance(time.Second)
	bind(t, c, "198.51.100.7", "h3", "g4")
	if p := eipPrevious(t, c, "198.51.100.7"); p == nil || *p != want {
		t.Fatalf("rebound where it is: previous %+v, want %+v", p, want)
	}
	// Another move starts a drain from the host it leaves.
	bind(t, c, "198.51.100.130", "h1", "g1")
	want130 := model.PreviousBinding{Host: "h2", Guest: "g3", Underlay: netip.MustParseAddr("198.18.1.2"), VSID: 5003, Until: clk.now().Add(driftTestGrace)}
	if p := eipPrevious(t, c, "198.51.100.130"); p == nil || *p != want130 {
		t.Fatalf("moved h2/g3 -> h1/g1: previous %+v, want %+v", p, want130)
	}

	// The first drain ends: the loop clears it (and only it), and the
	// EIP's copy leaves h1's scope.
	clk.advance(driftTestGrace - time.Second)
	c.pokeDrain()
	waitUntil(t, "the first drain cleared", func() bool { return eipPrevious(t, c, "198.51.100.7") == nil })
	if p := eipPrevious(t, c, "198.51.100.130"); p == nil {
		t.Fatal("the second drain was cleared before its grace ended")
	}
	cp = checkCopies(t, c, "first drain ended")
	expectScopes(t, "first drain ended", cp, model.KindEIP, "198.51.100.7", "set/prefix-a", "host/h3")
	expectScopes(t, "first drain ended", cp, model.KindEIP, "198.51.100.130", "set/prefix-b", "host/h1", "host/h2")

	// An unbind ends a drain at once.
	if _, err := c.Unbind(ctx, "198.51.100.130", IfMatch{}); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.130"); p != nil {
		t.Fatalf("unbound: previous %+v, want none", p)
	}
	c.view.mu.RLock()
	n := len(c.view.st.Draining())
	c.view.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d EIPs still draining", n)
	}
}

// TestBindDrainsOff: with no drift grace a move records nothing.
func TestBindDrainsOff(t *testing.T) {
	c, _ := openCoreWith(t, "", Config{})
	if _, err := c.Apply(context.Background(), scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(t, c, "198.51.100.7", "h3", "g4")
	if p := eipPrevious(t, c, "198.51.100.7"); p != nil {
		t.Fatalf("grace 0: previous %+v, want none", p)
	}
}

// TestPreviousOf: the drain a bind records, case by case.
func TestPreviousOf(t *testing.T) {
	st := model.NewState()
	doc := scopeRegion()
	for i := range doc.AZs {
		if _, err := st.Put(&doc.AZs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range doc.Hosts {
		if _, err := st.Put(&doc.Hosts[i]); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	running := &model.PreviousBinding{Host: "h1", Guest: "g1", Underlay: netip.MustParseAddr("198.18.1.1"), VSID: 5001, Until: now.Add(time.Second)}
	ended := &model.PreviousBinding{Host: "h1", Guest: "g1", Underlay: netip.MustParseAddr("198.18.1.1"), VSID: 5001, Until: now}
	for _, tc := range []struct {
		name  string
		from  *model.Binding
		prev  *model.PreviousBinding
		to    model.Binding
		grace time.Duration
		want  *model.PreviousBinding
	}{
		{"unbound", nil, nil, model.Binding{Host: "h3", Guest: "g4"}, time.Second, nil},
		{"grace off", &model.Binding{Host: "h2", Guest: "g2"}, nil, model.Binding{Host: "h3", Guest: "g4"}, 0, nil},
		{"to another host", &model.Binding{Host: "h2", Guest: "g2"}, nil, model.Binding{Host: "h3", Guest: "g4"}, time.Second,
			&model.PreviousBinding{Host: "h2", Guest: "g2", Underlay: netip.MustParseAddr("198.18.1.2"), VSID: 5002, Until: now.Add(time.Second)}},
		{"within a host", &model.Binding{Host: "h2", Guest: "g2"}, nil, model.Binding{Host: "h2", Guest: "g3"}, time.Second, nil},
		{"within a host, a drain running elsewhere", &model.Binding{Host: "h2", Guest: "g2"}, running, model.Binding{Host: "h2", Guest: "g3"}, time.Second, running},
		{"within a host, a drain ended", &model.Binding{Host: "h2", Guest: "g2"}, ended, model.Binding{Host: "h2", Guest: "g3"}, time.Second, nil},
		{"back to the draining host", &model.Binding{Host: "h2", Guest: "g2"}, running, model.Binding{Host: "h1", Guest: "g1"}, time.Second,
			&model.PreviousBinding{Host: "h2", Guest: "g2", Underlay: netip.MustParseAddr("198.18.1.2"), VSID: 5002, Until: now.Add(time.Second)}},
		{"from a host that is gone", &model.Binding{Host: "h9", Guest: "g2"}, nil, model.Binding{Host: "h3", Guest: "g4"}, time.Second, nil},
	} {
		e := &model.EIP{Address: netip.MustParseAddr("198.51.100.9"), Binding: tc.from, Previous: tc.prev}
		got := previousOf(st, e, tc.to, tc.grace, now)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: previous %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// waitUntil polls cond until it holds (the controller's loop runs on its
// own goroutine), failing after a bound far above what it takes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
	}
}

// TestRequestCannotSetPrevious: a client's create, replace or apply
// cannot write an EIP's previous binding (it would route the EIP's TCP
// segments to any underlay address and accept that address's packets
// until any time): the stored one is kept while the binding stays, and
// none is taken otherwise.
func TestRequestCannotSetPrevious(t *testing.T) {
	c, _ := openCoreWith(t, "", Config{DriftGrace: driftTestGrace})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.now = clk.now
	ctx := context.Background()
	if _, err := c.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	forged := &model.PreviousBinding{Host: "h9", Guest: "g2", Underlay: netip.MustParseAddr("198.18.0.1"), VSID: 5002, Until: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}
	eipWith := func(addr, host, guest string) *model.EIP {
		return &model.EIP{Address: netip.MustParseAddr(addr), Binding: &model.Binding{Host: host, Guest: guest}, Previous: forged}
	}

	// Replace: no stored drain, none taken.
	if _, err := c.Replace(ctx, "198.51.100.7", IfMatch{}, eipWith("198.51.100.7", "h1", "g1")); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.7"); p != nil {
		t.Fatalf("replace took the request's previous binding %+v", p)
	}
	// Create of a new EIP: none taken.
	if _, err := c.Create(ctx, eipWith("198.51.100.9", "h3", "g4")); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.9"); p != nil {
		t.Fatalf("create took the request's previous binding %+v", p)
	}
	// A drain runs: a replace keeping the binding keeps the stored one,
	// an apply moving the EIP ends it, neither takes the request's.
	bind(t, c, "198.51.100.7", "h2", "g3")
	stored := eipPrevious(t, c, "198.51.100.7")
	if stored == nil {
		t.Fatal("the bind recorded no previous binding")
	}
	if _, err := c.Replace(ctx, "198.51.100.7", IfMatch{}, eipWith("198.51.100.7", "h2", "g3")); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.7"); p == nil || *p != *stored {
		t.Fatalf("replace with the binding kept: previous %+v, want the stored %+v", p, stored)
	}
	doc := &model.Document{EIPs: []model.EIP{*eipWith("198.51.100.7", "h3", "g4")}}
	doc.EIPs[0].Previous = &model.PreviousBinding{Host: "h1", Guest: "g1", Underlay: netip.MustParseAddr("198.18.0.1"), VSID: 5001, Until: forged.Until}
	if _, err := c.Apply(ctx, doc, ApplyOptions{}); err == nil {
		// h3/g4 holds .8: the apply is refused whole; move .9 away first.
		t.Fatal("apply binding a guest that holds another EIP was accepted")
	}
	if _, err := c.Unbind(ctx, "198.51.100.9", IfMatch{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, doc, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := eipPrevious(t, c, "198.51.100.7"); p != nil {
		t.Fatalf("apply moving the EIP: previous %+v, want none", p)
	}
	checkCopies(t, c, "after the requests")
}

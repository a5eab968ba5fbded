package edge

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// tracedEdge is a FakeEdge that records, in order, the route writes, the
// reads of every route (a resync) and the calls of the reconciler's
// OnHosts hook.
type tracedEdge struct {
	*dataplane.FakeEdge
	events []string
	ranges int
}

func (e *tracedEdge) PutRoutes(rs map[netip.Addr]dataplane.Route) error {
	as := make([]netip.Addr, 0, len(rs))
	for a := range rs {
		as = append(as, a)
	}
	slices.SortFunc(as, netip.Addr.Compare)
	for _, a := range as {
		e.events = append(e.events, fmt.Sprintf("route %v via %v", a, rs[a].Host))
	}
	return e.FakeEdge.PutRoutes(rs)
}

func (e *tracedEdge) RangeRoutes(fn func(netip.Addr, dataplane.Route) bool) error {
	e.ranges++
	return e.FakeEdge.RangeRoutes(fn)
}

func newTraced(t *testing.T) (*tracedEdge, *Reconciler) {
	t.Helper()
	fake := &tracedEdge{FakeEdge: dataplane.NewFakeEdge()}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	r.OnHosts = func(us []netip.Addr) {
		fake.events = append(fake.events, fmt.Sprintf("resolve %v", us))
	}
	return fake, r
}

// shareOfPopA is edge-a1's share (--follow-share) with az1-h1 bound: the
// set, the host and its EIPs; az2-h1 is not in it.
func shareOfPopA() []model.Object {
	az1 := &model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
		{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}, {Name: "g2", Address: a("198.19.11.3"), VSID: 5002}}}
	return []model.Object{az1,
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h1", Guest: "g2"}},
	}
}

var az2h1 = &model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g2", Address: a("198.19.21.3"), VSID: 6002}}}

// TestDriftToHostNewToShare: an EIP drifts to a host new to the edge's
// share, so the commit brings the host with the EIP (as the scope's
// copies do, docs/scale.md "Scopes"). The edge starts resolving the new
// host's next hop before it routes the EIP there (the data plane drops an
// encapsulated packet whose next hop is unresolved, and a whole-region
// edge had resolved every host at start), and it reprograms the host's
// EIPs only: it does not read back every route it holds (a resync, with
// a 100k-EIP set, delays the new route by the time to read them all on
// every edge of the set, while the hosts' agents already serve the new
// binding).
func TestDriftToHostNewToShare(t *testing.T) {
	fake, r := newTraced(t)
	load(t, r, 10, shareOfPopA()...)
	if got := fake.events; !slices.Equal(got[:1], []string{"resolve [198.18.11.1]"}) {
		t.Fatalf("the full load: events %q, want the share's host resolved first", got)
	}
	slot := fake.Routes()[a("198.51.100.8")].StatsIdx
	fake.events, fake.ranges = nil, 0

	watched(t, r, 11, az2h1, &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az2-h1", Guest: "g2"}})
	want := []string{"resolve [198.18.21.1]", "route 198.51.100.8 via 198.18.21.1"}
	if !slices.Equal(fake.events, want) {
		t.Errorf("the drift's commit: %q, want %q", fake.events, want)
	}
	if fake.ranges != 0 {
		t.Errorf("the drift's commit read every route back %d times (a resync), want 0", fake.ranges)
	}
	rt := fake.Routes()[a("198.51.100.8")]
	if rt.Host != a("198.18.21.1") || rt.VSID != 6002 || rt.StatsIdx != slot {
		t.Errorf("route after the drift %+v, want via 198.18.21.1, VSID 6002, slot %d", rt, slot)
	}
	if rt := fake.Routes()[a("198.51.100.7")]; rt.Host != a("198.18.11.1") || rt.VSID != 5001 {
		t.Errorf("the other EIP's route %+v, want unchanged", rt)
	}

	// The old host leaves the share with its last EIP: the route of the
	// one still bound to it (a copy not yet deleted here) goes with it.
	fake.events, fake.ranges = nil, 0
	put(t, r, 12, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g2"}})
	r.Delete(model.KindHost, "az1-h1", 12)
	r.Commit(12, false)
	if fake.ranges != 0 {
		t.Errorf("a host leaving the share: every route read back %d times, want 0", fake.ranges)
	}
	if got := fake.events; !slices.Equal(got, []string{"route 198.51.100.7 via 198.18.21.1"}) {
		t.Errorf("a host leaving the share: %q, want the EIP routed to the host it moved to, nothing resolved", got)
	}
}

// TestHostChangeReprogramsItsEIPs: a change of a host's object reaches the
// routes of every EIP bound to it, whichever commit brought the EIPs: an
// EIP whose host is not known yet is not routed, and is once the host
// comes (in a later commit); a host's underlay moving moves its routes
// (and is resolved first); a guest leaving its host takes its EIP's
// route; a host gone takes the rest.
func TestHostChangeReprogramsItsEIPs(t *testing.T) {
	fake, r := newTraced(t)
	load(t, r, 10, shareOfPopA()...)
	watched(t, r, 11, &model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g2"}})
	if _, ok := fake.Routes()[a("198.51.100.9")]; ok {
		t.Fatalf("an EIP bound to a host the edge does not know is routed: %v", fake.Routes())
	}
	fake.events = nil
	watched(t, r, 12, az2h1)
	if got, want := fake.events, []string{"resolve [198.18.21.1]", "route 198.51.100.9 via 198.18.21.1"}; !slices.Equal(got, want) {
		t.Errorf("the host came: %q, want %q", got, want)
	}

	fake.events = nil
	moved := *az2h1
	moved.Underlay = a("198.18.21.9")
	watched(t, r, 13, &moved)
	if got, want := fake.events, []string{"resolve [198.18.21.9]", "route 198.51.100.9 via 198.18.21.9"}; !slices.Equal(got, want) {
		t.Errorf("the host's underlay moved: %q, want %q", got, want)
	}

	fake.events = nil
	guestAdded := moved
	guestAdded.Guests = append(slices.Clone(moved.Guests), model.Guest{Name: "g3", Address: a("198.19.21.5"), VSID: 6003})
	watched(t, r, 14, &guestAdded)
	if len(fake.events) != 0 {
		t.Errorf("a guest added to a known host: %q, want nothing resolved or rewritten", fake.events)
	}

	az1 := shareOfPopA()[0].(*model.Host)
	az1.Guests = az1.Guests[:1] // g2 leaves az1-h1
	watched(t, r, 15, az1)
	if _, ok := fake.Routes()[a("198.51.100.8")]; ok {
		t.Errorf("the EIP of a guest gone from its host is still routed: %v", fake.Routes())
	}
	if rt := fake.Routes()[a("198.51.100.7")]; rt.Host != a("198.18.11.1") {
		t.Errorf("the host's other EIP: %+v, want still via 198.18.11.1", rt)
	}

	r.Delete(model.KindHost, "az2-h1", 16)
	r.Commit(16, false)
	got := fake.Routes()
	if _, ok := got[a("198.51.100.9")]; ok || len(got) != 1 {
		t.Errorf("routes after az2-h1 went: %v, want 198.51.100.7 alone", got)
	}
	if fake.ranges != 1 {
		t.Errorf("the routes were read back %d times, want once (the full load)", fake.ranges)
	}
}

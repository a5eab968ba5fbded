package edge

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

// region builds a small consistent state.
func region(t *testing.T) *model.State {
	t.Helper()
	st := model.NewState()
	objs := []model.Object{
		&model.AZ{Name: "az1"}, &model.AZ{Name: "az2"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		&model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 6001}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: a("198.51.100.8")},
	}
	for _, o := range objs {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestReconcileFullAndIncremental(t *testing.T) {
	st := region(t)
	fake := dataplane.NewFakeEdge()
	r, err := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 10, nil, true)
	if got := fake.Config.Underlay; got != a("198.18.0.1") {
		t.Fatalf("underlay %v", got)
	}
	if len(fake.RouteMap) != 1 {
		t.Fatalf("routes %v, want only the bound EIP", fake.RouteMap)
	}
	rt := fake.RouteMap[a("198.51.100.7")]
	if rt.Host != a("198.18.11.1") || rt.VSID != 5001 {
		t.Fatalf("route %+v", rt)
	}
	slot := rt.StatsIdx

	// Drift: one EIP event moves the route and keeps its counter slot.
	e := &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}}
	if _, err := st.Put(e); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 11, []store.Event{{Kind: model.KindEIP, Key: "198.51.100.7", Obj: e}}, false)
	rt = fake.RouteMap[a("198.51.100.7")]
	if rt.Host != a("198.18.21.1") || rt.VSID != 6001 || rt.StatsIdx != slot {
		t.Fatalf("after drift %+v (slot was %d)", rt, slot)
	}

	// Bind the second EIP: a new slot.
	e2 := &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}}
	if _, err := st.Put(e2); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 12, []store.Event{{Kind: model.KindEIP, Key: "198.51.100.8", Obj: e2}}, false)
	if s := fake.RouteMap[a("198.51.100.8")].StatsIdx; s == slot {
		t.Fatalf("two EIPs share counter slot %d", s)
	}

	// Host underlay change: a host event leads to a full sync.
	h := *st.Hosts["az2-h1"]
	h.Underlay = a("198.18.21.9")
	if _, err := st.Put(&h); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 13, []store.Event{{Kind: model.KindHost, Key: "az2-h1", Obj: &h}}, false)
	if got := fake.RouteMap[a("198.51.100.7")].Host; got != a("198.18.21.9") {
		t.Fatalf("host move not followed: %v", got)
	}

	// Unbind: the route goes, its slot is reused by the next EIP.
	un := &model.EIP{Address: a("198.51.100.7")}
	st.Put(un)
	r.Handle(st, 14, []store.Event{{Kind: model.KindEIP, Key: "198.51.100.7", Obj: un}}, false)
	if _, ok := fake.RouteMap[a("198.51.100.7")]; ok {
		t.Fatal("unbound EIP still routed")
	}
	if r.rev != 14 {
		t.Fatalf("rev %d", r.rev)
	}
}

func TestRestartAdoptsMaps(t *testing.T) {
	st := region(t)
	fake := dataplane.NewFakeEdge()
	r1, _ := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	r1.Handle(st, 5, nil, true)
	before := fake.RouteMap[a("198.51.100.7")]
	fake.Counters[before.StatsIdx] = dataplane.Counters{RxPackets: 42}

	// A new daemon on the same (pinned) maps changes nothing and keeps
	// the counters.
	r2, err := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	if err != nil {
		t.Fatal(err)
	}
	r2.Handle(st, 5, nil, true)
	if after := fake.RouteMap[a("198.51.100.7")]; after != before {
		t.Fatalf("route changed across restart: %+v -> %+v", before, after)
	}
	if fake.Counters[before.StatsIdx].RxPackets != 42 {
		t.Fatal("counters lost across restart")
	}
	// Stale routes left by a previous run are removed.
	fake.RouteMap[a("198.51.100.99")] = dataplane.Route{Host: a("198.18.11.1"), VSID: 5001, StatsIdx: 77}
	r3, _ := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	r3.Handle(st, 6, nil, true)
	if _, ok := fake.RouteMap[a("198.51.100.99")]; ok {
		t.Fatal("stale route kept")
	}
}

func TestFailureKeepsStateAndRecovers(t *testing.T) {
	st := region(t)
	faulty := &dataplane.FaultyEdge{EdgeMaps: dataplane.NewFakeEdge()}
	r, _ := NewReconciler(Config{Name: "edge-a1", Log: quiet}, faulty)
	r.Handle(st, 1, nil, true)
	faulty.SetFail(true)
	e := &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}}
	st.Put(e)
	r.Handle(st, 2, []store.Event{{Kind: model.KindEIP, Key: e.Key(), Obj: e}}, false)
	if len(r.errs) == 0 || r.rev != 1 {
		t.Fatalf("failure not reported (errs %v, rev %d)", r.errs, r.rev)
	}
	got, _ := faulty.Routes()
	if got[a("198.51.100.7")].Host != a("198.18.11.1") {
		t.Fatal("failed write changed the route")
	}
	faulty.SetFail(false)
	// The next change, whatever it is, resyncs everything.
	e8 := &model.EIP{Address: a("198.51.100.8"), Description: "touched"}
	st.Put(e8)
	r.Handle(st, 3, []store.Event{{Kind: model.KindEIP, Key: e8.Key(), Obj: e8}}, false)
	got, _ = faulty.Routes()
	if got[a("198.51.100.7")].Host != a("198.18.21.1") || r.rev != 3 || len(r.errs) != 0 {
		t.Fatalf("did not recover: %+v rev %d errs %v", got, r.rev, r.errs)
	}
}

func TestNotInAnyEdgeSet(t *testing.T) {
	st := region(t)
	fake := dataplane.NewFakeEdge()
	fake.RouteMap[a("198.51.100.7")] = dataplane.Route{Host: a("198.18.11.1"), VSID: 5001}
	r, _ := NewReconciler(Config{Name: "edge-zz", Log: quiet}, fake)
	r.Handle(st, 1, nil, true)
	if len(r.errs) == 0 {
		t.Fatal("no error for an edge outside every set")
	}
	if len(fake.RouteMap) != 1 {
		t.Fatal("routes wiped although the edge's identity is unknown")
	}
}

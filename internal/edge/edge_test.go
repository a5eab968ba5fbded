package edge

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

// region is a small consistent region.
func region() []model.Object {
	return []model.Object{
		&model.AZ{Name: "az1"}, &model.AZ{Name: "az2"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		&model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 6001}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: a("198.51.100.8")},
	}
}

func put(t *testing.T, s store.Sink, rev int64, objs ...model.Object) {
	t.Helper()
	for _, o := range objs {
		b, err := store.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		s.Put(model.KindOf(o), o.Key(), b, rev)
	}
}

// load feeds a full load, as the store does after (re)connecting.
func load(t *testing.T, s store.Sink, rev int64, objs ...model.Object) {
	t.Helper()
	s.Reset()
	put(t, s, rev, objs...)
	s.Commit(rev, true)
}

// watched feeds one watched batch.
func watched(t *testing.T, s store.Sink, rev int64, objs ...model.Object) {
	t.Helper()
	put(t, s, rev, objs...)
	s.Commit(rev, false)
}

func TestReconcileFullAndIncremental(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	load(t, r, 10, region()...)
	if got := fake.Config.Underlay; got != a("198.18.0.1") {
		t.Fatalf("underlay %v", got)
	}
	routes := fake.Routes()
	if len(routes) != 1 {
		t.Fatalf("routes %v, want only the bound EIP", routes)
	}
	rt := routes[a("198.51.100.7")]
	if rt.Host != a("198.18.11.1") || rt.VSID != 5001 {
		t.Fatalf("route %+v", rt)
	}
	slot := rt.StatsIdx

	// Drift: one EIP event moves the route and keeps its counter slot.
	watched(t, r, 11, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	rt = fake.Routes()[a("198.51.100.7")]
	if rt.Host != a("198.18.21.1") || rt.VSID != 6001 || rt.StatsIdx != slot {
		t.Fatalf("after drift %+v (slot was %d)", rt, slot)
	}

	// Bind the second EIP: a new slot.
	watched(t, r, 12, &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	if s := fake.Routes()[a("198.51.100.8")].StatsIdx; s == slot {
		t.Fatalf("two EIPs share counter slot %d", s)
	}

	// A host's underlay moves: every route to it follows.
	watched(t, r, 13, &model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.9"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 6001}}})
	if got := fake.Routes()[a("198.51.100.7")].Host; got != a("198.18.21.9") {
		t.Fatalf("host move not followed: %v", got)
	}

	// Unbind: the route goes and its slot is the next one handed out.
	watched(t, r, 14, &model.EIP{Address: a("198.51.100.7")})
	if _, ok := fake.Routes()[a("198.51.100.7")]; ok {
		t.Fatal("unbound EIP still routed")
	}
	watched(t, r, 15, &model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	if s := fake.Routes()[a("198.51.100.9")].StatsIdx; s != slot {
		t.Fatalf("freed slot %d not reused (got %d)", slot, s)
	}

	// A deleted EIP goes too.
	r.Delete(model.KindEIP, "198.51.100.8", 16)
	r.Commit(16, false)
	if _, ok := fake.Routes()[a("198.51.100.8")]; ok || r.rev != 16 || r.routes != 1 {
		t.Fatalf("after delete: routes %v rev %d count %d", fake.Routes(), r.rev, r.routes)
	}
}

func TestRestartAdoptsMaps(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	load(t, NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake), 5, region()...)
	before := fake.Routes()[a("198.51.100.7")]
	fake.Counters[before.StatsIdx] = dataplane.Counters{RxPackets: 42}

	// A new daemon on the same (pinned) maps changes nothing and keeps
	// the counters.
	load(t, NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake), 5, region()...)
	if after := fake.Routes()[a("198.51.100.7")]; after != before {
		t.Fatalf("route changed across restart: %+v -> %+v", before, after)
	}
	if fake.Counters[before.StatsIdx].RxPackets != 42 {
		t.Fatal("counters lost across restart")
	}
	// Stale routes left by a previous run are removed; a slot in use by
	// an adopted route is never handed out again.
	fake.RouteMap[a("198.51.100.99")] = dataplane.Route{Host: a("198.18.11.1"), VSID: 5001, StatsIdx: 77}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	objs := append(region(), &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	load(t, r, 6, objs...)
	routes := fake.Routes()
	if _, ok := routes[a("198.51.100.99")]; ok {
		t.Fatal("stale route kept")
	}
	if routes[a("198.51.100.8")].StatsIdx == before.StatsIdx {
		t.Fatal("a new EIP got the slot of an adopted one")
	}
}

func TestFailureKeepsStateAndRecovers(t *testing.T) {
	faulty := &dataplane.FaultyEdge{EdgeMaps: dataplane.NewFakeEdge()}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, faulty)
	t.Cleanup(r.Stop)
	load(t, r, 1, region()...)
	faulty.SetFail(true)
	watched(t, r, 2, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	r.mu.Lock()
	errs, rev := r.errs, r.rev
	r.mu.Unlock()
	if len(errs) == 0 || rev != 1 {
		t.Fatalf("failure not reported (errs %v, rev %d)", errs, rev)
	}
	if rt, _, _ := faulty.Route(a("198.51.100.7")); rt.Host != a("198.18.11.1") {
		t.Fatal("failed write changed the route")
	}
	// Once writes work again the commit is retried by itself: no change
	// in the store is needed.
	faulty.SetFail(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		errs, rev = r.errs, r.rev
		r.mu.Unlock()
		rt, _, _ := faulty.Route(a("198.51.100.7"))
		if rev == 2 && len(errs) == 0 && rt.Host == a("198.18.21.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not retried within 10 s: %+v rev %d errs %v", rt, rev, errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And a later change applies as usual.
	watched(t, r, 3, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	if rt, _, _ := faulty.Route(a("198.51.100.7")); rt.Host != a("198.18.11.1") || r.rev != 3 {
		t.Fatalf("did not apply after recovery: %+v rev %d", rt, r.rev)
	}
}

func TestNotInAnyEdgeSet(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	fake.RouteMap[a("198.51.100.7")] = dataplane.Route{Host: a("198.18.11.1"), VSID: 5001}
	r := NewReconciler(Config{Name: "edge-zz", Log: quiet}, fake)
	load(t, r, 1, region()...)
	if len(r.errs) == 0 {
		t.Fatal("no error for an edge outside every set")
	}
	if len(fake.RouteMap) != 1 {
		t.Fatal("routes wiped although the edge's identity is unknown")
	}
}

func TestSlots(t *testing.T) {
	var s slots
	for i := uint32(0); i < 200; i++ {
		if got := s.alloc(); got != i {
			t.Fatalf("alloc %d, want %d", got, i)
		}
	}
	s.free(3)
	s.free(130)
	if got := s.alloc(); got != 3 {
		t.Fatalf("alloc %d, want the freed 3", got)
	}
	if got := s.alloc(); got != 130 {
		t.Fatalf("alloc %d, want the freed 130", got)
	}
	if got := s.alloc(); got != 200 {
		t.Fatalf("alloc %d, want 200", got)
	}
}

// TestIndexMemory holds the edge's state for a million EIPs to a budget
// (the edge's RSS target is 512 MB with the data plane's maps outside it).
func TestIndexMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: builds a million-EIP index")
	}
	x := newIndex()
	before := heapAlloc()
	for h := 0; h < 1000; h++ {
		host := &model.Host{Name: "h" + itoa(h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})}
		for g := 0; g < 1000; g++ {
			host.Guests = append(host.Guests, model.Guest{Name: "g" + itoa(g), Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(model.VSIDMin + g)})
		}
		b, _ := store.Encode(host)
		o, err := model.DecodeStored(model.KindHost, host.Name, b)
		if err != nil {
			t.Fatal(err)
		}
		x.put(model.KindHost, host.Name, o)
	}
	for i := 0; i < 1_000_000; i++ {
		e := &model.EIP{Address: netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)}),
			Binding: &model.Binding{Host: "h" + itoa(i/1000), Guest: "g" + itoa(i%1000)}}
		b, _ := store.Encode(e)
		o, err := model.DecodeStored(model.KindEIP, e.Key(), b)
		if err != nil {
			t.Fatal(err)
		}
		x.put(model.KindEIP, e.Key(), o)
	}
	mb := float64(heapAlloc()-before) / 1e6
	t.Logf("index of 1000 hosts x 1000 guests and 1M bound EIPs: %.0f MB", mb)
	if mb > 200 {
		t.Fatalf("index takes %.0f MB, budget 200", mb)
	}
	if w, ok := x.want(netip.MustParseAddr("100.64.3.232").As4()); !ok || w.VSID != model.VSIDMin {
		t.Fatalf("want %+v %v", w, ok)
	}
}

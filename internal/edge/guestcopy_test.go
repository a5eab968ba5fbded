package edge

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Tests of the guest copies of a set scope (model.GuestCopy), with and
// beside whole hosts (the upgrade from a controller that wrote them).

func gc(host, under, guest, gaddr string, vsid uint32) *model.GuestCopy {
	return &model.GuestCopy{Host: host, Underlay: a(under), Guest: model.Guest{Name: guest, Address: a(gaddr), VSID: vsid}}
}

func putGC(t *testing.T, s store.Sink, rev int64, cs ...*model.GuestCopy) {
	t.Helper()
	for _, c := range cs {
		b, err := store.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		s.Put(model.KindGuestCopy, c.Key(), b, rev)
	}
}

func gcSet() *model.EdgeSet {
	return &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}}
}

func eipB(addr, h, g string) *model.EIP {
	return &model.EIP{Address: a(addr), Binding: &model.Binding{Host: h, Guest: g}}
}

func routeOf(t *testing.T, f *dataplane.FakeEdge, addr string) dataplane.Route {
	t.Helper()
	r, ok, _ := f.Route(a(addr))
	if !ok {
		t.Fatalf("no route for %s", addr)
	}
	return r
}

// TestGuestCopyAfterSwap: the first guest copies arrive in the batch that
// swaps two EIPs' guests (two EIPs on one guest mid-batch); the guest ->
// EIP index built after the batch holds both, so once the whole host is
// deleted (the repair) a guest's VSID change reaches the EIP bound to it.
// 50 runs: the batch's map orders differ.
func TestGuestCopyAfterSwap(t *testing.T) {
	lost, stale := 0, 0
	for i := 0; i < 50; i++ {
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
		h := &model.Host{Name: "h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
			{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}, {Name: "g2", Address: a("198.19.11.2"), VSID: 5002}}}
		load(t, r, 1, gcSet(), h, eipB("198.51.100.7", "h1", "g1"), eipB("198.51.100.8", "h1", "g2"))
		// One commit: the swap, with the guest copies in between.
		put(t, r, 2, eipB("198.51.100.7", "h1", "g2"))
		putGC(t, r, 2, gc("h1", "198.18.11.1", "g2", "198.19.11.2", 5002))
		put(t, r, 2, eipB("198.51.100.8", "h1", "g1"))
		putGC(t, r, 2, gc("h1", "198.18.11.1", "g1", "198.19.11.1", 5001))
		r.Commit(2, false)
		if _, ok := r.idx.byGuest[binding{r.idx.id("h1"), r.idx.id("g2")}]; !ok {
			lost++
		}
		r.Delete(model.KindHost, "h1", 3)
		r.Commit(3, false)
		putGC(t, r, 4, gc("h1", "198.18.11.1", "g2", "198.19.11.2", 5777)) // g2's VSID changes
		r.Commit(4, false)
		if got := routeOf(t, fake, "198.51.100.7"); got.VSID != 5777 {
			stale++
		}
	}
	if lost > 0 || stale > 0 {
		t.Errorf("of 50 runs: byGuest lost h1/g2 -> .7 in %d, .7 kept the old VSID in %d", lost, stale)
	}
}

// TestGuestCopyUpgradeThenMove: whole hosts, then their guest copies put,
// then the hosts deleted (the repair of a controller of this release);
// then a host move, a VSID change, a rebind and an unbind by copies only.
func TestGuestCopyUpgradeThenMove(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	var resolved []netip.Addr
	r.OnHosts = func(us []netip.Addr) { resolved = append(resolved, us...) }
	h := &model.Host{Name: "h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
		{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}, {Name: "g2", Address: a("198.19.11.2"), VSID: 5002}}}
	load(t, r, 1, gcSet(), h, eipB("198.51.100.7", "h1", "g1"), eipB("198.51.100.8", "h1", "g2"))
	putGC(t, r, 2, gc("h1", "198.18.11.1", "g1", "198.19.11.1", 5001), gc("h1", "198.18.11.1", "g2", "198.19.11.2", 5002))
	r.Commit(2, false)
	r.Delete(model.KindHost, "h1", 3)
	r.Commit(3, false)
	if got := routeOf(t, fake, "198.51.100.7"); got.Host != a("198.18.11.1") || got.VSID != 5001 {
		t.Fatalf("after upgrade: %+v", got)
	}
	// move h1, copy of g2 first
	putGC(t, r, 4, gc("h1", "198.18.12.1", "g2", "198.19.11.2", 5002), gc("h1", "198.18.12.1", "g1", "198.19.11.1", 5001))
	r.Commit(4, false)
	for _, e := range []string{"198.51.100.7", "198.51.100.8"} {
		if got := routeOf(t, fake, e); got.Host != a("198.18.12.1") {
			t.Errorf("%s after move: %+v", e, got)
		}
	}
	if !slices.Contains(resolved, a("198.18.12.1")) {
		t.Errorf("the moved underlay was not passed to OnHosts: %v", resolved)
	}
	// VSID change of one guest alone
	putGC(t, r, 5, gc("h1", "198.18.12.1", "g1", "198.19.11.1", 5999))
	r.Commit(5, false)
	if got := routeOf(t, fake, "198.51.100.7"); got.VSID != 5999 {
		t.Errorf("vsid: %+v", got)
	}
	// rebind .7 to h2/g1 (new host), old guest deleted, in each order
	r.Delete(model.KindGuestCopy, "h1/g1", 6)
	put(t, r, 6, eipB("198.51.100.7", "h2", "g1"))
	putGC(t, r, 6, gc("h2", "198.18.13.1", "g1", "198.19.13.1", 7001))
	r.Commit(6, false)
	if got := routeOf(t, fake, "198.51.100.7"); got.Host != a("198.18.13.1") || got.VSID != 7001 {
		t.Errorf("rebind: %+v", got)
	}
	if len(r.idx.byGuest) != 2 {
		t.Errorf("byGuest %v", r.idx.byGuest)
	}
	// Unbind .8 then delete its copy; byGuest entry gone
	put(t, r, 7, &model.EIP{Address: a("198.51.100.8")})
	r.Delete(model.KindGuestCopy, "h1/g2", 7)
	r.Commit(7, false)
	if _, ok, _ := fake.Route(a("198.51.100.8")); ok {
		t.Error(".8 still routed")
	}
	if len(r.idx.byGuest) != 1 || len(r.idx.copied) != 1 {
		t.Errorf("byGuest %v copied %v", r.idx.byGuest, r.idx.copied)
	}
	if got := r.Hosts(); !slices.Equal(got, []netip.Addr{a("198.18.13.1")}) {
		t.Errorf("hosts %v, want h2's underlay only", got)
	}
}

// TestGuestCopyBeatsWholeHost: a guest copy (this release's controller)
// wins over a whole host left in the scope by an older one.
func TestGuestCopyBeatsWholeHost(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	h := &model.Host{Name: "h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
		{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}}
	load(t, r, 1, gcSet(), h, eipB("198.51.100.7", "h1", "g1"))
	putGC(t, r, 2, gc("h1", "198.18.12.1", "g1", "198.19.11.1", 5001))
	r.Commit(2, false)
	if got := routeOf(t, fake, "198.51.100.7"); got.Host != a("198.18.12.1") {
		t.Errorf("route %+v, want the copy's underlay 198.18.12.1", got)
	}
}

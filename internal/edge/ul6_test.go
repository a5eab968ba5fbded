package edge

import (
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestReconcileUl6: the IPv6 underlay (issue 21) in the edge reconciler:
// the edge's underlay6 configured beside its underlay, routes to a host
// of the IPv6 underlay (a full load again rewrites nothing and drops
// nothing), the host's move followed, and the names of hosts the region
// no longer has offered for collection.
func TestReconcileUl6(t *testing.T) {
	objs := []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("2001:db8:f0::11"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		&model.Host{Name: "az1-h2", AZ: "az1", Underlay: a("198.18.12.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.12.1"), VSID: 5002}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1"), Underlay6: a("2001:db8:ff::1")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}},
	}
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	load(t, r, 10, objs...)
	if fake.Config.Underlay != a("198.18.0.1") || fake.Config.Underlay6 != a("2001:db8:ff::1") {
		t.Fatalf("config underlay %v, underlay6 %v", fake.Config.Underlay, fake.Config.Underlay6)
	}
	rt := fake.Routes()[a("198.51.100.7")]
	if rt.Host != a("2001:db8:f0::11") || rt.VSID != 5001 {
		t.Fatalf("route %+v, want the host's IPv6 underlay", rt)
	}
	slot := rt.StatsIdx
	if fake.Ul6Keep == nil || !fake.Ul6Keep(a("2001:db8:f0::11")) || fake.Ul6Keep(a("2001:db8:f0::99")) {
		t.Fatal("the full load offers no collection, or a wrong one")
	}

	// A full load again: the IPv6 host's route is kept as it is.
	load(t, r, 11, objs...)
	if rt2 := fake.Routes()[a("198.51.100.7")]; rt2 != rt || len(fake.Routes()) != 2 {
		t.Fatalf("after a second full load: %+v (was %+v), routes %v", rt2, rt, fake.Routes())
	}

	// The host moves to another IPv6 address: the route follows, the
	// old address's name is offered for collection.
	watched(t, r, 12, &model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("2001:db8:f0::12"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}})
	if rt := fake.Routes()[a("198.51.100.7")]; rt.Host != a("2001:db8:f0::12") || rt.StatsIdx != slot {
		t.Fatalf("after the move %+v", rt)
	}
	if fake.Ul6Keep(a("2001:db8:f0::11")) || !fake.Ul6Keep(a("2001:db8:f0::12")) || !fake.Ul6Keep(a("198.18.12.1")) {
		t.Fatal("after the move: the old address kept, or the new one collected")
	}

	// The underlay6 changes: the edge is configured again.
	watched(t, r, 13, &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1"), Underlay6: a("2001:db8:ff::2")}}})
	if fake.Config.Underlay6 != a("2001:db8:ff::2") {
		t.Fatalf("underlay6 %v after its change", fake.Config.Underlay6)
	}
}

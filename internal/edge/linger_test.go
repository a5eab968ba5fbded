package edge

import (
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestEdgeRoutesLingeringEIP: the controller keeps an EIP that left a set
// (released from a pull-out or a quarantine) in that set's share for a
// grace (--move-grace, docs/controller.md "Moves between sets"), with its
// new value. An edge of the set it left programs it all the same: an edge
// routes every bound EIP of its share, whatever set serves it, so the
// packets that still reach the set while its /32 is withdrawn upstream
// are forwarded; the route goes when the copy does.
func TestEdgeRoutesLingeringEIP(t *testing.T) {
	for _, tc := range []struct {
		name, set string
		deleted   *model.Quarantine // the quarantine the move deletes
	}{
		{name: "release from a pull-out", set: "hot"},
		{name: "quarantine release", set: "quar", deleted: &model.Quarantine{Address: a("198.51.100.7")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := dataplane.NewFakeEdge()
			r := NewReconciler(Config{Name: "edge-d1", Log: quiet}, fake)
			defer r.Stop()
			sets := []model.Object{
				&model.AZ{Name: "az1"},
				&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
					Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
				&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: a("198.18.0.3")}}},
				&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine},
			}
			if tc.set == "quar" {
				// The edge is the quarantine set's.
				sets[2] = &model.EdgeSet{Name: "hot", Role: model.RoleDedicated}
				sets[3] = &model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: a("198.18.0.3")}}}
			}
			h1 := &model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}}
			e := &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}}
			share := append(sets, h1)
			if tc.deleted != nil {
				share = append(share, tc.deleted, e)
			} else {
				pulled := *e
				pulled.Set = "hot"
				share = append(share, &pulled)
			}
			// The set's share while the EIP is in it.
			load(t, r, 10, share...)
			rt, ok := fake.Routes()[a("198.51.100.7")]
			if !ok {
				t.Fatalf("the EIP is not routed while its set serves it: routes %v", fake.Routes())
			}
			// The move: the EIP's copy gets its new value (a release), or
			// the quarantine goes (every edge reads quarantines whole);
			// the copies of the EIP and its host stay.
			if tc.deleted != nil {
				r.Delete(model.KindQuarantine, "198.51.100.7", 11)
				r.Commit(11, false)
			} else {
				watched(t, r, 11, e)
			}
			if got, ok := fake.Routes()[a("198.51.100.7")]; !ok || got != rt {
				t.Fatalf("after the move, while the copy lingers: route %+v (%v), want %+v kept", got, ok, rt)
			}
			// The grace ends: the controller deletes both copies.
			r.Delete(model.KindEIP, "198.51.100.7", 12)
			r.Delete(model.KindHost, "az1-h1", 12)
			r.Commit(12, false)
			if _, ok := fake.Routes()[a("198.51.100.7")]; ok {
				t.Fatal("the EIP is still routed after its copy went")
			}
		})
	}
}

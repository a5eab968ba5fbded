package edge

import (
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestEveryMemberHoldsEveryBinding: the agents send an EIP's replies to
// the members of the set that serves it (docs/roles.md, "Agents and
// sets"), so every member of every set must hold the binding its
// anti-spoofing checks replies against (a reply leaves only if its source
// is an EIP bound to the host that sent it): the prefix set's, the
// dedicated set's the EIP is pulled out into, the quarantine set's. An
// unbound EIP is routed by none.
func TestEveryMemberHoldsEveryBinding(t *testing.T) {
	objs := append(region(),
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-h1", Underlay: a("198.18.0.21")}}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.0.31")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Set: "hot"},
		&model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}},
		&model.Quarantine{Address: a("198.51.100.9")},
	)
	for _, edge := range []string{"edge-a1", "edge-h1", "edge-q1"} {
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: edge, Log: quiet}, fake)
		load(t, r, 10, objs...)
		routes := fake.Routes()
		if len(routes) != 2 || routes[a("198.51.100.7")].Host != a("198.18.11.1") || routes[a("198.51.100.9")].Host != a("198.18.21.1") {
			t.Errorf("%s: routes %+v, want both bound EIPs to their hosts", edge, routes)
		}
	}
}

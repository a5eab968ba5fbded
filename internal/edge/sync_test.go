package edge

import (
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestSyncMembers: the peers connection sync streams to are the other
// members of the edge's set, known only once the store was read, and they
// follow the set's changes.
func TestSyncMembers(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	if _, _, ok := r.syncMembers(); ok {
		t.Fatal("members known before the store was read")
	}
	load(t, r, 1, region()...)
	me, others, ok := r.syncMembers()
	if !ok || me != a("198.18.0.1") || len(others) != 0 {
		t.Fatalf("alone: %v %v %v", me, others, ok)
	}
	set := &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}, {Name: "edge-a2", Underlay: a("198.18.0.2")}}}
	watched(t, r, 2, set)
	_, others, ok = r.syncMembers()
	if !ok || len(others) != 1 || others[0].Name != "edge-a2" || others[0].Underlay != a("198.18.0.2") {
		t.Fatalf("with a second member: %v %v", others, ok)
	}
	if ready, why := SyncReady(); ready || why == "" {
		t.Fatalf("SyncReady before Run: %v %q", ready, why)
	}
}

package edge

import (
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// bigNAT is a nat service at vip with pools pools of m slots, one backend
// each.
func bigNAT(vip string, pools int, m uint32) *model.Service {
	v := &model.Service{Name: "big", VIP: a(vip), Mode: model.ModeNAT, TableSize: m}
	for i := range pools {
		p := "p" + itoa(i)
		v.Listeners = append(v.Listeners, model.Listener{Protocol: "tcp", Port: uint16(1000 + i), Pool: p})
		v.Pools = append(v.Pools, model.Pool{Name: p, Backends: []model.Backend{{Address: a("198.19.200.1"), Port: 80}}})
	}
	return v
}

// tableSlots is the slots an edge's fake data plane holds.
func tableSlots(f *dataplane.FakeLB) int {
	n := 0
	for _, t := range f.Tables {
		n += len(t)
	}
	return n
}

// TestTablesOfOwnSetOnly (issue 17): an edge builds the tables of the
// services its set may carry and no other. The service's VIP is in pop-a:
// edge-a1 builds it, the edges of pop-b, the dedicated set and the
// quarantine set build nothing; pulled out into the dedicated set it is
// built there too (pop-a carries it while routes converge), quarantined
// the quarantine set builds it, and released and deleted it is gone
// everywhere. Before the fix every edge built every service.
func TestTablesOfOwnSetOnly(t *testing.T) {
	const m = 524287
	objs := append(region(),
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-b1", Underlay: a("198.18.0.2")}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-h1", Underlay: a("198.18.0.3")}}},
		&model.EdgeSet{Name: "quarantine", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.0.4")}}},
		bigNAT("198.51.100.80", 1, m))
	names := []string{"edge-a1", "edge-b1", "edge-h1", "edge-q1"}
	fakes := map[string]*dataplane.FakeLB{}
	recs := map[string]*Reconciler{}
	for _, n := range names {
		fakes[n] = dataplane.NewFakeLB()
		recs[n] = NewReconciler(Config{Name: n, Log: quiet}, fakes[n])
		load(t, recs[n], 10, objs...)
	}
	check := func(step string, want map[string]int) {
		t.Helper()
		for _, n := range names {
			if got := tableSlots(fakes[n]); got != want[n] {
				t.Errorf("%s: %s holds %d table slots, want %d", step, n, got, want[n])
			}
			if errs := recs[n].Status(time.Time{}, nil).Errors; len(errs) != 0 {
				t.Errorf("%s: %s: %v", step, n, errs)
			}
		}
	}
	check("in pop-a", map[string]int{"edge-a1": m})

	pulled := bigNAT("198.51.100.80", 1, m)
	pulled.Set = "hot"
	for _, n := range names {
		watched(t, recs[n], 11, pulled)
	}
	check("pulled out", map[string]int{"edge-a1": m, "edge-h1": m})

	for _, n := range names {
		watched(t, recs[n], 12, &model.Quarantine{Address: a("198.51.100.80")})
	}
	check("quarantined", map[string]int{"edge-a1": m, "edge-h1": m, "edge-q1": m})

	for _, n := range names {
		recs[n].Delete(model.KindQuarantine, "198.51.100.80", 13)
		recs[n].Commit(13, false)
	}
	check("released", map[string]int{"edge-a1": m, "edge-h1": m})

	for _, n := range names {
		recs[n].Delete(model.KindService, "big", 14)
		recs[n].Commit(14, false)
	}
	check("deleted", map[string]int{})
}

// TestTableMemoryReleased (issue 17): building a large legal service
// (4 pools of 524,287 slots, 8 MiB of table entries) grows the edge's heap
// by at least its tables, and deleting the service gives the memory back:
// neither the plan's memo nor the bookkeeping keeps a table of a service
// that is gone. Heap figures after a GC, against generous bounds.
func TestTableMemoryReleased(t *testing.T) {
	const m, pools = 524287, 4
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	load(t, r, 10, region()...)
	before := heapAlloc()
	watched(t, r, 11, bigNAT("198.51.100.80", pools, m))
	if got := tableSlots(fake); got != pools*m {
		t.Fatalf("%d table slots programmed, want %d", got, pools*m)
	}
	during := heapAlloc()
	r.Delete(model.KindService, "big", 12)
	r.Commit(12, false)
	if got := tableSlots(fake); got != 0 {
		t.Fatalf("after the delete: %d table slots programmed", got)
	}
	after := heapAlloc()
	const entries = pools * m * 4 // bytes the fake alone holds
	t.Logf("heap: before %.1f MB, with the service %.1f MB, after its delete %.1f MB", float64(before)/1e6, float64(during)/1e6, float64(after)/1e6)
	if during < before+entries {
		t.Errorf("the heap grew by %d bytes while holding %d bytes of tables: the measure is wrong", during-before, entries)
	}
	if after > before+entries/4 {
		t.Errorf("after the delete the heap is %d bytes above its size before (%d with the service): tables kept", int64(after)-int64(before), during-before)
	}
}

package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/store"
)

// TestFleetRegionWrite: the bench writes a change as the controller does,
// at the revision of its state (its last commit) without reading the
// store's first; a commit it did not make in between makes that a
// conflict, and the write then reads the current revision and goes in.
func TestFleetRegionWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, admin := oneMember(t, ctx)
	const eips = 100
	o := FleetOptions{Sets: 2, EdgesPerSet: 2, EIPs: eips}
	objs := fleetObjects(o, eips, false)
	var region fleetRegion
	if _, err := region.writeAll(ctx, admin, objs); err != nil {
		t.Fatal(err)
	}
	rebind := func(i, to int) int64 {
		t.Helper()
		e, err := fleetRebind(region.st, i, to)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := region.write(ctx, admin, e)
		if err != nil {
			t.Fatalf("rebind of EIP %d to host %d: %v", i, to, err)
		}
		if cur, err := admin.CommitRevision(ctx); err != nil || cur != rev || region.rev != rev {
			t.Fatalf("rebind of EIP %d committed at %d, the store's commit revision %d (%v), the region's %d", i, rev, cur, err, region.rev)
		}
		return rev
	}
	prev := rebind(1, 1)
	// A commit the bench did not make: the region's revision is stale,
	// the store refuses a commit at it, and the next write still goes in.
	other, err := commitAt(ctx, admin, ops(fleetService(0, 8, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if other <= prev {
		t.Fatalf("the other commit at %d, after %d", other, prev)
	}
	if _, err := admin.Commit(ctx, region.rev, ops(fleetService(1, 8, -1))); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a commit at the stale revision %d: %v, want a conflict", region.rev, err)
	}
	if rev := rebind(2, 1); rev <= other {
		t.Fatalf("the rebind after the other commit (%d) at %d", other, rev)
	}
}

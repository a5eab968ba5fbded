package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// testConditional: Commit sets every op's Rev to the object's new mod
// revision; an op with IfRev commits only at that revision and otherwise
// fails with a *RevisionError carrying the current one (0: deleted),
// writing nothing; FollowRevisions reports the same revisions.
func testConditional(t *testing.T, s *Store) {
	clear(t, s)
	ctx := context.Background()
	base, err := s.CommitRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ops := put(t, &model.AZ{Name: "az1"}, &model.AZ{Name: "az2"})
	rev, err := s.Commit(ctx, base, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		resp, err := s.Client.Get(ctx, Key(o.Kind, o.Key))
		if err != nil || len(resp.Kvs) != 1 || o.Rev != resp.Kvs[0].ModRevision || o.Rev != rev {
			t.Fatalf("op %s: Rev %d, store %v (%v); want the mod revision %d", o.Key, o.Rev, resp, err, rev)
		}
	}
	first := ops[0].Rev

	up := put(t, &model.AZ{Name: "az1", Description: "one"})
	up[0].IfRev = first
	rev, err = s.Commit(ctx, rev, up)
	if err != nil {
		t.Fatalf("conditional commit at the object's revision: %v", err)
	}
	// A second writer that read az1 at first: refused, nothing written
	// (az2's change in the same transaction neither).
	stale := put(t, &model.AZ{Name: "az1", Description: "two"}, &model.AZ{Name: "az2", Description: "two"})
	stale[0].IfRev = first
	_, err = s.Commit(ctx, rev, stale)
	var re *RevisionError
	if !errors.As(err, &re) || re.Kind != model.KindAZ || re.Key != "az1" || re.Want != first || re.Current != up[0].Rev {
		t.Fatalf("stale conditional commit: %v; want a RevisionError at %d", err, up[0].Rev)
	}
	st, _, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.AZs["az1"].Description != "one" || st.AZs["az2"].Description != "" {
		t.Fatalf("the refused transaction wrote: %+v %+v", st.AZs["az1"], st.AZs["az2"])
	}
	// A deleted object has no revision to match.
	del := []Op{{Kind: model.KindAZ, Key: "az1"}}
	if rev, err = s.Commit(ctx, rev, del); err != nil {
		t.Fatal(err)
	}
	again := put(t, &model.AZ{Name: "az1"})
	again[0].IfRev = up[0].Rev
	if _, err = s.Commit(ctx, rev, again); !errors.As(err, &re) || re.Current != 0 {
		t.Fatalf("conditional write of a deleted object: %v; want a RevisionError at 0", err)
	}

	// FollowRevisions serves the same revisions.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan int64, 1)
	go s.FollowRevisions(fctx, func(_ *model.State, revs Revisions, _ int64, _ []Event, resync bool) {
		if resync {
			select {
			case got <- revs.Get(model.KindAZ, "az2"):
			default:
			}
		}
	})
	select {
	case r := <-got:
		if r != ops[1].Rev {
			t.Errorf("FollowRevisions: az2 at %d; want %d", r, ops[1].Rev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("FollowRevisions delivered no state in 20s")
	}
}

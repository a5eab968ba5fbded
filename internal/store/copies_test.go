package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
)

// TestCopiesAndMarkers: WriteCopies and MarkLayoutAt are guarded by the
// commit marker and leave it alone; CommitMarked keeps the layout marker
// as recent as the commit marker in every transaction, Commit does not,
// and CopiesCurrent tells them apart.
func TestCopiesAndMarkers(t *testing.T) {
	s := embedded(t)
	s.TxnOps = 4 // several transactions per commit below
	ctx := context.Background()
	current := func(want bool) {
		t.Helper()
		if _, cur, err := s.CopiesCurrent(ctx); err != nil || cur != want {
			t.Fatalf("CopiesCurrent %v, %v: want %v", cur, err, want)
		}
	}
	current(false) // an empty store: no marker
	rev, err := s.Commit(ctx, 0, put(t, &model.AZ{Name: "az1"}))
	if err != nil {
		t.Fatal(err)
	}
	var copies []Op
	for i := range 10 {
		copies = append(copies, Op{Scope: "set/a", Kind: model.KindEIP, Key: fmt.Sprintf("192.0.2.%d", i), Value: []byte("{}")})
	}
	if err := s.WriteCopies(ctx, rev, copies); err != nil {
		t.Fatal(err)
	}
	if cr, err := s.CommitRevision(ctx); err != nil || cr != rev {
		t.Errorf("WriteCopies moved the commit marker: %d, %v (want %d)", cr, err, rev)
	}
	resp, err := s.Client.Get(ctx, ScopeRoot, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 10 {
		t.Fatalf("%v copies, %v", resp, err)
	}
	current(false)
	if err := s.MarkLayoutAt(ctx, rev); err != nil {
		t.Fatal(err)
	}
	current(true)

	// A commit by a writer that keeps the copies: still current, over
	// several transactions.
	var ops []Op
	for i := range 7 {
		ops = append(ops, put(t, &model.AZ{Name: fmt.Sprintf("az-m%d", i)})...)
	}
	rev2, err := s.CommitMarked(ctx, rev, ops)
	if err != nil {
		t.Fatal(err)
	}
	current(true)
	// One that stops after its first transaction is not.
	partial, err := s.commit(ctx, rev2, ops[:2], false)
	if err != nil {
		t.Fatal(err)
	}
	current(false)
	if rev2, err = s.CommitMarked(ctx, partial, ops[:1]); err != nil {
		t.Fatal(err)
	}
	current(true)
	// Guards: a repair planned at rev conflicts now.
	if err := s.WriteCopies(ctx, rev, copies[:1]); !errors.Is(err, ErrConflict) {
		t.Errorf("WriteCopies at a stale revision: %v, want ErrConflict", err)
	}
	if err := s.MarkLayoutAt(ctx, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("MarkLayoutAt at a stale revision: %v, want ErrConflict", err)
	}
	// A writer that does not keep the copies: not current any more.
	if _, err := s.Commit(ctx, rev2, put(t, &model.AZ{Name: "az-old"})); err != nil {
		t.Fatal(err)
	}
	current(false)
	if err := s.WriteCopies(ctx, 0, []Op{{Kind: model.KindEIP, Key: "192.0.2.1"}}); err == nil {
		t.Error("WriteCopies took a primary op")
	}
}

// TestLeasedCopies: an Op with a Lease is put with it by Commit and
// WriteCopies (its key vanishes with the lease); a later put without it
// detaches the lease; a put with a lease that ended fails with
// ErrLeaseNotFound.
func TestLeasedCopies(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	rev, err := s.Commit(ctx, 0, put(t, &model.AZ{Name: "az1"}))
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a := Op{Scope: "set/a", Kind: model.KindEIP, Key: "192.0.2.1", Value: []byte("{}"), Lease: id}
	b := Op{Scope: "set/a", Kind: model.KindEIP, Key: "192.0.2.2", Value: []byte("{}"), Lease: id}
	c := Op{Scope: "set/a", Kind: model.KindEIP, Key: "192.0.2.3", Value: []byte("{}"), Lease: id}
	if rev, err = s.Commit(ctx, rev, []Op{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCopies(ctx, rev, []Op{c}); err != nil {
		t.Fatal(err)
	}
	leaseOf := func(o Op) (LeaseID, bool) {
		t.Helper()
		resp, err := s.Client.Get(ctx, opKey(o))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0, false
		}
		return LeaseID(resp.Kvs[0].Lease), true
	}
	for _, o := range []Op{a, b, c} {
		if l, ok := leaseOf(o); !ok || l != id {
			t.Fatalf("%s: lease %x (exists %v), want %x", o.Key, l, ok, id)
		}
	}
	b.Lease = 0
	if rev, err = s.Commit(ctx, rev, []Op{b}); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok := leaseOf(a); ok {
		t.Error("a leased copy outlived its lease")
	}
	if l, ok := leaseOf(b); !ok || l != 0 {
		t.Errorf("the copy put again without the lease: lease %x, exists %v; want kept without a lease", l, ok)
	}
	if _, err := s.Commit(ctx, rev, []Op{a}); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("a put with an ended lease: %v, want ErrLeaseNotFound", err)
	}
	if err := s.WriteCopies(ctx, rev, []Op{c}); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("WriteCopies with an ended lease: %v, want ErrLeaseNotFound", err)
	}
}

// Package placementtest writes objects into a store the way the
// controller does, for tests that write a region straight into etcd: each
// object at its primary key, the copies of the partitioned layout
// (placement.AllOps) in the same commit, and the layout marker, so edges
// and agents following their scopes see it.
package placementtest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
)

// Put writes objs (of a key given twice, the last wins) and the copies
// every scope must then hold; see Apply.
func Put(ctx context.Context, s *store.Store, objs ...model.Object) (int64, error) {
	return Apply(ctx, s, objs, nil)
}

// Delete deletes the objects refs name and updates the copies.
func Delete(ctx context.Context, s *store.Store, refs ...placement.Ref) (int64, error) {
	return Apply(ctx, s, nil, refs)
}

// Apply writes puts and deletes dels in one commit with every change of
// the scopes' copies they make: it loads the store's state, applies them
// without the model's checks (as a raw write would; tests write what they
// mean to), and commits the primary keys written, the copies added or
// changed (placement.AllOps of the new state; every copy of an object
// written, as placement.Diff does) and those removed (of the old state),
// at the revision it loaded, again on a conflict. It writes the layout
// marker (store.LayoutKey) too. It returns the commit's revision.
func Apply(ctx context.Context, s *store.Store, puts []model.Object, dels []placement.Ref) (int64, error) {
	if err := s.MarkLayout(ctx); err != nil {
		return 0, err
	}
	for {
		old, rev, err := s.Load(ctx)
		if err != nil {
			return 0, err
		}
		ops, err := diff(old, puts, dels)
		if err != nil {
			return 0, err
		}
		if len(ops) == 0 {
			return rev, nil
		}
		// Commit checks nothing was committed after the revision the
		// state was loaded at.
		got, err := s.Commit(ctx, rev, ops)
		if errors.Is(err, store.ErrConflict) {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		return got, err
	}
}

// diff is what a commit of puts and dels over old writes.
func diff(old *model.State, puts []model.Object, dels []placement.Ref) ([]store.Op, error) {
	before, err := placement.AllOps(old)
	if err != nil {
		return nil, err
	}
	st := old.Clone()
	var ops []store.Op
	at := map[placement.Ref]int{}
	for _, r := range dels {
		st.Remove(r.Kind, r.Key)
		at[r] = len(ops)
		ops = append(ops, store.Op{Kind: r.Kind, Key: r.Key})
	}
	for _, o := range puts {
		st.Set(o)
		b, err := store.Encode(o)
		if err != nil {
			return nil, err
		}
		r := placement.Ref{Kind: model.KindOf(o), Key: o.Key()}
		op := store.Op{Kind: r.Kind, Key: r.Key, Value: b}
		if i, ok := at[r]; ok {
			ops[i] = op
			continue
		}
		at[r] = len(ops)
		ops = append(ops, op)
	}
	after, err := placement.AllOps(st)
	if err != nil {
		return nil, err
	}
	type copyKey struct{ scope, kind, key string }
	had := map[copyKey][]byte{}
	for _, o := range before {
		if o.Scope != "" {
			had[copyKey{o.Scope, o.Kind, o.Key}] = o.Value
		}
	}
	// As the controller orders a commit (placement.Diff): the copies put,
	// the primary keys, the copies deleted, so a commit split into several
	// transactions never leaves an object in no scope.
	var copyPuts, delOps []store.Op
	for _, o := range after {
		if o.Scope == "" {
			continue // the primary keys written are those of puts
		}
		k := copyKey{o.Scope, o.Kind, o.Key}
		v, ok := had[k]
		delete(had, k)
		if _, written := at[placement.Ref{Kind: o.Kind, Key: o.Key}]; ok && !written && string(v) == string(o.Value) {
			continue // an object written has its copies written too, as the controller's (placement.Diff)
		}
		copyPuts = append(copyPuts, store.Op{Scope: o.Scope, Kind: o.Kind, Key: o.Key, Value: o.Value})
	}
	for k := range had {
		delOps = append(delOps, store.Op{Scope: k.scope, Kind: k.kind, Key: k.key})
	}
	slices.SortFunc(delOps, func(a, b store.Op) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Key, b.Key))
	})
	return append(append(copyPuts, ops...), delOps...), nil
}

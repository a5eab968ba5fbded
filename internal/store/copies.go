package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WriteCopies writes scope copies (ops with a Scope) if no commit happened
// after rev, in transactions of at most TxnOps operations and TxnBytes,
// each guarded by the commit marker like Commit's. It is the controller's
// repair of the copies (a migration from the layout without scopes, or
// after a writer that does not maintain them): unlike Commit it leaves
// the commit marker alone, since it changes no object. A writer whose
// view follows the primary keys only, as every controller's does, sees no
// event at a copy's revision: had the marker moved there, its next commit
// would conflict and wait for a revision its view never reaches.
//
// A guard that fails returns ErrConflict; the chunks before it stay
// written (each is a consistent part of the copies at rev).
func (s *Store) WriteCopies(ctx context.Context, rev int64, ops []Op) error {
	for _, o := range ops {
		if o.Scope == "" {
			return fmt.Errorf("store: WriteCopies: %s %q is a primary key, not a copy", o.Kind, o.Key)
		}
	}
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < max(s.TxnOps-1, 1) {
			sz := len(ScopeRoot) + len(ops[n].Scope) + len(ops[n].Kind) + len(ops[n].Key) + len(ops[n].Value) + 16
			if n > 0 && size+sz > TxnBytes {
				break
			}
			size += sz
			n++
		}
		chunk := ops[:n]
		ops = ops[n:]
		eops := make([]clientv3.Op, len(chunk))
		for i, o := range chunk {
			eops[i] = etcdOp(o)
		}
		resp, err := s.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(CommitKey), "<", rev+1)).
			Then(eops...).Commit()
		if err != nil {
			return fmt.Errorf("store: write scope copies: %w", mapErr(err))
		}
		if !resp.Succeeded {
			return ErrConflict
		}
	}
	return nil
}

// MarkLayoutAt writes LayoutKey = Layout if no commit happened after rev:
// the copies a controller repaired at rev are still those of the state.
// ErrConflict otherwise.
func (s *Store) MarkLayoutAt(ctx context.Context, rev int64) error {
	resp, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(CommitKey), "<", rev+1)).
		Then(clientv3.OpPut(LayoutKey, Layout)).Commit()
	if err != nil {
		return fmt.Errorf("store: mark the layout: %w", err)
	}
	if !resp.Succeeded {
		return ErrConflict
	}
	return nil
}

// CommitMarked is Commit from a writer that maintains the scope copies:
// its last transaction also rewrites LayoutKey, so the layout marker is
// as recent as the commit marker once every commit was such a writer's
// and went in whole. A commit of a writer that does not (a controller of
// a release before scopes, after a rollback), or one that stopped between
// two transactions, moves the commit marker alone, and CopiesCurrent says
// so until a controller has repaired the copies.
func (s *Store) CommitMarked(ctx context.Context, rev int64, ops []Op) (int64, error) {
	return s.commit(ctx, rev, ops, true)
}

// CopiesCurrent reads the commit and layout markers at one revision and
// says whether the scope copies are those of the last commit: the layout
// marker says Layout and was written with or after the last commit (see
// CommitMarked). rev is the revision read at.
func (s *Store) CopiesCurrent(ctx context.Context) (rev int64, current bool, err error) {
	resp, err := s.Client.Txn(ctx).Then(clientv3.OpGet(CommitKey), clientv3.OpGet(LayoutKey)).Commit()
	if err != nil {
		return 0, false, fmt.Errorf("store: read the layout marker: %w", err)
	}
	var commitRev, layoutRev int64
	marked := false
	if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
		commitRev = r.Kvs[0].ModRevision
	}
	if r := resp.Responses[1].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
		layoutRev, marked = r.Kvs[0].ModRevision, string(r.Kvs[0].Value) == Layout
	}
	return resp.Header.Revision, marked && layoutRev >= commitRev, nil
}

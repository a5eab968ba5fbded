package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
)

// The scope copies (store/scope.go, docs/scale.md "Scopes"). Every write
// commits, with its objects, the copies placement says they add, rewrite
// and remove (write, commitOps). The repair makes the copies in the store
// those of the whole state: it runs when the controller starts (the
// migration from the layout without scopes, and the mend after a
// controller that does not maintain the copies ran on the store) and after
// a commit that was only partly written.

// Repair bounds.
const (
	repairAttempts = 5
	repairRetry    = 10 * time.Second // after a failed repair, the next
)

// commit is store.CommitMarked while the copies in the store are known to
// be the state's (since the last repair), store.Commit otherwise (a
// follower then sees the copies as not current: store.CopiesCurrent); or
// the tests' stand-in.
func (s *Core) commit(ctx context.Context, rev int64, ops []store.Op) (int64, error) {
	if s.commitHook != nil {
		return s.commitHook(ctx, rev, ops)
	}
	if s.copiesOK.Load() {
		return s.store.CommitMarked(ctx, rev, ops)
	}
	return s.store.Commit(ctx, rev, ops)
}

// countCopies counts the copies among committed ops.
func (s *Core) countCopies(by string, ops []store.Op) {
	var puts, dels int
	for _, o := range ops {
		switch {
		case o.Scope == "":
		case o.Value != nil:
			puts++
		default:
			dels++
		}
	}
	s.metrics.scopeCopies.WithLabelValues(by, "put").Add(float64(puts))
	s.metrics.scopeCopies.WithLabelValues(by, "delete").Add(float64(dels))
}

// startCopies runs when the view has loaded, before the controller
// serves. If the store says the copies are those of the last commit
// (store.CopiesCurrent: every commit since the last repair was a
// controller's of this release and went in whole), it serves at once and
// compares them in the background (a mend for copies changed past the
// controllers: at a million EIPs the comparison reads two million
// copies); otherwise it repairs them first. Only ctx ending fails it: a
// repair that fails is retried in the background.
func (s *Core) startCopies(ctx context.Context) error {
	_, current, err := s.store.CopiesCurrent(ctx)
	if err == nil && current {
		s.copiesOK.Store(true)
		s.log.Info("scope copies: current since the last commit; comparing them in the background")
		s.requestRepair()
		return nil
	}
	if _, err := s.repairCopies(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.log.Error("scope copies: repair failed; serving, and retrying", "in", repairRetry, "err", err)
		s.repairCopiesLater()
	}
	return nil
}

// repairCopiesLater marks the copies as not known good (the controller's
// commits stop rewriting the layout marker, see commit) and asks for a
// repair.
func (s *Core) repairCopiesLater() {
	s.copiesOK.Store(false)
	s.requestRepair()
}

// requestRepair asks the repair loop for a repair (it never blocks: one
// pending request covers any number).
func (s *Core) requestRepair() {
	if s.repairs == nil {
		return
	}
	select {
	case s.repairs <- struct{}{}:
	default:
	}
}

// repairLoop runs the repairs repairCopiesLater asks for until ctx ends;
// one that fails is tried again after repairRetry.
func (s *Core) repairLoop(ctx context.Context) {
	defer close(s.repairDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.repairs:
		}
		if _, err := s.repairCopies(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("scope copies: repair failed; retrying", "in", repairRetry, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(repairRetry):
			}
			s.requestRepair()
		}
	}
}

// repairResult says what a repair did.
type repairResult struct {
	written, deleted, unchanged int
	took                        time.Duration
	// The last comparison's phases: the state's copies computed, the
	// store's read and compared, the difference written.
	place, read, write time.Duration
}

// repairCopies makes the store's scope copies those of the view's state
// and marks the layout (store.LayoutKey). It holds writeMu: no write of
// this controller commits meanwhile. Its writes are guarded by the view's
// revision; when another writer (a controller elsewhere, one of an older
// version) commits in between, it waits for the view to catch up and
// compares again, at most repairAttempts times.
func (s *Core) repairCopies(ctx context.Context) (repairResult, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	start := time.Now()
	var err error
	for attempt := 1; attempt <= repairAttempts; attempt++ {
		var res repairResult
		res, err = s.repairOnce(ctx)
		if err == nil {
			s.copiesOK.Store(true)
			res.took = time.Since(start)
			s.metrics.scopeRepairs.WithLabelValues("ok").Inc()
			s.log.Info(fmt.Sprintf("scope copies: %d written, %d deleted, %d unchanged, in %v", res.written, res.deleted, res.unchanged, res.took.Round(time.Millisecond)),
				"written", res.written, "deleted", res.deleted, "unchanged", res.unchanged, "took", res.took, "attempts", attempt,
				"place", res.place, "read", res.read, "write", res.write)
			return res, nil
		}
		if errors.Is(err, store.ErrLeaseNotFound) && ctx.Err() == nil {
			s.log.Info("scope copies: a lease of copies kept after a move ended; comparing again", "attempt", attempt)
			continue
		}
		if !errors.Is(err, store.ErrConflict) || ctx.Err() != nil {
			break
		}
		s.log.Info("scope copies: a commit landed during the repair; catching up and comparing again", "attempt", attempt)
	}
	s.metrics.scopeRepairs.WithLabelValues("failed").Inc()
	return repairResult{}, fmt.Errorf("repairing the scope copies: %w", err)
}

// repairOnce compares the copies in the store with those of the view's
// state at its revision and writes the difference: the missing and
// different copies, then the deletions of the stale ones. A copy this
// controller keeps after a move (linger.go) is not stale while its object
// is placed anywhere: it is given the object's current value. At start
// there are none: the copies a previous run kept are deleted.
func (s *Core) repairOnce(ctx context.Context) (repairResult, error) {
	v := s.view
	latest, err := s.store.CommitRevision(ctx)
	if err != nil {
		return repairResult{}, err
	}
	if err := v.waitFor(ctx, latest, catchUpLimit); err != nil {
		return repairResult{}, err
	}
	var res repairResult
	t0 := time.Now()
	v.mu.RLock()
	rev := v.rev
	want, err := placement.All(v.st)
	v.mu.RUnlock()
	res.place = time.Since(t0)
	if err != nil {
		return repairResult{}, fmt.Errorf("computing the scope copies of the state: %w", err)
	}
	// seen marks the wanted copies found in the store: bit i for an
	// object's i-th scope (its scopes are few), a map past 64.
	seen := make(map[placement.Ref]uint64, len(want.Scopes))
	var seenMore map[string]bool
	var puts, dels []store.Op
	// The copies lingering after a move (linger.go) stay, with their
	// object's current value, while it is placed somewhere.
	var lingering map[placement.Copy][]byte
	t0 = time.Now()
	_, err = s.store.LoadScopes(ctx, func(scope, kind, key string, value []byte) {
		ref := placement.Ref{Kind: kind, Key: key}
		scopes := want.Scopes[ref]
		i := indexOf(scopes, scope)
		if i < 0 {
			c := placement.Copy{Scope: scope, Ref: ref}
			if val, ok := want.Values[ref]; ok && s.linger.copies.Has(c) {
				if lingering == nil {
					lingering = map[placement.Copy][]byte{}
				}
				lingering[c] = val
				if !bytes.Equal(val, value) {
					puts = append(puts, store.Op{Scope: scope, Kind: kind, Key: key, Value: val, Lease: s.linger.lease[c]})
				} else {
					res.unchanged++
				}
				return
			}
			dels = append(dels, store.Op{Scope: scope, Kind: kind, Key: key})
			return
		}
		if i < 64 {
			seen[ref] |= 1 << i
		} else {
			if seenMore == nil {
				seenMore = map[string]bool{}
			}
			seenMore[store.ScopeKey(scope, kind, key)] = true
		}
		if val := want.Values[ref]; !bytes.Equal(val, value) {
			puts = append(puts, store.Op{Scope: scope, Kind: kind, Key: key, Value: val})
		} else {
			res.unchanged++
		}
	})
	if err != nil {
		return repairResult{}, err
	}
	for ref, scopes := range want.Scopes {
		bits := seen[ref]
		for i, sc := range scopes {
			if i < 64 && bits&(1<<i) != 0 || i >= 64 && seenMore[store.ScopeKey(sc, ref.Kind, ref.Key)] {
				continue
			}
			puts = append(puts, store.Op{Scope: sc, Kind: ref.Kind, Key: ref.Key, Value: want.Values[ref]})
		}
	}
	res.read = time.Since(t0)
	t0 = time.Now()
	res.written, res.deleted = len(puts), len(dels)
	if ops := append(puts, dels...); len(ops) > 0 {
		err := s.store.WriteCopies(ctx, rev, ops)
		if err != nil {
			// Some chunks may have gone in: count none, the next
			// comparison counts what is left. A lingering copy's
			// lease that ended (store.ErrLeaseNotFound) took its
			// copies: they no longer linger.
			if errors.Is(err, store.ErrLeaseNotFound) {
				s.linger.dropLeased(puts, 0)
			}
			return repairResult{}, err
		}
		s.countCopies("repair", ops)
	}
	if err := s.store.MarkLayoutAt(ctx, rev); err != nil {
		return repairResult{}, err
	}
	for c, val := range lingering {
		s.linger.copies.Set(c, val)
	}
	res.write = time.Since(t0)
	return res, nil
}

func indexOf(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return -1
}

package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
)

// Moves between sets, make-before-break (docs/controller.md "Moves
// between sets", docs/scale.md "Scopes"). A write that takes an object out
// of an edge set's scope while the object goes on existing (an EIP
// released from a pull-out or a quarantine, its host when that was the
// host's last EIP there, a prefix moved to another set) does not delete
// its copy there: with Config.MoveGrace set, the copy is kept with the
// object's new value (placement.Linger) and deleted when the grace ends,
// so the set's edges that follow their share (edge --follow-share) keep
// routing the address while its /32 is withdrawn upstream. Until then
// every write of this controller that touches the object keeps the copy
// current (a rebind rewrites it, a delete deletes it at once, a move back
// into the set makes it an ordinary copy again).
//
// The records live in this controller's memory, under writeMu: a restart
// ends every grace (the start-up comparison deletes the lingering copies
// as extra), and a write of another controller of the region does not
// know them (a copy it leaves stale is deleted at the end of the grace
// all the same). So that a controller that stops for good (decommissioned,
// cut off) leaves no lingering copy behind, each write that starts some
// grants a store lease of the grace plus lingerLeaseMargin and puts them
// with it: etcd deletes them when it ends, should no controller have done
// so before. The lease is never renewed; a rewrite of a lingering copy
// (its object changed) puts it with its lease again (a put without it
// would detach it), a copy that is an ordinary one again is put without
// it (placement.Diff's put). The controller's own expiry, at the grace,
// comes first; the lease is the safety net. The deletes at the end of a
// grace are written with store.WriteCopies, as the repair's are: they
// change no object, so the commit marker, which every controller's
// commits are guarded by and which no controller's view sees move
// without an object, stays.

// lingerRetry: after a failed expiry, the next try.
const lingerRetry = 5 * time.Second

// lingerLeaseMargin is how much longer than the grace the lease of a
// lingering copy lasts: the controller's own expiry (and its retries)
// come first.
const lingerLeaseMargin = 30 * time.Second

// lingerState is the copies kept past their object's leaving a set's
// scope; every field but count and wake is guarded by Core.writeMu.
type lingerState struct {
	copies placement.Lingering
	// deadline is when each copy's grace ends; batches are the copies
	// that began to linger together (one write), in deadline order. A
	// copy whose grace began again, or ended early, is in an older batch
	// too: it is due with the batch whose time its deadline is.
	deadline map[placement.Copy]time.Time
	batches  []lingerBatch
	// lease is the store lease each copy was put with (the write that
	// started its grace granted it); margin is how much longer than
	// the grace a lease lasts (lingerLeaseMargin; tests shorten it).
	lease  map[placement.Copy]store.LeaseID
	margin time.Duration
	count  atomic.Int64 // len(copies), for the metrics
	wake   chan struct{}
	done   chan struct{}
}

type lingerBatch struct {
	at     time.Time
	copies []placement.Copy
}

func newLingerState() *lingerState {
	return &lingerState{copies: placement.Lingering{}, deadline: map[placement.Copy]time.Time{},
		lease: map[placement.Copy]store.LeaseID{}, margin: lingerLeaseMargin, wake: make(chan struct{}, 1)}
}

// leaseTTL is the TTL of the lease lingering copies are put with: the
// grace and the margin, rounded up to whole seconds (etcd's unit).
func (l *lingerState) leaseTTL(grace time.Duration) time.Duration {
	return (grace + l.margin + time.Second - 1).Truncate(time.Second)
}

// grantLinger takes the lease for the copies a write starts to keep.
func (s *Core) grantLinger(ctx context.Context) (store.LeaseID, error) {
	id, err := s.store.Grant(ctx, s.linger.leaseTTL(s.cfg.MoveGrace))
	if err != nil {
		return 0, fmt.Errorf("taking the lease of the copies kept after a move: %w", err)
	}
	return id, nil
}

// leased returns copies (Linger's ops, puts then deletes) with every copy
// that starts to linger (lc.Start) put with lease, those Linger left as
// they are too, and every lingering copy rewritten (lc.Update) put with
// the lease it was put with; writeMu is held.
func (l *lingerState) leased(copies []store.Op, lc placement.LingerChange, lease store.LeaseID) []store.Op {
	if len(lc.Start) == 0 && len(lc.Update) == 0 {
		return copies
	}
	put := map[placement.Copy]bool{}
	for i, o := range copies {
		if o.Value == nil {
			continue
		}
		c := placement.Copy{Scope: o.Scope, Ref: placement.Ref{Kind: o.Kind, Key: o.Key}}
		if _, ok := lc.Start[c]; ok {
			copies[i].Lease = lease
			put[c] = true
		} else if _, ok := lc.Update[c]; ok {
			copies[i].Lease = l.lease[c]
		}
	}
	var more []store.Op
	for c, v := range lc.Start {
		if !put[c] {
			more = append(more, store.Op{Scope: c.Scope, Kind: c.Kind, Key: c.Key, Value: v, Lease: lease})
		}
	}
	if len(more) == 0 {
		return copies
	}
	slices.SortFunc(more, func(a, b store.Op) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Key, b.Key))
	})
	return append(more, copies...)
}

// dropLeased forgets the lingering copies put with a lease that ops put
// copies with, other than keep: a commit of ops failed with
// store.ErrLeaseNotFound, so one of those leases ended (the controller's
// expiry failed past the margin) and etcd deleted its copies. The copies
// of the others go when their lease ends. It returns how many it forgot.
func (l *lingerState) dropLeased(ops []store.Op, keep store.LeaseID) int {
	gone := map[store.LeaseID]bool{}
	for _, o := range ops {
		if o.Value != nil && o.Lease != 0 && o.Lease != keep {
			gone[o.Lease] = true
		}
	}
	n := 0
	for c, id := range l.lease {
		if gone[id] {
			l.copies.Delete(c)
			delete(l.deadline, c)
			delete(l.lease, c)
			n++
		}
	}
	l.count.Store(int64(l.copies.Len()))
	return n
}

// clock is the controller's time (tests set Core.now).
func (s *Core) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// recordLinger records what a committed write did to the lingering
// copies; writeMu is held.
func (s *Core) recordLinger(lc placement.LingerChange, lease store.LeaseID) {
	if lc.Empty() {
		return
	}
	l := s.linger
	for _, c := range lc.End {
		l.copies.Delete(c)
		delete(l.deadline, c)
		delete(l.lease, c)
	}
	for c, v := range lc.Update {
		l.copies.Set(c, v)
	}
	if len(lc.Start) > 0 {
		at := s.clock().Add(s.cfg.MoveGrace)
		b := lingerBatch{at: at, copies: make([]placement.Copy, 0, len(lc.Start))}
		for c, v := range lc.Start {
			l.copies.Set(c, v)
			l.deadline[c] = at
			l.lease[c] = lease
			b.copies = append(b.copies, c)
		}
		l.batches = append(l.batches, b)
		s.log.Debug("scope copies: keeping copies that left their set", "copies", len(lc.Start), "until", at)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	l.count.Store(int64(l.copies.Len()))
}

// due lists the lingering copies whose grace ended at now, each once
// (writeMu held): batches of an equal time (a coarse clock) may both
// hold a copy whose grace began again.
func (l *lingerState) due(now time.Time) []placement.Copy {
	var out []placement.Copy
	seen := map[placement.Copy]bool{}
	for _, b := range l.batches {
		if b.at.After(now) {
			break
		}
		for _, c := range b.copies {
			if at, ok := l.deadline[c]; ok && at.Equal(b.at) && !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// forget drops the copies that expired and the batches due at now.
func (l *lingerState) forget(cs []placement.Copy, now time.Time) {
	for _, c := range cs {
		l.copies.Delete(c)
		delete(l.deadline, c)
		delete(l.lease, c)
	}
	i := 0
	for i < len(l.batches) && !l.batches[i].at.After(now) {
		i++
	}
	l.batches = slices.Delete(l.batches, 0, i)
	l.count.Store(int64(l.copies.Len()))
}

// next is when the next grace ends (ok false: none pending).
func (l *lingerState) next() (time.Time, bool) {
	if len(l.batches) == 0 {
		return time.Time{}, false
	}
	return l.batches[0].at, true
}

// expireLingering deletes the lingering copies whose grace ended, those
// of one expiry in one WriteCopies (its transactions guarded by the
// view's revision, like the repair's); a copy whose object is back in the
// scope, through a write of another controller, stays (placement.Expired).
// It returns how many copies it deleted.
func (s *Core) expireLingering(ctx context.Context) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	now := s.clock()
	due := s.linger.due(now)
	if len(due) == 0 {
		s.linger.forget(nil, now)
		return 0, nil
	}
	v := s.view
	var err error
	for attempt := 1; attempt <= repairAttempts; attempt++ {
		var latest int64
		if latest, err = s.store.CommitRevision(ctx); err != nil {
			break
		}
		if err = v.waitFor(ctx, latest, catchUpLimit); err != nil {
			break
		}
		v.mu.RLock()
		rev := v.rev
		ops := placement.Expired(v.st, due)
		v.mu.RUnlock()
		if len(ops) > 0 {
			err = s.store.WriteCopies(ctx, rev, ops)
		}
		if err == nil {
			s.linger.forget(due, now)
			s.countCopies("linger", ops)
			s.log.Debug("scope copies: the grace of copies that left their set ended", "due", len(due), "deleted", len(ops))
			return len(ops), nil
		}
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	return 0, fmt.Errorf("deleting the copies whose grace ended: %w", err)
}

// lingerLoop ends the graces as they come due, until ctx ends.
func (s *Core) lingerLoop(ctx context.Context) {
	defer close(s.linger.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		s.writeMu.Lock()
		next, ok := s.linger.next()
		s.writeMu.Unlock()
		var fire <-chan time.Time
		if ok {
			t.Reset(max(next.Sub(s.clock()), 0))
			fire = t.C
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.linger.wake:
			t.Stop()
			continue
		case <-fire:
		}
		if _, err := s.expireLingering(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("scope copies: the end of a move's grace failed; retrying", "in", lingerRetry, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(lingerRetry):
			}
		}
	}
}

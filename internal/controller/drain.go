package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Drift drains (docs/eip.md, "Drift"). A bind that moves a bound EIP to
// another host records where it was (model.EIP.Previous: the old host and
// guest, the old host's underlay address and the old guest's VSID, and
// Until, the bind's time plus Config.DriftGrace). Until then the old
// host's agent keeps translating the EIP to the old guest and the edges
// send it the segments of the connections open at the move, so a drift
// breaks none of them (the edges and the agents learn the move in no
// order). When Until passes, the roles drop the drain by themselves
// (each re-plans at Until); the controller then clears Previous with a
// write, which takes the EIP's copy out of the old host's scope. The
// clearing is best effort: a role never needs it, and any controller of
// the region clears what it finds expired (a write that finds Previous
// already gone changes nothing).

// drainRetry: after a failed clearing write, the next try.
const drainRetry = 5 * time.Second

var errDrainsStuck = errors.New("the EIPs are still draining after a write that cleared them")

// drainBatch bounds the EIPs one clearing write takes (the commit splits
// into several store transactions as any large write does).
const drainBatch = 256

// previousOf is the Previous of EIP e once it is bound to b at now: the
// binding it leaves when b moves it to another host; an earlier drain
// that still runs when b moves it within a host (or rebinds it where it
// is); none when the grace is 0 or e was not bound.
func previousOf(st *model.State, e *model.EIP, b model.Binding, grace time.Duration, now time.Time) *model.PreviousBinding {
	old := e.Binding
	if grace <= 0 || old == nil {
		return nil
	}
	if old.Host == b.Host {
		if p := e.Previous; p.Active(now) && p.Host != b.Host {
			return p
		}
		return nil
	}
	h, ok := st.Hosts[old.Host]
	if !ok {
		return nil
	}
	g, ok := h.Guest(old.Guest)
	if !ok {
		return nil
	}
	return &model.PreviousBinding{Host: old.Host, Guest: old.Guest, Underlay: h.Underlay, VSID: g.VSID, Until: now.Add(grace).UTC()}
}

// putRequest puts an object a client wrote whole (create, replace,
// apply). An EIP's previous binding is the controller's own, written by
// its bind alone: whatever the request says, the stored one is kept while
// the binding stays as stored, and none otherwise. Taken from a request,
// it would have the edges send the EIP's TCP segments to any underlay
// address and accept that address's packets as the EIP's until any time.
func (t *txn) putRequest(o model.Object) (string, error) {
	if e, ok := o.(*model.EIP); ok {
		e.Previous = nil
		if old, ok := t.st.EIPs[e.Key()]; ok && old.Previous != nil && old.Binding != nil && e.Binding != nil && *old.Binding == *e.Binding {
			e.Previous = old.Previous
		}
	}
	return t.put(o)
}

// pokeDrain wakes the drain loop (a bind may have started a drain).
func (s *Core) pokeDrain() {
	if s.drainWake == nil {
		return
	}
	select {
	case s.drainWake <- struct{}{}:
	default:
	}
}

// drainsDue returns the EIPs whose drain has ended at now (sorted, at
// most drainBatch) and the earliest Until of those still running (zero:
// none).
func (s *Core) drainsDue(now time.Time) (due []string, next time.Time) {
	s.view.mu.RLock()
	d := s.view.st.Draining()
	s.view.mu.RUnlock()
	for key, until := range d {
		if !now.Before(until) {
			due = append(due, key)
		} else if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	slices.Sort(due)
	if len(due) > drainBatch {
		due = due[:drainBatch]
	}
	return due, next
}

// clearDrains writes the EIPs of keys without their Previous, those
// whose Previous has ended at now (a bind meanwhile may have started
// another).
func (s *Core) clearDrains(ctx context.Context, keys []string, now time.Time) error {
	_, err := s.write(ctx, func(t *txn) error {
		for _, key := range keys {
			e, ok := t.st.EIPs[key]
			if !ok || e.Previous == nil || e.Previous.Active(now) {
				continue
			}
			cp := cloneEIP(e)
			cp.Previous = nil
			if _, err := t.put(cp); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// drainLoop clears the drains as they end, until ctx ends.
func (s *Core) drainLoop(ctx context.Context) {
	defer close(s.drainDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	var last []string // the EIPs the last clearing write took
	for {
		now := s.clock()
		due, next := s.drainsDue(now)
		if len(due) > 0 {
			var err error
			if slices.Equal(due, last) {
				// The write went in and changed nothing of these: a
				// bug, not a reason to spin.
				err = errDrainsStuck
			} else {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err = s.clearDrains(wctx, due, now)
				cancel()
			}
			last = due
			if err != nil {
				last = nil
			}
			if err != nil && ctx.Err() == nil {
				s.log.Error("EIP drains: clearing the previous bindings whose grace ended failed; retrying", "in", drainRetry, "eips", len(due), "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(drainRetry):
				}
			}
			continue
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			t.Reset(max(next.Sub(s.clock()), 0))
			fire = t.C
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.drainWake:
			t.Stop()
		case <-fire:
		}
		last = nil
	}
}

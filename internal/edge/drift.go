package edge

import (
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// Make-before-break EIP drift (docs/dataplane.md "EIP drift"): an EIP a
// bind moved from host A to host B carries A's binding as
// model.EIP.Previous until its Until. The edge's route of such an EIP is,
// by the plan below, a pure function of the EIP's live binding, its
// Previous, when this edge first saw that Previous and now:
//
//   - for Config.DriftDelay after the first sight, every packet to the
//     previous binding (A, as before the move) while replies are taken
//     from both hosts (PrevAll): B's agent gets that long to program the
//     EIP, and B's replies to the new flows another edge, further on,
//     already sends it pass here;
//   - then the live binding with the previous one (dataplane.Route's
//     PrevHost, PrevVSID: the program sends new flows to B and the TCP
//     flows open at the move to A, and takes replies from both);
//   - from Until on (or when the Previous goes, or names the live host
//     and VSID), the live binding alone.
//
// The reconciler re-plans by itself at the two instants (a timer), since
// the controller's write that clears Previous may come late or never.

// DefaultDriftDelay is --drift-delay's default; MaxDriftDelay its most.
const (
	DefaultDriftDelay = 200 * time.Millisecond
	MaxDriftDelay     = 5 * time.Second
)

// Stopper is a scheduled call (*time.Timer).
type Stopper interface{ Stop() bool }

// driftSeen is when the edge first saw an EIP's Previous (by Config.Now).
type driftSeen struct {
	prev model.PreviousBinding
	at   time.Time
}

// driftPlan is the route of an EIP whose live route is w and whose
// previous binding is p, first seen at seen, at now with delay.
func driftPlan(w Want, p *model.PreviousBinding, seen, now time.Time, delay time.Duration) Want {
	if !p.Active(now) || !p.Underlay.IsValid() || p.VSID > 0xFFFFFF || (p.Underlay == w.Host && p.VSID == w.VSID) {
		return w
	}
	w.PrevHost, w.PrevVSID = p.Underlay, p.VSID
	w.PrevAll = now.Sub(seen) < delay
	return w
}

// driftNext is when driftPlan's answer for p next changes after now (the
// zero Time: never).
func driftNext(p *model.PreviousBinding, seen, now time.Time, delay time.Duration) time.Time {
	if !p.Active(now) {
		return time.Time{}
	}
	if end := seen.Add(delay); now.Before(end) && end.Before(p.Until) {
		return end
	}
	return p.Until
}

func (r *Reconciler) now() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now()
	}
	return time.Now()
}

// withDrift is w, the live route of EIP a, as the drift plan makes it at
// now (w itself when a has no previous binding). It records when a's
// Previous was first seen.
func (r *Reconciler) withDrift(a netip.Addr, w Want, now time.Time) Want {
	p, ok := r.idx.prev[a]
	if !ok {
		if len(r.driftSeen) > 0 {
			delete(r.driftSeen, a)
		}
		return w
	}
	s, ok := r.driftSeen[a]
	if !ok || !samePrev(s.prev, p) {
		s = driftSeen{prev: p, at: now}
		r.driftSeen[a] = s
	}
	return driftPlan(w, &p, s.at, now, r.cfg.DriftDelay)
}

// samePrev says whether a and b are the same previous binding (the same
// instant Until, whatever its location).
func samePrev(a, b model.PreviousBinding) bool {
	return a.Host == b.Host && a.Guest == b.Guest && a.Underlay == b.Underlay && a.VSID == b.VSID && a.Until.Equal(b.Until)
}

// routeIs says whether the programmed route c is w.
func routeIs(c dataplane.Route, w Want) bool {
	return c.Host == w.Host && c.VSID == w.VSID && c.PrevHost == w.PrevHost && c.PrevVSID == w.PrevVSID && c.PrevAll == w.PrevAll
}

// scheduleDrift sets the wake-up timer for the next change of a drift
// plan (none when no EIP drifts) and forgets the first sights of
// previous bindings that went.
func (r *Reconciler) scheduleDrift() {
	for a, s := range r.driftSeen {
		if p, ok := r.idx.prev[a]; !ok || !samePrev(p, s.prev) {
			delete(r.driftSeen, a)
		}
	}
	now := r.now()
	var next time.Time
	for a, p := range r.idx.prev {
		s, ok := r.driftSeen[a]
		if !ok {
			continue // not planned yet (no binding the edge routes)
		}
		if t := driftNext(&p, s.at, now, r.cfg.DriftDelay); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if r.driftTimer != nil && (next.IsZero() || !next.Equal(r.driftWake)) {
		r.driftTimer.Stop()
		r.driftTimer = nil
	}
	if next.IsZero() || r.driftTimer != nil || r.stopped {
		return
	}
	r.driftWake = next
	after := r.cfg.AfterFunc
	if after == nil {
		after = func(d time.Duration, f func()) Stopper { return time.AfterFunc(d, f) }
	}
	r.driftTimer = after(max(next.Sub(now), 0), r.driftDue)
}

// driftDue re-plans the drifting EIPs (the timer's call).
func (r *Reconciler) driftDue() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.driftTimer = nil
	if r.stopped {
		return
	}
	for a := range r.idx.prev {
		r.pending[a] = struct{}{}
	}
	if r.loading {
		return // a full load is under way: its commit plans everything
	}
	r.commit()
}

// DriftWake is when the reconciler next re-plans a drifting EIP by
// itself (the zero Time: no wake-up scheduled).
func (r *Reconciler) DriftWake() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.driftTimer == nil {
		return time.Time{}
	}
	return r.driftWake
}

// draining counts the EIPs of the index whose previous binding is still
// in force at now (NodeStatus.Draining): their routes name the previous
// host (all packets during the delay, then the flows open before the
// move), and only until the previous binding's Until, as the data plane's
// own entries (under r.mu).
func (r *Reconciler) draining(now time.Time) int {
	n := 0
	for _, p := range r.idx.prev {
		if now.Before(p.Until) {
			n++
		}
	}
	return n
}

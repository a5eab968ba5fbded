package placement

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Moves between sets, make-before-break (docs/scale.md "Scopes"). When an
// object leaves a set's scope but goes on existing (an EIP released from a
// pull-out or a quarantine and the copy of its guest, every object of a
// prefix moved to another set), the set's edges
// must keep it while the set's routes are withdrawn upstream: traffic
// still arrives there for a while. The controller therefore keeps such a
// copy, with the object's current value, for a grace period before it
// deletes it: the copy lingers. What it keeps, and how a later write
// keeps a lingering copy current, is computed here (Linger, Expired); the
// records and the clock are the controller's.

// Copy names an object's copy in a scope.
type Copy struct {
	Scope string
	Ref
}

// IsSetScope says whether scope is an edge set's (SetScope).
func IsSetScope(scope string) bool { return strings.HasPrefix(scope, "set/") }

// Lingering are the copies kept in scopes their objects left, by object,
// then scope, with the value each copy holds (the object's encoding: a
// lingering copy holds the object's current value, never an old one).
type Lingering map[Ref]map[string][]byte

// Has says whether c lingers.
func (l Lingering) Has(c Copy) bool {
	_, ok := l[c.Ref][c.Scope]
	return ok
}

// Value is the value lingering copy c holds (nil: c does not linger).
func (l Lingering) Value(c Copy) []byte { return l[c.Ref][c.Scope] }

// Set records that c lingers with value v.
func (l Lingering) Set(c Copy, v []byte) {
	m := l[c.Ref]
	if m == nil {
		m = map[string][]byte{}
		l[c.Ref] = m
	}
	m[c.Scope] = v
}

// Delete forgets c.
func (l Lingering) Delete(c Copy) {
	m := l[c.Ref]
	delete(m, c.Scope)
	if len(m) == 0 {
		delete(l, c.Ref)
	}
}

// Len counts the lingering copies.
func (l Lingering) Len() int {
	n := 0
	for _, m := range l {
		n += len(m)
	}
	return n
}

// LingerChange is what a write does to the lingering copies (Linger).
type LingerChange struct {
	// Start: the copies that begin to linger with this write (a new
	// grace), with their value.
	Start map[Copy][]byte
	// Update: lingering copies the write rewrote with the object's new
	// value (their grace goes on).
	Update map[Copy][]byte
	// End: lingering copies that stop lingering: their object came back
	// into the scope (the copy is an ordinary one again) or is gone (the
	// write deletes the copy).
	End []Copy
}

// Empty says whether the change does nothing.
func (c LingerChange) Empty() bool { return len(c.Start) == 0 && len(c.Update) == 0 && len(c.End) == 0 }

// Linger turns the copy ops Diff gave for a write (before, after and
// changed as passed to Diff) into those that keep leaving set copies:
//
//   - with start, a delete from a set scope of an object the state after
//     the write still places in some scope (it left the set, it was not
//     deleted) is no delete: the copy starts to linger. Its value is
//     rewritten only if the object's changed (an EIP released from a
//     pull-out gets its new value; a host whose last EIP in the set left
//     keeps its copy as it is). Host scopes never linger: an agent's
//     copies follow its host's guests at once;
//   - a copy lingering already (in lingering) whose object the write
//     recomputed (after holds it) is put with the object's new value if
//     that changed, deleted at once if the object is gone (or in no scope
//     at all), and no longer lingers if the object is back in the scope
//     (Diff then wrote the copy as a new one).
//
// It returns the ops to commit in Diff's order (the puts, then the
// deletes, each sorted) and what changed in the lingering copies, which
// the caller records once the commit went in. lingering is only read.
func Linger(before, after Snapshot, changed []Ref, ops []store.Op, lingering Lingering, start bool) ([]store.Op, LingerChange) {
	var lc LingerChange
	ch := refSet(changed)
	out := make([]store.Op, 0, len(ops))
	for _, o := range ops {
		r := Ref{o.Kind, o.Key}
		if !start || o.Value != nil || !IsSetScope(o.Scope) || len(after.Scopes[r]) == 0 {
			out = append(out, o)
			continue
		}
		v := after.Values[r]
		if lc.Start == nil {
			lc.Start = map[Copy][]byte{}
		}
		lc.Start[Copy{o.Scope, r}] = v
		if ch[r] || !bytes.Equal(before.Values[r], v) {
			out = append(out, store.Op{Scope: o.Scope, Kind: r.Kind, Key: r.Key, Value: v})
		}
	}
	keep := func(r Ref, scopes map[string][]byte) {
		if !after.holds(r) {
			return
		}
		now := after.Scopes[r]
		for sc, had := range scopes {
			c := Copy{sc, r}
			if _, ok := lc.Start[c]; ok {
				// Left the scope again with this write (it came back
				// through a write this controller did not see): a new
				// grace.
				continue
			}
			switch v := after.Values[r]; {
			case slices.Contains(now, sc):
				lc.End = append(lc.End, c)
			case len(now) == 0:
				lc.End = append(lc.End, c)
				out = append(out, store.Op{Scope: sc, Kind: r.Kind, Key: r.Key})
			case !bytes.Equal(had, v):
				if lc.Update == nil {
					lc.Update = map[Copy][]byte{}
				}
				lc.Update[c] = v
				out = append(out, store.Op{Scope: sc, Kind: r.Kind, Key: r.Key, Value: v})
				if start && r.Kind == model.KindEIP {
					out = followGuest(after, sc, v, lingering, &lc, out)
				}
			}
		}
	}
	if after.refs == nil || len(lingering) < len(after.refs) {
		for r, scopes := range lingering {
			keep(r, scopes)
		}
	} else {
		for r := range after.refs {
			if scopes, ok := lingering[r]; ok {
				keep(r, scopes)
			}
		}
	}
	slices.SortFunc(lc.End, compareCopy)
	return sortPutsDeletes(out), lc
}

// followGuest keeps a lingering EIP's guest with it: an EIP rebound while
// its copy lingers in set scope sc (v, its new value) needs its new
// guest's copy in sc too, or the set's edges, which still receive its
// traffic, have its route but no tunnel to the guest. Unless that copy is
// in sc already (placed there, lingering, or starting to), it starts to
// linger there with this write. Its grace starts now, so it ends no
// earlier than the EIP's; the copy of the guest the EIP left is deleted
// as before when nothing else points to it.
func followGuest(after Snapshot, sc string, v []byte, lingering Lingering, lc *LingerChange, out []store.Op) []store.Op {
	var e struct {
		Binding *model.Binding `json:"binding"`
	}
	if json.Unmarshal(v, &e) != nil || e.Binding == nil {
		return out
	}
	g := Ref{model.KindGuestCopy, model.GuestCopyKey(e.Binding.Host, e.Binding.Guest)}
	gv := after.Values[g]
	c := Copy{sc, g}
	if !after.holds(g) || gv == nil || slices.Contains(after.Scopes[g], sc) || lingering.Has(c) {
		return out
	}
	if _, ok := lc.Start[c]; ok {
		return out
	}
	if lc.Start == nil {
		lc.Start = map[Copy][]byte{}
	}
	lc.Start[c] = gv
	return append(out, store.Op{Scope: sc, Kind: g.Kind, Key: g.Key, Value: gv})
}

// Expired returns the deletes of the lingering copies cs (whose grace
// ended) that must go in st: those of an object that is gone or no longer
// placed in the copy's scope. A copy whose object came back into its
// scope (through a write the caller did not record) is an ordinary copy
// again and stays. The deletes are sorted by scope, kind and key.
func Expired(st *model.State, cs []Copy) []store.Op {
	p := newPlacer(st)
	var dels []store.Op
	for _, c := range cs {
		if slices.Contains(p.of(c.Ref), c.Scope) {
			continue
		}
		dels = append(dels, store.Op{Scope: c.Scope, Kind: c.Kind, Key: c.Key})
	}
	sortOps(dels)
	return dels
}

// sortPutsDeletes orders copy ops as Diff does: the puts, then the
// deletes, each sorted by scope, kind and key.
func sortPutsDeletes(ops []store.Op) []store.Op {
	var puts, dels []store.Op
	for _, o := range ops {
		if o.Value != nil {
			puts = append(puts, o)
		} else {
			dels = append(dels, o)
		}
	}
	sortOps(puts)
	sortOps(dels)
	return append(puts, dels...)
}

func compareCopy(a, b Copy) int {
	if c := strings.Compare(a.Scope, b.Scope); c != 0 {
		return c
	}
	return compareRef(a.Ref, b.Ref)
}

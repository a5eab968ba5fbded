package store

import (
	"encoding/json"
	"slices"
	"time"
)

// marker is the value of CommitKey: when a transaction was committed and
// what it wrote, by the names of the spans its keys lie in (the kinds of
// its primary keys, the scopes of its copies). A follower of a scope
// watches it to learn of every commit of the region: one that touched
// nothing it follows is applied at once (the follower's revision keeps up
// with the region's, so "every node applied R" stays meaningful), one that
// did is applied when its changes arrived (see watch).
type marker struct {
	At     time.Time `json:"at"`
	Kinds  []string  `json:"kinds,omitempty"`
	Scopes []string  `json:"scopes,omitempty"`
}

// markerOf is the commit marker of the transaction writing ops.
func markerOf(ops []Op) string {
	m := marker{At: time.Now().UTC()}
	for _, o := range ops {
		if o.Raw != "" {
			continue // an audit record
		}
		if o.Scope != "" {
			m.Scopes = append(m.Scopes, o.Scope)
		} else {
			m.Kinds = append(m.Kinds, o.Kind)
		}
	}
	slices.Sort(m.Kinds)
	slices.Sort(m.Scopes)
	m.Kinds, m.Scopes = slices.Compact(m.Kinds), slices.Compact(m.Scopes)
	b, _ := json.Marshal(m) // strings and a time: cannot fail
	return string(b)
}

// touches returns the indexes of the spans in sps a marker names; ok is
// false for a value that is not a marker (a writer of another version):
// the caller must then assume the commit touched every span.
func touches(value []byte, sps []span) (idx []int, ok bool) {
	var m marker
	if json.Unmarshal(value, &m) != nil || m.At.IsZero() {
		return nil, false
	}
	for i, sp := range sps {
		if sp.name != "" && (slices.Contains(m.Kinds, sp.name) || slices.Contains(m.Scopes, sp.name)) {
			idx = append(idx, i)
		}
	}
	return idx, true
}

// progress tracks, for a follower of several spans, which commits it has
// applied whole. A commit marker that names some of its spans is pending
// until each of them delivered a change at or after the marker's revision
// (a span's changes come in order); the revision a commit-only advance
// may report is the highest marker revision below every pending one.
type progress struct {
	through []int64 // per span: the revision of its last change seen
	pending []pendingCommit
	quiet   int64 // the highest marker revision seen that may be reported
	// The highest change seen and when: a change no marker announces
	// (written straight into etcd, not by Commit) is reported after
	// markerWait.
	last   int64
	lastAt time.Time
}

type pendingCommit struct {
	rev   int64
	spans []int
	seen  time.Time
}

// markerWait bounds how long a commit a marker named holds the reported
// revision back: a transaction that deleted a key already gone names its
// span but brings no change, and an older writer's marker (a time) names
// every span. It is long, for a change merely late (a loaded machine, a
// slow sink, a lagging proxy) must not be taken for one that never comes:
// then its revision would be reported before its change.
const markerWait = 10 * time.Second

func newProgress(spans int) *progress { return &progress{through: make([]int64, spans)} }

// change records a change of span i at rev.
func (p *progress) change(i int, rev int64) {
	p.through[i] = max(p.through[i], rev)
	if rev > p.last {
		p.last, p.lastAt = rev, time.Now()
	}
}

// commit records a marker at rev naming spans (all: every span).
func (p *progress) commit(rev int64, spans []int, all bool) {
	if all {
		spans = make([]int, len(p.through))
		for i := range spans {
			spans[i] = i
		}
	}
	if len(spans) > 0 {
		p.pending = append(p.pending, pendingCommit{rev, spans, time.Now()})
	}
	p.quiet = max(p.quiet, rev)
}

// applied returns the revision up to which every commit seen was applied
// whole (0: none known yet).
func (p *progress) applied() int64 {
	now := time.Now()
	p.pending = slices.DeleteFunc(p.pending, func(c pendingCommit) bool {
		if now.Sub(c.seen) > markerWait {
			return true
		}
		for _, i := range c.spans {
			if p.through[i] < c.rev {
				return false
			}
		}
		return true
	})
	if p.last > p.quiet && now.Sub(p.lastAt) > markerWait {
		p.quiet = p.last
	}
	limit := p.quiet
	for _, c := range p.pending {
		limit = min(limit, c.rev-1)
	}
	return limit
}

package edge

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
)

// ShareStore is what an edge needs to follow its share of the region: its
// set's scope of the store (store/scope.go) and the edge sets' primary
// keys, to find its set before following it.
type ShareStore interface {
	store.ScopeFollower
	store.PrefixReader
}

// FollowShare follows the share of the region the edge named name needs
// (placement.EdgeScope of its set) into sink until ctx ends: it reads the
// edge sets to find the one whose edges name it, then follows that set's
// scope; an edge in no set follows the kinds every edge reads whole and
// nothing else.
//
// When a watched change moves the edge to another set (or into or out of
// one), that change's commit is not passed on (sink would hold the old
// set's share as if it were the new one's) and the follow starts again
// with the new set's scope: its full load resyncs sink.
func FollowShare(ctx context.Context, st ShareStore, name string, sink store.Sink, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	backoff := 100 * time.Millisecond
	wait := func() {
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	for ctx.Err() == nil {
		set, err := readSetOf(ctx, st, name)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Warn("cannot read the edge sets; retrying", "err", err, "in", backoff)
			wait()
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		w := &shareSink{sink: sink, name: name, set: set, sets: map[string][]string{}, moved: cancel}
		log.Info("following the edge's share of the store", "set", set, "scope", placement.EdgeScope(set).Name)
		err = st.FollowScope(fctx, placement.EdgeScope(set), w)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if w.movedTo != nil {
			log.Info("the edge moved to another set: following its share", "from", set, "to", *w.movedTo)
			backoff = 100 * time.Millisecond
			continue
		}
		log.Warn("following the store ended; starting again", "err", err, "in", backoff)
		wait()
	}
	return ctx.Err()
}

// readSetOf reads the edge sets' primary keys and returns the name of the
// set whose edges name edge ("": none).
func readSetOf(ctx context.Context, st store.PrefixReader, edge string) (string, error) {
	kvs, _, err := st.GetPrefix(ctx, store.Root+model.KindEdgeSet+"/")
	if err != nil {
		return "", fmt.Errorf("read the edge sets: %w", err)
	}
	sets := map[string][]string{}
	for _, kv := range kvs {
		_, key, ok := store.ParseKey(kv.Key)
		if !ok {
			continue
		}
		o, err := model.DecodeStored(model.KindEdgeSet, key, kv.Value)
		if err != nil {
			continue // counts as absent, as in the follow (store.Invalid)
		}
		sets[key] = edgeNames(o.(*model.EdgeSet))
	}
	return setNaming(sets, edge), nil
}

func edgeNames(s *model.EdgeSet) []string {
	out := make([]string, len(s.Edges))
	for i, e := range s.Edges {
		out[i] = e.Name
	}
	return out
}

// setNaming is the first set (by name) whose edges name edge; the model
// lets an edge be in one set only.
func setNaming(sets map[string][]string, edge string) string {
	names := make([]string, 0, len(sets))
	for n, edges := range sets {
		if slices.Contains(edges, edge) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.Min(names)
}

// shareSink passes a scope's follow on to sink while the edge stays in
// the set the scope was chosen for. It keeps the edges of every set (the
// edge sets are in every edge's scope) and, at each commit, finds the
// edge's set again: if it changed, the commit is dropped and the follow is
// cancelled (FollowShare starts the new scope's).
//
// A full load is passed on as it comes (sink commits nothing before
// Commit); a watched batch is held until its Commit, so a batch that moves
// the edge reaches sink not at all.
type shareSink struct {
	sink    store.Sink
	name    string
	set     string              // the set the scope was chosen for
	sets    map[string][]string // set -> its edges' names, as of the follow
	loading bool
	batch   []shareOp
	moved   context.CancelFunc
	movedTo *string // the edge's set once it moved (nil: it has not)
}

type shareOp struct {
	kind, key string
	value     []byte // nil: deleted
	rev       int64
}

func (w *shareSink) Reset() {
	if w.movedTo != nil {
		return
	}
	clear(w.sets)
	w.batch, w.loading = nil, true
	w.sink.Reset()
}

func (w *shareSink) Put(kind, key string, value []byte, rev int64) {
	if w.movedTo != nil {
		return
	}
	if kind == model.KindEdgeSet {
		if o, err := model.DecodeStored(kind, key, value); err == nil {
			w.sets[key] = edgeNames(o.(*model.EdgeSet))
		} else {
			delete(w.sets, key) // refused: counts as absent
		}
	}
	if w.loading {
		w.sink.Put(kind, key, value, rev)
		return
	}
	if value == nil {
		value = []byte{} // an empty value is still a put (nil marks deletes here)
	}
	w.batch = append(w.batch, shareOp{kind, key, value, rev})
}

func (w *shareSink) Delete(kind, key string, rev int64) {
	if w.movedTo != nil {
		return
	}
	if kind == model.KindEdgeSet {
		delete(w.sets, key)
	}
	if w.loading {
		w.sink.Delete(kind, key, rev)
		return
	}
	w.batch = append(w.batch, shareOp{kind: kind, key: key, rev: rev})
}

func (w *shareSink) Commit(rev int64, resync bool) {
	if w.movedTo != nil {
		return
	}
	batch := w.batch
	w.batch, w.loading = nil, false
	if now := setNaming(w.sets, w.name); now != w.set {
		w.movedTo = &now
		w.moved()
		return
	}
	for _, o := range batch {
		if o.value == nil {
			w.sink.Delete(o.kind, o.key, o.rev)
		} else {
			w.sink.Put(o.kind, o.key, o.value, o.rev)
		}
	}
	w.sink.Commit(rev, resync)
}

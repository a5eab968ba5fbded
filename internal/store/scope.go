package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/azgate/azgate/internal/model"
)

// The partitioned layout (issue 19, docs/scale.md "Scopes"). Every object
// keeps its primary key under Root, which the controller loads whole.
// Objects a set's edges or a host's agent need are also copied, in the same
// transaction as the primary write, under ScopeRoot + SCOPE + "/KIND/KEY",
// where SCOPE is "set/NAME" or "host/NAME" (internal/placement computes
// which). An edge or an agent loads and watches its own scope's range plus
// the few small kinds every node reads whole, so its cost grows with its
// share, not with the region.
const (
	ScopeRoot = "/azgate/scope/"
	// LayoutKey holds Layout once a controller has written every scope's
	// copies (a migration from the layout without scopes). Followers of a
	// scope wait for it: an edge that served an empty scope would withdraw
	// every route.
	LayoutKey = "/azgate/meta/layout"
	Layout    = "2"
)

// ErrNoLayout: the store has no scope copies yet (no controller of this
// version ran a migration).
var ErrNoLayout = errors.New("store: no scope copies yet (layout " + Layout + "): waiting for a controller of this version to migrate the store")

// ScopeKey is the etcd key of an object's copy in scope.
func ScopeKey(scope, kind, key string) string {
	return ScopeRoot + scope + "/" + kind + "/" + key
}

// ParseScopeKey splits a copy's etcd key into scope, kind and object key.
// A scope is two segments ("set/NAME", "host/NAME").
func ParseScopeKey(k string) (scope, kind, key string, ok bool) {
	rest, ok := strings.CutPrefix(k, ScopeRoot)
	if !ok {
		return "", "", "", false
	}
	// Substrings of k, not strings.SplitN: a full load parses a key per
	// object, and the split's slice and the joined scope were most of
	// its garbage but for the values' decoding.
	class, rest, ok1 := strings.Cut(rest, "/")
	name, rest, ok2 := strings.Cut(rest, "/")
	kind, key, ok3 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || !ok3 || class == "" || name == "" || kind == "" || key == "" {
		return "", "", "", false
	}
	return k[len(ScopeRoot) : len(ScopeRoot)+len(class)+1+len(name)], kind, key, true
}

// opKey is the etcd key an Op writes.
func opKey(o Op) string {
	if o.Raw != "" {
		return o.Raw
	}
	if o.Scope != "" {
		return ScopeKey(o.Scope, o.Kind, o.Key)
	}
	return Key(o.Kind, o.Key)
}

// Scope is what a follower of a share of the region loads and watches.
type Scope struct {
	// Name is the scope ("set/NAME" or "host/NAME"): every copy under
	// ScopeRoot+Name+"/". "": none (a node in no set reads Kinds only).
	Name string
	// Kinds are read whole from their primary keys: the small kinds every
	// node of a role needs (edge sets, quarantines, ...). A kind read
	// whole must have no copies in the scope (the copy's changes would
	// be applied to the same object).
	Kinds []string
}

// ScopeFollower follows one scope (see FollowScope and FollowScopeState).
type ScopeFollower interface {
	FollowScope(ctx context.Context, sc Scope, sink Sink) error
	FollowScopeState(ctx context.Context, sc Scope, h Handler) error
}

var _ ScopeFollower = (*Store)(nil)

// validScope: a scope is two non-empty segments.
func validScope(name string) bool {
	kind, n, ok := strings.Cut(name, "/")
	return ok && kind != "" && n != "" && !strings.Contains(n, "/")
}

// feed is what a follower of sc loads and watches: every kind of
// sc.Kinds under its primary prefix, and the scope's copies (handed to
// the sink under their object's kind and key, as primary keys are).
func (sc Scope) feed() feed {
	var f feed
	for _, k := range sc.Kinds {
		f.load = append(f.load, primary(k))
	}
	if sc.Name != "" {
		prefix := ScopeRoot + sc.Name + "/"
		parts := []string{prefix + model.KindGuestCopy + "/"}
		for _, k := range model.Kinds {
			parts = append(parts, prefix+k+"/")
		}
		f.load = append(f.load, span{prefix: prefix, parse: parseCopy, name: sc.Name, parts: parts})
		f.layout = true
	}
	f.watch, f.marker = f.load, true
	return f
}

func parseCopy(k string) (kind, key string, ok bool) {
	_, kind, key, ok = ParseScopeKey(k)
	return kind, key, ok
}

// FollowScope is FollowSink over a share of the region: it streams into
// sink, until ctx ends, the objects of sc.Kinds and the copies of scope
// sc.Name, loaded at one revision and then watched; a compacted or broken
// watch leads to a full reload. A scope is followed only once the layout
// marker is there: until then (no controller has written the copies) no
// load is committed, ErrNoLayout is logged now and then and the load
// retried, for a sink committed with nothing would withdraw everything
// its node serves.
func (s *Store) FollowScope(ctx context.Context, sc Scope, sink Sink) error {
	if sc.Name != "" && !validScope(sc.Name) {
		return fmt.Errorf("store: scope %q: want set/NAME or host/NAME", sc.Name)
	}
	for i, k := range sc.Kinds {
		if k == "" || strings.Contains(k, "/") || slices.Contains(sc.Kinds[:i], k) {
			return fmt.Errorf("store: scope %q: kind %q empty, with a slash or given twice", sc.Name, k)
		}
	}
	return s.follow(ctx, sc.feed(), sink)
}

// FollowScopeState is Follow over a scope (see FollowScope): the state
// handed to h holds sc.Kinds and the scope's copies. Invalid lists what
// it refused.
func (s *Store) FollowScopeState(ctx context.Context, sc Scope, h Handler) error {
	return s.FollowScope(ctx, sc, &stateSink{st: model.NewState(), log: s.Log, h: h, invalid: s.invalidSet()})
}

// MarkLayout records that every scope's copies are written (LayoutKey =
// Layout): followers of a scope start loading. The controller calls it
// once its migration has written them all.
func (s *Store) MarkLayout(ctx context.Context) error {
	if _, err := s.Client.Put(ctx, LayoutKey, Layout); err != nil {
		return fmt.Errorf("store: mark the layout: %w", err)
	}
	return nil
}

// LoadScopes hands fn every copy under ScopeRoot, read page by page at
// one revision, which it returns. Keys that name no copy are logged and
// skipped.
func (s *Store) LoadScopes(ctx context.Context, fn func(scope, kind, key string, value []byte)) (int64, error) {
	rev, _, err := s.layoutAt(ctx)
	if err != nil {
		return 0, err
	}
	err = s.scan(ctx, ScopeRoot, rev, func(kv *mvccpb.KeyValue) {
		if scope, kind, key, ok := ParseScopeKey(string(kv.Key)); ok {
			fn(scope, kind, key, kv.Value)
		} else {
			s.Log.Warn("store: ignoring a key that names no copy", "key", string(kv.Key))
		}
	})
	if err != nil {
		return 0, err
	}
	return rev, nil
}

package store

import (
	"context"
	"errors"
	"strings"
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
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return "", "", "", false
	}
	return parts[0] + "/" + parts[1], parts[2], parts[3], true
}

// opKey is the etcd key an Op writes.
func opKey(o Op) string {
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
	// node of a role needs (edge sets, quarantines, ...).
	Kinds []string
}

// ScopeFollower follows one scope (see FollowScope).
type ScopeFollower interface {
	FollowScope(ctx context.Context, sc Scope, sink Sink) error
}

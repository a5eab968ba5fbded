// Package placement says which scopes of the partitioned store hold a copy
// of each object (store/scope.go): the edge set scopes "set/NAME" whose
// edges carry it and the host scopes "host/NAME" whose agent needs it. It
// is pure: the controller computes the copies a write adds and removes
// (Take before and after, then Diff), the migration and the tests the
// copies of a whole state (All).
//
// What goes where (docs/scale.md "Scopes"):
//   - an EIP: every set among setplan's Carriers of its address, and the
//     host it is bound to;
//   - a service: the Carriers of its VIP, and every host with a backend;
//   - a service's Health: the Carriers of its service's VIP;
//   - a host: its own scope, and every set carrying an EIP bound to one of
//     its guests or a service with a backend on it;
//   - every other kind is read whole by the nodes that need it
//     (EdgeKinds, AgentKinds) and has no copies.
package placement

import (
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Ref names an object.
type Ref struct{ Kind, Key string }

// SetScope is the scope of an edge set's edges.
func SetScope(set string) string { return "set/" + set }

// HostScope is the scope of a host's agent.
func HostScope(host string) string { return "host/" + host }

// Scoped are the kinds that have copies in scopes.
var Scoped = []string{model.KindHost, model.KindEIP, model.KindService, model.KindHealth}

// EdgeKinds are the kinds an edge reads whole; AgentKinds an agent's.
var (
	EdgeKinds  = []string{model.KindAZ, model.KindEdgeSet, model.KindQuarantine, model.KindFirewallRule, model.KindBandwidthPackage}
	AgentKinds = []string{model.KindAZ, model.KindEdgeSet, model.KindQuarantine, model.KindBandwidthPackage}
)

// EdgeScope is what an edge of set follows ("": an edge in no set).
func EdgeScope(set string) store.Scope {
	sc := store.Scope{Kinds: EdgeKinds}
	if set != "" {
		sc.Name = SetScope(set)
	}
	return sc
}

// AgentScope is what the agent of host follows.
func AgentScope(host string) store.Scope {
	return store.Scope{Name: HostScope(host), Kinds: AgentKinds}
}

// Snapshot holds the scopes (sorted) and the encoded values of objects in
// one state; an object absent from the state has neither.
type Snapshot struct {
	Scopes map[Ref][]string
	Values map[Ref][]byte
}

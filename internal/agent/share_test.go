package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// shareHost is a host of n guests and the n EIPs (from first on in
// 198.51.100.0/24) bound to them.
func shareHost(name string, idx, n, first int) []model.Object {
	h := &model.Host{Name: name, AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 100, byte(idx)})}
	var eips []model.Object
	for i := range n {
		g := model.Guest{Name: fmt.Sprintf("g%d", i), Address: netip.AddrFrom4([4]byte{198, 19, byte(idx), byte(1 + i)}), VSID: uint32(10000 + 100*idx + i)}
		h.Guests = append(h.Guests, g)
		eips = append(eips, &model.EIP{Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(first + i)}), Binding: &model.Binding{Host: name, Guest: g.Name}})
	}
	return append([]model.Object{h}, eips...)
}

// observed is a store whose FollowScopeState calls after once the
// follower's handler is done with each state.
type observed struct {
	*store.Store
	after func(st *model.State, rev int64, evs []store.Event)
}

func (o observed) FollowScopeState(ctx context.Context, sc store.Scope, h store.Handler) error {
	return o.Store.FollowScopeState(ctx, sc, func(st *model.State, rev int64, evs []store.Event, resync bool) {
		h(st, rev, evs, resync)
		o.after(st, rev, evs)
	})
}

// TestAgentShareIgnoresOtherHosts is issue 19's proof for the agent: an
// agent following its host's share (placement.AgentScope, as Run does)
// over embedded etcd, in a region written as the controller writes it.
// Ten times its EIPs bound on another host do not reach its state: the
// counts of EIPs and hosts it holds stay as they were, it receives no
// event for them, and its data plane's EIP map is unchanged.
func TestAgentShareIgnoresOtherHosts(t *testing.T) {
	const n = 10
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := []model.Object{&model.AZ{Name: "az1"},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}}}
	objs = append(objs, shareHost("az1-h1", 1, n, 1)...)
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}

	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var (
		mu          sync.Mutex
		rev         int64
		eips, hosts int
		events      []string // since the last clear
		programmed  int      // EIPs in the data plane's map
	)
	// The agent's own follow (as Run calls it), on a store that shows the
	// test each state after the reconciler handled it.
	obs := observed{Store: s, after: func(st *model.State, at int64, evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		rev, eips, hosts = at, len(st.EIPs), len(st.Hosts)
		for _, e := range evs {
			events = append(events, e.Kind+"/"+e.Key)
		}
		programmed = len(fake.EIPMap)
	}}
	go follow(ctx, quiet, obs, "az1-h1", r)
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
		}
	}
	wait("the agent holds its EIPs", func() bool { return programmed == n })
	mu.Lock()
	eips0, hosts0 := eips, hosts
	events = nil
	mu.Unlock()
	t.Logf("agent of az1-h1 with %d EIPs bound to it: state of %d EIPs, %d hosts", n, eips0, hosts0)

	// Ten times as many EIPs, bound to another host.
	if _, err := placementtest.Put(ctx, s, shareHost("az1-h2", 2, 10*n, 1+n)...); err != nil {
		t.Fatal(err)
	}
	// A change every agent reads, after that one: once the agent has it,
	// it has seen every change before it.
	marker, err := placementtest.Put(ctx, s, &model.AZ{Name: "az2"})
	if err != nil {
		t.Fatal(err)
	}
	wait("the agent has the change after the other host's", func() bool { return rev >= marker })
	// The other host's EIPs are in the store, in its own scope.
	st, _, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kvs, _, err := s.GetPrefix(ctx, store.ScopeRoot+placement.HostScope("az1-h2")+"/"+model.KindEIP+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.EIPs) != 11*n || len(kvs) != 10*n {
		t.Fatalf("the store holds %d EIPs, %d in az1-h2's scope: want %d, %d", len(st.EIPs), len(kvs), 11*n, 10*n)
	}

	mu.Lock()
	defer mu.Unlock()
	if eips != eips0 || hosts != hosts0 {
		t.Errorf("the agent's state grew with another host's EIPs: %d EIPs and %d hosts, were %d and %d", eips, hosts, eips0, hosts0)
	}
	if len(events) != 1 || events[0] != model.KindAZ+"/az2" {
		t.Errorf("the agent received %d events (want only az/az2): %v", len(events), events[:min(len(events), 5)])
	}
	if programmed != n {
		t.Errorf("the agent's EIP map holds %d entries, want %d", programmed, n)
	}
	t.Logf("after %d EIPs were bound to another host: state of %d EIPs, %d hosts; %d EIPs programmed", 10*n, eips, hosts, programmed)
}

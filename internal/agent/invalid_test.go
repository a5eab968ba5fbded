package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestInvalidStoredObjectsIgnored: an EIP written straight into etcd that
// fails the model's validation is not programmed on the agent and is
// listed in its status; a later valid write of the same key is
// programmed. The valid EIP beside it is programmed throughout.
func TestInvalidStoredObjectsIgnored(t *testing.T) {
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var objs []model.Object
	st := state(t)
	for _, k := range model.Kinds {
		for _, key := range st.Keys(k) {
			o, _ := st.Get(k, key)
			objs = append(objs, o)
		}
	}
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}
	// raw writes at the primary key and at the copy in the host's scope,
	// which the agent reads.
	raw := func(kind, key, value string) int64 {
		t.Helper()
		var rev int64
		for _, k := range []string{store.Key(kind, key), store.ScopeKey(placement.HostScope("az1-h1"), kind, key)} {
			resp, err := s.Client.Put(ctx, k, value)
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		return rev
	}
	rev := raw(model.KindEIP, "198.51.100.9", `{"address":"198.51.100.9","description":"`+strings.Repeat("x", 2000)+`","binding":{"host":"az1-h1","guest":"g2"}}`)

	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	// The handler waits for the test to look after each change, so the
	// fake maps are read while nothing writes them.
	type step struct {
		rev int64
		ack chan struct{}
	}
	steps := make(chan step)
	go s.FollowScopeState(ctx, placement.AgentScope("az1-h1"), func(st *model.State, rev int64, evs []store.Event, resync bool) {
		r.Handle(st, rev, evs, resync)
		ack := make(chan struct{})
		select {
		case steps <- step{rev, ack}:
			<-ack
		case <-ctx.Done():
		}
	})
	at := func(rev int64, check func()) {
		t.Helper()
		for {
			select {
			case s := <-steps:
				if s.rev >= rev {
					check()
					close(s.ack)
					return
				}
				close(s.ack)
			case <-time.After(30 * time.Second):
				// A write straight into etcd comes with no commit marker:
				// the follower reports its revision after 10 s
				// (store.markerWait), its change at once.
				t.Fatalf("revision %d not handled in 30s", rev)
			}
		}
	}
	status := func() model.NodeStatus {
		ns := r.Status(time.Now(), nil)
		store.ReportInvalid(&ns, s.Invalid) // as Run does
		return ns
	}
	at(rev, func() {
		if _, ok := fake.EIPMap[netip.MustParseAddr("198.51.100.7")]; !ok {
			t.Errorf("the valid EIP is not programmed: %v", fake.EIPMap)
		}
		if e, ok := fake.EIPMap[netip.MustParseAddr("198.51.100.9")]; ok {
			t.Errorf("the invalid EIP is programmed: %+v", e)
		}
		ns := status()
		if ns.InvalidTotal != 1 || ns.Invalid[0].Kind != model.KindEIP || ns.Invalid[0].Key != "198.51.100.9" ||
			!strings.Contains(ns.Invalid[0].Reason, "description") {
			t.Errorf("status lists %+v", ns.Invalid)
		}
	})
	rev = raw(model.KindEIP, "198.51.100.9", `{"address":"198.51.100.9","binding":{"host":"az1-h1","guest":"g2"}}`)
	at(rev, func() {
		if e, ok := fake.EIPMap[netip.MustParseAddr("198.51.100.9")]; !ok || e.Private != netip.MustParseAddr("198.19.11.3") {
			t.Errorf("the corrected EIP is not programmed: %v", fake.EIPMap)
		}
		if ns := status(); ns.InvalidTotal != 0 {
			t.Errorf("status still lists %+v", ns.Invalid)
		}
	})
}

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestAgentAnnounceKeyRemoved runs the agent's groups against a real
// store: two members of the BGP set "hot" keep leased announce keys as
// the edges do; when one's lease is revoked (the edge stops announcing)
// it leaves the group within one watch event, and when the other's lease
// expires (the edge died) it leaves too. It measures the time from the
// key's deletion to the group's change.
func TestAgentAnnounceKeyRemoved(t *testing.T) {
	s := embeddedtest.Store(t)
	st := setsState(t)
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		g  dataplane.AgentGroup
		at time.Time
	}
	hot := make(chan change, 64)
	fake.OnGroup = func(_ uint16, g dataplane.AgentGroup) {
		if g.Set == "hot" {
			hot <- change{g, time.Now()}
		}
	}
	r.Handle(st, 1, nil, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); WatchAnnouncements(ctx, s, r, quiet, nil) }()
	defer func() { cancel(); <-done }()

	members := map[string]string{"edge-h1": "198.18.0.21", "edge-h2": "198.18.0.22"}
	announce := func(edge string, ttl time.Duration) (store.LeaseID, context.CancelFunc) {
		t.Helper()
		id, err := s.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := json.Marshal(model.Announcement{Set: "hot", Edge: edge, Underlay: a(members[edge])})
		if err := s.WriteLeased(ctx, id, []store.KV{{Key: store.AnnounceKey("hot", edge), Value: v}}); err != nil {
			t.Fatal(err)
		}
		kctx, stop := context.WithCancel(ctx)
		if _, err := s.KeepAlive(kctx, id); err != nil {
			t.Fatal(err)
		}
		return id, stop
	}
	hotGroup := func() dataplane.AgentGroup {
		r.mu.Lock()
		slot := r.groupSlot["hot"]
		r.mu.Unlock()
		gs, _ := fake.Groups()
		return gs[slot]
	}
	waitFor := func(what string, want ...string) change {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case c := <-hot:
				if fmt.Sprint(c.g.Members) == fmt.Sprint(want) {
					return c
				}
			case <-deadline:
				t.Fatalf("%s: group hot never became %v (now %+v)", what, want, hotGroup())
			}
		}
	}

	// Both announce: the group is both (it was both before too, by
	// fallback: nobody announced yet); then edge-h2 stops, again and again.
	_, stop1 := announce("edge-h1", 2*time.Second)
	var lat []time.Duration
	for i := range 10 {
		id2, stop2 := announce("edge-h2", 2*time.Second)
		// Wait until the reconciler has both keys, then forget the
		// group writes that led there.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			r.mu.Lock()
			both := r.ann.Has("hot", "edge-h1") && r.ann.Has("hot", "edge-h2")
			r.mu.Unlock()
			if both {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the announce keys never reached the reconciler", i)
			}
		}
		for len(hot) > 0 {
			<-hot
		}
		if g := hotGroup(); len(g.Members) != 2 {
			t.Fatalf("round %d: both announce, group %+v", i, g)
		}
		gen := hotGroup().Gen
		t0 := time.Now()
		if err := s.Revoke(ctx, id2); err != nil {
			t.Fatal(err)
		}
		c := waitFor("edge-h2 revoked", "198.18.0.21")
		stop2()
		if c.g.Gen != gen+1 {
			t.Fatalf("edge-h2 left without a new generation: %d, was %d", c.g.Gen, gen)
		}
		lat = append(lat, c.at.Sub(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("announce key revoked -> group written: min %v, median %v, max %v (n=%d)", lat[0], lat[len(lat)/2], lat[len(lat)-1], len(lat))
	if lat[len(lat)-1] > time.Second {
		t.Errorf("a revoked member left its group after %v, want well under a second", lat[len(lat)-1])
	}

	// A malformed key (its value names another edge) makes no member
	// live: counted, the group stays as it is.
	badLease, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteLeased(ctx, badLease, []store.KV{{Key: store.AnnounceKey("hot", "edge-h2"), Value: []byte(`{"set":"hot","edge":"edge-h9"}`)}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		bad := r.badAnnounce
		r.mu.Unlock()
		if bad > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the malformed announce key was not counted")
		}
	}
	if g := hotGroup(); fmt.Sprint(g.Members) != "[198.18.0.21]" {
		t.Fatalf("a malformed key changed the group: %+v", g)
	}
	if err := s.Revoke(ctx, badLease); err != nil {
		t.Fatal(err)
	}

	// edge-h1 dies: its keepalives stop, its lease expires. With no
	// member announcing, the set falls back to both.
	t0 := time.Now()
	stop1()
	c := waitFor("edge-h1's lease expired", "198.18.0.21", "198.18.0.22")
	t.Logf("keepalives stopped -> lease expired -> group written: %v (TTL 2 s)", c.at.Sub(t0))
	if _, n := r.Groups(); n == 0 {
		t.Error("the fallback was not counted")
	}
	if gs, _ := r.Groups(); !slices.Equal(gs["hot"].Members, c.g.Members) {
		t.Errorf("the reconciler's view %+v differs from the maps' %+v", gs["hot"], c.g)
	}
}

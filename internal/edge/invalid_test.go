package edge

import (
	"context"
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

// rawPut writes a value straight into etcd, past the API's validation:
// at its primary key and at its copy in the scope of the set pop-a, which
// the edge reads.
func rawPut(t *testing.T, s *store.Store, kind, key, value string) {
	t.Helper()
	for _, k := range []string{store.Key(kind, key), store.ScopeKey(placement.SetScope("pop-a"), kind, key)} {
		if _, err := s.Client.Put(context.Background(), k, value); err != nil {
			t.Fatal(err)
		}
	}
}

// until polls cond (under the reconciler's lock, so the fake maps are
// not being written) for up to 10 s.
func until(t *testing.T, r *Reconciler, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// TestInvalidStoredObjectsIgnored: objects written straight into etcd
// that fail the model's validation (an EIP, a host, a service) are not
// programmed, are listed with key and reason in the edge's status, and
// take effect once a valid write replaces them; valid objects around them
// are programmed as usual. An invalid write over a valid object withdraws
// it.
func TestInvalidStoredObjectsIgnored(t *testing.T) {
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := placementtest.Put(ctx, s, svcRegion()...); err != nil {
		t.Fatal(err)
	}
	// The EIP's description is over the limit: the edge used to read only
	// the address and binding and programmed it.
	long := strings.Repeat("x", 2000)
	rawPut(t, s, model.KindEIP, "198.51.100.9", `{"address":"198.51.100.9","description":"`+long+`","binding":{"host":"az1-h1","guest":"g1"}}`)
	// A host whose guest has a reserved VSID, and a valid EIP bound to it.
	rawPut(t, s, model.KindHost, "az1-h9", `{"name":"az1-h9","az":"az1","underlay":"198.18.11.9","guests":[{"name":"g1","address":"198.19.11.9","vsid":1}]}`)
	rawPut(t, s, model.KindEIP, "198.51.100.11", `{"address":"198.51.100.11","binding":{"host":"az1-h9","guest":"g1"}}`)
	// A service whose listener names a pool it does not have.
	rawPut(t, s, model.KindService, "bad", `{"name":"bad","vip":"198.51.100.40","mode":"nat","listeners":[{"protocol":"tcp","port":80,"pool":"nope"}],"pools":[{"name":"p","backends":[{"address":"198.19.200.1"}]}]}`)
	// An object stored under another object's key.
	rawPut(t, s, model.KindEIP, "198.51.100.12", `{"address":"198.51.100.13"}`)

	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	defer r.Stop()
	go FollowShare(ctx, s, "edge-a1", r, quiet)

	until(t, r, "the valid objects are programmed", func() bool {
		_, ok := fake.RouteMap[a("198.51.100.7")]
		return ok && fake.VIPSet[a("198.51.100.20")] && fake.VIPSet[a("198.51.100.30")]
	})
	r.mu.Lock()
	for _, e := range []string{"198.51.100.9", "198.51.100.11", "198.51.100.12", "198.51.100.13"} {
		if rt, ok := fake.RouteMap[a(e)]; ok {
			t.Errorf("EIP %s programmed from an invalid store: %+v", e, rt)
		}
	}
	if fake.VIPSet[a("198.51.100.40")] {
		t.Error("the invalid service's VIP is programmed")
	}
	r.mu.Unlock()
	st := r.Status(time.Now(), nil)
	want := map[string]string{
		model.KindEIP + "/198.51.100.9":  "description: longer than 1024",
		model.KindHost + "/az1-h9":       "guests[0].vsid",
		model.KindService + "/bad":       `pool "nope"`,
		model.KindEIP + "/198.51.100.12": `names itself "198.51.100.13"`,
	}
	if st.InvalidTotal != len(want) || len(st.Invalid) != len(want) {
		t.Fatalf("status lists %d (total %d) invalid objects, want %d: %+v", len(st.Invalid), st.InvalidTotal, len(want), st.Invalid)
	}
	for _, o := range st.Invalid {
		if w, ok := want[o.Kind+"/"+o.Key]; !ok || !strings.Contains(o.Reason, w) {
			t.Errorf("invalid %s/%s: reason %q, want it to say %q", o.Kind, o.Key, o.Reason, w)
		}
	}
	if !strings.Contains(strings.Join(st.Errors, "\n"), "4 object(s) in the store fail validation") {
		t.Errorf("status errors do not mention the invalid objects: %q", st.Errors)
	}

	// Valid writes of the same keys take effect.
	rawPut(t, s, model.KindEIP, "198.51.100.9", `{"address":"198.51.100.9","binding":{"host":"az1-h1","guest":"g1"}}`)
	rawPut(t, s, model.KindHost, "az1-h9", `{"name":"az1-h9","az":"az1","underlay":"198.18.11.9","guests":[{"name":"g1","address":"198.19.11.9","vsid":5009}]}`)
	rawPut(t, s, model.KindService, "bad", `{"name":"bad","vip":"198.51.100.40","mode":"nat","listeners":[{"protocol":"tcp","port":80,"pool":"p"}],"pools":[{"name":"p","backends":[{"address":"198.19.200.1"}]}]}`)
	for _, k := range []string{store.Key(model.KindEIP, "198.51.100.12"), store.ScopeKey(placement.SetScope("pop-a"), model.KindEIP, "198.51.100.12")} {
		if _, err := s.Client.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	until(t, r, "the corrected objects are programmed", func() bool {
		_, ok9 := fake.RouteMap[a("198.51.100.9")]
		rt11, ok11 := fake.RouteMap[a("198.51.100.11")]
		_, n := r.invalid.List()
		return ok9 && ok11 && rt11.Host == a("198.18.11.9") && rt11.VSID == 5009 && fake.VIPSet[a("198.51.100.40")] && n == 0
	})
	if st := r.Status(time.Now(), nil); st.InvalidTotal != 0 || len(st.Invalid) != 0 {
		t.Fatalf("invalid objects still listed after valid writes: %+v", st.Invalid)
	}

	// An invalid write over a valid EIP withdraws it: what is in force is
	// what the store holds, whatever a node loaded before.
	rawPut(t, s, model.KindEIP, "198.51.100.7", `{"address":"198.51.100.7","binding":{"host":"az1-h1","guest":""}}`)
	until(t, r, "the EIP overwritten with an invalid value is withdrawn", func() bool {
		_, ok := fake.RouteMap[a("198.51.100.7")]
		return !ok
	})
	if st := r.Status(time.Now(), nil); st.InvalidTotal != 1 || st.Invalid[0].Key != "198.51.100.7" {
		t.Fatalf("status: %+v", st.Invalid)
	}
}

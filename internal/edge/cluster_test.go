package edge

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/storetest"
)

// TestReconcilerOnClusterMemberKilled runs an edge Reconciler on the
// dataplane fakes, following a 3-member etcd cluster (issue 8, part 7),
// while EIPs are rebound and a service's backends change, one commit at a
// time; one member (a follower, then the leader) is killed with SIGKILL
// and later restarted. After every commit the edge must hold it within a
// few seconds, and at the end its maps must equal those of a reconciler
// loaded afresh from the store.
func TestReconcilerOnClusterMemberKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: runs an etcd cluster")
	}
	for _, victim := range []string{"follower", "leader"} {
		t.Run(victim, func(t *testing.T) {
			c := storetest.StartCluster(t, 3)
			s, err := store.Connect(store.Options{Endpoints: c.Endpoints(), Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for deadline := time.Now().Add(30 * time.Second); s.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no etcd leader in 30s")
				}
			}
			objs := svcRegion()
			for i := 10; i < 60; i++ {
				objs = append(objs, &model.EIP{Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
			}
			if _, err := commitObjs(ctx, s, objs...); err != nil {
				t.Fatal(err)
			}

			fake := dataplane.NewFakeLB()
			r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
			var applied atomic.Int64
			r.OnApplied = func(rev int64) { applied.Store(rev) }
			done := make(chan struct{})
			go func() { FollowShare(ctx, s, "edge-a1", r, quiet); close(done) }()

			leader, err := s.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kill := c.Index(leader)
			if victim == "follower" {
				kill = (kill + 1) % len(c.Members)
			}
			const n = 150
			var worst time.Duration
			hosts := []string{"az1-h1", "az2-h1"}
			for i := 0; i < n; i++ {
				switch i {
				case n / 3:
					if err := c.Kill(kill); err != nil {
						t.Fatal(err)
					}
				case 2 * n / 3:
					if err := c.Restart(kill); err != nil {
						t.Fatal(err)
					}
				}
				var o model.Object
				eip := netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i%50)})
				if i%10 == 5 {
					// A backend leaves or returns: the table changes.
					web := *webService(objs)
					web.Pools = []model.Pool{web.Pools[0]}
					if i%20 == 5 {
						web.Pools[0].Backends = web.Pools[0].Backends[:1]
					}
					o = &web
				} else {
					o = &model.EIP{Address: eip, Binding: &model.Binding{Host: hosts[i%2], Guest: "g1"}}
				}
				t0 := time.Now()
				rev, err := commitObjs(ctx, s, o)
				if err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				for applied.Load() < rev {
					if time.Since(t0) > 15*time.Second {
						t.Fatalf("commit %d (revision %d) not applied by the edge in 15s (at %d)", i, rev, applied.Load())
					}
					time.Sleep(5 * time.Millisecond)
				}
				worst = max(worst, time.Since(t0))
				if e, ok := o.(*model.EIP); ok {
					rt, ok := fake.Routes()[e.Address]
					want := a("198.18.11.1")
					if e.Binding.Host == "az2-h1" {
						want = a("198.18.21.1")
					}
					if !ok || rt.Host != want {
						t.Fatalf("commit %d: route of %v is %+v, want host %v", i, e.Address, rt, want)
					}
				}
			}
			t.Logf("%d commits; the slowest (commit and apply) took %v", n, worst)

			// The maps equal those of a reconciler loaded afresh.
			rev, err := s.CommitRevision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ref := dataplane.NewFakeLB()
			rr := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, ref)
			var refApplied atomic.Int64
			rr.OnApplied = func(rev int64) { refApplied.Store(rev) }
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			go FollowShare(rctx, s, "edge-a1", rr, quiet)
			for deadline := time.Now().Add(15 * time.Second); refApplied.Load() < rev; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("a new edge did not load revision %d in 15s", rev)
				}
			}
			rcancel()
			rr.Stop()
			if applied.Load() != rev {
				t.Fatalf("edge at revision %d, store at %d", applied.Load(), rev)
			}
			rr.mu.Lock()
			defer rr.mu.Unlock()
			if err := sameMaps(fake, ref); err != nil {
				t.Fatal(err)
			}
			if len(r.errs) != 0 {
				t.Fatalf("edge errors: %v", r.errs)
			}
			cancel()
			<-done
		})
	}
}

// commitObjs writes objects in one commit with their scopes' copies (as
// the controller does), retrying while the cluster elects a leader.
func commitObjs(ctx context.Context, s *store.Store, objs ...model.Object) (int64, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		rev, err := placementtest.Put(cctx, s, objs...)
		cancel()
		if err == nil {
			return rev, nil
		}
		if time.Now().After(deadline) {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sameMaps compares what two fakes hold: routes (but their counter
// slots), VIPs, listeners and the tables' contents.
func sameMaps(got, want *dataplane.FakeLB) error {
	gr, wr := got.Routes(), want.Routes()
	if len(gr) != len(wr) {
		return fmt.Errorf("%d routes, want %d", len(gr), len(wr))
	}
	for k, w := range wr {
		g, ok := gr[k]
		if !ok || g.Host != w.Host || g.VSID != w.VSID {
			return fmt.Errorf("route %v: %+v, want %+v", k, g, w)
		}
	}
	if fmt.Sprint(got.VIPSet) != fmt.Sprint(want.VIPSet) {
		return fmt.Errorf("VIPs %v, want %v", got.VIPSet, want.VIPSet)
	}
	if len(got.ListenerM) != len(want.ListenerM) {
		return fmt.Errorf("listeners %v, want %v", got.ListenerM, want.ListenerM)
	}
	for l, wv := range want.ListenerM {
		gv, ok := got.ListenerM[l]
		if !ok {
			return fmt.Errorf("listener %+v missing", l)
		}
		if fmt.Sprint(tableHosts(got, gv.Table)) != fmt.Sprint(tableHosts(want, wv.Table)) {
			return fmt.Errorf("listener %+v: table differs", l)
		}
	}
	return nil
}

// tableHosts is a table's entries as backend addresses (slot numbers may
// differ between the two fakes).
func tableHosts(f *dataplane.FakeLB, slot uint32) []string {
	var out []string
	for _, b := range f.Tables[slot] {
		be := f.BackendM[b]
		out = append(out, fmt.Sprintf("%v/%v/%d/%d", be.Addr, be.Guest, be.VSID, be.Port))
	}
	return out
}

func webService(objs []model.Object) *model.Service {
	for _, o := range objs {
		if s, ok := o.(*model.Service); ok && s.Name == "web" {
			return s
		}
	}
	panic("no service web in the region")
}

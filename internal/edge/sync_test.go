package edge

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestSyncMembers: the peers connection sync streams to are the other
// members of the edge's set, known only once the store was read, and they
// follow the set's changes.
func TestSyncMembers(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	if _, _, ok := r.syncMembers(); ok {
		t.Fatal("members known before the store was read")
	}
	load(t, r, 1, region()...)
	me, others, ok := r.syncMembers()
	if !ok || me != a("198.18.0.1") || len(others) != 0 {
		t.Fatalf("alone: %v %v %v", me, others, ok)
	}
	set := &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}, {Name: "edge-a2", Underlay: a("198.18.0.2")}}}
	watched(t, r, 2, set)
	_, others, ok = r.syncMembers()
	if !ok || len(others) != 1 || others[0].Name != "edge-a2" || others[0].Underlay != a("198.18.0.2") {
		t.Fatalf("with a second member: %v %v", others, ok)
	}
}

// TestRunSyncTwoEdges: two edges' connection sync as the daemon wires it
// (real data planes, the secret from a real store, underlay addresses on
// loopback): both become ready, connect to each other, and report it in
// their status.
func TestRunSyncTwoEdges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the edge program")
	}
	hz, err := measureHZ() // the sync's clock is the kernel's jiffies
	if err != nil {
		t.Fatal(err)
	}
	st := embeddedtest.Store(t)
	// The underlay addresses are loopback ones here, in 127.100.0.0/24:
	// other tests' connections on 127.0.0.1 take ephemeral ports there, and
	// one of them once took the port this test had picked (CI, stop 31).
	loop := func(u netip.Addr) netip.Addr { b := u.As4(); return netip.AddrFrom4([4]byte{127, 100, 0, b[3]}) }
	ln, err := net.Listen("tcp", "127.100.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	set := &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}, {Name: "edge-a2", Underlay: a("198.18.0.2")}}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	syncers := make([]atomic.Pointer[connsync.Syncer], 2)
	for i, name := range []string{"edge-a1", "edge-a2"} {
		dp, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: 1 << 16, EIPMax: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dp.Close() })
		cfg := Config{Name: name, Log: quiet, LB: dataplane.LBConfig{HZ: hz, SYN: 30 * time.Second, Established: time.Hour},
			Sync: SyncConfig{Port: port, Secrets: st, JoinTimeout: 500 * time.Millisecond, underlayAddr: loop}}
		r := NewReconciler(cfg, dataplane.NewFakeEdge())
		defer r.Stop()
		objs := append(region()[:4], set)
		load(t, r, 1, objs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runSync(ctx, cfg, r, dp, func(s *connsync.Syncer) { syncers[i].Store(s) }); err != nil {
				t.Error(err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s1, s2 := syncers[0].Load(), syncers[1].Load()
		if s1 != nil && s2 != nil && s1.Ready() && s2.Ready() {
			p1, p2 := s1.Status().Peers, s2.Status().Peers
			if len(p1) == 1 && len(p2) == 1 && p1[0].Connected && p2[0].Connected {
				var ns model.NodeStatus
				syncStatus(s2, &ns)
				if ns.Sync == nil || !ns.Sync.Ready || len(ns.Sync.Peers) != 1 || ns.Sync.Peers[0].Name != "edge-a1" || ns.Sync.Peers[0].Addr != netip.AddrPortFrom(a("127.100.0.1"), port).String() {
					t.Fatalf("status %+v", ns.Sync)
				}
				if _, ok := ns.Counters["sync_sessions"]; !ok {
					t.Fatalf("no sync counters in %v", ns.Counters)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			for i := range syncers {
				if s := syncers[i].Load(); s != nil {
					t.Logf("edge %d: %+v", i, s.Status())
				} else {
					t.Logf("edge %d: not started", i)
				}
			}
			t.Fatalf("not both ready and connected in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package edge

import (
	"context"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/storetest"
)

// TestSyncStoreFrozen (issue 8: "the sync stream and the store fail:
// nothing is corrupted or dropped, and lag recovers"). Two members follow
// a real etcd (Debian's, a separate process); connections are made on A
// through its program at a steady rate. The store is frozen (SIGSTOP):
// the stream goes on without it (the set and the secret were read
// before). B is replaced by a new machine while the store is still
// frozen: it cannot read its set or its backends, so it must stay not
// ready (the announcer's "sync" condition) rather than announce with
// nothing. The store returns (SIGCONT): B loads, pulls its full copy,
// becomes ready; once A's events since have flowed, every entry A holds
// is on B for the same backend, B holds nothing else, what is missing is
// counted as dropped, and new entries reach B within a bound.
func TestSyncStoreFrozen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the edge program")
	}
	if testing.Short() {
		t.Skip("skipped in -short: runs etcd")
	}
	url, etcd := storetest.StartEtcdProcess(t, "http")
	st, err := store.Connect(store.Options{Endpoints: []string{url}, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	if _, err := commitObjs(ctx, st, syncWorld()...); err != nil {
		t.Fatal(err)
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	hz, err := measureHZ()
	if err != nil {
		t.Fatal(err)
	}
	cfgOf := syncConfigs(t, st, hz)
	ea := startSyncEdge(t, st, cfgOf("edge-a1"))
	eb := startSyncEdge(t, st, cfgOf("edge-a2"))
	waitLong(t, "both members ready", func() bool { return ea.ready() && eb.ready() })
	frozen := false
	thaw := func() {
		if frozen {
			etcd.Signal(syscall.SIGCONT)
			frozen = false
		}
	}
	t.Cleanup(thaw)

	// The load: a connection every 2 ms to either service, SYN and ACK.
	var made atomic.Int32
	var stop atomic.Bool
	genDone := make(chan struct{})
	keyOf := func(i int) (dataplane.ConnKey, []byte, []byte) {
		cl, p := netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i/20000)}), uint16(20000+i%20000)
		vip, vport := syncEncapVIP, uint16(80)
		if i%2 == 1 {
			vip, vport = syncNATVIP, 443
		}
		return dataplane.MakeConnKey(cl, vip, p, vport, dataplane.ProtoTCP), frameTo(t, cl, vip, p, vport, true), frameTo(t, cl, vip, p, vport, false)
	}
	var genErr atomic.Pointer[string]
	go func() {
		defer close(genDone)
		next := time.Now()
		for i := 0; !stop.Load(); i++ {
			_, syn, ack := keyOf(i)
			for _, f := range [][]byte{syn, ack} {
				if _, err := env.Run(ea.dp.Program(), dptest.ExtDev, f); err != nil {
					msg := err.Error()
					genErr.Store(&msg)
					return
				}
			}
			made.Add(1)
			next = next.Add(2 * time.Millisecond)
			time.Sleep(time.Until(next))
		}
	}()
	onB := func(i int) bool {
		k, _, _ := keyOf(i)
		_, err := eb.dp.LookupConn(k)
		return err == nil
	}
	time.Sleep(500 * time.Millisecond)

	// The store freezes; the stream goes on.
	if err := etcd.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen = true
	time.Sleep(time.Second)
	last := int(made.Load()) - 1
	waitFor(t, "a connection made with the store frozen on b", func() bool { return onB(last) })

	// B is replaced while the store is frozen: it stays not ready.
	eb.stop()
	eb = startSyncEdge(t, st, cfgOf("edge-a2"))
	time.Sleep(2 * time.Second)
	if eb.ready() {
		t.Fatalf("b ready with the store frozen: %s", eb.syncer.Load().Reason())
	}
	thaw()
	thawed := time.Now()
	waitLong(t, "b ready after the store returned", eb.ready)
	t.Logf("b ready %v after the store returned: %s", time.Since(thawed), eb.syncer.Load().Reason())
	time.Sleep(time.Second)
	stop.Store(true)
	<-genDone
	if e := genErr.Load(); e != nil {
		t.Fatal(*e)
	}
	n := int(made.Load())

	// Everything A holds is on B, for the same backend; nothing else is.
	ownersOf := func(e *dataplane.Edge) map[uint32]dataplane.LBBackend {
		bs, err := e.Backends()
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	ownerOn := func(bs map[uint32]dataplane.LBBackend, c dataplane.ConnEntry) uint64 {
		if b, ok := bs[uint32(c.Backend)]; ok && b.Gen == c.Gen {
			return b.Owner
		}
		return 0
	}
	aBackends := ownersOf(ea.dp)
	onA := map[dataplane.ConnKey]uint64{}
	if err := ea.dp.DumpConns(4096, func(es []dataplane.ConnEntry) error {
		for _, e := range es {
			onA[e.Key] = ownerOn(aBackends, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(onA) != n {
		t.Fatalf("a holds %d entries, %d connections were made", len(onA), n)
	}
	var missing, garbage int
	check := func() bool {
		bBackends := ownersOf(eb.dp)
		seen := 0
		garbage = 0
		if err := eb.dp.DumpConns(4096, func(es []dataplane.ConnEntry) error {
			for _, e := range es {
				o := ownerOn(bBackends, e)
				if w, ok := onA[e.Key]; !ok || o == 0 || o != w {
					garbage++
				} else {
					seen++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		missing = len(onA) - seen
		return missing == 0
	}
	for deadline := time.Now().Add(10 * time.Second); !check() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	as, bs := ea.syncer.Load().Status(), eb.syncer.Load().Status()
	t.Logf("%d connections; a: %+v lag %+v; b: %+v", n, as.Metrics, as.Lag, bs.Metrics)
	if garbage != 0 {
		t.Fatalf("b holds %d entries that are not a's or name another backend", garbage)
	}
	lost, _ := ea.dp.ConnEventsLost()
	if drops := as.Metrics.QueueDrops + as.Metrics.Unmapped + lost + bs.Metrics.Unmapped + bs.Metrics.ApplyErrors; uint64(missing) > drops {
		t.Fatalf("%d of %d entries never reached b; the drop counters account for %d: silent loss", missing, n, drops)
	} else if missing != 0 {
		t.Fatalf("%d of %d entries missing on b (counted as dropped: %d; the queue should have held them)", missing, n, drops)
	}

	// New entries after the faults reach B within a bound.
	for i := n; i < n+100; i++ {
		_, syn, _ := keyOf(i)
		if _, err := env.Run(ea.dp.Program(), dptest.ExtDev, syn); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for !onB(i) {
			if time.Since(t0) > time.Second {
				t.Fatalf("connection %d after the faults not on b within 1 s", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

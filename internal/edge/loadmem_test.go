package edge

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/storetest"
)

// loadShare is a set's share of n bound EIPs as the controller writes it:
// set "pop" (198.18.0.0/15, edge "e1"), hosts of 400 guests each
// (underlays in 203.0.113.0/24, so at most 250 hosts: n <= 100,000), EIP
// i bound to guest i%400 of host i/400.
func loadShare(n int) []model.Object {
	const perHost = 400
	objs := []model.Object{&model.AZ{Name: "az1"}, &model.EdgeSet{Name: "pop",
		Prefixes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		Edges:    []model.EdgeNode{{Name: "e1", Underlay: netip.MustParseAddr("192.0.2.1")}}}}
	guest := func(g int) netip.Addr {
		if g < 250 {
			return netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + g)})
		}
		return netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + g - 250)})
	}
	for h := 0; h*perHost < n; h++ {
		host := &model.Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + h)})}
		for g := range perHost {
			host.Guests = append(host.Guests, model.Guest{Name: fmt.Sprintf("g%d", g), Address: guest(g), VSID: uint32(model.VSIDMin + g)})
		}
		objs = append(objs, host)
	}
	base := netip.MustParseAddr("198.18.0.0").As4()
	for i := range n {
		b := base
		b[1] += byte(i >> 16)
		b[2], b[3] = byte(i>>8), byte(i)
		objs = append(objs, &model.EIP{Address: netip.AddrFrom4(b), Binding: &model.Binding{Host: fmt.Sprintf("h%d", i/perHost), Guest: fmt.Sprintf("g%d", i%perHost)}})
	}
	return objs
}

// peakSampler samples the Go runtime's memory held from the OS (what it
// mapped less what it released: the process's RSS but for its binary's
// pages and cgo) every millisecond, and keeps the largest.
type peakSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak atomic.Uint64
}

func heldBytes(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

func newHeldSamples() []metrics.Sample {
	return []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
}

func startPeakSampler() *peakSampler {
	p := &peakSampler{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		s := newHeldSamples()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := heldBytes(s); v > p.peak.Load() {
				p.peak.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakSampler) end() uint64 {
	close(p.stop)
	p.done.Wait()
	return p.peak.Load()
}

// BenchmarkShareLoad100k is an edge's full load of a 100k-EIP set's share
// (edge.FollowShare into a Reconciler on the fakes, with the edge role's
// store options: LoadGCPercent, FreeAfterLoad) from a real etcd process
// (its allocations are not the benchmark's), from the follow's start to
// its first applied revision. Besides time and allocations it reports
// the Go runtime's memory held from the OS: peak-MB, sampled every
// millisecond during the load (the fake route map, ~8 MB, included),
// and rest-MB after it and a forced GC.
func BenchmarkShareLoad100k(b *testing.B) {
	benchShareLoad(b, 100_000)
}

func benchShareLoad(b *testing.B, n int) {
	if os.Getenv("GOGC") != "" {
		b.Skip("GOGC is set: the load's GC percent (store.Options.LoadGCPercent) would not apply")
	}
	c := storetest.StartCluster(b, 1)
	ctx := context.Background()
	w, err := store.Connect(store.Options{Endpoints: c.Endpoints(), TxnOps: 1024, Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	for deadline := time.Now().Add(30 * time.Second); w.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("etcd had no leader in 30 s")
		}
	}
	if _, err := placementtest.Put(ctx, w, loadShare(n)...); err != nil {
		b.Fatal(err)
	}
	st, err := store.Connect(store.Options{Endpoints: c.Endpoints(), Log: quiet, FreeAfterLoad: true, LoadGCPercent: store.NodeLoadGCPercent})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var peak, rest, base float64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		debug.FreeOSMemory()
		before := heldBytes(newHeldSamples())
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: "e1", Log: quiet}, fake)
		loaded := make(chan struct{})
		var once sync.Once
		r.OnApplied = func(int64) { once.Do(func() { close(loaded) }) }
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		ps := startPeakSampler()
		b.StartTimer()
		go func() { defer close(done); FollowShare(fctx, st, "e1", r, quiet) }()
		select {
		case <-loaded:
		case <-time.After(60 * time.Second):
			b.Fatal("no load in 60 s")
		}
		b.StopTimer()
		p := ps.end()
		cancel()
		<-done
		r.Stop()
		if got := fake.RouteCount(); got != n {
			b.Fatalf("the edge holds %d routes after its load, want %d", got, n)
		}
		runtime.GC()
		debug.FreeOSMemory()
		peak += float64(p) / (1 << 20)
		rest += float64(heldBytes(newHeldSamples())) / (1 << 20)
		base += float64(before) / (1 << 20)
		runtime.KeepAlive(r)
		runtime.KeepAlive(fake)
		b.StartTimer()
	}
	b.ReportMetric(peak/float64(b.N), "peak-MB")
	b.ReportMetric(rest/float64(b.N), "rest-MB")
	b.ReportMetric(base/float64(b.N), "before-MB")
}

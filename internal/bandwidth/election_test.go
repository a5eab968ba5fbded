package bandwidth

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestRegionManagersFailover runs two region managers against a real
// embedded etcd: one acts, the other stands by; when the active one is
// stopped (its context cancelled, as SIGTERM does) the standby takes over
// within the lease TTL, and its generations outrank the deposed one's, so
// a late write of the deposed manager is refused.
func TestRegionManagersFailover(t *testing.T) {
	st := embeddedtest.Store(t)
	region := bwstore.NewMem(nil)
	quiet := slog.New(slog.DiscardHandler)
	cfg := Config{Interval: 100 * time.Millisecond, Grace: 2 * time.Second, Log: quiet}
	pk := state([]netip.Addr{eip1, eip2}, &model.BandwidthPackage{Name: "p", Capacity: 80 * mbit,
		EIPs: []model.PackageEIP{{Address: eip1}, {Address: eip2}}})
	newMgr := func() (*RegionManager, *Metrics) {
		m, err := NewRegionManager(region, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.cfg.Metrics = NewMetrics("region", "")
		m.SetState(pk)
		return m, m.cfg.Metrics
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The zones report all along.
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			region.WriteReports(ctx, RegionTier, "az1", time.Second, []bwstore.Rate{egress(eip1, 5_000_000), egress(eip2, 1_000_000)})
			<-tk.C
		}
	}()
	const ttl = time.Second
	run := func(name string, m *RegionManager, met *Metrics) (context.CancelFunc, chan error) {
		c, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(c, st, m, RunOptions{Key: ScopeKey("region", ""), Holder: name,
				Claim: store.ClaimOptions{TTL: ttl, Margin: 300 * time.Millisecond}, Interval: cfg.Interval, Log: quiet, Metrics: met})
		}()
		return stop, done
	}
	waitFor := func(what string, within time.Duration, f func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !f() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	gen := func() uint64 {
		g, _, err := region.LimitsGeneration(ctx, RegionTier, "az1")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	a, metA := newMgr()
	stopA, doneA := run("a", a, metA)
	waitFor("a active", 5*time.Second, metA.IsActive)
	b, metB := newMgr()
	_, doneB := run("b", b, metB)
	waitFor("a writes limits", 5*time.Second, func() bool { return gen() > 0 })
	time.Sleep(3 * cfg.Interval)
	if metB.IsActive() {
		t.Fatal("b acts while a holds the scope")
	}
	if h, _ := st.Holder(ctx, ScopeKey("region", "")); h != "a" {
		t.Fatalf("holder %q, want a", h)
	}

	// Stop a: b takes over within the lease TTL.
	stopA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's Run: %v", err)
	}
	lastA := a.gens.Next() - 1 // the last generation a handed out
	took := waitFor("b active", ttl, metB.IsActive)
	t.Logf("b active %v after a stopped", took)
	if metA.IsActive() {
		t.Error("a still counts as active")
	}
	// b's writes outrank a's: a write a had in flight is refused.
	waitFor("b writes limits", 2*time.Second, func() bool { return gen() > lastA })
	err := region.WriteLimits(ctx, RegionTier, "az1", time.Second, bwstore.Limits{Generation: lastA + 1,
		Limits: []bwstore.Limit{eLimit(eip1, 1)}})
	if !errors.Is(err, bwstore.ErrStaleGeneration) {
		t.Errorf("late write of the deposed manager: %v, want ErrStaleGeneration", err)
	}
	if l, ok := limitOf(t, region, RegionTier, "az1", eip1, bwstore.Egress); !ok || l.RateBytes < 1_000_000 {
		t.Errorf("eip1's limit %v after the takeover: want b's allocation", l)
	}

	// The key deleted behind b's back (a lost lease): b stops acting at
	// once, and b or a new standby c takes over; never two at a time.
	c, metC := newMgr()
	_, doneC := run("c", c, metC)
	time.Sleep(3 * cfg.Interval)
	if metC.IsActive() {
		t.Fatal("c acts while b holds the scope")
	}
	if _, err := st.Client.Delete(ctx, ScopeKey("region", "")); err != nil {
		t.Fatal(err)
	}
	// The gauge follows the claim after a goroutine wake-up (every write
	// checks the claim itself), so an overlap of a few milliseconds under
	// load is the gauge's, not the writes'.
	lost := false
	var both time.Duration
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		ab, ac := metB.IsActive(), metC.IsActive()
		if ab && ac {
			both += 2 * time.Millisecond
		}
		lost = lost || !ab
		time.Sleep(2 * time.Millisecond)
	}
	if both > 100*time.Millisecond {
		t.Errorf("b and c both counted as active for %v", both)
	}
	if !lost {
		t.Error("b never stopped acting after its key was deleted")
	}
	if !metB.IsActive() && !metC.IsActive() {
		t.Error("nobody acts after the lost lease")
	}
	cancel()
	for _, d := range []chan error{doneB, doneC} {
		if err := <-d; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	}
}

package bwstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// manualClock is Mem's clock in the suite; for Redis the suite sleeps.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// harness is one implementation under the suite: advance moves time by d
// (Mem: the manual clock; Redis: real sleep, so keep d small).
type harness struct {
	s       Store
	advance func(time.Duration)
	// now is the harness's clock: ages must lie between the time advanced
	// and the time that really passed on it (plus 2 ms of rounding).
	now func() time.Time
}

// checkAge checks an age read after advancing by adv since start.
func (h harness) checkAge(t *testing.T, what string, age, adv time.Duration, start time.Time) {
	t.Helper()
	if max := h.now().Sub(start) + 2*time.Millisecond; age < adv-time.Millisecond || age > max {
		t.Errorf("%s: age %v, want %v..%v", what, age, adv, max)
	}
}

func memHarness(t *testing.T) harness {
	c := &manualClock{t: time.Unix(1_800_000_000, 0)}
	return harness{s: NewMem(c), advance: c.Add, now: c.Now}
}

// needServer fails a root test when redis-server is missing (as the etcd
// tests do) and skips, saying why, only when not root. Tests do not
// install it: on Debian the package starts a system redis-server on
// 127.0.0.1:6379 without a password, which scripts/setup.sh stops.
func needServer(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("no redis-server binary: scripts/setup.sh installs it (apt-get install redis-server)")
		}
		t.Skip("no redis-server binary (apt-get install redis-server) and not root: skipping the Redis store tests")
	}
}

// startRedis starts a redis-server of the test's own in a fresh 0700
// directory (unique name) on a unix socket, no TCP, and stops it by PID.
func startRedis(t testing.TB) *Server {
	t.Helper()
	needServer(t)
	dir, err := os.MkdirTemp("", "azgbw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := StartServer(context.Background(), ServerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

func redisHarness(t *testing.T) harness {
	srv := startRedis(t)
	r, err := NewRedis(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return harness{s: r, advance: time.Sleep, now: time.Now}
}

func TestConformanceMem(t *testing.T)   { runSuite(t, memHarness) }
func TestConformanceRedis(t *testing.T) { runSuite(t, redisHarness) }

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func runSuite(t *testing.T, mk func(*testing.T) harness) {
	ctx := context.Background()
	t.Run("ReportsRoundTripAndAge", func(t *testing.T) {
		h := mk(t)
		rates := []Rate{
			{EIP: ip("198.51.100.2"), Dir: Egress, BytesPerSec: 1_250_000, PacketsPerSec: 1000},
			{EIP: ip("198.51.100.1"), Dir: Egress, BytesPerSec: 0},
			{EIP: ip("198.51.100.1"), Dir: Ingress, BytesPerSec: 7, PacketsPerSec: 1, DropBytesPerSec: 3},
			{EIP: ip("2001:db8::5"), Dir: Egress, BytesPerSec: 1 << 40},
		}
		start := h.now()
		if err := h.s.WriteReports(ctx, "az1", "h1", 2*time.Second, rates); err != nil {
			t.Fatal(err)
		}
		h.advance(300 * time.Millisecond)
		snap, err := h.s.ReadReports(ctx, "az1")
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Reports) != 4 {
			t.Fatalf("got %d reports, want 4: %+v", len(snap.Reports), snap.Reports)
		}
		want := []string{"198.51.100.1/e 0", "198.51.100.1/i 7", "198.51.100.2/e 1250000", "2001:db8::5/e 1099511627776"}
		for i, r := range snap.Reports {
			if got := fmt.Sprintf("%s/%s %d", r.EIP, r.Dir, r.BytesPerSec); got != want[i] || r.Reporter != "h1" {
				t.Errorf("report %d: %s from %s, want %s from h1", i, got, r.Reporter, want[i])
			}
			h.checkAge(t, fmt.Sprintf("report %d", i), r.Age, 300*time.Millisecond, start)
		}
		if r := snap.Reports[1]; r.PacketsPerSec != 1 || r.DropBytesPerSec != 3 {
			t.Errorf("ingress report lost packets/drops: %+v", r)
		}
		// An explicit zero is present; an EIP nobody reported is absent.
		by := snap.ByEIP()
		if z, ok := by[RateKey{ip("198.51.100.1"), Egress}]; !ok || z[0].BytesPerSec != 0 {
			t.Errorf("explicit zero report missing: %v", z)
		}
		if _, ok := by[RateKey{ip("198.51.100.9"), Egress}]; ok {
			t.Error("an EIP nobody reported is present")
		}
		// Another AZ sees nothing.
		other, err := h.s.ReadReports(ctx, "az2")
		if err != nil || len(other.Reports) != 0 {
			t.Errorf("az2: %v %v, want nothing", other.Reports, err)
		}
	})
	t.Run("ReplaceAndSeveralReporters", func(t *testing.T) {
		h := mk(t)
		e := ip("198.51.100.10")
		must(t, h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: e, Dir: Egress, BytesPerSec: 1}, {EIP: ip("198.51.100.11"), Dir: Egress}}))
		must(t, h.s.WriteReports(ctx, "az1", "edge-a1", time.Second, []Rate{{EIP: e, Dir: Ingress, BytesPerSec: 5}}))
		must(t, h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: e, Dir: Egress, BytesPerSec: 2}}))
		snap, err := h.s.ReadReports(ctx, "az1")
		must(t, err)
		got := []string{}
		for _, r := range snap.Reports {
			got = append(got, fmt.Sprintf("%s %s/%s %d", r.Reporter, r.EIP, r.Dir, r.BytesPerSec))
		}
		want := "edge-a1 198.51.100.10/i 5,h1 198.51.100.10/e 2"
		if strings.Join(got, ",") != want {
			t.Errorf("got %q, want %q (a new report replaces the old one whole)", strings.Join(got, ","), want)
		}
		// An empty report keeps the reporter alive with nothing in it.
		must(t, h.s.WriteReports(ctx, "az1", "h1", time.Second, nil))
		snap, err = h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 1 || snap.Reports[0].Reporter != "edge-a1" {
			t.Errorf("after an empty report of h1: %+v", snap.Reports)
		}
	})
	t.Run("ExpiryIsAbsenceNotZero", func(t *testing.T) {
		h := mk(t)
		must(t, h.s.WriteReports(ctx, "az1", "h1", 200*time.Millisecond, []Rate{{EIP: ip("198.51.100.1"), Dir: Egress, BytesPerSec: 9}}))
		must(t, h.s.WriteReports(ctx, "az1", "h2", 5*time.Second, []Rate{{EIP: ip("198.51.100.2"), Dir: Egress, BytesPerSec: 8}}))
		h.advance(350 * time.Millisecond)
		snap, err := h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 1 || snap.Reports[0].Reporter != "h2" {
			t.Fatalf("after h1's TTL: %+v, want only h2's report", snap.Reports)
		}
		// h1 comes back: visible again (the reader's pruning did not hide it).
		must(t, h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: ip("198.51.100.1"), Dir: Egress, BytesPerSec: 10}}))
		snap, err = h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 2 {
			t.Errorf("h1 back: %+v", snap.Reports)
		}
	})
	t.Run("Validation", func(t *testing.T) {
		h := mk(t)
		e := ip("198.51.100.1")
		bad := []struct {
			name string
			err  error
		}{
			{"az", h.s.WriteReports(ctx, "az 1", "h1", time.Second, nil)},
			{"reporter colon", h.s.WriteReports(ctx, "az1", "h1:x", time.Second, nil)},
			{"reporter empty", h.s.WriteReports(ctx, "az1", "", time.Second, nil)},
			{"ttl zero", h.s.WriteReports(ctx, "az1", "h1", 0, nil)},
			{"ttl huge", h.s.WriteReports(ctx, "az1", "h1", 2*MaxTTL, nil)},
			{"no addr", h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{Dir: Egress}})},
			{"zone", h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: ip("fe80::1%eth0"), Dir: Egress}})},
			{"dir", h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: e, Dir: 7}})},
			{"dup", h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: e, Dir: Egress}, {EIP: e, Dir: Egress}})},
			{"dup mapped", h.s.WriteReports(ctx, "az1", "h1", time.Second, []Rate{{EIP: e, Dir: Egress}, {EIP: netip.AddrFrom16(e.As16()), Dir: Egress}})},
			{"gen 0", h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{})},
			{"gen big", h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: MaxGeneration + 1})},
			{"limit rate", h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: 1, Limits: []Limit{{EIP: e, Dir: Egress, RateBytes: MaxLimitRate + 1}}})},
			{"limit burst", h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: 1, Limits: []Limit{{EIP: e, Dir: Egress, RateBytes: 1, BurstBytes: MaxLimitBurst + 1}}})},
			{"too many", h.s.WriteReports(ctx, "az1", "h1", time.Second, make([]Rate, MaxRatesPerReport+1))},
		}
		for _, b := range bad {
			if b.err == nil {
				t.Errorf("%s: accepted", b.name)
			} else if !errors.Is(b.err, ErrInvalid) && !errors.Is(b.err, ErrTooMany) {
				t.Errorf("%s: %v, want ErrInvalid or ErrTooMany", b.name, b.err)
			}
		}
		if _, err := h.s.ReadReports(ctx, "../x"); !errors.Is(err, ErrInvalid) {
			t.Errorf("read az ../x: %v", err)
		}
		snap, err := h.s.ReadReports(ctx, "az1")
		if err != nil || len(snap.Reports) != 0 {
			t.Errorf("refused writes left %v (%v)", snap.Reports, err)
		}
	})
	t.Run("LimitsGenerations", func(t *testing.T) {
		h := mk(t)
		if _, ok, err := h.s.ReadLimits(ctx, "az1", "h1"); ok || err != nil {
			t.Fatalf("limits before any write: ok=%v err=%v", ok, err)
		}
		if _, ok, err := h.s.LimitsGeneration(ctx, "az1", "h1"); ok || err != nil {
			t.Fatalf("generation before any write: ok=%v err=%v", ok, err)
		}
		issued := time.UnixMilli(1_800_000_000_123)
		l5 := Limits{Generation: 5, Issued: issued, Limits: []Limit{
			{EIP: ip("198.51.100.2"), Dir: Egress, RateBytes: 12_500_000, BurstBytes: 1_250_000},
			{EIP: ip("198.51.100.1"), Dir: Ingress, RateBytes: 1, BurstBytes: 2},
		}}
		start := h.now()
		must(t, h.s.WriteLimits(ctx, "az1", "h1", 2*time.Second, l5))
		h.advance(100 * time.Millisecond)
		hl, ok, err := h.s.ReadLimits(ctx, "az1", "h1")
		must(t, err)
		if !ok || hl.Generation != 5 || !hl.Issued.Equal(issued) || len(hl.Limits.Limits) != 2 {
			t.Fatalf("read back %+v ok=%v", hl, ok)
		}
		if l := hl.Limits.Limits[0]; l.EIP != ip("198.51.100.1") || l.Dir != Ingress || l.RateBytes != 1 || l.BurstBytes != 2 {
			t.Errorf("first limit %+v (sorted by EIP)", l)
		}
		h.checkAge(t, "limits", hl.Age, 100*time.Millisecond, start)
		for _, g := range []uint64{5, 4} {
			err := h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: g})
			if !errors.Is(err, ErrStaleGeneration) {
				t.Errorf("generation %d after 5: %v, want ErrStaleGeneration", g, err)
			}
		}
		if g, ok, _ := h.s.LimitsGeneration(ctx, "az1", "h1"); !ok || g != 5 {
			t.Errorf("generation %d %v after stale writes, want 5", g, ok)
		}
		// Other hosts and AZs have their own generations.
		must(t, h.s.WriteLimits(ctx, "az1", "h2", time.Second, Limits{Generation: 1}))
		must(t, h.s.WriteLimits(ctx, "az2", "h1", time.Second, Limits{Generation: 1}))
		// A newer generation replaces the set whole (an empty set is a set).
		must(t, h.s.WriteLimits(ctx, "az1", "h1", 200*time.Millisecond, Limits{Generation: 6}))
		hl, ok, err = h.s.ReadLimits(ctx, "az1", "h1")
		must(t, err)
		if !ok || hl.Generation != 6 || len(hl.Limits.Limits) != 0 {
			t.Errorf("after gen 6: %+v ok=%v", hl, ok)
		}
		// Expired limits are absent, but the generation still fences.
		h.advance(350 * time.Millisecond)
		if _, ok, err := h.s.ReadLimits(ctx, "az1", "h1"); ok || err != nil {
			t.Errorf("expired limits: ok=%v err=%v", ok, err)
		}
		if _, ok, _ := h.s.LimitsGeneration(ctx, "az1", "h1"); ok {
			t.Error("expired limits still have a generation")
		}
		err = h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: 6})
		var stale *StaleGenerationError
		if !errors.Is(err, ErrStaleGeneration) || !errors.As(err, &stale) || stale.Stored != 6 || stale.Given != 6 || stale.Host != "h1" || stale.AZ != "az1" {
			t.Errorf("gen 6 again after expiry: %v (%+v), want ErrStaleGeneration saying the stored 6", err, stale)
		}
		must(t, h.s.WriteLimits(ctx, "az1", "h1", time.Second, Limits{Generation: 7}))
	})
	t.Run("WaitLimits", func(t *testing.T) {
		h := mk(t)
		must(t, h.s.WriteLimits(ctx, "az1", "h1", 5*time.Second, Limits{Generation: 3}))
		go func() {
			time.Sleep(30 * time.Millisecond)
			h.s.WriteLimits(ctx, "az1", "h1", 5*time.Second, Limits{Generation: 4, Limits: []Limit{{EIP: ip("198.51.100.1"), Dir: Egress, RateBytes: 1}}})
		}()
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		hl, err := WaitLimits(wctx, h.s, "az1", "h1", 3, 5*time.Millisecond)
		must(t, err)
		if hl.Generation != 4 || len(hl.Limits.Limits) != 1 {
			t.Errorf("waited for %+v", hl)
		}
		short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel2()
		if _, err := WaitLimits(short, h.s, "az1", "h1", 4, 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait with nothing new: %v", err)
		}
	})
	t.Run("Large", func(t *testing.T) {
		h := mk(t)
		rates := make([]Rate, 5000)
		for i := range rates {
			rates[i] = Rate{EIP: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Dir: Egress, BytesPerSec: uint64(i)}
		}
		must(t, h.s.WriteReports(ctx, "az1", "h1", time.Second, rates))
		lim := Limits{Generation: 1}
		for i := range rates {
			lim.Limits = append(lim.Limits, Limit{EIP: rates[i].EIP, Dir: Egress, RateBytes: uint64(i), BurstBytes: 1})
		}
		must(t, h.s.WriteLimits(ctx, "az1", "h1", time.Second, lim))
		snap, err := h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 5000 {
			t.Fatalf("%d reports back", len(snap.Reports))
		}
		for i, r := range snap.Reports {
			if r.BytesPerSec != uint64(i) {
				t.Fatalf("report %d: %d", i, r.BytesPerSec)
			}
		}
		hl, _, err := h.s.ReadLimits(ctx, "az1", "h1")
		must(t, err)
		if len(hl.Limits.Limits) != 5000 || hl.Limits.Limits[4999].RateBytes != 4999 {
			t.Fatalf("%d limits back", len(hl.Limits.Limits))
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		h := mk(t)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep := fmt.Sprintf("h%d", w)
				for i := 0; i < 20; i++ {
					rates := []Rate{{EIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(w)}), Dir: Egress, BytesPerSec: uint64(i)}}
					if err := h.s.WriteReports(ctx, "az1", rep, 10*time.Second, rates); err != nil {
						errs <- err
						return
					}
					if err := h.s.WriteLimits(ctx, "az1", rep, 10*time.Second, Limits{Generation: uint64(i + 1)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for i := 0; i < 10; i++ {
			if _, err := h.s.ReadReports(ctx, "az1"); err != nil {
				t.Error(err)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		snap, err := h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 8 {
			t.Fatalf("%d reports after concurrent writes, want 8", len(snap.Reports))
		}
		for _, r := range snap.Reports {
			if r.BytesPerSec != 19 {
				t.Errorf("%s: %d, want the last write (19)", r.Reporter, r.BytesPerSec)
			}
		}
	})
	t.Run("ReporterBound", func(t *testing.T) {
		h := mk(t)
		for i := 0; i < MaxReporters; i++ {
			must(t, h.s.WriteReports(ctx, "az1", fmt.Sprintf("r%d", i), time.Minute, nil))
		}
		err := h.s.WriteReports(ctx, "az1", "one-too-many", time.Minute, nil)
		if !errors.Is(err, ErrTooMany) {
			t.Fatalf("reporter %d: %v, want ErrTooMany", MaxReporters+1, err)
		}
		// A known reporter still writes; the refused one left nothing.
		must(t, h.s.WriteReports(ctx, "az1", "r7", time.Minute, []Rate{{EIP: ip("198.51.100.7"), Dir: Egress}}))
		snap, err := h.s.ReadReports(ctx, "az1")
		must(t, err)
		if len(snap.Reports) != 1 || snap.Reports[0].Reporter != "r7" {
			t.Errorf("after the bound: %+v", snap.Reports)
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		h := mk(t)
		c, cancel := context.WithCancel(ctx)
		cancel()
		if err := h.s.WriteReports(c, "az1", "h1", time.Second, nil); err == nil {
			t.Error("write with a cancelled context succeeded")
		}
		if _, err := h.s.ReadReports(c, "az1"); err == nil {
			t.Error("read with a cancelled context succeeded")
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

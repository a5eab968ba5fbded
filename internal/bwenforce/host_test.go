package bwenforce

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ad(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestRateOf(t *testing.T) {
	for _, c := range []struct {
		name      string
		prev, cur Reading
		dt        time.Duration
		bps, pps  uint64
		ok        bool
	}{
		{"steady", Reading{1000, 10, 3}, Reading{126_000, 110, 3}, time.Second, 125_000, 100, true},
		{"idle is zero, not missing", Reading{1000, 10, 3}, Reading{1000, 10, 3}, time.Second, 0, 0, true},
		{"half a second", Reading{0, 0, 1}, Reading{500, 5, 1}, 500 * time.Millisecond, 1000, 10, true},
		{"no time passed", Reading{0, 0, 1}, Reading{500, 5, 1}, 0, 0, 0, false},
		{"clock went back", Reading{0, 0, 1}, Reading{500, 5, 1}, -time.Second, 0, 0, false},
		{"another slot", Reading{0, 0, 1}, Reading{500, 5, 2}, time.Second, 0, 0, false},
		{"reset: the slot was zeroed", Reading{1 << 30, 1 << 20, 1}, Reading{100, 1, 1}, time.Second, 0, 0, false},
		{"packets reset alone", Reading{100, 1 << 20, 1}, Reading{200, 1, 1}, time.Second, 0, 0, false},
		{"64-bit wrap", Reading{math.MaxUint64 - 99, math.MaxUint64, 1}, Reading{900, 9, 1}, time.Second, 1000, 10, true},
		{"faster than any link", Reading{0, 0, 1}, Reading{1 << 50, 1, 1}, time.Second, 0, 0, false},
	} {
		bps, pps, ok := RateOf(c.prev, c.cur, c.dt)
		if bps != c.bps || pps != c.pps || ok != c.ok {
			t.Errorf("%s: %d B/s %d p/s %v, want %d %d %v", c.name, bps, pps, ok, c.bps, c.pps, c.ok)
		}
	}
}

func TestDropRate(t *testing.T) {
	for _, c := range []struct {
		prev, cur uint64
		dt        time.Duration
		want      uint64
	}{
		{0, 0, time.Second, 0},
		{1000, 3000, time.Second, 2000},
		{1000, 3000, 2 * time.Second, 1000},
		{5000, 300, time.Second, 300}, // set anew: counts from zero
		{0, 100, 0, 0},
	} {
		if got := DropRate(c.prev, c.cur, c.dt); got != c.want {
			t.Errorf("DropRate(%d, %d, %v) = %d, want %d", c.prev, c.cur, c.dt, got, c.want)
		}
	}
}

func TestInForce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		have bool
		ago  time.Duration
		want bool
	}{
		{false, 0, false},
		{true, 0, true},
		{true, 10 * time.Second, true},
		{true, 10*time.Second + 1, false},
	} {
		if got := InForce(c.have, t0.Add(-c.ago), t0, 10*time.Second); got != c.want {
			t.Errorf("have %v confirmed %v ago: %v, want %v", c.have, c.ago, got, c.want)
		}
	}
}

func TestFilterLimits(t *testing.T) {
	carried := map[netip.Addr]Carried{ad("198.51.100.1"): {}, ad("198.51.100.2"): {}}
	got, ignored := FilterLimits([]bwstore.Limit{
		{EIP: ad("198.51.100.1"), Dir: bwstore.Egress, RateBytes: 1000},
		{EIP: ad("198.51.100.2"), Dir: bwstore.Ingress, RateBytes: 1000}, // other direction
		{EIP: ad("198.51.100.9"), Dir: bwstore.Egress, RateBytes: 1000},  // not carried
		{EIP: ad("198.51.100.1"), Dir: bwstore.Egress, RateBytes: 5},     // repeated
	}, bwstore.Egress, carried)
	// .9 is kept (if the node starts carrying it, Targets uses it), but
	// counted: as things stand it is not applied.
	if ignored != 3 || len(got) != 2 || got[ad("198.51.100.1")].RateBytes != 1000 || got[ad("198.51.100.9")].RateBytes != 1000 {
		t.Fatalf("kept %v, ignored %d; want .1 and .9 at 1000 B/s and 3 ignored", got, ignored)
	}
}

func TestTargets(t *testing.T) {
	// 100 Mbit/s, burst 20 ms: 250,000 bytes at the capacity.
	c := Carried{Package: "p", Capacity: 100_000_000, Burst: 20 * time.Millisecond, Static: 40_000_000, Carriers: 1}
	a := ad("198.51.100.1")
	for _, tc := range []struct {
		name    string
		c       Carried
		lim     *bwstore.Limit
		want    Target
		clamped int
	}{
		{"managed", c, &bwstore.Limit{RateBytes: 1_000_000, BurstBytes: 20_000}, Target{8_000_000, 20_000, Managed}, 0},
		{"managed above the capacity", c, &bwstore.Limit{RateBytes: 1 << 60, BurstBytes: 20_000}, Target{100_000_000, 20_000, Managed}, 1},
		{"managed burst absurd", c, &bwstore.Limit{RateBytes: 1_000_000, BurstBytes: 1 << 40}, Target{8_000_000, 250_000, Managed}, 1},
		{"managed burst below the floor", c, &bwstore.Limit{RateBytes: 1_000_000, BurstBytes: 10}, Target{8_000_000, bandwidth.MinBurstBytes, Managed}, 0},
		{"managed zero: the least enforceable, not unlimited", c, &bwstore.Limit{}, Target{dataplane.MinBandwidthRate, bandwidth.MinBurstBytes, Managed}, 0},
		{"static", c, nil, Target{40_000_000, 100_000, Static}, 0},
		{"static over three edges", Carried{Capacity: 100_000_000, Burst: 20 * time.Millisecond, Static: 30_000_000, Carriers: 3}, nil,
			Target{10_000_000, 25_000, Static}, 0},
		{"static carriers 0 counts as 1", Carried{Capacity: 100_000_000, Burst: 20 * time.Millisecond, Static: 30_000_000}, nil,
			Target{30_000_000, 75_000, Static}, 0},
		{"static tiny", Carried{Capacity: 1000, Burst: 20 * time.Millisecond, Static: 1000, Carriers: 2}, nil,
			Target{dataplane.MinBandwidthRate, bandwidth.MinBurstBytes, Static}, 0},
	} {
		var lim map[netip.Addr]bwstore.Limit
		if tc.lim != nil {
			lim = map[netip.Addr]bwstore.Limit{a: *tc.lim}
		}
		got, clamped := Targets(map[netip.Addr]Carried{a: tc.c}, lim)
		if got[a] != tc.want || clamped != tc.clamped {
			t.Errorf("%s: %+v clamped %d, want %+v clamped %d", tc.name, got[a], clamped, tc.want, tc.clamped)
		}
	}
}

func TestNewView(t *testing.T) {
	w2 := uint32(3)
	pkgs := map[string]*model.BandwidthPackage{"shop": {Name: "shop", Capacity: 100_000_000, EIPs: []model.PackageEIP{
		{Address: ad("198.51.100.1")}, {Address: ad("198.51.100.2"), Weight: &w2}}}}
	pkgOf := func(a netip.Addr) (string, bool) {
		if a == ad("198.51.100.1") || a == ad("198.51.100.2") {
			return "shop", true
		}
		return "", false
	}
	v, err := NewView("az1", pkgs, pkgOf, []netip.Addr{ad("198.51.100.2"), ad("198.51.100.9")}, func(netip.Addr) int { return 2 })
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]Carried{ad("198.51.100.2"): {Package: "shop", Capacity: 100_000_000, Burst: model.DefaultBandwidthBurst,
		Static: 75_000_000, Carriers: 2}}
	if v.Zone != "az1" || len(v.EIPs) != 1 || v.EIPs[ad("198.51.100.2")] != want[ad("198.51.100.2")] {
		t.Fatalf("view %+v, want zone az1 and %+v", v, want)
	}
}

// ---- the Host against the in-process store and the fake data plane ----

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// counters is a node's counters as a test sets them.
type counters struct {
	clk *clock
	mu  sync.Mutex
	m   map[netip.Addr]Reading
	err error
}

func (c *counters) ReadCounters() (map[netip.Addr]Reading, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, time.Time{}, c.err
	}
	out := make(map[netip.Addr]Reading, len(c.m))
	for a, r := range c.m {
		out[a] = r
	}
	return out, c.clk.Now(), nil
}

func (c *counters) add(a netip.Addr, bytes, packets uint64) {
	c.mu.Lock()
	r := c.m[a]
	r.Bytes += bytes
	r.Packets += packets
	c.m[a] = r
	c.mu.Unlock()
}

// flaky fails every call while down is set.
type flaky struct {
	bwstore.Store
	down bool
}

var errDown = errors.New("store down")

func (f *flaky) WriteReports(ctx context.Context, az, r string, ttl time.Duration, rates []bwstore.Rate) error {
	if f.down {
		return errDown
	}
	return f.Store.WriteReports(ctx, az, r, ttl, rates)
}
func (f *flaky) ReadLimits(ctx context.Context, az, h string) (bwstore.HostLimits, bool, error) {
	if f.down {
		return bwstore.HostLimits{}, false, errDown
	}
	return f.Store.ReadLimits(ctx, az, h)
}
func (f *flaky) LimitsGeneration(ctx context.Context, az, h string) (uint64, bool, error) {
	if f.down {
		return 0, false, errDown
	}
	return f.Store.LimitsGeneration(ctx, az, h)
}

type bed struct {
	clk   *clock
	mem   *bwstore.Mem
	store *flaky
	cnt   *counters
	dp    *dataplane.FakeBandwidth
	view  View
	h     *Host
}

var (
	eipA = ad("198.51.100.1") // in package shop, weight 1
	eipB = ad("198.51.100.2") // in package shop, weight 3
	eipC = ad("198.51.100.3") // in no package
)

// newBed: agent h1 in az1 carrying A and B of a 100 Mbit/s package and C
// (no package).
func newBed(t *testing.T) *bed {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	mem := bwstore.NewMem(clk)
	b := &bed{clk: clk, mem: mem, store: &flaky{Store: mem}, dp: &dataplane.FakeBandwidth{},
		cnt: &counters{clk: clk, m: map[netip.Addr]Reading{eipA: {Slot: 1}, eipB: {Slot: 2}, eipC: {Slot: 3}}}}
	b.view = View{Zone: "az1", EIPs: map[netip.Addr]Carried{
		eipA: {Package: "shop", Capacity: 100_000_000, Burst: 20 * time.Millisecond, Static: 25_000_000, Carriers: 1},
		eipB: {Package: "shop", Capacity: 100_000_000, Burst: 20 * time.Millisecond, Static: 75_000_000, Carriers: 1},
	}}
	h, err := NewHost(HostConfig{Store: b.store, Reporter: "h1", Dir: bwstore.Egress, Counters: b.cnt, Limits: b.dp,
		View: func() View { return b.view }, Log: quiet, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	b.h = h
	return b
}

func (b *bed) step(t *testing.T) {
	t.Helper()
	b.clk.add(time.Second)
	b.h.Step(context.Background())
}

func (b *bed) limits() map[netip.Addr]dataplane.Bandwidth {
	got, _ := b.dp.EIPBandwidths()
	return got
}

func (b *bed) push(t *testing.T, gen uint64, ttl time.Duration, ls ...bwstore.Limit) {
	t.Helper()
	if err := b.mem.WriteLimits(context.Background(), "az1", "h1", ttl, bwstore.Limits{Generation: gen, Issued: b.clk.Now(), Limits: ls}); err != nil {
		t.Fatal(err)
	}
}

// TestHostReports: one report per interval with a row for every carried
// packaged EIP whose rate was measured, zeros included; an EIP in no
// package is not reported, one without counters is missing, not zero.
func TestHostReports(t *testing.T) {
	b := newBed(t)
	b.step(t)
	snap, err := b.mem.ReadReports(context.Background(), "az1")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Reports) != 0 {
		t.Fatalf("first pass (nothing measured yet) reported %v", snap.Reports)
	}
	b.cnt.add(eipA, 2_000_000, 2000)
	b.cnt.add(eipC, 5000, 5)
	b.dp.Drops = map[netip.Addr]dataplane.BandwidthDrops{eipA: {Packets: 10, Bytes: 15_000}}
	b.step(t)
	snap, _ = b.mem.ReadReports(context.Background(), "az1")
	want := []bwstore.Rate{
		{EIP: eipA, Dir: bwstore.Egress, BytesPerSec: 2_000_000, PacketsPerSec: 2000, DropBytesPerSec: 15_000},
		{EIP: eipB, Dir: bwstore.Egress}, // idle: a row of zeros
	}
	if len(snap.Reports) != len(want) {
		t.Fatalf("report %+v, want %+v", snap.Reports, want)
	}
	for i, r := range snap.Reports {
		if r.Reporter != "h1" || r.Rate != want[i] {
			t.Errorf("row %d: %+v, want %+v from h1", i, r, want[i])
		}
	}
	// B's counters vanish (its guest's interface went away): B is
	// missing from the next report, not reported at zero.
	b.cnt.mu.Lock()
	delete(b.cnt.m, eipB)
	b.cnt.mu.Unlock()
	b.step(t)
	snap, _ = b.mem.ReadReports(context.Background(), "az1")
	if len(snap.Reports) != 1 || snap.Reports[0].EIP != eipA || snap.Reports[0].BytesPerSec != 0 {
		t.Fatalf("report %+v, want A alone at 0", snap.Reports)
	}
	// A counter read that fails writes no report; the last one lives on
	// its TTL (3 intervals), then the node is missing altogether.
	b.cnt.err = errors.New("map gone")
	for range 3 {
		b.step(t)
	}
	snap, _ = b.mem.ReadReports(context.Background(), "az1")
	if len(snap.Reports) != 0 {
		t.Fatalf("reports after 3 intervals without a reading: %+v", snap.Reports)
	}
	if st := b.h.Status(); st.Counts.CounterErrors != 3 || st.Counts.Reports != 2 || len(st.Errors) != 1 {
		t.Fatalf("status %+v: want 3 counter errors, 2 reports and the error shown", st)
	}
}

// TestHostLimits: static split before any limits, the managed limits once
// pushed (invalid ones ignored, absurd ones clamped), the static split
// again when they expire, the managed ones again when a manager returns;
// EIPs in no package or no longer carried have no limit.
func TestHostLimits(t *testing.T) {
	b := newBed(t)
	// A stale limit of a previous run on C (in no package): removed.
	b.dp.SetEIPBandwidth(eipC, 8_000_000, 0)
	b.step(t)
	static := map[netip.Addr]dataplane.Bandwidth{eipA: {Rate: 25_000_000, Burst: 62_500}, eipB: {Rate: 75_000_000, Burst: 187_500}}
	if got := b.limits(); !equal(got, static) {
		t.Fatalf("before any limits: %v, want the static split %v", got, static)
	}

	b.push(t, 7, 10*time.Second,
		bwstore.Limit{EIP: eipA, Dir: bwstore.Egress, RateBytes: 5_000_000, BurstBytes: 100_000},
		bwstore.Limit{EIP: eipB, Dir: bwstore.Egress, RateBytes: 100_000_000, BurstBytes: 100_000}, // 800 Mbit/s > capacity
		bwstore.Limit{EIP: eipC, Dir: bwstore.Egress, RateBytes: 1000, BurstBytes: 15_000},         // no package
		bwstore.Limit{EIP: ad("203.0.113.9"), Dir: bwstore.Egress, RateBytes: 1000},                // not carried
		bwstore.Limit{EIP: eipA, Dir: bwstore.Ingress, RateBytes: 1000},                            // the edges'
	)
	b.step(t)
	managed := map[netip.Addr]dataplane.Bandwidth{eipA: {Rate: 40_000_000, Burst: 100_000}, eipB: {Rate: 100_000_000, Burst: 100_000}}
	if got := b.limits(); !equal(got, managed) {
		t.Fatalf("managed: %v, want %v", got, managed)
	}
	st := b.h.Status()
	if !st.Managed || st.Generation != 7 || st.Counts.Ignored != 3 || st.Counts.Clamped != 1 || st.EIPs[eipA].Mode != Managed {
		t.Fatalf("status %+v: want managed, generation 7, 3 ignored, 1 clamped", st)
	}
	// The node starts carrying 203.0.113.9 after the read (its view
	// lagged the manager's): the limit pushed for it applies at once.
	late := ad("203.0.113.9")
	b.view.EIPs[late] = b.view.EIPs[eipA]
	b.h.Enforce()
	if got := b.limits()[late]; got != (dataplane.Bandwidth{Rate: 8000, Burst: bandwidth.MinBurstBytes}) {
		t.Fatalf("late EIP: %v, want its pushed 1000 B/s", got)
	}
	delete(b.view.EIPs, late)

	// The manager stops pushing: the limits expire after their TTL (the
	// grace period, 10 s from the push, 1 s before the read above), and
	// the node falls back to the static split.
	for range 8 {
		b.step(t)
	}
	if got := b.limits(); !equal(got, managed) {
		t.Fatalf("within the grace period: %v, want the managed limits kept", got)
	}
	b.step(t)
	if got := b.limits(); !equal(got, static) {
		t.Fatalf("limits expired: %v, want the static split %v", got, static)
	}
	if st := b.h.Status(); st.Managed || st.Counts.StaticFallback != 1 || st.EIPs[eipB].Mode != Static {
		t.Fatalf("status %+v: want static, one fallback", st)
	}

	// A manager returns (a higher generation): its limits replace the
	// static split. An EIP it leaves out keeps its static share.
	b.push(t, 9, 10*time.Second, bwstore.Limit{EIP: eipA, Dir: bwstore.Egress, RateBytes: 1_000_000, BurstBytes: 20_000})
	b.step(t)
	want := map[netip.Addr]dataplane.Bandwidth{eipA: {Rate: 8_000_000, Burst: 20_000}, eipB: static[eipB]}
	if got := b.limits(); !equal(got, want) {
		t.Fatalf("manager back: %v, want %v", got, want)
	}

	// B leaves the node (its guest moved): its limit goes.
	delete(b.view.EIPs, eipB)
	b.h.Enforce()
	if got := b.limits(); len(got) != 1 || got[eipA] != want[eipA] {
		t.Fatalf("B no longer carried: %v, want A alone", got)
	}
}

// TestHostStoreLost: the store unreachable: the node keeps its last limits
// for the grace period, then the static split; reports and polls fail
// and are counted, never fatal; the store back, the limits come back.
func TestHostStoreLost(t *testing.T) {
	b := newBed(t)
	b.push(t, 1, time.Hour, bwstore.Limit{EIP: eipA, Dir: bwstore.Egress, RateBytes: 1_000_000, BurstBytes: 20_000},
		bwstore.Limit{EIP: eipB, Dir: bwstore.Egress, RateBytes: 2_000_000, BurstBytes: 20_000})
	b.step(t)
	managed := map[netip.Addr]dataplane.Bandwidth{eipA: {Rate: 8_000_000, Burst: 20_000}, eipB: {Rate: 16_000_000, Burst: 20_000}}
	if got := b.limits(); !equal(got, managed) {
		t.Fatalf("managed: %v, want %v", got, managed)
	}
	b.store.down = true
	for range 10 {
		b.step(t)
	}
	if got := b.limits(); !equal(got, managed) {
		t.Fatalf("store lost for the grace period: %v, want the managed limits kept", got)
	}
	b.step(t)
	if got := b.limits(); got[eipA].Rate != 25_000_000 || got[eipB].Rate != 75_000_000 {
		t.Fatalf("store lost beyond the grace period: %v, want the static split", got)
	}
	st := b.h.Status()
	if st.Counts.LimitErrors != 11 || st.Counts.ReportErrors != 11 || len(st.Errors) != 2 {
		t.Fatalf("status %+v: want 11 poll and 11 report errors, both shown", st)
	}
	b.store.down = false
	b.step(t)
	if got := b.limits(); !equal(got, managed) {
		t.Fatalf("store back: %v, want the managed limits again", got)
	}
	if st := b.h.Status(); len(st.Errors) != 0 {
		t.Fatalf("errors shown after recovery: %v", st.Errors)
	}
}

// TestHostApplyFaults: a data-plane write that fails is counted and
// retried on the next pass.
func TestHostApplyFaults(t *testing.T) {
	b := newBed(t)
	faults := dataplane.NewFaults()
	faults.FailNth("SetEIPBandwidth", 1)
	b.h.cfg.Limits = dataplane.FaultyBandwidth{BandwidthMaps: b.dp, F: faults}
	b.step(t)
	if got := b.limits(); len(got) != 1 {
		t.Fatalf("one write failed: %v, want one limit", got)
	}
	b.step(t)
	if got := b.limits(); len(got) != 2 {
		t.Fatalf("retried: %v, want both limits", got)
	}
	if st := b.h.Status(); st.Counts.ApplyErrors != 1 {
		t.Fatalf("apply errors %d, want 1", st.Counts.ApplyErrors)
	}
}

func equal(a, b map[netip.Addr]dataplane.Bandwidth) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHostQuietWithoutPackages: a node that carries no packaged EIP writes
// no report (it takes no room among the zone's reporters); one that stops
// carrying its last writes one empty report, which replaces its last one
// at once, then nothing.
func TestHostQuietWithoutPackages(t *testing.T) {
	b := newBed(t)
	carried := b.view.EIPs
	b.view.EIPs = map[netip.Addr]Carried{}
	for range 3 {
		b.step(t)
	}
	if st := b.h.Status(); st.Counts.Reports != 0 {
		t.Fatalf("%d reports written with nothing carried", st.Counts.Reports)
	}
	b.view.EIPs = carried
	b.step(t)
	snap, _ := b.mem.ReadReports(context.Background(), "az1")
	if len(snap.Reports) != 2 {
		t.Fatalf("reports %+v, want A and B", snap.Reports)
	}
	b.view.EIPs = map[netip.Addr]Carried{}
	b.step(t)
	snap, _ = b.mem.ReadReports(context.Background(), "az1")
	if len(snap.Reports) != 0 {
		t.Fatalf("reports %+v after the last EIP left, want none", snap.Reports)
	}
	b.step(t)
	if st := b.h.Status(); st.Counts.Reports != 2 {
		t.Fatalf("%d reports written, want 2 (one with rows, one empty)", st.Counts.Reports)
	}
}

// TestHostDropReadFails: a drop counter that cannot be read for one pass
// leaves the last reading as the base, so the next pass reports the drops
// of its interval, not every drop since the EIP took its slot.
func TestHostDropReadFails(t *testing.T) {
	b := newBed(t)
	b.view.EIPs = map[netip.Addr]Carried{eipA: b.view.EIPs[eipA]}
	faults := dataplane.NewFaults()
	b.h.cfg.Limits = dataplane.FaultyBandwidth{BandwidthMaps: b.dp, F: faults}
	dropRate := func() uint64 {
		t.Helper()
		snap, err := b.mem.ReadReports(context.Background(), "az1")
		if err != nil || len(snap.Reports) != 1 {
			t.Fatalf("reports %+v (%v), want A's row", snap.Reports, err)
		}
		return snap.Reports[0].DropBytesPerSec
	}
	b.step(t) // the static limit is set
	b.dp.Drops = map[netip.Addr]dataplane.BandwidthDrops{eipA: {Packets: 1000, Bytes: 1_000_000}}
	b.step(t)
	if got := dropRate(); got != 1_000_000 {
		t.Fatalf("drop rate %d, want 1000000 (the limit's first second)", got)
	}
	faults.FailNth("EIPBandwidthDrops", 1)
	b.dp.Drops[eipA] = dataplane.BandwidthDrops{Packets: 1010, Bytes: 1_015_000}
	b.step(t)
	if st := b.h.Status(); st.Counts.ApplyErrors != 1 || len(st.Errors) != 1 || st.EIPs[eipA].Drops.Bytes != 1_000_000 {
		t.Fatalf("status %+v: want the failed read counted and shown, the last drops kept", st)
	}
	b.dp.Drops[eipA] = dataplane.BandwidthDrops{Packets: 1020, Bytes: 1_030_000}
	b.step(t)
	if got := dropRate(); got != 30_000 {
		t.Fatalf("drop rate after a failed read %d, want 30000 (two intervals' drops, not all since the slot was taken)", got)
	}
}

package edge

import (
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// TestRateMeter: rates are counter deltas over the interval; only EIPs
// above the floor are reported, highest packet rate first, at most TopN;
// a reused (reset) slot starts over instead of reporting a negative rate.
func TestRateMeter(t *testing.T) {
	f := dataplane.NewFakeEdge()
	a, b, c := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("198.51.100.9")
	d := netip.MustParseAddr("198.51.100.10")
	f.PutRoutes(map[netip.Addr]dataplane.Route{a: {StatsIdx: 1}, b: {StatsIdx: 2}, c: {StatsIdx: 3}, d: {StatsIdx: 4}})
	m := newRateMeter(RateConfig{FloorPPS: 100, FloorBPS: 1e9, FloorSYN: 50, TopN: 2})
	t0 := time.Unix(1000, 0)
	if rep, err := m.measure(f, t0); rep != nil || err != nil {
		t.Fatalf("first reading: %v %v, want nothing", rep, err)
	}
	f.Counters[1] = dataplane.Counters{RxPackets: 1000, RxBytes: 64000, RxSyns: 900} // 4000 pps, 3600 SYN/s
	f.Counters[2] = dataplane.Counters{RxPackets: 10}                                // below the floor
	f.Counters[3] = dataplane.Counters{RxPackets: 500, RxBytes: 500}                 // 2000 pps
	f.Counters[4] = dataplane.Counters{RxPackets: 20, RxSyns: 20}                    // 80 SYN/s: above the SYN floor
	rep, err := m.measure(f, t0.Add(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rates) != 2 || rep.Omitted != 1 || rep.IntervalMS != 250 {
		t.Fatalf("report %+v: want 2 rates, 1 omitted, 250 ms", rep)
	}
	r := rep.Rates[0]
	if r.Address != a || r.PPS != 4000 || r.BPS != 8*64000*4 || r.SYNPS != 3600 {
		t.Errorf("first rate %+v, want %v at 4000 pps, 2048000 bps, 3600 SYN/s", r, a)
	}
	if rep.Rates[1].Address != c {
		t.Errorf("second rate %+v, want %v", rep.Rates[1], c)
	}
	// The slot of a is reset (reused): no rate for it this round.
	f.Counters[1] = dataplane.Counters{RxPackets: 5}
	rep, err = m.measure(f, t0.Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rates {
		if r.Address == a {
			t.Errorf("reset slot reported: %+v", r)
		}
	}
}

// TestRateMeterIPv6: the meter reads every route's slot, an IPv6 EIP's
// too (the edge counts an IPv6 EIP's packets, bytes and SYNs in its
// route's eip_stats slot, TestEdgeIPv6EIP): its rates are reported beside
// the IPv4 ones, for the DDoS detection to read.
func TestRateMeterIPv6(t *testing.T) {
	f := dataplane.NewFakeEdge()
	a4, a6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:e1::7")
	f.PutRoutes(map[netip.Addr]dataplane.Route{a4: {StatsIdx: 1}, a6: {StatsIdx: 2}})
	m := newRateMeter(RateConfig{FloorPPS: 100, FloorBPS: 1e9, FloorSYN: 50, TopN: 10})
	t0 := time.Unix(1000, 0)
	if _, err := m.measure(f, t0); err != nil {
		t.Fatal(err)
	}
	f.Counters[1] = dataplane.Counters{RxPackets: 200}
	f.Counters[2] = dataplane.Counters{RxPackets: 1000, RxBytes: 80000, RxSyns: 1000}
	rep, err := m.measure(f, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rates) != 2 || rep.Rates[0].Address != a6 || rep.Rates[0].PPS != 1000 || rep.Rates[0].SYNPS != 1000 ||
		rep.Rates[0].BPS != 640000 || rep.Rates[1].Address != a4 {
		t.Fatalf("report %+v: want %v at 1000 pps, 640000 bps, 1000 SYN/s, then %v", rep.Rates, a6, a4)
	}
}

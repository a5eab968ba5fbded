package dataplane

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
)

func loadOccupancyEdge(tb testing.TB, conns uint32) *Edge {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipped: loading BPF programs needs root")
	}
	e, err := LoadEdge(LoadOptions{EIPMax: 16, ConnMax: conns})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// TestConnOccupancy: a walk of a real connection table counts its
// entries by VIP and by backend slot, with the total and the capacity.
func TestConnOccupancy(t *testing.T) {
	e := loadOccupancyEdge(t, 65536)
	a, b := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")
	// FillConns writes flows 0..n-1 of one client range: b's 3 flows are
	// the same keys as a's first 3 with another VIP, so they are new keys.
	if err := e.FillConns(10000, a, 80, 4, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.FillConns(3, b, 443, 1, 1); err != nil {
		t.Fatal(err)
	}
	o, err := e.ConnOccupancy()
	if err != nil {
		t.Fatal(err)
	}
	if o.Total != 10003 || o.Capacity != 65536 || o.ByVIP[a] != 10000 || o.ByVIP[b] != 3 || len(o.ByVIP) != 2 {
		t.Errorf("occupancy total %d of %d, by VIP %v; want 10003 of 65536, %s 10000, %s 3", o.Total, o.Capacity, o.ByVIP, a, b)
	}
	// a's flows go to backends i % 4 (2,500 each), b's to backend 0.
	want := map[uint32]uint32{0: 2503, 1: 2500, 2: 2500, 3: 2500}
	if fmt.Sprint(o.ByBackend) != fmt.Sprint(want) {
		t.Errorf("by backend %v, want %v", o.ByBackend, want)
	}
}

// BenchmarkConnOccupancy: the cost of one walk of a connection table of
// 1,048,576 slots holding 1,000,000 entries (ns/entry; the walk is meant
// every 10-30 s). The table is an LRU hash: a fill near its size may
// evict a few entries (per-CPU free lists), so the walk's own total is
// the count.
//
//	go test ./internal/dataplane -run '^$' -bench ConnOccupancy -benchtime 5x
func BenchmarkConnOccupancy(b *testing.B) {
	const slots, n = 1 << 20, 1_000_000
	e := loadOccupancyEdge(b, slots)
	if err := e.FillConns(n, netip.MustParseAddr("198.51.100.7"), 80, 64, 1); err != nil {
		b.Fatal(err)
	}
	var total uint32
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o, err := e.ConnOccupancy()
		if err != nil {
			b.Fatal(err)
		}
		if o.Total < n-n/100 || total != 0 && o.Total != total {
			b.Fatalf("walked %d entries (the walk before: %d), want %d or a few fewer, the same each walk", o.Total, total, n)
		}
		total = o.Total
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(total), "ns/entry")
}

package bwalloc

import (
	"encoding/binary"
	"slices"
	"testing"
)

// decodePackage turns fuzz bytes into a package: 8 bytes of capacity, a
// flags byte, then 25 bytes per EIP (address index 2, weight 1, min 8
// scaled, max 8, demand 8... folded to keep values near the capacity).
func decodePackage(data []byte) (uint64, []EIP, Options) {
	if len(data) < 9 {
		return 0, nil, Options{}
	}
	capacity := binary.LittleEndian.Uint64(data) >> (11 + data[8]&63) // ≤ MaxRate
	opts := Options{HoldSpare: data[8]&64 != 0}
	data = data[9:]
	var eips []EIP
	seen := map[uint16]bool{}
	for len(data) >= 15 && len(eips) < 64 {
		idx := binary.LittleEndian.Uint16(data)
		w := uint32(data[2])
		if data[3]&1 != 0 {
			w = uint32(data[3]) << 24 // large weights too
		}
		min := uint64(binary.LittleEndian.Uint32(data[4:]))
		max := uint64(binary.LittleEndian.Uint32(data[8:]))
		dem := uint64(binary.LittleEndian.Uint16(data[12:])) * uint64(data[14])
		data = data[15:]
		if seen[idx] {
			continue
		}
		seen[idx] = true
		// Scale the small fields to the capacity so every case is reached.
		scale := capacity>>32 + 1
		e := EIP{Addr: ip(int(idx)), Weight: w, Min: min * scale, Max: max * scale, Demand: dem * scale}
		if e.Max != 0 && e.Min > e.Max {
			e.Min, e.Max = e.Max, e.Min
		}
		eips = append(eips, e)
	}
	return capacity, eips, opts
}

// FuzzAllocate checks every allocation property on fuzzed packages, the
// order independence, and the static split. `make fuzz` runs it for
// FUZZTIME; plain `go test` runs the seeds.
func FuzzAllocate(f *testing.F) {
	f.Add([]byte{100, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 10, 0, 0, 0, 0, 0, 0, 0, 10, 0, 10})
	f.Add(slices.Repeat([]byte{0xff, 0x10, 3, 0, 0x40, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x20, 7}, 9))
	f.Add(slices.Repeat([]byte{7, 0, 0, 0, 0, 0, 1, 0, 0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 5))
	f.Fuzz(func(t *testing.T, data []byte) {
		capacity, eips, opts := decodePackage(data)
		var a Allocator
		res, err := a.Package(capacity, eips, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkProps(t, capacity, eips, opts, res)
		rev := slices.Clone(eips)
		slices.Reverse(rev)
		res2, err := a.Package(capacity, rev, opts, nil)
		if err != nil || !slices.Equal(res.Grants, res2.Grants) {
			t.Fatalf("reversed input: %v, or a different allocation", err)
		}
		st, err := StaticSplit(capacity, eips)
		if err != nil {
			t.Fatal(err)
		}
		static := slices.Clone(eips)
		for i := range static {
			static[i].Demand = capOf(static[i].Max, capacity)
		}
		checkProps(t, capacity, static, Options{HoldSpare: true}, st)
	})
}

// FuzzSplitHosts checks that shares sum exactly to the limit, with the
// floor, for fuzzed demands.
func FuzzSplitHosts(f *testing.F) {
	f.Add(uint64(1000), uint8(10), []byte{1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add(^uint64(0), uint8(100), slices.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, limit uint64, floorPct uint8, data []byte) {
		var hosts []HostShare
		for i := 0; len(data) >= 8 && i < 32; i++ {
			hosts = append(hosts, HostShare{Host: string(rune('a' + i)), Demand: binary.LittleEndian.Uint64(data)})
			data = data[8:]
		}
		floor := float64(floorPct%101) / 100
		got, err := SplitHosts(nil, limit, hosts, floor)
		if err != nil {
			t.Fatal(err)
		}
		checkSplit(t, limit, hosts, floor, got)
	})
}

package dataplane

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestReadEIPStatsBatch: the batched read sums every CPU's counters of
// each slot, across the 4096-slot chunks, and agrees with EIPStats.
func TestReadEIPStatsBatch(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{EIPMax: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ncpu := ebpf.MustPossibleCPU()
	for _, slot := range []uint32{0, 5, 4095, 4096, 9000} {
		vals := make([]edgeEipStats, ncpu)
		for c := range vals {
			vals[c] = edgeEipStats{RxPackets: uint64(slot) + 1, RxBytes: 100, TxPackets: 2, TxBytes: 3, RxSyns: uint64(c) + 1}
		}
		if err := e.objs.EipStats.Update(slot, vals, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]Counters, 9001)
	if err := e.ReadEIPStats(out); err != nil {
		t.Fatal(err)
	}
	for _, slot := range []uint32{0, 1, 5, 4095, 4096, 4097, 9000} {
		one, err := e.EIPStats(slot)
		if err != nil {
			t.Fatal(err)
		}
		if out[slot] != one {
			t.Errorf("slot %d: batch %+v, single %+v", slot, out[slot], one)
		}
	}
	want := Counters{RxPackets: uint64(9001 * ncpu), RxBytes: uint64(100 * ncpu), TxPackets: uint64(2 * ncpu), TxBytes: uint64(3 * ncpu),
		RxSyns: uint64(ncpu * (ncpu + 1) / 2)}
	if out[9000] != want {
		t.Errorf("slot 9000: %+v, want %+v", out[9000], want)
	}
}

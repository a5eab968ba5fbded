package dataplane

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"testing"
)

// The sizing of an edge of a 100k-EIP set with a 256k-entry connection
// table (docs/scale.md, "Map memory per edge").
const (
	smallEIPMax  = 100_000
	smallConnMax = 256 << 10
)

// TestMapMemory loads the edge at the default sizes and at the 100k-EIP
// sizing, logs each map's memory (the kernel's memlock figure) and checks
// that the small sizing holds the asked capacities and under a third of
// the default's memory (29% measured on 2 CPUs: what remains is the maps
// no flag sizes, lb_listeners, edge_rl_src, edge_limits, ct_events... at
// 113 MiB).
func TestMapMemory(t *testing.T) {
	requireRoot(t)
	entries := map[string]uint32{} // at the default sizes
	load := func(o LoadOptions) map[string]uint64 {
		t.Helper()
		e, err := LoadEdge(o)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		mem, err := e.MapMemory()
		if err != nil {
			t.Fatal(err)
		}
		if o.EIPMax == 0 && o.ConnMax == 0 {
			for n, m := range e.Maps() {
				entries[n] = m.MaxEntries()
			}
		}
		if o.EIPMax > 0 {
			for name, got := range map[string]uint32{"eip_routes": e.objs.EipRoutes.MaxEntries(),
				"eip_stats": e.objs.EipStats.MaxEntries(), "eip_bw_slots": e.objs.EipBwSlots.MaxEntries(), "fw_dst": e.objs.FwDst.MaxEntries()} {
				if got != o.EIPMax {
					t.Errorf("%s holds %d, want the EIPMax %d", name, got, o.EIPMax)
				}
			}
		}
		if o.ConnMax > 0 {
			for name, got := range map[string]uint32{"lb_conns": e.objs.LbConns.MaxEntries(), "lb_nat_conns": e.objs.LbNatConns.MaxEntries()} {
				if got != o.ConnMax {
					t.Errorf("%s holds %d, want the ConnMax %d", name, got, o.ConnMax)
				}
			}
		}
		return mem
	}
	def := load(LoadOptions{})
	small := load(LoadOptions{EIPMax: smallEIPMax, ConnMax: smallConnMax})
	total := func(m map[string]uint64) (n uint64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	t.Logf("%d CPUs; per map: default entries, bytes; bytes at EIPMax %d ConnMax %d", runtime.NumCPU(), smallEIPMax, smallConnMax)
	names := slices.Sorted(maps.Keys(def))
	slices.SortStableFunc(names, func(a, b string) int { return int(int64(def[b]) - int64(def[a])) })
	for _, n := range names {
		t.Logf("%-22s %9d %12d %12d", n, entries[n], def[n], small[n])
	}
	td, ts := total(def), total(small)
	t.Logf("%-22s %9s %12d %12d  (%.1f MiB, %.1f MiB)", "total", "", td, ts, float64(td)/(1<<20), float64(ts)/(1<<20))
	if ts*3 >= td {
		t.Errorf("maps at the 100k sizing take %d bytes, not under a third of the default's %d", ts, td)
	}
}

// TestEIPMaxResizePinned: a pinned edge restarted with another EIPMax
// migrates every map EIPMax sizes (eip_bw_slots and fw_dst as eip_routes
// and eip_stats, docs/upgrades.md), their entries kept.
func TestEIPMaxResizePinned(t *testing.T) {
	requireRoot(t)
	dir := NodePinDir(fmt.Sprintf("azgt-eipmax-%d", os.Getpid()))
	t.Cleanup(func() { RemovePins(dir) })
	e, err := LoadEdge(LoadOptions{PinDir: dir, EIPMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	dst := edgeFwDst{Scope: 7, Flags: 1}
	slot := edgeEipBwSlot{NsPerByteQ20: 99, Tau: 5}
	key, idx := uint32(0x0a000001), uint32(5)
	if err := e.objs.FwDst.Put(key, dst); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.EipBwSlots.Put(idx, slot); err != nil {
		t.Fatal(err)
	}
	e.Close()
	for _, n := range []uint32{2048, 8192} {
		e, err := LoadEdge(LoadOptions{PinDir: dir, EIPMax: n})
		if err != nil {
			t.Fatalf("EIPMax %d: %v", n, err)
		}
		migrated := map[string]bool{}
		for _, m := range e.Upgrade().Maps {
			if m.Action == ActionMigrate {
				migrated[m.Name] = true
			}
		}
		for _, name := range eipSized {
			if !migrated[name] {
				t.Errorf("EIPMax %d: %s not migrated (%+v)", n, name, e.Upgrade().Maps)
			}
			if got := e.Maps()[name].MaxEntries(); got != n {
				t.Errorf("EIPMax %d: %s holds %d", n, name, got)
			}
		}
		var gd edgeFwDst
		var gs edgeEipBwSlot
		if err := e.objs.FwDst.Lookup(key, &gd); err != nil || gd != dst {
			t.Errorf("EIPMax %d: fw_dst entry %+v, %v; want %+v", n, gd, err, dst)
		}
		if err := e.objs.EipBwSlots.Lookup(idx, &gs); err != nil || gs != slot {
			t.Errorf("EIPMax %d: eip_bw_slots[%d] %+v, %v; want %+v", n, idx, gs, err, slot)
		}
		e.Close()
	}
}

package dataplane

import (
	"maps"
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
	t.Logf("%d CPUs; per map: default bytes, bytes at EIPMax %d ConnMax %d", runtime.NumCPU(), smallEIPMax, smallConnMax)
	names := slices.Sorted(maps.Keys(def))
	slices.SortStableFunc(names, func(a, b string) int { return int(int64(def[b]) - int64(def[a])) })
	for _, n := range names {
		t.Logf("%-22s %12d %12d", n, def[n], small[n])
	}
	td, ts := total(def), total(small)
	t.Logf("%-22s %12d %12d  (%.1f MiB, %.1f MiB)", "total", td, ts, float64(td)/(1<<20), float64(ts)/(1<<20))
	if ts*3 >= td {
		t.Errorf("maps at the 100k sizing take %d bytes, not under a third of the default's %d", ts, td)
	}
}

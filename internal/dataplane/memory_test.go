package dataplane

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/lbplan"
)

// The sizing of an edge of a 100k-EIP set (the fleet bench's: one
// service) with a 256k-entry connection table and a 16k-entry drift flow
// table, and of an agent of a host of 1,000 guests with an EIP each
// (docs/scale.md, "Map memory per edge and per agent").
const (
	smallEIPMax      = 128 << 10
	smallConnMax     = 256 << 10
	smallListenerMax = 4 << 10
	smallBackendMax  = 1 << 10
	smallDriftFlows  = 16 << 10
	smallAgentEIPMax = 2 << 10
	smallAgentFlows  = 256 << 10
	eipPrevMax       = 16 << 10 // EIP_PREV_MAX
)

// logMapMemory logs each map's default entries and bytes at the default
// and the small sizing, largest first, and returns both totals.
func logMapMemory(t *testing.T, entries map[string]uint32, def, small map[string]uint64) (td, ts uint64) {
	t.Helper()
	names := slices.Sorted(maps.Keys(def))
	slices.SortStableFunc(names, func(a, b string) int { return int(int64(def[b]) - int64(def[a])) })
	for _, n := range names {
		t.Logf("%-22s %9d %12d %12d", n, entries[n], def[n], small[n])
		td += def[n]
		ts += small[n]
	}
	t.Logf("%-22s %9s %12d %12d  (%.1f MiB, %.1f MiB, %.0f%%)", "total", "", td, ts,
		float64(td)/(1<<20), float64(ts)/(1<<20), 100*float64(ts)/float64(td))
	return td, ts
}

// wantEntries reports every map of want whose capacity differs.
func wantEntries(t *testing.T, what string, have map[string]*ebpf.Map, want map[string]uint32) {
	t.Helper()
	for name, n := range want {
		if m := have[name]; m == nil || m.MaxEntries() != n {
			t.Errorf("%s: %s holds %v, want %d", what, name, m, n)
		}
	}
}

// edgeSized is what each sized edge map holds when loaded with o (the
// capped ones at most their default).
func edgeSized(o LoadOptions, def map[string]uint32) map[string]uint32 {
	want := map[string]uint32{}
	if o.EIPMax > 0 {
		for _, n := range eipSized {
			want[n] = o.EIPMax
		}
		for _, n := range eipCapped {
			want[n] = min(o.EIPMax, def[n])
		}
		want[edgeMapEipPrev] = min(o.EIPMax, cmp.Or(def[edgeMapEipPrev], eipPrevMax))
	}
	if o.ConnMax > 0 {
		want[edgeMapLbConns], want[edgeMapLbNatConns] = o.ConnMax, o.ConnMax
	}
	if c6 := conns6(o); c6 > 0 {
		want[edgeMapLbConns6], want[edgeMapLbNatConns6] = c6, c6
	}
	if o.DriftFlows > 0 {
		want[edgeMapDriftFlows] = o.DriftFlows
	}
	if o.ListenerMax > 0 {
		want[edgeMapLbListeners] = o.ListenerMax
		want[edgeMapLbListeners6] = min(o.ListenerMax, cmp.Or(def[edgeMapLbListeners6], lbplan.Listeners6Max))
	}
	if o.BackendMax > 0 {
		for _, n := range backendSized {
			want[n] = o.BackendMax
		}
		want[edgeMapLbNatBackends6] = 2 * o.BackendMax // the fallback's IPv6 keys and the slots' addresses
	}
	return want
}

// TestMapMemory loads the edge at the default sizes and at the 100k-EIP
// sizing, logs each map's memory (the kernel's memlock figure) and checks
// that the small sizing holds the asked capacities and under a quarter of
// the default's memory (24% measured on 2 CPUs: 134 of 564 MiB, with the
// IPv6 firewall and limits; 23% before them. The maps no flag sizes at
// this sizing, edge_rl_src, edge_rl_src6, edge_limits, ct_events, eip_bw,
// fw_stats..., are most of the rest).
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
		if o.EIPMax == 0 && o.ConnMax == 0 && o.ConnMax6 == 0 && o.DriftFlows == 0 && o.ListenerMax == 0 && o.BackendMax == 0 {
			for n, m := range e.Maps() {
				entries[n] = m.MaxEntries()
			}
		}
		wantEntries(t, fmt.Sprintf("%+v", o), e.Maps(), edgeSized(o, entries))
		return mem
	}
	def := load(LoadOptions{})
	small := load(LoadOptions{EIPMax: smallEIPMax, ConnMax: smallConnMax, ListenerMax: smallListenerMax, BackendMax: smallBackendMax,
		DriftFlows: smallDriftFlows})
	t.Logf("%d CPUs; per map: default entries, bytes; bytes at EIPMax %d ConnMax %d ListenerMax %d BackendMax %d DriftFlows %d",
		runtime.NumCPU(), smallEIPMax, smallConnMax, smallListenerMax, smallBackendMax, smallDriftFlows)
	td, ts := logMapMemory(t, entries, def, small)
	if ts*4 >= td {
		t.Errorf("maps at the 100k sizing take %d bytes, not under a quarter of the default's %d", ts, td)
	}
	// --ct-size6 sizes lb_conns6 alone, whatever --ct-size says.
	load(LoadOptions{ConnMax6: 4096})
	load(LoadOptions{ConnMax: 65536, ConnMax6: 131072})
	// --drift-flows sizes drift_flows (64k entries by default).
	load(LoadOptions{DriftFlows: 4096})
	if entries[edgeMapDriftFlows] != 65536 {
		t.Errorf("drift_flows holds %d entries by default, not 65536", entries[edgeMapDriftFlows])
	}
	if entries[edgeMapLbConns6]*4 != entries[edgeMapLbConns] {
		t.Errorf("lb_conns6 holds %d entries by default, not a quarter of lb_conns' %d", entries[edgeMapLbConns6], entries[edgeMapLbConns])
	}
	if entries[edgeMapLbNatConns6] != entries[edgeMapLbConns6] || entries[edgeMapLbNatBackends6] != 2*entries[edgeMapLbNatBackends] {
		t.Errorf("lb_nat_conns6 holds %d entries, lb_nat_backends6 %d by default: want lb_conns6's %d and twice lb_nat_backends' %d",
			entries[edgeMapLbNatConns6], entries[edgeMapLbNatBackends6], entries[edgeMapLbConns6], entries[edgeMapLbNatBackends])
	}
	// Below 64k EIPs, --eip-max caps the limits' maps too.
	tiny := LoadOptions{EIPMax: 8192}
	tm := load(tiny)
	for _, n := range eipCapped {
		t.Logf("%-22s at EIPMax %d: %d bytes", n, tiny.EIPMax, tm[n])
		if tm[n]*4 >= def[n] {
			t.Errorf("%s at EIPMax %d takes %d bytes, not under a quarter of the default's %d", n, tiny.EIPMax, tm[n], def[n])
		}
	}
}

// TestAgentMapMemory loads the agent at the default sizes and at a host's
// sizing (2k EIPs, a 256k-entry flow table), logs each map's memory as
// TestMapMemory does and checks the sized maps' capacities and that the
// host's sizing takes under a third of the default's memory (29% measured
// on 2 CPUs: 26 of its 43 MiB are the flow table, 16 MiB the maps no flag
// sizes, agent_svc, agent_hc_guests, agent_ifaddrs).
func TestAgentMapMemory(t *testing.T) {
	requireRoot(t)
	entries := map[string]uint32{}
	load := func(o LoadOptions) map[string]uint64 {
		t.Helper()
		a, err := LoadAgent(o)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		mem, err := a.MapMemory()
		if err != nil {
			t.Fatal(err)
		}
		if o.AgentEIPMax == 0 && o.AgentFlowMax == 0 {
			for n, m := range a.Maps() {
				entries[n] = m.MaxEntries()
			}
			return mem
		}
		want := map[string]uint32{agentMapAgentFlows: o.AgentFlowMax, agentMapAgentFlows6: o.AgentFlowMax / 4}
		for _, n := range agentEIPSized {
			want[n] = o.AgentEIPMax
		}
		wantEntries(t, fmt.Sprintf("%+v", o), a.Maps(), want)
		return mem
	}
	def := load(LoadOptions{})
	small := load(LoadOptions{AgentEIPMax: smallAgentEIPMax, AgentFlowMax: smallAgentFlows})
	t.Logf("%d CPUs; per map: default entries, bytes; bytes at AgentEIPMax %d AgentFlowMax %d",
		runtime.NumCPU(), smallAgentEIPMax, smallAgentFlows)
	td, ts := logMapMemory(t, entries, def, small)
	if ts*3 >= td {
		t.Errorf("maps at the host's sizing take %d bytes, not under a third of the default's %d", ts, td)
	}
}

// TestEIPMaxResizePinned: a pinned edge restarted with another EIPMax,
// ListenerMax and BackendMax migrates every map they size (eip_bw_slots,
// fw_dst, edge_limits, eip_bw, lb_listeners, lb_backends... as eip_routes
// and eip_stats, docs/upgrades.md), their entries kept.
func TestEIPMaxResizePinned(t *testing.T) {
	requireRoot(t)
	dir := NodePinDir(fmt.Sprintf("azgt-eipmax-%d", os.Getpid()))
	t.Cleanup(func() { RemovePins(dir) })
	e, err := LoadEdge(LoadOptions{PinDir: dir, EIPMax: 4096, ListenerMax: 1024, BackendMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	dst := edgeFwDst{Scope: 7, Flags: 1}
	slot := edgeEipBwSlot{NsPerByteQ20: 99, Tau: 5}
	lim := edgeRlDst{SrcPps: 100, SrcBurst: 10}
	lk, ll := edgeLbKey{Vip: 0x0a000002, Port: 80, Proto: 6}, edgeLbListener{Table: 3}
	be := edgeLbBackend{Addr: 0x0a000003, Port: 8080, Gen: 2, Mode: 2, Owner: 77}
	key, idx := uint32(0x0a000001), uint32(5)
	if err := e.objs.FwDst.Put(key, dst); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.EipBwSlots.Put(idx, slot); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.EdgeLimits.Put(key, lim); err != nil {
		t.Fatal(err)
	}
	key6, _, _ := addrTo(addr("2001:db8:e1::7"))
	if err := e.objs.FwDst6.Put(key6, dst); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.EdgeLimits6.Put(key6, lim); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.LbListeners.Put(lk, ll); err != nil {
		t.Fatal(err)
	}
	if err := e.objs.LbBackends.Put(idx, be); err != nil {
		t.Fatal(err)
	}
	e.Close()
	for _, o := range []LoadOptions{{EIPMax: 2048, ListenerMax: 512, BackendMax: 512}, {EIPMax: 8192, ListenerMax: 2048, BackendMax: 2048}} {
		o.PinDir = dir
		e, err := LoadEdge(o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		migrated := map[string]bool{}
		for _, m := range e.Upgrade().Maps {
			if m.Action == ActionMigrate {
				migrated[m.Name] = true
			}
		}
		want := edgeSized(o, map[string]uint32{edgeMapEdgeLimits: LimitsMax, edgeMapEdgeLimits6: LimitsMax, edgeMapEipBw: BandwidthMax, edgeMapEipBw6: BandwidthMax})
		for name := range want {
			if !migrated[name] {
				t.Errorf("%+v: %s not migrated (%+v)", o, name, e.Upgrade().Maps)
			}
		}
		wantEntries(t, fmt.Sprintf("%+v", o), e.Maps(), want)
		var gd edgeFwDst
		var gs edgeEipBwSlot
		var gl edgeRlDst
		var gll edgeLbListener
		var gbe edgeLbBackend
		if err := e.objs.FwDst.Lookup(key, &gd); err != nil || gd != dst {
			t.Errorf("%+v: fw_dst entry %+v, %v; want %+v", o, gd, err, dst)
		}
		if err := e.objs.EipBwSlots.Lookup(idx, &gs); err != nil || gs != slot {
			t.Errorf("%+v: eip_bw_slots[%d] %+v, %v; want %+v", o, idx, gs, err, slot)
		}
		if err := e.objs.EdgeLimits.Lookup(key, &gl); err != nil || gl != lim {
			t.Errorf("%+v: edge_limits entry %+v, %v; want %+v", o, gl, err, lim)
		}
		if err := e.objs.FwDst6.Lookup(key6, &gd); err != nil || gd != dst {
			t.Errorf("%+v: fw_dst6 entry %+v, %v; want %+v", o, gd, err, dst)
		}
		if err := e.objs.EdgeLimits6.Lookup(key6, &gl); err != nil || gl != lim {
			t.Errorf("%+v: edge_limits6 entry %+v, %v; want %+v", o, gl, err, lim)
		}
		if err := e.objs.LbListeners.Lookup(lk, &gll); err != nil || gll != ll {
			t.Errorf("%+v: lb_listeners entry %+v, %v; want %+v", o, gll, err, ll)
		}
		if err := e.objs.LbBackends.Lookup(idx, &gbe); err != nil || gbe != be {
			t.Errorf("%+v: lb_backends[%d] %+v, %v; want %+v", o, idx, gbe, err, be)
		}
		e.Close()
	}
}

// TestAgentEIPMaxResizePinned: a pinned agent restarted with another
// AgentEIPMax migrates every map it sizes, their entries kept.
func TestAgentEIPMaxResizePinned(t *testing.T) {
	requireRoot(t)
	dir := NodePinDir(fmt.Sprintf("azgt-agenteipmax-%d", os.Getpid()))
	t.Cleanup(func() { RemovePins(dir) })
	a, err := LoadAgent(LoadOptions{PinDir: dir, AgentEIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	k := agentEipKey{Family: 2}
	k.Addr.A[0] = 0x0a000001
	v := agentAgentEip{Vsid: 4097, StatsIdx: 3, Family: 2}
	v.PrivateAddr.A[0] = 0x0a000101
	if err := a.objs.AgentEips.Put(k, v); err != nil {
		t.Fatal(err)
	}
	a.Close()
	for _, n := range []uint32{512, 4096} {
		a, err := LoadAgent(LoadOptions{PinDir: dir, AgentEIPMax: n})
		if err != nil {
			t.Fatalf("AgentEIPMax %d: %v", n, err)
		}
		migrated := map[string]bool{}
		for _, m := range a.Upgrade().Maps {
			if m.Action == ActionMigrate {
				migrated[m.Name] = true
			}
		}
		want := map[string]uint32{}
		for _, name := range agentEIPSized {
			want[name] = n
			if !migrated[name] {
				t.Errorf("AgentEIPMax %d: %s not migrated (%+v)", n, name, a.Upgrade().Maps)
			}
		}
		wantEntries(t, fmt.Sprintf("AgentEIPMax %d", n), a.Maps(), want)
		var got agentAgentEip
		if err := a.objs.AgentEips.Lookup(k, &got); err != nil || got != v {
			t.Errorf("AgentEIPMax %d: agent_eips entry %+v, %v; want %+v", n, got, err, v)
		}
		a.Close()
	}
}

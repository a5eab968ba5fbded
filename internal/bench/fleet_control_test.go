package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
)

// TestFleetControlProxies runs the control bench at a toy size, 2 sets of
// 2 edges, with the edges on 2 etcd gRPC proxies: it passes its own
// checks (every edge of a set applied every rebind of its EIPs, holds its
// set's EIPs only, and builds its set's service table with the checksum
// of its set's other edge), and prints the members' CPU and bytes per
// 1,000 changes/s with their units; then 3 agents follow their hosts'
// shares and program each rebind between them; 2 agent processes load
// the hosts with the most EIPs (h0 and h1: 1,000 and 500) and report
// their memory; then every node restarts at once and serves again.
func TestFleetControlProxies(t *testing.T) {
	needEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := FleetControl(ctx, FleetOptions{Sets: 2, EdgesPerSet: 2, EIPs: 1500, EdgeProcs: 3, Agents: 3, AgentProcs: 2, Restart: true, RestartJitter: 300 * time.Millisecond,
		Changes: 20, ServiceChanges: 2, Proxies: 2, Out: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range rs {
		got[r.Name] = r
	}
	for name, unit := range map[string]string{"etcd_members_cpu_per_1k_changes_s": "cores", "etcd_members_sent_per_change": "bytes",
		"etcd_members_sent_per_1k_changes_s": "MB/s", "etcd_proxies_cpu_per_1k_changes_s": "cores", "drift_all_edges_p99": "ms",
		"edge_set_load_max": "s", "table_agreement_max": "ms", "agent_drift_p99": "ms", "agent_load_max": "s",
		"agent_rss_max": "MB", "agent_peak_rss_max": "MB", "agent_proc_load_max": "s", "region_restart_all_serving_s": "s"} {
		r, ok := got[name]
		if !ok || r.Unit != unit {
			t.Errorf("%s: %+v, want one in %s", name, r, unit)
		}
	}
	// The agent processes (this test binary re-executed, TestMain) and
	// the restart of every node: 4 edges, 3 agents, 2 agent processes.
	if v := got["agent_procs"].Value; v != 2 {
		t.Errorf("agent_procs %v, want 2", v)
	}
	if v := got["agent_peak_rss_max"].Value; v <= 0 {
		t.Errorf("agent_peak_rss_max %v", v)
	}
	if v := got["region_restart_nodes"].Value; v != 9 {
		t.Errorf("region_restart_nodes %v, want 9", v)
	}
	if got["etcd_proxies"].Value != 2 {
		t.Errorf("etcd_proxies %v, want 2", got["etcd_proxies"].Value)
	}
	// Each rebind reaches the 2 proxies (and the writer): the members
	// sent something for each.
	if v := got["etcd_members_sent_per_change"].Value; v <= 0 {
		t.Errorf("members sent %v bytes per change", v)
	}
}

// TestFleetOptionsCheck: a set of more edges than model.MaxSetEdges is
// refused before anything starts (such a set is invalid: its edges never
// loaded and the bench hung).
func TestFleetOptionsCheck(t *testing.T) {
	ok := FleetOptions{Sets: 10, EdgesPerSet: model.MaxSetEdges, EIPs: 1000, RSSEIPs: 100_000}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	mixed := FleetOptions{Sets: 11, EdgesPerSet: 4, FullSets: 1, EIPs: 1000}
	if err := mixed.Check(); err != nil {
		t.Fatal(err)
	}
	if n, sets := mixed.edges(), mixed.sets(); n != 72 || len(sets[0].Edges) != 32 || len(sets[10].Edges) != 4 || mixed.shape() != "1 of 32 edges and 10 of 4" {
		t.Errorf("11 sets, 1 full: %d edges, %d and %d in the first and last, %q", n, len(sets[0].Edges), len(sets[10].Edges), mixed.shape())
	}
	for _, o := range []FleetOptions{
		{Sets: 1, EdgesPerSet: model.MaxSetEdges + 1, EIPs: 10},
		{Sets: 0, EdgesPerSet: 1, EIPs: 10},
		{Sets: fleetMaxSets + 1, EdgesPerSet: 1, EIPs: 10},
		{Sets: 1, EdgesPerSet: 1, EIPs: fleetMaxEIPs + 1},
		{Sets: 128, EdgesPerSet: 1, EIPs: 10, RSSEIPs: 100_000}, // set0 holds 2/256 of the addresses
		{Sets: 2, EdgesPerSet: 4, FullSets: 3, EIPs: 10},
		{Sets: 2, EdgesPerSet: 4, EIPs: 10, Agents: 1},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}

// TestFleetRegionSpread: fleetInSet counts what fleetSetOf assigns, and
// fleetRegionFor is the smallest region whose set0 holds the count asked;
// each set's VIP is in its own set's prefixes and past every EIP.
func TestFleetRegionSpread(t *testing.T) {
	for _, sets := range []int{1, 3, 10, 100} {
		count := make([]int, sets)
		for i := 0; i < 5000; i++ {
			count[fleetSetOf(i, sets)]++
			if i+1 == 5000 || i%997 == 0 {
				for s := range count {
					if got := fleetInSet(i+1, s, sets); got != count[s] {
						t.Fatalf("%d sets, region of %d: set %d holds %d, counted %d", sets, i+1, s, got, count[s])
					}
				}
			}
		}
		n := fleetRegionFor(700, sets)
		if fleetInSet(n, 0, sets) != 700 || fleetInSet(n-1, 0, sets) != 699 {
			t.Errorf("%d sets: region of %d for 700 in set0: set0 holds %d", sets, n, fleetInSet(n, 0, sets))
		}
		for s, set := range fleetSets(sets, 1) {
			in := setplan.Input{Sets: map[string]*model.EdgeSet{}}
			for _, x := range fleetSets(sets, 1) {
				in.Sets[x.Name] = x
			}
			if got, _, _ := in.Serving(fleetVIP(s)); got != set.Name {
				t.Errorf("%d sets: VIP %v served by %q, want %s", sets, fleetVIP(s), got, set.Name)
			}
			if got, _, _ := in.Serving(fleetAddr(s)); got != set.Name {
				t.Errorf("%d sets: EIP %d served by %q, want %s", sets, s, got, set.Name)
			}
		}
	}
	if a := fleetAddr(fleetMaxEIPs - 1); a.As4()[2]%64 == 63 && a.As4()[3] >= 254 || !fleetUnit(fleetUnits-1).Contains(a) {
		t.Errorf("the last EIP %v reaches the VIPs or leaves the last /18", a)
	}
}

func TestTargetLine(t *testing.T) {
	if l, ok := TargetLine(Result{Name: "drift_all_edges_p99", Value: 41, Unit: "ms", Target: "<= 100 ms"}); !ok || l != "drift_all_edges_p99 41.0 ms (target <= 100 ms) ok" {
		t.Errorf("%q %v", l, ok)
	}
	if l, ok := TargetLine(Result{Name: "x", Value: 1.5, Unit: "s", Target: "<= 1 s"}); !ok || !strings.HasSuffix(l, "MISSED") {
		t.Errorf("%q %v", l, ok)
	}
	if _, ok := TargetLine(Result{Name: "x", Value: 1, Unit: "s"}); ok {
		t.Error("a result without a target printed one")
	}
}

// The one-edge child's repeated runs: each figure's own median.
func TestMedianEdgeReport(t *testing.T) {
	got := medianEdgeReport([]*FleetEdgeReport{
		{EIPs: 7, LoadS: 3, RSSMB: 70, PeakMB: 100, AnonMB: 40, FileMB: 30, LoadCPUS: 1.5},
		{EIPs: 7, LoadS: 1, RSSMB: 90, PeakMB: 120, AnonMB: 41, FileMB: 29, LoadCPUS: 1.1},
		{EIPs: 7, LoadS: 2, RSSMB: 80, PeakMB: 110, AnonMB: 60, FileMB: 31, LoadCPUS: 1.2},
	})
	want := FleetEdgeReport{EIPs: 7, LoadS: 2, RSSMB: 80, PeakMB: 110, AnonMB: 41, FileMB: 30, LoadCPUS: 1.2}
	if *got != want {
		t.Errorf("medians %+v, want %+v", *got, want)
	}
}

package bench

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

func TestPercentileNearestRank(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0, 1}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("p%v of 1..100 = %v, want %v", c.p, got, c.want)
		}
	}
	// 50 samples: p99 is the largest (rank ceil(49.5) = 50), not the second largest.
	if got := percentile(xs[50:], 99); got != 50 {
		t.Errorf("p99 of 1..50 = %v, want 50", got)
	}
	if got := percentile([]float64{3, 1, 2}, 50); got != 2 {
		t.Errorf("p50 of {1,2,3} = %v, want 2", got)
	}
}

func TestJSONKeepsZeroRatioAndFloorFields(t *testing.T) {
	var buf bytes.Buffer
	rs := []Result{
		{Suite: "lb", Name: "collateral", Value: 0, Unit: "%", Baseline: "rebuild", BaselineValue: 0.5, Ratio: 0},
		{Suite: "dataplane", Name: "path", Value: 30, Unit: "ns/packet", PerPacket: true, Harness: 22, Floor: 25, AboveFloor: 5,
			Baseline: "xdp_floor", BaselineValue: 25, Ratio: 1.2, HasBefore: true, Before: 35, BeforeAboveFloor: 10},
		{Suite: "control", Name: "plain", Value: 1, Unit: "s"},
	}
	if err := Report(&buf, rs, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var m []map[string]any
	for _, l := range lines {
		var x map[string]any
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatal(err)
		}
		m = append(m, x)
	}
	if r, ok := m[0]["ratio"]; !ok || r.(float64) != 0 {
		t.Errorf("zero ratio dropped: %s", lines[0])
	}
	for k, want := range map[string]float64{"harness_ns": 22, "floor_ns": 25, "above_floor_ns": 5, "before": 35, "cut_pct": 100 * 5.0 / 35, "cut_above_floor_pct": 50} {
		if got, ok := m[1][k]; !ok || got.(float64) != want {
			t.Errorf("%s = %v, want %v: %s", k, got, want, lines[1])
		}
	}
	for _, k := range []string{"ratio", "baseline_value", "harness_ns", "before"} {
		if _, ok := m[2][k]; ok {
			t.Errorf("%s present in a result without it: %s", k, lines[2])
		}
	}
	buf.Reset()
	if err := Report(&buf, rs, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "ABOVE FLOOR") || !strings.Contains(buf.String(), "harness (XDP_PASS) 22.00") {
		t.Errorf("text output lacks the floor columns:\n%s", buf.String())
	}
}

// chainBed is the TestChainVary tests' bed: the test namespace, the bench
// program, the jiffies rate and an edge with a 64k-entry connection
// table, closed when the test ends.
func chainBed(t *testing.T) (*dptest.Env, *dataplane.Bench, uint32, *dataplane.Edge) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	hz, err := b.MeasureHZ()
	if err != nil {
		t.Fatal(err)
	}
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return env, b, hz, e
}

// TestChainVaryGivesDistinctFlows runs xdp_chain into the edge on SYNs to
// a nat VIP: every run must insert its own connection entry (distinct
// clients, checksums still valid: the edge drops bad IP checksums), and
// an insert cap of 1/s must stop all but one.
func TestChainVaryGivesDistinctFlows(t *testing.T) {
	env, b, hz, e := chainBed(t)
	if err := setupLB(e, 10, hz); err != nil {
		t.Fatal(err)
	}
	syn := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, lbNewClient, lbVIP, 1024, 80, 128, "syn")
	if err := b.SetBenchFrame(syn); err != nil {
		t.Fatal(err)
	}
	if err := b.SetChainTarget(e.Program()); err != nil {
		t.Fatal(err)
	}
	for _, capped := range []bool{false, true} {
		if err := e.SetLBConfig(lbConfig(hz, capped)); err != nil {
			t.Fatal(err)
		}
		if err := b.SetVary(true); err != nil {
			t.Fatal(err)
		}
		const runs = 3000
		if _, err := timeProg(env, b.Chain(), dptest.ExtDev, syn, runs, actRedirect); err != nil {
			t.Fatal(err)
		}
		got, err := b.VaryRuns()
		if err != nil || got != runs {
			t.Fatalf("chain counted %d runs (%v), want %d", got, err, runs)
		}
		n, err := e.ConnCount()
		if err != nil {
			t.Fatal(err)
		}
		del, err := e.DeleteVaryConns(netip.MustParseAddr(lbNewClient), netip.MustParseAddr(lbVIP), 80, runs)
		if err != nil {
			t.Fatal(err)
		}
		if !capped && (n != runs || del != runs) {
			t.Errorf("uncapped: %d runs left %d entries, %d of them the runs' flows; want %d distinct new flows", runs, n, del, runs)
		}
		if capped && (n > 1 || del > 1) {
			t.Errorf("capped at 1/s: %d runs left %d entries", runs, n)
		}
	}
}

// TestChainVaryGivesDistinctFlows6 is TestChainVaryGivesDistinctFlows for
// SYNs to an IPv6 VIP: xdp_chain rewrites the IPv6 client (its TCP
// checksum still valid: the edge would drop it) and every run inserts its
// own entry in lb_conns6, the entries DeleteVaryConns6 names.
func TestChainVaryGivesDistinctFlows6(t *testing.T) {
	env, b, hz, e := chainBed(t)
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), HashSeed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := setupLB(e, 10, hz); err != nil {
		t.Fatal(err)
	}
	if err := setupLB6(e); err != nil {
		t.Fatal(err)
	}
	syn := tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, lbNewClient6, lbVIP6, 1024, 443, 128, "syn")
	if err := b.SetBenchFrame(syn); err != nil {
		t.Fatal(err)
	}
	if err := b.SetChainTarget(e.Program()); err != nil {
		t.Fatal(err)
	}
	if err := b.SetVary(true); err != nil {
		t.Fatal(err)
	}
	defer b.SetVary(false)
	const runs = 3000
	if _, err := timeProg(env, b.Chain(), dptest.ExtDev, syn, runs, actRedirect); err != nil {
		t.Fatal(err)
	}
	if got, err := b.VaryRuns(); err != nil || got != runs {
		t.Fatalf("chain counted %d runs (%v), want %d", got, err, runs)
	}
	n, err := e.ConnCount6()
	if err != nil {
		t.Fatal(err)
	}
	del, err := e.DeleteVaryConns6(netip.MustParseAddr(lbNewClient6), netip.MustParseAddr(lbVIP6), 443, runs)
	if err != nil {
		t.Fatal(err)
	}
	if n != runs || del != runs {
		t.Errorf("%d runs left %d IPv6 entries, %d of them the runs' flows; want %d distinct new flows", runs, n, del, runs)
	}
	if n, err := e.ConnCount(); err != nil || n != 0 {
		t.Errorf("the IPv4 table holds %d entries (%v), want none", n, err)
	}
}

// TestCompareTakesFastestOfEachBuild: compare reads what Report writes,
// keeps the fastest run of each build per path, and cuts only paths.
func TestCompareTakesFastestOfEachBuild(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, path, floor float64) string {
		var buf bytes.Buffer
		rs := []Result{
			{Suite: "lb", Name: "xdp_floor", Value: floor, Unit: "ns/packet", PerPacket: true, Harness: 20, Floor: floor},
			{Suite: "lb", Name: "hit", Value: path, Unit: "ns/packet", PerPacket: true, Harness: 20, Floor: floor, AboveFloor: path - floor,
				Baseline: "xdp_floor", BaselineValue: floor, Ratio: path / floor},
			{Suite: "lb", Name: "maglev", Value: 1, Unit: "%"},
		}
		if err := Report(&buf, rs, true); err != nil {
			t.Fatal(err)
		}
		f := dir + "/" + name
		if err := os.WriteFile(f, append([]byte("progress line\n"), buf.Bytes()...), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	rs, err := Compare([]string{write("b1", 120, 30), write("b2", 100, 25)}, []string{write("a1", 80, 30), write("a2", 90, 25)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want the floor and the path: %+v", len(rs), rs)
	}
	hit := rs[1]
	if hit.Value != 80 || hit.AboveFloor != 50 || !hit.HasBefore || hit.Before != 100 || hit.BeforeAboveFloor != 75 {
		t.Errorf("path: %+v", hit)
	}
	if rs[0].HasBefore {
		t.Errorf("the floor row got a cut: %+v", rs[0])
	}
}

// TestDataplaneSideSetupError: a setup that fails part way (an object file
// that does not exist) returns its error, having closed what it opened;
// it dereferenced a nil side in its cleanup before.
func TestDataplaneSideSetupError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	missing := filepath.Join(t.TempDir(), "no-such-edge.o")
	s, err := dataplaneSide(env, "old", missing, missing)
	if err == nil {
		s.Close()
		t.Fatal("dataplaneSide with a missing object: no error")
	}
	if !strings.Contains(err.Error(), "no-such-edge.o") {
		t.Errorf("error %q does not name the missing object", err)
	}
}

// TestPerPacketSuitesIPv6Rows runs bench dataplane and bench lb once,
// briefly (the figures mean nothing at this repeat), so a broken row fails
// here: every path must take its intended action through the real
// programs and its replayed instructions must match the kernel's run (the
// suites check both), and the IPv6 rows must come out with their
// instruction counts and, where they have an IPv4 twin, the comparison of
// the two costs above the floor.
func TestPerPacketSuitesIPv6Rows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, namespaces)")
	}
	dp, err := Dataplane(DataplaneOptions{Repeat: 2000, Rounds: 1, NoMonitor: true})
	if err != nil {
		t.Fatalf("bench dataplane: %v", err)
	}
	lb, err := LB(LBOptions{Repeat: 2000, Rounds: 1})
	if err != nil {
		t.Fatalf("bench lb: %v", err)
	}
	rows := map[string]Result{}
	for _, r := range append(dp, lb...) {
		rows[r.Suite+"/"+r.Name] = r
	}
	find := func(suite, prefix string) (Result, bool) {
		for k, r := range rows {
			if strings.HasPrefix(k, suite+"/"+prefix) {
				return r, true
			}
		}
		return Result{}, false
	}
	for _, c := range []struct {
		suite, path, twin string // path and twin: name prefixes
	}{
		{"dataplane", "edge_encap6 ", "edge_encap "},
		{"dataplane", "edge_decap6 ", "edge_decap "},
		{"dataplane", "agent_decap_dnat6 ", "agent_decap_dnat "},
		{"dataplane", "agent_snat_encap6 ", "agent_snat_encap "},
		{"dataplane", "agent_decap_dnat66_vip ", ""},
		{"dataplane", "agent_snat66_vip_encap ", ""},
		{"lb", "lb_ct_hit_encap6 ", "lb_ct_hit_encap "},
		{"lb", "lb_encap_reply6 ", "lb_encap_reply "},
		{"lb", "lb_new_flow_encap6 ", "lb_new_flow_encap "},
		{"lb", "lb_ct_hit_nat6 ", "lb_ct_hit_nat "},
		{"lb", "lb_new_flow_nat6 ", "lb_new_flow_nat "},
		{"lb", "lb_nat_reply6 ", "lb_nat_reply "},
	} {
		r, ok := find(c.suite, c.path)
		if !ok || !r.PerPacket || r.Value <= 0 {
			t.Errorf("%s: no timed row %q (%+v)", c.suite, c.path, r)
			continue
		}
		n, ok := find(c.suite, "insns "+c.path)
		if !ok || n.Value < 100 {
			t.Errorf("%s: no instruction count for %q (%+v)", c.suite, c.path, n)
		}
		if c.twin == "" {
			continue
		}
		tw, ok := find(c.suite, c.twin)
		v, ok2 := find(c.suite, "v6_vs_v4 "+c.path)
		if !ok || !ok2 {
			t.Errorf("%s: %q has no twin row %q or no comparison row", c.suite, c.path, c.twin)
			continue
		}
		if v.Value != r.AboveFloor || v.BaselineValue != tw.AboveFloor || v.Baseline != tw.Name || v.Ratio != ratio(r.AboveFloor, tw.AboveFloor) {
			t.Errorf("%s: comparison %+v does not compare %q (%.2f above the floor) with %q (%.2f)", c.suite, v, r.Name, r.AboveFloor, tw.Name, tw.AboveFloor)
		}
	}
	// The new-flow rows must still have emptied the connection table of
	// their entries (their after hooks fail the suite otherwise) and the
	// IPv4 rows still be there beside the IPv6 ones.
	for _, p := range []string{"lb_new_flow_nat ", "lb_ct_hit_nat ", "lb_nat_reply "} {
		if _, ok := find("lb", p); !ok {
			t.Errorf("lb: no row %q", p)
		}
	}
}

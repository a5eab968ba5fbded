package dataplane

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

// cDefines reads the integer #defines of bpf/lib/consts.h (a number or
// (1 << N)); the first definition of a name wins.
func cDefines(t *testing.T) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile("../../bpf/lib/consts.h")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^#define ([A-Z_0-9]+) (?:(\d+)|\(1 << (\d+)\))(?:\s|$)`)
	out := map[string]uint64{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if _, ok := out[m[1]]; ok {
			continue
		}
		if m[2] != "" {
			out[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
		} else {
			n, _ := strconv.Atoi(m[3])
			out[m[1]] = 1 << n
		}
	}
	return out
}

// TestCapacitiesMatchC holds every Go capacity constant to its #define in
// bpf/lib/consts.h, and every map of the committed objects to the
// #define maps.h sizes it with: the capacities are defined once, in C,
// and a change on one side fails here until the other follows.
func TestCapacitiesMatchC(t *testing.T) {
	c := cDefines(t)
	for _, k := range []struct {
		name   string
		goVal  uint64
		define string
	}{
		{"lbplan.BackendsMax", lbplan.BackendsMax, "LB_BACKENDS_MAX"},
		{"lbplan.TablesMax", lbplan.TablesMax, "LB_TABLES_MAX"},
		{"lbplan.ListenersMax", lbplan.ListenersMax, "LB_LISTENERS_MAX"},
		{"lbplan.Listeners6Max", lbplan.Listeners6Max, "LB_LISTENERS6_MAX"},
		{"lbplan.RangesMax", lbplan.RangesMax, "LB_RANGES_MAX"},
		{"lbplan.RangeSetsMax", lbplan.RangeSetsMax, "LB_RANGE_SETS_MAX"},
		{"lbplan.NATBackendsMax", lbplan.NATBackendsMax, "LB_NAT_BACKENDS_MAX"},
		{"model.MaxRanges", model.MaxRanges, "LB_RANGES_MAX"},
		{"dataplane.LBRangesMax", LBRangesMax, "LB_RANGES_MAX"},
		{"the lb_ranges struct's array", uint64(len(edgeLbRanges{}.R)), "LB_RANGES_MAX"},
		{"model.DefaultTableSize", model.DefaultTableSize, "LB_TABLE_DEFAULT_M"},
		{"dataplane.ARPAddrsMax", ARPAddrsMax, "ARP_ADDRS_MAX"},
		{"lbplan.ModeEncap", lbplan.ModeEncap, "LB_MODE_ENCAP"},
		{"lbplan.ModeNAT", lbplan.ModeNAT, "LB_MODE_NAT"},
		{"model.MaxSetEdges", model.MaxSetEdges, "EDGE_SET_MAX"},
		{"dataplane.MaxGroupMembers", MaxGroupMembers, "EDGE_SET_MAX"},
		{"the agent_group struct's array", uint64(len(agentAgentGroup{}.Edges)), "EDGE_SET_MAX"},
		{"dataplane.AgentGroupPin", AgentGroupPin, "AGENT_GROUP_PIN"},
		{"dataplane.AgentGroupMax", AgentGroupMax, "AGENT_GROUP_MAX"},
		{"dataplane.LimitsMax", LimitsMax, "RL_DST_MAX"},
		{"dataplane.EIPMaxDefault", EIPMaxDefault, "EIP_MAX"},
		{"dataplane.EIPMaxDefault (fw_dst)", EIPMaxDefault, "FW_DST_MAX"},
		{"dataplane.ConnMaxDefault", ConnMaxDefault, "CT_MAX"},
		{"dataplane.ListenerMaxDefault", ListenerMaxDefault, "LB_LISTENERS_MAX"},
		{"dataplane.BackendMaxDefault", BackendMaxDefault, "LB_BACKENDS_MAX"},
		{"dataplane.BackendMaxDefault (lb_nat_backends)", BackendMaxDefault, "LB_NAT_BACKENDS_MAX"},
		{"dataplane.BackendMaxDefault (hc_marks, hc_marks6)", BackendMaxDefault, "HC_MARKS_MAX"},
		{"twice dataplane.BackendMaxDefault (hc_peers)", 2 * BackendMaxDefault, "HC_PEERS_MAX"},
		{"dataplane.AgentEIPMaxDefault", AgentEIPMaxDefault, "AGENT_EIP_MAX"},
		{"dataplane.AgentEIPMaxDefault (agent_guests)", AgentEIPMaxDefault, "AGENT_GUEST_MAX"},
		{"dataplane.AgentEIPMaxDefault (agent eip_bw)", AgentEIPMaxDefault, "EIP_BW_MAX"},
		{"dataplane.BandwidthMax", BandwidthMax, "EIP_BW_MAX"},
		{"fwplan.RulesMax", fwplan.RulesMax, "FW_RULES_MAX"},
		{"model.MaxFirewallRules", model.MaxFirewallRules, "FW_RULES_MAX"},
		{"fwplan.EntriesMax", fwplan.EntriesMax, "FW_ENTRIES_MAX"},
		{"fwplan.DestsMax", fwplan.DestsMax, "FW_DST_MAX"},
		{"fwplan.MaxRefs", fwplan.MaxRefs, "FW_REFS"},
		{"the fw_entry struct's array", uint64(len(edgeFwEntry{}.R)), "FW_REFS"},
		{"fwplan.ScopeMax", fwplan.ScopeMax, "FW_SCOPE_MASK"},
		{"fwplan.Deny", fwplan.Deny, "FW_DENY"},
		{"fwplan.BloomWords", fwplan.BloomWords, "FW_BLOOM_WORDS"},
		{"fwplan.MaxLens", fwplan.MaxLens, "FW_LENS"},
		{"the fw_dst struct's lens", uint64(len(edgeFwDst{}.Lens)), "FW_LENS"},
		{"fwplan.NoBloom", fwplan.NoBloom, "FW_NO_BLOOM"},
		{"fwplan.Allow", fwplan.Allow, "FW_ALLOW"},
		{"dataplane.fwCGlobal", fwCGlobal, "FW_C_GLOBAL"},
		{"dataplane.fwCPrivate", fwCPrivate, "FW_C_PRIVATE"},
	} {
		if v, ok := c[k.define]; !ok || v != k.goVal {
			t.Errorf("%s = %d, %s = %d (defined: %v)", k.name, k.goVal, k.define, v, ok)
		}
	}

	edge, err := loadEdge()
	if err != nil {
		t.Fatal(err)
	}
	agent, err := loadAgent()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		spec   *ebpf.CollectionSpec
		obj    string
		m      string
		define string
		want   uint64 // when not a #define of consts.h
	}{
		{edge, "edge", "eip_routes", "EIP_MAX", 0},
		{edge, "edge", "eip_stats", "EIP_MAX", 0},
		{edge, "edge", "eip_bw_slots", "EIP_MAX", 0},
		{edge, "edge", "fw_dst", "FW_DST_MAX", 0},
		{edge, "edge", "lb_listeners", "LB_LISTENERS_MAX", 0},
		{edge, "edge", "lb_ranges", "LB_RANGE_SETS_MAX", 0},
		{edge, "edge", "lb_tables", "LB_TABLES_MAX", 0},
		{edge, "edge", "lb_table_owner", "LB_TABLES_MAX", 0},
		{edge, "edge", "lb_backends", "LB_BACKENDS_MAX", 0},
		{edge, "edge", "lb_be_stats", "LB_BACKENDS_MAX", 0},
		{edge, "edge", "lb_conns", "CT_MAX", 0},
		{edge, "edge", "lb_nat_conns", "CT_MAX", 0},
		{edge, "edge", "lb_nat_backends", "LB_NAT_BACKENDS_MAX", 0},
		{edge, "edge", "arp_ifaces", "ARP_IFACES_MAX", 0},
		{edge, "edge", "arp_addrs", "ARP_ADDRS_MAX", 0},
		{edge, "edge", "arp_owner", "", 1},
		{edge, "edge", "lb_info", "", uint64(len(LBInfo))},
		{edge, "edge", "stats", "", uint64(len(statNames))},
		{edge, "edge", "nh_cache", "", 16384},
		{agent, "agent", "agent_eips", "AGENT_EIP_MAX", 0},
		{agent, "agent", "eip_stats", "AGENT_EIP_MAX", 0},
		{agent, "agent", "agent_guests", "AGENT_GUEST_MAX", 0},
		{agent, "agent", "agent_ifaddrs", "AGENT_IFADDR_MAX", 0},
		{agent, "agent", "agent_svc", "AGENT_SVC_MAX", 0},
		{agent, "agent", "agent_groups", "AGENT_GROUP_MAX", 0},
		{agent, "agent", "agent_edge_set", "EDGE_MAX", 0},
		{agent, "agent", "agent_local", "LOCAL_PREFIX_MAX", 0},
		{agent, "agent", "agent_flows", "AGENT_FLOW_MAX", 0},
		{agent, "agent", "agent_flows6", "AGENT_FLOW6_MAX", 0},
		{agent, "agent", "agent_svc6", "AGENT_SVC6_MAX", 0},
		{agent, "agent", "stats", "", uint64(len(statNames))},
		{agent, "agent", "nh_cache", "", 4096},
	} {
		want := k.want
		if k.define != "" {
			var ok bool
			if want, ok = c[k.define]; !ok {
				t.Errorf("%s is not defined in consts.h", k.define)
				continue
			}
		}
		ms, ok := k.spec.Maps[k.m]
		if !ok {
			t.Errorf("%s has no map %s", k.obj, k.m)
			continue
		}
		if uint64(ms.MaxEntries) != want {
			t.Errorf("%s map %s holds %d, want %d (%s)", k.obj, k.m, ms.MaxEntries, want, k.define)
		}
	}
	if in := edge.Maps["lb_tables"].InnerMap; in == nil || uint64(in.MaxEntries) != c["LB_TABLE_DEFAULT_M"] {
		t.Errorf("lb_tables' inner template: %+v", in)
	}
}

// TestMapsInOneHeader: every map of the edge and agent objects is defined
// in bpf/lib/maps.h, with a comment right above it, and no other file of
// the data plane defines one (bench.c, the benchmark harness, keeps its
// generator's own).
func TestMapsInOneHeader(t *testing.T) {
	b, err := os.ReadFile("../../bpf/lib/maps.h")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	def := regexp.MustCompile(`(?s)(\*/\n)?struct \{\n(?:\t[^\n]*\n)+\} ([a-z_0-9]+) SEC\("\.maps"\);`)
	defined := map[string]bool{}
	for _, m := range def.FindAllStringSubmatch(src, -1) {
		if m[1] == "" {
			t.Errorf("maps.h: map %s has no comment above it", m[2])
		}
		defined[m[2]] = true
	}
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"edge": loadEdge, "agent": loadAgent} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for m := range spec.Maps {
			if !strings.HasPrefix(m, ".") && !defined[m] {
				t.Errorf("%s map %s is not defined in bpf/lib/maps.h", name, m)
			}
		}
	}
	files := []string{"../../bpf/edge.c", "../../bpf/agent.c"}
	libs, _ := os.ReadDir("../../bpf/lib")
	for _, f := range libs {
		if f.Name() != "maps.h" {
			files = append(files, "../../bpf/lib/"+f.Name())
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `SEC(".maps")`) {
			t.Errorf("%s defines a map: maps belong in bpf/lib/maps.h", f)
		}
	}
}

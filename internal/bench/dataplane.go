package bench

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// Addresses used by the data-plane suite (the dptest bed's).
const (
	benchEIP    = "198.51.100.7"
	benchHost   = "198.18.21.1"
	benchClient = "203.0.113.10"
	benchEdge   = "198.18.1.1"
	benchVSID   = 5001
	// The IPv6 EIP (the edge's route, the agent's NAT66) and its guest;
	// the guest link's IPv6 route and neighbour are the bed's
	// (dptest.Env.GuestIPv6).
	// An EIP on a host of the IPv6 underlay (this version only: the
	// edge's route names it in ul6_hosts), routed via the underlay's
	// IPv6 router (dptest.FabAddr6).
	benchEIPul6   = "198.51.100.8"
	benchHost6    = "2001:db8:fa::21"
	benchHost6Net = "2001:db8:fa::/48"
	// The edge a host of the IPv6 underlay reaches (the agent's ul6 rows:
	// its second agent, of underlay dptest.UlAddr6), through the route
	// to benchHost6Net.
	benchEdge6    = "2001:db8:fa::e1"
	benchEIP6     = "2001:db8:e1::7"
	benchPriv6    = "2001:db8:f0::1"
	benchClient6  = "2001:db8:c::10"
	benchPriv6Net = "2001:db8:f0::/64"
	// The IPv6 VIP the agent serves (tcp:443 -> port 8443 of a guest
	// with no IPv6 EIP: its replies go by agent_flows6 alone), the guest
	// named by its IPv4 address in the edge's inner destination MAC
	// (02:01 + the address).
	benchVIP6       = "2001:db8:e2::80"
	benchSvcGuest   = "198.19.21.8"
	benchSvcGuest6  = "2001:db8:f0::8"
	benchSvcGuestMC = "02:01:c6:13:15:08"
)

// DataplaneOptions tune the suite.
type DataplaneOptions struct {
	Repeat int // runs per measurement (BPF_PROG_TEST_RUN repeat)
	Rounds int // measurements per path; the fastest is reported
	// BaselineObjects is a directory holding an earlier version's
	// edge_bpfel.o and agent_bpfel.o: every path is also timed with them,
	// interleaved with this version's, and reported as before/cut.
	BaselineObjects string
	// Only times the paths whose name contains it (for profiling one path
	// with perf while the suite runs it).
	Only string
	// Soak: after the timings, run the Only paths alone this long.
	Soak time.Duration
	// JITLines: with Soak, write the soaked programs' JIT address ->
	// source line table to this file.
	JITLines string
	// NoMonitor skips the monitor's cost (edge_drop and edge_encap with
	// the monitor off, on without a listener, on with one).
	NoMonitor bool
}

// Dataplane measures ns/packet of every edge and agent path with
// BPF_PROG_TEST_RUN repeat mode, next to the harness's own cost and the
// XDP_TX MAC-swap floor measured in the same run, inside a namespace whose
// routes and neighbours make bpf_fib_lookup succeed as on a real node.
func Dataplane(o DataplaneOptions) (out []Result, err error) {
	if o.Repeat == 0 {
		o.Repeat = 2_000_000
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := env.GuestIPv6(benchPriv6, benchPriv6Net); err != nil {
		return nil, err
	}
	// The edge's IPv6 return path routes to the Internet side's IPv6
	// default gateway (dptest.Env.InternetIPv6).
	if err := env.InternetIPv6(); err != nil {
		return nil, err
	}
	// The IPv6 underlay's host, through the underlay router.
	if err := env.Node.Route(benchHost6Net, dptest.FabAddr6, dptest.UlDev); err != nil {
		return nil, err
	}
	// The IPv6 VIP's backend guest: a neighbour on the guest link.
	if err := env.GuestIPv6(benchSvcGuest6); err != nil {
		return nil, err
	}

	cur, err := dataplaneSide(env, "", "", "")
	if err != nil {
		return nil, err
	}
	defer cur.Close()
	sides := []*side{cur}
	if o.BaselineObjects != "" {
		ef, af, err := baselineFiles(o.BaselineObjects)
		if err != nil {
			return nil, err
		}
		base, err := dataplaneSide(env, "before", ef, af)
		if err != nil {
			return nil, err
		}
		defer base.Close()
		sides = append(sides, base)
	}

	const size = 128
	inetTCP := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, size)
	inetTCP6 := tcpFrame6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, benchEIP6, 40000, 80, size)
	notOurs := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, "198.51.100.99", 40000, 80, size)
	badCsum := append([]byte(nil), inetTCP...)
	badCsum[14+10] ^= 0xff
	reply := tcpFrame("02:cc:00:00:00:02", "02:00:00:00:00:fe", benchEIP, benchClient, 80, 40000, size)
	fromHost := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchHost, dptest.UlAddr, benchVSID<<8|7, reply)
	reply6 := tcpFrame6("02:cc:00:00:00:02", "02:00:00:00:00:fe", benchEIP6, benchClient6, 80, 40000, size)
	fromHost6 := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchHost, dptest.UlAddr, benchVSID<<8|7, reply6)
	inetTCPul6 := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIPul6, 40000, 80, size)
	fromHostUl6 := nvgre6Frame(dptest.FabMAC, dptest.UlMAC, benchHost6, dptest.UlAddr6, benchVSID<<8|7,
		tcpFrame("02:cc:00:00:00:02", "02:00:00:00:00:fe", benchEIPul6, benchClient, 80, 40000, size))
	toAgent := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchEdge, dptest.UlAddr, benchVSID<<8|7,
		tcpFrame("02:00:00:00:00:fe", "02:00:c6:33:64:07", benchClient, benchEIP, 40000, 80, size))
	fromGuest := tcpFrame(dptest.VMMAC, dptest.GuestMAC, dptest.GuestAddr, benchClient, 80, 40000, size)
	toAgent6 := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchEdge, dptest.UlAddr, benchVSID<<8|7,
		tcpFrame6("02:00:00:00:00:fe", "02:00:c6:33:64:07", benchClient6, benchEIP6, 40000, 80, size))
	fromGuest6 := tcpFrame6(dptest.VMMAC, dptest.GuestMAC, benchPriv6, benchClient6, 80, 40000, size)
	// An established flow to the IPv6 VIP (dataplaneSide's SYN recorded it
	// in agent_flows6), and the guest's answer on it.
	toAgentSvc6 := svc6FromEdge(benchVIP6, "ack", size)
	fromSvcGuest6 := tcpFrameFlags6(dptest.VMMAC, dptest.GuestMAC, benchSvcGuest6, benchClient6, 8443, 40000, size, "ack")

	// The agent of a host of the IPv6 underlay (dataplaneSide's second
	// agent): the IPv4 EIP's packet from benchEdge6 in NVGRE over IPv6,
	// and the guest's answer to it.
	toAgentUl6 := nvgre6Frame(dptest.FabMAC, dptest.UlMAC, benchEdge6, dptest.UlAddr6, benchVSID<<8|7,
		tcpFrame("02:00:00:00:00:fe", "02:00:c6:33:64:07", benchClient, benchEIP, 40000, 80, size))

	// bench.c's, the same for both sides.
	for _, sd := range sides {
		sd.progs["bare_encap"] = b.BareEncap()
	}
	cases := []nsCase{
		// xdp_bare_encap restores the frame itself (bench_restore): its
		// figure is bare - restore_only + pass - adjust, as before.
		{name: "bare_nvgre_encap (constant headers, no lookups)", prog: "bare_encap", dev: dptest.ExtDev, frame: inetTCP, action: actTX},
		{name: "edge_encap (Internet to EIP, TCP)", prog: "edge", dev: dptest.ExtDev, frame: inetTCP, action: actRedirect, chain: true, moves: true, target: "<= 4x"},
		{name: "edge_encap6 (Internet to IPv6 EIP, TCP; IPv4 underlay)", prog: "edge", dev: dptest.ExtDev, frame: inetTCP6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "this version only: the baseline has no IPv6 EIP path", target: "within 10 % of edge_encap above the floor",
			twin: "edge_encap (Internet to EIP, TCP)"},
		{name: "edge_decap (host to Internet)", prog: "edge", dev: dptest.UlDev, frame: fromHost, action: actRedirect, chain: true, moves: true},
		{name: "edge_decap6 (host to Internet, IPv6 guest; IPv4 underlay)", prog: "edge", dev: dptest.UlDev, frame: fromHost6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "this version only: the baseline has no IPv6 return path", target: "within 10 % of edge_decap above the floor",
			twin: "edge_decap (host to Internet)"},
		{name: "edge_encap_ul6 (Internet to EIP, TCP; IPv6 underlay)", prog: "edge", dev: dptest.ExtDev, frame: inetTCPul6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "the host named in ul6_hosts: the IPv4 FIB miss (fib4_miss answers FIB_RET_UL6), then tunnel6 from xdp_edge's frame, nh_cache6; this version only",
			twin: "edge_encap (Internet to EIP, TCP)"},
		{name: "edge_decap_ul6 (host to Internet; NVGRE over IPv6)", prog: "edge", dev: dptest.UlDev, frame: fromHostUl6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "the outer source's name from ul6_hosts, then edge_from_host as over IPv4; this version only",
			twin: "edge_decap (host to Internet)"},
		{name: "edge_pass (not an EIP)", prog: "edge", dev: dptest.ExtDev, frame: notOurs, action: actPass},
		{name: "edge_drop (bad IP checksum)", prog: "edge", dev: dptest.ExtDev, frame: badCsum, action: actDrop},
		{name: "agent_decap_dnat (edge to guest)", prog: "agent_underlay", dev: dptest.UlDev, frame: toAgent, action: actRedirect, chain: true, moves: true},
		{name: "agent_snat_encap (guest to edge)", prog: "agent_guest", dev: dptest.GuestDev, frame: fromGuest, action: actRedirect, chain: true, moves: true},
		{name: "agent_decap_dnat6 (edge to guest, IPv6 EIP)", prog: "agent_underlay", dev: dptest.UlDev, frame: toAgent6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "its next hop through the IPv6 next-hop cache (nh_cache6)", target: "within 10 % of agent_decap_dnat above the floor",
			twin: "agent_decap_dnat (edge to guest)"},
		{name: "agent_snat_encap6 (guest to edge, IPv6 EIP)", prog: "agent_guest", dev: dptest.GuestDev, frame: fromGuest6, action: actRedirect, chain: true, moves: true, cur: true,
			twin: "agent_snat_encap (guest to edge)"},
		{name: "agent_decap_dnat66_vip (edge to guest, IPv6 VIP: agent_svc6, flow in agent_flows6)", prog: "agent_underlay", dev: dptest.UlDev, frame: toAgentSvc6,
			action: actRedirect, chain: true, moves: true, cur: true,
			note: "an established flow (its SYN recorded it before the timings): agent_svc6 and the flow found, nothing written; this version only"},
		{name: "agent_snat66_vip_encap (guest to edge, IPv6 VIP reply by agent_flows6)", prog: "agent_guest", dev: dptest.GuestDev, frame: fromSvcGuest6,
			action: actRedirect, chain: true, moves: true, cur: true,
			note: "a guest with no IPv6 EIP: the reply goes by its flow alone, back to the VIP's port 443 and the edge the flow came from; this version only"},
		{name: "agent_decap_ul6 (edge to guest; NVGRE over IPv6)", prog: "agent_underlay_ul6", dev: dptest.UlDev, frame: toAgentUl6, action: actRedirect, chain: true, moves: true, cur: true,
			note: "a host of the IPv6 underlay: agent_ul6_in parses the outer IPv6 and names the edge (ul6_hosts), then agent_from_edge as over IPv4; this version only",
			twin: "agent_decap_dnat (edge to guest)"},
		{name: "agent_encap_ul6 (guest to edge; NVGRE over IPv6)", prog: "agent_guest_ul6", dev: dptest.GuestDev, frame: fromGuest, action: actRedirect, chain: true, moves: true, cur: true,
			note: "the edge's name: the IPv4 FIB miss (FIB_RET_UL6), agent_fib6 (ul6_hosts, nh_cache6), agent_push6; this version only",
			twin: "agent_snat_encap (guest to edge)"},
	}
	n := newNSBed(env, b, o.Repeat)
	n.only, n.soak, n.lines = o.Only, o.Soak, o.JITLines
	// Bare encap restores the frame itself (bench_restore): the restore
	// alone is timed with it, in the same round.
	cases[0].before = func(*side) error {
		if err := b.SetBenchFrame(inetTCP); err != nil {
			return err
		}
		v, err := timeProg(env, b.Restore(), dptest.ExtDev, inetTCP, o.Repeat, actTX)
		if err != nil {
			return fmt.Errorf("xdp_restore: %w", err)
		}
		n.add("restore", v)
		return nil
	}
	out, err = n.run("dataplane", o.Rounds, sides, cases)
	if err != nil {
		return nil, err
	}
	if !o.NoMonitor && o.Only == "" && o.Soak == 0 {
		var mc []nsCase
		for _, c := range cases {
			if c.prog == "edge" && !c.cur && (c.action == actDrop || c.dev == dptest.ExtDev && c.action == actRedirect) {
				mc = append(mc, c)
			}
		}
		m, err := monitorCost(n, cur, max(o.Rounds, 7), mc)
		if err != nil {
			return nil, fmt.Errorf("monitor cost: %w", err)
		}
		defer func() { out = append(out, m...) }()
	}
	for i := range out {
		if out[i].Name == cases[0].name && n.s["restore"] != nil {
			out[i].Value += n.min("pass") - n.min("restore") - n.adjust()
			out[i].AboveFloor = out[i].Value - out[i].Floor
			out[i].Ratio = out[i].Value / out[i].Floor
			out[i].HasBefore = false
		}
	}
	return out, nil
}

// dataplaneSide loads and programs an edge (100,001 routes) and an agent
// (one EIP), from this build or from the given object files.
func dataplaneSide(env *dptest.Env, name, edgeFile, agentFile string) (s *side, err error) {
	s = &side{name: name, progs: map[string]*ebpf.Program{}}
	// The error returns below set s to nil: close what was opened
	// through a copy, or the real error hides behind a nil dereference.
	opened := s
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	var e *dataplane.Edge
	var a *dataplane.Agent
	var missing dataplane.Missing
	if edgeFile == "" {
		if e, err = dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1 << 20}); err != nil {
			return nil, err
		}
		s.close = append(s.close, e.Close)
		if a, err = dataplane.LoadAgent(dataplane.LoadOptions{}); err != nil {
			return nil, err
		}
		s.close = append(s.close, a.Close)
	} else {
		var m2 dataplane.Missing
		if e, missing, err = dataplane.LoadEdgeObject(edgeFile, dataplane.LoadOptions{EIPMax: 1 << 20}); err != nil {
			return nil, err
		}
		s.close = append(s.close, e.Close)
		if a, m2, err = dataplane.LoadAgentObject(agentFile); err != nil {
			return nil, err
		}
		s.close = append(s.close, a.Close)
		missing = append(missing, m2...)
		defer guardMissing(missing, &err)
	}
	ecfg := dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.ExtAddr),
		HashSeed: 1, ICMPRate: 1000, ICMPBurst: 100, ICMPTimeExceeded: true, GatewayMAC: dptest.MustMAC("02:00:00:00:00:fe")}
	if edgeFile == "" {
		ecfg.Underlay6 = netip.MustParseAddr(dptest.UlAddr6)
	}
	if err := e.SetConfig(ecfg); err != nil {
		return nil, err
	}
	// A full-size route table, so lookups hit a populated hash.
	routes := map[netip.Addr]dataplane.Route{}
	for i := 0; i < 100_000; i++ {
		a := netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)})
		routes[a] = dataplane.Route{Host: netip.MustParseAddr(benchHost), VSID: benchVSID, StatsIdx: uint32(i + 1)}
	}
	routes[netip.MustParseAddr(benchEIP)] = dataplane.Route{Host: netip.MustParseAddr(benchHost), VSID: benchVSID, StatsIdx: 0}
	// The IPv6 EIP (edge_encap6; the baseline's program passes IPv6
	// before any route lookup, so the entry costs it nothing).
	routes[netip.MustParseAddr(benchEIP6)] = dataplane.Route{Host: netip.MustParseAddr(benchHost), VSID: benchVSID, StatsIdx: 100_001}
	if edgeFile == "" {
		routes[netip.MustParseAddr(benchEIPul6)] = dataplane.Route{Host: netip.MustParseAddr(benchHost6), VSID: benchVSID, StatsIdx: 100_002}
	}
	if err := e.PutRoutes(routes); err != nil {
		return nil, err
	}
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		return nil, err
	}
	if err := a.SetConfig(dataplane.AgentConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.UlAddr),
		HashSeed: 1, Edges: []netip.Addr{netip.MustParseAddr(benchEdge)}, ICMPRate: 1000, ICMPBurst: 100}); err != nil {
		return nil, err
	}
	if err := a.SetGroup(0, dataplane.AgentGroup{Members: []netip.Addr{netip.MustParseAddr(benchEdge)}}); err != nil {
		return nil, err
	}
	if err := a.PutEIP(dataplane.AgentEIP{EIP: netip.MustParseAddr(benchEIP), Private: netip.MustParseAddr(dptest.GuestAddr), VSID: benchVSID, StatsIdx: 1, Ifindex: uint32(g1)}); err != nil {
		return nil, err
	}
	if err := a.SetIfAddrs([]dataplane.IfAddr{{Ifindex: uint32(g1), Addr: netip.MustParseAddr(dptest.GuestAddr)}}); err != nil {
		return nil, err
	}
	if agentFile == "" {
		if err := a.PutEIP(dataplane.AgentEIP{EIP: netip.MustParseAddr(benchEIP6), Private: netip.MustParseAddr(benchPriv6), VSID: benchVSID, StatsIdx: 2, Ifindex: uint32(g1)}); err != nil {
			return nil, err
		}
		// The IPv6 VIP (the baseline objects may have no agent_svc6):
		// tcp:443 -> benchSvcGuest6:8443, its flow's SYN through the
		// program so the timed packets find it in agent_flows6.
		if err := a.PutService(dataplane.AgentService{VIP: netip.MustParseAddr(benchVIP6), Guest: netip.MustParseAddr(benchSvcGuest),
			Guest6: netip.MustParseAddr(benchSvcGuest6), Ifindex: uint32(g1), Proto: dataplane.ProtoTCP, VPort: 443, BPort: 8443, VSID: benchVSID}); err != nil {
			return nil, err
		}
		r, err := env.Run(a.UnderlayProgram(), dptest.UlDev, svc6FromEdge(benchVIP6, "syn", 128))
		if err != nil {
			return nil, err
		}
		if r.Action != actRedirect {
			return nil, fmt.Errorf("the IPv6 VIP flow's SYN to the agent: action %d, want %d (redirect)", r.Action, actRedirect)
		}
	}
	s.edge = e
	s.progs["edge"] = e.Program()
	s.progs["agent_underlay"] = a.UnderlayProgram()
	s.progs["agent_guest"] = a.GuestProgram()
	s.maps = map[string]map[string]*ebpf.Map{"edge": e.Maps(), "agent_underlay": a.Maps(), "agent_guest": a.Maps()}
	if agentFile == "" {
		// A second agent, of a host of the IPv6 underlay (the ul6 rows).
		a6, err := ul6Agent(g1)
		if err != nil {
			return nil, err
		}
		s.close = append(s.close, a6.Close)
		s.progs["agent_underlay_ul6"] = a6.UnderlayProgram()
		s.progs["agent_guest_ul6"] = a6.GuestProgram()
		s.maps["agent_underlay_ul6"], s.maps["agent_guest_ul6"] = a6.Maps(), a6.Maps()
	}
	if s.specs, err = progSpecs(edgeFile, agentFile); err != nil {
		return nil, err
	}
	return s, nil
}

// ul6Agent is an agent of a host of the IPv6 underlay (dptest.UlAddr6):
// its one edge benchEdge6 (named in its ul6_hosts), the IPv4 EIP benchEIP
// to the guest on ifindex g1.
func ul6Agent(g1 int) (*dataplane.Agent, error) {
	a, err := dataplane.LoadAgent(dataplane.LoadOptions{})
	if err != nil {
		return nil, err
	}
	edge := netip.MustParseAddr(benchEdge6)
	for _, f := range []func() error{
		func() error {
			return a.SetConfig(dataplane.AgentConfig{Underlay: netip.MustParseAddr(dptest.UlAddr6), HashSeed: 1, Edges: []netip.Addr{edge},
				ICMPRate: 1000, ICMPBurst: 100})
		},
		func() error { return a.SetGroup(0, dataplane.AgentGroup{Members: []netip.Addr{edge}}) },
		func() error {
			return a.PutEIP(dataplane.AgentEIP{EIP: netip.MustParseAddr(benchEIP), Private: netip.MustParseAddr(dptest.GuestAddr), VSID: benchVSID,
				StatsIdx: 1, Ifindex: uint32(g1)})
		},
		func() error {
			return a.SetIfAddrs([]dataplane.IfAddr{{Ifindex: uint32(g1), Addr: netip.MustParseAddr(dptest.GuestAddr)}})
		},
	} {
		if err := f(); err != nil {
			a.Close()
			return nil, fmt.Errorf("the IPv6 underlay's agent: %w", err)
		}
	}
	return a, nil
}

// svc6FromEdge is a TCP packet (flags "syn" or "ack") from benchClient6
// port 40000 to vip port 443, as an edge sends it to the agent for the
// backend benchSvcGuest: NVGRE from benchEdge, inner destination MAC
// 02:01 + the guest's IPv4 address.
func svc6FromEdge(vip, flags string, size int) []byte {
	return nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchEdge, dptest.UlAddr, benchVSID<<8|0x21,
		tcpFrameFlags6("02:00:00:00:00:fe", benchSvcGuestMC, benchClient6, vip, 40000, 443, size, flags))
}

// timeProg runs prog repeat times on frame as if it arrived on dev of the
// bed and returns ns per run, checking the program took the intended path.
func timeProg(env *dptest.Env, prog *ebpf.Program, dev string, frame []byte, repeat int, want uint32) (float64, error) {
	ns, ret, err := env.Time(prog, dev, frame, uint32(repeat))
	if err != nil {
		return 0, err
	}
	if ret != want {
		return 0, fmt.Errorf("program returned action %d, want %d: it is not taking the measured path", ret, want)
	}
	return ns, nil
}

// progSpecs are the compiled programs under test by progs key: this
// build's, or those of the given object files.
func progSpecs(edgeFile, agentFile string) (map[string]*ebpf.ProgramSpec, error) {
	all := map[string]*ebpf.ProgramSpec{}
	if edgeFile == "" {
		specs, err := dataplane.ProgramSpecs()
		if err != nil {
			return nil, err
		}
		all = specs
	} else {
		for _, f := range []string{edgeFile, agentFile} {
			if f == "" {
				continue
			}
			cs, err := ebpf.LoadCollectionSpec(f)
			if err != nil {
				return nil, err
			}
			for k, p := range cs.Programs {
				all[k] = p
			}
		}
	}
	out := map[string]*ebpf.ProgramSpec{}
	for key, name := range map[string]string{"edge": "xdp_edge", "agent_underlay": "xdp_agent_underlay", "agent_guest": "xdp_agent_guest",
		"agent_underlay_ul6": "xdp_agent_underlay", "agent_guest_ul6": "xdp_agent_guest"} {
		if p := all[name]; p != nil {
			out[key] = p
		}
	}
	return out, nil
}

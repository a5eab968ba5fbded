package dataplane

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The agents' half of the IPv6 underlay (issue 21): a host whose underlay
// address is IPv6 (dptest.UlAddr6) takes NVGRE over IPv6 from its edges'
// IPv6 underlay addresses and sends its guests' packets to them over
// IPv6, the edges named in agent_edge_set, agent_groups and the flows by
// their ul6_hosts names (0.0.0.0/8 + an index), as the edge names its
// IPv6 hosts.
const (
	edge6A      = "2001:db8:e0::a" // edges of the IPv6 underlay, via the underlay router
	edge6B      = "2001:db8:e0::b"
	edge6Small  = "2001:db8:e2::c" // one behind a route with MTU ul6MTU
	edge6Net    = "2001:db8:e0::/48"
	edge6Small0 = "2001:db8:e2::/48"
	edge6Stray  = "2001:db8:e0::99" // no edge of the host's
)

// newAgentUl6Bed is newAgent6Bed on an IPv6 underlay: the agent's
// underlay address dptest.UlAddr6 (no IPv4 one), its edges edge6A and
// edge6B (group 0) and edge6Small, routed through the underlay router;
// its ICMPv6 errors from its underlay address (as the agent role
// defaults it).
func newAgentUl6Bed(t *testing.T) (*dptest.Env, *Agent) {
	t.Helper()
	env, a := newAgent6Bed(t)
	n := env.Node
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.InternetIPv6())
	must(n.Route(edge6Net, dptest.FabAddr6, dptest.UlDev))
	_, dst, _ := net.ParseCIDR(edge6Small0)
	must(n.Handle().RouteReplace(&netlink.Route{Dst: dst, Gw: net.ParseIP(dptest.FabAddr6), LinkIndex: mustIfindex(t, env, dptest.UlDev),
		MTU: ul6MTU, MTULock: true}))
	must(a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr6), ICMPSource: addr(dptest.UlAddr), ICMPSource6: addr(dptest.UlAddr6), HashSeed: testSeed,
		Edges: []netip.Addr{addr(edge6A), addr(edge6B), addr(edge6Small)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}))
	must(a.SetGroup(0, AgentGroup{Members: []netip.Addr{addr(edge6A), addr(edge6B)}}))
	return env, a
}

// fromEdge6 is NVGRE over IPv6 from an edge at src to the agent, inner an
// Ethernet frame.
func fromEdge6(src string, key uint32, inner []byte) []byte {
	return nvgreOver6(dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr6, key, 0, inner)
}

// TestAgentUl6Decap: NVGRE over IPv6 from an edge, an IPv4 and an IPv6
// EIP's packets, delivered as over IPv4; what is not from an edge, not to
// the agent's IPv6 underlay address, carries an extension header, a
// fragment, or is truncated, is dropped under its counter (or left to the
// kernel: not the agent's).
func TestAgentUl6Decap(t *testing.T) {
	env, a := newAgentUl6Bed(t)
	key := uint32(vsid<<8 | 0x33)
	tcp := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, ttl: 63}
	inner4 := func(f flow) []byte { return ethFrame(t, gwMAC, "02:00:c6:33:64:07", f.ip(t)) }
	toGuest := func(f flow) []byte {
		return ethFrame(t, dptest.GuestMAC, dptest.VMMAC, withDst(f, dptest.GuestAddr).ip(t))
	}
	udp6p := pkt6{src: v6Client, dst: agentEIP6, proto: nhUDP, sport: 1000, dport: 53, hop: 61}
	inner6 := eth6(gwMAC, "02:00:c6:33:64:07", false, udp6p.ip())
	toGuest6 := eth6(dptest.GuestMAC, dptest.VMMAC, false, udp6p.withDst(agentPriv6).ip())

	ok := fromEdge6(edge6A, key, inner4(tcp))
	// A destination options header (8 bytes, PadN) between the outer
	// IPv6 header and GRE.
	ext := append([]byte(nil), ok[:14+40]...)
	ext[14+6] = 60
	binary.BigEndian.PutUint16(ext[14+4:], binary.BigEndian.Uint16(ok[14+4:])+8)
	ext = append(ext, 47, 0, 1, 4, 0, 0, 0, 0)
	ext = append(ext, ok[14+40:]...)
	// A fragment header (the first fragment, more to come).
	frag := append([]byte(nil), ok[:14+40]...)
	frag[14+6] = 44
	binary.BigEndian.PutUint16(frag[14+4:], binary.BigEndian.Uint16(ok[14+4:])+8)
	frag = append(frag, 47, 0, 0, 1, 0, 0, 0, 7)
	frag = append(frag, ok[14+40:]...)
	// The outer payload length past the frame's end.
	long := append([]byte(nil), ok...)
	binary.BigEndian.PutUint16(long[14+4:], uint16(len(ok)-14-40+1))
	// GRE cut after 4 bytes (its key missing).
	short := append([]byte(nil), ok[:14+40+4]...)
	binary.BigEndian.PutUint16(short[14+4:], 4)
	// The inner frame longer than the outer packet says.
	innerLong := append([]byte(nil), ok...)
	binary.BigEndian.PutUint16(innerLong[14+4:], binary.BigEndian.Uint16(ok[14+4:])-1)
	innerLong = innerLong[:len(innerLong)-1]
	slot := ptr[uint32](agentIdx)

	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "an IPv4 EIP's tcp from an edge over IPv6 is delivered", dev: dptest.UlDev, in: ok,
			action: xdpRedirect, out: toGuest(tcp), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "from the other edge", dev: dptest.UlDev, in: fromEdge6(edge6B, key, inner4(tcp)),
			action: xdpRedirect, out: toGuest(tcp), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "an IPv6 EIP's udp over IPv6 is delivered", dev: dptest.UlDev, in: fromEdge6(edge6A, key, inner6),
			action: xdpRedirect, out: toGuest6, stats: map[string]uint64{"decap_tx": 1}, eipSlot: ptr[uint32](agentIdx6), eipRx: 1},
		{name: "from an address that is no edge: spoofing", dev: dptest.UlDev, in: fromEdge6(edge6Stray, key, inner4(tcp)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to another address: the kernel's", dev: dptest.UlDev,
			in:     nvgreOver6(dptest.FabMAC, dptest.UlMAC, edge6A, "2001:db8:ff::77", key, 0, inner4(tcp)),
			action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "an extension header before GRE", dev: dptest.UlDev, in: ext,
			action: xdpDrop, stats: map[string]uint64{"drop_gre_bad": 1}},
		{name: "a fragment", dev: dptest.UlDev, in: frag,
			action: xdpDrop, stats: map[string]uint64{"drop_gre_bad": 1}},
		{name: "outer payload length past the frame", dev: dptest.UlDev, in: long,
			action: xdpDrop, stats: map[string]uint64{"drop_ip_trunc": 1}},
		{name: "GRE without its key", dev: dptest.UlDev, in: short,
			action: xdpDrop, stats: map[string]uint64{"drop_gre_bad": 1}},
		{name: "the inner packet longer than the outer", dev: dptest.UlDev, in: innerLong,
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "wrong VSID", dev: dptest.UlDev, in: fromEdge6(edge6A, 77<<8, inner4(tcp)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "NVGRE over IPv4 with no IPv4 underlay address: the kernel's", dev: dptest.UlDev,
			in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, inner4(tcp)),
			action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "an edge's name as an IPv4 outer source is a martian", dev: dptest.UlDev,
			in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, "0.0.0.1", dptest.UlAddr, key, 0, inner4(tcp)),
			action: xdpDrop, stats: map[string]uint64{"drop_ip_martian": 1}},
	})

	// The names: three edges, read back by address.
	names, err := a.Ul6Edges()
	if err != nil || len(names) != 3 {
		t.Fatalf("ul6 edges %v %v, want 3", names, err)
	}
}

// encapUl6Agent is the guest's packet ip (already translated) in NVGRE
// over IPv6 from the agent to edge, key vsid << 8 | the hash's low byte,
// flow label the hash's low 20 bits, the inner frame from the guest's MAC
// to the gateway MAC with ethertype etype.
func encapUl6Agent(edge string, h uint32, tos uint8, etype uint16, ip []byte) []byte {
	inner := append(append(append([]byte(nil), mac(gwMAC)...), mac(dptest.VMMAC)...), byte(etype>>8), byte(etype))
	return nvgreOver6L(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, edge, vsid<<8|h&0xff, tos, h, append(inner, ip...))
}

// TestAgentUl6Encap: a guest's packets to its edges over IPv6 (an IPv4
// EIP's, an IPv6 EIP's, a VIP flow's reply back to the edge it came
// from), byte for byte; the tunnel's MTU 20 bytes less than over IPv4.
func TestAgentUl6Encap(t *testing.T) {
	env, a := newAgentUl6Bed(t)
	slot := ptr[uint32](agentIdx)
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	reply := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, df: true, tos: 0x10}
	h := flowhash.Hash4(flowhash.Tuple{Src: addr(eip), Dst: addr(client), Proto: 6, SrcPort: 80, DstPort: 40000}, testSeed)
	out := encapUl6Agent([]string{edge6A, edge6B}[h%2], h, 0x10, 0x0800, withSrc(reply, eip).ip(t))

	tcp6 := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 443, dport: 40000, hop: 64, tc: 0x28}
	h6 := flowhash.Hash6(flowhash.Tuple{Src: addr(agentEIP6), Dst: addr(v6Client), Proto: nhTCP, SrcPort: 443, DstPort: 40000}, testSeed)
	out6 := encapUl6Agent([]string{edge6A, edge6B}[h6%2], h6, 0x28, 0x86dd, tcp6.withSrc(agentEIP6).ip())

	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "an IPv4 EIP's reply in NVGRE over IPv6", dev: dptest.GuestDev, in: fromGuest(reply),
			action: xdpRedirect, out: out, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "an IPv6 EIP's in NVGRE over IPv6", dev: dptest.GuestDev, in: eth6(dptest.VMMAC, dptest.GuestMAC, false, tcp6.ip()),
			action: xdpRedirect, out: out6, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx6), eipTx: 1},
	})

	// A VIP flow from an edge over IPv6: its replies go back to that
	// edge (the flow's edge: its name), whatever the hash says.
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx,
		Ifindex: uint32(mustIfindex(t, env, dptest.GuestDev)), Service: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutService(AgentService{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid}); err != nil {
		t.Fatal(err)
	}
	syn := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40100, dport: 443, ttl: 63, syn: true}
	rep := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 8443, dport: 40100, df: true}
	hv := flowhash.Hash4(flowhash.Tuple{Src: addr(vipEncap), Dst: addr(client), Proto: 6, SrcPort: 443, DstPort: 40100}, testSeed)
	from := []string{edge6B, edge6A}[hv%2] // the edge the hash would not pick
	vipRep := withSrc(rep, vipEncap)
	vipRep.sport = 443
	delivered := withDst(syn, dptest.GuestAddr)
	delivered.dport = 8443
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "a SYN to a VIP over IPv6 is delivered and its flow recorded", dev: dptest.UlDev,
			in:     fromEdge6(from, vsid<<8|0x21, ethFrame(t, gwMAC, guestSvcMAC, syn.ip(t))),
			action: xdpRedirect, out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, delivered.ip(t)), check: checksumsOK,
			stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
	})
	flows, err := a.Flows(0)
	if err != nil || len(flows) != 1 || flows[0].Edge != addr(from) {
		t.Fatalf("flows %+v %v, want one from %s", flows, err, from)
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "its reply goes back to that edge over IPv6", dev: dptest.GuestDev, in: fromGuest(rep),
			action: xdpRedirect, out: encapUl6Agent(from, hv, 0, 0x0800, vipRep.ip(t)), check: func(t *testing.T, out []byte) { checksumsOK(t, out[14+40+8:]) },
			stats: map[string]uint64{"encap_tx": 1}},
	})

	// The MTU over IPv6: the route's (ul6MTU) less 62 bytes.
	if err := a.SetGroup(0, AgentGroup{Members: []netip.Addr{addr(edge6Small)}}); err != nil {
		t.Fatal(err)
	}
	fits := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, ul6MTU-62-28)}
	big := fits
	big.payload = make([]byte, ul6MTU-62-28+1)
	hf := flowhash.Hash4(flowhash.Tuple{Src: addr(eip), Dst: addr(client), Proto: 17, SrcPort: 1, DstPort: 2}, testSeed)
	big6 := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, ul6MTU-62-48+1))
	setL4Csum6(big6)
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "a packet that fits the IPv6 tunnel", dev: dptest.GuestDev, in: fromGuest(fits),
			action: xdpRedirect, out: encapUl6Agent(edge6Small, hf, 0, 0x0800, withSrc(fits, eip).ip(t)),
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "one byte more gets fragmentation needed with the IPv6 tunnel's MTU", dev: dptest.GuestDev, in: fromGuest(big),
			action: xdpTX, check: guestICMPCheck(big, ul6MTU-62), stats: map[string]uint64{"icmp_frag_tx": 1}, eipSlot: slot},
		{name: "an IPv6 guest's packet too big for the tunnel gets packet too big from the IPv6 underlay address", dev: dptest.GuestDev,
			in: eth6(dptest.VMMAC, dptest.GuestMAC, false, big6), action: xdpTX,
			out:   icmp6WantFrom(t, dptest.UlAddr6, eth6(dptest.VMMAC, dptest.GuestMAC, false, nil)[:14], big6, 2, ul6MTU-62),
			check: icmp6SumOK(14), stats: map[string]uint64{"icmp_frag_tx": 1}},
	})

	// With no ICMP source (a host of the IPv6 underlay has no IPv4
	// address) nor ICMPv6 source: dropped, no error sent.
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr6), HashSeed: testSeed,
		Edges: []netip.Addr{addr(edge6A), addr(edge6B), addr(edge6Small)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "too big with no ICMP source", dev: dptest.GuestDev, in: fromGuest(big),
			action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1}},
		{name: "an IPv6 guest's too big with no ICMPv6 source", dev: dptest.GuestDev, in: eth6(dptest.VMMAC, dptest.GuestMAC, false, big6),
			action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1, "icmp_frag_tx": 0}},
	})

	// An edge gone from every set: its name collected, NVGRE from it
	// refused, the group's member with no address left drop_fib.
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr6), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: []netip.Addr{addr(edge6A), addr(edge6B)}, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	names, err := a.Ul6Edges()
	if err != nil || len(names) != 2 {
		t.Fatalf("ul6 edges %v %v, want 2 (edge6Small's collected)", names, err)
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "to an edge whose name was collected", dev: dptest.GuestDev, in: fromGuest(fits),
			action: xdpDrop, stats: map[string]uint64{"drop_fib": 1}},
	})
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "from an edge whose name was collected", dev: dptest.UlDev,
			in:     fromEdge6(edge6Small, vsid<<8|0x33, ethFrame(t, gwMAC, "02:00:c6:33:64:07", withDst(fits, eip).ip(t))),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})
}

// TestAgentUl6HealthAnswer: an edge's health check over the IPv6
// underlay reaches the checked guest untranslated, and the guest's answer
// goes back to that edge (its name, pinned in the flow) over IPv6, byte
// for byte.
func TestAgentUl6HealthAnswer(t *testing.T) {
	env, a := newAgentUl6Bed(t)
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(hcGuest), VSID: vsid, StatsIdx: agentIdx,
		Ifindex: uint32(mustIfindex(t, env, dptest.GuestDev)), Service: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetHealthGuests([]HealthGuest{{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoTCP, Port: 80}}); err != nil {
		t.Fatal(err)
	}
	probe := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40123, dport: 80, syn: true}
	synack := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 40123}
	g := addr(hcGuest).As4()
	innerDst := "02:00:" + hex2(g[0]) + ":" + hex2(g[1]) + ":" + hex2(g[2]) + ":" + hex2(g[3])
	h := flowhash.Hash4(flowhash.Tuple{Src: addr(hcGuest), Dst: addr(hcAddr), Proto: 6, SrcPort: 80, DstPort: 40123}, testSeed)
	// The edge the hash would not pick: the answer follows the probe.
	from := []string{edge6B, edge6A}[h%2]
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "a probe over IPv6 is delivered as it is", dev: dptest.UlDev, in: fromEdge6(from, vsid<<8|7, ethFrame(t, gwMAC, innerDst, probe.ip(t))),
			action: xdpRedirect, out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, probe.ip(t)), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
	})
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "its answer goes back to the probing edge over IPv6, untranslated", dev: dptest.GuestDev,
			in: synack.frame(t, dptest.VMMAC, dptest.GuestMAC), action: xdpRedirect,
			out: encapUl6Agent(from, h, 0, 0x0800, synack.ip(t)), stats: map[string]uint64{"encap_tx": 1}},
	})
}

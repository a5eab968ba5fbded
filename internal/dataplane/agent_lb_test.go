package dataplane

import (
	"encoding/binary"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// agentFlowBed is the agent bed with the guest serving VIP vipEncap as well
// as having its EIP: tcp:80 keeps the port (the EIP's port 80 too),
// tcp:443 goes to 8443, udp:53 to 5353, udp any port keeps it.
func agentFlowBed(t *testing.T) (*agentFlowT, *Agent) {
	env, a := newAgentBed(t)
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: g1, Service: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []AgentService{
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 80, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VPort: 53, BPort: 5353, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VSID: vsid},
	} {
		if err := a.PutService(s); err != nil {
			t.Fatal(err)
		}
	}
	if svcs, err := a.Services(); err != nil || len(svcs) != 4 {
		t.Fatalf("services %v %v", svcs, err)
	}
	return &agentFlowT{t: t, env: env, a: a, g1: g1}, a
}

type agentFlowT struct {
	t   *testing.T
	env *dptest.Env
	a   *Agent
	g1  uint32
}

const guestSvcMAC = "02:01:c6:13:15:01" // 02:01 + dptest.GuestAddr

// fromEdge tunnels f from an edge to the host (inner MAC: the service's for
// a VIP, the EIP's otherwise).
func (b *agentFlowT) fromEdge(edge string, f flow) []byte {
	mac := "02:00:c6:33:64:07"
	if f.dst == vipEncap {
		mac = guestSvcMAC
	}
	return nvgre(b.t, dptest.FabMAC, dptest.UlMAC, edge, dptest.UlAddr, vsid<<8|0x21, 0, ethFrame(b.t, gwMAC, mac, f.ip(b.t)))
}

// deliver is f as the guest gets it, on its port gport (0: f's).
func (b *agentFlowT) deliver(f flow, gport uint16) []byte {
	g := withDst(f, dptest.GuestAddr)
	if gport != 0 {
		g.dport = gport
	}
	return ethFrame(b.t, dptest.GuestMAC, dptest.VMMAC, g.ip(b.t))
}

// encap is the guest's packet ip (already translated to its public source
// pub and port) tunnelled to edge ("" for the edge the flow hash picks).
func (b *agentFlowT) encap(ip []byte, edge string, pub string, proto uint8, sport, dport uint16) []byte {
	h := flowhash.Hash4(flowhash.Tuple{Src: addr(pub), Dst: addr(client), Proto: proto, SrcPort: sport, DstPort: dport}, testSeed)
	if edge == "" {
		edge = []string{edgeA, edgeB}[h%2]
	}
	return nvgre(b.t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, ethFrame(b.t, dptest.VMMAC, gwMAC, ip))
}

// TestAgentFlows: a guest with an EIP that serves a VIP on the same port.
// Each flow's replies leave from the address and port it came in through,
// back to the edge it came from; the guest's own connections leave by its
// EIP; ICMP errors go by the flow they quote.
func TestAgentFlows(t *testing.T) {
	b, a := agentFlowBed(t)
	slot := ptr[uint32](agentIdx)
	viaVIP := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, ttl: 63, syn: true}
	viaVIPAck := viaVIP
	viaVIPAck.syn = false
	viaEIP := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40001, dport: 80, ttl: 63, syn: true}
	viaVIPFixed := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40002, dport: 443, ttl: 63, syn: true}
	// A bare ACK to the VIP with no entry (a spoofed or mid-flow segment).
	bareAck := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40009, dport: 80, ttl: 63}
	dnsVIP := flow{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: 5001, dport: 53, ttl: 63}
	udpAny := flow{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 63}
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{
		{name: "a bare ACK to the VIP is delivered and creates nothing", dev: dptest.UlDev, in: b.fromEdge(edgeA, bareAck),
			action: xdpRedirect, out: b.deliver(bareAck, 0), stats: map[string]uint64{"decap_tx": 1}},
		{name: "a SYN to VIP port 80 is delivered and recorded", dev: dptest.UlDev, in: b.fromEdge(edgeA, viaVIP),
			action: xdpRedirect, out: b.deliver(viaVIP, 0), check: checksumsOK, stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "the same flow again writes nothing", dev: dptest.UlDev, in: b.fromEdge(edgeA, viaVIPAck),
			action: xdpRedirect, out: b.deliver(viaVIPAck, 0), stats: map[string]uint64{"decap_tx": 1}},
		{name: "EIP flow to the same port needs no entry", dev: dptest.UlDev, in: b.fromEdge(edgeB, viaEIP),
			action: xdpRedirect, out: b.deliver(viaEIP, 0), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "VIP flow to a fixed backend port", dev: dptest.UlDev, in: b.fromEdge(edgeA, viaVIPFixed),
			action: xdpRedirect, out: b.deliver(viaVIPFixed, 8443), check: checksumsOK, stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "udp VIP flow to a fixed backend port", dev: dptest.UlDev, in: b.fromEdge(edgeB, dnsVIP),
			action: xdpRedirect, out: b.deliver(dnsVIP, 5353), check: checksumsOK, stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "udp any-port VIP flow", dev: dptest.UlDev, in: b.fromEdge(edgeA, udpAny),
			action: xdpRedirect, out: b.deliver(udpAny, 0), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
	})
	flows, err := a.Flows(0)
	if err != nil || len(flows) != 4 {
		t.Fatalf("flows %+v %v, want 4", flows, err)
	}
	for _, f := range flows {
		if f.Public.Addr() != addr(vipEncap) || f.Ifindex != b.g1 || f.VSID != vsid {
			t.Errorf("flow %+v: want VIP %s, ifindex %d, VSID %d", f, vipEncap, b.g1, vsid)
		}
	}

	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	reply := func(f flow, gport uint16) flow {
		r := flow{src: dptest.GuestAddr, dst: client, proto: f.proto, sport: f.dport, dport: f.sport}
		if gport != 0 {
			r.sport = gport
		}
		return r
	}
	public := func(r flow, src string, sport uint16) []byte {
		r.src, r.sport = src, sport
		return r.ip(t)
	}
	rVIP, rEIP, rFixed, rDNS, rAny := reply(viaVIP, 0), reply(viaEIP, 0), reply(viaVIPFixed, 8443), reply(dnsVIP, 5353), reply(udpAny, 0)
	own := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 33000, dport: 443, syn: true}
	ownOnVIPTuple := rVIP
	ownOnVIPTuple.syn = true

	// The guest's ICMP port unreachable about the udp flow to VIP:53: the
	// quote is what the guest got (client:5001 -> guest:5353); it leaves
	// as an error from the VIP quoting client:5001 -> VIP:53.
	qIn := dnsVIP
	qIn.dst, qIn.dport, qIn.ttl = dptest.GuestAddr, 5353, 62
	quoteIn := qIn.ip(t)[:28]
	icmpIn := icmpError(t, dptest.GuestAddr, client, 3, 3, 0, quoteIn)
	quoteOut := append([]byte(nil), quoteIn...)
	copy(quoteOut[16:20], ip4(vipEncap))
	binary.BigEndian.PutUint16(quoteOut[22:24], 53)
	setIPCsum(quoteOut[:20])
	icmpOut := icmpError(t, vipEncap, client, 3, 3, 0, quoteOut)

	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "reply of the VIP flow leaves from VIP:80 to the edge it came from", dev: dptest.GuestDev, in: fromGuest(rVIP),
			action: xdpRedirect, out: b.encap(public(rVIP, vipEncap, 80), edgeA, vipEncap, 6, 80, 40000), check: innerChecksumsOK, stats: map[string]uint64{"encap_tx": 1}},
		{name: "reply of the EIP flow on the same port leaves from EIP:80", dev: dptest.GuestDev, in: fromGuest(rEIP),
			action: xdpRedirect, out: b.encap(public(rEIP, eip, 80), "", eip, 6, 80, 40001), check: innerChecksumsOK, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "reply from a fixed backend port leaves from VIP:443", dev: dptest.GuestDev, in: fromGuest(rFixed),
			action: xdpRedirect, out: b.encap(public(rFixed, vipEncap, 443), edgeA, vipEncap, 6, 443, 40002), check: innerChecksumsOK, stats: map[string]uint64{"encap_tx": 1}},
		{name: "udp reply from 5353 leaves from VIP:53", dev: dptest.GuestDev, in: fromGuest(rDNS),
			action: xdpRedirect, out: b.encap(public(rDNS, vipEncap, 53), edgeB, vipEncap, 17, 53, 5001), check: innerChecksumsOK, stats: map[string]uint64{"encap_tx": 1}},
		{name: "udp any-port reply keeps its port", dev: dptest.GuestDev, in: fromGuest(rAny),
			action: xdpRedirect, out: b.encap(public(rAny, vipEncap, 7777), edgeA, vipEncap, 17, 7777, 5000), stats: map[string]uint64{"encap_tx": 1}},
		{name: "the guest's own connection leaves by its EIP", dev: dptest.GuestDev, in: fromGuest(own),
			action: xdpRedirect, out: b.encap(public(own, eip, 33000), "", eip, 6, 33000, 443), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "a SYN on a VIP flow's tuple is the guest's own: by its EIP", dev: dptest.GuestDev, in: fromGuest(ownOnVIPTuple),
			action: xdpRedirect, out: b.encap(public(ownOnVIPTuple, eip, 80), "", eip, 6, 80, 40000), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "ICMP error about a VIP flow goes by the quoted flow", dev: dptest.GuestDev, in: ethFrame(t, dptest.VMMAC, dptest.GuestMAC, icmpIn),
			action: xdpRedirect, out: b.encap(icmpOut, edgeB, vipEncap, 1, 0, 0), stats: map[string]uint64{"encap_tx": 1}},
		{name: "a flow entry on another interface is spoofing", dev: dptest.UlDev, in: fromGuest(rVIP),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})

	// A forged packet to the EIP on the 5-tuple of a VIP flow (an ACK, or
	// UDP) does not flip the entry: the VIP flow's replies still leave
	// from the VIP. A SYN to the EIP on that tuple is a new connection:
	// it takes the entry over; a forged ACK to the VIP does not flip it
	// back.
	sameTuple := withDst(viaVIPAck, eip)
	sameTupleSyn := withDst(viaVIP, eip)
	udpOnEIP := withDst(dnsVIP, eip)
	udpOnEIP.dport = 5353
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{
		{name: "a spoofed EIP ACK on a VIP flow's tuple does not flip it", dev: dptest.UlDev, in: b.fromEdge(edgeB, sameTuple),
			action: xdpRedirect, out: b.deliver(sameTuple, 0), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "a spoofed EIP udp packet on a udp VIP flow's tuple does not flip it", dev: dptest.UlDev, in: b.fromEdge(edgeA, udpOnEIP),
			action: xdpRedirect, out: b.deliver(udpOnEIP, 0), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
	})
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "the VIP flow's reply still leaves from the VIP", dev: dptest.GuestDev, in: fromGuest(rVIP),
			action: xdpRedirect, out: b.encap(public(rVIP, vipEncap, 80), edgeA, vipEncap, 6, 80, 40000), stats: map[string]uint64{"encap_tx": 1}},
		{name: "the udp VIP flow's reply still leaves from VIP:53", dev: dptest.GuestDev, in: fromGuest(rDNS),
			action: xdpRedirect, out: b.encap(public(rDNS, vipEncap, 53), edgeB, vipEncap, 17, 53, 5001), stats: map[string]uint64{"encap_tx": 1}},
	})
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{
		{name: "an EIP SYN on a VIP flow's tuple rewrites the entry", dev: dptest.UlDev, in: b.fromEdge(edgeB, sameTupleSyn),
			action: xdpRedirect, out: b.deliver(sameTupleSyn, 0), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}, eipSlot: slot, eipRx: 1},
		{name: "a spoofed VIP ACK on the EIP flow's tuple does not flip it back", dev: dptest.UlDev, in: b.fromEdge(edgeA, viaVIPAck),
			action: xdpRedirect, out: b.deliver(viaVIPAck, 0), stats: map[string]uint64{"decap_tx": 1}},
	})
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "its reply now leaves from the EIP", dev: dptest.GuestDev, in: fromGuest(rVIP),
			action: xdpRedirect, out: b.encap(public(rVIP, eip, 80), edgeB, eip, 6, 80, 40000), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
	})

	// An evicted entry (deleted here): the reply falls back to the EIP.
	k := agentAgentFlowKey{Guest: ip4word(addr(dptest.GuestAddr)), Remote: ip4word(addr(client)), Gport: be16(8443), Rport: be16(40002), Proto: 6}
	if err := a.objs.AgentFlows.Delete(&k); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "evicted flow: the reply leaves by the EIP", dev: dptest.GuestDev, in: fromGuest(rFixed),
			action: xdpRedirect, out: b.encap(public(rFixed, eip, 8443), "", eip, 6, 8443, 40002), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
	})

	// The same edges in another order, one more: flows keep their edge.
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: []netipAddr{addr(edgeB), addr("198.18.1.3"), addr(edgeA)}, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetGroup(0, AgentGroup{Members: []netipAddr{addr(edgeB), addr("198.18.1.3"), addr(edgeA)}}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "a new edge in the set: the flow keeps its edge", dev: dptest.GuestDev, in: fromGuest(rAny),
			action: xdpRedirect, out: b.encap(public(rAny, vipEncap, 7777), edgeA, vipEncap, 17, 7777, 5000), stats: map[string]uint64{"encap_tx": 1}},
	})
	// edgeA leaves the set: its flows go to an edge by flow hash.
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: []netipAddr{addr(edgeB)}, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetGroup(0, AgentGroup{Members: []netipAddr{addr(edgeB)}}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "its edge left: the flow hash picks one", dev: dptest.GuestDev, in: fromGuest(rAny),
			action: xdpRedirect, out: b.encap(public(rAny, vipEncap, 7777), edgeB, vipEncap, 17, 7777, 5000), stats: map[string]uint64{"encap_tx": 1}},
	})
}

// TestAgentFlowsNoEIP: a service backend guest without an EIP answers its
// VIP flows and opens no connection of its own to the outside.
func TestAgentFlowsNoEIP(t *testing.T) {
	b, a := agentFlowBed(t)
	if err := a.DeleteEIP(addr(eip)); err != nil {
		t.Fatal(err)
	}
	viaVIP := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 41000, dport: 80, ttl: 63, syn: true}
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{
		{name: "VIP flow is delivered and recorded", dev: dptest.UlDev, in: b.fromEdge(edgeB, viaVIP),
			action: xdpRedirect, out: b.deliver(viaVIP, 0), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "traffic to the unbound EIP is unknown", dev: dptest.UlDev, in: b.fromEdge(edgeB, withDst(viaVIP, eip)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
	})
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	r := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 41000}
	out := r
	out.src = vipEncap
	own := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 33000, dport: 53}
	frag := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, fragOff: 100}
	ping := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolICMPv4}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "the VIP flow's reply leaves from the VIP", dev: dptest.GuestDev, in: fromGuest(r),
			action: xdpRedirect, out: b.encap(out.ip(t), edgeB, vipEncap, 6, 80, 41000), stats: map[string]uint64{"encap_tx": 1}},
		{name: "a connection of its own is refused", dev: dptest.GuestDev, in: fromGuest(own),
			action: xdpDrop, stats: map[string]uint64{"drop_no_eip": 1}},
		{name: "a later fragment no flow translates is refused", dev: dptest.GuestDev, in: fromGuest(frag),
			action: xdpDrop, stats: map[string]uint64{"drop_no_eip": 1}},
		{name: "a ping of its own is refused", dev: dptest.GuestDev, in: fromGuest(ping),
			action: xdpDrop, stats: map[string]uint64{"drop_no_eip": 1}},
		{name: "local destinations a rule allows are the kernel's", dev: dptest.GuestDev, in: fromGuest(withDst(own, "198.18.5.5")),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
	})
}

// innerChecksumsOK checks the IPv4 and L4 checksums of the packet inside an
// NVGRE frame (outer Ethernet, IPv4, GRE, inner Ethernet: 56 bytes).
func innerChecksumsOK(t *testing.T, out []byte) {
	t.Helper()
	checksumsOK(t, out[42:])
}

// TestAgentFlowMemory reports what a flow entry costs in kernel memory (the
// map's memlock figure, LRU bookkeeping and hash buckets included) and
// holds it under 128 bytes.
func TestAgentFlowMemory(t *testing.T) {
	requireRoot(t)
	const n = 1 << 20
	a, err := LoadAgent(LoadOptions{AgentFlowMax: n})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.FlowCapacity(); got != n {
		t.Fatalf("capacity %d, want %d", got, n)
	}
	info, err := a.objs.AgentFlows.Info()
	if err != nil {
		t.Fatal(err)
	}
	mem, ok := info.Memlock()
	if !ok {
		t.Skip("the kernel does not report map memory")
	}
	per := float64(mem) / n
	t.Logf("agent_flows: %d entries, key %d B, value %d B, %d bytes in all: %.1f bytes per flow", n,
		info.KeySize, info.ValueSize, mem, per)
	if per > 128 {
		t.Errorf("%.1f bytes per flow entry", per)
	}
}

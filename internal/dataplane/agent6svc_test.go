package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The agent's IPv6 VIP path (encap mode): NVGRE from an edge whose inner
// packet is IPv6 to an IPv6 VIP, the backend guest named by its IPv4
// address in the inner destination MAC, translated to the guest's IPv6
// address (and backend port), its flow recorded in agent_flows6; the
// guest's replies translated back by the flow and tunnelled to the edge
// the flow came from. Guest A (dptest.GuestAddr, agentPriv6) holds the
// IPv6 EIP agentEIP6 too; guest B (svc6GuestB, svc6Priv6B) only serves the
// VIP.
const (
	svc6VIP     = "2001:db8:e2::80"
	svc6GuestB  = "198.19.21.8"
	svc6Priv6B  = "2001:db8:f0::8"
	svc6MACA    = "02:01:c6:13:15:01" // SVC_MAC + dptest.GuestAddr
	svc6MACB    = "02:01:c6:13:15:08" // SVC_MAC + svc6GuestB
	svc6EIPMAC  = "02:00:c6:33:64:07" // what the edge writes for an EIP
	svc6KeyLow  = 0x21
	svc6UnknMAC = "02:01:c6:13:15:4d" // a guest with no entry (198.19.21.77)
)

// newAgentSvc6Bed is newAgent6Bed with guest A's IPv6 EIP marked as a
// service backend's and the services: A serves tcp:80 (port kept),
// tcp:443 (to 8443) and udp on every port; B udp on every port.
func newAgentSvc6Bed(t *testing.T) (*dptest.Env, *Agent, uint32) {
	t.Helper()
	env, a := newAgent6Bed(t)
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	if err := env.GuestIPv6(svc6Priv6B); err != nil {
		t.Fatal(err)
	}
	if err := a.PutEIP(AgentEIP{EIP: addr(agentEIP6), Private: addr(agentPriv6), VSID: vsid, StatsIdx: agentIdx6, Ifindex: g1, Service: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []AgentService{
		{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: g1, Proto: ProtoTCP, VPort: 80, VSID: vsid},
		{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: g1, Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid},
		{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: g1, Proto: ProtoUDP, VSID: vsid},
		{VIP: addr(svc6VIP), Guest: addr(svc6GuestB), Guest6: addr(svc6Priv6B), Ifindex: g1, Proto: ProtoUDP, VSID: vsid},
	} {
		if err := a.PutService(s); err != nil {
			t.Fatal(err)
		}
	}
	return env, a, g1
}

// svc6FromEdge is p tunnelled from edge with the inner destination MAC
// mac and key's VSID.
func svc6FromEdge(t *testing.T, edge, mac string, key uint32, p pkt6) []byte {
	return nvgre(t, dptest.FabMAC, dptest.UlMAC, edge, dptest.UlAddr, key, 0, eth6(gwMAC, mac, false, p.ip()))
}

// svc6ToGuest is p as guest priv gets it on port gport.
func svc6ToGuest(p pkt6, priv string, gport uint16) []byte {
	p.dst, p.dport = priv, gport
	return eth6(dptest.GuestMAC, dptest.VMMAC, false, p.ip())
}

// svc6Encap is the guest's packet p (its source already translated to pub
// and port) tunnelled to edge ("": the one the flow hash picks of the
// two).
func svc6Encap(t *testing.T, p pkt6, edge string) []byte {
	h := flowhash.Hash6(flowhash.Tuple{Src: addr(p.src), Dst: addr(p.dst), Proto: p.proto, SrcPort: p.sport, DstPort: p.dport}, testSeed)
	if edge == "" {
		edge = []string{edgeA, edgeB}[h%2]
	}
	return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, eth6(dptest.VMMAC, gwMAC, false, p.ip()))
}

func TestAgentIPv6VIP(t *testing.T) {
	env, a, g1 := newAgentSvc6Bed(t)
	slot := ptr[uint32](agentIdx6)
	key := uint32(vsid<<8 | svc6KeyLow)
	const ack, synAck = 0x10, 0x12

	// Client -> VIP flows: tcp:80 to A (kept), tcp:443 to A (8443), udp to
	// B (any port), and a bare ACK with no entry.
	syn80 := pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40000, dport: 80, hop: 61}
	ack80 := syn80
	ack80.tcpFlags = ack
	syn443 := pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40001, dport: 443, hop: 61}
	udpB := pkt6{src: v6Client, dst: svc6VIP, proto: nhUDP, sport: 5000, dport: 7777, hop: 61}
	bareAck := pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40009, dport: 80, hop: 61, tcpFlags: ack}
	noCsum := udpB
	noCsum.zeroUDPCsum = true
	// A flow to A's IPv6 EIP on the 5-tuple a VIP flow left (tcp:80 from
	// client port 40000): its SYN takes the entry over.
	synEIP := pkt6{src: v6Client, dst: agentEIP6, proto: nhTCP, sport: 40000, dport: 80, hop: 61}
	guestCheck := func(t *testing.T, out []byte) { checkL4Csum6(t, out, 14) }

	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "a bare ACK to the VIP is delivered and creates nothing", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, bareAck),
			action: xdpRedirect, out: svc6ToGuest(bareAck, agentPriv6, 80), stats: map[string]uint64{"decap_tx": 1}},
		{name: "a SYN to VIP port 80 is translated to the guest's IPv6 address and recorded", dev: dptest.UlDev,
			in: svc6FromEdge(t, edgeA, svc6MACA, key, syn80), action: xdpRedirect, out: svc6ToGuest(syn80, agentPriv6, 80), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}, eipSlot: slot},
		{name: "the same flow again writes nothing", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, ack80),
			action: xdpRedirect, out: svc6ToGuest(ack80, agentPriv6, 80), stats: map[string]uint64{"decap_tx": 1}},
		{name: "a SYN to VIP port 443 goes to backend port 8443", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, syn443),
			action: xdpRedirect, out: svc6ToGuest(syn443, agentPriv6, 8443), check: guestCheck, stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "udp to any port of the VIP, to guest B", dev: dptest.UlDev, in: svc6FromEdge(t, edgeB, svc6MACB, key, udpB),
			action: xdpRedirect, out: svc6ToGuest(udpB, svc6Priv6B, 7777), check: guestCheck, stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "udp with a zero checksum is dropped", dev: dptest.UlDev, in: svc6FromEdge(t, edgeB, svc6MACB, key, noCsum),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_udp_csum0": 1}},
		{name: "a VIP not served here", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, syn80.withDst("2001:db8:e2::81")),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a guest that is no backend of the VIP", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6UnknMAC, key, syn80),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a port the VIP has no listener on", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 1, dport: 22, hop: 61}),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "the VIP's backend in another VSID", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, 77<<8, syn80),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a VIP without a service MAC", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6EIPMAC, key, syn80),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "the VIP from a stranger", dev: dptest.UlDev, in: svc6FromEdge(t, "198.18.9.9", svc6MACA, key, syn80),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})
	flows, err := a.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.AddrPort]AgentFlow{
		netip.MustParseAddrPort("[" + agentPriv6 + "]:80"): {Remote: netip.MustParseAddrPort("[" + v6Client + "]:40000"), Proto: nhTCP,
			Public: netip.MustParseAddrPort("[" + svc6VIP + "]:80"), Edge: addr(edgeA), VSID: vsid, Ifindex: g1},
		netip.MustParseAddrPort("[" + agentPriv6 + "]:8443"): {Remote: netip.MustParseAddrPort("[" + v6Client + "]:40001"), Proto: nhTCP,
			Public: netip.MustParseAddrPort("[" + svc6VIP + "]:443"), Edge: addr(edgeA), VSID: vsid, Ifindex: g1},
		netip.MustParseAddrPort("[" + svc6Priv6B + "]:7777"): {Remote: netip.MustParseAddrPort("[" + v6Client + "]:5000"), Proto: nhUDP,
			Public: netip.MustParseAddrPort("[" + svc6VIP + "]:7777"), Edge: addr(edgeB), VSID: vsid, Ifindex: g1},
	}
	if len(flows) != len(want) {
		t.Fatalf("flows %+v, want %d", flows, len(want))
	}
	for _, f := range flows {
		w, ok := want[f.Guest]
		w.Guest = f.Guest
		if !ok || f != w {
			t.Errorf("flow %+v, want %+v", f, w)
		}
	}

	// The guest's replies: by their flow back to the VIP and its port,
	// to the edge the flow came from, the EIP's counters untouched;
	// anything else from A by its IPv6 EIP.
	fromGuest := func(p pkt6) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, p.ip()) }
	reply80 := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 80, dport: 40000, hop: 64, tcpFlags: synAck}
	reply443 := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 8443, dport: 40001, hop: 64, tcpFlags: synAck}
	replyB := pkt6{src: svc6Priv6B, dst: v6Client, proto: nhUDP, sport: 7777, dport: 5000, hop: 64}
	asVIP := func(p pkt6, vport uint16) pkt6 { p.src, p.sport = svc6VIP, vport; return p }
	asEIP := func(p pkt6) pkt6 { p.src = agentEIP6; return p }
	// A's own connection, and a packet from A's port 80 on no flow.
	own := pkt6{src: agentPriv6, dst: v6Dst, proto: nhTCP, sport: 5555, dport: 443, hop: 64}
	noFlow := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 80, dport: 41234, hop: 64, tcpFlags: ack}
	noFlowB := pkt6{src: svc6Priv6B, dst: v6Client, proto: nhUDP, sport: 7777, dport: 5999, hop: 64}
	tunCheck := func(t *testing.T, out []byte) { checkL4Csum6(t, out, 14+20+8+14) }
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "a reply through the VIP leaves as the VIP, to the flow's edge", dev: dptest.GuestDev, in: fromGuest(reply80),
			action: xdpRedirect, out: svc6Encap(t, asVIP(reply80, 80), edgeA), check: tunCheck, stats: map[string]uint64{"encap_tx": 1},
			eipSlot: slot},
		{name: "a reply from backend port 8443 leaves from VIP port 443", dev: dptest.GuestDev, in: fromGuest(reply443),
			action: xdpRedirect, out: svc6Encap(t, asVIP(reply443, 443), edgeA), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}},
		{name: "guest B's udp reply, to the edge its flow came from", dev: dptest.GuestDev, in: fromGuest(replyB),
			action: xdpRedirect, out: svc6Encap(t, asVIP(replyB, 7777), edgeB), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}},
		{name: "guest A's own connection leaves by its IPv6 EIP", dev: dptest.GuestDev, in: fromGuest(own),
			action: xdpRedirect, out: svc6Encap(t, asEIP(own), ""), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "guest A's packet on no flow leaves by its IPv6 EIP", dev: dptest.GuestDev, in: fromGuest(noFlow),
			action: xdpRedirect, out: svc6Encap(t, asEIP(noFlow), ""), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "guest B (no IPv6 EIP) on no flow opens nothing", dev: dptest.GuestDev, in: fromGuest(noFlowB),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "guest B's flow from another interface is spoofing", dev: dptest.UlDev, in: fromGuest(replyB),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "guest A's flow from another interface is spoofing", dev: dptest.UlDev, in: fromGuest(reply443),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})

	// A SYN to A's IPv6 EIP on the VIP flow's 5-tuple takes its entry
	// over: the replies then leave by the EIP.
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "a SYN to the guest's IPv6 EIP on a VIP flow's tuple rewrites its entry", dev: dptest.UlDev,
			in: svc6FromEdge(t, edgeB, svc6EIPMAC, key, synEIP), action: xdpRedirect, out: svc6ToGuest(synEIP, agentPriv6, 80),
			stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}, eipSlot: slot, eipRx: 1},
		{name: "an ACK to the VIP on that tuple does not flip it back", dev: dptest.UlDev, in: svc6FromEdge(t, edgeA, svc6MACA, key, ack80),
			action: xdpRedirect, out: svc6ToGuest(ack80, agentPriv6, 80), stats: map[string]uint64{"decap_tx": 1}},
	})
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "the reply now leaves by the EIP, to the edge the SYN came from", dev: dptest.GuestDev, in: fromGuest(reply80),
			action: xdpRedirect, out: svc6Encap(t, asEIP(reply80), edgeB), check: tunCheck, stats: map[string]uint64{"encap_tx": 1},
			eipSlot: slot, eipTx: 1},
	})
}

// TestAgentIPv6VIPAPI: PutService takes an IPv6 VIP's backend into
// agent_svc6, reads it back beside the IPv4 ones, deletes it, and refuses
// (as the fake does) what the data path cannot do.
func TestAgentIPv6VIPAPI(t *testing.T) {
	_, a := newAgentBed(t)
	v4 := AgentService{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 80, VSID: vsid}
	v6 := AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: 7, Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid, Group: 3}
	for _, s := range []AgentService{v4, v6} {
		if err := a.PutService(s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Services()
	if err != nil || len(got) != 2 {
		t.Fatalf("services %+v %v", got, err)
	}
	for _, s := range got {
		if s != v4 && s != v6 {
			t.Errorf("read back %+v, want %+v or %+v", s, v4, v6)
		}
	}
	if n := a.objs.AgentSvc.MaxEntries(); n == 0 {
		t.Fatal("no agent_svc")
	}
	var k agentSvc6Key
	var v agentSvc6Entry
	if it := a.objs.AgentSvc6.Iterate(); !it.Next(&k, &v) || be16(k.Vport) != 443 || v.Ifindex != 7 {
		t.Fatalf("agent_svc6 entry %+v %+v", k, v)
	}
	if err := a.DeleteService(v6); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Services(); len(got) != 1 || got[0] != v4 {
		t.Fatalf("after delete: %+v", got)
	}
	bad := []struct {
		s   AgentService
		why string
	}{
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Ifindex: 7, VSID: vsid}, "address6"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(dptest.GuestAddr), Ifindex: 7}, "address6"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr("fe80::5"), Ifindex: 7}, "guest IPv6 address"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6)}, "interface"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(agentPriv6), Guest6: addr(agentPriv6), Ifindex: 7}, "IPv4 address"},
		{AgentService{VIP: addr("ff0e::1"), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: 7}, "VIP"},
		{AgentService{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6)}, "IPv4 VIP"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: 7, Group: AgentGroupPin}, "reserved"},
		{AgentService{VIP: addr(svc6VIP), Guest: addr(dptest.GuestAddr), Guest6: addr(agentPriv6), Ifindex: 7, VSID: 1 << 24}, "24 bits"},
	}
	f := NewFakeAgent()
	for _, b := range bad {
		if err := a.PutService(b.s); err == nil || !strings.Contains(err.Error(), b.why) {
			t.Errorf("PutService(%+v): %v, want an error saying %q", b.s, err, b.why)
		}
		if err := f.PutService(b.s); err == nil || !strings.Contains(err.Error(), b.why) {
			t.Errorf("fake PutService(%+v): %v, want an error saying %q", b.s, err, b.why)
		}
	}
	if got, _ := a.Services(); len(got) != 1 {
		t.Fatalf("a refused service was written: %+v", got)
	}
	if got, _ := f.Services(); len(got) != 0 {
		t.Fatalf("the fake wrote a refused service: %+v", got)
	}
}

// TestAgentIPv6VIPMutated runs randomly mutated IPv6 VIP frames (seeded:
// the same every run) through both agent programs, with the VIP's
// services and flows in place, and holds what comes out to the path's
// rules: every packet is counted under one reason (no uncounted drop);
// from an edge, a delivered packet goes to one of the VIP's backends (its
// address6) from the source it came with, never elsewhere; from the
// guest, a tunnelled packet carries the VIP or the guest's IPv6 EIP as its
// source, never a private address, in NVGRE to one of the edges with the
// guest's VSID. A mutation only touches the inner IPv6 packet (the outer
// headers are other tests' matter).
func TestAgentIPv6VIPMutated(t *testing.T) {
	env, a, _ := newAgentSvc6Bed(t)
	key := uint32(vsid<<8 | svc6KeyLow)
	syn80 := pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40000, dport: 80, hop: 61}
	syn443 := pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40001, dport: 443, hop: 61}
	udpB := pkt6{src: v6Client, dst: svc6VIP, proto: nhUDP, sport: 5000, dport: 7777, hop: 61}
	in := [][]byte{svc6FromEdge(t, edgeA, svc6MACA, key, syn80), svc6FromEdge(t, edgeA, svc6MACA, key, syn443),
		svc6FromEdge(t, edgeB, svc6MACB, key, udpB)}
	for _, f := range in {
		if res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, f); err != nil || res.Action != xdpRedirect {
			t.Fatalf("a VIP flow's first packet: action %d %v", res.Action, err)
		}
	}
	out := [][]byte{
		eth6(dptest.VMMAC, dptest.GuestMAC, false, pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 80, dport: 40000, hop: 64, tcpFlags: 0x12}.ip()),
		eth6(dptest.VMMAC, dptest.GuestMAC, false, pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 8443, dport: 40001, hop: 64, tcpFlags: 0x10}.ip()),
		eth6(dptest.VMMAC, dptest.GuestMAC, false, pkt6{src: svc6Priv6B, dst: v6Client, proto: nhUDP, sport: 7777, dport: 5000, hop: 64}.ip()),
	}
	const innerOff = 14 + 20 + 8 + 14 // NVGRE: the inner IPv6 packet
	backends := map[netip.Addr]bool{addr(agentPriv6): true, addr(svc6Priv6B): true}
	public := map[netip.Addr]bool{addr(svc6VIP): true, addr(agentEIP6): true}
	edges := map[netip.Addr]bool{addr(edgeA): true, addr(edgeB): true}
	rnd := rand.New(rand.NewPCG(21, 6)) // fixed: failures reproduce
	mutate := func(b []byte, from int) []byte {
		m := bytes.Clone(b)
		for n := 1 + rnd.IntN(4); n > 0; n-- {
			switch i := from + rnd.IntN(len(m)-from); rnd.IntN(3) {
			case 0:
				m[i] = byte(rnd.IntN(256))
			case 1:
				m[i] ^= 1 << rnd.IntN(8)
			default:
				m = m[:i+1] // truncated
			}
		}
		return m
	}
	addr16 := func(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b)) }
	redirected := map[string]int{}
	run := func(prog *ebpfProgram, dev string, frame []byte, check func(res dptest.Result) string) {
		t.Helper()
		before, _ := a.Stats()
		res, err := env.Run(prog, dev, frame)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := a.Stats()
		counted := uint64(0)
		for _, name := range StatNames() {
			if name != "flow_new" {
				counted += after[name].Packets - before[name].Packets
			}
		}
		why := ""
		switch {
		case counted != 1:
			why = fmt.Sprintf("counted under %d reasons, want 1", counted)
		case res.Action == xdpDrop || res.Action == xdpPass:
		case res.Action == xdpRedirect:
			why = check(res)
			redirected[dev]++
		default:
			why = fmt.Sprintf("action %d", res.Action)
		}
		if why != "" {
			t.Fatalf("%s\nin:  %x\nout: %x", why, frame, res.Out)
		}
	}
	for i := 0; i < 3000; i++ {
		m := mutate(in[i%len(in)], innerOff)
		run(a.UnderlayProgram(), dptest.UlDev, m, func(res dptest.Result) string {
			o := res.Out
			if len(o) < 14+40 || binary.BigEndian.Uint16(o[12:]) != 0x86dd {
				return "delivered: no IPv6 packet"
			}
			if d := addr16(o[14+24 : 14+40]); !backends[d] {
				return fmt.Sprintf("delivered to %v, no backend", d)
			}
			if !bytes.Equal(o[14+8:14+24], m[innerOff+8:innerOff+24]) {
				return "delivered from another source than it came with"
			}
			return ""
		})
		run(a.GuestProgram(), dptest.GuestDev, mutate(out[i%len(out)], 14), func(res dptest.Result) string {
			o := res.Out
			if len(o) < innerOff+40 || o[23] != 47 {
				return "tunnelled: no NVGRE"
			}
			if d := netip.AddrFrom4([4]byte(o[30:34])); !edges[d] {
				return fmt.Sprintf("tunnelled to %v, no edge", d)
			}
			if s := addr16(o[innerOff+8 : innerOff+24]); !public[s] {
				return fmt.Sprintf("tunnelled from %v: not the VIP nor the EIP", s)
			}
			if k := binary.BigEndian.Uint32(o[14+20+4:]) >> 8; k != vsid {
				return fmt.Sprintf("VSID %d", k)
			}
			return ""
		})
	}
	// The mutations leave some packets valid: a checker that drops
	// everything passes no rule.
	t.Logf("of 3000 mutants each way, delivered or tunnelled: %v", redirected)
	if redirected[dptest.UlDev] < 100 || redirected[dptest.GuestDev] < 100 {
		t.Fatalf("too few mutants went through (%v): the test checks nothing", redirected)
	}
}

// TestAgentIPv6VIPICMPv6: an ICMPv6 error about a VIP flow (from a router
// on the way to the client) reaches the backend the edge chose with its
// quote translated as the guest sent the packet: the quoted source from
// the VIP to the guest's address, the quoted source port to the backend
// port, the ICMPv6 checksum following (the quoted TCP/UDP checksum left
// alone, as on IPv4). What is not an error about a VIP flow is
// drop_unknown. A guest's error about a VIP flow leaves by that flow, its
// quote translated back to the VIP and VIP port.
func TestAgentIPv6VIPICMPv6(t *testing.T) {
	env, a, _ := newAgentSvc6Bed(t)
	key := uint32(vsid<<8 | svc6KeyLow)
	const router = "2001:db8:ff::1"
	icmpErr := func(typ, code uint8, quote []byte, dst string) []byte {
		body := make([]byte, 8, 8+len(quote))
		body[0], body[1] = typ, code
		if typ == 2 {
			binary.BigEndian.PutUint32(body[4:], 1280)
		}
		b := ip6Hdr(router, dst, nhICMPv6, append(body, quote...))
		b[7] = 61
		setL4Csum6(b)
		return b
	}
	fromEdge := func(mac string, ip []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, eth6(gwMAC, mac, false, ip))
	}
	toGuest := func(ip []byte) []byte { return eth6(dptest.GuestMAC, dptest.VMMAC, false, ip) }
	// asSent is the quote as the guest sent the packet: its address and
	// port, the quoted checksum as the client saw it.
	asSent := func(q []byte, priv string, port uint16) []byte {
		q = bytes.Clone(q)
		p := addr(priv).As16()
		copy(q[8:24], p[:])
		if port != 0 {
			binary.BigEndian.PutUint16(q[40:], port)
		}
		return q
	}
	reply443 := pkt6{src: svc6VIP, dst: v6Client, proto: nhTCP, sport: 443, dport: 40001, hop: 60, tcpFlags: 0x12}.ip()
	reply80 := pkt6{src: svc6VIP, dst: v6Client, proto: nhTCP, sport: 80, dport: 40000, hop: 60, tcpFlags: 0x10}.ip()[:48]
	replyB := pkt6{src: svc6VIP, dst: v6Client, proto: nhUDP, sport: 7777, dport: 5000, hop: 60}.ip()
	notVIP := pkt6{src: agentEIP6, dst: v6Client, proto: nhTCP, sport: 443, dport: 40001, hop: 60, tcpFlags: 0x12}.ip()
	port22 := pkt6{src: svc6VIP, dst: v6Client, proto: nhTCP, sport: 22, dport: 40001, hop: 60, tcpFlags: 0x12}.ip()
	echoQuote := pkt6{src: svc6VIP, dst: v6Client, proto: nhICMPv6, icmpType: 129, hop: 60}.ip()
	eipOut := pkt6{src: agentEIP6, dst: v6Client, proto: nhTCP, sport: 22, dport: 40002, hop: 60, tcpFlags: 0x10}.ip()
	guestCheck := func(t *testing.T, out []byte) { checkL4Csum6(t, out, 14) }
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "port unreachable about VIP port 443: to backend port 8443", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(1, 4, reply443, svc6VIP)),
			action: xdpRedirect, out: toGuest(icmpErr(1, 4, asSent(reply443, agentPriv6, 8443), agentPriv6)), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}},
		{name: "packet too big about VIP port 80, a quote of 8 bytes past the header", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(2, 0, reply80, svc6VIP)),
			action: xdpRedirect, out: toGuest(icmpErr(2, 0, asSent(reply80, agentPriv6, 0), agentPriv6)), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}},
		{name: "time exceeded about a udp flow to any port, guest B", dev: dptest.UlDev, in: fromEdge(svc6MACB, icmpErr(3, 0, replyB, svc6VIP)),
			action: xdpRedirect, out: toGuest(icmpErr(3, 0, asSent(replyB, svc6Priv6B, 0), svc6Priv6B)), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}},
		{name: "a quote not from the VIP", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(1, 4, notVIP, svc6VIP)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a quote of a port the VIP does not serve", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(1, 4, port22, svc6VIP)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a quote without its ports", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(1, 4, reply443[:42], svc6VIP)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a quote of an ICMPv6 packet", dev: dptest.UlDev, in: fromEdge(svc6MACA, icmpErr(1, 4, echoQuote, svc6VIP)),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "guest A's IPv6 EIP (a service's too): an error about its EIP flow has the quote's source the guest's", dev: dptest.UlDev,
			in:     fromEdge(svc6EIPMAC, icmpErr(2, 0, eipOut, agentEIP6)),
			action: xdpRedirect, out: toGuest(icmp6ErrWant(t, router, agentPriv6, 61, 2, 0, 1280, quoteAddr(eipOut, false, agentPriv6))),
			check: guestCheck, stats: map[string]uint64{"decap_tx": 1}, eipSlot: ptr[uint32](agentIdx6), eipRx: 1},
		{name: "guest A's IPv6 EIP: a truncated quote", dev: dptest.UlDev, in: fromEdge(svc6EIPMAC, icmpErr(2, 0, eipOut[:40], agentEIP6)),
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "an echo request to the VIP is no error", dev: dptest.UlDev,
			in:     fromEdge(svc6MACA, pkt6{src: v6Client, dst: svc6VIP, proto: nhICMPv6, hop: 61}.ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
	})

	// The guests' errors about a VIP flow go by the flow they quote: the
	// source and the quoted destination back to the VIP and VIP port, to
	// the flow's edge. Flows: client:40001 -> A port 8443 (VIP port 443)
	// from edge A, client:5000 -> B port 7777 from edge B.
	for _, f := range [][]byte{
		svc6FromEdge(t, edgeA, svc6MACA, key, pkt6{src: v6Client, dst: svc6VIP, proto: nhTCP, sport: 40001, dport: 443, hop: 61}),
		svc6FromEdge(t, edgeB, svc6MACB, key, pkt6{src: v6Client, dst: svc6VIP, proto: nhUDP, sport: 5000, dport: 7777, hop: 61}),
	} {
		if res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, f); err != nil || res.Action != xdpRedirect {
			t.Fatalf("a VIP flow's first packet: action %d %v", res.Action, err)
		}
	}
	guestErr := func(src string, typ, code uint8, quote []byte) []byte {
		body := make([]byte, 8, 8+len(quote))
		body[0], body[1] = typ, code
		b := ip6Hdr(src, v6Client, nhICMPv6, append(body, quote...))
		setL4Csum6(b)
		return b
	}
	// asReceived is the quote of the client's packet as the client sent
	// it: to the VIP and VIP port.
	asReceived := func(q []byte, port uint16) []byte {
		q = bytes.Clone(q)
		v := addr(svc6VIP).As16()
		copy(q[24:40], v[:])
		if port != 0 {
			binary.BigEndian.PutUint16(q[42:], port)
		}
		return q
	}
	encap := func(ip []byte, edge string) []byte {
		src := netip.AddrFrom16([16]byte(ip[8:24]))
		h := flowhash.Hash6(flowhash.Tuple{Src: src, Dst: addr(v6Client), Proto: nhICMPv6}, testSeed)
		if edge == "" {
			edge = []string{edgeA, edgeB}[h%2]
		}
		return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, eth6(dptest.VMMAC, gwMAC, false, ip))
	}
	fromGuest := func(ip []byte) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, ip) }
	toB := pkt6{src: v6Client, dst: svc6Priv6B, proto: nhUDP, sport: 5000, dport: 7777, hop: 60}.ip()
	toA := pkt6{src: v6Client, dst: agentPriv6, proto: nhTCP, sport: 40001, dport: 8443, hop: 60, tcpFlags: 0x10}.ip()[:48]
	toAOther := pkt6{src: v6Client, dst: agentPriv6, proto: nhUDP, sport: 6000, dport: 53, hop: 60}.ip()
	toBOther := pkt6{src: v6Client, dst: svc6Priv6B, proto: nhUDP, sport: 5999, dport: 7777, hop: 60}.ip()
	tunCheck := func(t *testing.T, out []byte) { checkL4Csum6(t, out, 14+20+8+14) }
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "guest B's port unreachable about its VIP flow leaves as the VIP, to the flow's edge", dev: dptest.GuestDev,
			in: fromGuest(guestErr(svc6Priv6B, 1, 4, toB)), action: xdpRedirect,
			out: encap(guestErr(svc6VIP, 1, 4, asReceived(toB, 0)), edgeB), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}},
		{name: "guest A's error about its VIP flow: the quoted port back to 443", dev: dptest.GuestDev,
			in: fromGuest(guestErr(agentPriv6, 2, 0, toA)), action: xdpRedirect,
			out: encap(guestErr(svc6VIP, 2, 0, asReceived(toA, 443)), edgeA), check: tunCheck, stats: map[string]uint64{"encap_tx": 1},
			eipSlot: ptr[uint32](agentIdx6)},
		{name: "guest A's error about no VIP flow leaves by its IPv6 EIP, the quote's destination the EIP", dev: dptest.GuestDev,
			in: fromGuest(guestErr(agentPriv6, 1, 4, toAOther)), action: xdpRedirect,
			out: encap(guestErr(agentEIP6, 1, 4, quoteAddr(toAOther, true, agentEIP6)), ""), check: tunCheck, stats: map[string]uint64{"encap_tx": 1},
			eipSlot: ptr[uint32](agentIdx6), eipTx: 1},
		{name: "guest B's error about no flow opens nothing", dev: dptest.GuestDev,
			in: fromGuest(guestErr(svc6Priv6B, 1, 4, toBOther)), action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "guest B's error about its flow from another interface", dev: dptest.UlDev,
			in: fromGuest(guestErr(svc6Priv6B, 1, 4, toB)), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})
}

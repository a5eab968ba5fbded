package dataplane

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The agent's IPv6 EIP path (NAT66 over the IPv4 underlay): an IPv6 EIP
// translated 1:1 to its guest's private IPv6 address. Addresses from
// 2001:db8::/32.
const (
	agentEIP6       = "2001:db8:e1::1"
	agentPriv6      = "2001:db8:f0::5" // the guest's, on dptest.GuestDev
	agentEip6Far    = "2001:db8:e1::2" // its guest is on another interface (ifindex 999)
	agentPriv6Far   = "2001:db8:f0::6"
	agentEip6NoNbr  = "2001:db8:e1::3" // its guest's neighbour is unresolved
	agentPriv6NoNbr = "2001:db8:f1::7"
	agentPriv6NoEIP = "2001:db8:f0::99" // a guest address without an EIP
	agentIdx6       = 5
	agentIdx6b      = 6
)

// newAgent6Bed is newAgentBed with IPv6 EIPs, the guest's IPv6 route and
// permanent neighbour, and IPv6 forwarding on in the node.
func newAgent6Bed(t *testing.T) (*dptest.Env, *Agent) {
	t.Helper()
	env, a := newAgentBed(t)
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.GuestIPv6(agentPriv6, "2001:db8:f0::/64", "2001:db8:f1::/64"); err != nil {
		t.Fatal(err)
	}
	for _, e := range []AgentEIP{
		{EIP: addr(agentEIP6), Private: addr(agentPriv6), VSID: vsid, StatsIdx: agentIdx6, Ifindex: uint32(g1)},
		{EIP: addr(agentEip6Far), Private: addr(agentPriv6Far), VSID: vsid, StatsIdx: 7, Ifindex: 999},
		{EIP: addr(agentEip6NoNbr), Private: addr(agentPriv6NoNbr), VSID: vsid, StatsIdx: agentIdx6b, Ifindex: uint32(g1)},
	} {
		if err := a.PutEIP(e); err != nil {
			t.Fatal(err)
		}
	}
	return env, a
}

// pkt6 is an IPv6 packet to build: TCP (SYN), UDP, ICMPv6 echo request,
// or a later fragment (fragOff > 0, in 8-byte units) of UDP.
type pkt6 struct {
	src, dst     string
	proto        uint8
	sport, dport uint16
	hop          uint8 // 0: 64
	tc           uint8 // traffic class
	fragOff      uint16
	icmpType     uint8
	zeroUDPCsum  bool
	tcpFlags     uint8 // 0: SYN
}

// ip is the packet's bytes, its upper-layer checksum computed in full.
func (p pkt6) ip() []byte {
	var l4 []byte
	nh := p.proto
	switch {
	case p.fragOff > 0:
		l4 = cat(fragHdr(p.proto, p.fragOff, false), []byte("later fragment: no header"))
		nh = nhFrag
	case p.proto == nhTCP:
		fl := p.tcpFlags
		if fl == 0 {
			fl = 0x02
		}
		l4 = cat(tcp6(p.sport, p.dport, fl), []byte("azgate"))
	case p.proto == nhUDP:
		l4 = udp6(p.sport, p.dport, 12)
		copy(l4[8:], "azgate udp6!")
	case p.proto == nhICMPv6:
		ty := p.icmpType
		if ty == 0 {
			ty = 128
		}
		l4 = icmp6(ty, 12)
		l4[4], l4[5], l4[7] = 0x12, 0x34, 1 // identifier, sequence
	}
	b := ip6Hdr(p.src, p.dst, nh, l4)
	b[0] |= p.tc >> 4
	b[1] |= p.tc << 4
	if p.hop != 0 {
		b[7] = p.hop
	}
	if p.fragOff == 0 && !p.zeroUDPCsum {
		setL4Csum6(b)
	}
	return b
}

func (p pkt6) withDst(d string) pkt6 { p.dst = d; return p }
func (p pkt6) withSrc(s string) pkt6 { p.src = s; return p }

// l4Off6 is the offset of an unfragmented packet's upper-layer header
// (no extension headers) and its checksum's offset in it.
func l4Csum6Off(ip []byte) (int, bool) {
	switch ip[6] {
	case nhTCP:
		return 40 + 16, true
	case nhUDP:
		return 40 + 6, true
	case nhICMPv6:
		return 40 + 2, true
	}
	return 0, false
}

// pseudoSum6 is the checksum over the IPv6 pseudo-header (RFC 8200 8.1)
// and the upper-layer packet of ip (no extension headers).
func pseudoSum6(ip []byte) uint16 {
	l4 := ip[40:]
	ph := make([]byte, 40, 40+len(l4))
	copy(ph, ip[8:40])
	binary.BigEndian.PutUint32(ph[32:], uint32(len(l4)))
	ph[39] = ip[6]
	return csum(append(ph, l4...))
}

func setL4Csum6(ip []byte) {
	off, ok := l4Csum6Off(ip)
	if !ok {
		return
	}
	ip[off], ip[off+1] = 0, 0
	c := pseudoSum6(ip)
	if c == 0 && ip[6] == nhUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(ip[off:], c)
}

// checkL4Csum6: the upper-layer checksum of the IPv6 packet at off in out
// verifies over the pseudo-header.
func checkL4Csum6(t *testing.T, out []byte, off int) {
	t.Helper()
	ip := out[off:]
	if _, ok := l4Csum6Off(ip); !ok {
		return
	}
	if c := pseudoSum6(ip); c != 0 {
		t.Errorf("upper-layer checksum does not verify over the pseudo-header (sum %#04x)", c)
	}
}

func TestAgentIPv6Underlay(t *testing.T) {
	env, a := newAgent6Bed(t)
	slot := ptr[uint32](agentIdx6)
	key := uint32(vsid<<8 | 0x44)
	fromEdge := func(src string, key uint32, ip []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr, key, 0, eth6(gwMAC, "02:00:c6:33:64:07", false, ip))
	}
	toGuest := func(p pkt6) []byte {
		return eth6(dptest.GuestMAC, dptest.VMMAC, false, p.withDst(agentPriv6).ip())
	}
	tcp := pkt6{src: v6Client, dst: agentEIP6, proto: nhTCP, sport: 40000, dport: 443, hop: 61, tc: 0x28}
	udp := pkt6{src: v6Client, dst: agentEIP6, proto: nhUDP, sport: 1000, dport: 53, hop: 61}
	ping := pkt6{src: v6Client, dst: agentEIP6, proto: nhICMPv6, hop: 61}
	frag := pkt6{src: v6Client, dst: agentEIP6, proto: nhUDP, fragOff: 100, hop: 61}
	noCsum := udp
	noCsum.zeroUDPCsum = true
	hop0 := udp.ip()
	hop0[7] = 0
	setL4Csum6(hop0)
	guestCheck := func(t *testing.T, out []byte) {
		checkL4Csum6(t, out, 14)
		if out[14+7] != 61 {
			t.Errorf("hop limit %d, want 61 (the edge decrements, not the agent)", out[14+7])
		}
	}

	fixtures := []fixture{
		{name: "tcp for a local IPv6 EIP is translated and delivered", dev: dptest.UlDev, in: fromEdge(edgeA, key, tcp.ip()),
			action: xdpRedirect, out: toGuest(tcp), check: guestCheck, stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "udp", dev: dptest.UlDev, in: fromEdge(edgeB, key, udp.ip()),
			action: xdpRedirect, out: toGuest(udp), check: guestCheck, stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "icmpv6 echo", dev: dptest.UlDev, in: fromEdge(edgeA, key, ping.ip()),
			action: xdpRedirect, out: toGuest(ping), check: guestCheck, stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "later fragment: only the destination changes", dev: dptest.UlDev, in: fromEdge(edgeA, key, frag.ip()),
			action: xdpRedirect, out: toGuest(frag), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "udp with a zero checksum is dropped", dev: dptest.UlDev, in: fromEdge(edgeA, key, noCsum.ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_udp_csum0": 1}},
		{name: "hop limit 0 is never delivered", dev: dptest.UlDev, in: fromEdge(edgeA, key, hop0),
			action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "the guest's neighbour unresolved: to the kernel, translated", dev: dptest.UlDev,
			in:     fromEdge(edgeA, key, udp.withDst(agentEip6NoNbr).ip()),
			action: xdpPass, out: eth6(dptest.FabMAC, dptest.UlMAC, false, udp.withDst(agentPriv6NoNbr).ip()),
			stats: map[string]uint64{"decap_pass": 1}, eipSlot: ptr[uint32](agentIdx6b), eipRx: 1},
		{name: "IPv6 EIP not hosted here", dev: dptest.UlDev, in: fromEdge(edgeA, key, udp.withDst("2001:db8:e1::77").ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "an IPv4 EIP's address as IPv6 is no EIP", dev: dptest.UlDev, in: fromEdge(edgeA, key, udp.withDst("::ffff:"+eip).ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "wrong VSID", dev: dptest.UlDev, in: fromEdge(edgeA, 77<<8, udp.ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "nvgre from a stranger", dev: dptest.UlDev, in: fromEdge("198.18.9.9", key, udp.ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "martian inner source", dev: dptest.UlDev, in: fromEdge(edgeA, key, udp.withSrc("::1").ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "malformed inner IPv6 (routing header 0)", dev: dptest.UlDev,
			in:     fromEdge(edgeA, key, ip6Hdr(v6Client, agentEIP6, nhRoute, cat(routeHdr(nhUDP, 0, 1), udp6(1, 2, 4)))),
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
	}
	runFixtures(t, env, agentProg{a: a}, a, fixtures)
}

func TestAgentIPv6Guest(t *testing.T) {
	env, a := newAgent6Bed(t)
	slot := ptr[uint32](agentIdx6)
	fromGuest := func(ip []byte) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, ip) }
	encap := func(p pkt6) []byte {
		proto := p.proto
		sport, dport := p.sport, p.dport
		if p.fragOff > 0 || proto == nhICMPv6 {
			sport, dport = 0, 0
		}
		h := flowhash.Hash6(flowhash.Tuple{Src: addr(agentEIP6), Dst: addr(p.dst), Proto: proto, SrcPort: sport, DstPort: dport}, testSeed)
		edge := []string{edgeA, edgeB}[h%2]
		inner := eth6(dptest.VMMAC, gwMAC, false, p.withSrc(agentEIP6).ip())
		return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, p.tc, inner)
	}
	tcp := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 443, dport: 40000, hop: 64, tc: 0x28}
	udp := pkt6{src: agentPriv6, dst: v6Client, proto: nhUDP, sport: 53, dport: 1000, hop: 64}
	udp2 := pkt6{src: agentPriv6, dst: v6Dst, proto: nhUDP, sport: 5353, dport: 4444, hop: 64}
	ping := pkt6{src: agentPriv6, dst: v6Client, proto: nhICMPv6, icmpType: 129, hop: 64}
	frag := pkt6{src: agentPriv6, dst: v6Client, proto: nhUDP, fragOff: 100, hop: 64}
	noCsum := udp
	noCsum.zeroUDPCsum = true
	hop0 := udp.ip()
	hop0[7] = 0
	setL4Csum6(hop0)
	// The inner packet in the tunnel: Ethernet, outer IPv4 (20), GRE (8),
	// inner Ethernet (14).
	tunCheck := func(t *testing.T, out []byte) {
		checkL4Csum6(t, out, 14+20+8+14)
		if got := binary.BigEndian.Uint16(out[14+20+8+12:]); got != 0x86dd {
			t.Errorf("inner ethertype %#04x, want 0x86dd", got)
		}
		if out[14+20+8+14+7] != 64 {
			t.Errorf("inner hop limit %d, want 64 (left as it was)", out[14+20+8+14+7])
		}
	}
	ndp := func(typ uint8, src, dst string) []byte {
		b := ip6Hdr(src, dst, nhICMPv6, icmp6(typ, 20))
		b[7] = 255
		setL4Csum6(b)
		return fromGuest(b)
	}
	ndpHop64 := ip6Hdr(agentPriv6, "ff02::1:ff00:1", nhICMPv6, icmp6(135, 20))
	setL4Csum6(ndpHop64)

	fixtures := []fixture{
		{name: "tcp from a guest with an IPv6 EIP is translated and encapsulated", dev: dptest.GuestDev, in: fromGuest(tcp.ip()),
			action: xdpRedirect, out: encap(tcp), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "udp", dev: dptest.GuestDev, in: fromGuest(udp.ip()),
			action: xdpRedirect, out: encap(udp), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "udp, another flow", dev: dptest.GuestDev, in: fromGuest(udp2.ip()),
			action: xdpRedirect, out: encap(udp2), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "icmpv6 echo reply", dev: dptest.GuestDev, in: fromGuest(ping.ip()),
			action: xdpRedirect, out: encap(ping), check: tunCheck, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "later fragment: only the source changes", dev: dptest.GuestDev, in: fromGuest(frag.ip()),
			action: xdpRedirect, out: encap(frag), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "udp with a zero checksum is dropped", dev: dptest.GuestDev, in: fromGuest(noCsum.ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_udp_csum0": 1}},
		{name: "hop limit 0 never leaves", dev: dptest.GuestDev, in: fromGuest(hop0),
			action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "another guest's IPv6 address on this port is spoofing", dev: dptest.GuestDev, in: fromGuest(udp.withSrc(agentPriv6Far).ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a guest address without an IPv6 EIP opens nothing", dev: dptest.GuestDev, in: fromGuest(udp.withSrc(agentPriv6NoEIP).ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "to a multicast group: never encapsulated", dev: dptest.GuestDev, in: fromGuest(udp.withDst("ff0e::1").ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "to a link-local address: never encapsulated", dev: dptest.GuestDev, in: fromGuest(udp.withDst("fe80::1").ip()),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "ndp neighbour solicitation for the gateway reaches the kernel", dev: dptest.GuestDev,
			in: ndp(135, agentPriv6, "ff02::1:ff00:1"), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "ndp neighbour solicitation from a link-local address", dev: dptest.GuestDev,
			in: ndp(135, "fe80::5", "ff02::1:ff00:1"), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "ndp duplicate address detection from ::", dev: dptest.GuestDev,
			in: ndp(135, "::", "ff02::1:ff00:5"), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "ndp neighbour advertisement", dev: dptest.GuestDev,
			in: ndp(136, agentPriv6, "fe80::1"), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "ndp router solicitation", dev: dptest.GuestDev,
			in: ndp(133, "fe80::5", "ff02::2"), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "a guest's router advertisement never reaches the host (RA guard)", dev: dptest.GuestDev,
			in: ndp(134, "fe80::5", "ff02::1"), action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "ndp with a hop limit below 255 is no neighbour discovery", dev: dptest.GuestDev,
			in: fromGuest(ndpHop64), action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "a redirect (137) from a guest is not passed", dev: dptest.GuestDev,
			in: ndp(137, "fe80::5", "fe80::1"), action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, fixtures)
}

// TestAgentIPv6EIPAPI: the agent's EIP map API takes IPv6 entries, reads
// them back, deletes them, and refuses what the data path cannot do.
func TestAgentIPv6EIPAPI(t *testing.T) {
	_, a := newAgentBed(t)
	e := AgentEIP{EIP: addr(agentEIP6), Private: addr(agentPriv6), VSID: vsid, StatsIdx: agentIdx6, Ifindex: 7, Group: 0}
	if err := a.PutEIP(e); err != nil {
		t.Fatal(err)
	}
	got, err := a.EIPs()
	if err != nil {
		t.Fatal(err)
	}
	if got[addr(agentEIP6)] != e {
		t.Fatalf("read back %+v, want %+v", got[addr(agentEIP6)], e)
	}
	if got[addr(eip)].EIP != addr(eip) {
		t.Fatalf("the IPv4 EIP is gone: %+v", got)
	}
	pk, _ := agentKeyOf(addr(agentPriv6))
	var g agentAgentGuest
	if err := a.objs.AgentGuests.Lookup(akey(pk), &g); err != nil || g.Family != 10 || addrFrom(edgeIpAddr(g.Eip), g.Family) != addr(agentEIP6) || g.Ifindex != 7 {
		t.Fatalf("guest entry %+v (%v), want family 10, EIP %v, ifindex 7", g, err, agentEIP6)
	}
	if err := a.DeleteEIP(addr(agentEIP6)); err != nil {
		t.Fatal(err)
	}
	if err := a.objs.AgentGuests.Lookup(akey(pk), &g); err == nil {
		t.Fatalf("guest entry left behind: %+v", g)
	}
	if got, _ := a.EIPs(); len(got) != 2 {
		t.Fatalf("after delete: %v", got)
	}
	for _, bad := range []AgentEIP{
		{EIP: addr(agentEIP6), Private: addr(dptest.GuestAddr)},
		{EIP: addr(eip), Private: addr(agentPriv6)},
		{EIP: addr("fe80::1"), Private: addr(agentPriv6)},
		{EIP: addr(agentEIP6), Private: addr("ff02::1")},
		{EIP: addr("::ffff:198.51.100.1"), Private: addr(agentPriv6)},
	} {
		if err := a.PutEIP(bad); err == nil {
			t.Errorf("PutEIP(%v -> %v, service %v) accepted", bad.EIP, bad.Private, bad.Service)
		}
	}
	if got, _ := a.EIPs(); len(got) != 2 {
		t.Fatalf("a refused EIP was written: %v", got)
	}
	// agent_ifaddrs is keyed by IPv4 addresses: an IPv6 one is refused
	// whole, before any write (it was once written as 0.0.0.0).
	if err := a.SetIfAddrs([]IfAddr{{Ifindex: 7, Addr: addr("192.0.2.77")}, {Ifindex: 7, Addr: addr(agentPriv6)}}); err == nil || !strings.Contains(err.Error(), "IPv4 addresses only") {
		t.Fatalf("SetIfAddrs with an IPv6 address: %v", err)
	}
	var one uint32
	for _, w := range []netip.Addr{addr("192.0.2.77"), netip.IPv4Unspecified()} {
		k := agentIfAddr{Ifindex: 7, Addr: ip4word(w)}
		if err := a.objs.AgentIfaddrs.Lookup(&k, &one); err == nil {
			t.Errorf("a refused SetIfAddrs wrote %v", w)
		}
	}
}

// TestFakeAgentRefusesAsReal: the fake agent refuses what the real one
// refuses, so reconciler tests on the fake meet the same errors.
func TestFakeAgentRefusesAsReal(t *testing.T) {
	f := NewFakeAgent()
	for _, bad := range []AgentEIP{
		{EIP: addr(agentEIP6), Private: addr(dptest.GuestAddr)},
		{EIP: addr(eip), Private: addr(agentPriv6)},
		{EIP: addr("fe80::1"), Private: addr(agentPriv6)},
		{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: 1 << 24},
	} {
		if err := f.PutEIP(bad); err == nil {
			t.Errorf("fake PutEIP(%v -> %v, service %v, vsid %d) accepted", bad.EIP, bad.Private, bad.Service, bad.VSID)
		}
	}
	if got, _ := f.EIPs(); len(got) != 0 {
		t.Fatalf("the fake wrote a refused EIP: %v", got)
	}
	if err := f.PutEIP(AgentEIP{EIP: addr(agentEIP6), Private: addr(agentPriv6), VSID: vsid}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetIfAddrs([]IfAddr{{Ifindex: 7, Addr: addr(agentPriv6)}}); err == nil {
		t.Fatal("fake SetIfAddrs took an IPv6 address")
	}
	// The IPv6 underlay: an edge's or the agent's address an underlay
	// cannot take, and an edge's name as an address.
	for _, bad := range []AgentConfig{
		{Underlay: addr("fe80::1")},
		{Underlay: addr("::ffff:198.18.0.1")},
		{Underlay: addr(dptest.UlAddr6), Edges: []netip.Addr{addr("ff02::1")}},
		{Underlay: addr(dptest.UlAddr6), Edges: []netip.Addr{addr("::1")}},
		{Underlay: addr(dptest.UlAddr), Edges: []netip.Addr{addr("0.0.0.7")}},
		{Underlay: addr(dptest.UlAddr), ICMPSource6: addr("fe80::1")},
		{Underlay: addr(dptest.UlAddr), ICMPSource6: addr("::ffff:198.18.0.1")},
	} {
		if err := f.SetConfig(bad); err == nil {
			t.Errorf("fake SetConfig(underlay %v, edges %v) accepted", bad.Underlay, bad.Edges)
		}
	}
	for _, bad := range [][]netip.Addr{{addr("fe80::1")}, {addr("0.0.0.7")}} {
		if err := f.SetGroup(1, AgentGroup{Set: "s", Members: bad}); err == nil {
			t.Errorf("fake SetGroup(%v) accepted", bad)
		}
	}
	if err := f.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr6), Edges: []netip.Addr{addr(edge6A), addr(edgeA)}}); err != nil {
		t.Errorf("fake SetConfig over an IPv6 underlay: %v", err)
	}
	if err := f.SetGroup(1, AgentGroup{Set: "s", Members: []netip.Addr{addr(edge6A)}}); err != nil {
		t.Errorf("fake SetGroup with an IPv6 edge: %v", err)
	}
}

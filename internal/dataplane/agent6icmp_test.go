package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The agent's ICMPv6 errors about an IPv6 EIP's flows (issue 21): the
// quoted packet is translated as the outer one (NAT66, RFC 5508 4.1's
// behaviour for 1:1 NAT, as the IPv4 EIPs' nat_icmp_quote), so that the
// guest's stack matches an error from the Internet to its flow (PMTU
// discovery) and the Internet host matches the guest's.

const agentICMPRouter = "2001:db8:ff::1" // a router on the way to the client

// icmp6ErrIn is an ICMPv6 error (type typ, code, the 4 bytes rest: packet
// too big's MTU, parameter problem's pointer) from src to dst quoting
// quote, its checksum computed in full by the tests' own code (setL4Csum6).
func icmp6ErrIn(src, dst string, hop, typ, code uint8, rest uint32, quote []byte) []byte {
	body := make([]byte, 8, 8+len(quote))
	body[0], body[1] = typ, code
	binary.BigEndian.PutUint32(body[4:], rest)
	b := ip6Hdr(src, dst, nhICMPv6, append(body, quote...))
	b[7] = hop
	setL4Csum6(b)
	return b
}

// icmp6ErrWant is the same error serialized by gopacket, whose ICMPv6
// checksum is the reference for the expected frames.
func icmp6ErrWant(t *testing.T, src, dst string, hop, typ, code uint8, rest uint32, quote []byte) []byte {
	t.Helper()
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hop,
		SrcIP: net.IP(addr(src).AsSlice()), DstIP: net.IP(addr(dst).AsSlice())}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	if err := ic.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32(nil, rest)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip6, ic, gopacket.Payload(append(body, quote...))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// quoteAddr is the quote q with its source (dst false) or destination
// address set to a; the quoted upper-layer checksum is left as it was.
func quoteAddr(q []byte, dst bool, a string) []byte {
	q = bytes.Clone(q)
	b := addr(a).As16()
	if dst {
		copy(q[24:40], b[:])
	} else {
		copy(q[8:24], b[:])
	}
	return q
}

// TestAgentIPv6EIPICMPv6Underlay: an ICMPv6 error from the Internet about
// an IPv6 EIP's flow reaches the guest with the quoted source translated
// from the EIP to the guest's address (the MTU and the quoted TCP/UDP
// checksum kept, the ICMPv6 checksum following); a quote from another
// address is delivered with the outer destination translated only (as
// IPv4's nat_icmp_quote leaves it); an error whose quote is shorter than
// its IPv6 header and 4 bytes is drop_inner_bad (as IPv4's agent drops a
// quote without its header).
func TestAgentIPv6EIPICMPv6Underlay(t *testing.T) {
	env, a := newAgent6Bed(t)
	slot := ptr[uint32](agentIdx6)
	key := uint32(vsid<<8 | 0x44)
	fromEdge := func(ip []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, eth6(gwMAC, "02:00:c6:33:64:07", false, ip))
	}
	toGuest := func(ip []byte) []byte { return eth6(dptest.GuestMAC, dptest.VMMAC, false, ip) }
	guestCheck := func(t *testing.T, out []byte) {
		checkL4Csum6(t, out, 14)
		icmp6SumOK(14)(t, out)
	}
	// The guest's packets as they crossed the Internet (from its EIP).
	tcpOut := pkt6{src: agentEIP6, dst: v6Client, proto: nhTCP, sport: 443, dport: 40000, hop: 60, tcpFlags: 0x10}.ip()
	udpOut := pkt6{src: agentEIP6, dst: v6Client, proto: nhUDP, sport: 53, dport: 1000, hop: 1}.ip()
	udp44 := udpOut[:44] // the header and the ports alone
	echoOut := pkt6{src: agentEIP6, dst: v6Client, proto: nhICMPv6, icmpType: 128, hop: 1}.ip()
	other := pkt6{src: agentEip6Far, dst: v6Client, proto: nhUDP, sport: 53, dport: 1000, hop: 1}.ip()
	if bytes.Equal(quoteAddr(tcpOut, false, agentPriv6), tcpOut) {
		t.Fatal("the translated quote is the quote: the test checks nothing")
	}
	errIn := func(dst string, typ, code uint8, rest uint32, q []byte) []byte {
		return icmp6ErrIn(agentICMPRouter, dst, 61, typ, code, rest, q)
	}
	want := func(dst string, typ, code uint8, rest uint32, q []byte) []byte {
		return icmp6ErrWant(t, agentICMPRouter, dst, 61, typ, code, rest, q)
	}

	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "packet too big about a tcp flow: the quote's source translated, the MTU kept", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 2, 0, 1400, tcpOut)),
			action: xdpRedirect, out: toGuest(want(agentPriv6, 2, 0, 1400, quoteAddr(tcpOut, false, agentPriv6))), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "time exceeded about a udp flow", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 3, 0, 0, udpOut)),
			action: xdpRedirect, out: toGuest(want(agentPriv6, 3, 0, 0, quoteAddr(udpOut, false, agentPriv6))), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "parameter problem, a quote of the header and 4 bytes", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 4, 0, 7, udp44)),
			action: xdpRedirect, out: toGuest(want(agentPriv6, 4, 0, 7, quoteAddr(udp44, false, agentPriv6))), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "time exceeded about an echo request", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 3, 0, 0, echoOut)),
			action: xdpRedirect, out: toGuest(want(agentPriv6, 3, 0, 0, quoteAddr(echoOut, false, agentPriv6))), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "the guest's neighbour unresolved: to the kernel, the quote translated", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEip6NoNbr, 2, 0, 1280, quoteAddr(tcpOut, false, agentEip6NoNbr))),
			action: xdpPass, out: eth6(dptest.FabMAC, dptest.UlMAC, false, want(agentPriv6NoNbr, 2, 0, 1280, quoteAddr(tcpOut, false, agentPriv6NoNbr))),
			check: func(t *testing.T, out []byte) { icmp6SumOK(14)(t, out) },
			stats: map[string]uint64{"decap_pass": 1}, eipSlot: ptr[uint32](agentIdx6b), eipRx: 1},
		{name: "a quote from another address: the outer destination translated only", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 1, 4, 0, other)),
			action: xdpRedirect, out: toGuest(want(agentPriv6, 1, 4, 0, other)), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "a truncated quote (the header and 2 bytes) is dropped", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 2, 0, 1400, tcpOut[:42])),
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "a truncated quote (half a header) is dropped", dev: dptest.UlDev,
			in:     fromEdge(errIn(agentEIP6, 1, 4, 0, tcpOut[:20])),
			action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "an echo reply is no error: its body is not a quote", dev: dptest.UlDev,
			in:     fromEdge(icmp6ErrIn(v6Client, agentEIP6, 61, 129, 0, 0x12340001, tcpOut)),
			action: xdpRedirect, out: toGuest(icmp6ErrWant(t, v6Client, agentPriv6, 61, 129, 0, 0x12340001, tcpOut)), check: guestCheck,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
	})
}

// TestAgentIPv6EIPICMPv6Guest: a guest's ICMPv6 error about a flow from
// the Internet to its IPv6 EIP leaves with the quoted destination
// translated from the guest's address to the EIP (the ICMPv6 checksum
// following); a quote to another address leaves as it is; a truncated
// quote is drop_l4_trunc (IPv4's nat4 failure on this path).
func TestAgentIPv6EIPICMPv6Guest(t *testing.T) {
	env, a := newAgent6Bed(t)
	slot := ptr[uint32](agentIdx6)
	fromGuest := func(ip []byte) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, ip) }
	// An ICMPv6 error goes by the flow hash of its own addresses (no ports).
	encap := func(ip []byte) []byte {
		h := flowhash.Hash6(flowhash.Tuple{Src: addr(agentEIP6), Dst: addr(v6Client), Proto: nhICMPv6}, testSeed)
		edge := []string{edgeA, edgeB}[h%2]
		return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, eth6(dptest.VMMAC, gwMAC, false, ip))
	}
	tunCheck := func(t *testing.T, out []byte) { icmp6SumOK(14+20+8+14)(t, out) }
	// The client's packets as they reached the guest (to its address).
	udpIn := pkt6{src: v6Client, dst: agentPriv6, proto: nhUDP, sport: 5000, dport: 7777, hop: 60}.ip()
	tcpIn := pkt6{src: v6Client, dst: agentPriv6, proto: nhTCP, sport: 40000, dport: 443, hop: 60}.ip()
	other := pkt6{src: v6Client, dst: agentPriv6NoEIP, proto: nhUDP, sport: 5000, dport: 7777, hop: 60}.ip()
	errIn := func(typ, code uint8, rest uint32, q []byte) []byte {
		return icmp6ErrIn(agentPriv6, v6Client, 64, typ, code, rest, q)
	}
	want := func(typ, code uint8, rest uint32, q []byte) []byte {
		return icmp6ErrWant(t, agentEIP6, v6Client, 64, typ, code, rest, q)
	}

	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "port unreachable about a udp flow from the Internet: the quote's destination becomes the EIP", dev: dptest.GuestDev,
			in: fromGuest(errIn(1, 4, 0, udpIn)), action: xdpRedirect,
			out: encap(want(1, 4, 0, quoteAddr(udpIn, true, agentEIP6))), check: tunCheck,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "parameter problem about a tcp flow, a quote of the header and 4 bytes", dev: dptest.GuestDev,
			in: fromGuest(errIn(4, 1, 40, tcpIn[:44])), action: xdpRedirect,
			out: encap(want(4, 1, 40, quoteAddr(tcpIn[:44], true, agentEIP6))), check: tunCheck,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "a quote to another address leaves as it is", dev: dptest.GuestDev,
			in: fromGuest(errIn(1, 4, 0, other)), action: xdpRedirect,
			out: encap(want(1, 4, 0, other)), check: tunCheck,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "a truncated quote is dropped", dev: dptest.GuestDev,
			in: fromGuest(errIn(1, 4, 0, udpIn[:43])), action: xdpDrop,
			stats: map[string]uint64{"drop_l4_trunc": 1}},
	})
}

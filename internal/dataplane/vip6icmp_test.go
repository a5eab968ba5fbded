package dataplane

import (
	"encoding/binary"
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// vip6ICMPErr is an ICMPv6 error of type typ and code from a router on
// the client's side to vip6s quoting quote (packet too big: MTU 1280).
func vip6ICMPErr(typ, code uint8, quote []byte) []byte {
	body := make([]byte, 8, 8+len(quote))
	body[0], body[1] = typ, code
	if typ == 2 {
		binary.BigEndian.PutUint32(body[4:], 1280)
	}
	ip := ip6Hdr("2001:db8:99::1", vip6s, nhICMPv6, append(body, quote...))
	setL4Csum6(ip)
	return ip
}

// TestEdgeIPv6VIPICMPv6Errors: an ICMPv6 error (types 1-4) from the
// Internet about an IPv6 VIP's flow follows the flow, as an IPv4 VIP's
// ICMP errors do: the quote (a TCP or UDP packet from the VIP, its ports
// within the packet) reversed is the flow; its lb_conns6 entry, or else
// the VIP's listener and Maglev table, gives the backend, and the error
// is encapsulated to that backend's host byte for byte as the flow's
// packets are (the flow's FlowID), counted under lb_icmp_tx. An error
// writes no entry. An error about a port without a listener, a quote not
// from the VIP, of another protocol or without its ports, and ICMPv6
// that is no error are drop_lb_no_port; a listener without a backend
// drop_lb_no_backend. The frames are what the agent's agent_from_edge6
// takes as an error about a VIP flow (TestAgentIPv6VIPICMPv6's).
func TestEdgeIPv6VIPICMPv6Errors(t *testing.T) {
	b := newVIP6Bed(t)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	icmpErr := vip6ICMPErr
	tuple := func(proto uint8, cport, vport uint16) flowhash.Tuple {
		return flowhash.Tuple{Src: addr(client6), Dst: addr(vip6s), Proto: proto, SrcPort: cport, DstPort: vport}
	}
	// The flows: tcp client:40000 -> 443 (the table's g) and udp
	// client:5353 -> 53 (the any-port listener's h); then table 0 gives
	// h, so only the entry sends tcp 443's errors to g.
	if got := b.outerDst(t, ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02))); got != hostAddr {
		t.Fatalf("SYN went to %s, want %s", got, hostAddr)
	}
	if got := b.outerDst(t, ip6Hdr(client6, vip6s, nhUDP, udp6(5353, 53, 12))); got != otherHost {
		t.Fatalf("udp went to %s, want %s", got, otherHost)
	}
	b.table(t, 0, "h")
	_, v6 := b.conns(t)
	if v6 != 2 {
		t.Fatalf("%d IPv6 entries, want 2", v6)
	}

	tcpQuote := ip6Hdr(vip6s, client6, nhTCP, tcp6(443, 40000, 0x12))
	udpQuote := ip6Hdr(vip6s, client6, nhUDP, udp6(53, 5353, 12))
	tooBig := withTC(icmpErr(2, 0, tcpQuote), 0x28)
	tooBigShort := icmpErr(2, 0, tcpQuote[:44]) // the quote's ports and no more
	exceeded := icmpErr(3, 0, udpQuote)
	unreach := icmpErr(1, 4, tcpQuote)
	noEntry := icmpErr(3, 0, ip6Hdr(vip6s, client6, nhTCP, tcp6(8050, 40001, 0x12)))
	notVIP := icmpErr(2, 0, ip6Hdr("2001:db8:e1::82", client6, nhTCP, tcp6(443, 40000, 0x12)))
	noPort := icmpErr(3, 0, ip6Hdr(vip6s, client6, nhTCP, tcp6(80, 40000, 0x12)))
	echoQuote := icmpErr(1, 4, ip6Hdr(vip6s, client6, nhICMPv6, icmp6(129, 12)))
	shortQuote := icmpErr(2, 0, tcpQuote[:42])
	noBackend := icmpErr(1, 4, ip6Hdr(vip6s, client6, nhTCP, tcp6(9000, 40000, 0x12)))
	// A quote whose ports lie past the packet, in the frame's padding.
	padded := icmpErr(2, 0, tcpQuote[:40])
	padded = append(padded, 0x01, 0xbb, 0x9c, 0x40)

	fwd := func(name string, ip []byte, ft flowhash.Tuple, host, guest string, vs uint32) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpRedirect, out: vip6EncapFlow(t, ip, ft, host, guest, vs),
			stats: map[string]uint64{"lb_icmp_tx": 1, "lb_encap_tx": 0}}
	}
	drop := func(name string, ip []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpDrop, stats: map[string]uint64{counter: 1, "lb_icmp_tx": 0}}
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		fwd("packet too big about the tcp flow: its entry's backend (g), traffic class to the outer tos", tooBig,
			tuple(nhTCP, 40000, 443), hostAddr, guest6G, vsid),
		fwd("packet too big quoting the header and ports only", tooBigShort, tuple(nhTCP, 40000, 443), hostAddr, guest6G, vsid),
		fwd("destination unreachable about the tcp flow", unreach, tuple(nhTCP, 40000, 443), hostAddr, guest6G, vsid),
		fwd("time exceeded about the udp flow (any-port listener): h", exceeded, tuple(nhUDP, 5353, 53), otherHost, guest6H, vsidH),
		fwd("time exceeded about a flow without an entry: the range listener's table (h)", noEntry,
			tuple(nhTCP, 40001, 8050), otherHost, guest6H, vsidH),
		drop("a quote of a port without a listener", noPort, "drop_lb_no_port"),
		drop("a quote not from the VIP", notVIP, "drop_lb_no_port"),
		drop("a quote of an ICMPv6 packet", echoQuote, "drop_lb_no_port"),
		drop("a quote without its ports", shortQuote, "drop_lb_no_port"),
		drop("a quote whose ports are past the packet", padded, "drop_lb_no_port"),
		drop("a listener without a backend", noBackend, "drop_lb_no_backend"),
		drop("an echo reply is no error", ip6Hdr(client6, vip6s, nhICMPv6, icmp6(129, 12)), "drop_lb_no_port"),
		drop("an error with hop limit 1 (no error about an error)", withHop(icmpErr(2, 0, tcpQuote), 1), "drop_ttl"),
	})
	if _, v6 := b.conns(t); v6 != 2 {
		t.Fatalf("errors wrote entries: %d IPv6 entries, want 2", v6)
	}
}

// TestEdgeIPv6VIPICMPv6ErrorToAgent: the frame the edge sends for an
// ICMPv6 error about an IPv6 VIP's flow is one the agent takes: through
// the real agent program (its service for the VIP's port 443 on the
// edge's backend guest, backend port 8443), the error reaches the guest
// with its quote translated as the guest sent the packet (agent_quote6:
// the quoted source the guest's address, the quoted source port 8443, the
// destination the guest's, the ICMPv6 checksum following).
func TestEdgeIPv6VIPICMPv6ErrorToAgent(t *testing.T) {
	b := newVIP6Bed(t)
	if got := b.outerDst(t, ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02))); got != hostAddr {
		t.Fatalf("SYN went to %s, want %s", got, hostAddr)
	}
	quote := ip6Hdr(vip6s, client6, nhTCP, tcp6(443, 40000, 0x12))
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, eth6(dptest.RtrMAC, dptest.ExtMAC, false, vip6ICMPErr(2, 0, quote)))
	if err != nil {
		t.Fatal(err)
	}
	const outer = 14 + 20 + 8 // Ethernet, IPv4, GRE with its key
	if res.Action != xdpRedirect || len(res.Out) < outer+14+40+8+len(quote) {
		t.Fatalf("edge: action %d, %d bytes", res.Action, len(res.Out))
	}
	key := binary.BigEndian.Uint32(res.Out[14+20+4:])
	inner := res.Out[outer:]

	env, a, g1 := newAgentSvc6Bed(t)
	if err := a.PutService(AgentService{VIP: addr(vip6s), Guest: addr(guest6G), Guest6: addr(agentPriv6), Ifindex: g1,
		Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid}); err != nil {
		t.Fatal(err)
	}
	// What the guest must get: the error as the edge sent it (hop limit
	// included), to the guest, its quote as the guest sent the packet.
	want := append([]byte(nil), inner[14:]...)
	priv := addr(agentPriv6).As16()
	copy(want[24:40], priv[:])
	copy(want[48+8:48+24], priv[:])
	binary.BigEndian.PutUint16(want[48+40:], 8443)
	setL4Csum6(want)
	runFixtures(t, env, agentProg{a: a}, a, []fixture{{
		name: "the edge's frame, from edge A", dev: dptest.UlDev,
		in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, inner),
		action: xdpRedirect, out: eth6(dptest.GuestMAC, dptest.VMMAC, false, want),
		check: func(t *testing.T, out []byte) { checkL4Csum6(t, out, 14) }, stats: map[string]uint64{"decap_tx": 1},
	}})
}

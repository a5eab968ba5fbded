package dataplane

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// IPv6 VIPs in mode nat (issue 21; bpf/edge.c lb6_nat_in, lb6_nat_reverse):
// DNAT66 in, SNAT66 back, the stateless fallback, ICMPv6 errors both ways.
const (
	vipN6      = "2001:db8:e1::86"
	beA6       = "2001:db8:be::1" // behind the underlay router (FabAddr6)
	beNet6     = "2001:db8:be::/48"
	beNoNeigh6 = "2001:db8:250::1" // dptest.NoNeighNet6: never resolved
	inetRtr6   = "2001:db8:c::1"   // a router on the Internet side
)

// newNAT6Bed is newDecap6Bed with nat mode on and an IPv6 nat VIP:
// tcp 80 -> beA6:8080 (backend a6), udp any port -> beA6 on the
// listener's port (p6), tcp 82 -> beNoNeigh6:8080 (nn), tcp 83 -> an
// IPv4 nat backend (v4: no IPv6 address).
func newNAT6Bed(t *testing.T) *lbBed {
	eb := newDecap6Bed(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(eb.env.Node.Route(beNet6, dptest.FabAddr6, dptest.UlDev))
	b := &lbBed{edgeBed: eb, idx: map[string]uint32{}}
	e := b.edge
	must(e.SetLBConfig(LBConfig{HZ: kernelHZ(t), SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second,
		UDP: time.Minute, NAT: true}))
	for i, x := range []struct {
		name string
		be   LBBackend
	}{
		{"a6", LBBackend{Mode: ModeNAT, Addr: addr(beA6), Port: 8080, Gen: 1}},
		{"p6", LBBackend{Mode: ModeNAT, Addr: addr(beA6), Gen: 1}},
		{"nn", LBBackend{Mode: ModeNAT, Addr: addr(beNoNeigh6), Port: 8080, Gen: 1}},
		{"v4", LBBackend{Mode: ModeNAT, Addr: addr(beA), Port: 8080, Gen: 1}},
	} {
		b.idx[x.name] = uint32(i)
		must(e.SetBackend(uint32(i), x.be))
	}
	b.table(t, 0, "a6")
	b.table(t, 1, "p6")
	b.table(t, 2, "nn")
	b.table(t, 3, "v4")
	v := addr(vipN6)
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 80}, ListenerValue{Table: 0}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoUDP}, ListenerValue{Table: 1}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 82}, ListenerValue{Table: 2}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 83}, ListenerValue{Table: 3}))
	must(e.PutVIP(v))
	return b
}

const (
	tcpSYN    = 0x02
	tcpSYNACK = 0x12
	tcpACK    = 0x10
	tcpFINACK = 0x11
)

func inet6(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
func ul6(ip []byte) []byte   { return eth6(dptest.FabMAC, dptest.UlMAC, false, ip) }

// toBackend6 is the frame DNAT66 sends for ip: out of the underlay to its
// router, the hop limit decremented.
func toBackend6(ip []byte) []byte {
	ip[7]--
	return eth6(dptest.UlMAC, dptest.FabMAC, false, ip)
}

// toClient6 is the frame SNAT66 sends for ip: out of the Internet side.
func toClient6(ip []byte) []byte {
	ip[7]--
	return eth6(dptest.ExtMAC, dptest.RtrMAC, false, ip)
}

// icmp6Err is an ICMPv6 error (type typ, code 0, word the MTU or unused)
// from src to dst quoting q (its own checksum as q has it), the ICMPv6
// checksum computed in full.
func icmp6Err(src, dst string, typ uint8, word uint32, q []byte) []byte {
	m := make([]byte, 8, 8+len(q))
	m[0] = typ
	binary.BigEndian.PutUint32(m[4:], word)
	ip := ip6Hdr(src, dst, nhICMPv6, append(m, q...))
	setL4Csum6(ip)
	return ip
}

func (b *lbBed) natConns6(t *testing.T) map[netip.AddrPort]NATConn {
	t.Helper()
	got := map[netip.AddrPort]NATConn{}
	if err := b.edge.NATConns(func(c NATConn) bool {
		if c.Client.Addr().Is6() {
			got[c.Client] = c
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestEdgeNAT6: a flow to an IPv6 nat VIP leaves DNATed to its backend's
// IPv6 address and port (the TCP and UDP checksums fixed incrementally:
// the frames are byte-exact against fully computed ones; the listener's
// port when the backend has none), routed by the FIB out of the underlay,
// the hop limit decremented, counted lb_nat_tx, and installs its reverse
// entry in lb_nat_conns6; the backend's replies leave from the VIP and
// port (lb_reply_tx), a reply from the wrong side is dropped (drop_spoof),
// a backend's FIN marks the connection's entry; a VLAN-tagged frame leaves
// untagged. A UDP datagram with a zero checksum (either way), an expired
// hop limit, an IPv4 backend and a backend with no neighbour yet
// (translated, to the kernel) are counted under theirs.
func TestEdgeNAT6(t *testing.T) {
	b := newNAT6Bed(t)
	e := b.edge
	syn := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 40000, dport: 80, tcpFlags: tcpSYN}
	synOut := syn.withDst(beA6)
	synOut.dport = 8080
	udp := pkt6{src: client6, dst: vipN6, proto: nhUDP, sport: 5353, dport: 53}
	udp0 := udp
	udp0.zeroUDPCsum = true
	nn := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 40001, dport: 82, tcpFlags: tcpSYN}
	nnOut := nn.withDst(beNoNeigh6)
	nnOut.dport = 8080
	hop1 := syn
	hop1.sport, hop1.hop = 40002, 1
	v4 := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 40003, dport: 83, tcpFlags: tcpSYN}
	before, err := e.BackendCounters(b.idx["a6"])
	if err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "tcp 80: DNAT66 to beA6:8080", dev: dptest.ExtDev, in: inet6(syn.ip()), action: xdpRedirect,
			out: toBackend6(synOut.ip()), stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "udp 53: DNAT66 to beA6, the listener's port", dev: dptest.ExtDev, in: inet6(udp.ip()), action: xdpRedirect,
			out: toBackend6(udp.withDst(beA6).ip()), stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "udp with a zero checksum: invalid in IPv6", dev: dptest.ExtDev, in: inet6(udp0.ip()), action: xdpDrop,
			stats: map[string]uint64{"drop_ip6_udp_csum0": 1}},
		{name: "no neighbour for the backend: translated, to the kernel", dev: dptest.ExtDev, in: inet6(nn.ip()), action: xdpPass,
			out: inet6(nnOut.ip()), stats: map[string]uint64{"lb_nat_pass": 1}},
		{name: "hop limit 1", dev: dptest.ExtDev, in: inet6(hop1.ip()), action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "a VLAN-tagged frame: leaves untagged", dev: dptest.ExtDev, in: eth6(dptest.RtrMAC, dptest.ExtMAC, true, syn.ip()),
			action: xdpRedirect, out: toBackend6(synOut.ip()), stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "an IPv4 nat backend has no IPv6 address", dev: dptest.ExtDev, in: inet6(v4.ip()), action: xdpDrop,
			stats: map[string]uint64{"drop_lb_no_backend": 1}},
	})
	after, err := e.BackendCounters(b.idx["a6"])
	if err != nil {
		t.Fatal(err)
	}
	// As for IPv4 (lb_count): each entry's insert counts a packet and a
	// connection (the SYN's, the hop-limit-1 SYN's: the decision comes
	// before the route, and the tagged SYN's, which replaces the first),
	// a packet sent its packet and bytes (the two SYNs sent).
	if after.Packets-before.Packets != 5 || after.Conns-before.Conns != 3 || after.Bytes-before.Bytes != 2*uint64(len(syn.ip())) {
		t.Errorf("backend a6 counters %+v -> %+v: want +5 packets, +3 connections, +%d bytes", before, after, 2*len(syn.ip()))
	}
	conns := b.natConns6(t)
	want := NATConn{Backend: netip.MustParseAddrPort("[" + beA6 + "]:8080"), Client: netip.MustParseAddrPort("[" + client6 + "]:40000"),
		VIP: netip.MustParseAddrPort("[" + vipN6 + "]:80"), Proto: ProtoTCP}
	if conns[want.Client] != want {
		t.Fatalf("reverse entries %v, want %v", conns, want)
	}
	if c := conns[netip.MustParseAddrPort("["+client6+"]:5353")]; c.Backend != netip.MustParseAddrPort("["+beA6+"]:53") || c.Proto != ProtoUDP {
		t.Errorf("udp's reverse entry %+v: want backend [%s]:53", c, beA6)
	}

	reply := pkt6{src: beA6, dst: client6, proto: nhTCP, sport: 8080, dport: 40000, tcpFlags: tcpSYNACK}
	replyOut := reply.withSrc(vipN6)
	replyOut.sport = 80
	udpReply := pkt6{src: beA6, dst: client6, proto: nhUDP, sport: 53, dport: 5353}
	udpReply0 := udpReply
	udpReply0.zeroUDPCsum = true
	fin := reply
	fin.tcpFlags = tcpFINACK
	finOut := replyOut
	finOut.tcpFlags = tcpFINACK
	noEntry := reply
	noEntry.dport, noEntry.tcpFlags = 40999, tcpACK
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "SYN-ACK: SNAT66 from the VIP and port", dev: dptest.UlDev, in: ul6(reply.ip()), action: xdpRedirect,
			out: toClient6(replyOut.ip()), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "udp reply: SNAT66, the port kept", dev: dptest.UlDev, in: ul6(udpReply.ip()), action: xdpRedirect,
			out: toClient6(udpReply.withSrc(vipN6).ip()), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "the reply from the Internet side is forged: dropped", dev: dptest.ExtDev, in: inet6(reply.ip()), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "the backend's packet of no connection: not ours", dev: dptest.UlDev, in: ul6(noEntry.ip()), action: xdpPass,
			stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "a udp reply with a zero checksum: invalid in IPv6", dev: dptest.UlDev, in: ul6(udpReply0.ip()), action: xdpDrop,
			stats: map[string]uint64{"drop_ip6_udp_csum0": 1}},
		{name: "the backend's FIN: translated", dev: dptest.UlDev, in: ul6(fin.ip()), action: xdpRedirect,
			out: toClient6(finOut.ip()), stats: map[string]uint64{"lb_reply_tx": 1}},
	})
	fins := 0
	if err := e.Conns(func(c Conn) bool {
		if c.Dst == addr(vipN6) && c.Sport == 40000 && c.State == 3 /* CT_FIN */ {
			fins++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if fins != 1 {
		t.Errorf("the backend's FIN left the connection's entry not in state fin (%d entries)", fins)
	}
}

// TestEdgeNAT6Fallback: a backend's SYN-ACK with no reverse entry (its
// SYN went to another edge) is translated by lb_nat_backends6 (the plan's
// backends of one VIP and port), counted nat_reply_stateless, and learns
// the entry; a connection's entry wins over the fallback; only SYN-ACKs;
// a forged one from the wrong side is dropped and learns nothing.
func TestEdgeNAT6Fallback(t *testing.T) {
	b := newNAT6Bed(t)
	e := b.edge
	be := NATBackend{Addr: addr(beA6), Port: 8080, Proto: ProtoTCP}
	if err := e.PutNATBackend(be, netip.MustParseAddrPort("["+vipN6+"]:80")); err != nil {
		t.Fatal(err)
	}
	if err := e.PutNATBackend(be, netip.MustParseAddrPort(vipNAT+":80")); err == nil {
		t.Fatal("an IPv6 backend of an IPv4 VIP taken")
	}
	if got, err := e.NATBackends(); err != nil || len(got) != 1 || got[be] != netip.MustParseAddrPort("["+vipN6+"]:80") {
		t.Fatalf("NATBackends %v %v: want only %v (not the slots' addresses)", got, err, be)
	}
	if err := e.PutNATConn(NATConn{Backend: netip.MustParseAddrPort("[" + beA6 + "]:8080"), Client: netip.MustParseAddrPort("[" + client6 + "]:40020"),
		VIP: netip.MustParseAddrPort("[" + vipN6 + "]:8443"), Proto: ProtoTCP}); err != nil {
		t.Fatal(err)
	}
	synack := func(dport uint16) pkt6 {
		return pkt6{src: beA6, dst: client6, proto: nhTCP, sport: 8080, dport: dport, tcpFlags: tcpSYNACK}
	}
	out := func(p pkt6, vport uint16) []byte {
		q := p.withSrc(vipN6)
		q.sport = vport
		return toClient6(q.ip())
	}
	ack := synack(40011)
	ack.tcpFlags = tcpACK
	info0, err := e.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "SYN-ACK with no entry: the fallback's VIP and port", dev: dptest.UlDev, in: ul6(synack(40010).ip()),
			action: xdpRedirect, out: out(synack(40010), 80), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "a plain ACK with no entry: not ours", dev: dptest.UlDev, in: ul6(ack.ip()), action: xdpPass,
			stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "the entry wins over the fallback", dev: dptest.UlDev, in: ul6(synack(40020).ip()), action: xdpRedirect,
			out: out(synack(40020), 8443), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "a forged SYN-ACK from the Internet side", dev: dptest.ExtDev, in: inet6(synack(40012).ip()), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "the backend's SYN-ACK to the edge's own address (a health check's): untranslated, to the kernel", dev: dptest.UlDev,
			in: ul6(synack(40014).withDst(dptest.UlAddr6).ip()), action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
	})
	info, err := e.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	if n := info["nat_reply_stateless"] - info0["nat_reply_stateless"]; n != 1 {
		t.Errorf("nat_reply_stateless counted %d, want 1", n)
	}
	conns := b.natConns6(t)
	if len(conns) != 2 || conns[netip.MustParseAddrPort("["+client6+"]:40010")].VIP != netip.MustParseAddrPort("["+vipN6+"]:80") {
		t.Errorf("reverse entries %v: want 40010 learnt (-> :80) beside the test's 40020", conns)
	}
	// Out of the plan: not translated any more.
	if err := e.DeleteNATBackend(be); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "out of the fallback: not ours", dev: dptest.UlDev, in: ul6(synack(40013).ip()), action: xdpPass,
			stats: map[string]uint64{"pass_ipv6": 1}},
	})
}

// TestEdgeNAT6ICMPv6: an ICMPv6 error from the Internet about a nat flow
// (quoting VIP -> client) goes to the flow's backend DNATed, its quote's
// source address and port with it (lb_icmp_tx); one from the backend
// about the flow (quoting client -> backend) leaves from the VIP, its
// quote's destination the VIP and port; one from a router on the
// backend's path keeps its source, the quote translated (lb_reply_tx).
// The ICMPv6 checksums are fixed incrementally (byte-exact against full
// ones); the quoted packets' own checksums are left as they were.
func TestEdgeNAT6ICMPv6(t *testing.T) {
	b := newNAT6Bed(t)
	e := b.edge
	syn := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 40000, dport: 80, tcpFlags: tcpSYN}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "the flow's SYN", dev: dptest.ExtDev, in: inet6(syn.ip()), action: xdpRedirect, stats: map[string]uint64{"lb_nat_tx": 1}},
	})
	// From the Internet: packet too big about VIP:80 -> client:40000.
	q := pkt6{src: vipN6, dst: client6, proto: nhTCP, sport: 80, dport: 40000, tcpFlags: tcpSYNACK}
	qb, qbOut := q.ip(), q.ip()
	copy(qbOut[8:24], addr(beA6).AsSlice())
	binary.BigEndian.PutUint16(qbOut[40:], 8080) // the quote's checksum stays q's
	ptb := icmp6Err(inetRtr6, vipN6, 2, 1280, qb)
	ptbOut := icmp6Err(inetRtr6, beA6, 2, 1280, qbOut)
	// From the backend and from a router on its path: destination
	// unreachable about client:40000 -> backend:8080.
	r := pkt6{src: client6, dst: beA6, proto: nhTCP, sport: 40000, dport: 8080, tcpFlags: tcpACK}
	rb, rbOut := r.ip(), r.ip()
	copy(rbOut[24:40], addr(vipN6).AsSlice())
	binary.BigEndian.PutUint16(rbOut[42:], 80)
	unreach := icmp6Err(beA6, client6, 1, 0, rb)
	unreachOut := icmp6Err(vipN6, client6, 1, 0, rbOut)
	tooBig := icmp6Err(dptest.FabAddr6, client6, 2, 1400, rb)
	tooBigOut := icmp6Err(dptest.FabAddr6, client6, 2, 1400, rbOut)
	other := append([]byte(nil), rb...)
	binary.BigEndian.PutUint16(other[40:], 40999) // no connection's
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "packet too big from the Internet: to the backend, its quote translated", dev: dptest.ExtDev, in: inet6(ptb),
			action: xdpRedirect, out: toBackend6(ptbOut), stats: map[string]uint64{"lb_icmp_tx": 1}},
		{name: "unreachable from the backend: from the VIP, its quote translated", dev: dptest.UlDev, in: ul6(unreach),
			action: xdpRedirect, out: toClient6(unreachOut), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "too big from a router on the backend's path: its source kept", dev: dptest.UlDev, in: ul6(tooBig),
			action: xdpRedirect, out: toClient6(tooBigOut), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "about no connection: not ours", dev: dptest.UlDev, in: ul6(icmp6Err(beA6, client6, 1, 0, other)),
			action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
	})
}

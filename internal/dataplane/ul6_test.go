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

// The IPv6 underlay (issue 21): hosts whose underlay address is IPv6,
// named in the edge's 4-byte host fields by their ul6_hosts index (ul6.go).
const (
	host6       = "2001:db8:f0::21" // a host on the IPv6 underlay, via the underlay router
	host6Small  = "2001:db8:f1::21" // one behind a route with MTU ul6MTU
	host6Net    = "2001:db8:f0::/48"
	host6Small0 = "2001:db8:f1::/48"
	ul6MTU      = 1400
)

// newUl6Bed is newVIP6Bed with the node's IPv6 underlay routes to host6
// (MTU 1500) and host6Small (ul6MTU, locked), the edge's IPv6 underlay
// address dptest.UlAddr6; the IPv4 EIP eip and the IPv6 EIP eip6 bound
// to host6, eipOther and eip6Own to host6Small; backend g (the IPv6 VIP's
// tcp 443, and the IPv4 VIP vipEncap's tcp 443 through table 0) on host6.
func newUl6Bed(t *testing.T) *vip6Bed {
	b := newVIP6Bed(t)
	n := b.env.Node
	ul := mustIfindex(t, b.env, dptest.UlDev)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.Route(host6Net, dptest.FabAddr6, dptest.UlDev))
	_, dst, _ := net.ParseCIDR(host6Small0)
	must(n.Handle().RouteReplace(&netlink.Route{Dst: dst, Gw: net.ParseIP(dptest.FabAddr6), LinkIndex: ul, MTU: ul6MTU, MTULock: true}))
	must(b.edge.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), Underlay6: addr(dptest.UlAddr6), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC), UnderlayIfindex: uint32(ul),
	}))
	must(b.edge.PutRoutes(map[netipAddr]Route{
		addr(eip):      {Host: addr(host6), VSID: vsid, StatsIdx: eipIdx},
		addr(eip6):     {Host: addr(host6), VSID: vsid, StatsIdx: eip6Idx},
		addr(eipOther): {Host: addr(host6Small), VSID: 6000, StatsIdx: 10},
		addr(eip6Own):  {Host: addr(host6Small), VSID: 6000, StatsIdx: 14},
	}))
	must(b.edge.SetBackend(b.idx["g"], LBBackend{Mode: ModeEncap, Addr: addr(host6), Guest: addr(guest6G), VSID: vsid, Gen: 2}))
	must(b.edge.PutVIP(addr(vipEncap)))
	must(b.edge.PutListener(Listener{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 0}))
	return b
}

// nvgreOver6 is the frame the edge must send over the IPv6 underlay: the
// outer Ethernet to the underlay router, outer IPv6 (traffic class tc,
// flow label the key's low 20 bits, payload length GRE + inner frame,
// next header 47, hop limit 64) from src to dst, GRE with the key bit and
// key, then inner (an Ethernet frame). Written byte by byte, not through
// a library: the reference for the program's header.
func nvgreOver6(srcMAC, dstMAC, src, dst string, key uint32, tc uint8, inner []byte) []byte {
	return nvgreOver6L(srcMAC, dstMAC, src, dst, key, tc, key&0xfffff, inner)
}

// nvgreOver6L is nvgreOver6 with the flow label label (the agent's: the
// flow hash's low 20 bits).
func nvgreOver6L(srcMAC, dstMAC, src, dst string, key uint32, tc uint8, label uint32, inner []byte) []byte {
	b := append([]byte(nil), mac(dstMAC)...)
	b = append(b, mac(srcMAC)...)
	b = append(b, 0x86, 0xdd)
	label &= 0xfffff
	b = append(b, 0x60|tc>>4, tc<<4|byte(label>>16), byte(label>>8), byte(label))
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(inner)))
	b = append(b, 47, 64)
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	b = append(b, 0x20, 0x00, 0x65, 0x58)
	b = binary.BigEndian.AppendUint32(b, key)
	return append(b, inner...)
}

// encapUl6 is encapOf over the IPv6 underlay to host.
func encapUl6(t *testing.T, f flow, host string, vsid uint32) []byte {
	in := f.ip(t)
	tuple := flowhash.Tuple{Src: addr(f.src), Dst: addr(f.dst), Proto: uint8(f.proto)}
	if !f.mf && f.fragOff == 0 && (f.proto == layers.IPProtocolTCP || f.proto == layers.IPProtocolUDP) {
		tuple.SrcPort, tuple.DstPort = f.sport, f.dport
	}
	key := vsid<<8 | uint32(flowhash.FlowID(tuple, testSeed))
	d := addr(f.dst).As4()
	innerDst := "02:00:" + hex2(d[0]) + ":" + hex2(d[1]) + ":" + hex2(d[2]) + ":" + hex2(d[3])
	return nvgreOver6(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, host, key, f.tos, ethFrame(t, gwMAC, innerDst, decTTL(in)))
}

// encap6Ul6 is encap6Of over the IPv6 underlay: ip an IPv6 packet to an
// IPv6 EIP (innerPre "02:00", the EIP's last four bytes) or to an IPv6
// VIP (innerPre "02:01" and guest's address).
func encap6Ul6(t *testing.T, ip []byte, host string, vs uint32, guest string) []byte {
	src, _ := netip.AddrFromSlice(ip[8:24])
	dst, _ := netip.AddrFromSlice(ip[24:40])
	tuple := flowhash.Tuple{Src: src, Dst: dst, Proto: ip[6]}
	if ip[6] == nhTCP || ip[6] == nhUDP {
		tuple.SrcPort, tuple.DstPort = binary.BigEndian.Uint16(ip[40:]), binary.BigEndian.Uint16(ip[42:])
	}
	key := vs<<8 | uint32(flowhash.FlowID6(tuple, testSeed))
	var innerDst string
	if guest == "" {
		d := dst.As16()
		innerDst = "02:00:" + hex2(d[12]) + ":" + hex2(d[13]) + ":" + hex2(d[14]) + ":" + hex2(d[15])
	} else {
		g := addr(guest).As4()
		innerDst = "02:01:" + hex2(g[0]) + ":" + hex2(g[1]) + ":" + hex2(g[2]) + ":" + hex2(g[3])
	}
	in := append([]byte(nil), ip...)
	in[7]--
	tc := ip[0]<<4 | ip[1]>>4
	return nvgreOver6(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, host, key, tc, eth6(gwMAC, innerDst, false, in))
}

// TestEdgeUl6Encap: packets from the Internet to an IPv4 EIP, an IPv6
// EIP, an IPv4 VIP and an IPv6 VIP whose host's underlay address is IPv6
// leave in NVGRE over IPv6, byte for byte (nvgreOver6), counted as over
// IPv4 (encap_tx, lb_encap_tx, the EIP's rx counters); the tunnel's MTU
// is the route's less 62 bytes (20 more than over IPv4): an IPv4 packet
// with DF that does not fit gets fragmentation needed with that MTU,
// without DF drop_too_big; an IPv6 one drop_too_big (this bed sends no
// ICMPv6). Without the edge's IPv6 underlay address: drop_fib.
func TestEdgeUl6Encap(t *testing.T) {
	b := newUl6Bed(t)
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	inet6 := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	one := ptr[uint64](1)

	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, df: true, tos: 0x10}
	udp := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}
	fits := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1500-62-28)}
	big := fits
	big.payload = make([]byte, 1500-62-28+1)
	fitsSmall := flow{src: client, dst: eipOther, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, ul6MTU-62-28)}
	bigSmall := fitsSmall
	bigSmall.payload = make([]byte, ul6MTU-62-28+1)
	bigSmallNoDF := bigSmall
	bigSmallNoDF.df = false
	vipSyn := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40001, dport: 443, syn: true, df: true}

	syn6 := withTC(ip6Hdr(client6, eip6, nhTCP, tcp6(40000, 443, 0x02)), 0x28)
	fits6 := ip6Hdr(client6, eip6Own, nhUDP, udp6(1, 2, ul6MTU-62-48))
	big6 := ip6Hdr(client6, eip6Own, nhUDP, udp6(1, 2, ul6MTU-62-48+1))
	vip6Syn := withTC(ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02)), 0x28)

	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "IPv4 EIP, TCP SYN: NVGRE over IPv6, TOS to the traffic class", dev: dptest.ExtDev, in: fromInet(syn), action: xdpRedirect,
			out: encapUl6(t, syn, host6, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](eipIdx),
			eipRx: 1, eipSyn: one},
		{name: "IPv4 EIP, UDP", dev: dptest.ExtDev, in: fromInet(udp), action: xdpRedirect,
			out: encapUl6(t, udp, host6, vsid), stats: map[string]uint64{"encap_tx": 1}},
		{name: "IPv4 EIP: the largest packet (MTU 1500 less 62)", dev: dptest.ExtDev, in: fromInet(fits), action: xdpRedirect,
			out: encapUl6(t, fits, host6, vsid), stats: map[string]uint64{"encap_tx": 1}},
		{name: "IPv4 EIP: one byte more, DF: fragmentation needed, MTU 1438", dev: dptest.ExtDev, in: fromInet(big), action: xdpTX,
			stats: map[string]uint64{"icmp_frag_tx": 1}, check: icmpCheck(big, 3, 4, 1500-62)},
		{name: "IPv4 EIP, host behind MTU 1400: the largest packet", dev: dptest.ExtDev, in: fromInet(fitsSmall), action: xdpRedirect,
			out: encapUl6(t, fitsSmall, host6Small, 6000), stats: map[string]uint64{"encap_tx": 1}},
		{name: "IPv4 EIP, host behind MTU 1400: one byte more, DF: MTU 1338", dev: dptest.ExtDev, in: fromInet(bigSmall), action: xdpTX,
			stats: map[string]uint64{"icmp_frag_tx": 1}, check: icmpCheck(bigSmall, 3, 4, ul6MTU-62)},
		{name: "IPv4 EIP, host behind MTU 1400: one byte more, no DF: drop_too_big", dev: dptest.ExtDev, in: fromInet(bigSmallNoDF),
			action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1}},
		{name: "IPv4 VIP, encap backend on an IPv6 host", dev: dptest.ExtDev, in: fromInet(vipSyn), action: xdpRedirect,
			check: func(t *testing.T, out []byte) {
				// The key's FlowID is the connection table's (lb_decide):
				// the frame is compared with the key the frame carries.
				if len(out) < 14+40+8 {
					t.Fatalf("frame of %d bytes", len(out))
				}
				key := binary.BigEndian.Uint32(out[14+40+4:])
				if key>>8 != vsid {
					t.Fatalf("key %#x: VSID %d, want %d", key, key>>8, vsid)
				}
				g := addr(guest6G).As4()
				inner := ethFrame(t, gwMAC, "02:01:"+hex2(g[0])+":"+hex2(g[1])+":"+hex2(g[2])+":"+hex2(g[3]), decTTL(vipSyn.ip(t)))
				want := nvgreOver6(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, host6, key, 0, inner)
				if d := diffBytes(want, out); d != "" {
					t.Fatalf("output differs: %s", d)
				}
			},
			stats: map[string]uint64{"lb_encap_tx": 1}},
		{name: "IPv6 EIP, TCP SYN", dev: dptest.ExtDev, in: inet6(syn6), action: xdpRedirect,
			out: encap6Ul6(t, syn6, host6, vsid, ""), stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](eip6Idx),
			eipRx: 1, eipSyn: one},
		{name: "IPv6 EIP, host behind MTU 1400: the largest packet", dev: dptest.ExtDev, in: inet6(fits6), action: xdpRedirect,
			out: encap6Ul6(t, fits6, host6Small, 6000, ""), stats: map[string]uint64{"encap_tx": 1}},
		{name: "IPv6 EIP, host behind MTU 1400: one byte more: drop_too_big", dev: dptest.ExtDev, in: inet6(big6), action: xdpDrop,
			stats: map[string]uint64{"drop_too_big": 1}},
		{name: "IPv6 VIP, backend on an IPv6 host", dev: dptest.ExtDev, in: inet6(vip6Syn), action: xdpRedirect,
			out: encap6Ul6(t, vip6Syn, host6, vsid, guest6G), stats: map[string]uint64{"lb_encap_tx": 1}},
	})

	// Without an IPv6 underlay address the edge cannot reach the host:
	// drop_fib, IPv4 and IPv6 EIPs alike.
	ul := mustIfindex(t, b.env, dptest.UlDev)
	if err := b.edge.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC), UnderlayIfindex: uint32(ul),
	}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "no IPv6 underlay address: IPv4 EIP", dev: dptest.ExtDev, in: fromInet(udp), action: xdpDrop,
			stats: map[string]uint64{"drop_fib": 1}},
		{name: "no IPv6 underlay address: IPv6 EIP", dev: dptest.ExtDev, in: inet6(syn6), action: xdpDrop,
			stats: map[string]uint64{"drop_fib": 1}},
	})

	// The routes and backends read back with the hosts' IPv6 addresses.
	r, ok, err := b.edge.Route(addr(eip))
	if err != nil || !ok || r.Host != addr(host6) {
		t.Fatalf("route of %s read back %+v %v %v, want host %s", eip, r, ok, err, host6)
	}
	be, err := b.edge.Backend(b.idx["g"])
	if err != nil || be.Addr != addr(host6) {
		t.Fatalf("backend g read back %+v %v, want host %s", be, err, host6)
	}
	names, err := b.edge.Ul6Hosts()
	if err != nil || len(names) != 2 || names[1] != addr(host6) && names[2] != addr(host6) {
		t.Fatalf("IPv6 hosts' names %v %v: want host6 and host6Small", names, err)
	}
}

// fromHostUl6 is NVGRE over IPv6 as a host with an IPv6 underlay address
// sends it to the edge: from src to the edge's dptest.UlAddr6, with key
// and the inner frame inner.
func fromHostUl6(src string, key uint32, inner []byte) []byte {
	b := nvgreOver6(dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr6, key, 0, inner)
	b[14+1], b[14+2], b[14+3] = 0, 0, 0 // no flow label
	return b
}

// TestEdgeUl6Decap: NVGRE over IPv6 from a host with an IPv6 underlay
// address is taken as over IPv4: an IPv4 EIP's and an IPv6 EIP's replies
// from the host their routes name are decapsulated and forwarded byte
// for byte (decap_tx, the EIP's tx counters); from another host, from an
// address no host has (a spoofed outer source), from the Internet side,
// with the wrong VSID: drop_spoof; a truncated outer packet drop_ip_trunc,
// a truncated or wrong GRE header drop_gre_bad, a truncated inner frame
// drop_inner_bad; GRE to another IPv6 address is the kernel's.
func TestEdgeUl6Decap(t *testing.T) {
	b := newUl6Bed(t)
	key := uint32(vsid<<8 | 0x5a)
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	inner := ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t))
	want := ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(reply.ip(t)))
	reply6 := ip6Hdr(eip6, client6, nhTCP, tcp6(443, 40000, 0x12))
	inner6 := eth6(guestMAC6, gwMAC, false, reply6)

	good := fromHostUl6(host6, key, inner)
	outerTrunc := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(outerTrunc[14+4:], uint16(len(good)-14-40+1)) // one byte beyond the frame
	greTrunc := fromHostUl6(host6, key, nil)[:14+40+4]
	binary.BigEndian.PutUint16(greTrunc[14+4:], 4)
	greBad := fromHostUl6(host6, key, inner)
	greBad[14+40] |= 0x80 // checksum-present bit
	innerTrunc := fromHostUl6(host6, key, inner[:14+10])
	notOurs := append([]byte(nil), good...)
	copy(notOurs[14+24:14+40], addr("2001:db8:ff::77").AsSlice())

	slot := ptr[uint32](eipIdx)
	drop := func(name, dev string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "IPv4 EIP's reply from its host", dev: dptest.UlDev, in: good, action: xdpRedirect, out: want,
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "IPv6 EIP's reply from its host", dev: dptest.UlDev, in: fromHostUl6(host6, key, inner6), action: xdpRedirect,
			out: decap6Out(reply6), stats: map[string]uint64{"decap_tx": 1}, eipSlot: ptr[uint32](eip6Idx), eipTx: 1},
		drop("IPv4 EIP's packet from another host", dptest.UlDev, fromHostUl6(host6Small, key, inner), "drop_spoof"),
		drop("IPv6 EIP's packet from another host", dptest.UlDev, fromHostUl6(host6Small, key, inner6), "drop_spoof"),
		drop("outer source no host has (spoofed)", dptest.UlDev, fromHostUl6("2001:db8:f0::99", key, inner), "drop_spoof"),
		drop("wrong VSID", dptest.UlDev, fromHostUl6(host6, 6000<<8, inner), "drop_spoof"),
		drop("from the Internet side", dptest.ExtDev, good, "drop_spoof"),
		drop("outer payload length beyond the frame", dptest.UlDev, outerTrunc, "drop_ip_trunc"),
		drop("GRE header cut short", dptest.UlDev, greTrunc, "drop_gre_bad"),
		drop("GRE with the checksum bit", dptest.UlDev, greBad, "drop_gre_bad"),
		drop("inner frame cut short", dptest.UlDev, innerTrunc, "drop_inner_bad"),
		{name: "GRE to another IPv6 address: the kernel's", dev: dptest.UlDev, in: notOurs, action: xdpPass,
			stats: map[string]uint64{"pass_ipv6": 1}},
	})
}

// TestEdgeUl6Drift: a drifting EIP whose previous binding is on a host of
// the IPv6 underlay and whose live one is on an IPv4 host (a move across
// families): a TCP segment of a flow not recorded goes to the previous
// host over IPv6 (drift_prev_tx), a SYN to the live host over IPv4, and
// the previous host's replies over IPv6 are accepted (decap_tx), byte for
// byte; the route reads back with both hosts.
func TestEdgeUl6Drift(t *testing.T) {
	b := newUl6Bed(t)
	const prevVSID = 7001
	r := Route{Host: addr(hostAddr), VSID: vsid, StatsIdx: eipIdx, PrevHost: addr(host6), PrevVSID: prevVSID}
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eip): r}); err != nil {
		t.Fatal(err)
	}
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	ack := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40100, dport: 80, ack: true, df: true}
	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40101, dport: 80, syn: true, df: true}
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40100, ack: true, ttl: 63}
	inner := ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "segment of a flow open at the move: the previous host, over IPv6", dev: dptest.ExtDev, in: fromInet(ack),
			action: xdpRedirect, out: encapUl6(t, ack, host6, prevVSID), stats: map[string]uint64{"encap_tx": 1, "drift_prev_tx": 1}},
		{name: "SYN: the live host, over IPv4", dev: dptest.ExtDev, in: fromInet(syn), action: xdpRedirect,
			out: encapOf(t, syn, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1, "drift_flow_new": 1}},
		{name: "the previous host's reply over IPv6", dev: dptest.UlDev, in: fromHostUl6(host6, prevVSID<<8|0x11, inner),
			action: xdpRedirect, out: ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(reply.ip(t))),
			stats: map[string]uint64{"decap_tx": 1}},
		{name: "another IPv6 host's reply: drop_spoof", dev: dptest.UlDev, in: fromHostUl6(host6Small, prevVSID<<8|0x11, inner),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})
	got, ok, err := b.edge.Route(addr(eip))
	if err != nil || !ok || got != r {
		t.Fatalf("route read back %+v %v %v, want %+v", got, ok, err, r)
	}
}

// TestUl6HostsRefused: the real edge and the fake refuse the same hosts
// (one that is no global unicast IPv6 address, one in 0.0.0.0/8, which
// names the IPv6 underlay's hosts), for routes and encap backends alike,
// and take a global unicast IPv6 host.
func TestUl6HostsRefused(t *testing.T) {
	b := newEdgeBed(t)
	fake := NewFakeEdge()
	fakeBE := &FakeBackends{BackendM: map[uint32]LBBackend{}}
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"fe80::1", false}, {"ff02::1", false}, {"::1", false}, {"0.0.0.5", false}, {"2001:db8:f0::21", true}, {"fd00::21", true}} {
		r := map[netipAddr]Route{addr(eip): {Host: addr(tc.host), VSID: vsid, StatsIdx: eipIdx}}
		be := LBBackend{Mode: ModeEncap, Addr: addr(tc.host), Guest: addr("198.19.21.1"), VSID: vsid, Gen: 1}
		for name, err := range map[string]error{
			"edge route":   b.edge.PutRoutes(r),
			"fake route":   fake.PutRoutes(r),
			"edge backend": b.edge.SetBackend(9, be),
			"fake backend": fakeBE.SetBackend(9, be),
		} {
			if (err == nil) != tc.ok {
				t.Errorf("%s on %s: %v, want accepted %v", name, tc.host, err, tc.ok)
			}
		}
	}
}

// TestEdgeUl6Forget: the names of IPv6 hosts nothing names any more are
// collected (both entries of ul6_hosts deleted); a host that comes back
// gets a fresh name, a collected index is given again only when no fresh
// one is left.
func TestEdgeUl6Forget(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{EIPMax: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	put := func(eip, host string) {
		t.Helper()
		if err := e.PutRoutes(map[netipAddr]Route{addr(eip): {Host: addr(host), VSID: vsid, StatsIdx: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	entries := func() int {
		n := 0
		var k, v edgeIpAddr
		for it := e.objs.Ul6Hosts.Iterate(); it.Next(&k, &v); {
			n++
		}
		return n
	}
	put(eip, host6)
	put(eipOther, host6Small)
	if n := entries(); n != 4 {
		t.Fatalf("ul6_hosts holds %d entries, want 4 (two hosts both ways)", n)
	}
	if err := e.DeleteRoutes([]netipAddr{addr(eipOther)}); err != nil {
		t.Fatal(err)
	}
	if err := e.ForgetUl6Hosts(func(a netipAddr) bool { return a == addr(host6) }); err != nil {
		t.Fatal(err)
	}
	names, err := e.Ul6Hosts()
	if err != nil || len(names) != 1 || names[1] != addr(host6) {
		t.Fatalf("names %v %v, want host6's alone (index 1)", names, err)
	}
	if n := entries(); n != 2 {
		t.Fatalf("ul6_hosts holds %d entries after the collection, want 2", n)
	}
	// host6 still routes by its name; host6Small comes back with index 3.
	if r, ok, err := e.Route(addr(eip)); err != nil || !ok || r.Host != addr(host6) {
		t.Fatalf("route of %s: %+v %v %v", eip, r, ok, err)
	}
	put(eipOther, host6Small)
	names, _ = e.Ul6Hosts()
	if names[3] != addr(host6Small) || len(names) != 2 {
		t.Fatalf("names %v, want host6Small at the fresh index 3", names)
	}
	if r, ok, err := e.Route(addr(eipOther)); err != nil || !ok || r.Host != addr(host6Small) {
		t.Fatalf("route of %s: %+v %v %v", eipOther, r, ok, err)
	}
}

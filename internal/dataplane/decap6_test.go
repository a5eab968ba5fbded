package dataplane

import (
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// The edge's host -> Internet path for IPv6 guests (bpf/edge.c
// edge_pull_failed; `bench dataplane`'s edge_decap6): NVGRE from a host
// whose inner frame is IPv6.

// newDecap6Bed is newEdge6Bed with IPv6 routing on both sides of the node
// (dptest.Env.InternetIPv6).
func newDecap6Bed(t *testing.T) *edgeBed {
	b := newEdge6Bed(t)
	if err := b.env.InternetIPv6(); err != nil {
		t.Fatal(err)
	}
	return b
}

const guestMAC6 = "02:cc:00:00:00:02"

// fromHost6 is an inner IPv6 packet ip as a host sends it to the edge:
// the inner frame from the guest to the edge's router MAC, in NVGRE from
// host with key.
func fromHost6(t *testing.T, host string, key uint32, ip []byte) []byte {
	return nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, eth6(guestMAC6, gwMAC, false, ip))
}

// decap6Out is the frame the edge must send for ip: to the Internet
// side's router, the hop limit decremented, nothing else changed.
func decap6Out(ip []byte) []byte {
	out := append([]byte(nil), ip...)
	out[7]--
	return eth6(dptest.ExtMAC, dptest.RtrMAC, false, out)
}

// tagOuter inserts an 802.1Q tag (VLAN 7) into a frame's outer Ethernet
// header.
func tagOuter(frame []byte) []byte {
	out := append([]byte(nil), frame[:12]...)
	out = append(out, 0x81, 0x00, 0x00, 0x07)
	return append(out, frame[12:]...)
}

// TestEdgeDecap6: IPv6 from a guest with an IPv6 EIP, in NVGRE from its
// host, is decapsulated and forwarded byte for byte (hop limit
// decremented, counted under decap_tx and the EIP's tx counters), with
// extension headers, a later fragment, an outer VLAN tag and padding; an
// unresolved next hop hands the inner frame to the kernel (decap_pass);
// every refusal is dropped under its counter: a spoofed source, a wrong
// host or VSID, an IPv6 VIP's source, destinations no router forwards
// to and the underlay, an expired hop limit, a packet too big for its
// route, a blackhole, a malformed or martian inner packet, NVGRE from the
// Internet side.
func TestEdgeDecap6(t *testing.T) {
	b := newDecap6Bed(t)
	slot := ptr[uint32](eip6Idx)
	key := uint32(vsid<<8 | 0x5a)
	from := func(ip []byte) []byte { return fromHost6(t, hostAddr, key, ip) }

	tcp := ip6Hdr(eip6, client6, nhTCP, tcp6(443, 40000, 0x12))
	udp := withTC(ip6Hdr(eip6, client6, nhUDP, udp6(53, 5353, 20)), 0x28)
	ping := ip6Hdr(eip6, client6, nhICMPv6, icmp6(129, 12))
	ext := ip6Hdr(eip6, client6, nhDst, cat(optHdr(nhUDP, 2), udp6(7, 9, 4)))
	hbh := ip6Hdr(eip6, client6, 0, cat(optHdr(nhTCP, 1), tcp6(443, 1, 0x10)))
	later := ip6Hdr(eip6, client6, nhFrag, cat(fragHdr(nhUDP, 8, false), make([]byte, 16)))
	hop2 := withHop(ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 0)), 2)
	// The small-MTU route: 1280 bytes of IPv6 fit, 1281 do not.
	fits := ip6Hdr(eip6, "2001:db8:1280::5", nhUDP, udp6(1, 2, dptest.SmallMTU6-48))
	big := ip6Hdr(eip6, "2001:db8:1280::5", nhUDP, udp6(1, 2, dptest.SmallMTU6-47))
	noNeigh := ip6Hdr(eip6, "2001:db8:249::5", nhUDP, udp6(1, 2, 0))
	innerPad := nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, key, 0,
		append(eth6(guestMAC6, gwMAC, false, udp), make([]byte, 6)...))
	outerPad := append(from(udp), make([]byte, 8)...)
	// The whole inner packet in the frame, its last 8 bytes beyond the
	// outer packet's length (outer padding, to the parser).
	innerLong := from(ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 100)))
	innerLong[14+2], innerLong[14+3] = byte((len(innerLong)-14-8)>>8), byte(len(innerLong)-14-8)
	setIPCsum(innerLong[14:])
	innerTagged := nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, key, 0,
		eth6(guestMAC6, gwMAC, true, tcp))

	fwd := func(name string, in, ip []byte) fixture {
		return fixture{name: name, dev: dptest.UlDev, in: in, action: xdpRedirect, out: decap6Out(ip),
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1}
	}
	drop := func(name string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.UlDev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	dst := func(d string) []byte { return from(ip6Hdr(eip6, d, nhUDP, udp6(1, 2, 0))) }
	fixtures := []fixture{
		fwd("tcp", from(tcp), tcp),
		fwd("udp, traffic class kept", from(udp), udp),
		fwd("icmpv6 echo reply", from(ping), ping),
		fwd("destination options header", from(ext), ext),
		fwd("hop-by-hop options header", from(hbh), hbh),
		fwd("later fragment", from(later), later),
		fwd("hop limit 2 leaves with 1", from(hop2), hop2),
		fwd("largest packet the route's mtu carries", from(fits), fits),
		fwd("outer vlan tag is not carried", tagOuter(from(tcp)), tcp),
		fwd("padding inside the tunnel is dropped", innerPad, udp),
		fwd("padding behind the outer packet is dropped", outerPad, udp),
		{name: "unresolved next hop hands the inner frame to the kernel", dev: dptest.UlDev, in: from(noNeigh),
			action: xdpPass, out: eth6(dptest.FabMAC, dptest.UlMAC, false, noNeigh),
			stats: map[string]uint64{"decap_pass": 1}, eipSlot: slot, eipTx: 1},

		drop("hop limit 1", from(withHop(ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 0)), 1)), "drop_ttl"),
		drop("hop limit 0", from(withHop(ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 0)), 0)), "drop_ttl"),
		drop("too big for the route's mtu", from(big), "drop_too_big"),
		drop("blackhole", dst("2001:db8:251::5"), "drop_fib"),
		drop("source not an EIP", from(ip6Hdr("2001:db8:e1::77", client6, nhUDP, udp6(1, 2, 0))), "drop_spoof"),
		drop("EIP bound to another host", fromHost6(t, otherHost, key, tcp), "drop_spoof"),
		drop("wrong VSID", fromHost6(t, hostAddr, 6000<<8, tcp), "drop_spoof"),
		drop("an IPv6 VIP's source: no IPv6 load balancing", from(ip6Hdr(vip6, client6, nhTCP, tcp6(443, 1, 0x12))), "drop_spoof"),
		drop("another host's EIP as source", from(ip6Hdr(eip6Own, client6, nhUDP, udp6(1, 2, 0))), "drop_spoof"),
		drop("destination ::", dst("::"), "drop_bad_dst"),
		drop("destination ::1", dst("::1"), "drop_bad_dst"),
		drop("multicast destination", dst("ff0e::1"), "drop_bad_dst"),
		drop("link-local destination", dst("fe80::1"), "drop_bad_dst"),
		drop("ipv4-mapped destination", dst("::ffff:203.0.113.10"), "drop_bad_dst"),
		drop("unique-local destination", dst("fd00:1::1"), "drop_bad_dst"),
		drop("the underlay's router", dst(dptest.FabAddr6), "drop_bad_dst"),
		drop("the underlay behind an unresolved hop", dst("2001:db8:250::5"), "drop_bad_dst"),
		drop("routing header type 0", from(ip6Hdr(eip6, client6, nhRoute, routeHdr(nhUDP, 0, 1))), "drop_inner_bad"),
		drop("martian source ::1", from(ip6Hdr("::1", client6, nhUDP, udp6(1, 2, 0))), "drop_inner_bad"),
		drop("inner truncated", from(ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 0))[:30]), "drop_inner_bad"),
		drop("inner longer than outer", innerLong, "drop_inner_bad"),
		drop("inner vlan tag (RFC 7637)", innerTagged, "drop_inner_bad"),
		{name: "nvgre from the Internet side", dev: dptest.ExtDev,
			in:     nvgre(t, dptest.RtrMAC, dptest.ExtMAC, hostAddr, dptest.UlAddr, key, 0, eth6(guestMAC6, gwMAC, false, tcp)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

// TestNextHopCache6: the IPv6 next hops of the return path are cached per
// CPU (nh_cache6) and follow a neighbour change and a route change once
// the daemon invalidates the cache, as IPv4's do (TestNextHopCache).
func TestNextHopCache6(t *testing.T) {
	b := newDecap6Bed(t)
	ip := ip6Hdr(eip6, client6, nhUDP, udp6(1, 2, 0))
	in := fromHost6(t, hostAddr, vsid<<8|1, ip)
	run := func() []byte {
		t.Helper()
		res, err := b.env.Run(b.edge.Program(), dptest.UlDev, in)
		if err != nil || res.Action != xdpRedirect {
			t.Fatalf("action %d err %v", res.Action, err)
		}
		return res.Out
	}
	if got := mac2(run()); got != dptest.RtrMAC {
		t.Fatalf("next hop MAC %s, want %s", got, dptest.RtrMAC)
	}
	const moved = "02:aa:00:00:00:99"
	if err := b.env.Node.Neigh(dptest.ExtDev, dptest.RtrAddr6, moved); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != dptest.RtrMAC {
		t.Fatalf("cache not used: MAC %s right after the change", got)
	}
	if err := b.edge.InvalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != moved {
		t.Fatalf("after invalidation MAC %s, want %s", got, moved)
	}

	// A route change: the client's prefix through another router.
	const other6, otherMAC = "2001:db8:100::77", "02:aa:00:00:00:77"
	if err := b.env.Node.Neigh(dptest.ExtDev, other6, otherMAC); err != nil {
		t.Fatal(err)
	}
	if err := b.env.Node.Route("2001:db8:c::/48", other6, dptest.ExtDev); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != moved {
		t.Fatalf("cache not used: MAC %s right after the route change", got)
	}
	if err := b.edge.InvalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != otherMAC {
		t.Fatalf("after the route change and invalidation MAC %s, want %s", got, otherMAC)
	}
}

// TestAgentNextHopCache6: the agent's IPv6 decapsulation (edge ->
// guest) looks the guest up through nh_cache6 too: a changed neighbour
// of the guest is used once the cache is invalidated, and a guest reached
// through a gateway keeps its own address (the kernel writes the
// gateway's over the FIB request's destination; the translation must not
// take it from there).
func TestAgentNextHopCache6(t *testing.T) {
	env, a := newAgent6Bed(t)
	udp := pkt6{src: v6Client, dst: agentEIP6, proto: nhUDP, sport: 1000, dport: 53, hop: 61}
	in := nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, vsid<<8|1, 0, eth6(gwMAC, "02:00:c6:33:64:07", false, udp.ip()))
	run := func() []byte {
		t.Helper()
		res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, in)
		if err != nil || res.Action != xdpRedirect {
			t.Fatalf("action %d err %v", res.Action, err)
		}
		return res.Out
	}
	want := eth6(dptest.GuestMAC, dptest.VMMAC, false, udp.withDst(agentPriv6).ip())
	if d := diffBytes(want, run()); d != "" {
		t.Fatalf("first packet: %s", d)
	}
	const moved = "02:cc:00:00:00:99"
	if err := env.Node.Neigh(dptest.GuestDev, agentPriv6, moved); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != dptest.VMMAC {
		t.Fatalf("cache not used: MAC %s right after the change", got)
	}
	if err := a.InvalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	out := run()
	if got := mac2(out); got != moved {
		t.Fatalf("after invalidation MAC %s, want %s", got, moved)
	}

	// The guest behind a gateway on its link: delivered to the gateway's
	// MAC, still translated to the guest's own address.
	const gw6, gwMAC6 = "2001:db8:f0::fe", "02:cc:00:00:00:fe"
	if err := env.Node.Neigh(dptest.GuestDev, gw6, gwMAC6); err != nil {
		t.Fatal(err)
	}
	if err := env.Node.Route(agentPriv6+"/128", gw6, dptest.GuestDev); err != nil {
		t.Fatal(err)
	}
	if err := a.InvalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	want = eth6(dptest.GuestMAC, gwMAC6, false, udp.withDst(agentPriv6).ip())
	for _, round := range []string{"miss", "hit"} {
		if d := diffBytes(want, run()); d != "" {
			t.Fatalf("guest behind a gateway (%s): %s", round, d)
		}
	}
}

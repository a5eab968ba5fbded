package dataplane

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The IPv6 EIP path (bpf/edge.c edge_ipv6): an IPv6 EIP routed to a host
// over the IPv4 underlay.
const (
	eip6       = "2001:db8:e1::7"
	eip6Idx    = 11
	eip6NoNbr  = "2001:db8:e1::8" // bound to a host behind an unresolved gateway
	eip6Hole   = "2001:db8:e1::9" // bound to a host behind a blackhole route
	eip6Own    = "2001:db8:e1::a" // another EIP of the region
	vip6       = "2001:db8:e1::80"
	client6    = "2001:db8:c::10"
	eip6Prefix = "2001:db8:e1::/48"
)

// newEdge6Bed is newEdgeBed with the IPv6 EIPs routed and the region's
// IPv6 prefix in the anti-spoofing trie, all through the Go API; the
// IPv6 VIP route (which no plan writes) is written to the map directly.
func newEdge6Bed(t *testing.T) *edgeBed {
	b := newEdgeBed(t)
	if err := b.edge.PutRoutes(map[netipAddr]Route{
		addr(eip6):      {Host: addr(hostAddr), VSID: vsid, StatsIdx: eip6Idx},
		addr(eip6NoNbr): {Host: addr("198.19.250.9"), VSID: vsid, StatsIdx: 12},
		addr(eip6Hole):  {Host: addr("198.19.251.9"), VSID: vsid, StatsIdx: 13},
		addr(eip6Own):   {Host: addr(otherHost), VSID: 6000, StatsIdx: 14},
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetSpoofPrefixes([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix(eip6Prefix)},
		[]netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}); err != nil {
		t.Fatal(err)
	}
	k, err := routeKeyOf(addr(vip6))
	if err != nil {
		t.Fatal(err)
	}
	h, _, _ := addrTo(addr(hostAddr))
	if err := b.edge.objs.EipRoutes.Update(&k, &edgeEipRoute{Host: h, Family: 2, Vsid: vsid, Flags: routeVIP, Lgen: 1}, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.bumpRouteGen(); err != nil {
		t.Fatal(err)
	}
	return b
}

// encap6Of is the frame the edge must emit for the IPv6 packet ip (to an
// EIP bound to host): outer Ethernet to the underlay's router, outer IPv4
// from the edge's underlay address (DF, TTL 64, TOS the traffic class),
// GRE with key VSID << 8 | FlowID (flowhash.FlowID6 of the 5-tuple), the
// inner frame from the edge's router MAC to 02:00 and the EIP's last four
// bytes, ethertype IPv6, the packet unchanged but for its hop limit.
// Extension headers: ip's upper layer (proto) starts at l4, else 40.
func encap6Of(t *testing.T, ip []byte, host string, vsid uint32) []byte {
	return encap6L4(t, ip, ip[6], 40, host, vsid)
}

func encap6L4(t *testing.T, ip []byte, proto uint8, l4 int, host string, vsid uint32) []byte {
	src, _ := netip.AddrFromSlice(ip[8:24])
	dst, _ := netip.AddrFromSlice(ip[24:40])
	tuple := flowhash.Tuple{Src: src, Dst: dst, Proto: proto}
	if proto == nhTCP || proto == nhUDP {
		tuple.SrcPort, tuple.DstPort = binary.BigEndian.Uint16(ip[l4:]), binary.BigEndian.Uint16(ip[l4+2:])
	}
	key := vsid<<8 | uint32(flowhash.FlowID6(tuple, testSeed))
	d := dst.As16()
	innerDst := "02:00:" + hex2(d[12]) + ":" + hex2(d[13]) + ":" + hex2(d[14]) + ":" + hex2(d[15])
	in := append([]byte(nil), ip...)
	in[7]--
	tc := ip[0]<<4 | ip[1]>>4
	return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, host, key, tc, eth6(gwMAC, innerDst, false, in))
}

// withTC sets an IPv6 header's traffic class.
func withTC(ip []byte, tc uint8) []byte {
	ip[0] = 0x60 | tc>>4
	ip[1] = ip[1]&0x0f | tc<<4
	return ip
}

// withHop sets an IPv6 header's hop limit.
func withHop(ip []byte, hop uint8) []byte {
	ip[7] = hop
	return ip
}

// TestEdgeIPv6EIP: an IPv6 packet from the Internet to an IPv6 EIP is
// encapsulated to its host byte for byte as the IPv4 path does (the same
// key, FlowID from the IPv6 5-tuple, inner MACs, outer DF/TTL/TOS; hop
// limit decremented; counted under encap_tx and the EIP's rx counters);
// the anti-spoofing classes, an expired hop limit, a packet too big for
// the underlay, an unreachable host and an IPv6 VIP route are dropped
// under their counters; an IPv6 address without a route still goes to
// the kernel.
func TestEdgeIPv6EIP(t *testing.T) {
	b := newEdge6Bed(t)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	slot := ptr[uint32](eip6Idx)
	one, zero := ptr[uint64](1), ptr[uint64](0)

	syn := withTC(ip6Hdr(client6, eip6, nhTCP, tcp6(40000, 443, 0x02)), 0x28)
	udp := ip6Hdr(client6, eip6, nhUDP, udp6(5353, 53, 12))
	ping := ip6Hdr(client6, eip6, nhICMPv6, icmp6(128, 12))
	ext := ip6Hdr(client6, eip6, nhDst, cat(optHdr(nhUDP, 1), udp6(7, 9, 4)))
	// The underlay is 1500 bytes: 1458 of IPv6 fit with NVGRE's 42.
	fits := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1458-48))
	big := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1459-48))
	padded := append(inet(ip6Hdr(client6, eip6, nhTCP, tcp6(3, 4, 0x10))), make([]byte, 6)...)
	tagged := eth6(dptest.RtrMAC, dptest.ExtMAC, true, udp)

	enc := func(name string, ip []byte, in []byte, syns *uint64) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpRedirect, out: encap6Of(t, ip, hostAddr, vsid),
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1, eipSyn: syns}
	}
	drop := func(name string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	fixtures := []fixture{
		enc("tcp syn, traffic class to the outer tos", syn, inet(syn), one),
		enc("udp", udp, inet(udp), zero),
		enc("icmpv6 echo", ping, inet(ping), zero),
		{name: "destination options header: the upper layer's ports hashed", dev: dptest.ExtDev, in: inet(ext), action: xdpRedirect,
			out: encap6L4(t, ext, nhUDP, 48, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		enc("largest packet the underlay carries", fits, inet(fits), zero),
		enc("ethernet padding is dropped", ip6Hdr(client6, eip6, nhTCP, tcp6(3, 4, 0x10)), padded, zero),
		enc("vlan tag of the Internet side is not carried", udp, tagged, zero),
		enc("hop limit 2 leaves with 1", withHop(ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 0)), 2), inet(withHop(ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 0)), 2)), zero),
		drop("hop limit 1", inet(withHop(ip6Hdr(client6, eip6, nhUDP, udp6(33434, 33435, 0)), 1)), "drop_ttl"),
		drop("hop limit 0", inet(withHop(ip6Hdr(client6, eip6, nhUDP, udp6(33434, 33435, 0)), 0)), "drop_ttl"),
		drop("too big for the underlay", inet(big), "drop_too_big"),
		drop("source is the destination (land)", inet(ip6Hdr(eip6, eip6, nhTCP, tcp6(80, 80, 0x02))), "drop_spoof_own"),
		drop("source another EIP of the region", inet(ip6Hdr(eip6Own, eip6, nhTCP, tcp6(1, 2, 0x02))), "drop_spoof_own"),
		drop("source in the region's prefix", inet(ip6Hdr("2001:db8:e1:ffff::1", eip6, nhUDP, udp6(1, 2, 0))), "drop_spoof_own"),
		drop("unique-local source fc00::/7", inet(ip6Hdr("fd12:3456::1", eip6, nhUDP, udp6(1, 2, 0))), "drop_spoof_bogon"),
		drop("unique-local source fc00::", inet(ip6Hdr("fc00::1", eip6, nhUDP, udp6(1, 2, 0))), "drop_spoof_bogon"),
		drop("link-local source, tcp", inet(ip6Hdr("fe80::66", eip6, nhTCP, tcp6(1, 2, 0x02))), "drop_ip6_off_link"),
		drop("link-local source, icmpv6 too", inet(ip6Hdr("fe80::66", eip6, nhICMPv6, icmp6(128, 4))), "drop_ip6_off_link"),
		drop("ipv6 vip route without listeners", inet(ip6Hdr(client6, vip6, nhTCP, tcp6(1, 443, 0x02))), "drop_lb_no_port"),
		{name: "host behind an unresolved gateway", dev: dptest.ExtDev, in: inet(ip6Hdr(client6, eip6NoNbr, nhUDP, udp6(1, 2, 0))),
			action: xdpDrop, stats: map[string]uint64{"drop_no_neigh": 1}},
		{name: "host behind a blackhole", dev: dptest.ExtDev, in: inet(ip6Hdr(client6, eip6Hole, nhUDP, udp6(1, 2, 0))),
			action: xdpDrop, stats: map[string]uint64{"drop_fib": 1}},
		{name: "an address next to the EIP is the kernel's", dev: dptest.ExtDev, in: inet(ip6Hdr(client6, "2001:db8:e1::6", nhUDP, udp6(1, 2, 0))),
			action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "malformed to the EIP: dropped by the parser first", dev: dptest.ExtDev, in: inet(ip6Hdr(client6, eip6, nhRoute, routeHdr(nhUDP, 0, 1))),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_rh0": 1}},
		// From the underlay the anti-spoofing of the Internet side does
		// not apply (as for IPv4): an underlay source is encapsulated,
		// and sent back out of the underlay (TX).
		{name: "from the underlay interface, no anti-spoofing", dev: dptest.UlDev,
			in:     eth6(dptest.FabMAC, dptest.UlMAC, false, ip6Hdr("fd00::1", eip6, nhUDP, udp6(1, 2, 0))),
			action: xdpTX, out: encap6Of(t, ip6Hdr("fd00::1", eip6, nhUDP, udp6(1, 2, 0)), hostAddr, vsid),
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		// But a link-local source is never forwarded (RFC 4291 2.5.6),
		// from any interface: ICMPv6, which ipv6_frame's off-link check
		// leaves to the kernel, was encapsulated (found by the scale
		// fuzzer's oracle).
		{name: "from the underlay interface, a link-local source, icmpv6", dev: dptest.UlDev,
			in:     eth6(dptest.FabMAC, dptest.UlMAC, false, ip6Hdr("fe80::66", eip6, nhICMPv6, icmp6(128, 4))),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_off_link": 1}, eipSlot: slot},
		{name: "from the underlay interface, a link-local source, udp", dev: dptest.UlDev,
			in:     eth6(dptest.FabMAC, dptest.UlMAC, false, ip6Hdr("febf::66", eip6, nhUDP, udp6(1, 2, 0))),
			action: xdpDrop, stats: map[string]uint64{"drop_ip6_off_link": 1}, eipSlot: slot},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

// TestEdgeIPv6Routes: the edge's route API takes IPv6 EIPs (keyed by
// their 16 bytes, family 6) with an IPv4 host, reads them back and
// deletes them; it refuses an IPv6 host (the underlay is IPv4), mapped
// and zoned addresses; the IPv6 anti-spoofing prefixes are written
// beside the IPv4 ones and read back.
func TestEdgeIPv6Routes(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{EIPMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := Route{Host: addr(hostAddr), VSID: vsid, StatsIdx: 3}
	if err := e.PutRoutes(map[netipAddr]Route{addr(eip6): r, addr(eip): {Host: addr(hostAddr), VSID: vsid, StatsIdx: 4}}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := e.Route(addr(eip6))
	if err != nil || !ok || got != r {
		t.Fatalf("Route(%s) = %+v %v %v, want %+v", eip6, got, ok, err, r)
	}
	all, err := e.Routes()
	if err != nil || len(all) != 2 || all[addr(eip6)] != r {
		t.Fatalf("Routes() = %v %v, want both with %s", all, err, eip6)
	}
	for _, bad := range []struct {
		a netipAddr
		r Route
	}{
		{addr(eip6), Route{Host: addr("fe80::1"), VSID: 1}}, // an IPv6 host's underlay is global unicast
		{addr(eip6), Route{Host: addr("0.0.0.5"), VSID: 1}}, // 0.0.0.0/8 names the IPv6 hosts (ul6.go)
		{addr("::ffff:198.51.100.7"), r},
		{addr("fe80::1%eth0"), r},
	} {
		if err := e.PutRoutes(map[netipAddr]Route{bad.a: bad.r}); err == nil {
			t.Errorf("PutRoutes(%v -> %v) accepted", bad.a, bad.r.Host)
		}
	}
	if err := e.DeleteRoutes([]netipAddr{addr(eip6)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.Route(addr(eip6)); ok {
		t.Errorf("%s still routed after DeleteRoutes", eip6)
	}

	own := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix(eip6Prefix), netip.MustParsePrefix("2001:db8:e2::7/128")}
	ul := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8:ff::/64")}
	if err := e.SetSpoofPrefixes(own, ul); err != nil {
		t.Fatal(err)
	}
	sp, err := e.SpoofPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]uint32{own[0]: SpoofOwn, own[1]: SpoofOwn, own[2]: SpoofOwn, ul[0]: SpoofUnderlay, ul[1]: SpoofUnderlay}
	if len(sp) != len(want) {
		t.Fatalf("SpoofPrefixes() = %v, want %v", sp, want)
	}
	for p, c := range want {
		if sp[p] != c {
			t.Errorf("SpoofPrefixes()[%v] = %d, want %d", p, sp[p], c)
		}
	}
	// A write without the IPv6 ones deletes them.
	if err := e.SetSpoofPrefixes(own[:1], ul[:1]); err != nil {
		t.Fatal(err)
	}
	if sp, _ := e.SpoofPrefixes(); len(sp) != 2 {
		t.Errorf("after dropping the IPv6 prefixes: %v", sp)
	}
}

// TestEdgeIPv6RouteCache: the per-CPU IPv6 route cache (eip_cache6)
// serves a route only until the route changes: a packet after a move goes
// to the new host, after a delete to the kernel, after a re-add to the
// host again.
func TestEdgeIPv6RouteCache(t *testing.T) {
	b := newEdge6Bed(t)
	ip := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 0))
	in := eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip)
	enc := func(name, host string, vsid uint32) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpRedirect, out: encap6Of(t, ip, host, vsid),
			stats: map[string]uint64{"encap_tx": 1}}
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{enc("first packet", hostAddr, vsid), enc("cached", hostAddr, vsid)})
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eip6): {Host: addr(otherHost), VSID: 6000, StatsIdx: eip6Idx}}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{enc("after a move", otherHost, 6000)})
	if err := b.edge.DeleteRoutes([]netipAddr{addr(eip6)}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{{name: "after a delete", dev: dptest.ExtDev, in: in, action: xdpPass,
		stats: map[string]uint64{"pass_ipv6": 1}}})
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eip6): {Host: addr(hostAddr), VSID: vsid, StatsIdx: eip6Idx}}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{enc("after a re-add", hostAddr, vsid)})
}

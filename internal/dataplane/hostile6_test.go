package dataplane

import (
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// The hostile IPv6 corpus aimed at IPv6 EIPs (issue 21): named,
// deterministic frames through the real programs (BPF_PROG_TEST_RUN), on
// the edge's Internet side (untagged and tagged) and underlay (bare, and
// in NVGRE from the EIP's host), the agent's guest side and underlay:
// extension-header chains past the bound, a malformed chain, hop-by-hop
// not first, tiny first fragments (RFC 7112), non-first fragments,
// routing header type 0 (RFC 5095), spoofed link-local, ::1, ::,
// unique-local, IPv4-mapped and multicast sources. Each is dropped under
// the counter docs/dataplane.md names (or, where the docs say it is
// valid, forwarded byte for byte); runFixtures checks the action, the
// output and that every other counter stayed still, so nothing hostile is
// transmitted.

// hostile6 are the malformed packets (RFC 8200, 5095, 7112) from src to
// dst and the counter the parser drops each under (the edge's Internet
// side and the agent's guest side; in a tunnel each is drop_inner_bad).
func hostile6(src, dst string) []struct {
	name, counter string
	ip            []byte
} {
	long := ip6Hdr(src, dst, nhHop, cat(optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1),
		optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhUDP, 1), udp6(1, 53, 0)))
	return []struct {
		name, counter string
		ip            []byte
	}{
		{"seven extension headers, past the bound of six", "drop_ip6_ext_limit", long},
		{"eight destination options headers", "drop_ip6_ext_limit", ip6Hdr(src, dst, nhDst, cat(optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1),
			optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhTCP, 1), tcp6(1, 80, 0x02)))},
		{"the upper layer past byte 255", "drop_ip6_ext_limit", ip6Hdr(src, dst, nhDst, cat(optHdr(nhUDP, 28), udp6(1, 53, 0)))},
		{"malformed chain: a header longer than the payload", "drop_ip6_ext_bad", ip6Hdr(src, dst, nhDst, []byte{nhUDP, 1, 1, 4, 0, 0, 0, 0})},
		{"malformed chain: a header cut inside its first 8 bytes", "drop_ip6_ext_bad", ip6Hdr(src, dst, nhDst, []byte{nhUDP, 0, 1, 4})},
		{"hop-by-hop not first", "drop_ip6_ext_bad", ip6Hdr(src, dst, nhDst, cat(optHdr(nhHop, 1), optHdr(nhUDP, 1), udp6(1, 53, 0)))},
		{"hop-by-hop after a fragment header", "drop_ip6_ext_bad", ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhHop, 0, false), optHdr(nhUDP, 1), udp6(1, 53, 0)))},
		{"two fragment headers", "drop_ip6_ext_bad", ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhFrag, 0, true), fragHdr(nhUDP, 0, true), udp6(1, 53, 0)))},
		{"tiny first fragment: 12 bytes of tcp (RFC 7112)", "drop_ip6_tiny_frag", ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhTCP, 0, true), tcp6(1, 80, 0x02)[:12]))},
		{"tiny first fragment: the chain goes on in the next fragment", "drop_ip6_tiny_frag",
			ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhDst, 0, true), []byte{nhTCP, 1, 1, 12, 0, 0, 0, 0}))},
		{"tiny first fragment: 4 bytes of udp", "drop_ip6_tiny_frag", ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhUDP, 0, true), udp6(1, 53, 0)[:4]))},
		{"tiny first fragment: the tcp header after an authentication header", "drop_ip6_tiny_frag",
			ip6Hdr(src, dst, nhFrag, cat(fragHdr(nhAH, 0, true), ahHdr(nhTCP), tcp6(1, 80, 0x02)[:8]))},
		{"routing header type 0, segments left 1 (RFC 5095)", "drop_ip6_rh0", ip6Hdr(src, dst, nhRoute, cat(routeHdr(nhUDP, 0, 1), udp6(1, 53, 0)))},
		{"routing header type 0, segments left 0", "drop_ip6_rh0", ip6Hdr(src, dst, nhRoute, cat(routeHdr(nhTCP, 0, 0), tcp6(1, 80, 0x02)))},
		{"routing header type 0 after destination options", "drop_ip6_rh0", ip6Hdr(src, dst, nhDst, cat(optHdr(nhRoute, 1), routeHdr(nhUDP, 0, 1), udp6(1, 53, 0)))},
		{"tcp cut short", "drop_l4_trunc", ip6Hdr(src, dst, nhTCP, tcp6(1, 80, 0x02)[:19])},
	}
}

// spoofed6 are sources that never come from the Internet, each with the
// counter the edge's Internet side drops it under when sent to an IPv6
// EIP (martians in the parser; link-local in the parser, or for ICMPv6
// in the EIP path's anti-spoofing; unique-local in anti-spoofing).
var spoofed6 = []struct {
	name, src string
	nh        uint8
	counter   string
}{
	{"link-local source, tcp", "fe80::66", nhTCP, "drop_ip6_off_link"},
	{"link-local source, icmpv6", "fe80::66", nhICMPv6, "drop_ip6_off_link"},
	{"link-local source at the edge of fe80::/10", "febf:ffff::1", nhUDP, "drop_ip6_off_link"},
	{"loopback source ::1", "::1", nhUDP, "drop_ip6_martian"},
	{"unspecified source ::", "::", nhTCP, "drop_ip6_martian"},
	{"unspecified source :: icmpv6 to a unicast address", "::", nhICMPv6, "drop_ip6_martian"},
	{"unique-local source fc00::/7", "fd00:bad::1", nhUDP, "drop_spoof_bogon"},
	{"unique-local source fc00::", "fc00::", nhICMPv6, "drop_spoof_bogon"},
	{"ipv4-mapped source", "::ffff:192.0.2.1", nhUDP, "drop_ip6_martian"},
	{"multicast source", "ff02::1", nhUDP, "drop_ip6_martian"},
	{"multicast source of global scope", "ff0e::1", nhICMPv6, "drop_ip6_martian"},
}

// l4Of is a small upper layer of protocol nh.
func l4Of(nh uint8) []byte {
	switch nh {
	case nhTCP:
		return tcp6(40000, 80, 0x02)
	case nhICMPv6:
		return icmp6(128, 8)
	}
	return udp6(40000, 53, 4)
}

// TestEdgeIPv6EIPHostile: the corpus to an IPv6 EIP from the Internet
// side (untagged and behind a VLAN tag), the spoofed sources, and what
// the docs say is valid there (six extension headers, the bound; a later
// fragment; an atomic fragment) encapsulated byte for byte; from the
// underlay, bare (the spoofed link-local source too) and, as an IPv6
// EIP's guest's packet in NVGRE from its host, every malformed inner
// packet drop_inner_bad and the destinations no border router forwards
// to drop_bad_dst.
func TestEdgeIPv6EIPHostile(t *testing.T) {
	b := newDecap6Bed(t)
	slot := ptr[uint32](eip6Idx)
	drop := func(name, dev string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	var fs []fixture
	for _, side := range []struct {
		name   string
		tagged bool
	}{{"internet", false}, {"internet/vlan", true}} {
		inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, side.tagged, ip) }
		for _, h := range hostile6(client6, eip6) {
			fs = append(fs, drop(side.name+": "+h.name, dptest.ExtDev, inet(h.ip), h.counter))
		}
		for _, s := range spoofed6 {
			fs = append(fs, drop(side.name+": "+s.name, dptest.ExtDev, inet(ip6Hdr(s.src, eip6, s.nh, l4Of(s.nh))), s.counter))
		}
		// Valid: forwarded as they came, hop limit decremented.
		six := ip6Hdr(client6, eip6, nhHop, cat(optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1),
			optHdr(nhUDP, 1), udp6(1, 53, 0)))
		later := ip6Hdr(client6, eip6, nhFrag, cat(fragHdr(nhUDP, 185, false), make([]byte, 24)))
		laterTCP := ip6Hdr(client6, eip6, nhFrag, cat(fragHdr(nhTCP, 1, true), make([]byte, 8)))
		atomic := ip6Hdr(client6, eip6, nhFrag, cat(fragHdr(nhTCP, 0, false), tcp6(1, 80, 0x10)))
		for _, v := range []struct {
			name  string
			ip    []byte
			proto uint8
			l4    int
		}{
			{"six extension headers, the bound", six, nhUDP, 40 + 48},
			{"non-first fragment (no upper-layer header: no ports)", later, nhUDP, 48},
			{"non-first fragment of tcp with more to come", laterTCP, nhTCP, 48},
			{"atomic fragment (RFC 6946): a whole packet", atomic, nhTCP, 48},
		} {
			fs = append(fs, fixture{name: side.name + ": " + v.name, dev: dptest.ExtDev, in: inet(v.ip), action: xdpRedirect,
				out: encap6L4(t, v.ip, v.proto, v.l4, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1})
		}
	}

	// The underlay, bare: no anti-spoofing (as for IPv4) but the
	// parser's and RFC 4291 2.5.6's.
	ul := func(ip []byte) []byte { return eth6(dptest.FabMAC, dptest.UlMAC, false, ip) }
	for _, h := range hostile6(client6, eip6) {
		fs = append(fs, drop("underlay: "+h.name, dptest.UlDev, ul(h.ip), h.counter))
	}
	for _, s := range spoofed6 {
		want := s.counter
		if want == "drop_spoof_bogon" {
			// Unique-local is the region's own address space: from the
			// underlay it is encapsulated (TestEdgeIPv6EIP).
			continue
		}
		fs = append(fs, drop("underlay: "+s.name, dptest.UlDev, ul(ip6Hdr(s.src, eip6, s.nh, l4Of(s.nh))), want))
	}

	// In NVGRE from the EIP's host: the return path.
	key := uint32(vsid<<8 | 0x21)
	for _, h := range hostile6(eip6, client6) {
		fs = append(fs, drop("from the host: "+h.name, dptest.UlDev, fromHost6(t, hostAddr, key, h.ip), "drop_inner_bad"))
	}
	for _, s := range []struct{ name, src, dst, counter string }{
		{"martian source ::1", "::1", client6, "drop_inner_bad"},
		{"ipv4-mapped source", "::ffff:198.51.100.7", client6, "drop_inner_bad"},
		{"multicast source", "ff0e::1", client6, "drop_inner_bad"},
		{"link-local source (no EIP)", "fe80::66", client6, "drop_spoof"},
		{"unique-local source (no EIP)", "fd00::1", client6, "drop_spoof"},
		{"another EIP's source", eip6Own, client6, "drop_spoof"},
		{"link-local destination", eip6, "fe80::1", "drop_bad_dst"},
		{"multicast destination", eip6, "ff0e::1", "drop_bad_dst"},
		{"all-nodes destination", eip6, "ff02::1", "drop_bad_dst"},
		{"unique-local destination", eip6, "fd00::1", "drop_bad_dst"},
		{"ipv4-mapped destination", eip6, "::ffff:192.0.2.1", "drop_bad_dst"},
		{"loopback destination", eip6, "::1", "drop_bad_dst"},
		{"unspecified destination", eip6, "::", "drop_bad_dst"},
	} {
		fs = append(fs, drop("from the host: "+s.name, dptest.UlDev, fromHost6(t, hostAddr, key, ip6Hdr(s.src, s.dst, nhUDP, udp6(1, 2, 4))), s.counter))
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fs)
}

// TestAgentIPv6EIPHostile: the corpus from a guest with an IPv6 EIP
// (dropped under the parser's counters, never translated), the spoofed
// sources a guest may try (another guest's address: drop_spoof; no EIP's:
// drop_local; martians), destinations no router forwards to; and in
// NVGRE from an edge to the IPv6 EIP (malformed or martian inner packets
// drop_inner_bad, hop limit 0 drop_ttl, a zero UDP checksum
// drop_ip6_udp_csum0).
func TestAgentIPv6EIPHostile(t *testing.T) {
	env, a := newAgent6Bed(t)
	drop := func(name, dev string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}}
	}
	guest := func(ip []byte) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, ip) }
	var gs []fixture
	for _, h := range hostile6(agentPriv6, client6) {
		gs = append(gs, drop("guest: "+h.name, dptest.GuestDev, guest(h.ip), h.counter))
	}
	for _, s := range []struct{ name, src, dst, counter string }{
		{"another guest's address (its EIP on another port)", agentPriv6Far, client6, "drop_spoof"},
		{"an address without an IPv6 EIP", agentPriv6NoEIP, client6, "drop_local"},
		{"link-local source", "fe80::66", client6, "drop_local"},
		{"unique-local source", "fd00::1", client6, "drop_local"},
		{"the EIP itself as source", agentEIP6, client6, "drop_local"},
		{"loopback source", "::1", client6, "drop_ip6_martian"},
		{"unspecified source", "::", client6, "drop_ip6_martian"},
		{"ipv4-mapped source", "::ffff:192.0.2.1", client6, "drop_ip6_martian"},
		{"multicast source", "ff02::1", client6, "drop_ip6_martian"},
		{"link-local destination", agentPriv6, "fe80::1", "drop_bad_dst"},
		{"multicast destination", agentPriv6, "ff0e::1", "drop_bad_dst"},
		{"loopback destination", agentPriv6, "::1", "drop_ip6_martian"},
	} {
		gs = append(gs, drop("guest: "+s.name, dptest.GuestDev, guest(ip6Hdr(s.src, s.dst, nhUDP, udp6(1, 2, 4))), s.counter))
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, gs)

	fromEdge := func(src string, ip []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr, vsid<<8|0x44, 0, eth6(gwMAC, "02:00:c6:33:64:07", false, ip))
	}
	var us []fixture
	for _, h := range hostile6(client6, agentEIP6) {
		us = append(us, drop("underlay: "+h.name, dptest.UlDev, fromEdge(edgeA, h.ip), "drop_inner_bad"))
	}
	zero := pkt6{src: client6, dst: agentEIP6, proto: nhUDP, sport: 1, dport: 53, zeroUDPCsum: true}.ip()
	for _, s := range []struct {
		name, src string
		ip        []byte
		counter   string
	}{
		{"martian source ::1", edgeA, ip6Hdr("::1", agentEIP6, nhUDP, udp6(1, 2, 4)), "drop_inner_bad"},
		{"ipv4-mapped source", edgeA, ip6Hdr("::ffff:192.0.2.1", agentEIP6, nhUDP, udp6(1, 2, 4)), "drop_inner_bad"},
		{"multicast source", edgeA, ip6Hdr("ff02::1", agentEIP6, nhUDP, udp6(1, 2, 4)), "drop_inner_bad"},
		{"hop limit 0", edgeA, withHop(pkt6{src: client6, dst: agentEIP6, proto: nhUDP, sport: 1, dport: 53}.ip(), 0), "drop_ttl"},
		{"udp checksum 0 (RFC 8200 8.1)", edgeA, zero, "drop_ip6_udp_csum0"},
		{"link-local destination", edgeA, ip6Hdr(client6, "fe80::1", nhUDP, udp6(1, 2, 4)), "drop_unknown"},
		{"the guest's own address as destination", edgeA, pkt6{src: client6, dst: agentPriv6, proto: nhTCP, sport: 1, dport: 22}.ip(), "drop_unknown"},
		{"from no edge", hostAddr, pkt6{src: client6, dst: agentEIP6, proto: nhTCP, sport: 1, dport: 22}.ip(), "drop_spoof"},
	} {
		us = append(us, drop("underlay: "+s.name, dptest.UlDev, fromEdge(s.src, s.ip), s.counter))
	}
	runFixtures(t, env, agentProg{a: a}, a, us)
}

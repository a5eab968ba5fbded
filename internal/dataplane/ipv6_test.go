package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/dpfuzz"
)

// IPv6 frames built byte by byte: the hostile ones are what a serializer
// refuses to write.

// IPv6 next headers the fixtures use.
const (
	nhHop    = 0
	nhTCP    = 6
	nhUDP    = 17
	nhRoute  = 43
	nhFrag   = 44
	nhESP    = 50
	nhAH     = 51
	nhICMPv6 = 58
	nhNone   = 59
	nhDst    = 60
)

// ip6Hdr is a fixed IPv6 header (hop limit 64) for payload, whose first
// header is nh.
func ip6Hdr(src, dst string, nh uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6], b[7] = nh, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

// eth6 frames an IPv6 packet (untagged, or with one 802.1Q tag).
func eth6(srcMAC, dstMAC string, tagged bool, ip []byte) []byte {
	b := append([]byte(nil), mac(dstMAC)...)
	b = append(b, mac(srcMAC)...)
	if tagged {
		b = append(b, 0x81, 0x00, 0x00, 0x07)
	}
	b = append(b, 0x86, 0xdd)
	return append(b, ip...)
}

// optHdr is a hop-by-hop or destination options header of n*8 bytes
// (PadN), next header nh.
func optHdr(nh uint8, n int) []byte {
	b := make([]byte, n*8)
	b[0], b[1] = nh, uint8(n-1)
	b[2], b[3] = 1, uint8(n*8-4) // PadN
	return b
}

// ahHdr is an authentication header (RFC 4302) of 24 bytes: SPI,
// sequence number, a 96-bit ICV; next header nh.
func ahHdr(nh uint8) []byte {
	b := make([]byte, 24)
	b[0], b[1] = nh, 4 // (4+2) 32-bit words
	b[7] = 1
	return b
}

// routeHdr is a routing header of type typ with no addresses.
func routeHdr(nh, typ, left uint8) []byte { return []byte{nh, 0, typ, left, 0, 0, 0, 0} }

// fragHdr is a fragment header: offset in 8-byte units, more fragments.
func fragHdr(nh uint8, off uint16, more bool) []byte {
	w := off << 3
	if more {
		w |= 1
	}
	b := []byte{nh, 0, 0, 0, 0, 0, 0x12, 0x34}
	binary.BigEndian.PutUint16(b[2:], w)
	return b
}

func udp6(sport, dport uint16, data int) []byte {
	b := make([]byte, 8+data)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+data))
	return b
}

func tcp6(sport, dport uint16, flags uint8) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12], b[13] = 5<<4, flags
	return b
}

// icmp6 is an ICMPv6 message of type typ with a body of n bytes after
// the 4-byte header.
func icmp6(typ uint8, n int) []byte {
	b := make([]byte, 4+n)
	b[0] = typ
	return b
}

func cat(bs ...[]byte) []byte {
	var o []byte
	for _, b := range bs {
		o = append(o, b...)
	}
	return o
}

const (
	v6Client = "2001:db8:1::10"
	v6Dst    = "2001:db8:2::1"
)

// v6Frames are the IPv6 fixtures' inputs by name: the valid ones every
// program that takes IPv6 must let through (v6Valid) and the hostile ones,
// each with the counter it is dropped under (v6Hostile), on every side.
func v6Valid(inet func(ip []byte) []byte) []fixture {
	pass := func(name string, ip []byte) fixture {
		return fixture{name: name, in: inet(ip), action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}}
	}
	return []fixture{
		pass("udp", ip6Hdr(v6Client, v6Dst, nhUDP, udp6(40000, 53, 12))),
		pass("tcp syn", ip6Hdr(v6Client, v6Dst, nhTCP, tcp6(40000, 179, 0x02))),
		pass("icmpv6 echo request", ip6Hdr(v6Client, v6Dst, nhICMPv6, icmp6(128, 12))),
		pass("no next header", ip6Hdr(v6Client, v6Dst, nhNone, nil)),
		pass("ndp neighbour solicitation, link-local to solicited-node", ip6Hdr("fe80::1", "ff02::1:ff00:1", nhICMPv6, icmp6(135, 20))),
		pass("ndp duplicate address detection from ::", ip6Hdr("::", "ff02::1:ff00:1", nhICMPv6, icmp6(135, 20))),
		pass("ndp neighbour solicitation for unreachability detection, link-local to global", ip6Hdr("fe80::1", v6Dst, nhICMPv6, icmp6(135, 20))),
		pass("ndp router advertisement to all nodes", ip6Hdr("fe80::1", "ff02::1", nhICMPv6, icmp6(134, 12))),
		// MLD carries a hop-by-hop header with the router alert option
		// (RFC 3810 5): the :: exception looks at the upper layer.
		pass("mld report from :: to ff02::16, after hop-by-hop router alert",
			ip6Hdr("::", "ff02::16", nhHop, cat([]byte{nhICMPv6, 0, 5, 2, 0, 0, 1, 0}, icmp6(143, 4)))),
		pass("tcp between link-local addresses (BGP on the link)", ip6Hdr("fe80::1", "fe80::2", nhTCP, tcp6(40000, 179, 0x02))),
		pass("udp with trailing bytes after the payload", append(ip6Hdr(v6Client, v6Dst, nhUDP, udp6(1, 2, 0)), make([]byte, 10)...)),
		pass("hop-by-hop, destination options, segment routing header, destination options, udp",
			ip6Hdr(v6Client, v6Dst, nhHop, cat(optHdr(nhDst, 1), optHdr(nhRoute, 2), routeHdr(nhDst, 4, 0), optHdr(nhUDP, 1), udp6(1, 2, 4)))),
		pass("six extension headers (the bound)",
			ip6Hdr(v6Client, v6Dst, nhHop, cat(optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhUDP, 1), udp6(1, 2, 0)))),
		pass("first fragment with the whole udp header", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhUDP, 0, true), udp6(1, 2, 16)))),
		pass("atomic fragment (offset 0, no more fragments)", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhTCP, 0, false), tcp6(1, 2, 0x10)))),
		pass("non-first fragment (no L4 header)", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhTCP, 185, false), []byte{1, 2, 3}))),
		pass("udp to a site-local group (multicast scope 5)", ip6Hdr(v6Client, "ff05::1:3", nhUDP, udp6(546, 547, 4))),
		pass("authentication header, tcp", ip6Hdr(v6Client, v6Dst, nhAH, cat(ahHdr(nhTCP), tcp6(40000, 443, 0x02)))),
		pass("first fragment with authentication header and the whole udp header", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhAH, 0, true), ahHdr(nhUDP), udp6(1, 2, 8)))),
		pass("esp ends the walk", ip6Hdr(v6Client, v6Dst, nhDst, cat(optHdr(nhESP, 1), make([]byte, 16)))),
	}
}

func v6Hostile(inet func(ip []byte) []byte) []fixture {
	drop := func(name string, ip []byte, counter string) fixture {
		return fixture{name: name, in: inet(ip), action: xdpDrop, stats: map[string]uint64{counter: 1}}
	}
	long := ip6Hdr(v6Client, v6Dst, nhHop, cat(optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhDst, 1),
		optHdr(nhDst, 1), optHdr(nhDst, 1), optHdr(nhUDP, 1), udp6(1, 2, 0)))
	bigOpts := ip6Hdr(v6Client, v6Dst, nhDst, cat(optHdr(nhUDP, 28), udp6(1, 2, 0))) // udp at 14+40+224 = 278
	// A destination options header of 16 bytes (length field 1) in a
	// payload of 8.
	truncChain := ip6Hdr(v6Client, v6Dst, nhDst, []byte{nhUDP, 1, 1, 4, 0, 0, 0, 0})
	payloadBeyond := ip6Hdr(v6Client, v6Dst, nhUDP, udp6(1, 2, 8))
	binary.BigEndian.PutUint16(payloadBeyond[4:], 17) // 16 bytes follow
	badVersion := ip6Hdr(v6Client, v6Dst, nhUDP, udp6(1, 2, 8))
	badVersion[0] = 0x40
	return []fixture{
		drop("seven extension headers (past the bound)", long, "drop_ip6_ext_limit"),
		drop("the upper-layer header past byte 255", bigOpts, "drop_ip6_ext_limit"),
		drop("an extension header beyond the payload (truncated chain)", truncChain, "drop_ip6_ext_bad"),
		drop("hop-by-hop not first", ip6Hdr(v6Client, v6Dst, nhDst, cat(optHdr(nhHop, 1), optHdr(nhUDP, 1), udp6(1, 2, 0))), "drop_ip6_ext_bad"),
		drop("two hop-by-hop headers", ip6Hdr(v6Client, v6Dst, nhHop, cat(optHdr(nhHop, 1), optHdr(nhUDP, 1), udp6(1, 2, 0))), "drop_ip6_ext_bad"),
		drop("two fragment headers", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhFrag, 0, false), fragHdr(nhUDP, 0, true), udp6(1, 2, 0))), "drop_ip6_ext_bad"),
		drop("routing header type 0", ip6Hdr(v6Client, v6Dst, nhRoute, cat(routeHdr(nhUDP, 0, 1), udp6(1, 2, 0))), "drop_ip6_rh0"),
		drop("routing header type 0, segments left 0", ip6Hdr(v6Client, v6Dst, nhRoute, cat(routeHdr(nhUDP, 0, 0), udp6(1, 2, 0))), "drop_ip6_rh0"),
		drop("tiny first fragment: 12 bytes of tcp", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhTCP, 0, true), tcp6(1, 2, 0x02)[:12])), "drop_ip6_tiny_frag"),
		drop("first fragment ending in the header chain", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhDst, 0, true), []byte{nhUDP, 1, 1, 4, 0, 0, 0, 0})), "drop_ip6_tiny_frag"),
		drop("first fragment with 4 bytes of icmpv6", ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhICMPv6, 0, true), icmp6(128, 0))), "drop_ip6_tiny_frag"),
		// RFC 8200 4 lists AH among the extension headers: the chain
		// runs through it (RFC 7112).
		drop("tiny first fragment: the tcp header after an authentication header in a later fragment",
			ip6Hdr(v6Client, v6Dst, nhFrag, cat(fragHdr(nhAH, 0, true), ahHdr(nhTCP), tcp6(1, 2, 0x02)[:4])), "drop_ip6_tiny_frag"),
		drop("authentication header of 12 bytes (not a multiple of 8)",
			ip6Hdr(v6Client, v6Dst, nhAH, cat([]byte{nhUDP, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, make([]byte, 4), udp6(1, 2, 0))), "drop_ip6_ext_bad"),
		drop("unfragmented tcp cut short", ip6Hdr(v6Client, v6Dst, nhTCP, tcp6(1, 2, 0x02)[:16]), "drop_l4_trunc"),
		drop("version 4 in an ipv6 frame", badVersion, "drop_ip_bad"),
		drop("payload length beyond the frame", payloadBeyond, "drop_ip_trunc"),
		drop("fixed header cut short", ip6Hdr(v6Client, v6Dst, nhNone, nil)[:39], "drop_ip_trunc"),
		drop("source ::1", ip6Hdr("::1", v6Dst, nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("source ::", ip6Hdr("::", v6Dst, nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("source :: icmpv6 to a global address", ip6Hdr("::", v6Dst, nhICMPv6, icmp6(135, 20)), "drop_ip6_martian"),
		drop("source multicast", ip6Hdr("ff02::1", v6Dst, nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("source ipv4-mapped", ip6Hdr("::ffff:192.0.2.1", v6Dst, nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		// RFC 4291 2.5.2, 2.5.3, 2.7: destinations no wire carries.
		drop("destination ::", ip6Hdr(v6Client, "::", nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("destination ::1", ip6Hdr(v6Client, "::1", nhTCP, tcp6(40000, 22, 0x02)), "drop_ip6_martian"),
		drop("destination ipv4-mapped", ip6Hdr(v6Client, "::ffff:192.0.2.1", nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("destination multicast of reserved scope 0", ip6Hdr(v6Client, "ff00::1", nhUDP, udp6(1, 2, 0)), "drop_ip6_martian"),
		drop("destination interface-local multicast", ip6Hdr("fe80::1", "ff11::1", nhICMPv6, icmp6(128, 4)), "drop_ip6_martian"),
	}
}

// offLink: a link-local source to a global destination, not ICMPv6.
func offLink(inet func(ip []byte) []byte) fixture {
	return fixture{name: "spoofed link-local source to a global address", in: inet(ip6Hdr("fe80::66", v6Dst, nhTCP, tcp6(40000, 443, 0x02))),
		action: xdpDrop, stats: map[string]uint64{"drop_ip6_off_link": 1}}
}

func onDev(dev string, fs []fixture) []fixture {
	for i := range fs {
		fs[i].dev = dev
	}
	return fs
}

// TestEdgeIPv6: the edge parses every IPv6 frame (parse_ipv6): valid
// IPv6 (UDP, TCP, ICMPv6, NDP, extension headers within the bound, first
// and later fragments) goes to the kernel (no IPv6 address is the edge's
// to forward yet); each hostile frame is dropped under its reason, from
// the Internet side and from the underlay, untagged and tagged.
func TestEdgeIPv6(t *testing.T) {
	b := newEdgeBed(t)
	for _, side := range []struct {
		dev, src, dst string
		tagged        bool
	}{
		{dptest.ExtDev, dptest.RtrMAC, dptest.ExtMAC, false},
		{dptest.ExtDev, dptest.RtrMAC, dptest.ExtMAC, true},
		{dptest.UlDev, dptest.FabMAC, dptest.UlMAC, false},
	} {
		inet := func(ip []byte) []byte { return eth6(side.src, side.dst, side.tagged, ip) }
		fs := append(v6Valid(inet), v6Hostile(inet)...)
		fs = append(fs, offLink(inet))
		name := side.dev
		if side.tagged {
			name += "/vlan"
		}
		t.Run(name, func(t *testing.T) { runFixtures(t, b.env, edgeProg{b.edge}, b.edge, onDev(side.dev, fs)) })
	}
}

// TestAgentIPv6: the host's underlay takes IPv6 as the edge does (the
// host's own: passed; hostile: dropped under its reason; the link-local
// check is the edge's); a guest's IPv6 goes through the same parser and
// is dropped, valid as drop_local (no IPv6 EIPs yet), hostile under its
// reason.
func TestAgentIPv6(t *testing.T) {
	env, a := newAgentBed(t)
	ul := func(ip []byte) []byte { return eth6(dptest.FabMAC, dptest.UlMAC, false, ip) }
	fs := append(v6Valid(ul), v6Hostile(ul)...)
	ll := offLink(ul)
	ll.name, ll.action, ll.stats = "a link-local source to a global address is the kernel's", xdpPass, map[string]uint64{"pass_ipv6": 1}
	fs = append(fs, ll)
	runFixtures(t, env, agentProg{a: a}, a, onDev(dptest.UlDev, fs))

	guest := func(ip []byte) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, ip) }
	gs := v6Valid(guest)
	for i := range gs {
		gs[i].action, gs[i].stats = xdpDrop, map[string]uint64{"drop_local": 1}
	}
	gs = append(gs, v6Hostile(guest)...)
	runFixtures(t, env, agentProg{a: a, guest: true}, a, onDev(dptest.GuestDev, gs))
}

// v6SeedFrames are the IPv6 fixtures' frames (valid first, then hostile,
// then the off-link one) from srcMAC to dstMAC: seeds for the scale
// fuzzers' mutator; with few, one of each kind only (the mutator reaches
// every class from any IPv6 seed, dpfuzz.TestMutateIPv6), for a fuzzer
// with few IPv4 seeds, so that IPv6 does not crowd IPv4 out of its inputs.
func v6SeedFrames(srcMAC, dstMAC string, few bool) [][]byte {
	eth := func(ip []byte) []byte { return eth6(srcMAC, dstMAC, false, ip) }
	kinds := map[string]bool{"udp": true, "ndp duplicate address detection from ::": true,
		"first fragment with the whole udp header": true, "seven extension headers (past the bound)": true,
		"routing header type 0": true, "tiny first fragment: 12 bytes of tcp": true,
		"spoofed link-local source to a global address": true}
	var out [][]byte
	for _, f := range append(append(v6Valid(eth), v6Hostile(eth)...), offLink(eth)) {
		if !few || kinds[f.name] {
			out = append(out, f.in)
		}
	}
	if few && len(out) != len(kinds) {
		panic("v6SeedFrames: a kind names no fixture (renamed?)")
	}
	return out
}

// v6Only: a counter only IPv6 frames move.
func v6Only(name string) bool { return name == "pass_ipv6" || strings.HasPrefix(name, "drop_ip6_") }

// checkV6Counters holds the counters to the oracle's IPv6 verdicts: a
// counter only IPv6 moves, exactly by the inputs whose verdict names it
// (a valid frame the program dropped, a hostile one it passed or counted
// under another reason, all show here), but for a CounterMaybe verdict,
// which may be dropped first by a route lookup the oracle does not model;
// a counter IPv4 moves too (drop_local, drop_bad_dst, drop_ttl of an IPv6
// EIP's paths), by at least them.
func checkV6Counters(vs []dpfuzz.Verdict, delta map[string]uint64) error {
	want, maybe := map[string]uint64{}, map[string]uint64{}
	for _, v := range vs {
		switch {
		case v.Counter == "":
		case v.CounterMaybe:
			maybe[v.Counter]++
			if v.CounterOr != "" {
				maybe[v.CounterOr]++
			}
		default:
			want[v.Counter]++
		}
	}
	for _, name := range StatNames() {
		if v6Only(name) && (delta[name] < want[name] || delta[name] > want[name]+maybe[name]) {
			return fmt.Errorf("counter %s moved by %d, the oracle's IPv6 verdicts name it %d times (and %d more maybe; all: %v)", name, delta[name], want[name], maybe[name], want)
		}
		if !v6Only(name) && delta[name] < want[name] {
			return fmt.Errorf("counter %s moved by %d, fewer than the %d IPv6 inputs the oracle says it counts (all: %v)", name, delta[name], want[name], want)
		}
	}
	return nil
}

package dpfuzz

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func frame6(ip []byte) []byte { return append(append(append([]byte(nil), macs...), 0x86, 0xdd), ip...) }

func opts6(nh uint8, units int) []byte {
	h := make([]byte, units*8)
	h[0], h[1], h[2], h[3] = nh, byte(units-1), 1, byte(units*8-4)
	return h
}

func cat6(bs ...[]byte) []byte {
	var o []byte
	for _, b := range bs {
		o = append(o, b...)
	}
	return o
}

// ah24 is an authentication header (RFC 4302) of 24 bytes (a 96-bit
// ICV), next header nh.
func ah24(nh uint8) []byte {
	h := make([]byte, 24)
	h[0], h[1] = nh, 4 // (4+2) 32-bit words
	h[7] = 1           // SPI 1
	return h
}

// ah12 is an authentication header without ICV: 12 bytes (length 1),
// which IPv6 refuses (not a multiple of 8).
func ah12(nh uint8) []byte {
	h := ah24(nh)[:12]
	h[1] = 1
	return h
}

// TestJudgeIPv6: the oracle's reading of IPv6 frames, each class with
// the counter it names, on the edge (the link-local check) and a host.
func TestJudgeIPv6(t *testing.T) {
	a := netip.MustParseAddr
	cl, dst := a("2001:db8:1::10"), a("2001:db8:2::1")
	udp8 := []byte{0x9c, 0x40, 0, 53, 0, 8, 0, 0}
	tcp20 := make([]byte, 20)
	tcp20[12] = 0x50
	icmp8 := []byte{135, 0, 0, 0, 0, 0, 0, 0}
	frag := func(nh uint8, off uint16, more bool) []byte {
		w := off << 3
		if more {
			w |= 1
		}
		return []byte{nh, 0, byte(w >> 8), byte(w), 0, 0, 0, 1}
	}
	// long: five destination options headers, the last before UDP.
	long := cat6(opts6(ProtoDstOpts, 1), opts6(ProtoDstOpts, 1), opts6(ProtoDstOpts, 1), opts6(ProtoDstOpts, 1), opts6(ProtoUDP, 1))
	badVer := IPv6Packet(cl, dst, ProtoUDP, udp8)
	badVer[0] = 0x40
	over := IPv6Packet(cl, dst, ProtoUDP, udp8)
	over[5] = 9
	for _, c := range []struct {
		name          string
		ip            []byte
		edge, host    string // counters
		forbidsPrefix string
	}{
		{"udp", IPv6Packet(cl, dst, ProtoUDP, udp8), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"six extension headers", IPv6Packet(cl, dst, ProtoHopOpts, cat6(opts6(ProtoDstOpts, 1), long, udp8)), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"seven", IPv6Packet(cl, dst, ProtoHopOpts, cat6(opts6(ProtoDstOpts, 1), opts6(ProtoDstOpts, 1), long, udp8)), "drop_ip6_ext_limit", "drop_ip6_ext_limit", "malformed"},
		{"upper layer past byte 255", IPv6Packet(cl, dst, ProtoDstOpts, cat6(opts6(ProtoUDP, 26), udp8)), "drop_ip6_ext_limit", "drop_ip6_ext_limit", "malformed"},
		{"upper layer at byte 254", IPv6Packet(cl, dst, ProtoDstOpts, cat6(opts6(ProtoUDP, 25), udp8)), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"hop-by-hop second", IPv6Packet(cl, dst, ProtoDstOpts, cat6(opts6(ProtoHopOpts, 1), opts6(ProtoUDP, 1), udp8)), "drop_ip6_ext_bad", "drop_ip6_ext_bad", "malformed"},
		{"truncated chain", IPv6Packet(cl, dst, ProtoDstOpts, opts6(ProtoUDP, 2)[:8]), "drop_ip6_ext_bad", "drop_ip6_ext_bad", "malformed"},
		{"rh0", IPv6Packet(cl, dst, ProtoRouting, cat6([]byte{ProtoUDP, 0, 0, 1, 0, 0, 0, 0}, udp8)), "drop_ip6_rh0", "drop_ip6_rh0", "malformed"},
		{"rh2", IPv6Packet(cl, dst, ProtoRouting, cat6([]byte{ProtoUDP, 0, 2, 1, 0, 0, 0, 0}, udp8)), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"tiny first fragment", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoTCP, 0, true), tcp20[:12])), "drop_ip6_tiny_frag", "drop_ip6_tiny_frag", "malformed"},
		{"atomic fragment, tcp cut", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoTCP, 0, false), tcp20[:12])), "drop_l4_trunc", "drop_l4_trunc", "malformed"},
		{"later fragment", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoTCP, 185, false), tcp20[:3])), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"two fragment headers", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoFragment, 0, false), frag(ProtoUDP, 0, true), udp8)), "drop_ip6_ext_bad", "drop_ip6_ext_bad", "malformed"},
		{"version 4", badVer, "drop_ip_bad", "drop_ip_bad", "malformed"},
		{"payload beyond the frame", over, "drop_ip_trunc", "drop_ip_trunc", "malformed"},
		{"source ::1", IPv6Packet(a("::1"), dst, ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"source ::, dad", IPv6Packet(a("::"), a("ff02::1:ff00:1"), ProtoICMPv6, icmp8), "pass_ipv6", "pass_ipv6", ""}, // a solicitation: answered by the ARP owner, or the kernel's
		{"source ::, udp", IPv6Packet(a("::"), a("ff02::1:ff00:1"), ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"source ipv4-mapped", IPv6Packet(a("::ffff:192.0.2.1"), dst, ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"source next to ipv4-mapped", IPv6Packet(a("::fffe:c000:201"), dst, ProtoUDP, udp8), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"source multicast", IPv6Packet(a("ff0e::1"), dst, ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"ah, tcp", IPv6Packet(cl, dst, ProtoAH, cat6(ah24(ProtoTCP), tcp20)), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"first fragment ending after ah (rfc 7112)", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoAH, 0, true), ah24(ProtoTCP), tcp20[:4])), "drop_ip6_tiny_frag", "drop_ip6_tiny_frag", "malformed"},
		{"first fragment ending in ah", IPv6Packet(cl, dst, ProtoFragment, cat6(frag(ProtoAH, 0, true), ah24(ProtoTCP)[:16])), "drop_ip6_tiny_frag", "drop_ip6_tiny_frag", "malformed"},
		{"ah of 12 bytes (not a multiple of 8)", IPv6Packet(cl, dst, ProtoAH, cat6(ah12(ProtoUDP), []byte{0, 0, 0, 0}, udp8)), "drop_ip6_ext_bad", "drop_ip6_ext_bad", "malformed"},
		{"unfragmented tcp cut short after ah", IPv6Packet(cl, dst, ProtoAH, cat6(ah24(ProtoTCP), tcp20[:8])), "drop_l4_trunc", "drop_l4_trunc", "malformed"},
		{"destination ::", IPv6Packet(cl, a("::"), ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination ::1", IPv6Packet(cl, a("::1"), ProtoTCP, tcp20), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination ::2", IPv6Packet(cl, a("::2"), ProtoUDP, udp8), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"destination ipv4-mapped", IPv6Packet(cl, a("::ffff:192.0.2.1"), ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination multicast scope 0", IPv6Packet(cl, a("ff00::1"), ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination multicast scope 0, flags set", IPv6Packet(cl, a("ff30::1"), ProtoUDP, udp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination interface-local multicast", IPv6Packet(a("fe80::1"), a("ff01::1"), ProtoICMPv6, icmp8), "drop_ip6_martian", "drop_ip6_martian", "martian"},
		{"destination link-local multicast", IPv6Packet(a("fe80::1"), a("ff12::1"), ProtoUDP, udp8), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"destination site-local multicast", IPv6Packet(cl, a("ff05::1:3"), ProtoUDP, udp8), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"link-local tcp off-link", IPv6Packet(a("febf::1"), dst, ProtoTCP, tcp20), "drop_ip6_off_link", "pass_ipv6", "spoofed: link-local"},
		{"next to link-local", IPv6Packet(a("fec0::1"), dst, ProtoTCP, tcp20), "pass_ipv6", "pass_ipv6", "not IPv4"},
		{"link-local icmpv6 to global (NUD)", IPv6Packet(a("fe80::1"), dst, ProtoICMPv6, icmp8), "pass_ipv6", "pass_ipv6", ""}, // a solicitation: answered by the ARP owner, or the kernel's
		{"link-local to link-local", IPv6Packet(a("fe80::1"), a("fe80::2"), ProtoTCP, tcp20), "pass_ipv6", "pass_ipv6", "not IPv4"},
	} {
		b := frame6(c.ip)
		r := testRegion()
		if v := r.JudgeEdge(Internet, b); v.Counter != c.edge || !strings.HasPrefix(v.Forbid, c.forbidsPrefix) {
			t.Errorf("%s: edge %q (%s), want %s", c.name, v.Counter, v.Forbid, c.edge)
		}
		h := &Host{}
		if v := h.JudgeAgent(Underlay, b); v.Counter != c.host {
			t.Errorf("%s: host %q (%s), want %s", c.name, v.Counter, v.Forbid, c.host)
		}
		want := c.host
		if want == "pass_ipv6" {
			want = "drop_local"
		}
		if v := h.JudgeAgent(Guest, b); v.Counter != want || strings.HasPrefix(v.Forbid, "not IPv4") {
			t.Errorf("%s: guest %q (%s), want %s, not for the kernel", c.name, v.Counter, v.Forbid, want)
		}
	}
}

// TestMutateIPv6: the mutator's IPv6 frames reach every class the oracle
// tells apart, valid ones included.
func TestMutateIPv6(t *testing.T) {
	m := &Mutator{R: rand.New(rand.NewPCG(1, 2)), MaxFrame: 1600}
	seed := frame6(IPv6Packet(netip.MustParseAddr("2001:db8:1::10"), netip.MustParseAddr("2001:db8:2::1"), ProtoUDP,
		[]byte{0x9c, 0x40, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4}))
	seen := map[string]int{}
	r := testRegion()
	for range 20000 {
		seen[r.JudgeEdge(Internet, m.Mutate(seed, nil)).Counter]++
	}
	for _, c := range []string{"pass_ipv6", "drop_ip_trunc", "drop_ip_bad", "drop_l4_trunc", "drop_ip6_ext_limit", "drop_ip6_ext_bad",
		"drop_ip6_rh0", "drop_ip6_tiny_frag", "drop_ip6_martian", "drop_ip6_off_link"} {
		if seen[c] == 0 {
			t.Errorf("no mutation reached %s (%v)", c, seen)
		}
	}
	t.Logf("%v", seen)
}

// TestJudgeIPv6GuestNDP: neighbour discovery from a guest (ICMPv6 133,
// 135, 136, unfragmented, hop limit 255; not a router advertisement) is the host kernel's (pass_ipv6, "not
// IPv4"); anything else a guest without an IPv6 EIP sends is drop_local.
func TestJudgeIPv6GuestNDP(t *testing.T) {
	a := netip.MustParseAddr
	icmp := func(typ uint8) []byte { return []byte{typ, 0, 0, 0, 0, 0, 0, 0} }
	hop := func(b []byte, h uint8) []byte { b[7] = h; return b }
	frag := []byte{ProtoICMPv6, 0, 0, 1, 0, 0, 0, 1} // offset 0, more fragments
	for _, c := range []struct {
		name string
		ip   []byte
		want string
	}{
		{"neighbour solicitation", hop(IPv6Packet(a("fe80::5"), a("ff02::1:ff00:1"), ProtoICMPv6, icmp(135)), 255), "pass_ipv6"},
		{"neighbour advertisement", hop(IPv6Packet(a("2001:db8:f0::5"), a("fe80::1"), ProtoICMPv6, icmp(136)), 255), "pass_ipv6"},
		{"router solicitation", hop(IPv6Packet(a("fe80::5"), a("ff02::2"), ProtoICMPv6, icmp(133)), 255), "pass_ipv6"},
		{"router advertisement (a guest is no router)", hop(IPv6Packet(a("fe80::5"), a("ff02::1"), ProtoICMPv6, icmp(134)), 255), "drop_local"},
		{"dad from ::", hop(IPv6Packet(a("::"), a("ff02::1:ff00:5"), ProtoICMPv6, icmp(135)), 255), "pass_ipv6"},
		{"solicitation, hop limit 254", hop(IPv6Packet(a("fe80::5"), a("ff02::1:ff00:1"), ProtoICMPv6, icmp(135)), 254), "drop_local"},
		{"redirect", hop(IPv6Packet(a("fe80::5"), a("fe80::1"), ProtoICMPv6, icmp(137)), 255), "drop_local"},
		{"echo request", hop(IPv6Packet(a("fe80::5"), a("fe80::1"), ProtoICMPv6, icmp(128)), 255), "drop_local"},
		{"fragmented solicitation", hop(IPv6Packet(a("fe80::5"), a("ff02::1:ff00:1"), ProtoFragment, cat6(frag, icmp(135))), 255), "drop_local"},
	} {
		v := (&Host{}).JudgeAgent(Guest, frame6(c.ip))
		if v.Counter != c.want || strings.HasPrefix(v.Forbid, "not IPv4") != (c.want == "pass_ipv6") {
			t.Errorf("%s: guest %q (%s), want %s", c.name, v.Counter, v.Forbid, c.want)
		}
	}
}

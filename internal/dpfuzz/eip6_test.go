package dpfuzz

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

var (
	eip6a    = netip.MustParseAddr("2001:db8:e1::7")
	client6a = netip.MustParseAddr("2001:db8:c::10")
	guest6a  = netip.MustParseAddr("2001:db8:f0::5")
	icmpSrc6 = netip.MustParseAddr("2001:db8:ed::1")
	edgeB    = netip.MustParseAddr("198.18.0.2")
)

func testRegion6() *Region {
	r := testRegion()
	r.EIPs[eip6a] = Binding{Host: host1, VSID: 5001}
	r.Own = append(r.Own, netip.MustParsePrefix("2001:db8:e1::/48"))
	r.UnderlayNets = append(r.UnderlayNets, netip.MustParsePrefix("2001:db8:ff::/48"))
	r.ICMPSource6 = icmpSrc6
	return r
}

// udp6 is a UDP datagram (12 bytes, checksum right) in IPv6, hop limit hop.
func udp6(src, dst netip.Addr, hop uint8) []byte {
	l4 := []byte{0x9c, 0x40, 0, 53, 0, 12, 0, 0, 'f', 'u', 'z', 'z'}
	p := IPv6Packet(src, dst, ProtoUDP, l4)
	p[7] = hop
	q, _ := ParseIPv6(p, 0)
	s, _ := pseudoSum6(q)
	binary.BigEndian.PutUint16(p[46:], ^s)
	return p
}

// encap6 is NVGRE from the region's endpoint to host carrying the IPv6
// packet ip.
func encap6(src, host netip.Addr, vsid uint32, tos uint8, ip []byte) []byte {
	g := make([]byte, 8)
	binary.BigEndian.PutUint32(g, 0x20006558)
	binary.BigEndian.PutUint32(g[4:], vsid<<8|0x5a)
	eth := append([]byte{2, 0, 0, 0, 0, 7, 2, 0xcc, 0, 0, 0, 2}, 0x86, 0xdd)
	o := IPv4Packet(src, host, ProtoGRE, 64, 0x4000, append(append(g, eth...), ip...))
	o[1] = tos
	o[10], o[11] = 0, 0
	binary.BigEndian.PutUint16(o[10:], Checksum(o[:20]))
	return frame(o)
}

// The oracle's IPv6 EIP verdicts at the edge: Internet -> IPv6 EIP
// (firewall, anti-spoofing classes and counters, hop limit, ICMPv6
// exceptions), and an IPv6 EIP's guest's packets from its host.
func TestJudgeEdgeIPv6EIP(t *testing.T) {
	r := testRegion6()
	r.Policy = NewFirewall([]FWRule{
		{Name: "deny-net", Deny: true, Sources: []netip.Prefix{netip.MustParsePrefix("2001:db8:bad::/48")}, PortHi: 0xffff},
		{Name: "deny-icmp4", Deny: true, Sources: []netip.Prefix{netip.MustParsePrefix("::/0")}, Proto: ProtoICMP, PortHi: 0xffff, Dests: []netip.Addr{eip1}},
	})
	a := netip.MustParseAddr
	icmp := func(src netip.Addr, typ uint8, hop uint8) []byte {
		p := IPv6Packet(src, eip6a, ProtoICMPv6, []byte{typ, 0, 0, 0, 0, 0, 0, 0})
		p[7] = hop
		return p
	}
	for _, c := range []struct {
		name, side string
		in         []byte
		forbid     string // prefix; "" may be forwarded
		counter    string
		noFwd      bool
		noICMP     bool
	}{
		{"valid", "inet", udp6(client6a, eip6a, 64), "", "", false, false},
		{"valid from the underlay", "ul", udp6(client6a, eip6a, 64), "", "", false, false},
		{"to no EIP: the kernel's", "inet", udp6(client6a, a("2001:db8:e1::99"), 64), "not IPv4", "pass_ipv6", false, false},
		{"denied", "inet", udp6(a("2001:db8:bad::1"), eip6a, 64), "denied by the firewall: rule deny-net", "", false, false},
		{"denied rule is the Internet side's", "ul", udp6(a("2001:db8:bad::1"), eip6a, 64), "", "", false, false},
		{"land", "inet", udp6(eip6a, eip6a, 64), "land attack", "drop_spoof_own", false, false},
		{"own prefix", "inet", udp6(a("2001:db8:e1::55"), eip6a, 64), "spoofed: the region's own", "drop_spoof_own", false, false},
		{"underlay prefix", "inet", udp6(a("2001:db8:ff::1"), eip6a, 64), "spoofed: underlay", "drop_spoof_underlay", false, false},
		{"ULA", "inet", udp6(a("fd00::1"), eip6a, 64), "spoofed: non-routable", "drop_spoof_bogon", false, false},
		{"ULA from the underlay", "ul", udp6(a("fd00::1"), eip6a, 64), "", "", false, false},
		{"link-local udp: off-link first", "inet", udp6(a("fe80::1"), eip6a, 64), "spoofed: link-local", "drop_ip6_off_link", false, false},
		{"link-local icmpv6", "inet", icmp(a("fe80::1"), 128, 64), "spoofed: link-local", "drop_ip6_off_link", false, false},
		{"link-local icmpv6 from the underlay", "ul", icmp(a("fe80::1"), 128, 64), "link-local source", "drop_ip6_off_link", false, false},
		{"icmpv6 not an ICMP rule's of the other family", "inet", icmp(client6a, 128, 64), "", "", false, false},
		{"hop limit 1", "inet", udp6(client6a, eip6a, 1), "", "", true, false},
		{"hop limit 0", "inet", udp6(client6a, eip6a, 0), "", "", true, false},
		{"hop limit 1, an ICMPv6 error", "inet", icmp(client6a, 1, 1), "", "", true, true},
		{"hop limit 1, a redirect", "inet", icmp(client6a, 137, 1), "", "", true, true},
		{"hop limit 1, echo", "inet", icmp(client6a, 128, 1), "", "", true, false},
	} {
		side := Internet
		if c.side == "ul" {
			side = Underlay
		}
		v := r.JudgeEdge(side, frame6(c.in))
		if !strings.HasPrefix(v.Forbid, c.forbid) || (c.forbid == "") != (v.Forbid == "") || v.Counter != c.counter ||
			(v.NoForward != "") != c.noFwd || (v.NoICMP != "") != c.noICMP {
			t.Errorf("%s: %q counter %q no-forward %q no-icmp %q", c.name, v.Forbid, v.Counter, v.NoForward, v.NoICMP)
		}
		if c.forbid == "" && (v.Out6 == nil || !v.Out6.Encap || v.Out6.Host != host1 || v.Out6.VSID != 5001) {
			t.Errorf("%s: out %+v, want NVGRE to %v VSID 5001", c.name, v.Out6, host1)
		}
	}
	r.ICMPSource6 = netip.Addr{}
	if v := r.JudgeEdge(Internet, frame6(udp6(client6a, eip6a, 1))); v.NoICMP == "" {
		t.Error("an ICMPv6 error allowed without an ICMPv6 source")
	}

	// The return path: an IPv6 EIP's guest's packet from its host.
	for _, c := range []struct {
		name   string
		host   netip.Addr
		vsid   uint32
		in     []byte
		forbid string
	}{
		{"valid", host1, 5001, udp6(eip6a, client6a, 64), ""},
		{"wrong host", edgeUl, 5001, udp6(eip6a, client6a, 64), "spoofed: inner source"},
		{"wrong VSID", host1, 6000, udp6(eip6a, client6a, 64), "spoofed: inner source"},
		{"no EIP", host1, 5001, udp6(a("2001:db8:e1::8"), client6a, 64), "spoofed: inner source"},
		{"ULA destination", host1, 5001, udp6(eip6a, a("fd00::1"), 64), "inner packet: destination"},
		{"link-local destination", host1, 5001, udp6(eip6a, a("fe80::1"), 64), "inner packet: destination"},
		{"multicast destination", host1, 5001, udp6(eip6a, a("ff0e::1"), 64), "inner packet: destination"},
		{"hop limit 1", host1, 5001, udp6(eip6a, client6a, 1), "inner hop limit"},
		{"martian source", host1, 5001, udp6(a("::1"), client6a, 64), "inner packet: martian"},
	} {
		g := make([]byte, 8)
		binary.BigEndian.PutUint32(g, 0x20006558)
		binary.BigEndian.PutUint32(g[4:], c.vsid<<8)
		eth := append([]byte{2, 0, 0, 0, 0, 0xfe, 2, 0xcc, 0, 0, 0, 2}, 0x86, 0xdd)
		in := frame(IPv4Packet(c.host, edgeUl, ProtoGRE, 64, 0x4000, append(append(g, eth...), c.in...)))
		v := r.JudgeEdge(Underlay, in)
		if !strings.HasPrefix(v.Forbid, c.forbid) || (c.forbid == "") != (v.Forbid == "") {
			t.Errorf("return %s: %q", c.name, v.Forbid)
		}
		if c.forbid == "" {
			out := append([]byte(nil), c.in...)
			out[7]--
			if k, err := r.CheckOutput(v, RouterHop, frame6(out)); err != nil || k != OutForward {
				t.Errorf("return %s: the decapsulation refused: %s %v", c.name, k, err)
			}
			if err := r.CheckPassed6(v, frame6(c.in)); err != nil {
				t.Errorf("return %s: the inner frame for the kernel refused: %v", c.name, err)
			}
			if _, err := r.CheckOutput(v, RouterHop, frame6(c.in)); err == nil {
				t.Errorf("return %s: forwarded with the hop limit kept accepted", c.name)
			}
		}
	}
}

// CheckOutput for IPv6 EIPs: the encapsulation to the host, byte for
// byte but for the hop limit; the ICMPv6 errors RFC 4443 allows.
func TestCheckOutputIPv6EIP(t *testing.T) {
	r := testRegion6()
	ip := udp6(client6a, eip6a, 64)
	ip[0], ip[1] = 0x6b, 0x80 // traffic class 0xb8
	v := r.JudgeEdge(Internet, frame6(ip))
	fwd := append([]byte(nil), ip...)
	fwd[7]--
	good := encap6(edgeUl, host1, 5001, 0xb8, fwd)
	if k, err := r.CheckOutput(v, RouterHop, good); err != nil || k != OutEncap {
		t.Fatalf("good encapsulation: %s %v", k, err)
	}
	for name, b := range map[string][]byte{
		"to another host":        encap6(edgeUl, edgeB, 5001, 0xb8, fwd),
		"from another address":   encap6(edgeB, host1, 5001, 0xb8, fwd),
		"another VSID":           encap6(edgeUl, host1, 6000, 0xb8, fwd),
		"TOS not the class":      encap6(edgeUl, host1, 5001, 0, fwd),
		"hop limit kept":         encap6(edgeUl, host1, 5001, 0xb8, ip),
		"payload changed":        encap6(edgeUl, host1, 5001, 0xb8, append(append([]byte(nil), fwd[:len(fwd)-1]...), 'Z')),
		"bare":                   frame6(fwd),
		"padding carried inside": encap6(edgeUl, host1, 5001, 0xb8, append(append([]byte(nil), fwd...), 0, 0)),
	} {
		if _, err := r.CheckOutput(v, RouterHop, b); err == nil {
			t.Errorf("encapsulation %s accepted", name)
		}
	}
	// A forbidden input: nothing.
	if _, err := r.CheckOutput(r.JudgeEdge(Internet, frame6(udp6(netip.MustParseAddr("fd00::1"), eip6a, 64))), RouterHop, good); err == nil {
		t.Error("a transmission for a ULA source accepted")
	}

	// ICMPv6 time exceeded about a hop limit of 1.
	exp := udp6(client6a, eip6a, 1)
	ve := r.JudgeEdge(Internet, frame6(exp))
	icmp6 := func(src netip.Addr, typ uint8, mtu uint32, quote []byte) []byte {
		m := append([]byte{typ, 0, 0, 0, 0, 0, 0, 0}, quote...)
		binary.BigEndian.PutUint32(m[4:], mtu)
		p := IPv6Packet(src, client6a, ProtoICMPv6, m)
		q, _ := ParseIPv6(p, 0)
		s, _ := pseudoSum6(q)
		binary.BigEndian.PutUint16(p[42:], ^s)
		return frame6(p)
	}
	if k, err := r.CheckOutput(ve, RouterHop, icmp6(icmpSrc6, 3, 0, exp)); err != nil || k != OutICMP {
		t.Fatalf("time exceeded: %s %v", k, err)
	}
	for name, b := range map[string][]byte{
		"from the EIP":             icmp6(eip6a, 3, 0, exp),
		"packet too big":           icmp6(icmpSrc6, 2, 1400, exp),
		"quote cut without reason": icmp6(icmpSrc6, 3, 0, exp[:48]),
		"forwarded":                encap6(edgeUl, host1, 5001, 0, exp),
	} {
		if _, err := r.CheckOutput(ve, RouterHop, b); err == nil {
			t.Errorf("answer to hop limit 1 %s accepted", name)
		}
	}
	bad := icmp6(icmpSrc6, 3, 0, exp)
	bad[len(bad)-1] ^= 1
	if _, err := r.CheckOutput(ve, RouterHop, bad); err == nil {
		t.Error("time exceeded with a wrong checksum accepted")
	}
	if _, err := r.CheckOutput(v, RouterHop, icmp6(icmpSrc6, 2, 1400, ip)); err != nil {
		t.Errorf("packet too big: %v", err)
	}
	if _, err := r.CheckOutput(v, RouterHop, icmp6(icmpSrc6, 2, 1200, ip)); err == nil {
		t.Error("packet too big below 1280 accepted")
	}
}

// The agent's IPv6 EIP translation both ways: the verdicts, the
// translated packet (addresses, checksum's sum kept, hop limit kept).
func TestJudgeAgentIPv6EIP(t *testing.T) {
	a := netip.MustParseAddr
	h := &Host{Underlay: host1, Edges: map[netip.Addr]bool{edgeUl: true, edgeB: true},
		EIPs: map[netip.Addr]Binding{eip6a: {Host: guest6a, VSID: 5001}, eip1: {Host: netip.MustParseAddr("10.0.0.5"), VSID: 5001}}}
	r := &Region{NVGREEndpoint: host1}
	tun := func(src netip.Addr, vsid uint32, ip []byte) []byte {
		g := make([]byte, 8)
		binary.BigEndian.PutUint32(g, 0x20006558)
		binary.BigEndian.PutUint32(g[4:], vsid<<8)
		eth := append([]byte{2, 0, 0, 0, 0, 7, 2, 0xcc, 0, 0, 0, 2}, 0x86, 0xdd)
		return frame(IPv4Packet(src, host1, ProtoGRE, 64, 0x4000, append(append(g, eth...), ip...)))
	}
	csum0 := udp6(client6a, eip6a, 64)
	csum0[46], csum0[47] = 0, 0
	for _, c := range []struct {
		name    string
		in      []byte
		forbid  string
		counter string
	}{
		{"valid", tun(edgeUl, 5001, udp6(client6a, eip6a, 64)), "", ""},
		{"hop limit 1 kept", tun(edgeUl, 5001, udp6(client6a, eip6a, 1)), "", ""},
		{"hop limit 0", tun(edgeUl, 5001, udp6(client6a, eip6a, 0)), "inner packet: hop limit 0", ""},
		{"wrong VSID", tun(edgeUl, 6000, udp6(client6a, eip6a, 64)), "unknown destination", ""},
		{"an IPv4 EIP's address as IPv6", tun(edgeUl, 5001, udp6(client6a, a("::ffff:198.51.100.7"), 64)), "unknown destination", ""},
		{"no edge", tun(netip.MustParseAddr("198.18.0.9"), 5001, udp6(client6a, eip6a, 64)), "spoofed: NVGRE from", ""},
		{"UDP checksum 0", tun(edgeUl, 5001, csum0), "UDP checksum 0", "drop_ip6_udp_csum0"},
	} {
		v := h.JudgeAgent(Underlay, c.in)
		if !strings.HasPrefix(v.Forbid, c.forbid) || (c.forbid == "") != (v.Forbid == "") || v.Counter != c.counter {
			t.Errorf("underlay %s: %q %q", c.name, v.Forbid, v.Counter)
		}
	}
	in := udp6(client6a, eip6a, 64)
	v := h.JudgeAgent(Underlay, tun(edgeUl, 5001, in))
	out := append([]byte(nil), in...)
	copy(out[24:40], guest6a.AsSlice())
	q, _ := ParseIPv6(out, 0)
	old := binary.BigEndian.Uint16(out[46:])
	binary.BigEndian.PutUint16(out[46:], 0)
	s, _ := pseudoSum6(q)
	binary.BigEndian.PutUint16(out[46:], ^s)
	if k, err := r.CheckOutput(v, HostHop, frame6(out)); err != nil || k != OutForward {
		t.Fatalf("translated to the guest: %s %v", k, err)
	}
	stale := append([]byte(nil), out...)
	binary.BigEndian.PutUint16(stale[46:], old)
	if _, err := r.CheckOutput(v, HostHop, frame6(stale)); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a checksum not updated for the translation accepted: %v", err)
	}
	untranslated := append([]byte(nil), in...)
	if _, err := r.CheckOutput(v, HostHop, frame6(untranslated)); err == nil {
		t.Error("delivered untranslated accepted")
	}

	// Guest -> underlay.
	for _, c := range []struct {
		name    string
		ip      []byte
		forbid  string
		counter string
	}{
		{"valid", udp6(guest6a, client6a, 64), "", ""},
		{"hop limit 1 kept", udp6(guest6a, client6a, 1), "", ""},
		{"hop limit 0", udp6(guest6a, client6a, 0), "guest's packet with hop limit 0", "drop_ttl"},
		{"no EIP", udp6(a("2001:db8:f0::99"), client6a, 64), "IPv6 from a guest without", "drop_local"},
		{"link-local destination", udp6(guest6a, a("fe80::1"), 64), "guest's destination", "drop_bad_dst"},
		{"multicast destination", udp6(guest6a, a("ff0e::1"), 64), "guest's destination", "drop_bad_dst"},
		{"ULA destination may go", udp6(guest6a, a("fd00::1"), 64), "", ""},
	} {
		v := h.JudgeAgent(Guest, frame6(c.ip))
		if !strings.HasPrefix(v.Forbid, c.forbid) || (c.forbid == "") != (v.Forbid == "") || v.Counter != c.counter {
			t.Errorf("guest %s: %q %q", c.name, v.Forbid, v.Counter)
		}
		if c.forbid == "" && (v.Out6 == nil || !v.Out6.Encap || v.Out6.Src != eip6a || v.Out6.VSID != 5001) {
			t.Errorf("guest %s: out %+v", c.name, v.Out6)
		}
	}
}

// The mutator reaches every verdict of the IPv6 EIPs' paths from one
// valid packet to an IPv6 EIP (Addrs6 aimed at the EIP and around it,
// wrapping in NVGRE from the host, the inner packet mutated): encapsulated,
// answered (hop limit), each anti-spoofing class, the return path
// forwarded and refused.
func TestMutateIPv6EIP(t *testing.T) {
	a := netip.MustParseAddr
	m := &Mutator{R: rand.New(rand.NewPCG(3, 4)), MaxFrame: 1600, Endpoint: edgeUl, TunnelSrcs: []netip.Addr{host1},
		Keys: []uint32{5001 << 8}, Addrs6: []netip.Addr{eip6a, client6a, a("2001:db8:e1::55"), a("2001:db8:ff::1"), a("fd00::1"), a("fe80::1")}}
	r := testRegion6()
	seeds := [][]byte{frame6(udp6(client6a, eip6a, 64)), frame6(udp6(eip6a, client6a, 64))}
	seen := map[string]int{}
	for i := range 40000 {
		in := m.Mutate(seeds[i%2], seeds)
		side := Internet
		if i%3 == 0 {
			side = Underlay
		}
		v := r.JudgeEdge(side, in)
		switch {
		case v.Out6 != nil && v.Out6.Encap && v.NoForward == "":
			seen["encap"]++
		case v.Out6 != nil && v.Out6.Encap:
			seen["hop limit"]++
		case v.Out6 != nil:
			seen["decap"]++
		case v.Tunnel != nil && v.Forbid != "":
			seen["return refused: "+reasonOf(v.Forbid)]++
		case v.Counter != "":
			seen[v.Counter]++
		}
	}
	for _, c := range []string{"encap", "hop limit", "decap", "drop_spoof_own", "drop_spoof_underlay", "drop_spoof_bogon", "drop_ip6_off_link",
		"return refused: spoofed", "return refused: inner packet", "return refused: malformed inner packet", "return refused: inner hop limit expired"} {
		if seen[c] == 0 {
			t.Errorf("no mutation reached %q (%v)", c, seen)
		}
	}
	t.Logf("%v", seen)
}

func reasonOf(r string) string {
	if i := strings.IndexByte(r, ':'); i > 0 {
		return r[:i]
	}
	return r
}

package dpfuzz

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

var (
	vip6e = netip.MustParseAddr("2001:db8:e1::81")
	vip6n = netip.MustParseAddr("2001:db8:e1::86")
	be6   = netip.MustParseAddr("2001:db8:be::1")
)

func testRegionVIP6() *Region {
	r := testRegion6()
	r.VIPs[vip6e], r.VIPs[vip6n] = true, true
	r.VIP6s = map[netip.Addr]VIP6{
		vip6e: {Encap: []Binding{{Host: host1, VSID: 5001}}},
		vip6n: {NAT: []NATBackend6{{Addr: be6, Port: 8080}}},
	}
	return r
}

// dnat6 is ip (udp6's) as DNAT66 to dst port must leave: the destination
// and port rewritten, the checksum recomputed, the hop limit decremented.
func dnat6(ip []byte, dst netip.Addr, port uint16) []byte {
	o := append([]byte(nil), ip...)
	d := dst.As16()
	copy(o[24:40], d[:])
	binary.BigEndian.PutUint16(o[42:], port)
	o[46], o[47] = 0, 0
	q, _ := ParseIPv6(o, 0)
	s, _ := pseudoSum6(q)
	binary.BigEndian.PutUint16(o[46:], ^s)
	o[7]--
	return frame6(o)
}

// The oracle's IPv6 VIP verdicts and outputs: the EIP's discipline
// (anti-spoofing, link-local, hop limit), then DNAT66 held to the nat
// backend and its port, NVGRE to the encap backend's host and VSID only,
// and a nat backend's reply from the VIP.
func TestJudgeEdgeIPv6VIP(t *testing.T) {
	r := testRegionVIP6()
	a := netip.MustParseAddr
	for _, c := range []struct {
		name   string
		side   Side
		in     []byte
		forbid string
		noFwd  bool
	}{
		{"valid", Internet, udp6(client6a, vip6n, 64), "", false},
		{"spoofed own", Internet, udp6(a("2001:db8:e1::5"), vip6n, 64), "spoofed: the region's own", false},
		{"unique-local", Internet, udp6(a("fd00::1"), vip6e, 64), "spoofed: non-routable", false},
		{"link-local UDP from the underlay", Underlay, udp6(a("fe80::1"), vip6e, 64), "spoofed: link-local source", false},
		{"link-local ICMPv6 from the underlay", Underlay, IPv6Packet(a("fe80::1"), vip6e, ProtoICMPv6, []byte{128, 0, 0, 0, 0, 0, 0, 0}), "link-local source fe80::1 to an IPv6 VIP", false},
		{"hop limit 1", Internet, udp6(client6a, vip6e, 1), "", true},
	} {
		v := r.JudgeEdge(c.side, frame6(c.in))
		if !strings.HasPrefix(v.Forbid, c.forbid) || (c.forbid == "" && v.Forbid != "") || (v.NoForward != "") != c.noFwd {
			t.Errorf("%s: %+v", c.name, v)
		}
		if c.forbid == "" && (v.Out6 == nil || v.Out6.VIP == nil) {
			t.Errorf("%s: no VIP output allowed: %+v", c.name, v)
		}
	}

	in := udp6(client6a, vip6n, 64)
	v := r.JudgeEdge(Internet, frame6(in))
	if _, err := r.CheckOutput(v, RouterHop, dnat6(in, be6, 8080)); err != nil {
		t.Errorf("DNAT66 to the backend: %v", err)
	}
	for name, out := range map[string][]byte{
		"wrong port":               dnat6(in, be6, 8081),
		"wrong backend":            dnat6(in, a("2001:db8:be::2"), 8080),
		"checksum not updated":     func() []byte { o := dnat6(in, be6, 8080); o[14+46] ^= 1; return o }(),
		"encapsulated for nat VIP": encap6(edgeUl, host1, 5001, 0, in),
	} {
		if _, err := r.CheckOutput(v, RouterHop, out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ine := udp6(client6a, vip6e, 64)
	ve := r.JudgeEdge(Internet, frame6(ine))
	oe := append([]byte(nil), ine...)
	oe[7]--
	if _, err := r.CheckOutput(ve, RouterHop, encap6(edgeUl, host1, 5001, 0, oe)); err != nil {
		t.Errorf("NVGRE to the encap backend: %v", err)
	}
	if _, err := r.CheckOutput(ve, RouterHop, encap6(edgeUl, edgeB, 5001, 0, oe)); err == nil {
		t.Error("NVGRE to a host without a backend of the VIP: accepted")
	}
	if _, err := r.CheckOutput(ve, RouterHop, encap6(edgeUl, host1, 5002, 0, oe)); err == nil {
		t.Error("NVGRE in another VSID: accepted")
	}

	// A nat backend's reply: from the VIP (source port translated), or
	// nothing from the Internet side.
	rep := udp6(be6, client6a, 64)
	vr := r.JudgeEdge(Underlay, frame6(rep))
	if vr.Out6 == nil || !vr.Out6.Reply || vr.Counter != "pass_ipv6" || !vr.CounterMaybe {
		t.Fatalf("reply: %+v", vr)
	}
	snat := func(src netip.Addr) []byte {
		o := append([]byte(nil), rep...)
		s := src.As16()
		copy(o[8:24], s[:])
		binary.BigEndian.PutUint16(o[40:], 80)
		o[46], o[47] = 0, 0
		q, _ := ParseIPv6(o, 0)
		sum, _ := pseudoSum6(q)
		binary.BigEndian.PutUint16(o[46:], ^sum)
		o[7]--
		return frame6(o)
	}
	if _, err := r.CheckOutput(vr, RouterHop, snat(vip6n)); err != nil {
		t.Errorf("SNAT66 from the VIP: %v", err)
	}
	if _, err := r.CheckOutput(vr, RouterHop, snat(vip6e)); err == nil {
		t.Error("SNAT66 from a VIP without that backend: accepted")
	}
	if vi := r.JudgeEdge(Internet, frame6(rep)); vi.Forbid == "" {
		t.Errorf("a nat backend's address from the Internet side: %+v", vi)
	}
}

// NVGRE over IPv6 to the edge's underlay6 is from no host the oracle
// knows, from either side: never transmitted, drop_spoof; GRE over IPv6
// to another address is the kernel's.
func TestJudgeEdgeUl6Unknown(t *testing.T) {
	r := testRegion6()
	ul6 := netip.MustParseAddr("2001:db8:ff::1")
	gre := []byte{0x20, 0, 0x65, 0x58, 0, 0x13, 0x89, 0x21}
	pkt := func(dst netip.Addr) []byte {
		return frame6(IPv6Packet(netip.MustParseAddr("2001:db8:ff:1::9"), dst, ProtoGRE, append(gre, udp6(eip6a, client6a, 64)...)))
	}
	if v := r.JudgeEdge(Underlay, pkt(ul6)); v.Counter != "pass_ipv6" {
		t.Errorf("no underlay6 configured: %+v", v)
	}
	r.NVGREEndpoint6 = ul6
	for _, side := range []Side{Underlay, Internet} {
		if v := r.JudgeEdge(side, pkt(ul6)); !strings.HasPrefix(v.Forbid, "NVGRE over IPv6 to the edge from no host") || v.Counter != "drop_spoof" {
			t.Errorf("%v side: %+v", side, v)
		}
	}
	if v := r.JudgeEdge(Underlay, pkt(netip.MustParseAddr("2001:db8:ff::2"))); v.Counter != "pass_ipv6" {
		t.Errorf("GRE over IPv6 to another address: %+v", v)
	}
}

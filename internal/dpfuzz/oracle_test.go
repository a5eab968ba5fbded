package dpfuzz

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

var (
	edgeUl  = netip.MustParseAddr("198.18.0.1")
	icmpSrc = netip.MustParseAddr("198.18.100.1")
	host1   = netip.MustParseAddr("198.18.21.1")
	eip1    = netip.MustParseAddr("198.51.100.7")
	vip1    = netip.MustParseAddr("198.51.100.20")
	client1 = netip.MustParseAddr("203.0.113.10")
)

func testRegion() *Region {
	return &Region{
		NVGREEndpoint: edgeUl, ICMPSource: icmpSrc,
		EIPs:         map[netip.Addr]Binding{eip1: {Host: host1, VSID: 5001}},
		VIPs:         map[netip.Addr]bool{vip1: true},
		Own:          []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		UnderlayNets: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("198.18.21.0/24")},
	}
}

var macs = []byte{2, 0xaa, 0, 0, 0, 1, 2, 0xaa, 0, 0, 0, 2}

func frame(ip []byte) []byte { return append(append(append([]byte(nil), macs...), 8, 0), ip...) }

func udp(src, dst netip.Addr, ttl uint8, sport, dport uint16) []byte {
	l4 := make([]byte, 8+4)
	binary.BigEndian.PutUint16(l4, sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	return IPv4Packet(src, dst, ProtoUDP, ttl, 0, l4)
}

func nvgreFrame(outerSrc netip.Addr, vsid uint32, inner []byte) []byte {
	g := make([]byte, 8)
	binary.BigEndian.PutUint32(g, 0x20006558)
	binary.BigEndian.PutUint32(g[4:], vsid<<8|0x21)
	eth := append([]byte{2, 0, 0, 0, 0, 0xfe, 2, 0xcc, 0, 0, 0, 2}, 8, 0)
	return frame(IPv4Packet(outerSrc, edgeUl, ProtoGRE, 64, 0x4000, append(append(g, eth...), inner...)))
}

// The oracle's verdicts: each rule of docs/dataplane.md's ingress
// anti-spoofing, malformed headers, NVGRE from the wrong side or host.
func TestJudgeEdge(t *testing.T) {
	r := testRegion()
	good := frame(udp(client1, eip1, 64, 1000, 53))
	badCsum := append([]byte(nil), good...)
	badCsum[14+10] ^= 1
	long := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(long[14+2:], 200)
	for _, c := range []struct {
		name string
		side Side
		in   []byte
		want string // prefix of Forbid ("" allowed)
		noFw bool
	}{
		{"a client to an EIP", Internet, good, "", false},
		{"land attack", Internet, frame(udp(eip1, eip1, 64, 1, 2)), "land attack", false},
		{"own prefix", Internet, frame(udp(netip.MustParseAddr("198.51.100.99"), vip1, 64, 1, 2)), "spoofed: the region's own", false},
		{"underlay", Internet, frame(udp(host1, eip1, 64, 1, 2)), "spoofed: underlay", false},
		{"bogon", Internet, frame(udp(netip.MustParseAddr("10.1.2.3"), eip1, 64, 1, 2)), "spoofed: non-routable", false},
		{"bogon to no EIP goes to the kernel", Internet, frame(udp(netip.MustParseAddr("10.1.2.3"), client1, 64, 1, 2)), "", false},
		{"underlay source from the underlay", Underlay, frame(udp(host1, eip1, 64, 1, 2)), "", false},
		{"bad checksum", Internet, badCsum, "malformed", false},
		{"total length beyond the frame", Internet, long, "malformed", false},
		{"martian source", Internet, frame(udp(netip.MustParseAddr("127.0.0.1"), eip1, 64, 1, 2)), "martian source", false},
		{"TTL 1", Internet, frame(udp(client1, eip1, 1, 1, 2)), "", true},
		{"NVGRE from the Internet side", Internet, nvgreFrame(host1, 5001, udp(eip1, client1, 64, 53, 1000)), "NVGRE to the edge", false},
		{"NVGRE from the bound host", Underlay, nvgreFrame(host1, 5001, udp(eip1, client1, 64, 53, 1000)), "", false},
		{"NVGRE from another host", Underlay, nvgreFrame(netip.MustParseAddr("198.18.21.2"), 5001, udp(eip1, client1, 64, 53, 1000)), "spoofed", false},
		{"NVGRE in another VSID", Underlay, nvgreFrame(host1, 5002, udp(eip1, client1, 64, 53, 1000)), "spoofed", false},
		{"NVGRE inner TTL 1", Underlay, nvgreFrame(host1, 5001, udp(eip1, client1, 1, 53, 1000)), "inner TTL", true},
		{"three VLAN tags", Internet, append(append(append([]byte(nil), macs...), 0x81, 0, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3), good[12:]...), "VLAN stack", false},
	} {
		v := r.JudgeEdge(c.side, c.in)
		if (c.want == "") != (v.Forbid == "") || !strings.HasPrefix(v.Forbid, c.want) {
			t.Errorf("%s: Forbid %q, want %q", c.name, v.Forbid, c.want)
		}
		if c.noFw != (v.NoForward != "") {
			t.Errorf("%s: NoForward %q", c.name, v.NoForward)
		}
	}
}

type denyPrefix netip.Prefix

func (d denyPrefix) Decide(f Flow) FWDecision {
	if netip.Prefix(d).Contains(f.Src) {
		return FWDecision{Drop: FWDeny, Rule: "deny " + netip.Prefix(d).String()}
	}
	return FWDecision{}
}

// The firewall hook: a denied flow is forbidden from the Internet side
// only, to an EIP or VIP only, and after anti-spoofing (a spoofed source
// is judged spoofed, as the edge counts it).
func TestJudgePolicy(t *testing.T) {
	r := testRegion()
	r.Policy = denyPrefix(netip.MustParsePrefix("203.0.113.0/24"))
	if v := r.JudgeEdge(Internet, frame(udp(client1, eip1, 64, 1, 2))); !strings.HasPrefix(v.Forbid, "denied by the firewall") || !v.FirewallRan {
		t.Errorf("denied client to an EIP: %v", v)
	}
	if v := r.JudgeEdge(Internet, frame(udp(client1, eip1, 1, 1, 2))); v.Forbid == "" {
		t.Errorf("denied client with TTL 1 (an ICMP error would be a transmission): %v", v)
	}
	if v := r.JudgeEdge(Underlay, frame(udp(client1, eip1, 64, 1, 2))); v.Forbid != "" || v.FirewallRan {
		t.Errorf("the underlay side is not filtered: %v", v)
	}
	if v := r.JudgeEdge(Internet, frame(udp(netip.MustParseAddr("198.51.100.200"), client1, 64, 1, 2))); v.Forbid != "" || v.FirewallRan {
		t.Errorf("to no EIP or VIP: %v", v)
	}
	// The firewall runs first (edge_main's order): a denied land attack
	// is counted as denied; one no rule denies is spoofed.
	r.Policy = denyPrefix(netip.MustParsePrefix("0.0.0.0/0"))
	if v := r.JudgeEdge(Internet, frame(udp(eip1, eip1, 64, 1, 2))); !strings.HasPrefix(v.Forbid, "denied by the firewall") || !v.FirewallRan {
		t.Errorf("a land attack a rule denies is denied by the firewall: %v", v)
	}
	r.Policy = denyPrefix(netip.MustParsePrefix("203.0.113.0/24"))
	if v := r.JudgeEdge(Internet, frame(udp(eip1, eip1, 64, 1, 2))); !strings.HasPrefix(v.Forbid, "land attack") || !v.FirewallRan {
		t.Errorf("a land attack no rule denies is spoofed after the firewall ran: %v", v)
	}
}

// Firewall reads the rules as docs/dataplane.md says: deny beats allow
// whatever the nesting, an allow list makes its destination private, port
// ranges need a TCP or UDP packet with ports (not a fragment), and the
// counted rule is the destination's first matching one in slot order,
// then the global ones'.
func TestFirewallPolicy(t *testing.T) {
	pf := netip.MustParsePrefix
	a := netip.MustParseAddr
	priv, pub := a("198.51.100.10"), a("198.51.100.7")
	fw := NewFirewall([]FWRule{
		{Name: "p-allow-web", Sources: []netip.Prefix{pf("0.0.0.0/0")}, Dests: []netip.Addr{priv}, Proto: ProtoTCP, PortLo: 80, PortHi: 80, Slot: 5},
		{Name: "g-deny", Deny: true, Sources: []netip.Prefix{pf("192.0.2.0/24")}, PortHi: 0xffff, Slot: 0},
		{Name: "p-allow-16", Sources: []netip.Prefix{pf("203.0.0.0/16")}, Dests: []netip.Addr{priv}, PortHi: 0xffff, Slot: 7},
		{Name: "p-deny-24", Deny: true, Sources: []netip.Prefix{pf("203.0.113.0/24")}, Dests: []netip.Addr{priv}, Proto: ProtoUDP, PortLo: 53, PortHi: 53, Slot: 2},
	})
	for _, c := range []struct {
		name string
		f    Flow
		want FWDecision
	}{
		{"global deny on a public EIP", Flow{Src: a("192.0.2.1"), Dst: pub, Proto: ProtoTCP, DPort: 80}, FWDecision{FWDeny, "g-deny"}},
		{"global deny beats an allow on a private EIP", Flow{Src: a("192.0.2.1"), Dst: priv, Proto: ProtoTCP, DPort: 80}, FWDecision{FWDeny, "g-deny"}},
		{"a public EIP, no rule: uncounted", Flow{Src: a("203.0.113.1"), Dst: pub, Proto: ProtoUDP, DPort: 53}, FWDecision{}},
		{"deny /24 inside allow /16", Flow{Src: a("203.0.113.1"), Dst: priv, Proto: ProtoUDP, DPort: 53}, FWDecision{FWDeny, "p-deny-24"}},
		{"a fragment escapes the port range, allowed by the /16", Flow{Src: a("203.0.113.1"), Dst: priv, Proto: ProtoUDP, Fragment: true}, FWDecision{"", "p-allow-16"}},
		{"first allow in slot order", Flow{Src: a("203.0.113.1"), Dst: priv, Proto: ProtoTCP, DPort: 80}, FWDecision{"", "p-allow-web"}},
		{"private: no allow matches", Flow{Src: a("198.19.249.1"), Dst: priv, Proto: ProtoTCP, DPort: 81}, FWDecision{FWPrivate, ""}},
		{"private: a port range needs ports", Flow{Src: a("198.19.249.1"), Dst: priv, Proto: ProtoICMP}, FWDecision{FWPrivate, ""}},
	} {
		if got := fw.Decide(c.f); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// CheckOutput accepts a well-formed NVGRE encapsulation and a forwarded
// packet, and rejects each way of getting them wrong.
func TestCheckOutput(t *testing.T) {
	r := testRegion()
	in := frame(udp(client1, eip1, 64, 1000, 53))
	v := r.JudgeEdge(Internet, in)
	fwd := append([]byte(nil), in[14:]...)
	fwd[8]--
	FixUp(frame(fwd), false)
	fwdFrame := frame(fwd)
	FixUp(fwdFrame, false)
	g := make([]byte, 8)
	binary.BigEndian.PutUint32(g, 0x20006558)
	binary.BigEndian.PutUint32(g[4:], 5001<<8)
	enc := frame(IPv4Packet(edgeUl, host1, ProtoGRE, 64, 0x4000, append(append(g, 2, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0xfe, 8, 0), fwdFrame[14:]...)))
	if k, err := r.CheckOutput(v, RouterHop, enc); err != nil || k != OutEncap {
		t.Fatalf("good encapsulation: %s %v", k, err)
	}
	if k, err := r.CheckOutput(v, RouterHop, fwdFrame); err != nil || k != OutForward {
		t.Fatalf("good forward: %s %v", k, err)
	}
	for name, mut := range map[string]func(b []byte){
		"outer checksum": func(b []byte) { b[14+10] ^= 1 },
		"inner checksum": func(b []byte) { b[14+20+8+14+10] ^= 1 },
		"GRE protocol":   func(b []byte) { b[14+20+3] = 0 },
		"no DF":          func(b []byte) { b[14+6] = 0; FixUp(b, false) },
		"TTL kept":       func(b []byte) { b[14+20+8+14+8]++; FixUp(b, false) },
		"cut short":      nil,
	} {
		bad := append([]byte(nil), enc...)
		if mut == nil {
			bad = bad[:len(bad)-1]
		} else {
			mut(bad)
		}
		if _, err := r.CheckOutput(v, RouterHop, bad); err == nil {
			t.Errorf("encapsulation with a wrong %s accepted", name)
		}
	}
	spoofed := r.JudgeEdge(Internet, frame(udp(eip1, eip1, 64, 1, 2)))
	if _, err := r.CheckOutput(spoofed, RouterHop, enc); err == nil {
		t.Error("a transmission for a land attack accepted")
	}
	expired := r.JudgeEdge(Internet, frame(udp(client1, eip1, 1, 1, 2)))
	if _, err := r.CheckOutput(expired, RouterHop, fwdFrame); err == nil {
		t.Error("forwarding of TTL 1 accepted")
	}
}

// The mutator is deterministic for a seed, stays within MaxFrame, and its
// fix-ups make frames the parser takes.
func TestMutator(t *testing.T) {
	seed := frame(udp(client1, eip1, 64, 1000, 53))
	gen := func() [][]byte {
		m := &Mutator{R: rand.New(rand.NewPCG(7, 8)), Addrs: []netip.Addr{eip1, vip1, client1}, Ports: []uint16{53, 80},
			Endpoint: edgeUl, TunnelSrcs: []netip.Addr{host1}, Keys: []uint32{5001 << 8}, MaxFrame: 3520}
		var out [][]byte
		for i := 0; i < 2000; i++ {
			if i%10 == 0 {
				out = append(out, m.Random())
			} else {
				out = append(out, m.Mutate(seed, [][]byte{seed}))
			}
		}
		return out
	}
	a, b := gen(), gen()
	parsed := 0
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("input %d differs between two runs with the same seed", i)
		}
		if len(a[i]) < ethHdrLen || len(a[i]) > 3520 {
			t.Fatalf("input %d of %d bytes", i, len(a[i]))
		}
		if l, ok := ParseLink(a[i]); ok && l.EtherType == EtherIPv4 {
			if _, err := ParseIPv4(a[i], l.L3); err == nil {
				parsed++
			}
		}
	}
	if parsed < len(a)/3 {
		t.Errorf("only %d of %d inputs parse as IPv4: the fix-ups do not work", parsed, len(a))
	}
	if !bytes.Equal(seed, frame(udp(client1, eip1, 64, 1000, 53))) {
		t.Error("Mutate changed its seed")
	}
}

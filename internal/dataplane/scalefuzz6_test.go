package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/dpfuzz"
	"github.com/azgate/azgate/internal/flowhash"
)

// The scale fuzzers' IPv6 EIPs (issue 21): the edge's bed routes the IPv6
// EIPs of ipv6eip_test.go (through Edge.PutRoutes, as the edge's
// reconciler does), the region's IPv6 prefix and an IPv6 underlay prefix
// are in the anti-spoofing trie, the firewall has IPv6 rules
// (scaleFWRules), the edge has an ICMPv6 source and IPv6 routes on its
// Internet side (decapsulated IPv6 leaves there); the agent's bed
// translates two IPv6 EIPs to its guest's address6 (Agent.PutEIP). The
// oracle (internal/dpfuzz eip6.go) judges every IPv6 frame to and from
// them, and the mutator aims IPv6 frames at them.

// scaleEdge6 configures the edge bed's IPv6 EIPs and refreshes fb.routes
// (the region's EIPs and the per-EIP counters the batch check reads).
func scaleEdge6(t *testing.T, fb *fuzzEdgeBed) {
	if err := fb.env.InternetIPv6(); err != nil {
		t.Fatal(err)
	}
	if err := fb.edge.PutRoutes(map[netipAddr]Route{
		addr(eip6):      {Host: addr(hostAddr), VSID: vsid, StatsIdx: eip6Idx},
		addr(eip6NoNbr): {Host: addr("198.19.250.9"), VSID: vsid, StatsIdx: 12},
		addr(eip6Hole):  {Host: addr("198.19.251.9"), VSID: vsid, StatsIdx: 13},
		addr(eip6Own):   {Host: addr(otherHost), VSID: 6000, StatsIdx: 14},
	}); err != nil {
		t.Fatal(err)
	}
	routes, err := fb.edge.Routes()
	if err != nil {
		t.Fatal(err)
	}
	fb.routes = routes
	scaleVIP6(t, fb)
	// The edge's IPv6 underlay address (newFuzzEdgeBed's config with
	// Underlay6): NVGRE over IPv6 to it from no host it names is
	// drop_spoof.
	if err := fb.edge.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), Underlay6: addr(dptest.UlAddr6), ICMPSource: addr(dptest.ExtAddr), ICMPSource6: addr(dptest.ExtAddr6),
		HashSeed: testSeed, ICMPRate: MaxICMPRate, ICMPBurst: 1 << 24, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC),
		UnderlayIfindex: uint32(fuzzUlIfindex(t, fb.env)),
	}); err != nil {
		t.Fatal(err)
	}
}

// ul6Stranger is an address of the IPv6 underlay's prefix that names no
// host; ul6StrangerEIP an IPv4 EIP the escape test binds to it.
const (
	ul6Stranger    = "2001:db8:ff:1::9"
	ul6StrangerEIP = "203.0.113.77"
)

// scaleUl6Seeds: NVGRE over IPv6 to the edge's IPv6 underlay address
// from addresses that name no host (an IPv4 and an IPv6 EIP's packets,
// a VIP's reply), from the underlay and the Internet side, and GRE over
// IPv6 to another address.
func scaleUl6Seeds(tb *testing.T) []scaleSeed {
	var s []scaleSeed
	in4 := func(src string) []byte {
		return ethFrame(tb, guestMAC6, gwMAC, flow{src: src, dst: "203.0.113.9", proto: layers.IPProtocolTCP, sport: 80, dport: 40000}.ip(tb))
	}
	in6 := eth6(guestMAC6, gwMAC, false, pkt6{src: eip6, dst: client6, proto: nhUDP, sport: 53, dport: 40000}.ip())
	for _, src := range []string{ul6Stranger, dptest.FabAddr6, "2001:db8:ff::5"} {
		for _, dev := range []string{dptest.UlDev, dptest.ExtDev} {
			s = append(s, scaleSeed{dev, nvgreOver6(dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr6, vsid<<8|0x21, 0, in4(ul6StrangerEIP))})
			s = append(s, scaleSeed{dev, nvgreOver6(dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr6, vsid<<8|0x21, 0, in4(eip))})
			s = append(s, scaleSeed{dev, nvgreOver6(dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr6, vsid<<8|0x21, 0, in6)})
		}
	}
	s = append(s, scaleSeed{dptest.UlDev, nvgreOver6(dptest.FabMAC, dptest.UlMAC, ul6Stranger, "2001:db8:ff::77", vsid<<8|0x21, 0, in4(eip))})
	return s
}

// The edge bed's IPv6 VIPs (vip6_test.go's and nat6_test.go's, beside the
// bed's IPv4 services): vip6s in mode encap (tcp 443 to backend g on
// hostAddr, udp any port to h on otherHost in VSID 6000, tcp 9000 to an
// empty table slot), vipN6 in mode nat (tcp 80 to beA6:8080, udp any
// port to beA6 on the listener's port), beA6 routed by the underlay's
// router. scaleVIP6Oracle is what the oracle knows of them.
func scaleVIP6(t *testing.T, fb *fuzzEdgeBed) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fb.env.Node.Route(beNet6, dptest.FabAddr6, dptest.UlDev))
	b := &lbBed{edgeBed: fb.edgeBed, idx: map[string]uint32{"g": 3, "h6": 5, "a6": 6, "p6": 7}}
	e := fb.edge
	must(e.SetBackend(5, LBBackend{Mode: ModeEncap, Addr: addr(otherHost), Guest: addr(guest6H), VSID: vsidH, Gen: 1}))
	must(e.SetBackend(6, LBBackend{Mode: ModeNAT, Addr: addr(beA6), Port: 8080, Gen: 1}))
	must(e.SetBackend(7, LBBackend{Mode: ModeNAT, Addr: addr(beA6), Gen: 1}))
	b.table(t, 4, "h6")
	b.table(t, 5, "a6")
	b.table(t, 6, "p6")
	v, n := addr(vip6s), addr(vipN6)
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 2}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoUDP}, ListenerValue{Table: 4}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 9000}, ListenerValue{Table: 9}))
	must(e.PutListener(Listener{VIP: n, Proto: ProtoTCP, Port: 80}, ListenerValue{Table: 5}))
	must(e.PutListener(Listener{VIP: n, Proto: ProtoUDP}, ListenerValue{Table: 6}))
	must(e.PutVIP(v))
	must(e.PutVIP(n))
	lb, err := loadLBModel(e)
	if err != nil {
		t.Fatal(err)
	}
	fb.lb = lb
}

// scaleVIP6Oracle: the IPv6 VIPs' backends as the bed writes them.
func scaleVIP6Oracle() map[netip.Addr]dpfuzz.VIP6 {
	return map[netip.Addr]dpfuzz.VIP6{
		addr(vip6s): {Encap: []dpfuzz.Binding{{Host: addr(hostAddr), VSID: vsid}, {Host: addr(otherHost), VSID: vsidH}}},
		addr(vipN6): {NAT: []dpfuzz.NATBackend6{{Addr: addr(beA6), Port: 8080}, {Addr: addr(beA6)}}},
	}
}

// scaleAddrs6 are the IPv6 addresses the mutator tries: the IPv6 EIPs,
// an address of the region's prefix that is none, clients in and around
// the firewall's IPv6 sources, the underlay's IPv6, the edge's own,
// unique-local and link-local sources, the agent's guests.
func scaleAddrs6() []netip.Addr {
	var a []netip.Addr
	for _, s := range []string{eip6, eip6NoNbr, eip6Hole, eip6Own, "2001:db8:e1::99", "2001:db8:e1::", client6, "2001:db8:c::66",
		"2001:db8:c::67", "2001:db8:c:1::5", "2001:db8:c:2::5", "2001:db8:bad::1", "2001:db8:bae::1", "2001:db8:d::1",
		dptest.UlAddr6, "2001:db8:ff:1::9", dptest.ExtAddr6, dptest.RtrAddr6, "fd00::1", "fc00::1", "fe80::1",
		"2001:db8:249::5", "2001:db8:251::5", ul6Stranger, vip6s, vipN6, beA6, "2001:db8:be::2", agentEIP6, agentEip6NoNbr, agentPriv6, agentPriv6NoNbr, agentPriv6NoEIP} {
		a = append(a, addr(s))
	}
	return a
}

// ip6With is a valid IPv6 packet of p with extension headers exts (their
// next headers chained) before its upper layer.
func ip6With(p pkt6, exts ...[]byte) []byte {
	ip := p.ip()
	if len(exts) == 0 {
		return ip
	}
	nh := ip[6]
	var chain []byte
	for i := len(exts) - 1; i >= 0; i-- {
		h := append([]byte(nil), exts[i]...)
		h[0] = nh
		nh = extType(exts[i])
		chain = append(h, chain...)
	}
	return ip6Hdr(p.src, p.dst, nh, cat(chain, ip[40:]))
}

// extType tells ip6With what header a fixture's bytes are: an 8-byte
// header with a fragment's flags (fragHdr) is a fragment header, the
// rest destination options (optHdr).
func extType(h []byte) uint8 {
	if len(h) == 8 && h[6] == 0x12 && h[7] == 0x34 {
		return nhFrag
	}
	return nhDst
}

// scaleEdge6Seeds: from the Internet side, TCP, UDP and ICMPv6 to each
// IPv6 EIP from clients in and around the firewall's IPv6 sources, with
// extension headers, fragments (first, later), an expired hop limit, an
// ICMPv6 error, the spoofed classes; from the underlay, an IPv6 EIP's
// guest's packets in NVGRE from its host (and from the wrong host and
// VSID).
func scaleEdge6Seeds(tb *testing.T) []scaleSeed {
	var s []scaleSeed
	ext := func(ip []byte) {
		s = append(s, scaleSeed{dptest.ExtDev, eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip)})
	}
	for i, src := range []string{client6, "2001:db8:c::66", "2001:db8:c:1::5", "2001:db8:bad::1", "2001:db8:d::1"} {
		for _, dst := range []string{eip6, eip6Own, eip6NoNbr} {
			ext(pkt6{src: src, dst: dst, proto: nhTCP, sport: 40000, dport: []uint16{22, 80, 443, 8080}[i%4]}.ip())
			ext(pkt6{src: src, dst: dst, proto: nhUDP, sport: 40000, dport: 53}.ip())
			ext(pkt6{src: src, dst: dst, proto: nhICMPv6}.ip())
		}
	}
	ext(ip6With(pkt6{src: client6, dst: eip6, proto: nhUDP, sport: 1, dport: 53}, optHdr(0, 1)))
	ext(ip6With(pkt6{src: client6, dst: eip6, proto: nhTCP, sport: 1, dport: 80}, fragHdr(0, 0, true)))
	ext(ip6With(pkt6{src: client6, dst: eip6Own, proto: nhTCP, sport: 1, dport: 443}, optHdr(0, 2), fragHdr(0, 0, true)))
	ext(pkt6{src: client6, dst: eip6, proto: nhUDP, fragOff: 185}.ip())
	ext(pkt6{src: client6, dst: eip6, proto: nhUDP, sport: 1, dport: 53, hop: 1}.ip())
	ext(pkt6{src: client6, dst: eip6, proto: nhICMPv6, icmpType: 1, hop: 1}.ip())
	ext(pkt6{src: client6, dst: eip6Hole, proto: nhUDP, sport: 1, dport: 53, tc: 0xb8}.ip())
	for _, src := range []string{eip6, "2001:db8:e1::99", "2001:db8:ff::5", "fd00::1", "fe80::1"} {
		ext(pkt6{src: src, dst: eip6, proto: nhTCP, sport: 40000, dport: 80}.ip())
	}
	ext(pkt6{src: "fe80::1", dst: eip6, proto: nhICMPv6}.ip())
	ext(ip6Hdr(client6, eip6, nhUDP, udp6(1, 53, 1440))) // near the underlay's MTU

	ul := func(host string, vs uint32, ip []byte) {
		s = append(s, scaleSeed{dptest.UlDev, fromHost6(tb, host, vs<<8|0x21, ip)})
	}
	ul(hostAddr, vsid, pkt6{src: eip6, dst: client6, proto: nhTCP, sport: 80, dport: 40000}.ip())
	ul(hostAddr, vsid, pkt6{src: eip6, dst: client6, proto: nhUDP, sport: 53, dport: 40000, hop: 2}.ip())
	ul(hostAddr, vsid, pkt6{src: eip6, dst: client6, proto: nhICMPv6, icmpType: 129}.ip())
	ul(hostAddr, vsid, ip6With(pkt6{src: eip6, dst: client6, proto: nhUDP, sport: 53, dport: 1}, optHdr(0, 1)))
	ul(hostAddr, vsid, pkt6{src: eip6, dst: client6, proto: nhUDP, fragOff: 100}.ip())
	ul(otherHost, 6000, pkt6{src: eip6Own, dst: client6, proto: nhTCP, sport: 443, dport: 1}.ip())
	ul(otherHost, vsid, pkt6{src: eip6, dst: client6, proto: nhTCP, sport: 80, dport: 40000}.ip())
	ul(hostAddr, vsid, pkt6{src: eip6, dst: "fd00::1", proto: nhUDP, sport: 1, dport: 2}.ip())
	ul(hostAddr, vsid, pkt6{src: eip6, dst: dptest.UlAddr6, proto: nhUDP, sport: 1, dport: 2}.ip())
	// Behind an unresolved gateway (decap_pass: the inner frame to the
	// kernel), a blackhole, a route of a small MTU.
	ul(hostAddr, vsid, pkt6{src: eip6, dst: "2001:db8:249::5", proto: nhTCP, sport: 80, dport: 40000}.ip())
	ul(hostAddr, vsid, pkt6{src: eip6, dst: "2001:db8:251::5", proto: nhUDP, sport: 1, dport: 2}.ip())
	ul(hostAddr, vsid, ip6Hdr(eip6, "2001:db8:1280::5", nhUDP, udp6(1, 2, 1300)))
	// The IPv6 VIPs: to each listener, to no listener, to an empty
	// table slot, ICMPv6 that is no error, an expired hop limit,
	// fragments, an extension header, the spoofed classes, a
	// link-local source; a nat backend's replies (from the underlay,
	// the Internet side's forged), a zero UDP checksum.
	for _, src := range []string{client6, "2001:db8:c::66", "2001:db8:c:1::5"} {
		ext(pkt6{src: src, dst: vip6s, proto: nhTCP, sport: 40000, dport: 443}.ip())
		ext(pkt6{src: src, dst: vip6s, proto: nhUDP, sport: 40000, dport: 53}.ip())
		ext(pkt6{src: src, dst: vipN6, proto: nhTCP, sport: 40000, dport: 80}.ip())
		ext(pkt6{src: src, dst: vipN6, proto: nhUDP, sport: 40000, dport: 5353}.ip())
	}
	for _, dst := range []string{vip6s, vipN6} {
		ext(pkt6{src: client6, dst: dst, proto: nhTCP, sport: 1, dport: 9000}.ip())
		ext(pkt6{src: client6, dst: dst, proto: nhTCP, sport: 1, dport: 22}.ip())
		ext(pkt6{src: client6, dst: dst, proto: nhICMPv6}.ip())
		ext(pkt6{src: client6, dst: dst, proto: nhUDP, sport: 1, dport: 53, hop: 1}.ip())
		ext(pkt6{src: client6, dst: dst, proto: nhUDP, fragOff: 185}.ip())
		ext(ip6With(pkt6{src: client6, dst: dst, proto: nhUDP, sport: 1, dport: 53}, optHdr(0, 1)))
		ext(ip6With(pkt6{src: client6, dst: dst, proto: nhTCP, sport: 1, dport: 80}, fragHdr(0, 0, true)))
		ext(pkt6{src: client6, dst: dst, proto: nhUDP, sport: 1, dport: 53, zeroUDPCsum: true}.ip())
		for _, src := range []string{dst, "2001:db8:e1::99", "2001:db8:ff::5", "fd00::1", "fe80::1"} {
			ext(pkt6{src: src, dst: dst, proto: nhTCP, sport: 40000, dport: 443}.ip())
		}
	}
	for _, sport := range []uint16{8080, 5353} {
		s = append(s, scaleSeed{dptest.UlDev, eth6(dptest.FabMAC, dptest.UlMAC, false, pkt6{src: beA6, dst: client6, proto: nhTCP, sport: sport, dport: 40000}.ip())})
		s = append(s, scaleSeed{dptest.UlDev, eth6(dptest.FabMAC, dptest.UlMAC, false, pkt6{src: beA6, dst: client6, proto: nhUDP, sport: sport, dport: 40000}.ip())})
		ext(pkt6{src: beA6, dst: client6, proto: nhUDP, sport: sport, dport: 40000}.ip())
	}
	// An IPv6 packet to an IPv6 EIP arriving on the underlay, bare.
	s = append(s, scaleSeed{dptest.UlDev, eth6(dptest.FabMAC, dptest.UlMAC, false, pkt6{src: client6, dst: eip6, proto: nhUDP, sport: 1, dport: 53}.ip())})
	return s
}

// edgeOutput6 checks what xdp_edge transmitted, or handed to the kernel
// changed, for an input the oracle reads as an IPv6 EIP's: the oracle's
// rules (CheckOutput, CheckPassed6), the FlowID of an encapsulation
// (flowhash.FlowID6 of the 5-tuple, as the IPv4 path's), and the action
// against the egress: NVGRE leaves by the underlay, an ICMPv6 error by the
// ingress, a decapsulated packet by the Internet side.
func edgeOutput6(fb *fuzzEdgeBed, region *dpfuzz.Region, it *runItem, v dpfuzz.Verdict) (string, error) {
	if it.act == xdpPass {
		if err := region.CheckPassed6(v, it.out); err != nil {
			return "", err
		}
		if v.Out6 != nil && v.Out6.VIP != nil {
			return "vip6-pass-changed", nil
		}
		return "pass-changed6", nil
	}
	kind, err := region.CheckOutput(v, dpfuzz.RouterHop, it.out)
	if err != nil {
		return kind, err
	}
	egress := it.dev
	switch kind {
	case dpfuzz.OutEncap:
		egress = dptest.UlDev
		p := v.Fwd6
		if v.Out6.VIP != nil {
			if err := vip6EncapCheck(fb, p, it.out); err != nil {
				return kind, err
			}
			break
		}
		tuple := flowhash.Tuple{Src: p.Src(), Dst: p.Dst(), Proto: p.Proto}
		if !p.MF { // a fragment of a datagram hashes without ports, as all of them must go one way
			tuple.SrcPort, tuple.DstPort = dpfuzz.Ports6(*p)
		}
		want := uint32(flowhash.FlowID6(tuple, fb.seed))
		if got := binary.BigEndian.Uint32(it.out[14+20+4:]) & 0xff; got != want {
			return kind, fmt.Errorf("FlowID %#02x, flowhash.FlowID6 of %+v is %#02x", got, tuple, want)
		}
		if d := p.Dst().As16(); fmtMAC(it.out[14+20+8:14+20+14]) != fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", d[12], d[13], d[14], d[15]) {
			return kind, fmt.Errorf("inner destination MAC %s for %v", fmtMAC(it.out[14+20+8:14+20+14]), p.Dst())
		}
	case dpfuzz.OutICMP:
	default:
		egress = egressOf(it.out)
	}
	want := uint32(xdpRedirect)
	if egress == it.dev {
		want = xdpTX
	}
	if it.act != want {
		return kind, fmt.Errorf("IPv6 %s from %s leaving by %s must be %s", kind, it.dev, egress, actionNames[want])
	}
	switch {
	case v.Out6 != nil && v.Out6.Reply:
		return "vip6-reply-" + kind, nil
	case v.Out6 != nil && v.Out6.VIP != nil:
		return "vip6-" + kind, nil
	}
	return kind + "6", nil
}

// vip6EncapCheck holds NVGRE the edge built for an IPv6 VIP's packet p
// (the oracle checked the host, VSID and packet) to the contract with the
// agent: the inner destination MAC 02:01 and the IPv4 address of a guest
// of an encap backend on that host in that VSID, and, for TCP and UDP
// unfragmented, the FlowID flowhash.FlowID6 of the 5-tuple (an ICMPv6
// error's is its flow's; a fragment's its flow entry's).
func vip6EncapCheck(fb *fuzzEdgeBed, p *dpfuzz.IPv6, out []byte) error {
	host := netip.AddrFrom4([4]byte(out[14+16 : 14+20]))
	key := binary.BigEndian.Uint32(out[14+20+4:])
	var macs []string
	for _, be := range fb.lb.backends {
		if be.Mode == ModeEncap && be.Addr == host && be.VSID == key>>8 {
			g := be.Guest.As4()
			macs = append(macs, fmt.Sprintf("02:01:%02x:%02x:%02x:%02x", g[0], g[1], g[2], g[3]))
		}
	}
	if m := fmtMAC(out[14+20+8 : 14+20+14]); !slices.Contains(macs, m) {
		return fmt.Errorf("IPv6 VIP's packet with inner destination MAC %s to %v VSID %d: the backends' guests there are %v", m, host, key>>8, macs)
	}
	if (p.Proto == dpfuzz.ProtoTCP || p.Proto == dpfuzz.ProtoUDP) && p.FragOff == 0 && !p.MF {
		tuple := flowhash.Tuple{Src: p.Src(), Dst: p.Dst(), Proto: p.Proto}
		tuple.SrcPort, tuple.DstPort = dpfuzz.Ports6(*p)
		if want := uint32(flowhash.FlowID6(tuple, fb.seed)); key&0xff != want {
			return fmt.Errorf("IPv6 VIP's FlowID %#02x, flowhash.FlowID6 of %+v is %#02x", key&0xff, tuple, want)
		}
	}
	return nil
}

// isEncap6: out is NVGRE the edge built for an IPv6 EIP's input.
func isEncap6(v dpfuzz.Verdict, it *runItem) bool {
	return v.Out6 != nil && v.Out6.Encap && (it.act == xdpTX || it.act == xdpRedirect) && len(it.out) >= 14+20 &&
		binary.BigEndian.Uint16(it.out[12:]) == 0x0800 && it.out[14+9] == 47
}

// The agent's IPv6 EIPs (agent6_test.go's): agentEIP6 to the guest's
// address6 on the guest's port, agentEip6NoNbr to an address whose
// neighbour is unresolved (decap_pass).
func scaleAgent6(t *testing.T, env *dptest.Env, a *Agent, host *dpfuzz.Host) {
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	if err := env.GuestIPv6(agentPriv6, "2001:db8:f0::/64", "2001:db8:f1::/64"); err != nil {
		t.Fatal(err)
	}
	for _, e := range []AgentEIP{
		{EIP: addr(agentEIP6), Private: addr(agentPriv6), VSID: vsid, StatsIdx: agentIdx6, Ifindex: g1},
		{EIP: addr(agentEip6NoNbr), Private: addr(agentPriv6NoNbr), VSID: vsid, StatsIdx: agentIdx6b, Ifindex: g1},
	} {
		if err := a.PutEIP(e); err != nil {
			t.Fatal(err)
		}
		host.EIPs[e.EIP] = dpfuzz.Binding{Host: e.Private, VSID: e.VSID}
	}
}

// scaleAgentGuest6Seeds: a guest's IPv6: from its address6 (with and
// without an EIP) to clients, TCP, UDP (a zero checksum too), ICMPv6,
// hop limits 1 and 0, a first and a later fragment, extension headers, a
// link-local destination, neighbour discovery.
func scaleAgentGuest6Seeds() []scaleSeed {
	var s []scaleSeed
	g := func(ip []byte) {
		s = append(s, scaleSeed{dptest.GuestDev, eth6(dptest.VMMAC, dptest.GuestMAC, false, ip)})
	}
	for _, src := range []string{agentPriv6, agentPriv6NoNbr} {
		g(pkt6{src: src, dst: client6, proto: nhTCP, sport: 80, dport: 40000}.ip())
		g(pkt6{src: src, dst: client6, proto: nhUDP, sport: 53, dport: 40000}.ip())
		g(pkt6{src: src, dst: client6, proto: nhICMPv6, icmpType: 129}.ip())
	}
	g(pkt6{src: agentPriv6, dst: client6, proto: nhUDP, sport: 53, dport: 1, hop: 1}.ip())
	g(pkt6{src: agentPriv6, dst: client6, proto: nhUDP, sport: 53, dport: 1, hop: 0}.ip())
	g(pkt6{src: agentPriv6, dst: client6, proto: nhUDP, sport: 53, dport: 1, zeroUDPCsum: true}.ip())
	g(pkt6{src: agentPriv6, dst: client6, proto: nhUDP, fragOff: 20}.ip())
	g(ip6With(pkt6{src: agentPriv6, dst: client6, proto: nhTCP, sport: 80, dport: 1}, optHdr(0, 1), fragHdr(0, 0, true)))
	g(pkt6{src: agentPriv6NoEIP, dst: client6, proto: nhUDP, sport: 1, dport: 2}.ip())
	g(pkt6{src: agentPriv6, dst: "fe80::1", proto: nhUDP, sport: 1, dport: 2}.ip())
	ns := pkt6{src: agentPriv6, dst: "ff02::1:ff00:1", proto: nhICMPv6, icmpType: 135, hop: 255}.ip()
	g(ns)
	return s
}

// scaleAgentUnderlay6Seeds: NVGRE from an edge carrying IPv6 to the
// host's IPv6 EIPs (TCP, UDP, ICMPv6, a later fragment, hop limits 1 and
// 0, a zero UDP checksum, extension headers), in the wrong VSID, to an
// address that is no EIP, from a stranger.
func scaleAgentUnderlay6Seeds(tb testing.TB) []scaleSeed {
	var s []scaleSeed
	ul := func(from string, vs uint32, ip []byte) {
		s = append(s, scaleSeed{dptest.UlDev, nvgre(tb, dptest.FabMAC, dptest.UlMAC, from, dptest.UlAddr, vs<<8|0x11, 0, eth6(gwMAC, "02:00:00:00:00:01", false, ip))})
	}
	for _, dst := range []string{agentEIP6, agentEip6NoNbr} {
		ul(edgeA, vsid, pkt6{src: client6, dst: dst, proto: nhTCP, sport: 40000, dport: 22}.ip())
		ul(edgeB, vsid, pkt6{src: client6, dst: dst, proto: nhUDP, sport: 40000, dport: 53}.ip())
		ul(edgeA, vsid, pkt6{src: client6, dst: dst, proto: nhICMPv6}.ip())
	}
	ul(edgeA, vsid, pkt6{src: client6, dst: agentEIP6, proto: nhUDP, fragOff: 30}.ip())
	ul(edgeA, vsid, pkt6{src: client6, dst: agentEIP6, proto: nhUDP, sport: 1, dport: 2, hop: 1}.ip())
	ul(edgeA, vsid, pkt6{src: client6, dst: agentEIP6, proto: nhUDP, sport: 1, dport: 2, hop: 0}.ip())
	ul(edgeA, vsid, pkt6{src: client6, dst: agentEIP6, proto: nhUDP, sport: 1, dport: 2, zeroUDPCsum: true}.ip())
	ul(edgeA, vsid, ip6With(pkt6{src: client6, dst: agentEIP6, proto: nhTCP, sport: 1, dport: 22}, optHdr(0, 1)))
	ul(edgeA, 6000, pkt6{src: client6, dst: agentEIP6, proto: nhTCP, sport: 1, dport: 22}.ip())
	ul(edgeA, vsid, pkt6{src: client6, dst: "2001:db8:e1::99", proto: nhTCP, sport: 1, dport: 22}.ip())
	ul(hostAddr, vsid, pkt6{src: client6, dst: agentEIP6, proto: nhTCP, sport: 1, dport: 22}.ip())
	return s
}

// The harness judges IPv6 EIPs' traffic: with a Policy denying an IPv6
// client prefix that nothing enforces (no rule is programmed), the run
// must fail on a transmitted denied IPv6 packet; with the real rules
// programmed but an oracle lacking the IPv6 deny rule (the /64 inside
// eip6Own's allowed /48), on its counters.
func TestScaleFuzzEdgeCatchesIPv6Escapes(t *testing.T) {
	t.Setenv("AZG_FUZZ_PACKETS", "30000")
	t.Run("unenforced deny", func(t *testing.T) {
		err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, configure: func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
			return denySources{netip.MustParsePrefix("2001:db8:c::/48")}, nil
		}})
		if err == nil || !strings.Contains(err.Error(), "denied by the firewall") || !strings.Contains(err.Error(), "2001:db8:c::") {
			t.Fatalf("a transmitted denied IPv6 packet went unnoticed: %.600v", err)
		}
	})
	t.Run("miscount", func(t *testing.T) {
		err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, configure: func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
			slots := programScaleFirewall(t, fb, scaleFWRules)
			lacking := slices.DeleteFunc(slices.Clone(scaleFWRules), func(r scaleFWRule) bool { return r.name == "o6-deny-in" })
			return scaleFWOracle(lacking, slots), slots
		}})
		if err == nil || !(strings.Contains(err.Error(), "drop_fw_") || strings.Contains(err.Error(), "firewall rule")) {
			t.Fatalf("an IPv6 firewall miscount went unnoticed: %v", err)
		}
		t.Logf("caught, as it must be: %.300s", err)
	})
}

// The harness judges the IPv6 VIPs' outputs: an oracle that knows one
// encap backend fewer than the edge has (the udp listener's, on
// otherHost) must fail the run on NVGRE to that host, and one whose nat
// backend has another port on the translated destination port; a
// deliberately wrong verdict stands for a wrong program.
func TestScaleFuzzEdgeCatchesIPv6VIPEscapes(t *testing.T) {
	t.Setenv("AZG_FUZZ_PACKETS", "30000")
	for _, c := range []struct {
		name, want string
		vip6       func(map[netip.Addr]dpfuzz.VIP6)
	}{
		{"encap to a host the VIP has no backend on", "no encap backend of the VIP", func(m map[netip.Addr]dpfuzz.VIP6) {
			m[addr(vip6s)] = dpfuzz.VIP6{Encap: []dpfuzz.Binding{{Host: addr(hostAddr), VSID: vsid}}}
		}},
		{"DNAT66 to a port the VIP's backend has not", "no nat backend of the VIP", func(m map[netip.Addr]dpfuzz.VIP6) {
			m[addr(vipN6)] = dpfuzz.VIP6{NAT: []dpfuzz.NATBackend6{{Addr: addr(beA6), Port: 8081}, {Addr: addr(beA6)}}}
		}},
		{"DNAT66 where only encap may come out", "no nat backend", func(m map[netip.Addr]dpfuzz.VIP6) {
			m[addr(vipN6)] = dpfuzz.VIP6{Encap: []dpfuzz.Binding{{Host: addr(hostAddr), VSID: vsid}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, vip6: c.vip6})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("a wrong IPv6 VIP output went unnoticed: %.600v", err)
			}
			t.Logf("caught, as it must be: %.300s", err)
		})
	}
}

// The harness holds NVGRE over IPv6 to the edge: with ul6Stranger named
// a host (an EIP bound to it, as PutRoutes names an IPv6 host) while the
// oracle knows no host of the IPv6 underlay, the edge decapsulates the
// seeds' packets from it, and the run must fail on them.
func TestScaleFuzzEdgeCatchesUl6Escapes(t *testing.T) {
	t.Setenv("AZG_FUZZ_PACKETS", "30000")
	err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, configure: func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
		if err := fb.edge.PutRoutes(map[netipAddr]Route{addr(ul6StrangerEIP): {Host: addr(ul6Stranger), VSID: vsid, StatsIdx: 20}}); err != nil {
			t.Fatal(err)
		}
		return nil, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "NVGRE over IPv6 to the edge from no host") {
		t.Fatalf("NVGRE over IPv6 from an unknown host decapsulated, unnoticed: %.600v", err)
	}
	t.Logf("caught, as it must be: %.300s", err)
}

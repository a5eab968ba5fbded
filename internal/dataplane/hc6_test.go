package dataplane

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// Health checks through the tunnel of IPv6 guests (issue 21; bpf/lib/hc.h
// hc6_reply and tc_edge_hc's IPv6 half, bpf/lib/agenthc.h hc6_guest).

const (
	hc6Addr  = "2001:db8:ffff::1" // the edge's IPv6 health-check address
	hc6Guest = agentPriv6         // the checked guest's IPv6 address
	hcMark6  = 0xa2700002
	// The inner destination MAC of a probe to hc6Guest: 02:00 and its
	// last four bytes (as an IPv6 EIP's).
	hc6GuestMAC = "02:00:00:00:00:05"
)

// hc6Probe is the TCP SYN the checker sends (traffic class 0x10).
func hc6Probe() []byte {
	ip := ip6Hdr(hc6Addr, hc6Guest, nhTCP, tcp6(40123, 80, 0x02))
	ip[0], ip[1] = 0x61, 0x00
	return ip
}

// hc6Key is the GRE key of an IPv6 probe ip: the VSID and the FlowID of
// its 5-tuple.
func hc6Key(ip []byte) uint32 {
	src, _ := netip.AddrFromSlice(ip[8:24])
	dst, _ := netip.AddrFromSlice(ip[24:40])
	tu := flowhash.Tuple{Src: src, Dst: dst, Proto: ip[6]}
	if ip[6] == nhTCP || ip[6] == nhUDP {
		tu.SrcPort, tu.DstPort = binary.BigEndian.Uint16(ip[40:]), binary.BigEndian.Uint16(ip[42:])
	}
	return uint32(vsid)<<8 | uint32(flowhash.FlowID6(tu, testSeed))
}

// newHC6EdgeBed is newEdge6Bed checking hcGuest (IPv4, mark hcMark) and
// hc6Guest (IPv6, mark hcMark6) on hostAddr from hcAddr and hc6Addr.
func newHC6EdgeBed(t *testing.T) *edgeBed {
	b := newEdge6Bed(t)
	if err := b.edge.SetHealthAddress(addr(hcAddr)); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetHealthAddress6(addr(hc6Addr)); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetHealthTargets(map[uint32]HealthTarget{
		hcMark:  {Host: addr(hostAddr), Guest: addr(hcGuest), VSID: vsid},
		hcMark6: {Host: addr(hostAddr), Guest: addr(hc6Guest), VSID: vsid},
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// An IPv6 probe from HC6 with an IPv6 guest's mark leaves in NVGRE over
// IPv4 to the mark's host, byte for byte (the key's FlowID from the
// 5-tuple, the outer TOS the traffic class, inner MAC 02:00 and the
// guest's last four bytes, ethertype IPv6, the packet untouched); an
// unknown mark, another source or destination are dropped under their
// counters; the API refuses what the maps cannot hold.
func TestHealthProbeEncap6(t *testing.T) {
	b := newHC6EdgeBed(t)
	prog := b.edge.HealthProgram()
	probe := hc6Probe()
	frame := eth6("02:dd:00:00:00:01", "02:dd:00:00:00:01", false, probe)
	want := nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, hostAddr, hc6Key(probe), 0x10, eth6(gwMAC, hc6GuestMAC, false, probe))
	ret, out := runTC(t, b.env, prog, dptest.UlDev, hcMark6, frame)
	if ret != tcActRedirect {
		t.Fatalf("probe: action %d, want TC_ACT_REDIRECT", ret)
	}
	if d := diffBytes(want, out[:len(want)]); d != "" {
		writePcap(t, t.Name(), map[string][]byte{"input": frame, "expected": want, "got": out})
		t.Fatalf("probe: %s\n%s", d, decode(out).Dump())
	}
	if n := hcStat(t, b.edge, "hc_probe_tx"); n != 1 {
		t.Errorf("hc_probe_tx %d, want 1", n)
	}
	// The IPv4 guest's probe is as it was.
	p4 := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40123, dport: 80, syn: true}
	if ret, _ := runTC(t, b.env, prog, dptest.UlDev, hcMark, p4.frame(t, "02:dd:00:00:00:01", "02:dd:00:00:00:01")); ret != tcActRedirect {
		t.Errorf("IPv4 probe: action %d, want TC_ACT_REDIRECT", ret)
	}

	udp := ip6Hdr(hc6Addr, hc6Guest, nhUDP, udp6(40124, 7000, 4))
	wantUDP := nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, hostAddr, hc6Key(udp), 0, eth6(gwMAC, hc6GuestMAC, false, udp))
	if ret, out := runTC(t, b.env, prog, dptest.UlDev, hcMark6, eth6("02:dd:00:00:00:01", "02:dd:00:00:00:01", false, udp)); ret != tcActRedirect {
		t.Errorf("udp probe: action %d, want TC_ACT_REDIRECT", ret)
	} else if d := diffBytes(wantUDP, out[:len(wantUDP)]); d != "" {
		t.Errorf("udp probe: %s", d)
	}

	drops := []struct {
		name string
		mark uint32
		ip   []byte
		stat string
	}{
		{"unknown mark", hcMark6 + 7, probe, "hc_drop_no_mark"},
		{"no mark (a kernel RST)", 0, probe, "hc_drop_no_mark"},
		{"an IPv4 guest's mark on an IPv6 packet", hcMark, probe, "hc_drop_no_mark"},
		{"source not HC6", hcMark6, ip6Hdr("2001:db8:ffff::2", hc6Guest, nhTCP, tcp6(40123, 80, 0x02)), "hc_drop_bad"},
		{"destination not the mark's guest", hcMark6, ip6Hdr(hc6Addr, "2001:db8:f0::6", nhTCP, tcp6(40123, 80, 0x02)), "hc_drop_bad"},
		{"a router solicitation", 0, ip6Hdr("fe80::1", "ff02::2", 58, icmp6(133, 4)), "hc_drop_no_mark"},
	}
	for _, d := range drops {
		t.Run(d.name, func(t *testing.T) {
			before := hcStat(t, b.edge, d.stat)
			ret, _ := runTC(t, b.env, prog, dptest.UlDev, d.mark, eth6("02:dd:00:00:00:01", "02:dd:00:00:00:01", false, d.ip))
			if ret != tcActShot {
				t.Errorf("action %d, want TC_ACT_SHOT", ret)
			}
			if n := hcStat(t, b.edge, d.stat) - before; n != 1 {
				t.Errorf("%s +%d, want +1", d.stat, n)
			}
		})
	}
	// An IPv6 probe with HC6 unset.
	if err := b.edge.SetHealthAddress6(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	before := hcStat(t, b.edge, "hc_drop_bad")
	if ret, _ := runTC(t, b.env, prog, dptest.UlDev, hcMark6, frame); ret != tcActShot || hcStat(t, b.edge, "hc_drop_bad") != before+1 {
		t.Errorf("probe with HC6 unset: action %d (want TC_ACT_SHOT), hc_drop_bad +%d", ret, hcStat(t, b.edge, "hc_drop_bad")-before)
	}

	for _, a := range []string{"fd00::1", "::ffff:198.18.255.1", "fe80::1", "198.18.255.1"} {
		if err := b.edge.SetHealthAddress6(addr(a)); err == nil {
			t.Errorf("SetHealthAddress6(%s): no error", a)
		}
	}
	for _, g := range []string{"::198.19.21.1", "::ffff:198.19.21.1"} {
		if err := b.edge.SetHealthTargets(map[uint32]HealthTarget{hcMark6: {Host: addr(hostAddr), Guest: addr(g), VSID: vsid}}); err == nil {
			t.Errorf("SetHealthTargets(guest %s): no error", g)
		}
	}
	// Replacing the targets removes the IPv6 guest's mark and peer.
	if err := b.edge.SetHealthTargets(map[uint32]HealthTarget{hcMark: {Host: addr(hostAddr), Guest: addr(hcGuest), VSID: vsid}}); err != nil {
		t.Fatal(err)
	}
	if n, p := entries(t, b.edge.objs.HcMarks6), entries(t, b.edge.objs.HcPeers); n != 0 || p != 1 {
		t.Errorf("after dropping the IPv6 target: hc_marks6 %d entries, hc_peers %d; want 0 and 1", n, p)
	}
}

// Over the IPv6 underlay: an IPv6 and an IPv4 guest's probes to a host of
// the IPv6 underlay leave in NVGRE over IPv6 byte for byte (nvgreOver6:
// flow label the key's low 20 bits, traffic class the probe's); the
// answer of the IPv6 guest, in NVGRE over IPv6 from that host, goes up to
// a probe socket, the host named as its routes name it.
func TestHealthUl6(t *testing.T) {
	b := newUl6Bed(t)
	if err := b.edge.SetHealthAddress(addr(hcAddr)); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetHealthAddress6(addr(hc6Addr)); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetHealthTargets(map[uint32]HealthTarget{
		hcMark:  {Host: addr(host6), Guest: addr(hcGuest), VSID: vsid},
		hcMark6: {Host: addr(host6), Guest: addr(hc6Guest), VSID: vsid},
	}); err != nil {
		t.Fatal(err)
	}
	prog := b.edge.HealthProgram()
	probe := hc6Probe()
	want := nvgreOver6(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, host6, hc6Key(probe), 0x10, eth6(gwMAC, hc6GuestMAC, false, probe))
	ret, out := runTC(t, b.env, prog, dptest.UlDev, hcMark6, eth6("02:dd:00:00:00:01", "02:dd:00:00:00:01", false, probe))
	if ret != tcActRedirect {
		t.Fatalf("IPv6 probe: action %d, want TC_ACT_REDIRECT", ret)
	}
	if d := diffBytes(want, out[:len(want)]); d != "" {
		t.Fatalf("IPv6 probe: %s\n%s", d, decode(out).Dump())
	}
	p4 := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40123, dport: 80, syn: true, tos: 0x10}
	key4 := uint32(vsid)<<8 | uint32(flowhash.FlowID(flowhash.Tuple{Src: addr(hcAddr), Dst: addr(hcGuest),
		SrcPort: 40123, DstPort: 80, Proto: 6}, testSeed))
	g := addr(hcGuest).As4()
	want4 := nvgreOver6(dptest.UlMAC, dptest.FabMAC, dptest.UlAddr6, host6, key4, 0x10,
		ethFrame(t, gwMAC, "02:00:"+hex2(g[0])+":"+hex2(g[1])+":"+hex2(g[2])+":"+hex2(g[3]), p4.ip(t)))
	ret, out = runTC(t, b.env, prog, dptest.UlDev, hcMark, p4.frame(t, "02:dd:00:00:00:01", "02:dd:00:00:00:01"))
	if ret != tcActRedirect {
		t.Fatalf("IPv4 probe: action %d, want TC_ACT_REDIRECT", ret)
	}
	if d := diffBytes(want4, out[:len(want4)]); d != "" {
		t.Fatalf("IPv4 probe: %s\n%s", d, decode(out).Dump())
	}

	hc6Sockets(t, b.env)
	reply := ip6Hdr(hc6Guest, hc6Addr, nhTCP, tcp6(80, 40123, 0x12))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "the IPv6 guest's answer over the IPv6 underlay goes up", dev: dptest.UlDev,
			in: fromHostUl6(host6, vsid<<8|0x21, eth6(guestMAC6, gwMAC, false, reply)), action: xdpPass,
			out: eth6(dptest.FabMAC, dptest.UlMAC, false, reply), stats: map[string]uint64{"pass_hc_reply": 1}},
		{name: "from another IPv6 host", dev: dptest.UlDev,
			in: fromHostUl6(host6Small, vsid<<8|0x21, eth6(guestMAC6, gwMAC, false, reply)), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
	})
}

// The IPv6 guest's answer in NVGRE from its host goes up to the kernel
// without the outer headers when a probe socket takes it (TCP and UDP);
// every other packet to HC6 is dropped under drop_spoof and its health
// counter: from a (host, VSID, guest) not checked, to the edge's own
// services or a port no probe is connected on, ICMPv6, with an extension
// header, and outside the tunnel from either side.
func TestHealthReply6Fixtures(t *testing.T) {
	b := newHC6EdgeBed(t)
	hc6Sockets(t, b.env)
	key := uint32(vsid<<8 | 0x21)
	reply := ip6Hdr(hc6Guest, hc6Addr, nhTCP, tcp6(80, 40123, 0x12))
	udpReply := ip6Hdr(hc6Guest, hc6Addr, nhUDP, udp6(7000, 40124, 4))
	up := func(ip []byte) []byte { return eth6(dptest.FabMAC, dptest.UlMAC, false, ip) }
	from := func(host string, key uint32, ip []byte) []byte { return fromHost6(t, host, key, ip) }
	ssh := ip6Hdr(hc6Guest, hc6Addr, nhTCP, tcp6(80, 22, 0x02))
	snmp := ip6Hdr(hc6Guest, hc6Addr, nhUDP, udp6(7000, 161, 4))
	noSock := ip6Hdr(hc6Guest, hc6Addr, nhTCP, tcp6(80, 40199, 0x10))
	udpOther := ip6Hdr(hc6Guest, hc6Addr, nhUDP, udp6(7001, 40124, 4))
	ping := ip6Hdr(hc6Guest, hc6Addr, 58, icmp6(128, 8))
	withExt := ip6Hdr(hc6Guest, hc6Addr, 60, cat(optHdr(nhTCP, 1), tcp6(80, 40123, 0x10)))
	other := ip6Hdr("2001:db8:f0::6", hc6Addr, nhTCP, tcp6(80, 40123, 0x12))
	direct := ip6Hdr(v6Client, hc6Addr, nhTCP, tcp6(80, 40123, 0x12))

	fixtures := []fixture{
		{name: "tcp answer of a checked guest goes up", dev: dptest.UlDev, in: from(hostAddr, key, reply),
			action: xdpPass, out: up(reply), stats: map[string]uint64{"pass_hc_reply": 1}},
		{name: "udp answer of a checked guest goes up", dev: dptest.UlDev, in: from(hostAddr, key, udpReply),
			action: xdpPass, out: up(udpReply), stats: map[string]uint64{"pass_hc_reply": 1}},
		{name: "a checked guest's SYN to the edge's sshd", dev: dptest.UlDev, in: from(hostAddr, key, ssh),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a checked guest's udp to the edge's snmpd", dev: dptest.UlDev, in: from(hostAddr, key, snmp),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "tcp to a port with no socket", dev: dptest.UlDev, in: from(hostAddr, key, noSock),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "udp from another port of the guest", dev: dptest.UlDev, in: from(hostAddr, key, udpOther),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a checked guest's ping to HC6", dev: dptest.UlDev, in: from(hostAddr, key, ping),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "an answer with an extension header", dev: dptest.UlDev, in: from(hostAddr, key, withExt),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "the guest's address from another host", dev: dptest.UlDev, in: from(otherHost, key, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "the guest and host, another VSID", dev: dptest.UlDev, in: from(hostAddr, 6000<<8, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "another guest of the host", dev: dptest.UlDev, in: from(hostAddr, key, other),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to HC6 from the Internet side", dev: dptest.ExtDev, in: eth6(dptest.RtrMAC, dptest.ExtMAC, false, direct),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to HC6 from the underlay outside the tunnel", dev: dptest.UlDev, in: eth6(dptest.FabMAC, dptest.UlMAC, false, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "nvgre to HC6 from the Internet side", dev: dptest.ExtDev,
			in:     nvgre(t, dptest.RtrMAC, dptest.ExtMAC, hostAddr, dptest.UlAddr, key, 0, eth6(guestMAC6, gwMAC, false, reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
	for name, want := range map[string]uint64{"hc_reply_pass": 2, "hc_drop_no_sock": 6, "hc_drop_peer": 3, "hc_drop_direct": 2} {
		if n := hcStat(t, b.edge, name); n != want {
			t.Errorf("%s %d, want %d", name, n, want)
		}
	}

	// The IPv4 guest's answer still goes up (hc_peers holds both).
	r4 := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 40123, ttl: 64}
	hcSockets(t, b.env)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{{name: "the IPv4 guest's answer", dev: dptest.UlDev,
		in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, key, 0, ethFrame(t, "02:cc:00:00:00:02", gwMAC, r4.ip(t))),
		action: xdpPass, out: ethFrame(t, dptest.FabMAC, dptest.UlMAC, r4.ip(t)), stats: map[string]uint64{"pass_hc_reply": 1}}})

	// HC6 unset: the same answer is spoofing like any other, and a packet
	// to the address is the kernel's.
	if err := b.edge.SetHealthAddress6(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "checks off", dev: dptest.UlDev, in: from(hostAddr, key, reply), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "checks off, from the Internet side", dev: dptest.ExtDev, in: eth6(dptest.RtrMAC, dptest.ExtMAC, false, direct),
			action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
	})
}

// The agent delivers an IPv6 probe to a checked port of a guest's own
// IPv6 address on its VSID, untranslated, records its flow pinned to the
// probing edge, and sends the guest's answer back in NVGRE to that edge,
// its source still the guest's address; anything else to the address
// (another port or protocol, ICMPv6, another VSID, a guest not checked,
// from no edge) is dropped.
func TestAgentHealthCheck6(t *testing.T) {
	env, a, g1 := newAgentSvc6Bed(t)
	checked := []HealthGuest{{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoTCP, Port: 80},
		{Guest: addr(hc6Guest), VSID: vsid, Proto: ProtoTCP, Port: 80, Ifindex: g1},
		{Guest: addr(hc6Guest), VSID: vsid, Proto: ProtoUDP, Port: 7000, Ifindex: g1}}
	if err := a.SetHealthGuests(checked); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []HealthGuest{{Guest: addr(hc6Guest), VSID: vsid, Proto: ProtoTCP, Port: 80},
		{Guest: addr(hc6Guest), VSID: vsid, Proto: 58, Port: 80, Ifindex: g1}} {
		if err := a.SetHealthGuests([]HealthGuest{bad}); err == nil {
			t.Errorf("SetHealthGuests(%+v): no error", bad)
		}
		if err := NewFakeAgent().SetHealthGuests([]HealthGuest{bad}); err == nil {
			t.Errorf("fake SetHealthGuests(%+v): no error", bad)
		}
	}
	if err := a.SetHealthGuests(checked); err != nil {
		t.Fatal(err)
	}
	key := uint32(vsid<<8 | 7)
	fromEdge := func(edge string, key uint32, p pkt6) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edge, dptest.UlAddr, key, 0, eth6(gwMAC, hc6GuestMAC, false, p.ip()))
	}
	toGuest := func(p pkt6) []byte { return eth6(dptest.GuestMAC, dptest.VMMAC, false, p.ip()) }
	probe := pkt6{src: hc6Addr, dst: hc6Guest, proto: nhTCP, sport: 40123, dport: 80}
	probeAck := probe
	probeAck.tcpFlags = 0x10
	udpProbe := pkt6{src: hc6Addr, dst: hc6Guest, proto: nhUDP, sport: 40124, dport: 7000}
	ssh := pkt6{src: hc6Addr, dst: hc6Guest, proto: nhTCP, sport: 40125, dport: 22}
	udpTo80 := pkt6{src: hc6Addr, dst: hc6Guest, proto: nhUDP, sport: 40126, dport: 80}
	ping := pkt6{src: hc6Addr, dst: hc6Guest, proto: 58, icmpType: 128}
	frag := pkt6{src: hc6Addr, dst: hc6Guest, proto: nhUDP, fragOff: 10}
	notChecked := pkt6{src: hc6Addr, dst: svc6Priv6B, proto: nhTCP, sport: 40127, dport: 80}

	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "tcp probe delivered as it is", dev: dptest.UlDev, in: fromEdge(edgeB, key, probe), action: xdpRedirect,
			out: toGuest(probe), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "its ACK writes no entry", dev: dptest.UlDev, in: fromEdge(edgeB, key, probeAck), action: xdpRedirect,
			out: toGuest(probeAck), stats: map[string]uint64{"decap_tx": 1}},
		{name: "udp probe to the checked udp port", dev: dptest.UlDev, in: fromEdge(edgeA, key, udpProbe), action: xdpRedirect,
			out: toGuest(udpProbe), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "port 22 of a checked guest", dev: dptest.UlDev, in: fromEdge(edgeB, key, ssh), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "udp to the checked tcp port", dev: dptest.UlDev, in: fromEdge(edgeB, key, udpTo80), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a ping to a checked guest", dev: dptest.UlDev, in: fromEdge(edgeB, key, ping), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a later fragment", dev: dptest.UlDev, in: fromEdge(edgeB, key, frag), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "the checked port of a guest not checked", dev: dptest.UlDev, in: fromEdge(edgeB, key, notChecked), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "probe on another VSID", dev: dptest.UlDev, in: fromEdge(edgeB, 6000<<8|7, probe), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "probe from no edge", dev: dptest.UlDev, in: fromEdge("198.18.9.9", key, probe), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
	})
	flows, err := a.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	wantTCP := AgentFlow{Guest: netip.MustParseAddrPort("[" + hc6Guest + "]:80"), Remote: netip.MustParseAddrPort("[" + hc6Addr + "]:40123"),
		Proto: nhTCP, Public: netip.MustParseAddrPort("[" + hc6Guest + "]:80"), Edge: addr(edgeB), VSID: vsid, Ifindex: g1,
		Group: AgentGroupPin}
	found := 0
	for _, f := range flows {
		if f.Guest.Addr() != addr(hc6Guest) || f.Remote.Addr() != addr(hc6Addr) {
			continue
		}
		found++
		if f.Proto == nhTCP && f != wantTCP {
			t.Errorf("probe's flow %+v, want %+v", f, wantTCP)
		}
	}
	if found != 2 {
		t.Errorf("flows %+v: want the tcp and the udp probe's", flows)
	}

	// The answers: back to the probing edge, untranslated.
	synack := pkt6{src: hc6Guest, dst: hc6Addr, proto: nhTCP, sport: 80, dport: 40123, tcpFlags: 0x12}
	udpAns := pkt6{src: hc6Guest, dst: hc6Addr, proto: nhUDP, sport: 7000, dport: 40124}
	fromGuest := func(p pkt6) []byte { return eth6(dptest.VMMAC, dptest.GuestMAC, false, p.ip()) }
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "the tcp answer goes back to the probing edge untranslated", dev: dptest.GuestDev, in: fromGuest(synack),
			action: xdpRedirect, out: svc6Encap(t, synack, edgeB), stats: map[string]uint64{"encap_tx": 1}},
		{name: "the udp answer to its edge", dev: dptest.GuestDev, in: fromGuest(udpAns),
			action: xdpRedirect, out: svc6Encap(t, udpAns, edgeA), stats: map[string]uint64{"encap_tx": 1}},
	})
}

// hc6Sockets gives the bed's namespace what a checking edge has for
// IPv6: a TCP probe connected from [HC6]:40123 to the guest's port 80, a
// UDP probe from [HC6]:40124 connected to its port 7000 (both addresses
// local on lo), and services of the edge's own on the wildcard address:
// a TCP listener on port 22 and a UDP socket on port 161.
func hc6Sockets(t *testing.T, env *dptest.Env) { probeSockets(t, env, hc6Addr, hc6Guest) }

// entries counts a map's entries.
func entries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	n := 0
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// With nat mode on, an IPv6 packet to no EIP or VIP goes to the nat
// replies' path first (lb6_nat_reverse): one to HC6 that is no nat reply
// is dropped there (drop_spoof, hc_drop_direct), any other passed as
// before.
func TestHealthDirect6NAT(t *testing.T) {
	b := newNAT6Bed(t)
	if err := b.edge.SetHealthAddress6(addr(hc6Addr)); err != nil {
		t.Fatal(err)
	}
	direct := ip6Hdr(v6Client, hc6Addr, nhTCP, tcp6(80, 40123, 0x12))
	other := ip6Hdr(v6Client, "2001:db8:ffff::9", nhTCP, tcp6(80, 40123, 0x12))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "to HC6 from the Internet side, nat mode on", dev: dptest.ExtDev, in: eth6(dptest.RtrMAC, dptest.ExtMAC, false, direct),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to another address, nat mode on", dev: dptest.ExtDev, in: eth6(dptest.RtrMAC, dptest.ExtMAC, false, other),
			action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
	})
	if n := hcStat(t, b.edge, "hc_drop_direct"); n != 1 {
		t.Errorf("hc_drop_direct %d, want 1", n)
	}
}

package dataplane

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// Health checks through the tunnel (bpf/lib/hc.h, bpf/lib/agenthc.h).

const (
	hcAddr        = "198.18.255.1"   // the edge's health-check address
	hcGuest       = dptest.GuestAddr // the checked guest's private address
	hcMark        = 0xa2700001
	tcActShot     = 2
	tcActRedirect = 7
)

// skbCtx is the head of struct __sk_buff up to ifindex: what
// BPF_PROG_TEST_RUN takes for a tc program (mark and ifindex set, the
// rest zero).
type skbCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto uint32
	Priority, IngressIfindex, Ifindex                                           uint32
}

// runTC runs the tc program once on frame as if it left dev with mark.
func runTC(t *testing.T, env *dptest.Env, prog *ebpf.Program, dev string, mark uint32, frame []byte) (uint32, []byte) {
	t.Helper()
	idx, err := env.Node.Ifindex(dev)
	if err != nil {
		t.Fatal(err)
	}
	var ret uint32
	var out []byte
	err = env.Node.Do(func() error {
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
			Context: skbCtx{Mark: mark, Ifindex: uint32(idx)}}
		r, err := prog.Run(opts)
		ret, out = r, opts.DataOut
		return err
	})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, out
}

func newHCEdgeBed(t *testing.T) *edgeBed {
	b := newEdgeBed(t)
	if err := b.edge.SetHealthAddress(addr(hcAddr)); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetHealthTargets(map[uint32]HealthTarget{
		hcMark: {Host: addr(hostAddr), Guest: addr(hcGuest), VSID: vsid},
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

func hcStat(t *testing.T, e *Edge, name string) uint64 {
	t.Helper()
	s, err := e.HealthStats()
	if err != nil {
		t.Fatal(err)
	}
	return s[name].Packets
}

// A marked probe from the health-check address leaves in NVGRE to the
// mark's host, with the guest's VSID, out of the underlay interface; an
// unknown mark, another source or destination, and non-IPv4 are dropped.
func TestHealthProbeEncap(t *testing.T) {
	b := newHCEdgeBed(t)
	if n := b.edge.objs.HcStats.MaxEntries(); int(n) != len(hcStatNames) {
		t.Fatalf("hc_stats has %d slots (HC_STAT_MAX), hcStatNames %d names", n, len(hcStatNames))
	}
	prog := b.edge.HealthProgram()
	probe := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40123, dport: 80, syn: true, tos: 0x10}
	frame := probe.frame(t, "02:dd:00:00:00:01", "02:dd:00:00:00:01")
	key := uint32(vsid)<<8 | uint32(flowhash.FlowID(flowhash.Tuple{Src: addr(hcAddr), Dst: addr(hcGuest),
		SrcPort: 40123, DstPort: 80, Proto: 6}, testSeed))
	g := addr(hcGuest).As4()
	innerDst := "02:00:" + hex2(g[0]) + ":" + hex2(g[1]) + ":" + hex2(g[2]) + ":" + hex2(g[3])
	want := nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, hostAddr, key, 0x10, ethFrame(t, gwMAC, innerDst, probe.ip(t)))

	ret, out := runTC(t, b.env, prog, dptest.UlDev, hcMark, frame)
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

	udp := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolUDP, sport: 40124, dport: 7000}
	if ret, _ := runTC(t, b.env, prog, dptest.UlDev, hcMark, udp.frame(t, "02:dd:00:00:00:01", "02:dd:00:00:00:01")); ret != tcActRedirect {
		t.Errorf("udp probe: action %d, want TC_ACT_REDIRECT", ret)
	}

	drops := []struct {
		name string
		mark uint32
		f    flow
		stat string
	}{
		{"unknown mark", hcMark + 1, probe, "hc_drop_no_mark"},
		{"no mark (a kernel RST)", 0, probe, "hc_drop_no_mark"},
		{"source not the health-check address", hcMark, withSrc(probe, "198.18.0.1"), "hc_drop_bad"},
		{"destination not the mark's guest", hcMark, withDst(probe, "198.19.21.3"), "hc_drop_bad"},
	}
	for _, d := range drops {
		t.Run(d.name, func(t *testing.T) {
			before := hcStat(t, b.edge, d.stat)
			ret, _ := runTC(t, b.env, prog, dptest.UlDev, d.mark, d.f.frame(t, "02:dd:00:00:00:01", "02:dd:00:00:00:01"))
			if ret != tcActShot {
				t.Errorf("action %d, want TC_ACT_SHOT", ret)
			}
			if n := hcStat(t, b.edge, d.stat) - before; n != 1 {
				t.Errorf("%s +%d, want +1", d.stat, n)
			}
		})
	}
	arp := make([]byte, 60)
	copy(arp, mac("ff:ff:ff:ff:ff:ff"))
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if ret, _ := runTC(t, b.env, prog, dptest.UlDev, hcMark, arp); ret != tcActShot {
		t.Errorf("ARP: action %d, want TC_ACT_SHOT", ret)
	}
}

// The guest's answer in NVGRE from its host goes up to the kernel without
// the outer headers when a probe socket takes it; an answer from a backend
// not checked, an answer to another address, a packet to the health-check
// address outside the tunnel, and a checked guest's packet to a port of the
// edge no probe socket is connected on (a listener's, a wildcard UDP
// socket's, none) are dropped.
func TestHealthReplyFixtures(t *testing.T) {
	b := newHCEdgeBed(t)
	hcSockets(t, b.env)
	key := uint32(vsid<<8 | 0x21)
	reply := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 40123, ttl: 64}
	inner := func(f flow) []byte { return ethFrame(t, "02:cc:00:00:00:02", gwMAC, f.ip(t)) }
	fromHost := func(host string, key uint32, in []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, in)
	}
	// Up to the kernel as if it arrived on the underlay interface.
	up := ethFrame(t, dptest.FabMAC, dptest.UlMAC, reply.ip(t))
	udpReply := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolUDP, sport: 7000, dport: 40124}
	sshSyn := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 22, syn: true}
	snmp := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolUDP, sport: 7000, dport: 161}
	noSock := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 40199}
	udpOtherPort := udpReply
	udpOtherPort.sport = 7001
	ping := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolICMPv4}

	fixtures := []fixture{
		{name: "reply of a checked backend goes up", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(reply)),
			action: xdpPass, out: up, stats: map[string]uint64{"pass_hc_reply": 1}},
		{name: "udp reply of a checked backend goes up", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(udpReply)),
			action: xdpPass, out: ethFrame(t, dptest.FabMAC, dptest.UlMAC, udpReply.ip(t)), stats: map[string]uint64{"pass_hc_reply": 1}},
		{name: "a checked guest's SYN to the edge's sshd", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(sshSyn)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a checked guest's udp to the edge's snmpd", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(snmp)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a checked guest's tcp to a port with no socket", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(noSock)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "udp from another port of the checked guest", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(udpOtherPort)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a checked guest's ping to the health-check address", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(ping)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "same guest address from another host", dev: dptest.UlDev, in: fromHost(otherHost, key, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "same guest and host, another VSID", dev: dptest.UlDev, in: fromHost(hostAddr, 6000<<8, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "another guest of the host", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(withSrc(reply, "198.19.21.3"))),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a guest's packet to another private address", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(withDst(reply, "198.18.255.2"))),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to the health-check address from the Internet side", dev: dptest.ExtDev,
			in: withSrc(reply, client).frame(t, dptest.RtrMAC, dptest.ExtMAC), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "to the health-check address from the underlay outside the tunnel", dev: dptest.UlDev,
			in: reply.frame(t, dptest.FabMAC, dptest.UlMAC), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "nvgre to the health-check address from the Internet side", dev: dptest.ExtDev,
			in:     nvgre(t, dptest.RtrMAC, dptest.ExtMAC, hostAddr, dptest.UlAddr, key, 0, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
	if n := hcStat(t, b.edge, "hc_reply_pass"); n != 2 {
		t.Errorf("hc_reply_pass %d, want 2", n)
	}
	if n := hcStat(t, b.edge, "hc_drop_no_sock"); n != 5 {
		t.Errorf("hc_drop_no_sock %d, want 5", n)
	}
	if n := hcStat(t, b.edge, "hc_drop_peer"); n != 3 {
		t.Errorf("hc_drop_peer %d, want 3", n)
	}
	if n := hcStat(t, b.edge, "hc_drop_direct"); n != 2 {
		t.Errorf("hc_drop_direct %d, want 2", n)
	}

	// Tunnel checks off: the same reply is spoofing like any other.
	if err := b.edge.SetHealthAddress(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{{name: "checks off", dev: dptest.UlDev,
		in: fromHost(hostAddr, key, inner(reply)), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}}})
}

// The agent delivers a probe to a guest's own address on its VSID,
// untranslated, records the flow, and sends the guest's answer back in
// NVGRE to the edge that sent the probe, its source still the private
// address (no SNAT to the guest's EIP).
func TestAgentHealthCheck(t *testing.T) {
	env, a := newAgentBed(t)
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		t.Fatal(err)
	}
	// The guest is a service backend (the only guests edges check).
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(hcGuest), VSID: vsid, StatsIdx: agentIdx, Ifindex: uint32(g1), Service: true}); err != nil {
		t.Fatal(err)
	}
	// Its checked ports: tcp/80 (an http check) and udp/7000.
	if err := a.SetHealthGuests([]HealthGuest{{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoTCP, Port: 80},
		{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoUDP, Port: 7000}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []HealthGuest{{Guest: addr(hcGuest), VSID: vsid, Proto: 1, Port: 80}, {Guest: addr(hcGuest), VSID: vsid, Proto: ProtoTCP}} {
		if err := a.SetHealthGuests([]HealthGuest{bad}); err == nil {
			t.Errorf("SetHealthGuests(%+v): no error", bad)
		}
	}
	if err := a.SetHealthGuests([]HealthGuest{{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoTCP, Port: 80},
		{Guest: addr(hcGuest), VSID: vsid, Proto: ProtoUDP, Port: 7000}}); err != nil {
		t.Fatal(err)
	}
	// A guest of the host that is no checked backend (no EIP, no
	// service): nothing reaches its private address through the tunnel.
	if err := a.SetIfAddrs([]IfAddr{{Ifindex: uint32(g1), Addr: addr(hcGuest)}, {Ifindex: uint32(g1), Addr: addr("198.19.21.3")}}); err != nil {
		t.Fatal(err)
	}
	probe := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40123, dport: 80, syn: true}
	g := addr(hcGuest).As4()
	innerDst := "02:00:" + hex2(g[0]) + ":" + hex2(g[1]) + ":" + hex2(g[2]) + ":" + hex2(g[3])
	fromEdge := func(edge string, key uint32, f flow) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edge, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, innerDst, f.ip(t)))
	}
	probeAck := probe
	probeAck.syn = false
	udpProbe := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolUDP, sport: 40124, dport: 7000}
	ssh := flow{src: "203.0.113.9", dst: hcGuest, proto: layers.IPProtocolTCP, sport: 40125, dport: 22, syn: true}
	udpTo80 := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolUDP, sport: 40126, dport: 80}
	ping := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolICMPv4}
	frag := flow{src: hcAddr, dst: hcGuest, proto: layers.IPProtocolTCP, fragOff: 10}
	synack := flow{src: hcGuest, dst: hcAddr, proto: layers.IPProtocolTCP, sport: 80, dport: 40123}

	fixtures := []fixture{
		{name: "probe delivered as it is", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, probe), action: xdpRedirect,
			out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, probe.ip(t)), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "a probe's ACK writes no entry", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, probeAck), action: xdpRedirect,
			out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, probeAck.ip(t)), stats: map[string]uint64{"decap_tx": 1}},
		{name: "udp probe to the checked udp port", dev: dptest.UlDev, in: fromEdge(edgeA, vsid<<8|7, udpProbe), action: xdpRedirect,
			out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, udpProbe.ip(t)), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}},
		{name: "the Internet's address to port 22 of a checked guest", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, ssh), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "udp to the checked tcp port", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, udpTo80), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a ping to a checked guest", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, ping), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "a fragment to a checked port", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, frag), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "port 22 of a guest that is no checked backend", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, withDst(ssh, "198.19.21.3")), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "the checked port of a guest that is no checked backend", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, withDst(probe, "198.19.21.3")), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "probe on another VSID", dev: dptest.UlDev, in: fromEdge(edgeB, 6000<<8|7, probe), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "probe to an address that is no guest here", dev: dptest.UlDev, in: fromEdge(edgeB, vsid<<8|7, withDst(probe, "198.19.21.5")),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "probe from no edge", dev: dptest.UlDev, in: fromEdge("198.18.9.9", vsid<<8|7, probe), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "answer goes back to the probing edge untranslated", dev: dptest.GuestDev,
			in: synack.frame(t, dptest.VMMAC, dptest.GuestMAC), action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1},
			check: func(t *testing.T, out []byte) {
				if got := netip.AddrFrom4([4]byte(out[14+16 : 14+20])); got != addr(edgeB) {
					t.Errorf("outer destination %v, want the probing edge %s", got, edgeB)
				}
				if k := binary.BigEndian.Uint32(out[14+20+4:]) >> 8; k != vsid {
					t.Errorf("VSID %d, want %d", k, vsid)
				}
				inner := out[14+20+8+14:]
				if got := netip.AddrFrom4([4]byte(inner[12:16])); got != addr(hcGuest) {
					t.Errorf("inner source %v, want the guest's own %s (no SNAT)", got, hcGuest)
				}
				if d := diffBytes(synack.ip(t), inner[:len(synack.ip(t))]); d != "" {
					t.Errorf("inner packet changed: %s", d)
				}
			}},
	}
	n := len(fixtures) - 1
	runFixtures(t, env, agentProg{a: a}, a, fixtures[:n])
	runFixtures(t, env, agentProg{a: a, guest: true}, a, fixtures[n:])
	if flows, err := a.Flows(0); err != nil || len(flows) != 2 {
		t.Fatalf("flows %+v %v, want the tcp and the udp probe's", flows, err)
	}
}

// hcSockets gives the edge bed's namespace what a checking edge has: a
// TCP probe connected from the health-check address port 40123 to the
// guest's port 80, a UDP probe from port 40124 connected to its port 7000
// (both addresses local on lo, so the connection is real), and services of
// the edge's own on the health-check address: a TCP listener on port 22
// and a UDP socket on the wildcard address port 161.
func hcSockets(t *testing.T, env *dptest.Env) { probeSockets(t, env, hcAddr, hcGuest) }

// probeSockets is hcSockets for either family: from health-check address
// hc to guest, both put on lo.
func probeSockets(t *testing.T, env *dptest.Env, hc, guest string) {
	t.Helper()
	v, host, bits, any := "4", netip.MustParseAddr(hc), "/32", "0.0.0.0"
	if host.Is6() {
		v, bits, any = "6", "/128", "::"
	}
	for _, a := range []string{hc + bits, guest + bits} {
		if err := env.Node.Addr("lo", a); err != nil {
			t.Fatal(err)
		}
	}
	lo, err := env.Node.Handle().LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Node.Handle().LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	// An IPv6 address's local route comes with its DAD's completion, on
	// the kernel's workqueue even without DAD (IFA_F_NODAD): on a loaded
	// machine a socket bound at once can find no route yet (connect:
	// network is unreachable). Wait for both, bounded (IPv4's are there
	// at once).
	for _, a := range []string{hc, guest} {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			rs, err := env.Node.Handle().RouteGet(net.ParseIP(a))
			if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s on lo: no local route after 5 s (%v, %v)", a, rs, err)
			}
		}
	}
	var closers []io.Closer
	t.Cleanup(func() {
		for _, c := range closers {
			c.Close()
		}
	})
	hcIP, guestIP := net.ParseIP(hc), net.ParseIP(guest)
	err = env.Node.Do(func() error {
		web, err := net.Listen("tcp"+v, net.JoinHostPort(guest, "80"))
		if err != nil {
			return err
		}
		closers = append(closers, web)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: hcIP, Port: 40123}}
		c, err := d.Dial("tcp"+v, net.JoinHostPort(guest, "80"))
		if err != nil {
			return err
		}
		closers = append(closers, c)
		u, err := net.DialUDP("udp"+v, &net.UDPAddr{IP: hcIP, Port: 40124}, &net.UDPAddr{IP: guestIP, Port: 7000})
		if err != nil {
			return err
		}
		closers = append(closers, u)
		ssh, err := net.Listen("tcp"+v, net.JoinHostPort(any, "22"))
		if err != nil {
			return err
		}
		closers = append(closers, ssh)
		snmp, err := net.ListenPacket("udp"+v, net.JoinHostPort(any, "161"))
		if err != nil {
			return err
		}
		closers = append(closers, snmp)
		return nil
	})
	if err != nil {
		t.Fatalf("IPv%s health-check sockets: %v", v, err)
	}
}

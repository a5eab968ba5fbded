package dataplane

import (
	"net"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

const (
	testSeed  = 0x5eed1234
	gwMAC     = "02:00:00:00:00:fe"
	client    = "203.0.113.10"
	eip       = "198.51.100.7"
	eipIdx    = 7
	hostAddr  = "198.18.21.1"
	vsid      = 5001
	eipNoNbr  = "198.51.100.8" // bound to a host behind an unresolved gateway
	eipHole   = "198.51.100.9" // bound to a host behind a blackhole route
	eipOther  = "198.51.100.10"
	otherHost = "198.18.31.1"
)

// edgeBed is the edge program loaded next to the test bed namespaces.
type edgeBed struct {
	env  *dptest.Env
	edge *Edge
}

func newEdgeBed(t testing.TB) *edgeBed { return newEdgeBedWith(t, LoadOptions{EIPMax: 1024}) }

// newEdgeBedWith is newEdgeBed with the program loaded with o.
func newEdgeBedWith(t testing.TB, o LoadOptions) *edgeBed {
	t.Helper()
	requireRoot(t)
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	e, err := LoadEdge(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ul, err := env.Node.Ifindex(dptest.UlDev)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC), UnderlayIfindex: uint32(ul),
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.PutRoutes(map[netipAddr]Route{
		addr(eip):      {Host: addr(hostAddr), VSID: vsid, StatsIdx: eipIdx},
		addr(eipNoNbr): {Host: addr("198.19.250.9"), VSID: vsid, StatsIdx: 8},
		addr(eipHole):  {Host: addr("198.19.251.9"), VSID: vsid, StatsIdx: 9},
		addr(eipOther): {Host: addr(otherHost), VSID: 6000, StatsIdx: 10},
	}); err != nil {
		t.Fatal(err)
	}
	return &edgeBed{env: env, edge: e}
}

// fixture is one packet through the program: input, expected action,
// expected output bytes and counter deltas.
type fixture struct {
	name   string
	dev    string // ingress interface
	in     []byte
	action uint32
	// out is the expected frame; nil with PASS means "unchanged", nil
	// otherwise means "not compared" (see check).
	out   []byte
	stats map[string]uint64
	// eip, when set, is the per-EIP counter slot and its expected deltas.
	eipSlot *uint32
	eipRx   uint64
	eipTx   uint64
	eipSyn  *uint64 // rx_syns delta (SYNs without ACK, DDoS detection); nil: not checked
	check   func(t *testing.T, out []byte)
}

func ptr[T any](v T) *T { return &v }

func runFixtures(t *testing.T, env *dptest.Env, prog progRunner, maps statReader, fs []fixture) {
	for _, f := range fs {
		t.Run(f.name, func(t *testing.T) {
			before, err := maps.Stats()
			if err != nil {
				t.Fatal(err)
			}
			var eipBefore Counters
			if f.eipSlot != nil {
				eipBefore, _ = maps.EIPStats(*f.eipSlot)
			}
			res, err := env.Run(prog.prog(), f.dev, f.in)
			if err != nil {
				t.Fatal(err)
			}
			want := f.out
			if want == nil && f.action == xdpPass {
				want = f.in
			}
			failed := false
			if res.Action != f.action {
				t.Errorf("action %s, want %s", actionNames[res.Action], actionNames[f.action])
				failed = true
			}
			if want != nil && res.Action == f.action {
				if d := diffBytes(want, res.Out); d != "" {
					t.Errorf("output differs from expected: %s\n%s", d, decode(res.Out).Dump())
					failed = true
				}
			}
			if f.check != nil && res.Action == f.action {
				f.check(t, res.Out)
				failed = failed || t.Failed()
			}
			after, err := maps.Stats()
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range StatNames() {
				got := after[name].Packets - before[name].Packets
				if got != f.stats[name] {
					t.Errorf("counter %s: +%d, want +%d", name, got, f.stats[name])
					failed = true
				}
			}
			if f.eipSlot != nil {
				c, _ := maps.EIPStats(*f.eipSlot)
				if f.eipSyn != nil && c.RxSyns-eipBefore.RxSyns != *f.eipSyn {
					t.Errorf("EIP slot %d rx_syns +%d, want +%d", *f.eipSlot, c.RxSyns-eipBefore.RxSyns, *f.eipSyn)
					failed = true
				}
				if c.RxPackets-eipBefore.RxPackets != f.eipRx || c.TxPackets-eipBefore.TxPackets != f.eipTx {
					t.Errorf("EIP slot %d counters: rx +%d tx +%d, want rx +%d tx +%d", *f.eipSlot,
						c.RxPackets-eipBefore.RxPackets, c.TxPackets-eipBefore.TxPackets, f.eipRx, f.eipTx)
					failed = true
				}
			}
			if failed {
				writePcap(t, t.Name(), map[string][]byte{"input": f.in, "expected": want, "got": res.Out})
			}
		})
	}
}

type progRunner interface{ prog() *ebpfProgram }

type statReader interface {
	Stats() (map[string]Count, error)
	EIPStats(uint32) (Counters, error)
}

// encapOf is the frame the edge must emit for an Internet packet to eip.
func encapOf(t *testing.T, f flow, host string, vsid uint32) []byte {
	in := f.ip(t)
	tuple := flowhash.Tuple{Src: addr(f.src), Dst: addr(f.dst), Proto: uint8(f.proto)}
	if !f.mf && f.fragOff == 0 && (f.proto == layers.IPProtocolTCP || f.proto == layers.IPProtocolUDP) {
		tuple.SrcPort, tuple.DstPort = f.sport, f.dport
	}
	key := vsid<<8 | uint32(flowhash.FlowID(tuple, testSeed))
	d := addr(f.dst).As4()
	innerDst := "02:00:" + hex2(d[0]) + ":" + hex2(d[1]) + ":" + hex2(d[2]) + ":" + hex2(d[3])
	inner := ethFrame(t, gwMAC, innerDst, decTTL(in))
	return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, host, key, f.tos, inner)
}

func hex2(b byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[b>>4], h[b&0xf]})
}

func TestEdgeFixtures(t *testing.T) {
	b := newEdgeBed(t)
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	slot := ptr[uint32](eipIdx)

	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, df: true, tos: 0x10}
	synAck := syn
	synAck.ack = true
	udp := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}
	ping := flow{src: client, dst: eip, proto: layers.IPProtocolICMPv4}
	opts := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2,
		options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}}
	firstFrag := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 7, dport: 9, mf: true, payload: make([]byte, 64)}
	laterFrag := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, fragOff: 9, payload: make([]byte, 40)}
	big := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1480-28)}
	bigNoDF := big
	bigNoDF.df = false
	fits := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1458-28)}
	ttl1 := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 33434, dport: 33435, ttl: 1}

	padded := append(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 3, dport: 4, payload: []byte{}}), make([]byte, 6)...)

	vlan := ser(t,
		&layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4},
		&layersPayload{udp.ip(t)})

	good := fromInet(syn)
	// The kernel will not run XDP on less than 14 bytes, so the shortest
	// malformed frames are a VLAN ethertype with no tag behind it and a
	// stack deeper than the two tags we parse.
	vlanCut := append(append([]byte(nil), good[:12]...), 0x81, 0x00, 0x00)
	qinqinq := append(append([]byte(nil), good[:12]...), 0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3, 0x08, 0x00)
	qinqinq = append(qinqinq, good[14:]...)
	badCsum := append([]byte(nil), good...)
	badCsum[14+10] ^= 0xff
	ihl4 := append([]byte(nil), good...)
	ihl4[14] = 0x44
	v6inv4 := append([]byte(nil), good...)
	v6inv4[14] = 0x65
	longTot := append([]byte(nil), good...)
	longTot[14+2], longTot[14+3] = 0x05, 0xdc // 1500 > frame
	setIPCsum(longTot[14:])
	shortTot := append([]byte(nil), good...)
	shortTot[14+2], shortTot[14+3] = 0, 16 // < header length
	setIPCsum(shortTot[14:])
	tcpTrunc := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2})
	tcpTrunc = tcpTrunc[:14+20+12]
	tcpTrunc[14+2], tcpTrunc[14+3] = 0, 32
	setIPCsum(tcpTrunc[14:])
	martian := fromInet(flow{src: "127.0.0.1", dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2})

	arp := ser(t, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(dptest.RtrAddr),
			DstHwAddress: make([]byte, 6), DstProtAddress: ip4(dptest.ExtAddr)})
	v6 := ser(t, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolNoNextHeader, HopLimit: 64, SrcIP: netipIP("2001:db8::1"), DstIP: netipIP("2001:db8::2")})

	fixtures := []fixture{
		{name: "tcp syn to EIP is encapsulated", dev: dptest.ExtDev, in: good, action: xdpRedirect,
			out: encapOf(t, syn, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1, eipSyn: ptr[uint64](1)},
		{name: "syn-ack to EIP is not counted as a SYN", dev: dptest.ExtDev, in: fromInet(synAck), action: xdpRedirect,
			out: encapOf(t, synAck, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1, eipSyn: ptr[uint64](0)},
		{name: "udp to EIP", dev: dptest.ExtDev, in: fromInet(udp), action: xdpRedirect,
			out: encapOf(t, udp, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1, eipSyn: ptr[uint64](0)},
		{name: "icmp echo to EIP", dev: dptest.ExtDev, in: fromInet(ping), action: xdpRedirect,
			out: encapOf(t, ping, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "ip options are carried", dev: dptest.ExtDev, in: fromInet(opts), action: xdpRedirect,
			out: encapOf(t, opts, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "first fragment hashed without ports", dev: dptest.ExtDev, in: fromInet(firstFrag), action: xdpRedirect,
			out: encapOf(t, firstFrag, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "later fragment follows the first", dev: dptest.ExtDev, in: fromInet(laterFrag), action: xdpRedirect,
			out: encapOf(t, laterFrag, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "packet that just fits the underlay MTU", dev: dptest.ExtDev, in: fromInet(fits), action: xdpRedirect,
			out: encapOf(t, fits, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "ethernet padding is not encapsulated", dev: dptest.ExtDev, in: padded, action: xdpRedirect,
			out:   encapOf(t, flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 3, dport: 4, payload: []byte{}}, hostAddr, vsid),
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "vlan tagged packet to EIP", dev: dptest.ExtDev, in: vlan, action: xdpRedirect,
			out: encapOf(t, udp, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "too big with DF gets fragmentation needed", dev: dptest.ExtDev, in: fromInet(big), action: xdpTX,
			check: icmpCheck(big, 3, 4, 1458), stats: map[string]uint64{"icmp_frag_tx": 1}, eipSlot: slot},
		{name: "too big without DF is dropped", dev: dptest.ExtDev, in: fromInet(bigNoDF), action: xdpDrop,
			stats: map[string]uint64{"drop_too_big": 1}, eipSlot: slot},
		{name: "expired TTL gets time exceeded", dev: dptest.ExtDev, in: fromInet(ttl1), action: xdpTX,
			check: icmpCheck(ttl1, 11, 0, 0), stats: map[string]uint64{"icmp_ttl_tx": 1}, eipSlot: slot},
		{name: "not an EIP goes to the kernel untouched", dev: dptest.ExtDev,
			in: fromInet(flow{src: client, dst: "198.51.100.99", proto: layers.IPProtocolTCP, sport: 1, dport: 2}), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "arp goes to the kernel", dev: dptest.ExtDev, in: arp, action: xdpPass, stats: map[string]uint64{"pass_non_ip": 1}},
		{name: "ipv6 goes to the kernel", dev: dptest.ExtDev, in: v6, action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}},
		{name: "vlan tag cut off", dev: dptest.ExtDev, in: vlanCut, action: xdpDrop, stats: map[string]uint64{"drop_eth_trunc": 1}},
		{name: "three vlan tags", dev: dptest.ExtDev, in: qinqinq, action: xdpDrop, stats: map[string]uint64{"drop_eth_trunc": 1}},
		{name: "truncated ip header", dev: dptest.ExtDev, in: good[:14+12], action: xdpDrop, stats: map[string]uint64{"drop_ip_trunc": 1}},
		{name: "total length beyond frame", dev: dptest.ExtDev, in: longTot, action: xdpDrop, stats: map[string]uint64{"drop_ip_trunc": 1}},
		{name: "total length below header", dev: dptest.ExtDev, in: shortTot, action: xdpDrop, stats: map[string]uint64{"drop_ip_bad": 1}},
		{name: "ihl below 5", dev: dptest.ExtDev, in: ihl4, action: xdpDrop, stats: map[string]uint64{"drop_ip_bad": 1}},
		{name: "version 6 in an ipv4 frame", dev: dptest.ExtDev, in: v6inv4, action: xdpDrop, stats: map[string]uint64{"drop_ip_bad": 1}},
		{name: "bad header checksum", dev: dptest.ExtDev, in: badCsum, action: xdpDrop, stats: map[string]uint64{"drop_ip_csum": 1}},
		{name: "truncated tcp header", dev: dptest.ExtDev, in: tcpTrunc, action: xdpDrop, stats: map[string]uint64{"drop_l4_trunc": 1}},
		{name: "loopback source", dev: dptest.ExtDev, in: martian, action: xdpDrop, stats: map[string]uint64{"drop_ip_martian": 1}},
		{name: "host behind unresolved next hop", dev: dptest.ExtDev,
			in: fromInet(flow{src: client, dst: eipNoNbr, proto: layers.IPProtocolUDP, sport: 1, dport: 2}), action: xdpDrop,
			stats: map[string]uint64{"drop_no_neigh": 1}},
		{name: "host behind blackhole", dev: dptest.ExtDev,
			in: fromInet(flow{src: client, dst: eipHole, proto: layers.IPProtocolUDP, sport: 1, dport: 2}), action: xdpDrop,
			stats: map[string]uint64{"drop_fib": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

func TestEdgeDecapFixtures(t *testing.T) {
	b := newEdgeBed(t)
	slot := ptr[uint32](eipIdx)
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	inner := func(f flow) []byte { return ethFrame(t, "02:cc:00:00:00:02", gwMAC, f.ip(t)) }
	fromHost := func(host string, key uint32, in []byte) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, in)
	}
	key := uint32(vsid<<8 | 0x5a)
	want := ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(reply.ip(t)))

	badFlags := fromHost(hostAddr, key, inner(reply))
	badFlags[14+20] |= 0x80 // checksum-present bit
	wrongProto := fromHost(hostAddr, key, inner(reply))
	wrongProto[14+20+2], wrongProto[14+20+3] = 0x08, 0x00
	innerV6 := fromHost(hostAddr, key, inner(reply))
	innerV6[14+20+8+12], innerV6[14+20+8+13] = 0x86, 0xdd
	innerTrunc := fromHost(hostAddr, key, inner(reply)[:14+10])
	innerCsum := fromHost(hostAddr, key, inner(reply))
	innerCsum[14+20+8+14+10] ^= 0x55
	// Outer packet shorter than the inner one claims.
	innerLong := fromHost(hostAddr, key, inner(flow{src: eip, dst: client, proto: layers.IPProtocolUDP, sport: 1, dport: 2, payload: make([]byte, 100)}))
	innerLong = innerLong[:len(innerLong)-50]
	innerLong[14+2], innerLong[14+3] = byte((len(innerLong)-14)>>8), byte(len(innerLong)-14)
	setIPCsum(innerLong[14:])

	toNoNeigh := flow{src: eip, dst: "198.19.249.5", proto: layers.IPProtocolUDP, sport: 1, dport: 2}
	toDst := func(dst string) flow {
		return flow{src: eip, dst: dst, proto: layers.IPProtocolUDP, sport: 1, dport: 2}
	}
	noNeighOut := ethFrame(t, dptest.FabMAC, dptest.UlMAC, toNoNeigh.ip(t))

	fixtures := []fixture{
		{name: "reply from the bound host is decapsulated", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(reply)),
			action: xdpRedirect, out: want, stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "inner source not an EIP", dev: dptest.UlDev,
			in:     fromHost(hostAddr, key, inner(flow{src: "198.51.100.77", dst: client, proto: layers.IPProtocolTCP, sport: 1, dport: 2})),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "EIP bound to another host", dev: dptest.UlDev, in: fromHost(otherHost, key, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
		{name: "wrong VSID", dev: dptest.UlDev, in: fromHost(hostAddr, 6000<<8, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
		{name: "gre with checksum bit", dev: dptest.UlDev, in: badFlags, action: xdpDrop, stats: map[string]uint64{"drop_gre_bad": 1}},
		{name: "gre carrying ipv4 not ethernet", dev: dptest.UlDev, in: wrongProto, action: xdpDrop, stats: map[string]uint64{"drop_gre_bad": 1}},
		{name: "inner ipv6", dev: dptest.UlDev, in: innerV6, action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "inner truncated", dev: dptest.UlDev, in: innerTrunc, action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "inner bad checksum", dev: dptest.UlDev, in: innerCsum, action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "inner longer than outer", dev: dptest.UlDev, in: innerLong, action: xdpDrop, stats: map[string]uint64{"drop_inner_bad": 1}},
		{name: "inner ttl 1 is dropped", dev: dptest.UlDev,
			in:     fromHost(hostAddr, key, inner(flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 1, ttl: 1})),
			action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "gre to someone else goes to the kernel", dev: dptest.UlDev,
			in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, "198.18.0.99", key, 0, inner(reply)),
			action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "unresolved next hop hands the inner packet to the kernel", dev: dptest.UlDev,
			in: fromHost(hostAddr, key, inner(toNoNeigh)), action: xdpPass, out: noNeighOut,
			stats: map[string]uint64{"decap_pass": 1}, eipSlot: slot, eipTx: 1},
		{name: "nvgre arriving from the Internet side", dev: dptest.ExtDev,
			in:     nvgre(t, dptest.RtrMAC, dptest.ExtMAC, hostAddr, dptest.UlAddr, key, 0, inner(reply)),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "guest cannot reach the underlay router", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(toDst(dptest.FabAddr))),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "guest cannot reach the underlay behind an unresolved hop", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(toDst("198.19.250.5"))),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "limited broadcast destination", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(toDst("255.255.255.255"))),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "multicast destination", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(toDst("224.0.0.1"))),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "this-network destination", dev: dptest.UlDev, in: fromHost(hostAddr, key, inner(toDst("0.1.2.3"))),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

// icmpCheck validates an ICMP error built by the program about packet f.
func icmpCheck(f flow, typ, code uint8, mtu uint16) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		t.Helper()
		orig := f.ip(t)
		p := decode(out)
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		ic, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if eth == nil || ip == nil || ic == nil {
			t.Fatalf("not an ICMP packet:\n%s", p.Dump())
		}
		if eth.DstMAC.String() != dptest.RtrMAC || eth.SrcMAC.String() != dptest.ExtMAC {
			t.Errorf("ethernet %v -> %v, want back to the router", eth.SrcMAC, eth.DstMAC)
		}
		if ip.SrcIP.String() != dptest.ExtAddr || ip.DstIP.String() != f.src {
			t.Errorf("ICMP %v -> %v, want %s -> %s", ip.SrcIP, ip.DstIP, dptest.ExtAddr, f.src)
		}
		hdr := out[14 : 14+20]
		if csum(hdr) != 0 {
			t.Errorf("ICMP's IP header checksum is wrong")
		}
		icmp := out[14+20 : 14+int(ip.Length)]
		if csum(icmp) != 0 {
			t.Errorf("ICMP checksum is wrong")
		}
		if ic.TypeCode.Type() != typ || ic.TypeCode.Code() != code {
			t.Errorf("ICMP %v, want type %d code %d", ic.TypeCode, typ, code)
		}
		if typ == 3 && code == 4 {
			if got := uint16(icmp[6])<<8 | uint16(icmp[7]); got != mtu {
				t.Errorf("next-hop MTU %d, want %d", got, mtu)
			}
		}
		hl := int(orig[0]&0xf) * 4
		quote := orig[:hl+8]
		if got := icmp[8:]; string(got) != string(quote) {
			t.Errorf("quote %x, want the original header and 8 bytes %x", got, quote)
		}
		if len(out) != 14+int(ip.Length) {
			t.Errorf("frame is %d bytes, IP says %d", len(out), 14+int(ip.Length))
		}
	}
}

func TestEdgeICMPRateLimit(t *testing.T) {
	b := newEdgeBed(t)
	if err := b.edge.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1, ICMPBurst: 1, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	ttl1 := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, ttl: 1}
	in := ttl1.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "first error is sent", dev: dptest.ExtDev, in: in, action: xdpTX, check: icmpCheck(ttl1, 11, 0, 0),
			stats: map[string]uint64{"icmp_ttl_tx": 1}},
		{name: "second within the second is suppressed", dev: dptest.ExtDev, in: in, action: xdpDrop,
			stats: map[string]uint64{"drop_icmp_limit": 1}},
	})
	// Without the time-exceeded flag an expired TTL is a counted drop.
	if err := b.edge.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 10, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "time exceeded disabled", dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
	})
}

// TestNextHopCache: next hops are cached per CPU; a neighbour change is
// seen once the daemon invalidates the cache (it watches netlink).
func TestNextHopCache(t *testing.T) {
	b := newEdgeBed(t)
	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}
	in := syn.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	run := func() []byte {
		t.Helper()
		res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, in)
		if err != nil || res.Action != xdpRedirect {
			t.Fatalf("action %d err %v", res.Action, err)
		}
		return res.Out
	}
	if got := mac2(run()); got != dptest.FabMAC {
		t.Fatalf("next hop MAC %s, want %s", got, dptest.FabMAC)
	}
	const moved = "02:bb:00:00:00:99"
	if err := b.env.Node.Neigh(dptest.UlDev, dptest.FabAddr, moved); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != dptest.FabMAC {
		t.Fatalf("cache not used: MAC %s right after the change", got)
	}
	if err := b.edge.InvalidateNextHops(); err != nil {
		t.Fatal(err)
	}
	if got := mac2(run()); got != moved {
		t.Fatalf("after invalidation MAC %s, want %s", got, moved)
	}
}

func mac2(frame []byte) string { return mac6(frame[0:6]) }

func mac6(b []byte) string {
	return net.HardwareAddr(b).String()
}

package dataplane

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

const (
	edgeA    = "198.18.1.1"
	edgeB    = "198.18.1.2"
	agentIdx = 3
)

type agentProg struct {
	a     *Agent
	guest bool
}

func (p agentProg) prog() *ebpfProgram {
	if p.guest {
		return p.a.GuestProgram()
	}
	return p.a.UnderlayProgram()
}

// bedLocal is what the bed's guests may send to the host's kernel: UDP
// and ICMP to 198.18.5.0/24 (TestAgentLocalAllow sets its own).
var bedLocal = map[netip.Prefix][]LocalRule{
	netip.MustParsePrefix("198.18.5.0/24"): {{Proto: 17, Lo: 1, Hi: 65535}, {Proto: 1}},
}

func newAgentBed(t testing.TB) (*dptest.Env, *Agent) {
	t.Helper()
	requireRoot(t)
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: []netip.Addr{addr(edgeA), addr(edgeB)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	// Group 0 (the EIPs' and services' below): both edges.
	if err := a.SetGroup(0, AgentGroup{Members: []netip.Addr{addr(edgeA), addr(edgeB)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLocalAllow(bedLocal); err != nil {
		t.Fatal(err)
	}
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []AgentEIP{
		{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: uint32(g1)},
		{EIP: addr(eipNoNbr), Private: addr("198.19.21.3"), VSID: vsid, StatsIdx: 4, Ifindex: 999},
	} {
		if err := a.PutEIP(e); err != nil {
			t.Fatal(err)
		}
	}
	// The guest device may send from its own addresses only.
	// 198.19.21.99 is a second address of the port, without an EIP.
	if err := a.SetIfAddrs([]IfAddr{{Ifindex: uint32(g1), Addr: addr(dptest.GuestAddr)}, {Ifindex: uint32(g1), Addr: addr("198.19.21.99")}}); err != nil {
		t.Fatal(err)
	}
	return env, a
}

// withDst returns the flow with another destination (what DNAT makes of it).
func withDst(f flow, dst string) flow { f.dst = dst; return f }

func withSrc(f flow, src string) flow { f.src = src; return f }

func TestAgentUnderlayFixtures(t *testing.T) {
	env, a := newAgentBed(t)
	slot := ptr[uint32](agentIdx)
	key := uint32(vsid<<8 | 0x33)
	fromEdge := func(src string, key uint32, f flow) []byte {
		inner := ethFrame(t, gwMAC, "02:00:c6:33:64:07", f.ip(t))
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, src, dptest.UlAddr, key, 0, inner)
	}
	toGuest := func(f flow) []byte {
		return ethFrame(t, dptest.GuestMAC, dptest.VMMAC, withDst(f, dptest.GuestAddr).ip(t))
	}
	tcp := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, ttl: 63}
	udp := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1000, dport: 53, ttl: 63}
	ping := flow{src: client, dst: eip, proto: layers.IPProtocolICMPv4, ttl: 63}
	frag := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, fragOff: 100, ttl: 63}

	// UDP without checksum: zero must stay zero.
	udpNoCsum := udp.ip(t)
	udpNoCsum[20+6], udpNoCsum[20+7] = 0, 0
	udpNoCsumOut := withDst(udp, dptest.GuestAddr).ip(t)
	udpNoCsumOut[20+6], udpNoCsumOut[20+7] = 0, 0

	// An ICMP "fragmentation needed" from a router on the Internet about a
	// packet the guest sent (quoted with the EIP as its source).
	quoted := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, df: true}.ip(t)[:28]
	icmpErr := icmpError(t, "203.0.113.1", eip, 3, 4, 1400, quoted)
	quotedPriv := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, df: true}.ip(t)[:28]
	icmpErrOut := icmpError(t, "203.0.113.1", dptest.GuestAddr, 3, 4, 1400, quotedPriv)
	// Incremental update must equal a full recompute except the untouched
	// quoted L4 checksum, which both carry from the original packet.

	fixtures := []fixture{
		{name: "tcp for a local EIP is translated and delivered", dev: dptest.UlDev, in: fromEdge(edgeA, key, tcp),
			action: xdpRedirect, out: toGuest(tcp), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "udp", dev: dptest.UlDev, in: fromEdge(edgeB, key, udp),
			action: xdpRedirect, out: toGuest(udp), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "udp without checksum keeps none", dev: dptest.UlDev,
			in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, "02:00:c6:33:64:07", udpNoCsum)),
			action: xdpRedirect, out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, udpNoCsumOut), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "icmp echo", dev: dptest.UlDev, in: fromEdge(edgeA, key, ping),
			action: xdpRedirect, out: toGuest(ping), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "later fragment: only the ip header changes", dev: dptest.UlDev, in: fromEdge(edgeA, key, frag),
			action: xdpRedirect, out: toGuest(frag), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "icmp error about the guest's flow reaches the guest", dev: dptest.UlDev,
			in:     nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, "02:00:c6:33:64:07", icmpErr)),
			action: xdpRedirect, out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, icmpErrOut), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "nvgre from a stranger", dev: dptest.UlDev, in: fromEdge("198.18.9.9", key, tcp), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "EIP not hosted here", dev: dptest.UlDev, in: fromEdge(edgeA, key, withDst(tcp, "198.51.100.50")), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "wrong VSID", dev: dptest.UlDev, in: fromEdge(edgeA, 77<<8, tcp), action: xdpDrop,
			stats: map[string]uint64{"drop_unknown": 1}},
		{name: "plain traffic to the host goes to the kernel", dev: dptest.UlDev,
			in: flow{src: edgeA, dst: dptest.UlAddr, proto: layers.IPProtocolTCP, sport: 1, dport: 22}.frame(t, dptest.FabMAC, dptest.UlMAC), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
	}
	runFixtures(t, env, agentProg{a: a}, a, fixtures)
}

// icmpError builds an ICMP error IPv4 packet quoting q.
func icmpError(t testing.TB, src, dst string, typ, code uint8, mtu uint16, q []byte) []byte {
	body := make([]byte, 8+len(q))
	body[0], body[1] = typ, code
	body[6], body[7] = byte(mtu>>8), byte(mtu)
	copy(body[8:], q)
	c := csum(body)
	body[2], body[3] = byte(c>>8), byte(c)
	ip := make([]byte, 20, 20+len(body))
	ip[0] = 0x45
	tot := 20 + len(body)
	ip[2], ip[3] = byte(tot>>8), byte(tot)
	ip[8], ip[9] = 62, 1
	copy(ip[12:16], ip4(src))
	copy(ip[16:20], ip4(dst))
	setIPCsum(ip)
	return append(ip, body...)
}

func TestAgentGuestFixtures(t *testing.T) {
	env, a := newAgentBed(t)
	slot := ptr[uint32](agentIdx)
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	reply := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, df: true}
	encap := func(f flow) []byte {
		snat := withSrc(f, eip)
		tuple := flowhash.Tuple{Src: addr(eip), Dst: addr(f.dst), Proto: uint8(f.proto), SrcPort: f.sport, DstPort: f.dport}
		h := flowhash.Hash4(tuple, testSeed)
		edge := []string{edgeA, edgeB}[h%2]
		inner := ethFrame(t, dptest.VMMAC, gwMAC, snat.ip(t))
		return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, f.tos, inner)
	}
	udp := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 53, dport: 1000}
	big := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1500-28)}

	fixtures := []fixture{
		{name: "guest reply is translated and encapsulated to an edge", dev: dptest.GuestDev, in: fromGuest(reply),
			action: xdpRedirect, out: encap(reply), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "udp reply", dev: dptest.GuestDev, in: fromGuest(udp),
			action: xdpRedirect, out: encap(udp), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "a local destination a rule allows is left to the kernel", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "198.18.5.5")),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "guest address without an EIP opens no connection to the outside", dev: dptest.GuestDev, in: fromGuest(withSrc(udp, "198.19.21.99")),
			action: xdpDrop, stats: map[string]uint64{"drop_no_eip": 1}},
		{name: "guest address without an EIP reaches local destinations", dev: dptest.GuestDev, in: fromGuest(withDst(withSrc(udp, "198.19.21.99"), "198.18.5.5")),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "an address no guest of this port has is spoofing", dev: dptest.GuestDev, in: fromGuest(withSrc(udp, "198.19.21.77")),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "another guest's address on this port is spoofing", dev: dptest.GuestDev, in: fromGuest(withSrc(udp, "198.19.21.3")),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
		{name: "too big for the tunnel gets fragmentation needed", dev: dptest.GuestDev, in: fromGuest(big),
			action: xdpTX, check: guestICMPCheck(big, 1458), stats: map[string]uint64{"icmp_frag_tx": 1}, eipSlot: slot},
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, fixtures)

	// With no edge to send to, replies are counted drops.
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), HashSeed: testSeed}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetGroup(0, AgentGroup{}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "no edges", dev: dptest.GuestDev, in: fromGuest(reply), action: xdpDrop, stats: map[string]uint64{"drop_no_edge": 1}},
	})
}

func guestICMPCheck(f flow, mtu uint16) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		t.Helper()
		p := decode(out)
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ic, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if eth == nil || ic == nil || ip == nil {
			t.Fatalf("not ICMP:\n%s", p.Dump())
		}
		if eth.DstMAC.String() != dptest.VMMAC || ip.DstIP.String() != f.src || ip.SrcIP.String() != dptest.UlAddr {
			t.Errorf("ICMP not addressed back to the guest: %v %v -> %v", eth.DstMAC, ip.SrcIP, ip.DstIP)
		}
		if ic.TypeCode.Type() != 3 || ic.TypeCode.Code() != 4 {
			t.Errorf("ICMP %v, want fragmentation needed", ic.TypeCode)
		}
		icmp := out[34 : 14+int(ip.Length)]
		if csum(icmp) != 0 || csum(out[14:34]) != 0 {
			t.Errorf("bad checksums")
		}
		if got := uint16(icmp[6])<<8 | uint16(icmp[7]); got != mtu {
			t.Errorf("MTU %d, want %d", got, mtu)
		}
	}
}

// TestAgentEIPSwap: two EIPs trading guests leave each guest with its new
// EIP's entry, whatever the order of the writes.
func TestAgentEIPSwap(t *testing.T) {
	requireRoot(t)
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	x, y := addr("198.51.100.7"), addr("198.51.100.8")
	g1, g2 := addr("198.19.21.1"), addr("198.19.21.3")
	for _, order := range [][2]netipAddr{{x, y}, {y, x}} {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(a.PutEIP(AgentEIP{EIP: x, Private: g1, VSID: vsid}))
		must(a.PutEIP(AgentEIP{EIP: y, Private: g2, VSID: vsid}))
		for _, e := range order {
			priv := g1
			if e == x {
				priv = g2
			}
			must(a.PutEIP(AgentEIP{EIP: e, Private: priv, VSID: vsid}))
		}
		for priv, want := range map[netipAddr]netipAddr{g1: y, g2: x} {
			k, _ := keyOf(priv)
			var g agentAgentGuest
			if err := a.objs.AgentGuests.Lookup(akey(k), &g); err != nil || addrFrom(edgeIpAddr(g.Eip), g.Family) != want {
				t.Fatalf("order %v: guest %v -> %+v (%v), want %v", order, priv, g, err, want)
			}
		}
	}
}

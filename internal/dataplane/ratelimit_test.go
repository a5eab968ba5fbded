package dataplane

import (
	"bytes"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestEdgeRateLimitSource: an EIP's per-source limit drops a source's
// packets past its burst (counted as drop_rl_source, and in the EIP's
// limit counters); another source and another EIP are unaffected; limits
// added after traffic take effect at once (the route cache learns them);
// removed, nothing is dropped.
func TestEdgeRateLimitSource(t *testing.T) {
	b := newEdgeBed(t)
	slot := ptr[uint32](eipIdx)
	udp := func(src, dst string) []byte {
		return flow{src: src, dst: dst, proto: layers.IPProtocolUDP, sport: 5000, dport: 53}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	pass := func(name, src, dst string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: udp(src, dst), action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}}
	}
	drop := fixture{name: "the fourth within the second is dropped", dev: dptest.ExtDev, in: udp(client, eip), action: xdpDrop,
		stats: map[string]uint64{"drop_rl_source": 1}, eipSlot: slot}
	// Traffic before the limits: the route cache holds the EIP without them.
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{pass("before the limits", client, eip)})

	if err := b.edge.PutLimits(addr(eip), Limits{SourcePPS: 1, SourceBurst: 3}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		pass("first of the burst", client, eip),
		pass("second of the burst", client, eip),
		pass("third of the burst", client, eip),
		drop,
		pass("another source has its own bucket", "203.0.113.77", eip),
		pass("an EIP without limits is untouched", client, eipOther),
		pass("another EIP is untouched", client, eipOther),
	})
	c, ok, err := b.edge.LimitCounters(addr(eip))
	if err != nil || !ok || c.DroppedSource != 1 || c.DroppedSYN != 0 {
		t.Fatalf("limit counters %+v %v %v, want 1 dropped by source", c, ok, err)
	}
	got, err := b.edge.Limits()
	if err != nil || len(got) != 1 || got[addr(eip)] != (Limits{SourcePPS: 1, SourceBurst: 3}) {
		t.Fatalf("limits read back %v %v", got, err)
	}

	// Removed: the same source is forwarded again, however many.
	if err := b.edge.PutLimits(addr(eip), Limits{}); err != nil {
		t.Fatal(err)
	}
	var off []fixture
	for range 5 {
		off = append(off, pass("limits off: forwarded", client, eip))
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, off)
	if got, _ := b.edge.Limits(); len(got) != 0 {
		t.Fatalf("limits left after removal: %v", got)
	}
}

// TestEdgeSYNGuard: the SYN guard drops SYNs (without ACK) to an EIP past
// its burst, whatever their source (drop_rl_syn); the established
// traffic of the same sources, SYN-ACKs and UDP still pass.
func TestEdgeSYNGuard(t *testing.T) {
	b := newEdgeBed(t)
	if err := b.edge.PutLimits(addr(eip), Limits{SYNRate: 1, SYNBurst: 2}); err != nil {
		t.Fatal(err)
	}
	tcp := func(src string, syn, ack bool) []byte {
		return flow{src: src, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: syn, ack: ack}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	fwd := func(name string, in []byte) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}}
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		fwd("first SYN", tcp("203.0.113.1", true, false)),
		fwd("second SYN, another source", tcp("203.0.113.2", true, false)),
		{name: "third SYN, a third source: over the guard", dev: dptest.ExtDev, in: tcp("203.0.113.3", true, false),
			action: xdpDrop, stats: map[string]uint64{"drop_rl_syn": 1}},
		fwd("an ACK passes", tcp("203.0.113.3", false, true)),
		fwd("a SYN-ACK passes", tcp("203.0.113.3", true, true)),
		fwd("UDP passes", flow{src: "203.0.113.3", dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2}.frame(t, dptest.RtrMAC, dptest.ExtMAC)),
	})
	c, ok, err := b.edge.LimitCounters(addr(eip))
	if err != nil || !ok || c.DroppedSYN != 1 || c.DroppedSource != 0 {
		t.Fatalf("limit counters %+v %v %v, want 1 SYN dropped", c, ok, err)
	}
}

// TestEdgeRateLimitVIP: the same limits on a VIP, before the load
// balancer: a per-source limit and the SYN guard, each counted.
func TestEdgeRateLimitVIP(t *testing.T) {
	b := newLBBed(t)
	syn := func(src string, sport uint16) []byte {
		return flow{src: src, dst: vipNAT, proto: layers.IPProtocolTCP, sport: sport, dport: 80, syn: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	ack := func(src string, sport uint16) []byte {
		return flow{src: src, dst: vipNAT, proto: layers.IPProtocolTCP, sport: sport, dport: 80, ack: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	if err := b.edge.PutLimits(addr(vipNAT), Limits{SYNRate: 1, SYNBurst: 1}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "a SYN to the VIP", dev: dptest.ExtDev, in: syn(client, 40000), action: xdpRedirect, stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "the next SYN is over the guard", dev: dptest.ExtDev, in: syn("203.0.113.2", 40001), action: xdpDrop,
			stats: map[string]uint64{"drop_rl_syn": 1}},
		{name: "the first connection's ACK passes", dev: dptest.ExtDev, in: ack(client, 40000), action: xdpRedirect,
			stats: map[string]uint64{"lb_nat_tx": 1}},
	})
	if err := b.edge.PutLimits(addr(vipNAT), Limits{SourcePPS: 1, SourceBurst: 1}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "a source's first packet", dev: dptest.ExtDev, in: ack(client, 40000), action: xdpRedirect, stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "its second is over its rate", dev: dptest.ExtDev, in: ack(client, 40000), action: xdpDrop,
			stats: map[string]uint64{"drop_rl_source": 1}},
		{name: "the SYN guard is off now", dev: dptest.ExtDev, in: syn("203.0.113.3", 40002), action: xdpRedirect,
			stats: map[string]uint64{"lb_nat_tx": 1}},
	})
	c, _, err := b.edge.LimitCounters(addr(vipNAT))
	if err != nil || c.DroppedSYN != 1 || c.DroppedSource != 1 {
		t.Fatalf("VIP limit counters %+v %v: the SYN drop carries over a change of settings, and one by source", c, err)
	}
}

// TestEdgeICMPBudgetPerKind: a flood of expired TTLs exhausts the time
// exceeded budget and no other: "fragmentation needed" (path MTU
// discovery) is still sent.
func TestEdgeICMPBudgetPerKind(t *testing.T) {
	b := newEdgeBed(t)
	if err := b.edge.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1, ICMPBurst: 1, ICMPBudgets: map[ICMPKind]ICMPBudget{ICMPKindTTL: {Rate: 1, Burst: 2}},
		ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	ttl1 := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 33434, dport: 33435, ttl: 1}
	big := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1480-28)}
	in := ttl1.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	fs := []fixture{
		{name: "time exceeded 1", dev: dptest.ExtDev, in: in, action: xdpTX, check: icmpCheck(ttl1, 11, 0, 0), stats: map[string]uint64{"icmp_ttl_tx": 1}},
		{name: "time exceeded 2", dev: dptest.ExtDev, in: in, action: xdpTX, check: icmpCheck(ttl1, 11, 0, 0), stats: map[string]uint64{"icmp_ttl_tx": 1}},
	}
	for range 20 {
		fs = append(fs, fixture{name: "TTL flood: suppressed", dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{"drop_icmp_limit": 1}})
	}
	fs = append(fs,
		fixture{name: "fragmentation needed is still sent", dev: dptest.ExtDev, in: big.frame(t, dptest.RtrMAC, dptest.ExtMAC), action: xdpTX,
			check: icmpCheck(big, 3, 4, 1458), stats: map[string]uint64{"icmp_frag_tx": 1}},
		fixture{name: "its own budget (the default, burst 1) runs out too", dev: dptest.ExtDev, in: big.frame(t, dptest.RtrMAC, dptest.ExtMAC),
			action: xdpDrop, stats: map[string]uint64{"drop_icmp_limit": 1}},
	)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fs)
}

// TestEdgeICMPVLAN: an expired TTL or a packet too big behind one or two
// VLAN tags gets its ICMP error on the same VLAN (the tags kept).
func TestEdgeICMPVLAN(t *testing.T) {
	b := newEdgeBed(t)
	ttl1 := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 33434, dport: 33435, ttl: 1}
	big := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1480-28)}
	tagged := func(f flow, tags ...uint16) []byte {
		eth := &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeDot1Q}
		if len(tags) == 2 {
			eth.EthernetType = layers.EthernetTypeQinQ
			return ser(t, eth, &layers.Dot1Q{VLANIdentifier: tags[0], Type: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: tags[1], Type: layers.EthernetTypeIPv4}, &layersPayload{f.ip(t)})
		}
		return ser(t, eth, &layers.Dot1Q{VLANIdentifier: tags[0], Type: layers.EthernetTypeIPv4}, &layersPayload{f.ip(t)})
	}
	// vlanCheck: the tags are the input's; without them the frame is the
	// error icmpCheck expects.
	vlanCheck := func(in []byte, ntags int, f flow, typ, code uint8, mtu uint16) func(*testing.T, []byte) {
		return func(t *testing.T, out []byte) {
			t.Helper()
			n := 4 * ntags
			if len(out) < 14+n || !bytes.Equal(out[12:12+n], in[12:12+n]) {
				t.Fatalf("tags %x, want the input's %x", out[12:min(len(out), 12+n)], in[12:12+n])
			}
			icmpCheck(f, typ, code, mtu)(t, append(append([]byte(nil), out[:12]...), out[12+n:]...))
		}
	}
	one, two := tagged(ttl1, 42), tagged(ttl1, 100, 42)
	bigOne := tagged(big, 42)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "TTL 1 behind a VLAN tag", dev: dptest.ExtDev, in: one, action: xdpTX, check: vlanCheck(one, 1, ttl1, 11, 0, 0),
			stats: map[string]uint64{"icmp_ttl_tx": 1}},
		{name: "TTL 1 behind two tags (802.1ad)", dev: dptest.ExtDev, in: two, action: xdpTX, check: vlanCheck(two, 2, ttl1, 11, 0, 0),
			stats: map[string]uint64{"icmp_ttl_tx": 1}},
		{name: "too big behind a VLAN tag", dev: dptest.ExtDev, in: bigOne, action: xdpTX, check: vlanCheck(bigOne, 1, big, 3, 4, 1458),
			stats: map[string]uint64{"icmp_frag_tx": 1}},
	})
}

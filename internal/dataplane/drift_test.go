package dataplane

import (
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// Make-before-break drift (bpf/edge.c drift_pick, docs/dataplane.md "EIP
// drift"): an EIP whose route carries a previous binding.
const (
	eipDrift   = "198.51.100.20"
	eipDrift6  = "2001:db8:e1::20"
	driftIdx   = 20
	drift6Idx  = 21
	prevVSID   = 6000
	prevHostUl = otherHost // the host the EIPs moved from
)

// newDriftBed is newDecap6Bed with an IPv4 and an IPv6 EIP live on
// hostAddr (VSID vsid) that drift from otherHost (VSID prevVSID).
func newDriftBed(t *testing.T) *edgeBed {
	b := newDecap6Bed(t)
	if err := b.edge.PutRoutes(map[netipAddr]Route{
		addr(eipDrift):  {Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID},
		addr(eipDrift6): {Host: addr(hostAddr), VSID: vsid, StatsIdx: drift6Idx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID},
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDriftRoute: a route's previous binding is written and read back
// (RangeRoutes, Route); one without is not flagged; an IPv6 previous host
// and a VSID beyond 24 bits are refused.
func TestDriftRoute(t *testing.T) {
	b := newDriftBed(t)
	want := Route{Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID}
	got, ok, err := b.edge.Route(addr(eipDrift))
	if err != nil || !ok || got != want || !got.Drifts() {
		t.Errorf("Route(%s) = %+v %v %v, want %+v", eipDrift, got, ok, err, want)
	}
	all, err := b.edge.Routes()
	if err != nil {
		t.Fatal(err)
	}
	if all[addr(eipDrift)] != want {
		t.Errorf("Routes()[%s] = %+v, want %+v", eipDrift, all[addr(eipDrift)], want)
	}
	if r := all[addr(eip)]; r.Drifts() || r.PrevVSID != 0 {
		t.Errorf("route of %s without a previous binding reads %+v", eip, r)
	}
	// eip_prev holds the drifting routes' previous bindings only: a route
	// written without one, or deleted, takes its entry away.
	prevs := func() int {
		n := 0
		var k edgeEipKey
		var v edgeEipPrev
		for it := b.edge.objs.EipPrev.Iterate(); it.Next(&k, &v); {
			n++
		}
		return n
	}
	if n := prevs(); n != 2 {
		t.Errorf("eip_prev holds %d entries, want 2", n)
	}
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eipDrift): {Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx}}); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.DeleteRoutes([]netipAddr{addr(eipDrift6)}); err != nil {
		t.Fatal(err)
	}
	if n := prevs(); n != 0 {
		t.Errorf("eip_prev holds %d entries after the drift ended, want 0", n)
	}
	if got, _, _ := b.edge.Route(addr(eipDrift)); got.Drifts() {
		t.Errorf("route after the drift: %+v", got)
	}
	for name, r := range map[string]Route{
		"link-local previous host":   {Host: addr(hostAddr), VSID: 1, PrevHost: addr("fe80::1"), PrevVSID: 1},
		"previous host in 0.0.0.0/8": {Host: addr(hostAddr), VSID: 1, PrevHost: addr("0.0.0.5"), PrevVSID: 1},
		"previous VSID over 24 bits": {Host: addr(hostAddr), VSID: 1, PrevHost: addr(prevHostUl), PrevVSID: 1 << 24},
		"previous VSID without host": {Host: addr(hostAddr), VSID: 1, PrevVSID: 1},
		"all to no previous host":    {Host: addr(hostAddr), VSID: 1, PrevAll: true},
	} {
		if err := b.edge.PutRoutes(map[netipAddr]Route{addr("198.51.100.21"): r}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestDriftFixtures: to a drifting EIP from the Internet, a TCP segment of
// a flow whose SYN the edge did not see goes to the previous host and
// VSID (drift_prev_tx), a SYN goes to the live host and records its flow
// (drift_flow_new), whose later segments go live; UDP and ICMP go live;
// a guest's own SYN from the live host records its flow too, so the
// SYN-ACK goes live. From the underlay the previous host may send the
// EIP's packets, another host may not (drop_spoof), and an EIP without a
// previous binding is as before. Byte for byte, IPv4 and IPv6.
func TestDriftFixtures(t *testing.T) {
	b := newDriftBed(t)
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	slot := ptr[uint32](driftIdx)
	tcp := func(sport uint16, syn, ack bool) flow {
		return flow{src: client, dst: eipDrift, proto: layers.IPProtocolTCP, sport: sport, dport: 443, syn: syn, ack: ack, df: true}
	}
	live := func(name string, f flow, stats map[string]uint64) fixture {
		stats["encap_tx"] = 1
		return fixture{name: name, dev: dptest.ExtDev, in: fromInet(f), action: xdpRedirect, out: encapOf(t, f, hostAddr, vsid),
			stats: stats, eipSlot: slot, eipRx: 1}
	}
	prev := func(name string, f flow) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: fromInet(f), action: xdpRedirect, out: encapOf(t, f, prevHostUl, prevVSID),
			stats: map[string]uint64{"encap_tx": 1, "drift_prev_tx": 1}, eipSlot: slot, eipRx: 1}
	}
	none := func() map[string]uint64 { return map[string]uint64{} }

	// The host -> Internet side.
	reply := flow{src: eipDrift, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40001, ttl: 63}
	inner := func(f flow) []byte { return ethFrame(t, "02:cc:00:00:00:02", gwMAC, f.ip(t)) }
	fromHost := func(host string, key uint32, f flow) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, inner(f))
	}
	decap := func(f flow) []byte { return ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(f.ip(t))) }
	outSyn := flow{src: eipDrift, dst: client, proto: layers.IPProtocolTCP, sport: 50000, dport: 80, syn: true, ttl: 63}
	outSynPrev := outSyn
	outSynPrev.sport = 50001
	synAck := func(dport uint16) flow {
		return flow{src: client, dst: eipDrift, proto: layers.IPProtocolTCP, sport: 80, dport: dport, syn: true, ack: true, df: true}
	}
	plainReply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	plainAck := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40009, dport: 80}

	// The make-before-break delay (PrevAll, PREV_F_ALL): every packet
	// to the previous binding, no flow recorded, replies taken from both
	// hosts (another edge may already send new flows to the live one).
	holding := Route{Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID, PrevAll: true}
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eipDrift): holding}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.edge.Route(addr(eipDrift)); err != nil || got != holding {
		t.Fatalf("delay route reads %+v (%v), want %+v", got, err, holding)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		prev("delay: syn to the previous binding, not recorded", tcp(40100, true, false)),
		prev("delay: its ack too", tcp(40100, false, false)),
		prev("delay: udp to the previous binding", flow{src: client, dst: eipDrift, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}),
		prev("delay: icmp echo to the previous binding", flow{src: client, dst: eipDrift, proto: layers.IPProtocolICMPv4}),
		{name: "delay: reply from the previous host is decapsulated", dev: dptest.UlDev, in: fromHost(prevHostUl, prevVSID<<8|0x5a, reply),
			action: xdpRedirect, out: decap(reply), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "delay: reply from the live host is decapsulated", dev: dptest.UlDev, in: fromHost(hostAddr, vsid<<8|0x5a, reply),
			action: xdpRedirect, out: decap(reply), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "delay: a third host is spoof", dev: dptest.UlDev, in: fromHost("198.18.41.1", prevVSID<<8|0x5a, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
	})
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eipDrift): {Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID}}); err != nil {
		t.Fatal(err)
	}

	fixtures := []fixture{
		prev("after the delay: a flow begun in it stays on the previous host", tcp(40100, false, false)),
		prev("ack of a flow open at the move: previous host and VSID", tcp(40001, false, false)),
		live("syn: live host, flow recorded", tcp(40002, true, false), map[string]uint64{"drift_flow_new": 1}),
		live("ack of the recorded flow: live", tcp(40002, false, false), none()),
		live("syn retransmitted: live, recorded once", tcp(40002, true, false), none()),
		prev("syn-ack of a connection the previous guest opened: previous", synAck(40003)),
		live("udp: live", flow{src: client, dst: eipDrift, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}, none()),
		live("icmp echo: live", flow{src: client, dst: eipDrift, proto: layers.IPProtocolICMPv4}, none()),
		prev("a later segment of the open flow: still previous", tcp(40001, false, false)),
		prev("a TCP later fragment (no ports, never recorded): previous",
			flow{src: client, dst: eipDrift, proto: layers.IPProtocolTCP, fragOff: 9, payload: make([]byte, 40)}),
		{name: "reply from the previous host is decapsulated", dev: dptest.UlDev, in: fromHost(prevHostUl, prevVSID<<8|0x5a, reply),
			action: xdpRedirect, out: decap(reply), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "reply from the live host is decapsulated", dev: dptest.UlDev, in: fromHost(hostAddr, vsid<<8|0x5a, reply),
			action: xdpRedirect, out: decap(reply), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "previous host with another VSID: spoof", dev: dptest.UlDev, in: fromHost(prevHostUl, 6001<<8|0x5a, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
		{name: "a third host: spoof", dev: dptest.UlDev, in: fromHost("198.18.41.1", prevVSID<<8|0x5a, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
		{name: "the live guest's own syn records its flow", dev: dptest.UlDev, in: fromHost(hostAddr, vsid<<8|0x5a, outSyn),
			action: xdpRedirect, out: decap(outSyn), stats: map[string]uint64{"decap_tx": 1, "drift_flow_new": 1}, eipSlot: slot, eipTx: 1},
		live("its syn-ack: live", synAck(50000), none()),
		{name: "the previous guest's own syn records nothing", dev: dptest.UlDev, in: fromHost(prevHostUl, prevVSID<<8|0x5a, outSynPrev),
			action: xdpRedirect, out: decap(outSynPrev), stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		prev("its syn-ack: previous", synAck(50001)),
		// An EIP without a previous binding, as before the drift.
		{name: "no drift: ack to the bound host", dev: dptest.ExtDev, in: fromInet(plainAck), action: xdpRedirect,
			out: encapOf(t, plainAck, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](eipIdx), eipRx: 1},
		{name: "no drift: another host is spoof", dev: dptest.UlDev, in: fromHost(prevHostUl, prevVSID<<8|0x5a, plainReply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)

	// The drift ends: the route loses its previous binding, and the
	// flow open at the move goes to the live host, its previous host's
	// replies are spoofed.
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eipDrift): {Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx}}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		live("after the drift: the open flow's ack goes live", tcp(40001, false, false), none()),
		{name: "after the drift: the previous host is spoof", dev: dptest.UlDev, in: fromHost(prevHostUl, prevVSID<<8|0x5a, reply),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot},
	})
}

// TestDriftFixtures6 is TestDriftFixtures for an IPv6 EIP.
func TestDriftFixtures6(t *testing.T) {
	b := newDriftBed(t)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	slot := ptr[uint32](drift6Idx)
	tcp := func(sport uint16, flags uint8) []byte {
		return ip6Hdr(client6, eipDrift6, nhTCP, tcp6(sport, 443, flags))
	}
	live := func(name string, ip []byte, stats map[string]uint64) fixture {
		stats["encap_tx"] = 1
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpRedirect, out: encap6Of(t, ip, hostAddr, vsid),
			stats: stats, eipSlot: slot, eipRx: 1}
	}
	prev := func(name string, ip []byte) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpRedirect, out: encap6Of(t, ip, prevHostUl, prevVSID),
			stats: map[string]uint64{"encap_tx": 1, "drift_prev_tx": 1}, eipSlot: slot, eipRx: 1}
	}
	none := func() map[string]uint64 { return map[string]uint64{} }
	const syn, ack, synAck = 0x02, 0x10, 0x12
	reply := ip6Hdr(eipDrift6, client6, nhTCP, tcp6(443, 40001, ack))
	outSyn := ip6Hdr(eipDrift6, client6, nhTCP, tcp6(50000, 80, syn))
	decap := func(name, host string, key uint32, ip []byte, stats map[string]uint64) fixture {
		stats["decap_tx"] = 1
		return fixture{name: name, dev: dptest.UlDev, in: fromHost6(t, host, key, ip), action: xdpRedirect, out: decap6Out(ip),
			stats: stats, eipSlot: slot, eipTx: 1}
	}
	spoof := func(name, host string, key uint32, ip []byte) fixture {
		return fixture{name: name, dev: dptest.UlDev, in: fromHost6(t, host, key, ip), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}, eipSlot: slot}
	}
	fixtures := []fixture{
		prev("ack of a flow open at the move: previous", tcp(40001, ack)),
		live("syn: live, recorded", tcp(40002, syn), map[string]uint64{"drift_flow_new": 1}),
		live("ack of the recorded flow: live", tcp(40002, ack), none()),
		live("udp: live", ip6Hdr(client6, eipDrift6, nhUDP, udp6(5353, 53, 12)), none()),
		live("icmpv6 echo: live", ip6Hdr(client6, eipDrift6, nhICMPv6, icmp6(128, 12)), none()),
		decap("reply from the previous host", prevHostUl, prevVSID<<8|0x5a, reply, none()),
		decap("reply from the live host", hostAddr, vsid<<8|0x5a, reply, none()),
		spoof("previous host with another VSID", prevHostUl, 6001<<8|0x5a, reply),
		spoof("a third host", "198.18.41.1", prevVSID<<8|0x5a, reply),
		decap("the live guest's own syn records its flow", hostAddr, vsid<<8|0x5a, outSyn, map[string]uint64{"drift_flow_new": 1}),
		live("its syn-ack: live", ip6Hdr(client6, eipDrift6, nhTCP, tcp6(80, 50000, synAck)), none()),
		// An IPv6 EIP without a previous binding.
		{name: "no drift: ack to the bound host", dev: dptest.ExtDev, in: inet(ip6Hdr(client6, eip6, nhTCP, tcp6(40009, 80, ack))),
			action: xdpRedirect, out: encap6Of(t, ip6Hdr(client6, eip6, nhTCP, tcp6(40009, 80, ack)), hostAddr, vsid),
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](eip6Idx), eipRx: 1},
		{name: "no drift: another host is spoof", dev: dptest.UlDev,
			in:     fromHost6(t, prevHostUl, prevVSID<<8|0x5a, ip6Hdr(eip6, client6, nhTCP, tcp6(80, 40009, ack))),
			action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

// TestDriftFlowsFull: drift_flows is an LRU (--drift-flows): with 8
// entries, of 64 SYNs' flows recorded (drift_flow_new, or drift_flow_fail
// where the kernel found no entry to reuse: the SYN still goes live), the
// first is evicted, and its ACK goes to the previous host; the last one's
// goes live.
func TestDriftFlowsFull(t *testing.T) {
	b := newEdgeBedWith(t, LoadOptions{EIPMax: 1024, DriftFlows: 8})
	if err := b.edge.PutRoutes(map[netipAddr]Route{
		addr(eipDrift): {Host: addr(hostAddr), VSID: vsid, StatsIdx: driftIdx, PrevHost: addr(prevHostUl), PrevVSID: prevVSID},
	}); err != nil {
		t.Fatal(err)
	}
	if n := b.edge.objs.DriftFlows.MaxEntries(); n != 8 {
		t.Fatalf("drift_flows holds %d entries, want 8", n)
	}
	tcp := func(sport uint16, syn bool) flow {
		return flow{src: client, dst: eipDrift, proto: layers.IPProtocolTCP, sport: sport, dport: 443, syn: syn, df: true}
	}
	send := func(f flow) []byte {
		t.Helper()
		res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
		if err != nil {
			t.Fatal(err)
		}
		if res.Action != xdpRedirect {
			t.Fatalf("action %s, want redirect", actionNames[res.Action])
		}
		return res.Out
	}
	before, err := b.edge.Stats()
	if err != nil {
		t.Fatal(err)
	}
	const flows = 64
	for i := range flows {
		f := tcp(uint16(41000+i), true)
		if d := diffBytes(encapOf(t, f, hostAddr, vsid), send(f)); d != "" {
			t.Fatalf("SYN %d not sent live: %s", i, d)
		}
	}
	after, err := b.edge.Stats()
	if err != nil {
		t.Fatal(err)
	}
	rec := after["drift_flow_new"].Packets - before["drift_flow_new"].Packets
	fail := after["drift_flow_fail"].Packets - before["drift_flow_fail"].Packets
	if rec+fail != flows || rec == 0 {
		t.Errorf("%d SYNs: %d flows recorded, %d refused", flows, rec, fail)
	}
	t.Logf("%d SYNs into 8 entries: %d recorded, %d refused", flows, rec, fail)
	if d := diffBytes(encapOf(t, tcp(41000, false), prevHostUl, prevVSID), send(tcp(41000, false))); d != "" {
		t.Errorf("the evicted flow's ACK not sent to the previous host: %s", d)
	}
	if d := diffBytes(encapOf(t, tcp(41000+flows-1, false), hostAddr, vsid), send(tcp(41000+flows-1, false))); d != "" {
		t.Errorf("the last flow's ACK not sent live: %s", d)
	}
}

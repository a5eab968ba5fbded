package dataplane

import (
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

func TestAgentServiceFixtures(t *testing.T) {
	env, a := newAgentBed(t)
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	if err := a.PutService(AgentService{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid, Ifindex: g1}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutService(AgentService{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VSID: vsid, Ifindex: g1}); err != nil {
		t.Fatal(err)
	}
	svcs, err := a.Services()
	if err != nil || len(svcs) != 2 {
		t.Fatalf("services %v %v", svcs, err)
	}
	key := uint32(vsid<<8 | 0x21)
	toVIP := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 443, syn: true, ttl: 63}
	udpAny := flow{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 63}
	fromEdge := func(innerMAC string, f flow) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, innerMAC, f.ip(t)))
	}
	guestMAC := "02:01:c6:13:15:01"
	deliver := func(f flow, port uint16) []byte {
		g := f
		g.dst = dptest.GuestAddr
		if port != 0 {
			g.dport = port
		}
		return ethFrame(t, dptest.GuestMAC, dptest.VMMAC, g.ip(t))
	}
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "VIP traffic for this guest is translated to its backend port", dev: dptest.UlDev, in: fromEdge(guestMAC, toVIP),
			action: xdpRedirect, out: deliver(toVIP, 8443), check: checksumsOK, stats: map[string]uint64{"decap_tx": 1}},
		{name: "any-port service keeps the port", dev: dptest.UlDev, in: fromEdge(guestMAC, udpAny),
			action: xdpRedirect, out: deliver(udpAny, 0), check: checksumsOK, stats: map[string]uint64{"decap_tx": 1}},
		{name: "VIP traffic for a guest that is no backend", dev: dptest.UlDev, in: fromEdge("02:01:c6:13:15:03", toVIP),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
		{name: "VIP traffic without the service MAC", dev: dptest.UlDev, in: fromEdge("02:00:c6:33:64:15", toVIP),
			action: xdpDrop, stats: map[string]uint64{"drop_unknown": 1}},
	})

	reply := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 8443, dport: 40000}
	snat := reply
	snat.src, snat.sport = vipEncap, 443
	tuple := flowhash.Tuple{Src: addr(vipEncap), Dst: addr(client), Proto: 6, SrcPort: 443, DstPort: 40000}
	h := flowhash.Hash4(tuple, testSeed)
	edge := []string{edgeA, edgeB}[h%2]
	want := nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, ethFrame(t, dptest.VMMAC, gwMAC, snat.ip(t)))
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "backend reply is translated back to the VIP and tunnelled to an edge", dev: dptest.GuestDev,
			in: reply.frame(t, dptest.VMMAC, dptest.GuestMAC), action: xdpRedirect, out: want, stats: map[string]uint64{"encap_tx": 1}},
	})
}

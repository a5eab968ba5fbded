package dataplane

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// Edge groups (issue 8, agents and sets): every reply goes to a live
// member of the group its EIP, VIP or flow names.
const (
	edgeD1 = "198.18.2.1" // set "hot" (dedicated)
	edgeD2 = "198.18.2.2"
	edgeD3 = "198.18.2.3"
	edgeQ1 = "198.18.3.1" // set "quarantine"
)

const (
	groupHot uint16 = 7 // any slot: the daemon allocates them
	groupQ   uint16 = 9
)

// groupBed is the agent bed with two more groups: "hot" (D1, D2) and
// "quarantine" (Q1); group 0 holds edgeA and edgeB. NVGRE is accepted from
// every one of them.
func groupBed(t *testing.T) (*agentFlowT, *Agent) {
	b, a := agentFlowBed(t)
	all := []netip.Addr{addr(edgeA), addr(edgeB), addr(edgeD1), addr(edgeD2), addr(edgeD3), addr(edgeQ1)}
	if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), HashSeed: testSeed,
		Edges: all, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	setGroup(t, a, groupHot, "hot", edgeD1, edgeD2)
	setGroup(t, a, groupQ, "quarantine", edgeQ1)
	return b, a
}

func setGroup(t *testing.T, a *Agent, idx uint16, set string, members ...string) {
	t.Helper()
	var ms []netip.Addr
	for _, m := range members {
		ms = append(ms, addr(m))
	}
	if err := a.SetGroup(idx, AgentGroup{Set: set, Members: ms}); err != nil {
		t.Fatal(err)
	}
}

// encapTo is the guest's packet ip (already translated to its public
// source pub and ports) tunnelled to the member of edges the flow hash
// picks, or to edge when it is not "".
func (b *agentFlowT) encapTo(ip []byte, edges []string, edge, pub string, proto uint8, sport, dport uint16) []byte {
	h := flowhash.Hash4(flowhash.Tuple{Src: addr(pub), Dst: addr(client), Proto: proto, SrcPort: sport, DstPort: dport}, testSeed)
	if edge == "" {
		edge = edges[h%uint32(len(edges))]
	}
	return nvgre(b.t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edge, vsid<<8|h&0xff, 0, ethFrame(b.t, dptest.VMMAC, gwMAC, ip))
}

// TestAgentGroupsEIP: an EIP's replies go to the members of its own group
// only, by flow hash; a member that leaves is never chosen again; a
// quarantined EIP's replies go to the quarantine set's members.
func TestAgentGroupsEIP(t *testing.T) {
	b, a := groupBed(t)
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: b.g1, Group: groupHot}); err != nil {
		t.Fatal(err)
	}
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	slot := ptr[uint32](agentIdx)
	// Enough flows that both members and both of group 0's edges would
	// each be picked by some of them.
	var flows []flow
	for port := uint16(40000); port < 40016; port++ {
		flows = append(flows, flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 53, dport: port})
	}
	run := func(what string, edges []string) {
		t.Helper()
		picked := map[string]int{}
		var fx []fixture
		for _, f := range flows {
			out := b.encapTo(withSrc(f, eip).ip(t), edges, "", eip, 17, f.sport, f.dport)
			h := flowhash.Hash4(flowhash.Tuple{Src: addr(eip), Dst: addr(client), Proto: 17, SrcPort: f.sport, DstPort: f.dport}, testSeed)
			picked[edges[h%uint32(len(edges))]]++
			fx = append(fx, fixture{name: what, dev: dptest.GuestDev, in: fromGuest(f),
				action: xdpRedirect, out: out, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1})
		}
		if len(picked) != len(edges) {
			t.Fatalf("%s: the flows picked %v of %v: choose other ports", what, picked, edges)
		}
		runFixtures(t, b.env, agentProg{a: a, guest: true}, a, fx)
	}
	run("a pulled-out EIP's replies go to its dedicated set's members", []string{edgeD1, edgeD2})

	setGroup(t, a, groupHot, "hot", edgeD2)
	run("a dead member is never chosen", []string{edgeD2})

	setGroup(t, a, groupHot, "hot", edgeD2, edgeD3, edgeD1)
	run("members back: the flow hash spreads over all three", []string{edgeD2, edgeD3, edgeD1})

	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: b.g1, Group: groupQ}); err != nil {
		t.Fatal(err)
	}
	run("a quarantined EIP's replies go to the quarantine set's members", []string{edgeQ1})

	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: b.g1, Group: 0}); err != nil {
		t.Fatal(err)
	}
	run("back in group 0", []string{edgeA, edgeB})

	// An empty group and a slot out of range are counted drops.
	setGroup(t, a, groupHot, "hot")
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: b.g1, Group: groupHot}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "a group with no member", dev: dptest.GuestDev, in: fromGuest(flows[0]), action: xdpDrop, stats: map[string]uint64{"drop_no_edge": 1}},
	})
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: b.g1, Group: 4000}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "a group out of range", dev: dptest.GuestDev, in: fromGuest(flows[0]), action: xdpDrop, stats: map[string]uint64{"drop_no_edge": 1}},
	})
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, Group: AgentGroupPin}); err == nil {
		t.Fatal("PutEIP took the reserved group")
	}
}

// TestAgentGroupsFlows: a VIP flow's replies go back to the member it came
// from while no member has left its group; when that member dies they
// move to a live member by flow hash; a new member moves nothing; a
// health check's answer goes back to the edge that checked whatever.
func TestAgentGroupsFlows(t *testing.T) {
	b, a := groupBed(t)
	// The VIP is pulled out into "hot".
	for _, s := range []AgentService{
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 80, VSID: vsid, Group: groupHot},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VSID: vsid, Group: groupHot},
	} {
		if err := a.PutService(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SetHealthGuests([]HealthGuest{{Guest: addr(dptest.GuestAddr), VSID: vsid, Proto: ProtoTCP, Port: 8080}}); err != nil {
		t.Fatal(err)
	}
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	// Flows whose hash picks edgeD2 among (D1, D2) and among (D2, D3),
	// sent by D1: pinned, their replies go to D1, not where the hash says.
	var in []flow
	for port := uint16(5000); len(in) < 3 && port < 6000; port++ {
		h := flowhash.Hash4(flowhash.Tuple{Src: addr(vipEncap), Dst: addr(client), Proto: 17, SrcPort: 7777, DstPort: port}, testSeed)
		if h%2 == 1 {
			in = append(in, flow{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: port, dport: 7777, ttl: 63})
		}
	}
	reply := func(f flow) flow {
		return flow{src: dptest.GuestAddr, dst: client, proto: f.proto, sport: f.dport, dport: f.sport}
	}
	pub := func(r flow) []byte { return withSrc(r, vipEncap).ip(t) }
	var learn, pinned []fixture
	for _, f := range in {
		learn = append(learn, fixture{name: "a flow to the pulled-out VIP from D1", dev: dptest.UlDev, in: b.fromEdge(edgeD1, f),
			action: xdpRedirect, out: b.deliver(f, 0), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}})
		r := reply(f)
		pinned = append(pinned, fixture{name: "its reply goes back to D1 (the hash says D2)", dev: dptest.GuestDev, in: fromGuest(r),
			action: xdpRedirect, out: b.encapTo(pub(r), nil, edgeD1, vipEncap, 17, r.sport, r.dport), stats: map[string]uint64{"encap_tx": 1}})
	}
	runFixtures(t, b.env, agentProg{a: a}, a, learn)
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, pinned)
	fl, err := a.Flows(0)
	if err != nil || len(fl) != len(in) || fl[0].Group != groupHot || fl[0].Edge != addr(edgeD1) {
		t.Fatalf("flows %+v %v: want %d in group %d from %s", fl, err, len(in), groupHot, edgeD1)
	}

	// A member joins (D3): nothing moves.
	setGroup(t, a, groupHot, "hot", edgeD1, edgeD2, edgeD3)
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, pinned)

	// D1 dies: its flows move to a live member by flow hash.
	setGroup(t, a, groupHot, "hot", edgeD2, edgeD3)
	var moved []fixture
	for _, f := range in {
		r := reply(f)
		moved = append(moved, fixture{name: "its edge died: the flow hash picks a live member", dev: dptest.GuestDev, in: fromGuest(r),
			action: xdpRedirect, out: b.encapTo(pub(r), []string{edgeD2, edgeD3}, "", vipEncap, 17, r.sport, r.dport), stats: map[string]uint64{"encap_tx": 1}})
	}
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, moved)

	// Another set's change moves nothing of this group: group 0 loses
	// edgeB, the hot flows learnt from D2 stay with D2.
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{{name: "the flow comes in from D3 now", dev: dptest.UlDev, in: b.fromEdge(edgeD3, in[0]),
		action: xdpRedirect, out: b.deliver(in[0], 0), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}}})
	setGroup(t, a, 0, "", edgeA)
	r0 := reply(in[0])
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{{name: "relearnt on D3, kept when group 0 changes", dev: dptest.GuestDev, in: fromGuest(r0),
		action: xdpRedirect, out: b.encapTo(pub(r0), nil, edgeD3, vipEncap, 17, r0.sport, r0.dport), stats: map[string]uint64{"encap_tx": 1}}})

	// A health check from edgeB (in no group now): its answer goes back
	// to edgeB, untranslated, whatever the groups do.
	hc := flow{src: "198.18.255.1", dst: dptest.GuestAddr, proto: layers.IPProtocolTCP, sport: 41000, dport: 8080, ttl: 63, syn: true}
	hcIn := nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeB, dptest.UlAddr, vsid<<8|0x21, 0, ethFrame(t, gwMAC, guestSvcMAC, hc.ip(t)))
	runFixtures(t, b.env, agentProg{a: a}, a, []fixture{{name: "a health check from edgeB", dev: dptest.UlDev, in: hcIn,
		action: xdpRedirect, out: ethFrame(t, dptest.GuestMAC, dptest.VMMAC, hc.ip(t)), stats: map[string]uint64{"decap_tx": 1, "flow_new": 1}}})
	setGroup(t, a, 0, "", edgeA)
	setGroup(t, a, groupHot, "hot", edgeD3)
	hcr := flow{src: dptest.GuestAddr, dst: "198.18.255.1", proto: layers.IPProtocolTCP, sport: 8080, dport: 41000}
	h := flowhash.Hash4(flowhash.Tuple{Src: addr(dptest.GuestAddr), Dst: addr("198.18.255.1"), Proto: 6, SrcPort: 8080, DstPort: 41000}, testSeed)
	runFixtures(t, b.env, agentProg{a: a, guest: true}, a, []fixture{{name: "its answer goes back to edgeB", dev: dptest.GuestDev, in: fromGuest(hcr),
		action: xdpRedirect, out: nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, edgeB, vsid<<8|h&0xff, 0, ethFrame(t, dptest.VMMAC, gwMAC, hcr.ip(t))),
		stats: map[string]uint64{"encap_tx": 1}}})
}

// TestAgentGroupGen: the generation moves when a member leaves or the
// slot changes set, not when members join or reorder.
func TestAgentGroupGen(t *testing.T) {
	requireRoot(t)
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fake := NewFakeAgent()
	steps := []struct {
		set     string
		members []string
		gen     uint16
	}{
		{"hot", []string{edgeD1}, 1}, // from an empty slot: another set
		{"hot", []string{edgeD1, edgeD2}, 1},
		{"hot", []string{edgeD2, edgeD1}, 1},
		{"hot", []string{edgeD2}, 2},
		{"cold", []string{edgeD2}, 3},
		{"", nil, 4},
	}
	for i, s := range steps {
		var ms []netip.Addr
		for _, m := range s.members {
			ms = append(ms, addr(m))
		}
		for _, m := range []AgentMaps{a, fake} {
			if err := m.SetGroup(3, AgentGroup{Set: s.set, Members: ms}); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := a.Groups()
		gotFake, _ := fake.Groups()
		if s.set == "" {
			if len(got) != 0 || len(gotFake) != 0 {
				t.Errorf("step %d: a cleared slot is listed: %+v %+v", i, got, gotFake)
			}
			continue
		}
		g := got[3]
		if g.Set != s.set || len(g.Members) != len(ms) || g.Gen != s.gen {
			t.Errorf("step %d: group %+v, want set %s members %v gen %d", i, g, s.set, ms, s.gen)
		}
		if gotFake[3].Gen != g.Gen {
			t.Errorf("step %d: the fake's generation %d, the data plane's %d", i, gotFake[3].Gen, g.Gen)
		}
	}
	if err := a.SetGroup(AgentGroupPin, AgentGroup{Set: "x"}); err == nil {
		t.Error("SetGroup took a slot out of range")
	}
	many := make([]netip.Addr, MaxGroupMembers+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{198, 18, 9, byte(i + 1)})
	}
	if err := a.SetGroup(1, AgentGroup{Set: "big", Members: many}); err == nil {
		t.Error("SetGroup took 33 members")
	}
}

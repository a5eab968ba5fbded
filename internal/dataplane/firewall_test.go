package dataplane

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/model"
)

// fwRule makes a firewall rule for the fixtures.
func fwRule(name, action string, dst string, proto string, lo, hi uint16, src ...string) *model.FirewallRule {
	r := &model.FirewallRule{Name: name, Action: action, Protocol: proto, Port: lo, PortEnd: hi}
	if dst != "" {
		r.Address = netip.MustParseAddr(dst)
	}
	for _, s := range src {
		r.Sources = append(r.Sources, netip.MustParsePrefix(s))
	}
	if es := r.Validate(); len(es) > 0 {
		panic(es)
	}
	return r
}

// applyFirewall plans rules for dests and writes the diff from old.
func applyFirewall(t *testing.T, m FirewallMaps, old *fwplan.Plan, dests []string, rules ...*model.FirewallRule) *fwplan.Plan {
	t.Helper()
	in := fwplan.Input{Rules: rules}
	if old != nil {
		in.Slots = old.Slots
	}
	for _, d := range dests {
		in.Dests = append(in.Dests, netip.MustParseAddr(d))
	}
	p, err := fwplan.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ApplyFirewall(p.Compare(old)); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEdgeFirewall: the firewall's semantics on an EIP, through the real
// program: deny beats allow whatever the prefix lengths; an allow list
// makes the EIP private (only allowed sources, protocols and ports pass);
// nested prefixes (the longest match carries the shorter ones' rules);
// port ranges and protocols; per-rule counters; other EIPs untouched;
// global rules; removal.
func TestEdgeFirewall(t *testing.T) {
	b := newEdgeBed(t)
	slot := ptr[uint32](eipIdx)
	pkt := func(src, dst string, proto layers.IPProtocol, dport uint16) []byte {
		return flow{src: src, dst: dst, proto: proto, sport: 40000, dport: dport, syn: proto == layers.IPProtocolTCP}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	tcp, udp := layers.IPProtocolTCP, layers.IPProtocolUDP
	rules := []*model.FirewallRule{
		fwRule("allow-web", model.FirewallAllow, eip, model.ProtoTCP, 80, 90, "203.0.113.0/24"),
		fwRule("deny-client", model.FirewallDeny, eip, "", 0, 0, client+"/32"),
		fwRule("allow-host", model.FirewallAllow, eip, "", 0, 0, "203.0.113.20/32"),
		fwRule("deny-net", model.FirewallDeny, eip, "", 0, 0, "203.0.113.16/28"),
		fwRule("deny-ssh", model.FirewallDeny, eip, model.ProtoTCP, 22, 0, "203.0.0.0/16"),
		fwRule("allow-dns", model.FirewallAllow, eip, model.ProtoUDP, 53, 0, "192.0.2.0/24"),
	}
	p := applyFirewall(t, b.edge, nil, []string{eip, eipOther}, rules...)

	fwd := func(name string, in []byte) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}}
	}
	drop := func(name string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1, "encap_tx": 0}, eipSlot: slot}
	}
	allowed := fwd("an allowed source, protocol and port is forwarded", pkt("203.0.113.11", eip, tcp, 80))
	allowed.eipSlot, allowed.eipRx = slot, 1
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		allowed,
		fwd("the last port of the range is allowed", pkt("203.0.113.11", eip, tcp, 90)),
		drop("deny beats allow: a denied /32 inside an allowed /24", pkt(client, eip, tcp, 80), "drop_fw_deny"),
		drop("deny beats allow: an allowed /32 inside a denied /28", pkt("203.0.113.20", eip, tcp, 80), "drop_fw_deny"),
		drop("outside the allow list's ports: private", pkt("203.0.113.11", eip, tcp, 91), "drop_fw_private"),
		drop("outside the allow list's protocol: private", pkt("203.0.113.11", eip, udp, 80), "drop_fw_private"),
		drop("a source in no rule: private", pkt("198.18.200.1", eip, tcp, 80), "drop_fw_private"),
		drop("longest match carries the /16: port 22 from inside the /24", pkt("203.0.113.11", eip, tcp, 22), "drop_fw_deny"),
		drop("the /16 on its own: port 22 from outside the /24", pkt("203.0.7.1", eip, tcp, 22), "drop_fw_deny"),
		drop("the /16 rule is tcp only: udp 22 from it is private", pkt("203.0.7.1", eip, udp, 22), "drop_fw_private"),
		fwd("udp 53 from the allowed /24", pkt("192.0.2.9", eip, udp, 53)),
		drop("tcp 53 from it: private", pkt("192.0.2.9", eip, tcp, 53), "drop_fw_private"),
		fwd("another EIP is untouched by the EIP's rules", pkt(client, eipOther, tcp, 22)),
	})
	// Per-rule counters: each decision counted on the rule that made it.
	for name, want := range map[string]uint64{"allow-web": 2, "deny-client": 1, "deny-net": 1, "allow-host": 0, "deny-ssh": 2, "allow-dns": 1} {
		c, err := b.edge.FirewallStats(p.Slots[name])
		if err != nil {
			t.Fatal(err)
		}
		if c.Packets != want || (want > 0) != (c.Bytes > 0) {
			t.Errorf("rule %s counted %+v, want %d packets", name, c, want)
		}
	}

	// The verdict cache holds the client's deny (same source, protocol,
	// port and scope since); dropping the rule must end it at once: the
	// scope keeps its number and flags, only the entries change.
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		drop("the denied client again (a cached verdict)", pkt(client, eip, tcp, 80), "drop_fw_deny"),
	})
	scopeBefore := p.Dests[netip.MustParseAddr(eip)]
	withoutClient := slices.DeleteFunc(slices.Clone(rules), func(r *model.FirewallRule) bool { return r.Name == "deny-client" })
	p = applyFirewall(t, b.edge, p, []string{eip, eipOther}, withoutClient...)
	if p.Dests[netip.MustParseAddr(eip)] != scopeBefore {
		t.Fatalf("the EIP's scope changed (%+v -> %+v): the test needs it kept", scopeBefore, p.Dests[netip.MustParseAddr(eip)])
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		fwd("the deny rule removed: the client is allowed at once", pkt(client, eip, tcp, 80)),
	})
	p = applyFirewall(t, b.edge, p, []string{eip, eipOther}, rules...)

	// A global deny reaches every EIP; the EIP-scoped rules stay.
	global := fwRule("global-udp", model.FirewallDeny, "", model.ProtoUDP, 0, 0, "198.18.0.0/15")
	p = applyFirewall(t, b.edge, p, []string{eip, eipOther}, append(rules, global)...)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		drop("a global deny on another EIP", pkt("198.18.1.1", eipOther, udp, 7000), "drop_fw_deny"),
		fwd("its other protocols pass", pkt("198.18.1.1", eipOther, tcp, 7000)),
		fwd("the EIP's allow list still holds", pkt("203.0.113.11", eip, tcp, 80)),
	})
	// Removing every rule reopens the EIP at once (the route cache is
	// invalidated).
	applyFirewall(t, b.edge, p, []string{eip, eipOther})
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		fwd("no rules: the denied client is forwarded", pkt(client, eip, tcp, 80)),
		fwd("no rules: udp from the removed global deny", pkt("198.18.1.1", eipOther, udp, 7000)),
	})
}

// TestEdgeFirewallVIP: a per-VIP allow list makes that VIP private; the
// other VIP stays public; a global allow list makes every destination
// private.
func TestEdgeFirewallVIP(t *testing.T) {
	b := newLBBed(t)
	syn := func(src, dst string) []byte {
		port := uint16(80)
		if dst == vipEncap {
			port = 443
		}
		return flow{src: src, dst: dst, proto: layers.IPProtocolTCP, sport: 40000, dport: port, syn: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	p := applyFirewall(t, b.edge, nil, []string{vipNAT, vipEncap, eip},
		fwRule("office", model.FirewallAllow, vipNAT, "", 0, 0, "203.0.113.0/25"))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "the private VIP from the allowed prefix", dev: dptest.ExtDev, in: syn(client, vipNAT), action: xdpRedirect,
			stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "the private VIP from elsewhere", dev: dptest.ExtDev, in: syn("203.0.113.200", vipNAT), action: xdpDrop,
			stats: map[string]uint64{"drop_fw_private": 1, "lb_nat_tx": 0}},
		{name: "the other VIP stays public", dev: dptest.ExtDev, in: syn("203.0.113.200", vipEncap), action: xdpRedirect,
			stats: map[string]uint64{"lb_encap_tx": 1}},
	})
	applyFirewall(t, b.edge, p, []string{vipNAT, vipEncap, eip},
		fwRule("everyone-from-office", model.FirewallAllow, "", "", 0, 0, "203.0.113.0/25"))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "a global allow list: the other VIP is private too", dev: dptest.ExtDev, in: syn("203.0.113.200", vipEncap), action: xdpDrop,
			stats: map[string]uint64{"drop_fw_private": 1}},
		{name: "and the EIPs", dev: dptest.ExtDev, in: syn("203.0.113.200", eip), action: xdpDrop,
			stats: map[string]uint64{"drop_fw_private": 1}},
		{name: "the allowed prefix reaches the VIP", dev: dptest.ExtDev, in: syn(client, vipEncap), action: xdpRedirect,
			stats: map[string]uint64{"lb_encap_tx": 1}},
	})
}

// TestEdgeFirewallPrune: a full apply (a restarted daemon, no known plan)
// removes entries and destinations a previous plan left.
func TestEdgeFirewallPrune(t *testing.T) {
	b := newEdgeBed(t)
	applyFirewall(t, b.edge, nil, []string{eip}, fwRule("old", model.FirewallDeny, eip, "", 0, 0, client+"/32"))
	applyFirewall(t, b.edge, nil, []string{eip}, fwRule("new", model.FirewallDeny, eipOther, "", 0, 0, "192.0.2.0/24"))
	n := 0
	var k edgeFwKey
	var v edgeFwEntry
	for it := b.edge.objs.FwRules.Iterate(); it.Next(&k, &v); {
		n++
	}
	if n != 0 { // eipOther was not among the destinations: no entry at all
		t.Errorf("%d entries after the prune, want 0", n)
	}
	var dk uint32
	var dv edgeFwDst
	if it := b.edge.objs.FwDst.Iterate(); it.Next(&dk, &dv) {
		t.Errorf("destination %v left after the prune", netip.AddrFrom4(le4(dk)))
	}
}

// TestEdgeFirewallManyLengths: rules at more source prefix lengths than
// the Bloom filter probes (the filter is off, every packet looks the
// trie up) and at a few (the filter is on: a miss skips the lookup, a hit
// finds the rule): the same verdicts, so the C and Go filters agree.
func TestEdgeFirewallManyLengths(t *testing.T) {
	b := newEdgeBed(t)
	syn := func(src string) []byte {
		return flow{src: src, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	var srcs []string
	for l := 9; l <= 32; l += 3 { // 8 lengths, all containing 203.0.113.77
		pf, _ := netip.MustParseAddr("203.0.113.77").Prefix(l)
		srcs = append(srcs, pf.String())
	}
	for _, n := range []int{len(srcs), 2} {
		rules := []*model.FirewallRule{}
		for i, s := range srcs[len(srcs)-n:] {
			rules = append(rules, fwRule("r"+string(rune('a'+i)), model.FirewallDeny, eip, "", 0, 0, s))
		}
		p := applyFirewall(t, b.edge, nil, []string{eip}, rules...)
		if (n > fwplan.MaxLens) != (p.Global.NLens == fwplan.NoBloom) {
			t.Fatalf("%d lengths: nlens %d", n, p.Global.NLens)
		}
		runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
			{name: "denied source", dev: dptest.ExtDev, in: syn("203.0.113.77"), action: xdpDrop, stats: map[string]uint64{"drop_fw_deny": 1}},
			{name: "another source", dev: dptest.ExtDev, in: syn("192.0.2.99"), action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}},
		})
	}
}

// TestEdgeFirewallFirstFragment: a deny on a port must hold for a TCP or
// UDP datagram sent in fragments. The first fragment carries the whole
// L4 header (the parser drops one that does not), so it is matched on its
// ports and dropped; the later ones carry none and pass (without their
// first, the guest cannot reassemble them). Before, the first fragment
// was matched as if it had no ports: a SYN to a denied port, split in
// two, was forwarded whole.
func TestEdgeFirewallFirstFragment(t *testing.T) {
	b := newEdgeBed(t)
	applyFirewall(t, b.edge, nil, []string{eip},
		fwRule("deny-ssh", model.FirewallDeny, eip, model.ProtoTCP, 22, 0, "0.0.0.0/0"))
	first := func(dport uint16) []byte {
		return flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: dport, syn: true, mf: true,
			payload: make([]byte, 12)}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	later := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, fragOff: 4, payload: make([]byte, 16)}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "the first fragment of a SYN to the denied port is dropped", dev: dptest.ExtDev, in: first(22), action: xdpDrop,
			stats: map[string]uint64{"drop_fw_deny": 1, "encap_tx": 0}},
		{name: "the first fragment of a SYN to another port passes", dev: dptest.ExtDev, in: first(80), action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}},
		{name: "a later fragment carries no port: it passes", dev: dptest.ExtDev, in: later, action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}},
	})
}

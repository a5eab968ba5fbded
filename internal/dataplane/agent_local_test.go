package dataplane

import (
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/google/gopacket/layers"
)

// TestAgentLocalAllow: what a guest may send to its host's kernel
// (agent --local-allow, issue 17 part 2). Only what a rule of the longest
// local prefix allows passes (pass_local); the rest of a local prefix is
// dropped (drop_local), never encapsulated; with no local prefix at all
// (the default) nothing of a guest's reaches the host's kernel: the host's
// own addresses and another guest's go to the edge through the guest's
// EIP (which refuses the underlay: TestEdge...BadDst) or are dropped
// without one, and IPv6 (link-local to the host's listeners) is dropped.
func TestAgentLocalAllow(t *testing.T) {
	env, a := newAgentBed(t)
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	const meta = "169.254.169.254"
	// What agent.PlanLocal makes of "169.254.0.0/16:icmp" and
	// "169.254.169.254/32:tcp:80" (the /32 holds the /16's rule too), and
	// of "198.18.21.0/24:udp:5000-5001".
	if err := a.SetLocalAllow(map[netip.Prefix][]LocalRule{
		netip.MustParsePrefix("169.254.0.0/16"): {{Proto: 1}},
		netip.MustParsePrefix(meta + "/32"):     {{Proto: 6, Lo: 80, Hi: 80}, {Proto: 1}},
		netip.MustParsePrefix("198.18.21.0/24"): {{Proto: 17, Lo: 5000, Hi: 5001}},
		netip.MustParsePrefix("198.18.22.0/24"): nil, // a prefix with no rule: all dropped
	}); err != nil {
		t.Fatal(err)
	}
	tcp80 := flow{src: dptest.GuestAddr, dst: meta, proto: layers.IPProtocolTCP, sport: 33000, dport: 80, syn: true}
	noEIP := "198.19.21.99" // a second address of the guest's port, without an EIP
	v6 := ser(t, &layers.Ethernet{SrcMAC: mac(dptest.VMMAC), DstMAC: mac(dptest.GuestMAC), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolNoNextHeader, HopLimit: 64, SrcIP: netipIP("fe80::2"), DstIP: netipIP("fe80::1")})
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "tcp to the allowed port passes to the kernel", dev: dptest.GuestDev, in: fromGuest(tcp80),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "also from an address without an EIP", dev: dptest.GuestDev, in: fromGuest(withSrc(tcp80, noEIP)),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "another tcp port is dropped", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: meta, proto: layers.IPProtocolTCP, sport: 33000, dport: 81, syn: true}),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "udp to the tcp port is dropped", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: meta, proto: layers.IPProtocolUDP, sport: 33000, dport: 80}),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "a fragment carries no port: dropped", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: meta, proto: layers.IPProtocolTCP, fragOff: 100}),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "icmp by the covering prefix's rule, at the /32", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: meta, proto: layers.IPProtocolICMPv4}),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "icmp elsewhere in the /16", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: "169.254.1.1", proto: layers.IPProtocolICMPv4}),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "tcp 80 elsewhere in the /16 is dropped", dev: dptest.GuestDev, in: fromGuest(withDst(tcp80, "169.254.1.1")),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "udp port range, low end", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: "198.18.21.7", proto: layers.IPProtocolUDP, sport: 1, dport: 5000}),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "udp port range, high end", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: "198.18.21.7", proto: layers.IPProtocolUDP, sport: 1, dport: 5001}),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
		{name: "udp port past the range is dropped, not encapsulated", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: "198.18.21.7", proto: layers.IPProtocolUDP, sport: 1, dport: 5002}),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "a prefix with no rule drops all", dev: dptest.GuestDev, in: fromGuest(withDst(tcp80, "198.18.22.1")),
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
		{name: "ipv6 from a guest is dropped", dev: dptest.GuestDev, in: v6,
			action: xdpDrop, stats: map[string]uint64{"drop_local": 1}},
	})

	// The default: no local prefix. The host's underlay address, the
	// guest's gateway and another guest of the host (198.19.21.3) are
	// not the kernel's: through the EIP to the edge, or dropped without
	// one.
	if err := a.SetLocalAllow(nil); err != nil {
		t.Fatal(err)
	}
	udp := flow{src: dptest.GuestAddr, dst: dptest.UlAddr, proto: layers.IPProtocolUDP, sport: 1, dport: 7946}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
		{name: "the host's underlay address goes to the edge", dev: dptest.GuestDev, in: fromGuest(udp),
			action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx), eipTx: 1},
		{name: "another guest of the host goes to the edge", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "198.19.21.3")),
			action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx), eipTx: 1},
		{name: "what allowed tcp 80 before goes to the edge now", dev: dptest.GuestDev, in: fromGuest(tcp80),
			action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx), eipTx: 1},
		{name: "without an EIP: dropped", dev: dptest.GuestDev, in: fromGuest(withSrc(udp, noEIP)),
			action: xdpDrop, stats: map[string]uint64{"drop_no_eip": 1}},
	})
	// A rule list longer than the program reads is refused.
	if err := a.SetLocalAllow(map[netip.Prefix][]LocalRule{netip.MustParsePrefix("10.0.0.0/8"): make([]LocalRule, MaxLocalRules+1)}); err == nil {
		t.Error("9 rules for one prefix accepted")
	}
}

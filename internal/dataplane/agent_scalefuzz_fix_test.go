package dataplane

import (
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// Found by TestScaleFuzzAgentGuest/Underlay (issue 9 part 7): the agent
// tunnelled a guest's multicast or broadcast (SNATed to its EIP and billed
// to it, for the edge to drop), and forwarded TTL 0 both ways. Now: a
// destination no router forwards to is drop_bad_dst, TTL 0 is drop_ttl;
// local destinations still go to the kernel, and TTL 1 is still tunnelled
// and delivered (the agent is a host, not a router hop).
func TestAgentMartianAndTTL0(t *testing.T) {
	env, a, _ := scaleAgentBed(t)
	fromGuest := func(f flow) []byte { return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	ttl0 := func(b []byte, l3 int) []byte {
		b[l3+8] = 0
		setIPCsum(b[l3:])
		return b
	}
	udp := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 5353, dport: 5353}
	guest := []fixture{
		{name: "multicast from a guest is dropped", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "224.0.0.251")),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "limited broadcast from a guest is dropped", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "255.255.255.255")),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "loopback destination from a guest is dropped", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "127.0.0.1")),
			action: xdpDrop, stats: map[string]uint64{"drop_bad_dst": 1}},
		{name: "TTL 0 from a guest is dropped", dev: dptest.GuestDev, in: ttl0(fromGuest(udp), 14),
			action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "TTL 1 from a guest is tunnelled", dev: dptest.GuestDev, in: fromGuest(flow{src: dptest.GuestAddr, dst: client,
			proto: layers.IPProtocolUDP, sport: 1, dport: 2, ttl: 1}), action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}},
		{name: "a local destination still goes to the kernel", dev: dptest.GuestDev, in: fromGuest(withDst(udp, "198.18.5.5")),
			action: xdpPass, stats: map[string]uint64{"pass_local": 1}},
	}
	runFixtures(t, env, agentProg{a: a, guest: true}, a, guest)

	toEIP := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 22, ttl: 1, syn: true}
	inner0 := scaleFromEdge(t, edgeA, vsid, toEIP)
	inner0 = ttl0(inner0, 14+20+8+14)
	runFixtures(t, env, agentProg{a: a}, a, []fixture{
		{name: "inner TTL 0 from an edge is dropped", dev: dptest.UlDev, in: inner0, action: xdpDrop,
			stats: map[string]uint64{"drop_ttl": 1}},
		{name: "inner TTL 1 from an edge is delivered", dev: dptest.UlDev, in: scaleFromEdge(t, edgeA, vsid, toEIP),
			action: xdpRedirect, stats: map[string]uint64{"decap_tx": 1}},
	})
}

package dataplane

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestAgentIPv6PacketTooBig: an IPv6 guest's packet too big for the
// tunnel (bpf/agent.c agent_guest6, lib/icmp6.h icmp6_error). On a host
// of the IPv6 underlay it is answered with an ICMPv6 packet too big from
// the host's IPv6 underlay address, the MTU the inner packet has over the
// IPv6 outer, as much of the packet quoted as fits 1280 bytes, byte for
// byte (gopacket's checksum the reference, verified by RFC 4443 2.3 too),
// within ICMP_KIND_FRAG's budget (over it drop_icmp_limit); an ICMPv6
// error too big is not answered (RFC 4443 2.4(e): drop_too_big). On a
// host of the IPv4 underlay it stays drop_too_big unless an ICMPv6
// source is configured (AgentConfig.ICMPSource6, --icmp-source6), then
// answered over the IPv4 outer's MTU.
// agentICMP6Src is an agent's --icmp-source6.
const agentICMP6Src = "2001:db8:f9::1"

func TestAgentIPv6PacketTooBig(t *testing.T) {
	t.Run("IPv4 underlay: no source", func(t *testing.T) {
		env, a := newAgent6Bed(t)
		// The underlay's MTU 1500: 1458 bytes of inner packet.
		fits := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, 1458-48))
		setL4Csum6(fits)
		big := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, 1458-48+1))
		setL4Csum6(big)
		runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
			{name: "a packet that fits the tunnel", dev: dptest.GuestDev, in: eth6(dptest.VMMAC, dptest.GuestMAC, false, fits),
				action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx6), eipTx: 1},
			{name: "one byte more is drop_too_big", dev: dptest.GuestDev, in: eth6(dptest.VMMAC, dptest.GuestMAC, false, big),
				action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1, "icmp_frag_tx": 0}},
		})
		// With an ICMPv6 source (--icmp-source6): packet too big over
		// the IPv4 outer's MTU, from it.
		if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), ICMPSource6: addr(agentICMP6Src),
			HashSeed: testSeed, Edges: []netip.Addr{addr(edgeA), addr(edgeB)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}); err != nil {
			t.Fatal(err)
		}
		link := eth6(dptest.VMMAC, dptest.GuestMAC, false, nil)
		runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
			{name: "with an ICMPv6 source one byte more gets packet too big", dev: dptest.GuestDev, in: append(append([]byte(nil), link...), big...),
				action: xdpTX, out: icmp6WantFrom(t, agentICMP6Src, link, big, 2, 1458), check: icmp6SumOK(14),
				stats: map[string]uint64{"icmp_frag_tx": 1, "drop_too_big": 0}},
		})
	})

	t.Run("IPv4 underlay below IPv6's minimum MTU", func(t *testing.T) {
		// The routes to both edges with MTU 1300 (locked): 1258 bytes of
		// inner packet, below 1280; a packet too big the guest may not
		// act on is not sent (RFC 8200 5), the packet is drop_too_big.
		env, a := newAgent6Bed(t)
		for _, e := range []string{edgeA, edgeB} {
			if err := env.Node.Handle().RouteReplace(&netlink.Route{Dst: &net.IPNet{IP: net.ParseIP(e).To4(), Mask: net.CIDRMask(32, 32)},
				Gw: net.ParseIP(dptest.FabAddr), LinkIndex: mustIfindex(t, env, dptest.UlDev), MTU: 1300, MTULock: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr), ICMPSource6: addr(agentICMP6Src),
			HashSeed: testSeed, Edges: []netip.Addr{addr(edgeA), addr(edgeB)}, ICMPRate: 1000, ICMPBurst: 1000, GatewayMAC: mac(gwMAC)}); err != nil {
			t.Fatal(err)
		}
		big := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, 1258-48+1))
		setL4Csum6(big)
		runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
			{name: "too big for an underlay below 1280 is drop_too_big", dev: dptest.GuestDev, in: eth6(dptest.VMMAC, dptest.GuestMAC, false, big),
				action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1, "icmp_frag_tx": 0}},
		})
	})

	t.Run("IPv6 underlay", func(t *testing.T) {
		env, a := newAgentUl6Bed(t)
		if err := a.SetGroup(0, AgentGroup{Members: []netip.Addr{addr(edge6Small)}}); err != nil {
			t.Fatal(err)
		}
		link := eth6(dptest.VMMAC, dptest.GuestMAC, false, nil)
		// ul6MTU less 40 (IPv6) + 8 (GRE) + 14 (inner Ethernet).
		const mtu = ul6MTU - 62
		fits := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, mtu-48))
		setL4Csum6(fits)
		big := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(1, 2, mtu-48+1))
		setL4Csum6(big)
		// A TCP segment of 1,400 bytes: the quote cut at 1,232.
		tcpBig := pkt6{src: agentPriv6, dst: v6Client, proto: nhTCP, sport: 443, dport: 40000, hop: 64}.ip()
		tcpBig = append(tcpBig, make([]byte, 1400-len(tcpBig))...)
		binary.BigEndian.PutUint16(tcpBig[4:], 1400-40)
		setL4Csum6(tcpBig)
		// An ICMPv6 error (destination unreachable) the guest sends,
		// too big: no error about an error.
		unreach := ip6Hdr(agentPriv6, v6Client, nhICMPv6, append([]byte{1, 4, 0, 0, 0, 0, 0, 0}, make([]byte, mtu-48+1)...))
		runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
			{name: "a packet that fits the IPv6 tunnel", dev: dptest.GuestDev, in: append(append([]byte(nil), link...), fits...),
				action: xdpRedirect, stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx6), eipTx: 1},
			{name: "one byte more gets packet too big, quoted whole", dev: dptest.GuestDev, in: append(append([]byte(nil), link...), big...),
				action: xdpTX, out: icmp6WantFrom(t, dptest.UlAddr6, link, big, 2, mtu), check: icmp6SumOK(14),
				stats: map[string]uint64{"icmp_frag_tx": 1, "drop_too_big": 0}, eipSlot: ptr[uint32](agentIdx6)},
			{name: "a TCP segment of 1400 bytes, quoted to 1280 bytes in all", dev: dptest.GuestDev, in: append(append([]byte(nil), link...), tcpBig...),
				action: xdpTX, out: icmp6WantFrom(t, dptest.UlAddr6, link, tcpBig, 2, mtu), check: icmp6SumOK(14),
				stats: map[string]uint64{"icmp_frag_tx": 1}},
			{name: "an ICMPv6 error too big is not answered", dev: dptest.GuestDev, in: append(append([]byte(nil), link...), unreach...),
				action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1, "icmp_frag_tx": 0}},
		})

		// The budget: one error, then drop_icmp_limit.
		if err := a.SetConfig(AgentConfig{Underlay: addr(dptest.UlAddr6), ICMPSource: addr(dptest.UlAddr), ICMPSource6: addr(dptest.UlAddr6), HashSeed: testSeed,
			Edges: []netip.Addr{addr(edge6A), addr(edge6B), addr(edge6Small)}, ICMPRate: 1, ICMPBurst: 1, GatewayMAC: mac(gwMAC)}); err != nil {
			t.Fatal(err)
		}
		in := append(append([]byte(nil), link...), big...)
		runFixtures(t, env, agentProg{a: a, guest: true}, a, []fixture{
			{name: "within the budget", dev: dptest.GuestDev, in: in,
				action: xdpTX, out: icmp6WantFrom(t, dptest.UlAddr6, link, big, 2, mtu), stats: map[string]uint64{"icmp_frag_tx": 1}},
			{name: "over the budget", dev: dptest.GuestDev, in: in,
				action: xdpDrop, stats: map[string]uint64{"drop_icmp_limit": 1, "icmp_frag_tx": 0}},
		})
	})
}

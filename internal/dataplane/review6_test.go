package dataplane

import (
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// What a review found passed to the kernel past the checks (2026-12-08):
// ICMPv6 type 135 that is no plain neighbour solicitation (a first
// fragment, behind a destination-options header) to an IPv6 VIP went up
// before the VIP's firewall and anti-spoofing (a ULA source among them),
// and a nat backend's SYN-ACK to HC6 went up through the nat reply
// path's pass to a local address, past hc6_direct. Each now takes the
// path of any packet: none is passed.
func TestIPv6ReviewFindings(t *testing.T) {
	b := newNAT6Bed(t)
	if err := b.edge.SetHealthAddress6(addr(hc6Addr)); err != nil {
		t.Fatal(err)
	}
	first := ip6Hdr(v6Client, vipN6, 44, cat(fragHdr(58, 0, true), icmp6(135, 64)))
	withOpt := ip6Hdr(v6Client, vipN6, 60, cat(optHdr(58, 1), icmp6(135, 24)))
	ula := ip6Hdr("fc00::1", vipN6, 44, cat(fragHdr(58, 0, true), icmp6(135, 64)))
	toHC6 := ip6Hdr(hc6Guest, hc6Addr, 44, cat(fragHdr(58, 0, true), icmp6(135, 64)))
	synAck := ip6Hdr(beA6, hc6Addr, nhTCP, tcp6(8080, 22, 0x12))
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	fromBE := func(ip []byte) []byte { return eth6(dptest.FabMAC, dptest.UlMAC, false, ip) }
	dropped := func(name string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}}
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		// The VIP's listeners: no ICMPv6 one.
		dropped("a first fragment of ICMPv6 135 to a VIP", inet(first), "drop_lb_no_port"),
		dropped("ICMPv6 135 behind destination options to a VIP", inet(withOpt), "drop_lb_no_port"),
		dropped("a ULA-sourced first fragment of ICMPv6 135 to a VIP", inet(ula), "drop_spoof_bogon"),
		dropped("a first fragment of ICMPv6 135 to HC6", inet(toHC6), "drop_spoof"),
		{name: "a nat backend's SYN-ACK to HC6", dev: dptest.UlDev, in: fromBE(synAck), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
	})
}

package dataplane

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestEdgeAntiSpoof: from the Internet side, a packet to an EIP whose
// source is the EIP itself (a land attack), one of the region's own
// prefixes, EIPs or VIPs, the underlay, or a non-routable range is dropped
// under its class's counter; a normal client, NVGRE from a host on the
// underlay and Internet traffic not to an EIP are unaffected.
func TestEdgeAntiSpoof(t *testing.T) {
	b := newEdgeBed(t)
	own := []netip.Prefix{
		netip.MustParsePrefix("192.0.2.0/25"),   // a set prefix
		netip.MustParsePrefix("192.0.2.200/32"), // a VIP
		netip.MustParsePrefix(eipOther + "/32"), // another EIP
	}
	underlay := []netip.Prefix{
		netip.MustParsePrefix("198.18.21.0/24"),      // the hosts
		netip.MustParsePrefix(dptest.UlAddr + "/32"), // this edge
	}
	if err := b.edge.SetSpoofPrefixes(own, underlay); err != nil {
		t.Fatal(err)
	}
	slot := ptr[uint32](eipIdx)
	to := func(src, dst string) []byte {
		return flow{src: src, dst: dst, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	}
	drop := func(name, src, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: to(src, eip), action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	good := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	key := uint32(vsid<<8 | 0x5a)
	fromHost := nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, key, 0, ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t)))

	fixtures := []fixture{
		drop("land attack: source is the destination EIP", eip, "drop_spoof_own"),
		drop("source another EIP", eipOther, "drop_spoof_own"),
		drop("source a VIP", "192.0.2.200", "drop_spoof_own"),
		drop("source in a set prefix", "192.0.2.17", "drop_spoof_own"),
		drop("source a host's underlay address", hostAddr, "drop_spoof_underlay"),
		drop("source the edge's underlay address", dptest.UlAddr, "drop_spoof_underlay"),
		drop("source 10/8", "10.1.2.3", "drop_spoof_bogon"),
		drop("source 172.16/12 low", "172.16.0.1", "drop_spoof_bogon"),
		drop("source 172.16/12 high", "172.31.255.254", "drop_spoof_bogon"),
		drop("source 192.168/16", "192.168.1.1", "drop_spoof_bogon"),
		drop("source 100.64/10 low", "100.64.0.1", "drop_spoof_bogon"),
		drop("source 100.64/10 high", "100.127.255.254", "drop_spoof_bogon"),
		drop("source 169.254/16", "169.254.1.1", "drop_spoof_bogon"),
		drop("source 0/8", "0.1.2.3", "drop_ip_martian"),
		drop("source 127/8", "127.0.0.1", "drop_ip_martian"),
		drop("source 224/4", "224.0.0.5", "drop_ip_martian"),
		drop("source 240/4", "240.0.0.1", "drop_ip_martian"),
		{name: "a client is forwarded", dev: dptest.ExtDev, in: to(client, eip), action: xdpRedirect,
			out: encapOf(t, good, hostAddr, vsid), stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "a client next to the private ranges is forwarded", dev: dptest.ExtDev, in: to("172.32.0.1", eip), action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "a client next to 100.64/10 is forwarded", dev: dptest.ExtDev, in: to("100.128.0.1", eip), action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		{name: "NVGRE from a host in the underlay is decapsulated", dev: dptest.UlDev, in: fromHost, action: xdpRedirect,
			out:   ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(reply.ip(t))),
			stats: map[string]uint64{"decap_tx": 1}, eipSlot: slot, eipTx: 1},
		{name: "a private source not to an EIP goes to the kernel", dev: dptest.ExtDev, in: to("10.1.2.3", "198.51.100.99"),
			action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "an underlay source to an EIP from the underlay side is not checked", dev: dptest.UlDev, in: to(hostAddr, eip),
			action: xdpTX, stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		// But a link-local source is never forwarded (RFC 3927 7), from
		// the underlay either (it was encapsulated: the scale fuzzer's
		// IPv6 twin found it).
		{name: "a link-local source to an EIP from the underlay side", dev: dptest.UlDev, in: to("169.254.1.1", eip),
			action: xdpDrop, stats: map[string]uint64{"drop_ip_martian": 1}, eipSlot: slot},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)

	// Replacing the prefixes removes the stale ones.
	if err := b.edge.SetSpoofPrefixes(nil, nil); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "a removed set prefix is forwarded again", dev: dptest.ExtDev, in: to("192.0.2.17", eip), action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipRx: 1},
		drop("land attack without any prefix", eip, "drop_spoof_own"),
		drop("non-routable without any prefix", "10.1.2.3", "drop_spoof_bogon"),
	})
}

// TestEdgeAntiSpoofVIP: the same check before the load balancer: forged
// sources to a VIP are dropped, a client's SYN is translated to its
// backend and the backend's reply (a private source, from the underlay
// side) is translated back.
func TestEdgeAntiSpoofVIP(t *testing.T) {
	b := newLBBed(t)
	if err := b.edge.SetSpoofPrefixes([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		[]netip.Prefix{netip.MustParsePrefix("198.18.21.0/24")}); err != nil {
		t.Fatal(err)
	}
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	fromUl := func(f flow) []byte { return f.frame(t, dptest.FabMAC, dptest.UlMAC) }
	syn := func(src string) flow {
		return flow{src: src, dst: vipNAT, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}
	}
	reply := flow{src: beA, dst: client, proto: layers.IPProtocolTCP, sport: 8080, dport: 40000, ttl: 64}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "land attack on a VIP", dev: dptest.ExtDev, in: fromInet(syn(vipNAT)), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof_own": 1}},
		{name: "source another VIP", dev: dptest.ExtDev, in: fromInet(syn(vipEncap)), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof_own": 1}},
		{name: "source a host", dev: dptest.ExtDev, in: fromInet(syn(hostAddr)), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof_underlay": 1}},
		{name: "source 192.168/16", dev: dptest.ExtDev, in: fromInet(syn("192.168.0.9")), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof_bogon": 1}},
		{name: "a client's SYN goes to its backend", dev: dptest.ExtDev, in: fromInet(syn(client)), action: xdpRedirect,
			stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "the backend's reply is translated back", dev: dptest.UlDev, in: fromUl(reply), action: xdpRedirect,
			stats: map[string]uint64{"lb_reply_tx": 1}},
	})
}

package dataplane

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// The ICMPv6 errors of the Internet -> IPv6 EIP path (bpf/lib/icmp.h
// icmp6_error, called by bpf/edge.c edge_ipv6).
const (
	icmp6Src   = dptest.ExtAddr6  // the edge's ICMPv6 source (EdgeConfig.ICMPSource6)
	eip6Narrow = "2001:db8:e1::b" // bound to a host whose route's MTU is 1332: 1290 inner
	eip6Tiny   = "2001:db8:e1::c" // bound to a host whose route's MTU is 1300: 1258 inner, below IPv6's 1280
	hostNarrow = "198.19.253.9"
	hostTiny   = "198.19.254.9"
)

// newICMP6Bed is newEdge6Bed with the ICMPv6 source configured (the
// budgets given, the IPv4 source as newEdgeBed's) and two more IPv6 EIPs
// behind underlay routes of small MTUs (locked: bpf_fib_lookup reads an
// IPv4 route's MTU only then, or with ip_forward_use_pmtu).
func newICMP6Bed(t *testing.T, budgets map[ICMPKind]ICMPBudget, ttlOn bool) *edgeBed {
	b := newEdge6Bed(t)
	ul, err := b.env.Node.Ifindex(dptest.UlDev)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), ICMPSource6: addr(icmp6Src), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, ICMPBudgets: budgets, ICMPTimeExceeded: ttlOn, GatewayMAC: mac(gwMAC), UnderlayIfindex: uint32(ul),
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		host string
		mtu  int
	}{{hostNarrow, 1332}, {hostTiny, 1300}} {
		if err := b.env.Node.Handle().RouteReplace(&netlink.Route{Dst: &net.IPNet{IP: net.ParseIP(r.host).To4(), Mask: net.CIDRMask(32, 32)},
			Gw: net.ParseIP(dptest.FabAddr), LinkIndex: ul, MTU: r.mtu, MTULock: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.edge.PutRoutes(map[netipAddr]Route{
		addr(eip6Narrow): {Host: addr(hostNarrow), VSID: vsid, StatsIdx: 15},
		addr(eip6Tiny):   {Host: addr(hostTiny), VSID: vsid, StatsIdx: 16},
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// icmp6Want is the frame the edge must send about the frame in (the IPv6
// packet ip behind link, its tags included): the MACs swapped, the tags
// kept, IPv6 from icmp6Src to ip's source (hop limit 64, class and flow
// label 0), ICMPv6 type typ code 0 with mtu (packet too big; 0 for time
// exceeded), quoting ip up to 1280 bytes in all. Serialized by gopacket,
// whose checksum is the reference.
func icmp6Want(t *testing.T, link []byte, ip []byte, typ uint8, mtu uint32) []byte {
	t.Helper()
	return icmp6WantFrom(t, icmp6Src, link, ip, typ, mtu)
}

// icmp6WantFrom is icmp6Want from the source src (the agent's: its IPv6
// underlay address).
func icmp6WantFrom(t *testing.T, src6 string, link []byte, ip []byte, typ uint8, mtu uint32) []byte {
	t.Helper()
	quote := ip[:min(len(ip), 1280-48)]
	src, _ := netip.AddrFromSlice(ip[8:24])
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 64,
		SrcIP: net.ParseIP(src6), DstIP: net.IP(src.AsSlice())}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	if err := ic.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32(nil, mtu)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip6, ic, gopacket.Payload(append(body, quote...))); err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), link[6:12]...)
	out = append(out, link[0:6]...)
	out = append(out, link[12:]...)
	return append(out, buf.Bytes()...)
}

// icmp6SumOK checks the ICMPv6 checksum of the frame out (IPv6 at l3) by
// RFC 4443 2.3 directly: the ones' complement sum of the pseudo-header
// and the message, checksum included, is 0xffff.
func icmp6SumOK(l3 int) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		t.Helper()
		ip := out[l3:]
		if len(ip) < 48 || ip[6] != 58 {
			t.Fatalf("not ICMPv6: % x", ip[:min(len(ip), 48)])
		}
		n := int(binary.BigEndian.Uint16(ip[4:]))
		if len(ip) != 40+n || len(out) > 1280+l3 {
			t.Fatalf("IPv6 payload %d bytes in a %d-byte packet (at most 1280)", n, len(ip))
		}
		var sum uint32
		add := func(b []byte) {
			for i := 0; i+1 < len(b); i += 2 {
				sum += uint32(binary.BigEndian.Uint16(b[i:]))
			}
			if len(b)%2 == 1 {
				sum += uint32(b[len(b)-1]) << 8
			}
		}
		add(ip[8:40])
		add([]byte{0, 0, byte(n >> 8), byte(n), 0, 0, 0, 58})
		add(ip[40:])
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		if sum != 0xffff {
			t.Errorf("ICMPv6 checksum %04x does not verify (sum %04x)", binary.BigEndian.Uint16(ip[42:]), sum)
		}
	}
}

// tagged6 frames ip behind the VLAN tags given (802.1ad outer, 802.1Q
// inner when two).
func tagged6(ip []byte, tags ...uint16) []byte {
	b := append(mac(dptest.ExtMAC), mac(dptest.RtrMAC)...)
	for i, tag := range tags {
		tpid := uint16(0x8100)
		if len(tags) == 2 && i == 0 {
			tpid = 0x88a8
		}
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, tag)
	}
	b = append(b, 0x86, 0xdd)
	return append(b, ip...)
}

// TestEdgeICMPv6Errors: an expired hop limit and a packet too big for the
// tunnel, to an IPv6 EIP from the Internet, are answered with ICMPv6 time
// exceeded and packet too big (MTU: the route's less NVGRE's 42), byte
// for byte, back on the link and VLAN tags they came from, quoting up to
// 1280 bytes; RFC 4443 2.4(e)'s cases are not answered (counted as the
// packet's drop); a tunnel that cannot carry 1280 bytes is drop_too_big.
func TestEdgeICMPv6Errors(t *testing.T) {
	b := newICMP6Bed(t, nil, true)
	link := eth6(dptest.RtrMAC, dptest.ExtMAC, false, nil)
	inet := func(ip []byte) []byte { return append(append([]byte(nil), link...), ip...) }
	slot := ptr[uint32](eip6Idx)

	hop1 := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(33434, 33435, 12)), 1)
	hop0tcp := withHop(ip6Hdr(client6, eip6, nhTCP, tcp6(40000, 443, 0x02)), 0)
	odd := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(7, 9, 13)), 1)     // 61 bytes: an odd last byte
	half := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(7, 9, 14)), 1)    // 62 bytes: a last 16-bit word
	long := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(7, 9, 1301)), 1)  // 1349 bytes: quoted to 1232
	quote := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(7, 9, 1184)), 1) // 1232 bytes: quoted whole, 1280 in all
	echo := withHop(ip6Hdr(client6, eip6, nhICMPv6, icmp6(128, 12)), 1)
	ext := withHop(ip6Hdr(client6, eip6, nhDst, cat(optHdr(nhUDP, 1), udp6(7, 9, 4))), 1)
	laterUDP := withHop(ip6Hdr(client6, eip6, nhFrag, cat(fragHdr(nhUDP, 8, false), make([]byte, 16))), 1)
	big := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1459-48))
	bigOdd := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1501-48))
	narrow := ip6Hdr(client6, eip6Narrow, nhTCP, cat(tcp6(40000, 443, 0x10), make([]byte, 1291-60)))
	narrowFits := ip6Hdr(client6, eip6Narrow, nhTCP, cat(tcp6(40000, 443, 0x10), make([]byte, 1290-60)))
	tiny := ip6Hdr(client6, eip6Tiny, nhUDP, udp6(1, 2, 1259-48))

	sent := func(name string, in, ip []byte, typ uint8, mtu uint32, l3 int, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpTX, out: icmp6Want(t, in[:l3], ip, typ, mtu),
			check: icmp6SumOK(l3), stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	ttl := func(name string, ip []byte) fixture { return sent(name, inet(ip), ip, 3, 0, 14, "icmp_ttl_tx") }
	drop := func(name string, in []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{counter: 1}, eipSlot: slot}
	}
	icmpErr := withHop(ip6Hdr(client6, eip6, nhICMPv6, cat(icmp6(1, 4), make([]byte, 48))), 1)
	redirect := withHop(ip6Hdr(client6, eip6, nhICMPv6, icmp6(137, 36)), 1)
	laterICMP := withHop(ip6Hdr(client6, eip6, nhFrag, cat(fragHdr(nhICMPv6, 8, false), make([]byte, 16))), 1)
	mcastLink := append(mac("33:33:00:00:00:01"), inet(hop1)[6:]...)
	bcastLink := append(mac("ff:ff:ff:ff:ff:ff"), inet(hop1)[6:]...)

	fs := []fixture{
		ttl("hop limit 1, udp", hop1),
		ttl("hop limit 0, tcp syn", hop0tcp),
		{name: "ethernet padding is not quoted", dev: dptest.ExtDev, in: append(inet(hop1), make([]byte, 6)...), action: xdpTX,
			out: icmp6Want(t, link, hop1, 3, 0), check: icmp6SumOK(14), stats: map[string]uint64{"icmp_ttl_tx": 1}, eipSlot: slot},
		ttl("odd length: the last byte in the checksum", odd),
		ttl("length 2 mod 4", half),
		ttl("longer than 1280 in all: quoted to 1232 bytes", long),
		ttl("1232 bytes: quoted whole", quote),
		ttl("icmpv6 echo request is answered", echo),
		ttl("destination options: quoted as they came", ext),
		ttl("later fragment of udp is answered", laterUDP),
		sent("too big for the underlay: MTU 1500 - 42", inet(big), big, 2, 1458, 14, "icmp_frag_tx"),
		sent("too big, odd length, quote cut", inet(bigOdd), bigOdd, 2, 1458, 14, "icmp_frag_tx"),
		{name: "too big for a 1332-byte route: MTU 1290", dev: dptest.ExtDev, in: inet(narrow), action: xdpTX,
			out: icmp6Want(t, link, narrow, 2, 1290), check: icmp6SumOK(14), stats: map[string]uint64{"icmp_frag_tx": 1}},
		{name: "1290 bytes fit the 1332-byte route", dev: dptest.ExtDev, in: inet(narrowFits), action: xdpRedirect,
			out: encap6Of(t, narrowFits, hostNarrow, vsid), stats: map[string]uint64{"encap_tx": 1}},
		{name: "a tunnel below 1280 bytes: no packet too big, dropped", dev: dptest.ExtDev, in: inet(tiny), action: xdpDrop,
			stats: map[string]uint64{"drop_too_big": 1}},
		sent("hop limit 1 behind a VLAN tag", tagged6(hop1, 42), hop1, 3, 0, 18, "icmp_ttl_tx"),
		sent("hop limit 1 behind two tags (802.1ad)", tagged6(hop1, 100, 42), hop1, 3, 0, 22, "icmp_ttl_tx"),
		sent("too big behind a VLAN tag", tagged6(big, 42), big, 2, 1458, 18, "icmp_frag_tx"),
		sent("too big behind two tags", tagged6(big, 100, 42), big, 2, 1458, 22, "icmp_frag_tx"),
		// RFC 4443 2.4(e): not answered, counted as the packet's drop.
		drop("no error about an icmpv6 error", inet(icmpErr), "drop_ttl"),
		drop("no error about a redirect", inet(redirect), "drop_ttl"),
		drop("no error about a later fragment of icmpv6", inet(laterICMP), "drop_ttl"),
		drop("no error about a link-layer multicast frame", mcastLink, "drop_ttl"),
		drop("no error about a link-layer broadcast frame", bcastLink, "drop_ttl"),
		// A link-local or unspecified source never gets this far.
		drop("link-local source: dropped before (off link)", inet(withHop(ip6Hdr("fe80::66", eip6, nhUDP, udp6(1, 2, 0)), 1)), "drop_ip6_off_link"),
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fs)
}

// TestEdgeICMPv6Off: without an ICMPv6 source, or with time exceeded off
// (--no-icmp-ttl), the packets are dropped under their counters as before;
// packet too big does not depend on the latter.
func TestEdgeICMPv6Off(t *testing.T) {
	b := newICMP6Bed(t, nil, false)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	hop1 := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(33434, 33435, 12)), 1)
	big := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1459-48))
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "time exceeded off", dev: dptest.ExtDev, in: inet(hop1), action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "packet too big still sent", dev: dptest.ExtDev, in: inet(big), action: xdpTX, out: icmp6Want(t, inet(nil), big, 2, 1458),
			stats: map[string]uint64{"icmp_frag_tx": 1}},
	})
	if err := b.edge.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
		ICMPRate: 1000, ICMPBurst: 1000, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC)}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "no ICMPv6 source: hop limit 1 dropped", dev: dptest.ExtDev, in: inet(hop1), action: xdpDrop, stats: map[string]uint64{"drop_ttl": 1}},
		{name: "no ICMPv6 source: too big dropped", dev: dptest.ExtDev, in: inet(big), action: xdpDrop, stats: map[string]uint64{"drop_too_big": 1}},
	})
	for _, bad := range []string{"198.51.100.1", "fe80::1", "ff02::1", "::ffff:198.51.100.1", "::"} {
		err := b.edge.SetConfig(EdgeConfig{Underlay: addr(dptest.UlAddr), ICMPSource6: addr(bad), GatewayMAC: mac(gwMAC)})
		if err == nil {
			t.Errorf("SetConfig took ICMPv6 source %s", bad)
		}
	}
}

// TestEdgeICMPv6Budget: ICMPv6 errors spend the IPv4 errors' per-kind
// budgets (time exceeded, packet too big as fragmentation needed): past
// the budget they are counted (drop_icmp_limit) and not sent; a flood of
// expired hop limits leaves packet too big its own budget; the budget is
// one per kind for both families.
func TestEdgeICMPv6Budget(t *testing.T) {
	b := newICMP6Bed(t, map[ICMPKind]ICMPBudget{ICMPKindTTL: {Rate: 1, Burst: 2}, ICMPKindFrag: {Rate: 1, Burst: 1}}, true)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	hop1 := withHop(ip6Hdr(client6, eip6, nhUDP, udp6(33434, 33435, 12)), 1)
	big := ip6Hdr(client6, eip6, nhUDP, udp6(1, 2, 1459-48))
	fs := []fixture{
		{name: "time exceeded 1", dev: dptest.ExtDev, in: inet(hop1), action: xdpTX, out: icmp6Want(t, inet(nil), hop1, 3, 0),
			stats: map[string]uint64{"icmp_ttl_tx": 1}},
		{name: "time exceeded 2", dev: dptest.ExtDev, in: inet(hop1), action: xdpTX, out: icmp6Want(t, inet(nil), hop1, 3, 0),
			stats: map[string]uint64{"icmp_ttl_tx": 1}},
	}
	for i := range 20 {
		fs = append(fs, fixture{name: fmt.Sprintf("hop limit flood %d: suppressed", i), dev: dptest.ExtDev, in: inet(hop1), action: xdpDrop,
			stats: map[string]uint64{"drop_icmp_limit": 1}})
	}
	ttl1 := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 33434, dport: 33435, ttl: 1}
	fs = append(fs,
		fixture{name: "the IPv4 time exceeded shares the budget", dev: dptest.ExtDev, in: ttl1.frame(t, dptest.RtrMAC, dptest.ExtMAC),
			action: xdpDrop, stats: map[string]uint64{"drop_icmp_limit": 1}},
		fixture{name: "packet too big is still sent", dev: dptest.ExtDev, in: inet(big), action: xdpTX, out: icmp6Want(t, inet(nil), big, 2, 1458),
			stats: map[string]uint64{"icmp_frag_tx": 1}},
		fixture{name: "its own budget (burst 1) runs out too", dev: dptest.ExtDev, in: inet(big), action: xdpDrop,
			stats: map[string]uint64{"drop_icmp_limit": 1}},
	)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fs)
}

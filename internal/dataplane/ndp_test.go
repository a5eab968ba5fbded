package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// Neighbor discovery for the IPv6 VIPs (bpf/lib/ndp.h), the IPv6 twin of
// TestARPOwnership: on an ARP interface, while the edge owns its ARP
// scope, a neighbor solicitation for an IPv6 VIP or an arp_addrs6
// address is answered with a neighbor advertisement in place.
const (
	ndpPeerLL = "fe80::aa:2"                       // the router's link-local address (RtrMAC)
	ndpGW6    = "fe80::1"                          // a gateway6: link-local, as IPv6 default gateways often are
	ndpOther  = "2001:db8:e1::99"                  // on the segment, not ours
	ndpSNM    = "ff02::1:ff00:81"                  // vip6s's solicited-node group
	ndpSNMMAC = "33:33:ff:00:00:81"                // and its MAC (RFC 2464 7)
	ndpGWSNM  = "ff02::1:ff00:1"                   // ndpGW6's
	ndpOthSNM = "ff02::1:ff00:99"                  // ndpOther's
	ndpAllMAC = "33:33:00:00:00:01"                // ff02::1's
	ndpNonce  = "\x0e\x01\x01\x02\x03\x04\x05\x06" // a nonce option (RFC 3971 5.3.2)
)

// ndpOpt is an NDP option of type typ with body (padded to 8 bytes).
func ndpOpt(typ uint8, body []byte) []byte {
	n := (2 + len(body) + 7) / 8
	b := make([]byte, n*8)
	b[0], b[1] = typ, uint8(n)
	copy(b[2:], body)
	return b
}

// nsMsg is an ICMPv6 neighbor solicitation for target with opts, code 0,
// checksum left 0 (icmp6Summed).
func nsMsg(target string, opts ...[]byte) []byte {
	b := make([]byte, 24)
	b[0] = 135
	t := netip.MustParseAddr(target).As16()
	copy(b[8:], t[:])
	return cat(append([][]byte{b}, opts...)...)
}

// icmp6Summed writes the ICMPv6 checksum of the IPv6 packet ip (no
// extension header) over RFC 8200's pseudo-header.
func icmp6Summed(ip []byte) []byte {
	msg := ip[40:]
	msg[2], msg[3] = 0, 0
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
	sum += uint32(len(msg)) + 58
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(msg[2:], ^uint16(sum))
	return ip
}

// nsFrame is a neighbor solicitation from the router (RtrMAC) as it
// arrives on ExtDev: src -> dst, hop limit 255, checksummed.
func nsFrame(src, dst, dstMAC string, msg []byte) []byte {
	return eth6(dptest.RtrMAC, dstMAC, false, icmp6Summed(withHop(ip6Hdr(src, dst, nhICMPv6, msg), 255)))
}

// naWant is the advertisement the edge must send for target to dst
// (dstMAC), with flags (RFC 4861 4.4: R 0x80, S 0x40, O 0x20): built by
// gopacket, not by the code under test.
func naWant(t *testing.T, dstMAC, target, dst string, flags uint8) []byte {
	t.Helper()
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255,
		SrcIP: net.ParseIP(target), DstIP: net.ParseIP(dst)}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	if err := ic.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	na := &layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: net.ParseIP(target),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: mac(dptest.ExtMAC)}}}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: mac(dptest.ExtMAC), DstMAC: mac(dstMAC), EthernetType: layers.EthernetTypeIPv6},
		ip6, ic, na); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ndpAnswerFor is the neighbor advertisement that answers the frame in,
// an untagged neighbor solicitation without extension headers, from
// ourMAC with the extra flags (0x80: Router), built from the RFC (4861
// 4.4, 7.2.4) byte by byte: to the solicitation's source and Ethernet
// source, Solicited and Override; from :: (duplicate address detection)
// to all-nodes, Override alone. It returns the target too.
func ndpAnswerFor(in []byte, ourMAC net.HardwareAddr, flags uint8) ([]byte, netip.Addr, error) {
	if len(in) < 14+40+24 || binary.BigEndian.Uint16(in[12:]) != 0x86dd || in[20] != 58 || in[54] != 135 {
		return nil, netip.Addr{}, errors.New("input is not an untagged neighbor solicitation without extension headers")
	}
	src := netip.AddrFrom16([16]byte(in[22:38]))
	target := netip.AddrFrom16([16]byte(in[62:78]))
	f := make([]byte, 14+40+32)
	copy(f[0:6], in[6:12])
	dst := src
	flags |= 0x60
	if src.IsUnspecified() {
		copy(f[0:6], []byte{0x33, 0x33, 0, 0, 0, 1})
		dst, flags = netip.IPv6LinkLocalAllNodes(), flags&^0x40
	}
	copy(f[6:12], ourMAC)
	f[12], f[13] = 0x86, 0xdd
	ip := f[14:]
	ip[0] = 0x60
	ip[5], ip[6], ip[7] = 32, 58, 255
	t, d := target.As16(), dst.As16()
	copy(ip[8:24], t[:])
	copy(ip[24:40], d[:])
	na := ip[40:]
	na[0], na[4] = 136, flags
	copy(na[8:24], t[:])
	na[24], na[25] = 2, 1
	copy(na[26:32], ourMAC)
	icmp6Summed(ip)
	return f, target, nil
}

// TestNDPAnswer: the advertisements, byte for byte (checksum included),
// for a solicitation to the solicited-node group and a unicast one, from
// a link-local and a global source, with and without options (the frame
// grows or shrinks to the advertisement's 86 bytes), duplicate address
// detection's (to all-nodes, Solicited clear) and the gateway6's (Router
// set); a solicitation for another target, on another interface, tagged
// or behind an extension header goes to the kernel unchanged; every
// malformed one is dropped under its counter. Then ownership: not the
// owner, or past its deadline, passes even a VIP's.
func TestNDPAnswer(t *testing.T) {
	b := newVIP6Bed(t)
	e := b.edge
	ext := mustIfindex(t, b.env, dptest.ExtDev)
	if err := e.SetARP(ext, mac(dptest.ExtMAC)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetARPOwner(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetARPAddrs([]netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr(ndpGW6)}); err != nil {
		t.Fatal(err)
	}
	slla := ndpOpt(1, mac(dptest.RtrMAC))
	const sO, sSO, sRSO = 0x20, 0x60, 0xe0
	answered := func(name string, in []byte, out []byte) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpTX, out: out, stats: map[string]uint64{"ndp_reply": 1}}
	}
	passed := func(name, dev string, in []byte) fixture {
		return fixture{name: name, dev: dev, in: in, action: xdpPass, stats: map[string]uint64{"pass_ipv6": 1}}
	}
	dropped := func(name string, in []byte, reason string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: in, action: xdpDrop, stats: map[string]uint64{reason: 1}}
	}
	solicit := nsFrame(ndpPeerLL, ndpSNM, ndpSNMMAC, nsMsg(vip6s, slla))
	// A malformed solicitation: the message edited after the checksum
	// (fix re-sums it).
	bad := func(src, dst string, hop uint8, msg []byte, edit func(m []byte), fix bool) []byte {
		ip := icmp6Summed(withHop(ip6Hdr(src, dst, nhICMPv6, msg), 255))
		ip[7] = hop
		edit(ip[40:])
		if fix {
			icmp6Summed(ip)
		}
		return eth6(dptest.RtrMAC, ndpSNMMAC, false, ip)
	}
	// The fuzzers' checker (ndpAnswerFor) builds what gopacket builds.
	for _, c := range []struct {
		in   []byte
		want []byte
	}{
		{solicit, naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO)},
		{nsFrame("::", ndpSNM, ndpSNMMAC, nsMsg(vip6s)), naWant(t, ndpAllMAC, vip6s, "ff02::1", sO)},
	} {
		if got, _, err := ndpAnswerFor(c.in, mac(dptest.ExtMAC), 0); err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("ndpAnswerFor = %x, %v; want %x", got, err, c.want)
		}
	}
	none := func([]byte) {}
	tagged := eth6(dptest.RtrMAC, ndpSNMMAC, true, icmp6Summed(withHop(ip6Hdr(ndpPeerLL, ndpSNM, nhICMPv6, nsMsg(vip6s, slla)), 255)))
	withExt := withHop(ip6Hdr(ndpPeerLL, ndpSNM, nhHop, cat(optHdr(nhICMPv6, 1), nsMsg(vip6s, slla))), 255)
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		answered("solicited-node group, link-local source", solicit, naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO)),
		answered("unicast (unreachability detection), global source",
			nsFrame(client6, vip6s, dptest.ExtMAC, nsMsg(vip6s, slla)), naWant(t, dptest.RtrMAC, vip6s, client6, sSO)),
		answered("no option: the frame grows", nsFrame(ndpPeerLL, ndpSNM, ndpSNMMAC, nsMsg(vip6s)),
			naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO)),
		answered("two options: the frame shrinks", nsFrame(ndpPeerLL, ndpSNM, ndpSNMMAC, nsMsg(vip6s, slla, []byte(ndpNonce))),
			naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO)),
		answered("duplicate address detection: to all-nodes, not solicited",
			nsFrame("::", ndpSNM, ndpSNMMAC, nsMsg(vip6s, []byte(ndpNonce))), naWant(t, ndpAllMAC, vip6s, "ff02::1", sO)),
		answered("the gateway6: as a router", nsFrame(ndpPeerLL, ndpGWSNM, "33:33:ff:00:00:01", nsMsg(ndpGW6, slla)),
			naWant(t, dptest.RtrMAC, ndpGW6, ndpPeerLL, sRSO)),
		passed("another target", dptest.ExtDev, nsFrame(ndpPeerLL, ndpOthSNM, "33:33:ff:00:00:99", nsMsg(ndpOther, slla))),
		passed("another target's group", dptest.ExtDev, nsFrame(ndpPeerLL, ndpOthSNM, "33:33:ff:00:00:99", nsMsg(vip6s, slla))),
		passed("not an ARP interface", dptest.UlDev, solicit),
		passed("802.1Q tagged", dptest.ExtDev, tagged),
		passed("behind an extension header", dptest.ExtDev, eth6(dptest.RtrMAC, ndpSNMMAC, false, withExt)),
		dropped("hop limit 254", bad(ndpPeerLL, ndpSNM, 254, nsMsg(vip6s, slla), none, true), "drop_ndp_hop_limit"),
		dropped("hop limit 64, unicast", bad(client6, vip6s, 64, nsMsg(vip6s, slla), none, true), "drop_ndp_hop_limit"),
		dropped("bad checksum", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla), func(m []byte) { m[2] ^= 0x01 }, false), "drop_ndp_csum"),
		dropped("target edited after the checksum", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla), func(m []byte) { m[23] ^= 0x80 }, false), "drop_ndp_csum"),
		dropped("20 bytes", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s)[:20], none, true), "drop_ndp_short"),
		dropped("multicast target", bad(ndpPeerLL, "ff02::1", 255, nsMsg("ff02::1"), none, true), "drop_ndp_target"),
		dropped("code 1", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla), func(m []byte) { m[1] = 1 }, true), "drop_ndp_bad"),
		dropped("an option of length 0", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla), func(m []byte) { m[25] = 0 }, true), "drop_ndp_bad"),
		dropped("an option past the end", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla), func(m []byte) { m[25] = 2 }, true), "drop_ndp_bad"),
		dropped("seven options", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, slla, slla, slla, slla, slla, slla, slla), none, true), "drop_ndp_bad"),
		dropped("over 512 bytes", bad(ndpPeerLL, ndpSNM, 255, nsMsg(vip6s, ndpOpt(1, make([]byte, 500))), none, true), "drop_ndp_bad"),
		dropped("duplicate address detection with a source link-layer address",
			bad("::", ndpSNM, 255, nsMsg(vip6s, slla), none, true), "drop_ndp_bad"),
		dropped("duplicate address detection to all-nodes", bad("::", "ff02::1", 255, nsMsg(vip6s), none, true), "drop_ndp_bad"),
		dropped("duplicate address detection to the target itself: the parser's martian",
			bad("::", vip6s, 255, nsMsg(vip6s), none, true), "drop_ip6_martian"),
	})

	// Not the owner; then an owner whose deadline passed with nobody to
	// clear the map.
	if err := e.SetARPOwner(time.Time{}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		passed("not owner: a VIP", dptest.ExtDev, solicit),
		passed("not owner: a malformed one, to the kernel", dptest.ExtDev, bad(ndpPeerLL, ndpSNM, 254, nsMsg(vip6s, slla), none, true)),
	})
	if err := e.SetARPOwner(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{answered("before its deadline: a VIP", solicit, naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO))})
	time.Sleep(150 * time.Millisecond)
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		passed("past its deadline: a VIP", dptest.ExtDev, solicit),
		passed("past its deadline: the gateway6", dptest.ExtDev, nsFrame(ndpPeerLL, ndpGWSNM, "33:33:ff:00:00:01", nsMsg(ndpGW6, slla))),
	})
	// The extra addresses are replaced whole, per family.
	if err := e.SetARPOwner(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetARPAddrs([]netip.Addr{netip.MustParseAddr("198.51.100.254")}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		passed("a removed gateway6", dptest.ExtDev, nsFrame(ndpPeerLL, ndpGWSNM, "33:33:ff:00:00:01", nsMsg(ndpGW6, slla))),
		answered("a VIP still", solicit, naWant(t, dptest.RtrMAC, vip6s, ndpPeerLL, sSO)),
	})
}

// TestCheckARPAddrs: the extra addresses are unicast, of either family,
// at most ARPAddrsMax of each.
func TestCheckARPAddrs(t *testing.T) {
	many := func(first string) []netip.Addr {
		out := []netip.Addr{netip.MustParseAddr(first)}
		for len(out) <= ARPAddrsMax {
			out = append(out, out[len(out)-1].Next())
		}
		return out
	}
	for _, c := range []struct {
		addrs []netip.Addr
		ok    bool
	}{
		{[]netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1")}, true},
		{many("198.51.100.1")[:ARPAddrsMax], true},
		{append(many("198.51.100.1")[:ARPAddrsMax], many("2001:db8::1")[:ARPAddrsMax]...), true},
		{many("198.51.100.1"), false},
		{many("2001:db8::1"), false},
		{[]netip.Addr{netip.MustParseAddr("ff02::1")}, false},
		{[]netip.Addr{netip.MustParseAddr("::")}, false},
		{[]netip.Addr{netip.MustParseAddr("::1")}, false},
		{[]netip.Addr{netip.MustParseAddr("::ffff:198.51.100.1")}, false},
		{[]netip.Addr{netip.MustParseAddr("fe80::1%eth0")}, false},
		{[]netip.Addr{netip.MustParseAddr("224.0.0.1")}, false},
		{[]netip.Addr{netip.MustParseAddr("0.0.0.0")}, false},
		{[]netip.Addr{{}}, false},
	} {
		if err := CheckARPAddrs(c.addrs); (err == nil) != c.ok {
			t.Errorf("CheckARPAddrs(%v) = %v, want ok %v", c.addrs, err, c.ok)
		}
	}
}

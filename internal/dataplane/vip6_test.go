package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/bpfemu"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
)

// The IPv6 VIP path (issue 21; bpf/edge.c lb6_ingress, lb6_reply_ok):
// an IPv6 VIP's listeners in lb_listeners6 / lb_ranges6, its connections
// in lb_conns6, the Maglev tables and backend slots shared with IPv4.
const (
	vip6s    = "2001:db8:e1::81"
	guest6G  = "198.19.21.1" // backend g: on hostAddr, VSID vsid
	guest6H  = "198.19.31.1" // backend h: on otherHost, VSID 6000
	vsidH    = 6000
	lgenSlot = 5 // a table slot never filled: no backend
)

// vip6Bed is newDecap6Bed with an IPv6 VIP programmed through the Go API:
// tcp 443 -> table 0 (backend g), tcp 8000-8100 -> table 1 (h), udp any
// port -> table 1, tcp 9000 -> an empty table slot, tcp 9001 -> table 2
// (a nat backend, n).
type vip6Bed struct {
	*lbBed
}

func newVIP6Bed(t *testing.T) *vip6Bed {
	eb := newDecap6Bed(t)
	b := &lbBed{edgeBed: eb, idx: map[string]uint32{}}
	e := b.edge
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.SetLBConfig(LBConfig{HZ: kernelHZ(t), SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second, UDP: time.Minute}))
	for i, x := range []struct {
		name string
		be   LBBackend
	}{
		{"g", LBBackend{Mode: ModeEncap, Addr: addr(hostAddr), Guest: addr(guest6G), VSID: vsid, Gen: 1}},
		{"h", LBBackend{Mode: ModeEncap, Addr: addr(otherHost), Guest: addr(guest6H), VSID: vsidH, Gen: 1}},
		{"n", LBBackend{Mode: ModeNAT, Addr: addr(beA), Port: 8080, Gen: 1}},
	} {
		b.idx[x.name] = uint32(i)
		must(e.SetBackend(uint32(i), x.be))
	}
	b.table(t, 0, "g")
	b.table(t, 1, "h")
	b.table(t, 2, "n")
	v := addr(vip6s)
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 0}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 8000, Last: 8100}, ListenerValue{Table: 1}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoUDP}, ListenerValue{Table: 1}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 9000}, ListenerValue{Table: lgenSlot}))
	must(e.PutListener(Listener{VIP: v, Proto: ProtoTCP, Port: 9001}, ListenerValue{Table: 2}))
	must(e.PutVIP(v))
	return &vip6Bed{b}
}

// vip6Encap is the frame the edge must emit for the IPv6 packet ip to a
// VIP whose flow went to the backend guest on host in VSID vs: as
// encap6Of, but the inner destination MAC is 02:01 and the guest's IPv4
// address (an IPv4 VIP's, contract.md).
func vip6Encap(t *testing.T, ip []byte, host, guest string, vs uint32) []byte {
	src, _ := netip.AddrFromSlice(ip[8:24])
	dst, _ := netip.AddrFromSlice(ip[24:40])
	tuple := flowhash.Tuple{Src: src, Dst: dst, Proto: ip[6]}
	if ip[6] == nhTCP || ip[6] == nhUDP {
		tuple.SrcPort, tuple.DstPort = binary.BigEndian.Uint16(ip[40:]), binary.BigEndian.Uint16(ip[42:])
	}
	return vip6EncapFlow(t, ip, tuple, host, guest, vs)
}

// vip6EncapFlow is vip6Encap for a packet of the flow ft (client -> VIP):
// the key's FlowID is ft's (an ICMPv6 error about the flow gets the
// flow's).
func vip6EncapFlow(t *testing.T, ip []byte, ft flowhash.Tuple, host, guest string, vs uint32) []byte {
	t.Helper()
	key := vs<<8 | uint32(flowhash.FlowID6(ft, testSeed))
	g := addr(guest).As4()
	innerDst := "02:01:" + hex2(g[0]) + ":" + hex2(g[1]) + ":" + hex2(g[2]) + ":" + hex2(g[3])
	in := append([]byte(nil), ip...)
	in[7]--
	tc := ip[0]<<4 | ip[1]>>4
	return nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, host, key, tc, eth6(gwMAC, innerDst, false, in))
}

// TestEdgeIPv6VIP: packets from the Internet to an IPv6 VIP go by its
// listeners as an IPv4 VIP's do (the exact port, then the ranges, then the
// any-port listener), are encapsulated byte for byte to the backend's
// host (key VSID << 8 | FlowID of the IPv6 5-tuple, inner MAC 02:01 and
// the guest's IPv4 address, ethertype IPv6, hop limit decremented) and
// counted under lb_encap_tx and the backend's counters; no listener,
// no backend, a nat backend, an expired hop limit, a packet too big and
// the VIP's anti-spoofing are dropped under their counters.
func TestEdgeIPv6VIP(t *testing.T) {
	b := newVIP6Bed(t)
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	syn := withTC(ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02)), 0x28)
	rng := ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 8050, 0x02))
	rngEnd := ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 8100, 0x02))
	udp := ip6Hdr(client6, vip6s, nhUDP, udp6(5353, 53, 12))
	ext := ip6Hdr(client6, vip6s, nhDst, cat(optHdr(nhUDP, 1), udp6(7, 9, 4)))
	fits := ip6Hdr(client6, vip6s, nhUDP, udp6(1, 2, 1458-48))
	big := ip6Hdr(client6, vip6s, nhUDP, udp6(1, 2, 1459-48))
	enc := func(name string, ip []byte, host, guest string, vs uint32) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpRedirect, out: vip6Encap(t, ip, host, guest, vs),
			stats: map[string]uint64{"lb_encap_tx": 1}}
	}
	drop := func(name string, ip []byte, counter string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: inet(ip), action: xdpDrop, stats: map[string]uint64{counter: 1}}
	}
	extOut := vip6Encap(t, ext, otherHost, guest6H, vsidH)
	// The upper layer's ports are hashed (behind the 8-byte option).
	{
		src, dst := addr(client6), addr(vip6s)
		key := uint32(vsidH)<<8 | uint32(flowhash.FlowID6(flowhash.Tuple{Src: src, Dst: dst, Proto: nhUDP, SrcPort: 7, DstPort: 9}, testSeed))
		in := append([]byte(nil), ext...)
		in[7]--
		extOut = nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, otherHost, key, 0, eth6(gwMAC, "02:01:c6:13:1f:01", false, in))
	}
	before, err := b.edge.BackendCounters(b.idx["g"])
	if err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		enc("tcp 443: the exact-port listener, traffic class to the outer tos", syn, hostAddr, guest6G, vsid),
		enc("tcp 8050: the range listener", rng, otherHost, guest6H, vsidH),
		enc("tcp 8100: the range's last port", rngEnd, otherHost, guest6H, vsidH),
		enc("udp 53: the any-port listener", udp, otherHost, guest6H, vsidH),
		{name: "destination options header: the upper layer's ports", dev: dptest.ExtDev, in: inet(ext), action: xdpRedirect,
			out: extOut, stats: map[string]uint64{"lb_encap_tx": 1}},
		enc("largest packet the underlay carries", fits, otherHost, guest6H, vsidH),
		drop("too big for the underlay", big, "drop_too_big"),
		drop("hop limit 1", withHop(ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 8050, 0x02)), 1), "drop_ttl"),
		drop("tcp 80: no listener", ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 80, 0x02)), "drop_lb_no_port"),
		drop("tcp 8101: past the range", ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 8101, 0x02)), "drop_lb_no_port"),
		drop("icmpv6 echo: no listener", ip6Hdr(client6, vip6s, nhICMPv6, icmp6(128, 12)), "drop_lb_no_port"),
		drop("a listener whose table is empty", ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 9000, 0x02)), "drop_lb_no_backend"),
		drop("a nat backend without an IPv6 address (IPv4 beA)", ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 9001, 0x02)), "drop_lb_no_backend"),
		drop("source in the region's prefix", ip6Hdr("2001:db8:e1:ffff::1", vip6s, nhTCP, tcp6(1, 443, 0x02)), "drop_spoof_own"),
		drop("unique-local source", ip6Hdr("fd12:3456::1", vip6s, nhTCP, tcp6(1, 443, 0x02)), "drop_spoof_bogon"),
		drop("the VIP itself as source", ip6Hdr(vip6s, vip6s, nhTCP, tcp6(1, 443, 0x02)), "drop_spoof_own"),
	})
	after, err := b.edge.BackendCounters(b.idx["g"])
	if err != nil {
		t.Fatal(err)
	}
	// As for IPv4 (lb_count): the entry's insert counts a packet and a
	// connection, the packet sent a packet and its bytes.
	if after.Packets-before.Packets != 2 || after.Conns-before.Conns != 1 || after.Bytes-before.Bytes != uint64(len(syn)) {
		t.Fatalf("backend g counters %+v -> %+v: want +2 packets, +%d bytes, +1 connection", before, after, len(syn))
	}
}

// outerDst is the outer IPv4 destination of an encapsulated frame (the
// backend's host), or "" for another action.
func (b *vip6Bed) outerDst(t *testing.T, ip []byte) string {
	t.Helper()
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != xdpRedirect {
		return actionNames[res.Action]
	}
	a, _ := netip.AddrFromSlice(res.Out[14+16 : 14+20])
	return a.String()
}

func (b *vip6Bed) conns(t *testing.T) (v4, v6 int) {
	t.Helper()
	if err := b.edge.Conns(func(c Conn) bool {
		if c.Dst.Is6() {
			v6++
		} else {
			v4++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return v4, v6
}

// TestEdgeIPv6VIPConnTable: an IPv6 flow keeps its backend in lb_conns6
// when the Maglev table changes (per-connection consistency), a new flow
// and a new SYN of the same flow go by the new table, a RST on a miss
// makes no entry, a backend's new generation makes its entries stale, and
// a removed listener stops its established flows (the listener
// generation); no IPv4 entry is written.
func TestEdgeIPv6VIPConnTable(t *testing.T) {
	b := newVIP6Bed(t)
	flow := func(sport uint16, flags uint8) []byte {
		return ip6Hdr(client6, vip6s, nhTCP, tcp6(sport, 443, flags))
	}
	const syn, ack, rst = 0x02, 0x10, 0x04
	if got := b.outerDst(t, flow(40000, syn)); got != hostAddr {
		t.Fatalf("SYN went to %s, want %s", got, hostAddr)
	}
	b.table(t, 0, "h")
	if got := b.outerDst(t, flow(40000, ack)); got != hostAddr {
		t.Fatalf("established flow moved to %s after the table changed", got)
	}
	if got := b.outerDst(t, flow(40001, syn)); got != otherHost {
		t.Fatalf("new flow went to %s, want the new table's %s", got, otherHost)
	}
	if got := b.outerDst(t, flow(40000, syn)); got != otherHost {
		t.Fatalf("a new SYN reused the old entry (%s)", got)
	}
	if got := b.outerDst(t, flow(40000, ack)); got != otherHost {
		t.Fatalf("after the new SYN the flow goes to %s", got)
	}
	v4, v6 := b.conns(t)
	if v4 != 0 || v6 != 2 {
		t.Fatalf("%d IPv4 and %d IPv6 entries, want 0 and 2", v4, v6)
	}
	occ, err := b.edge.ConnOccupancy()
	if err != nil || occ.Total != 0 || occ.Total6 != 2 || occ.ByVIP[addr(vip6s)] != 2 || occ.ByBackend[b.idx["h"]] != 2 || occ.Capacity6 == 0 {
		t.Fatalf("occupancy %+v %v: want the two IPv6 entries, both on h", occ, err)
	}
	if got := b.outerDst(t, flow(40002, rst)); got != otherHost {
		t.Fatalf("RST went to %s", got)
	}
	if _, v6 := b.conns(t); v6 != 2 {
		t.Fatalf("a RST on a miss made an entry (%d)", v6)
	}
	// A new generation of backend h: its entries are stale, the table
	// (g again) decides.
	b.table(t, 0, "g")
	if err := b.edge.SetBackend(b.idx["h"], LBBackend{Mode: ModeEncap, Addr: addr(otherHost), Guest: addr(guest6H), VSID: vsidH, Gen: 2}); err != nil {
		t.Fatal(err)
	}
	if got := b.outerDst(t, flow(40001, ack)); got != hostAddr {
		t.Fatalf("an entry of a reused slot still honoured (%s)", got)
	}
	// The listener goes: its established flow is dropped (drop_lb_no_port).
	if err := b.edge.DeleteListener(Listener{VIP: addr(vip6s), Proto: ProtoTCP, Port: 443}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{{name: "listener removed", dev: dptest.ExtDev,
		in: eth6(dptest.RtrMAC, dptest.ExtMAC, false, flow(40001, ack)), action: xdpDrop, stats: map[string]uint64{"drop_lb_no_port": 1}}})
	info, err := b.edge.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	if info["ct_miss"] == 0 || info["syn_repick"] == 0 || info["ct_stale"] == 0 || info["ct_insert"] < 2 {
		t.Fatalf("info counters %v", info)
	}
}

// TestEdgeIPv6VIPReply: an IPv6 VIP's reply in NVGRE from a host is
// forwarded when that host's guest serves the flow (its connection, or
// else the VIP's table: contract.md), counted under lb_reply_tx, and
// dropped as drop_spoof from another host, in another VSID, or for a
// port whose backend is elsewhere.
func TestEdgeIPv6VIPReply(t *testing.T) {
	b := newVIP6Bed(t)
	if got := b.outerDst(t, ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02))); got != hostAddr {
		t.Fatalf("SYN went to %s", got)
	}
	reply := func(sport, dport uint16) []byte { return ip6Hdr(vip6s, client6, nhTCP, tcp6(sport, dport, 0x12)) }
	from := func(host string, vs uint32, ip []byte) []byte { return fromHost6(t, host, vs<<8|0x33, ip) }
	r := reply(443, 40000)
	r2 := reply(443, 40009) // no entry: the table gives it to g
	r3 := reply(8050, 40000)
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "reply from the backend's host", dev: dptest.UlDev, in: from(hostAddr, vsid, r), action: xdpRedirect,
			out: decap6Out(r), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "reply without an entry, the table's host", dev: dptest.UlDev, in: from(hostAddr, vsid, r2), action: xdpRedirect,
			out: decap6Out(r2), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "range port served by the other host", dev: dptest.UlDev, in: from(otherHost, vsidH, r3), action: xdpRedirect,
			out: decap6Out(r3), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "reply from another host", dev: dptest.UlDev, in: from(otherHost, vsidH, r), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "reply in another VSID", dev: dptest.UlDev, in: from(hostAddr, vsidH, r), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "range port from the wrong host", dev: dptest.UlDev, in: from(hostAddr, vsid, r3), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "a port without a listener", dev: dptest.UlDev, in: from(hostAddr, vsid, reply(80, 40000)), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
	})
}

// TestEdgeIPv6VIPListeners: the listener API keeps IPv6 VIPs' listeners
// in their own maps and reads both families back; a mapped or zoned VIP
// is refused.
func TestEdgeIPv6VIPListeners(t *testing.T) {
	b := newVIP6Bed(t)
	if err := b.edge.PutListener(Listener{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 0}); err != nil {
		t.Fatal(err)
	}
	got, err := b.edge.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	v := addr(vip6s)
	for l, want := range map[Listener]uint32{
		{VIP: v, Proto: ProtoTCP, Port: 443}:              0,
		{VIP: v, Proto: ProtoTCP, Port: 8000, Last: 8100}: 1,
		{VIP: v, Proto: ProtoUDP}:                         1,
		{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}: 0,
	} {
		if g, ok := got[l]; !ok || g.Table != want {
			t.Errorf("listener %+v: %+v %v, want table %d", l, g, ok, want)
		}
	}
	if len(got) != 6 {
		t.Errorf("%d listeners read back, want 6: %v", len(got), got)
	}
	exact, sets, ranges, err := b.edge.ListenerEntries()
	if err != nil || exact != 4 || sets != 2 || ranges != 1 {
		t.Errorf("entries: %d exact, %d range sets, %d ranges, %v: want 4, 2, 1", exact, sets, ranges, err)
	}
	for _, bad := range []string{"::ffff:198.51.100.21", "fe80::1%eth0"} {
		if err := b.edge.PutListener(Listener{VIP: addr(bad), Proto: ProtoTCP, Port: 1}, ListenerValue{}); err == nil {
			t.Errorf("listener of %s taken", bad)
		}
		if err := b.edge.PutVIP(addr(bad)); err == nil {
			t.Errorf("VIP %s taken", bad)
		}
	}
	if vips, err := b.edge.VIPs(); err != nil || !containsAddr(vips, v) {
		t.Errorf("VIPs() = %v %v, want %s among them", vips, err, v)
	}
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// TestEdgeIPv6VIPInstructions replays an established flow's packet to the
// IPv6 VIP, the same flow's reply from its host and an established flow
// to an IPv4 encap VIP through the compiled xdp_edge (internal/bpfemu, as
// `bench dataplane`'s insns rows do), checks each replay ends as the
// kernel's run of the same frame does, and logs the instructions each
// executes (-v): the figures docs/dataplane.md gives.
func TestEdgeIPv6VIPInstructions(t *testing.T) {
	b := newVIP6Bed(t)
	e := b.edge
	if err := e.PutListener(Listener{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 0}); err != nil {
		t.Fatal(err)
	}
	if err := e.PutVIP(addr(vipEncap)); err != nil {
		t.Fatal(err)
	}
	specs, err := ProgramSpecs()
	if err != nil {
		t.Fatal(err)
	}
	bench, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()
	inet := func(ip []byte) []byte { return eth6(dptest.RtrMAC, dptest.ExtMAC, false, ip) }
	syn4, ack4 := tcpTo(vipEncap, 443, "syn"), tcpTo(vipEncap, 443, "ack")
	for _, c := range []struct {
		name      string
		dev       string
		first, in []byte
		action    uint32
	}{
		{"IPv4 encap VIP, established", dptest.ExtDev, syn4.frame(t, dptest.RtrMAC, dptest.ExtMAC), ack4.frame(t, dptest.RtrMAC, dptest.ExtMAC), xdpRedirect},
		{"IPv6 VIP, established", dptest.ExtDev, inet(ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x02))),
			inet(ip6Hdr(client6, vip6s, nhTCP, tcp6(40000, 443, 0x10))), xdpRedirect},
		{"IPv6 VIP, reply from its host", dptest.UlDev, nil,
			fromHost6(t, hostAddr, vsid<<8, ip6Hdr(vip6s, client6, nhTCP, tcp6(443, 40000, 0x10))), xdpRedirect},
	} {
		for _, f := range [][]byte{c.first, c.in} { // the flow made, the next hop's cache filled
			if f == nil {
				continue
			}
			if _, err := b.env.Run(e.Program(), c.dev, f); err != nil {
				t.Fatal(err)
			}
		}
		idx, err := b.env.Node.Ifindex(c.dev)
		if err != nil {
			t.Fatal(err)
		}
		j, err := bench.Jiffies()
		if err != nil {
			t.Fatal(err)
		}
		got, err := bpfemu.Replay(specs["xdp_edge"], bpfemu.Env{Maps: e.Maps(), CPU: firstCPU(), Ifindex: uint32(idx), Jiffies: j}, c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, err := b.env.Run(e.Program(), c.dev, c.in)
		if err != nil {
			t.Fatal(err)
		}
		if want.Action != c.action || got.Action != want.Action || !bytes.Equal(got.Out, want.Out) {
			t.Fatalf("%s: replay action %d (%d bytes), kernel %d (%d bytes), want %d", c.name, got.Action, len(got.Out), want.Action, len(want.Out), c.action)
		}
		t.Logf("%s: %s", c.name, got)
	}
}

// firstCPU is the first CPU the test may run on: dptest.Env.Run pins its
// runs there, so the per-CPU caches the replay reads are that CPU's.
func firstCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			return c
		}
	}
	return 0
}

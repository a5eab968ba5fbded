package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/netns"
)

// Frame size limits of BPF_PROG_TEST_RUN for XDP.
const (
	// The kernel refuses (EINVAL) to run XDP on less than an Ethernet
	// header, as no driver would hand it such a frame.
	fuzzMinFrame = 14
	// The linear part of a test-run frame is a page minus XDP headroom
	// (256) and the skb_shared_info tailroom (320 on x86-64): 3520 bytes.
	// Longer inputs are not rejected but split into a multi-buffer frame
	// whose tail the program never sees; the edge is not frags-aware and
	// its links run at MTU 1500, so such frames cannot reach it and are
	// skipped.
	fuzzMaxFrame = 4096 - 256 - 320
)

// The fuzz input is one selector byte followed by the frame. Selector bits:
const (
	// Deliver on the underlay interface (else on the Internet one).
	selUnderlay = 1 << iota
	// Before the run, set the IPv4 total length of the (outer) packet to
	// the rest of the frame, and of the packet in NVGRE behind it to the
	// rest of the outer packet...
	selFixLen
	// ... and recompute both header checksums. Random mutations nearly
	// always break a checksum, so without these fix-ups the fuzzer
	// would hardly get past the parser's checksum test.
	selFixCsum
	// ... and, first, the TCP/UDP checksum of both packets when
	// unfragmented (a UDP checksum 0, "none", is left), and of an ICMP
	// message the ICMP checksum and the header checksum of the packet it
	// quotes: the edge does not verify these, but the checkers can then
	// require a translated packet's checksums to be valid, not only
	// consistent with the input's.
	selFixL4
	// Higher bits are ignored.
	selAllFixes = selFixLen | selFixCsum | selFixL4
)

func fuzzInput(dev string, fixes byte, frame []byte) []byte {
	sel := fixes
	if dev == dptest.UlDev {
		sel |= selUnderlay
	}
	return append([]byte{sel}, frame...)
}

// fixUp applies the selector's fix-ups to frame in place, finding the IPv4
// header the way the edge does (behind up to two VLAN tags) and the inner
// one behind a GRE header with a key and an Ethernet header. Each packet
// gets its total length first, then its L4 checksums (which cover the
// length), then its header checksum.
func fixUp(sel byte, b []byte) {
	if sel&selAllFixes == 0 {
		return
	}
	off := 12
	for i := 0; i < 2 && len(b) >= off+2; i++ {
		if et := binary.BigEndian.Uint16(b[off:]); et != 0x8100 && et != 0x88a8 {
			break
		}
		off += 4
	}
	if len(b) < off+2 || binary.BigEndian.Uint16(b[off:]) != 0x0800 {
		return
	}
	l3 := off + 2
	fix := func(l3, end int) {
		if len(b) < l3+20 {
			return
		}
		hl := int(b[l3]&0xf) * 4
		if hl < 20 || l3+hl > len(b) {
			return
		}
		if sel&selFixLen != 0 && end-l3 <= 0xffff {
			binary.BigEndian.PutUint16(b[l3+2:], uint16(end-l3))
		}
		if sel&selFixL4 != 0 {
			fixL4(b, l3, hl)
		}
		if sel&selFixCsum != 0 {
			b[l3+10], b[l3+11] = 0, 0
			c := csum(b[l3 : l3+hl])
			b[l3+10], b[l3+11] = byte(c>>8), byte(c)
		}
	}
	// Inner first: its checksum does not depend on the outer header.
	if len(b) >= l3+20 && b[l3+9] == 47 {
		hl := int(b[l3]&0xf) * 4
		end := len(b)
		if sel&selFixLen == 0 {
			end = min(l3+int(binary.BigEndian.Uint16(b[l3+2:])), len(b))
		}
		in := l3 + hl + 8 + 14
		if hl >= 20 && len(b) >= in && binary.BigEndian.Uint16(b[in-2:]) == 0x0800 {
			fix(in, end)
		}
	}
	fix(l3, len(b))
}

// fixL4 recomputes the L4 checksums of the IPv4 packet at l3 (header
// length hl) if it is unfragmented and inside b (see selFixL4).
func fixL4(b []byte, l3, hl int) {
	tot := int(binary.BigEndian.Uint16(b[l3+2:]))
	if tot < hl || l3+tot > len(b) || binary.BigEndian.Uint16(b[l3+6:])&0x3fff != 0 {
		return
	}
	pkt := b[l3 : l3+tot]
	l4 := pkt[hl:]
	put := func(at []byte, c uint16) { at[0], at[1] = byte(c>>8), byte(c) }
	switch pkt[9] {
	case 6:
		if len(l4) >= 20 {
			put(l4[16:], 0)
			put(l4[16:], l4Csum(pkt[12:16], pkt[16:20], 6, l4))
		}
	case 17:
		if len(l4) >= 8 && (l4[6] != 0 || l4[7] != 0) {
			put(l4[6:], 0)
			c := l4Csum(pkt[12:16], pkt[16:20], 17, l4)
			if c == 0 {
				c = 0xffff
			}
			put(l4[6:], c)
		}
	case 1:
		if len(l4) < 8 {
			return
		}
		if q := l4[8:]; icmpIsError(l4[0]) && len(q) >= 20 && q[0]>>4 == 4 {
			if qhl := int(q[0]&0xf) * 4; qhl >= 20 && qhl <= len(q) {
				put(q[10:], 0)
				put(q[10:], csum(q[:qhl]))
			}
		}
		put(l4[2:], 0)
		put(l4[2:], csum(l4))
	}
}

// sum16 is the one's complement sum of b (an odd last byte is the high
// byte of a word), folded to 16 bits.
func sum16(parts ...[]byte) uint16 {
	var s uint32
	for _, b := range parts {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
		for s>>16 != 0 {
			s = s&0xffff + s>>16
		}
	}
	return uint16(s)
}

// l4Csum is the TCP/UDP checksum over the pseudo-header of src, dst,
// proto and l4 (0 where l4 carries a correct one).
func l4Csum(src, dst []byte, proto byte, l4 []byte) uint16 {
	n := len(l4)
	return ^sum16(src, dst, []byte{0, proto, byte(n >> 8), byte(n)}, l4)
}

// onesEq tells whether two one's complement sums are the same number
// (0x0000 and 0xffff are both zero).
func onesEq(a, b uint16) bool { return a%0xffff == b%0xffff }

func icmpIsError(typ byte) bool { return typ == 3 || typ == 4 || typ == 5 || typ == 11 || typ == 12 }

// FuzzEdge feeds frames through the real edge program and holds it to its
// invariant: nothing malformed or unknown is ever transmitted. PASS leaves
// the frame untouched (except the decapsulated hand-off to the kernel),
// DROP is always acceptable (but a service's "no listener" and "no
// backend" drops must be true), and TX/REDIRECT must emit exactly one of
// a well-formed NVGRE encapsulation to the EIP's host, a well-formed
// decapsulated packet from an EIP bound to the sending host, a
// well-formed ICMP error quoting the input, or one of the load balancer's
// outputs (fuzzEdgeBed.checkLB*, checkARP): a VIP's flow to the backend
// its listener's Maglev table picks (NVGRE, or DNAT with every checksum
// right), an ICMP error about a flow steered to that backend, a nat
// backend's reply translated back to its VIP or a guest's decapsulated,
// an ARP reply for a VIP. Exactly one counter moves per packet, and it
// must agree with the action and the output. The connection table must
// agree with the Maglev tables (which never change in the bed), gain no
// entry from a RST, an ICMP error or a reply, and not change for a packet
// dropped as spoofed.
//
// Under plain go test only the seeds run. Fuzz with
//
//	go test -run XXX -fuzz FuzzEdge -fuzztime 3m ./internal/dataplane/
func FuzzEdge(f *testing.F) {
	fb := newFuzzEdgeBed(f)
	// Every seed as it is, and with the fix-ups on (a no-op on a
	// well-formed frame without Ethernet padding) so that its mutations
	// keep lengths and checksums right.
	for _, s := range edgeFuzzSeeds(f) {
		f.Add(fuzzInput(s.dev, 0, s.frame))
		f.Add(fuzzInput(s.dev, selAllFixes, s.frame))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Shorter frames never reach XDP (see fuzzMinFrame); longer
		// ones could not reach this program (see fuzzMaxFrame).
		if len(data) < 1+fuzzMinFrame || len(data)-1 > fuzzMaxFrame {
			return
		}
		dev := dptest.ExtDev
		if data[0]&selUnderlay != 0 {
			dev = dptest.UlDev
		}
		frame := append([]byte(nil), data[1:]...)
		fixUp(data[0], frame)
		counter, _ := fb.check(t, dev, frame)
		outcomeCoverage(dev, counter)
	})
}

// outcomeCoverage gives each outcome of the BPF program (its counter, and
// coarsely the ingress side) its own Go basic block: the fuzzer is guided
// by Go coverage only and cannot see which path the program took, so
// without this an input reaching a new data-plane outcome would not count
// as interesting.
func outcomeCoverage(dev, counter string) int {
	n := 0
	switch counter {
	case "pass_non_ip":
		n = 1
	case "pass_ipv6":
		n = 2
	case "pass_not_ours":
		n = 3
	case "encap_tx":
		n = 4
	case "decap_tx":
		n = 5
	case "decap_pass":
		n = 6
	case "icmp_ttl_tx":
		n = 7
	case "icmp_frag_tx":
		n = 8
	case "drop_eth_trunc":
		n = 9
	case "drop_ip_trunc":
		n = 10
	case "drop_ip_bad":
		n = 11
	case "drop_ip_csum":
		n = 12
	case "drop_ip_martian":
		n = 13
	case "drop_l4_trunc":
		n = 14
	case "drop_gre_bad":
		n = 15
	case "drop_inner_bad":
		n = 16
	case "drop_spoof":
		n = 17
	case "drop_unknown":
		n = 18
	case "drop_ttl":
		n = 19
	case "drop_too_big":
		n = 20
	case "drop_fib":
		n = 21
	case "drop_no_neigh":
		n = 22
	case "drop_headroom":
		n = 23
	case "drop_icmp_limit":
		n = 24
	case "drop_no_edge":
		n = 25
	case "drop_bad_dst":
		n = 26
	case "lb_encap_tx":
		n = 27
	case "lb_nat_tx":
		n = 28
	case "lb_reply_tx":
		n = 29
	case "lb_icmp_tx":
		n = 30
	case "arp_reply":
		n = 31
	case "drop_lb_no_backend":
		n = 32
	case "drop_lb_no_port":
		n = 33
	case "lb_nat_pass":
		n = 34
	case "drop_no_eip": // agent only: the edge never counts it
		n = 35
	case "flow_new": // agent only
		n = 36
	case "drop_spoof_own":
		n = 37
	case "drop_spoof_underlay":
		n = 38
	case "drop_spoof_bogon":
		n = 39
	case "drop_rl_source":
		n = 40
	case "drop_rl_syn":
		n = 41
	case "drop_fw_deny":
		n = 42
	case "drop_fw_private":
		n = 43
	case "pass_hc_reply":
		n = 44
	case "drop_bw":
		n = 45
	case "pass_local":
		n = 46
	case "drop_local":
		n = 47
	case "drop_ip6_ext_limit":
		n = 48
	case "drop_ip6_ext_bad":
		n = 49
	case "drop_ip6_rh0":
		n = 50
	case "drop_ip6_tiny_frag":
		n = 51
	case "drop_ip6_martian":
		n = 52
	case "drop_ip6_off_link":
		n = 53
	case "drop_ip6_udp_csum0":
		n = 54
	case "drift_prev_tx": // beside encap_tx, to a drifting EIP (none in the fuzz bed)
		n = 55
	case "drift_flow_new":
		n = 56
	case "drift_flow_fail":
		n = 57
	case "ndp_reply":
		n = 58
	case "drop_ndp_hop_limit":
		n = 59
	case "drop_ndp_short":
		n = 60
	case "drop_ndp_csum":
		n = 61
	case "drop_ndp_target":
		n = 62
	case "drop_ndp_bad":
		n = 63
	}
	if dev == dptest.UlDev {
		switch {
		case n <= 8:
			n += 100
		case n <= 16:
			n += 200
		default:
			n += 300
		}
	}
	return n
}

// fuzzEdgeBed is the edge test bed of newEdgeBed with the services of
// newLBBed, built once per fuzz process (every fuzz worker runs FuzzEdge's
// body once, then many inputs) and torn down with the fuzz target.
type fuzzEdgeBed struct {
	*edgeBed
	routes map[netip.Addr]Route // EIP -> route, as loaded
	hosts  map[netip.Addr]bool  // hosts of those routes
	lb     *lbModel             // the services, as loaded
	seed   uint32
	run    func(dev string, data []byte) (dptest.Result, error)
	last   map[string]Count    // counters after the previous input
	local  map[netip.Addr]bool // addresses the bed's kernel does not forward (asked once each)
}

// Services of the fuzz bed beyond newLBBed's (withServices).
const (
	beD       = "198.19.100.4" // nat backend of vipNAT udp:53, port 5353
	fuzzConns = 1 << 16        // connection table size (LRU)
)

// newFuzzEdgeBed builds the same bed as newEdgeBed (same namespace, config
// and routes). newEdgeBed takes a *testing.T, which a fuzz target only gets
// per input (its cleanups run after each input), hence this twin on
// testing.TB. The ICMP rate limit is raised so that at fuzzing speed ICMP
// errors are generated (and checked) rather than suppressed.
//
// It then programs newLBBed's services (withServices) and a few more, so
// that every listener and backend kind is there: pool A (vipNAT tcp:80)
// is backends a and c (a Maglev table with a choice to get right); vipNAT
// udp:53 goes to d (198.19.100.4:5353, nat, with its reverse entry);
// vipNAT udp:9 is a listener whose table slot is empty (no backend);
// vipEncap udp:any goes to the encap backend g. The connection table is
// small enough for the LRU to evict under fuzzing.
func newFuzzEdgeBed(tb testing.TB) *fuzzEdgeBed {
	tb.Helper()
	requireRoot(tb)
	env, err := dptest.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(env.Close)
	e, err := LoadEdge(LoadOptions{EIPMax: 1024, ConnMax: fuzzConns})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	if err := e.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), ICMPSource6: addr(dptest.ExtAddr6), HashSeed: testSeed,
		ICMPRate: MaxICMPRate, ICMPBurst: 1 << 24, ICMPTimeExceeded: true, GatewayMAC: mac(gwMAC),
		UnderlayIfindex: uint32(fuzzUlIfindex(tb, env)),
	}); err != nil {
		tb.Fatal(err)
	}
	if err := e.PutRoutes(map[netipAddr]Route{
		addr(eip):      {Host: addr(hostAddr), VSID: vsid, StatsIdx: eipIdx},
		addr(eipNoNbr): {Host: addr("198.19.250.9"), VSID: vsid, StatsIdx: 8},
		addr(eipHole):  {Host: addr("198.19.251.9"), VSID: vsid, StatsIdx: 9},
		addr(eipOther): {Host: addr(otherHost), VSID: 6000, StatsIdx: 10},
	}); err != nil {
		tb.Fatal(err)
	}
	routes, err := e.Routes()
	if err != nil {
		tb.Fatal(err)
	}
	fb := &fuzzEdgeBed{edgeBed: &edgeBed{env: env, edge: e}, routes: routes, hosts: map[netip.Addr]bool{}, seed: testSeed}
	for _, r := range routes {
		fb.hosts[r.Host] = true
	}

	lb := withServices(tb, fb.edgeBed)
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	lb.idx["d"] = uint32(len(lb.idx))
	must(e.SetBackend(lb.idx["d"], LBBackend{Mode: ModeNAT, Addr: addr(beD), Port: 5353, Gen: 1}))
	lb.table(tb, 0, "a", "c")
	lb.table(tb, 3, "d")
	must(e.PutListener(Listener{VIP: addr(vipNAT), Proto: ProtoUDP, Port: 53}, ListenerValue{Table: 3}))
	must(e.PutListener(Listener{VIP: addr(vipNAT), Proto: ProtoUDP, Port: 9}, ListenerValue{Table: 9}))
	must(e.PutListener(Listener{VIP: addr(vipEncap), Proto: ProtoUDP, Port: 0}, ListenerValue{Table: 2}))
	if fb.lb, err = loadLBModel(e); err != nil {
		tb.Fatal(err)
	}
	fb.run = startNSRunner(tb, env, e.Program())
	return fb
}

// lbModel is the bed's services as the maps hold them, to tell what the
// edge must do with a packet.
type lbModel struct {
	vips      map[netip.Addr]bool
	listeners map[Listener]ListenerValue
	tables    map[uint32][]uint32 // slot -> backend indices
	backends  map[uint32]LBBackend
	edge      *Edge // nat reverse entries are per connection: read live
}

func loadLBModel(e *Edge) (*lbModel, error) {
	m := &lbModel{vips: map[netip.Addr]bool{}, tables: map[uint32][]uint32{}, backends: map[uint32]LBBackend{}}
	vips, err := e.VIPs()
	if err != nil {
		return nil, err
	}
	for _, v := range vips {
		m.vips[v] = true
	}
	if m.listeners, err = e.Listeners(); err != nil {
		return nil, err
	}
	for _, l := range m.listeners {
		t, err := e.Table(l.Table)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue // an empty slot: no backend
		}
		if err != nil {
			return nil, err
		}
		m.tables[l.Table] = t
		for _, i := range t {
			if _, ok := m.backends[i]; !ok && i < 65536 {
				if m.backends[i], err = e.Backend(i); err != nil {
					return nil, err
				}
			}
		}
	}
	m.edge = e
	return m, nil
}

// lbFlow is the client -> VIP flow the load balancer decides on.
type lbFlow struct {
	client, vip  netip.Addr
	cport, vport uint16 // 0 for fragments and port-less protocols
	proto        uint8
	icmp         bool // found through the quote of an ICMP error
	rst          bool
}

// lbPick is a flow's listener and the backend its table picks.
type lbPick struct {
	flow lbFlow
	lis  ListenerValue
	idx  uint32
	be   LBBackend
}

func (p lbPick) String() string {
	return fmt.Sprintf("%v:%d -> %v:%d proto %d: backend %d %+v", p.flow.client, p.flow.cport, p.flow.vip, p.flow.vport,
		p.flow.proto, p.idx, p.be)
}

// ingressFlow is the flow of a packet to a VIP (lb_ingress): its own, or
// for an ICMP error the one of the packet it quotes (VIP -> client, inside
// the error). ok is false when the packet can be about no flow.
func ingressFlow(ip ipv4At) (f lbFlow, ok bool) {
	f = lbFlow{client: ip.src(), vip: ip.dst(), proto: ip.proto()}
	first := ip.frag()&0x1fff == 0
	l4 := ip.l4()
	if f.proto == 1 && first {
		if len(l4) < 8 || !icmpIsError(l4[0]) {
			return f, false
		}
		q := l4[8:]
		if len(q) < 20 {
			return f, false
		}
		qhl := int(q[0]&0xf) * 4
		if qhl < 20 || qhl > 60 || len(q) < qhl+4 || netip.AddrFrom4([4]byte(q[12:16])) != f.vip {
			return f, false
		}
		f.client = netip.AddrFrom4([4]byte(q[16:20]))
		f.proto = q[9]
		f.vport = binary.BigEndian.Uint16(q[qhl:])
		f.cport = binary.BigEndian.Uint16(q[qhl+2:])
		f.icmp = true
		return f, true
	}
	if (f.proto == 6 || f.proto == 17) && !ip.fragmented() && len(l4) >= 4 {
		f.cport, f.vport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	f.rst = f.proto == 6 && first && len(l4) >= 14 && l4[13]&0x04 != 0
	return f, true
}

// replyFlow is the flow a decapsulated VIP -> client packet belongs to.
func replyFlow(ip ipv4At) lbFlow {
	f := lbFlow{client: ip.dst(), vip: ip.src(), proto: ip.proto()}
	if l4 := ip.l4(); (f.proto == 6 || f.proto == 17) && !ip.fragmented() && len(l4) >= 4 {
		f.vport, f.cport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	return f
}

// pick finds a flow's listener (the exact port, else the any-port one)
// and the backend its table gives the flow hash. The connection table
// agrees (the bed's tables never change, nor do backends fail). fails is
// the drop counter when there is none.
func (m *lbModel) pick(f lbFlow, seed uint32) (p lbPick, fails string) {
	p.flow = f
	// The exact port, then a range holding it, then any port.
	l, ok := m.listeners[Listener{VIP: f.vip, Proto: f.proto, Port: f.vport}]
	for k, v := range m.listeners {
		if !ok && f.vport != 0 && k.VIP == f.vip && k.Proto == f.proto && k.IsRange() && k.Port <= f.vport && f.vport <= k.Last {
			l, ok = v, true
		}
	}
	if !ok {
		l, ok = m.listeners[Listener{VIP: f.vip, Proto: f.proto}]
	}
	if !ok {
		return p, "drop_lb_no_port"
	}
	p.lis = l
	t, ok := m.tables[l.Table]
	if !ok || len(t) == 0 {
		return p, "drop_lb_no_backend"
	}
	// The table's size M is the table's own (its inner map's size).
	h := flowhash.Hash4(flowhash.Tuple{Src: f.client, Dst: f.vip, SrcPort: f.cport, DstPort: f.vport, Proto: f.proto}, seed)
	slot := h % uint32(len(t))
	if int(slot) >= len(t) || t[slot] >= 65536 {
		return p, "drop_lb_no_backend"
	}
	p.idx = t[slot]
	p.be = m.backends[p.idx]
	return p, ""
}

// natRev is what the edge translates a nat reply (or an ICMP error about a
// nat connection) back to, and the backend's address and port it replaces.
type natRev struct {
	vip     netip.AddrPort
	backend netip.AddrPort
	icmp    bool // an ICMP error: the quote is translated
}

// reverseFor is the nat translation back for a packet: the reverse entry
// of its connection (nat is stateful: connections install them; read from
// the data plane as it is now), looked up by its reply tuple, or for an
// ICMP error by the connection it quotes (client -> backend, the error
// going to that client). Later fragments carry no ports: none.
func (m *lbModel) reverseFor(ip ipv4At) (natRev, bool) {
	if ip.frag()&0x1fff != 0 {
		return natRev{}, false
	}
	l4 := ip.l4()
	var k edgeNatRkey
	var r natRev
	switch p := ip.proto(); {
	case (p == 6 || p == 17) && len(l4) >= 4:
		k = edgeNatRkey{Baddr: ip4word(ip.src()), Caddr: ip4word(ip.dst()), Bport: binary.LittleEndian.Uint16(l4[0:2]),
			Cport: binary.LittleEndian.Uint16(l4[2:4]), Proto: p}
	case p == 1 && len(l4) >= 8+20 && icmpErrorType(l4[0]):
		q := l4[8:]
		qhl := int(q[0]&0xf) * 4
		if qhl < 20 || len(q) < qhl+4 || 8+qhl+4 > len(l4) {
			return natRev{}, false
		}
		qs, qd := netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))
		if qs != ip.dst() {
			return natRev{}, false
		}
		k = edgeNatRkey{Baddr: ip4word(qd), Caddr: ip4word(qs), Bport: binary.LittleEndian.Uint16(q[qhl+2:]),
			Cport: binary.LittleEndian.Uint16(q[qhl:]), Proto: q[9]}
		r.icmp = true
	default:
		return natRev{}, false
	}
	var v edgeNatRentry
	if err := m.edge.objs.LbNatConns.Lookup(&k, &v); err != nil {
		return natRev{}, false
	}
	r.vip = netip.AddrPortFrom(wordIP4(v.Vip), be16(v.Vport))
	r.backend = netip.AddrPortFrom(wordIP4(k.Baddr), be16(k.Bport))
	return r, true
}

// icmpErrorType: the ICMP types that quote a packet (nat.h icmp_is_error).
func icmpErrorType(t uint8) bool { return t == 3 || t == 11 || t == 12 || t == 4 || t == 5 }

// nsRunner runs the program with BPF_PROG_TEST_RUN exactly as Env.Run
// does, but from one OS thread parked in the node's namespace for the whole
// fuzz process, instead of entering the namespace (and looking the
// interface up over netlink) for every input: several times the execution
// rate. TestFuzzEdgeSeedOutcomes holds it to Env.Run.
type nsRunner struct {
	reqs    chan nsReq
	ifindex map[string]uint32
}

type nsReq struct {
	ifindex uint32
	data    []byte
	res     chan nsRes
}

type nsRes struct {
	r   dptest.Result
	err error
}

// xdpMdCtx mirrors struct xdp_md (as dptest's context does).
type xdpMdCtx struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

func startNSRunner(tb testing.TB, env *dptest.Env, prog *ebpf.Program) func(dev string, data []byte) (dptest.Result, error) {
	tb.Helper()
	nr := &nsRunner{reqs: make(chan nsReq), ifindex: map[string]uint32{}}
	for _, dev := range []string{dptest.ExtDev, dptest.UlDev} {
		idx, err := env.Node.Ifindex(dev)
		if err != nil {
			tb.Fatal(err)
		}
		nr.ifindex[dev] = uint32(idx)
	}
	fd, err := unix.Open(netns.Path(env.Node.Name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread is discarded with the goroutine
		// rather than returned to the scheduler inside the namespace.
		runtime.LockOSThread()
		err := unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		ready <- err
		if err != nil {
			return
		}
		for q := range nr.reqs {
			opts := &ebpf.RunOptions{
				Data:    q.data,
				DataOut: make([]byte, len(q.data)+512),
				Context: xdpMdCtx{DataEnd: uint32(len(q.data)), IngressIfindex: q.ifindex},
			}
			ret, err := prog.Run(opts)
			q.res <- nsRes{dptest.Result{Action: ret, Out: opts.DataOut}, err}
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("enter the test namespace: %v", err)
	}
	tb.Cleanup(func() { close(nr.reqs) })
	return func(dev string, data []byte) (dptest.Result, error) {
		idx, ok := nr.ifindex[dev]
		if !ok {
			return dptest.Result{}, fmt.Errorf("no interface %s in the bed", dev)
		}
		res := make(chan nsRes, 1)
		nr.reqs <- nsReq{ifindex: idx, data: data, res: res}
		r := <-res
		if r.err != nil {
			return dptest.Result{}, fmt.Errorf("BPF_PROG_TEST_RUN: %w", r.err)
		}
		return r.r, nil
	}
}

// check runs one frame through the edge and fails t if the outcome breaks
// the invariant. It returns the counter that moved and the output.
func (fb *fuzzEdgeBed) check(t *testing.T, dev string, in []byte) (string, []byte) {
	in = append([]byte(nil), in...) // the run must not alias the fuzzer's buffer
	// Only this process runs this program, so the counters after one
	// input are the counters before the next.
	before := fb.last
	if before == nil {
		var err error
		if before, err = fb.edge.Stats(); err != nil {
			t.Fatal(err)
		}
	}
	fb.last = nil
	ct, err := fb.ctProbe(in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fb.run(dev, in)
	if err != nil {
		t.Fatal(err)
	}
	after, err := fb.edge.Stats()
	if err != nil {
		t.Fatal(err)
	}
	fb.last = after
	var moved []string
	var n uint64
	for _, name := range StatNames() {
		if d := after[name].Packets - before[name].Packets; d != 0 {
			moved = append(moved, fmt.Sprintf("%s+%d", name, d))
			n += d
		}
	}
	counter := ""
	if len(moved) == 1 && n == 1 {
		counter = strings.TrimSuffix(moved[0], "+1")
	}
	act := actionNames[res.Action]
	if act == "" {
		act = fmt.Sprintf("action(%d)", res.Action)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		writePcap(t, t.Name(), map[string][]byte{"input": in, "got": res.Out})
		t.Fatalf("%s on %s, counters %v: %s\ninput (%d bytes) %x\n%s\noutput (%d bytes) %x\n%s",
			act, dev, moved, fmt.Sprintf(format, args...), len(in), in, decode(in).Dump(), len(res.Out), res.Out, decode(res.Out).Dump())
	}
	if counter == "" {
		fail("exactly one counter must move per packet")
	}

	switch res.Action {
	case xdpDrop:
		if !strings.HasPrefix(counter, "drop_") {
			fail("DROP counted as %s", counter)
		}
	case xdpPass:
		switch {
		case counter == "decap_pass":
			if err := fb.checkDecap(in, res.Out, true); err != nil {
				fail("decapsulated frame handed to the kernel: %v", err)
			}
		case counter == "lb_nat_pass":
			if err := fb.checkLBNATPass(in, res.Out); err != nil {
				fail("translated frame handed to the kernel: %v", err)
			}
		case strings.HasPrefix(counter, "pass_"):
			if !bytes.Equal(in, res.Out) {
				fail("PASS changed the frame: %s", diffBytes(in, res.Out))
			}
			if counter == "pass_not_ours" {
				if err := fb.checkNotOurs(in); err != nil {
					fail("%v", err)
				}
			}
		default:
			fail("PASS counted as %s", counter)
		}
	case xdpTX, xdpRedirect:
		errs := map[string]error{
			"encap_tx":    fb.checkEncap(in, res.Out),
			"decap_tx":    fb.checkDecap(in, res.Out, false),
			"icmp":        fb.checkICMP(in, res.Out),
			"lb_encap_tx": fb.checkLBEncap(in, res.Out),
			"lb_nat_tx":   fb.checkLBNAT(in, res.Out),
			"lb_reply_tx": fb.checkLBReply(in, res.Out),
			"lb_icmp_tx":  fb.checkLBICMP(in, res.Out),
			"arp_reply":   fb.checkARP(dev, in, res.Out),
			"ndp_reply":   fb.checkNDP(dev, in, res.Out),
		}
		var matched []string
		for k, e := range errs {
			if e == nil {
				matched = append(matched, k)
			}
		}
		want := counter
		if counter == "icmp_ttl_tx" || counter == "icmp_frag_tx" {
			want = "icmp"
		}
		if len(matched) != 1 || matched[0] != want {
			var why strings.Builder
			for _, k := range slices.Sorted(maps.Keys(errs)) {
				fmt.Fprintf(&why, "\n  as %s: %v", k, errs[k])
			}
			fail("transmitted frame is not exactly one well-formed %s (matched %v)%s", want, matched, why.String())
		}
		if err := fb.checkAction(dev, counter, res.Action, res.Out); err != nil {
			fail("%v", err)
		}
	default:
		fail("unexpected action")
	}
	if err := fb.checkOutcome(dev, in, counter); err != nil {
		fail("%v", err)
	}
	if err := fb.checkConns(ct, counter); err != nil {
		fail("connection table: %v", err)
	}
	return counter, res.Out
}

// checkAction holds TX (out of the ingress interface) and REDIRECT
// (another one) to the egress the output's addresses imply.
func (fb *fuzzEdgeBed) checkAction(dev, counter string, action uint32, out []byte) error {
	var egress string
	switch counter {
	case "icmp_ttl_tx", "icmp_frag_tx", "arp_reply", "ndp_reply":
		egress = dev // errors, ARP replies and advertisements go back where the packet came from
	case "encap_tx":
		egress = dptest.UlDev // every route host is behind the underlay
	default:
		egress = egressOf(out)
	}
	want := uint32(xdpRedirect)
	if egress == dev {
		want = xdpTX
	}
	if action != want {
		return fmt.Errorf("%s from %s leaving by %s must be %s", counter, dev, egress, actionNames[want])
	}
	return nil
}

// egressOf names the interface a frame's source MAC belongs to.
func egressOf(out []byte) string {
	switch fmtMAC(out[6:12]) {
	case dptest.ExtMAC:
		return dptest.ExtDev
	case dptest.UlMAC:
		return dptest.UlDev
	case dptest.GuestMAC:
		return dptest.GuestDev
	}
	return "?"
}

func fmtMAC(b []byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

// ipv4At is an IPv4 packet found in a frame.
type ipv4At struct {
	off int    // offset of the header in the frame
	hl  int    // header length
	pkt []byte // the packet: total length bytes from off
}

func (p ipv4At) proto() uint8           { return p.pkt[9] }
func (p ipv4At) ttl() uint8             { return p.pkt[8] }
func (p ipv4At) frag() uint16           { return binary.BigEndian.Uint16(p.pkt[6:8]) }
func (p ipv4At) src() netip.Addr        { return netip.AddrFrom4([4]byte(p.pkt[12:16])) }
func (p ipv4At) dst() netip.Addr        { return netip.AddrFrom4([4]byte(p.pkt[16:20])) }
func (p ipv4At) l4() []byte             { return p.pkt[p.hl:] }
func (p ipv4At) String() string         { return fmt.Sprintf("%v -> %v proto %d", p.src(), p.dst(), p.proto()) }
func (p ipv4At) fragmented() bool       { return p.frag()&0x3fff != 0 }
func (p ipv4At) end() int               { return p.off + len(p.pkt) }
func (p ipv4At) withoutTTLCsum() []byte { return maskTTLCsum(p.pkt) }

// parseIPv4 validates the IPv4 packet at off: version 4, header length at
// least 20 and inside the frame, total length covering the header and
// inside the frame, header checksum correct. exact also requires the packet
// to end exactly at the end of the frame.
func parseIPv4(b []byte, off int, exact bool) (ipv4At, error) {
	if len(b) < off+20 {
		return ipv4At{}, fmt.Errorf("IPv4 header at %d cut short (%d bytes)", off, len(b))
	}
	if b[off]>>4 != 4 {
		return ipv4At{}, fmt.Errorf("IP version %d at %d", b[off]>>4, off)
	}
	hl := int(b[off]&0xf) * 4
	if hl < 20 || len(b) < off+hl {
		return ipv4At{}, fmt.Errorf("IPv4 header length %d at %d in %d bytes", hl, off, len(b))
	}
	tot := int(binary.BigEndian.Uint16(b[off+2:]))
	if tot < hl || off+tot > len(b) {
		return ipv4At{}, fmt.Errorf("IPv4 total length %d at %d (header %d) in %d bytes", tot, off, hl, len(b))
	}
	if exact && off+tot != len(b) {
		return ipv4At{}, fmt.Errorf("IPv4 total length %d at %d but the frame is %d bytes", tot, off, len(b))
	}
	p := ipv4At{off: off, hl: hl, pkt: b[off : off+tot]}
	if csum(p.pkt[:p.hl]) != 0 {
		return ipv4At{}, fmt.Errorf("IPv4 header checksum wrong at %d", off)
	}
	return p, nil
}

// inputIPv4 finds the IPv4 packet of an input frame behind at most two
// VLAN tags (what the edge parses).
func inputIPv4(in []byte) (ipv4At, error) {
	off := 12
	for i := 0; ; i++ {
		if len(in) < off+2 {
			return ipv4At{}, errors.New("input cut short in the Ethernet header")
		}
		et := binary.BigEndian.Uint16(in[off:])
		if et == 0x8100 || et == 0x88a8 {
			if i == 2 {
				return ipv4At{}, errors.New("input has more than two VLAN tags")
			}
			off += 4
			continue
		}
		if et != 0x0800 {
			return ipv4At{}, fmt.Errorf("input ethertype %#04x", et)
		}
		return parseIPv4(in, off+2, false)
	}
}

// maskTTLCsum is a copy of an IPv4 packet with TTL and checksum zeroed, to
// compare a forwarded packet with the one that arrived.
func maskTTLCsum(p []byte) []byte {
	c := append([]byte(nil), p...)
	c[8], c[10], c[11] = 0, 0, 0
	return c
}

// forwardedFrom checks that out is in with the TTL decremented (and the
// header checksum, already verified, updated to match).
func forwardedFrom(out, in ipv4At) error {
	if out.ttl() != in.ttl()-1 || in.ttl() <= 1 {
		return fmt.Errorf("TTL %d forwarded as %d", in.ttl(), out.ttl())
	}
	if !bytes.Equal(out.withoutTTLCsum(), in.withoutTTLCsum()) {
		return fmt.Errorf("forwarded packet differs from the one received beyond TTL and checksum: %s",
			diffBytes(in.withoutTTLCsum(), out.withoutTTLCsum()))
	}
	return nil
}

// nvgreOut checks the headers of an NVGRE frame the edge sends: outer
// Ethernet to the underlay next hop, outer IPv4 from the edge's underlay
// address (no options, DF, TTL > 0, the inner TOS), GRE with only a key
// and protocol 0x6558, inner Ethernet from the virtual router MAC with
// ethertype IPv4, and an inner IPv4 packet ending the frame. It returns
// the outer and inner packets and the key.
func nvgreOut(out []byte) (o, ip ipv4At, key uint32, err error) {
	const innerEth = 14 + 20 + 8
	const innerIP = innerEth + 14
	if len(out) < innerIP+20 {
		return o, ip, 0, fmt.Errorf("%d bytes: too short for NVGRE", len(out))
	}
	if fmtMAC(out[0:6]) != dptest.FabMAC || fmtMAC(out[6:12]) != dptest.UlMAC {
		return o, ip, 0, fmt.Errorf("outer Ethernet %s -> %s, want the underlay next hop", fmtMAC(out[6:12]), fmtMAC(out[0:6]))
	}
	if et := binary.BigEndian.Uint16(out[12:]); et != 0x0800 {
		return o, ip, 0, fmt.Errorf("outer ethertype %#04x", et)
	}
	if out[14] != 0x45 {
		return o, ip, 0, fmt.Errorf("outer version/IHL %#02x, want 0x45", out[14])
	}
	if o, err = parseIPv4(out, 14, true); err != nil {
		return o, ip, 0, fmt.Errorf("outer: %v", err)
	}
	if o.proto() != 47 {
		return o, ip, 0, fmt.Errorf("outer protocol %d, want GRE", o.proto())
	}
	if o.frag() != 0x4000 || o.ttl() == 0 {
		return o, ip, 0, fmt.Errorf("outer frag_off %#04x TTL %d", o.frag(), o.ttl())
	}
	if o.src() != addr(dptest.UlAddr) {
		return o, ip, 0, fmt.Errorf("outer source %v, want the edge's underlay address %s", o.src(), dptest.UlAddr)
	}
	if fl, pr := binary.BigEndian.Uint16(out[34:]), binary.BigEndian.Uint16(out[36:]); fl != 0x2000 || pr != 0x6558 {
		return o, ip, 0, fmt.Errorf("GRE flags %#04x protocol %#04x, want 0x2000 0x6558", fl, pr)
	}
	key = binary.BigEndian.Uint32(out[38:])
	if !bytes.Equal(out[innerEth+6:innerEth+12], mac(gwMAC)) {
		return o, ip, 0, fmt.Errorf("inner Ethernet source %s, want the virtual router %s", fmtMAC(out[innerEth+6:]), gwMAC)
	}
	if et := binary.BigEndian.Uint16(out[innerEth+12:]); et != 0x0800 {
		return o, ip, 0, fmt.Errorf("inner ethertype %#04x", et)
	}
	if ip, err = parseIPv4(out, innerIP, true); err != nil {
		return o, ip, 0, fmt.Errorf("inner: %v", err)
	}
	if out[15] != ip.pkt[1] {
		return o, ip, 0, fmt.Errorf("outer TOS %#02x, inner %#02x", out[15], ip.pkt[1])
	}
	return o, ip, key, nil
}

// checkEncap: Internet -> host. out must be an NVGRE frame from the edge's
// underlay address to the host of the inner destination's route, with that
// route's VSID and the flow's FlowID, carrying the input's IPv4 packet with
// its TTL decremented.
func (fb *fuzzEdgeBed) checkEncap(in, out []byte) error {
	o, ip, key, err := nvgreOut(out)
	if err != nil {
		return err
	}
	if !fb.hosts[o.dst()] {
		return fmt.Errorf("outer destination %v is no route's host", o.dst())
	}
	r, ok := fb.routes[ip.dst()]
	if !ok {
		return fmt.Errorf("inner destination %v is not an EIP", ip.dst())
	}
	if r.Host != o.dst() || r.VSID != key>>8 {
		return fmt.Errorf("sent to %v VSID %d, but %v is bound to %v VSID %d", o.dst(), key>>8, ip.dst(), r.Host, r.VSID)
	}
	const innerEth = 14 + 20 + 8
	d := ip.dst().As4()
	if wantDst := append([]byte{0x02, 0x00}, d[:]...); !bytes.Equal(out[innerEth:innerEth+6], wantDst) {
		return fmt.Errorf("inner Ethernet destination %s", fmtMAC(out[innerEth:]))
	}
	tu := flowhash.Tuple{Src: ip.src(), Dst: ip.dst(), Proto: ip.proto()}
	if !ip.fragmented() && (tu.Proto == 6 || tu.Proto == 17) && len(ip.l4()) >= 4 {
		tu.SrcPort, tu.DstPort = binary.BigEndian.Uint16(ip.l4()), binary.BigEndian.Uint16(ip.l4()[2:])
	}
	if want := flowhash.FlowID(tu, fb.seed); uint8(key) != want {
		return fmt.Errorf("FlowID %#02x, want %#02x for %+v", uint8(key), want, tu)
	}
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("encapsulated an input the edge should not have parsed: %v", err)
	}
	return forwardedFrom(ip, orig)
}

// checkDecap: host -> Internet. out must be the inner frame of an NVGRE
// input whose inner source is an EIP bound (host and VSID) to the outer
// source, to a destination a router may forward and not back into the
// underlay. Forwarded (pass false): TTL decremented, MACs of a next hop of
// the bed. Handed to the kernel (pass true): untouched, with the outer
// Ethernet addresses; the inner source may then also be a VIP whose flow
// a guest on the outer source serves (checkDecapVIP), the edge's hand-off
// being the same for both.
func (fb *fuzzEdgeBed) checkDecap(in, out []byte, pass bool) error {
	return fb.decapped(in, out, pass, func(src netip.Addr, o ipv4At, vsid uint32, inner ipv4At) error {
		if pass && fb.lb.vips[src] {
			return fb.vipReplyBound(o, vsid, inner)
		}
		r, ok := fb.routes[src]
		if !ok {
			return fmt.Errorf("source %v is not an EIP", src)
		}
		if r.Host != o.src() {
			return fmt.Errorf("source %v is bound to %v, but the input came from %v", src, r.Host, o.src())
		}
		if vsid != r.VSID {
			return fmt.Errorf("input VSID %d, but %v is in VSID %d", vsid, src, r.VSID)
		}
		return nil
	})
}

// checkDecapVIP: a guest's reply for a service (lb_reply_tx from the
// underlay): as checkDecap, forwarded, for an inner source that is a VIP
// whose flow (the inner destination and ports) an encap-mode listener
// gives to a backend on the outer source host, in the input's VSID.
func (fb *fuzzEdgeBed) checkDecapVIP(in, out []byte) error {
	return fb.decapped(in, out, false, func(src netip.Addr, o ipv4At, vsid uint32, inner ipv4At) error {
		if !fb.lb.vips[src] {
			return fmt.Errorf("source %v is not a VIP", src)
		}
		return fb.vipReplyBound(o, vsid, inner)
	})
}

// vipReplyBound: the reply inner, from a VIP, came from (outer o, vsid)
// the host and VSID of its flow's encap backend.
func (fb *fuzzEdgeBed) vipReplyBound(o ipv4At, vsid uint32, inner ipv4At) error {
	p, fails := fb.lb.pick(replyFlow(inner), fb.seed)
	if fails != "" {
		return fmt.Errorf("reply of a flow the VIP's listeners give no backend (%s)", fails)
	}
	if p.be.Mode != ModeEncap {
		return fmt.Errorf("reply of a flow of a nat-mode listener (%v) decapsulated: only a guest of an encap-mode backend may send it", p)
	}
	if p.be.Addr != o.src() || p.be.VSID != vsid {
		return fmt.Errorf("reply from host %v VSID %d, but the flow's backend is %v", o.src(), vsid, p)
	}
	return nil
}

// decapped checks what checkDecap and checkDecapVIP share; bind checks the
// inner source against the outer source and VSID.
func (fb *fuzzEdgeBed) decapped(in, out []byte, pass bool, bind func(src netip.Addr, o ipv4At, vsid uint32, inner ipv4At) error) error {
	if len(out) < 14+20 {
		return fmt.Errorf("%d bytes: too short", len(out))
	}
	if et := binary.BigEndian.Uint16(out[12:]); et != 0x0800 {
		return fmt.Errorf("ethertype %#04x", et)
	}
	ip, err := parseIPv4(out, 14, true)
	if err != nil {
		return err
	}
	// The input must be NVGRE to the edge.
	o, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	if o.proto() != 47 || o.dst() != addr(dptest.UlAddr) || o.fragmented() {
		return fmt.Errorf("input %v is not an unfragmented GRE packet to the edge", o)
	}
	g := o.l4()
	if len(g) < 8+14 {
		return fmt.Errorf("input GRE payload is %d bytes", len(g))
	}
	if fl, pr := binary.BigEndian.Uint16(g), binary.BigEndian.Uint16(g[2:]); fl != 0x2000 || pr != 0x6558 {
		return fmt.Errorf("input GRE flags %#04x protocol %#04x", fl, pr)
	}
	inner, err := parseIPv4(in, o.off+o.hl+8+14, false)
	if err != nil {
		return fmt.Errorf("input inner: %v", err)
	}
	if inner.end() > o.end() {
		return fmt.Errorf("input inner packet ends at %d, beyond the outer one (%d)", inner.end(), o.end())
	}
	if ip.src() != inner.src() {
		return fmt.Errorf("source %v, the input's inner source is %v", ip.src(), inner.src())
	}
	if err := bind(ip.src(), o, binary.BigEndian.Uint32(g[4:])>>8, inner); err != nil {
		return err
	}
	if martianDst(ip.dst()) {
		return fmt.Errorf("destination %v is one a router must not forward", ip.dst())
	}
	if pass {
		if !bytes.Equal(out[:12], in[:12]) {
			return fmt.Errorf("Ethernet %s -> %s, want the input's", fmtMAC(out[6:]), fmtMAC(out))
		}
		if !bytes.Equal(ip.pkt, inner.pkt) {
			return fmt.Errorf("inner packet changed on its way to the kernel: %s", diffBytes(inner.pkt, ip.pkt))
		}
		return nil
	}
	switch [2]string{fmtMAC(out[6:12]), fmtMAC(out[0:6])} {
	case [2]string{dptest.ExtMAC, dptest.RtrMAC}, [2]string{dptest.GuestMAC, dptest.VMMAC}:
	case [2]string{dptest.UlMAC, dptest.FabMAC}:
		return errors.New("decapsulated packet sent back into the underlay")
	default:
		return fmt.Errorf("Ethernet %s -> %s is no next hop of the bed", fmtMAC(out[6:]), fmtMAC(out))
	}
	return forwardedFrom(ip, inner)
}

// martianDst: a destination a router must not forward (RFC 1812 5.3.7,
// the edge's ipv4_martian_dst): 0/8, 127/8, multicast, class E, broadcast.
func martianDst(a netip.Addr) bool {
	b := a.As4()
	return b[0] == 0 || b[0] == 127 || b[0] >= 224
}

// checkICMP: an ICMP error (time exceeded, or fragmentation needed with the
// MTU of the path: fragMTU) from the edge's ICMP source back to the input's
// source and sender, quoting the input's IP header and 8 bytes of payload
// (as received: for a translated flow, before any translation).
func (fb *fuzzEdgeBed) checkICMP(in, out []byte) error {
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("ICMP error about an input the edge should not have parsed: %v", err)
	}
	// The error goes back on the input's VLAN: its tags, then IPv4.
	off := orig.off
	if len(out) < off+20+8 {
		return fmt.Errorf("%d bytes: too short for ICMP", len(out))
	}
	if !bytes.Equal(out[12:off-2], in[12:off-2]) {
		return fmt.Errorf("VLAN tags %x, want the input's %x", out[12:off-2], in[12:off-2])
	}
	if et := binary.BigEndian.Uint16(out[off-2:]); et != 0x0800 {
		return fmt.Errorf("ethertype %#04x", et)
	}
	if out[off] != 0x45 {
		return fmt.Errorf("version/IHL %#02x, want 0x45", out[off])
	}
	ip, err := parseIPv4(out, off, true)
	if err != nil {
		return err
	}
	if ip.proto() != 1 || ip.frag() != 0 || ip.ttl() == 0 {
		return fmt.Errorf("protocol %d frag_off %#04x TTL %d", ip.proto(), ip.frag(), ip.ttl())
	}
	if ip.src() != addr(dptest.ExtAddr) {
		return fmt.Errorf("source %v, want the edge's ICMP source %s", ip.src(), dptest.ExtAddr)
	}
	icmp := ip.l4()
	if csum(icmp) != 0 {
		return errors.New("ICMP checksum wrong")
	}
	switch typ, code := icmp[0], icmp[1]; {
	case typ == 11 && code == 0:
	case typ == 3 && code == 4:
		if mtu, want := binary.BigEndian.Uint16(icmp[6:]), fb.fragMTU(in); mtu != want {
			return fmt.Errorf("next-hop MTU %d, want %d", mtu, want)
		}
	default:
		return fmt.Errorf("ICMP type %d code %d", typ, code)
	}
	if ip.dst() != orig.src() {
		return fmt.Errorf("sent to %v, the input came from %v", ip.dst(), orig.src())
	}
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
		return errors.New("Ethernet addresses are not the input's, swapped")
	}
	quote := icmp[8:]
	if !bytes.HasPrefix(orig.pkt, quote) {
		return fmt.Errorf("quote %x is not a prefix of the input packet %x", quote, orig.pkt)
	}
	if want := min(orig.hl+8, len(orig.pkt)); len(quote) != want {
		return fmt.Errorf("quote is %d bytes, want header and 8 bytes (%d)", len(quote), want)
	}
	return nil
}

// fragMTU is the MTU an ICMP "fragmentation needed" about the input must
// announce: the underlay's (1500) less NVGRE's 42 bytes for what the edge
// tunnels, the route's MTU (1500 everywhere in the bed) for what it
// translates (nat mode, both ways).
func (fb *fuzzEdgeBed) fragMTU(in []byte) uint16 {
	if orig, err := inputIPv4(in); err == nil {
		if p, _, err := fb.lbIngress(orig); err == nil && p.be.Mode == ModeNAT {
			return 1500
		}
		if _, err := fb.natReplyOf(orig); err == nil {
			return 1500
		}
	}
	return 1500 - 42
}

// lbIngress is the decision on an input to a VIP: its flow and the
// backend picked (fails is the drop counter if none is), or an error if
// the input is not one lb_ingress takes.
func (fb *fuzzEdgeBed) lbIngress(orig ipv4At) (p lbPick, fails string, err error) {
	if !fb.lb.vips[orig.dst()] {
		return p, "", fmt.Errorf("input destination %v is not a VIP", orig.dst())
	}
	if orig.proto() == 47 && orig.dst() == addr(dptest.UlAddr) {
		return p, "", errors.New("input is NVGRE to the edge")
	}
	f, ok := ingressFlow(orig)
	if !ok {
		p.flow = f
		return p, "drop_lb_no_port", nil
	}
	p, fails = fb.lb.pick(f, fb.seed)
	if fails != "" {
		return p, fails, nil
	}
	return p, "", nil
}

// natReplyOf is the translation back of an input the edge takes as a nat
// backend's reply (to neither a VIP nor an EIP nor the edge's NVGRE
// endpoint, from a backend's address, port and protocol).
func (fb *fuzzEdgeBed) natReplyOf(orig ipv4At) (natRev, error) {
	if orig.proto() == 47 && orig.dst() == addr(dptest.UlAddr) {
		return natRev{}, errors.New("input is NVGRE to the edge")
	}
	if _, ok := fb.routes[orig.dst()]; ok || fb.lb.vips[orig.dst()] {
		return natRev{}, fmt.Errorf("input destination %v is an EIP or a VIP", orig.dst())
	}
	r, ok := fb.lb.reverseFor(orig)
	if !ok {
		return natRev{}, fmt.Errorf("input %v is no reply of a nat connection", orig)
	}
	return r, nil
}

// edgeAddrs are the node's own addresses in the bed (dptest.New).
var edgeAddrs = map[netip.Addr]bool{addr(dptest.ExtAddr): true, addr("198.18.101.1"): true, addr(dptest.UlAddr): true,
	addr(dptest.GuestGW): true}

// parserDrops are the drops of a frame the parser refuses.
var parserDrops = map[string]bool{"drop_eth_trunc": true, "drop_ip_trunc": true, "drop_ip_bad": true, "drop_ip_csum": true,
	"drop_ip_martian": true, "drop_l4_trunc": true}

// checkOutcome holds a few inputs to the one outcome they must have.
// What a nat backend sends to the edge itself from the backends' side (the
// underlay in the bed; the replies to the edge's health checks, from the
// backend's service port) is the node's own traffic, not a service's
// reply: it goes to the kernel untouched (pass_not_ours), never
// translated, unless the parser refuses it. And the load balancer's own
// drops are true: no listener takes the flow (drop_lb_no_port), or the
// listener's table gives it no backend (drop_lb_no_backend).
func (fb *fuzzEdgeBed) checkOutcome(dev string, in []byte, counter string) error {
	if orig, err := inputIPv4(in); err == nil && dev == dptest.UlDev && edgeAddrs[orig.dst()] &&
		counter != "pass_not_ours" && !parserDrops[counter] {
		if _, ok := fb.lb.reverseFor(orig); ok {
			return fmt.Errorf("%s for a packet of a nat backend to the edge itself: it is the node's own (health checks), for its kernel (pass_not_ours)", counter)
		}
	}
	if counter != "drop_lb_no_port" && counter != "drop_lb_no_backend" {
		return nil
	}
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("%s for an input the edge should not have parsed: %v", counter, err)
	}
	p, fails, err := fb.lbIngress(orig)
	if err != nil {
		return fmt.Errorf("%s: %v", counter, err)
	}
	if fails != counter {
		return fmt.Errorf("%s, but the services give %s (%s)", counter, p, fails)
	}
	return nil
}

// checkNotOurs: what the edge hands to the kernel as not its own is
// neither a VIP's nor an EIP's nor a nat backend's reply.
func (fb *fuzzEdgeBed) checkNotOurs(in []byte) error {
	orig, err := inputIPv4(in)
	if err != nil {
		return nil // not IPv4: not the edge's either
	}
	if _, ok := fb.routes[orig.dst()]; ok || fb.lb.vips[orig.dst()] {
		return fmt.Errorf("pass_not_ours for a packet to %v, an EIP or a VIP", orig.dst())
	}
	if r, err := fb.natReplyOf(orig); err == nil && !fb.notForwarded(orig.dst()) {
		return fmt.Errorf("pass_not_ours for a reply of a nat connection (to be translated to %v)", r.vip)
	}
	return nil
}

// notForwarded tells whether the bed's kernel delivers packets to a
// locally (an address of its own, a subnet broadcast): a nat backend's
// packet there (a health check's answer) is no reply to translate.
func (fb *fuzzEdgeBed) notForwarded(a netip.Addr) bool {
	if v, ok := fb.local[a]; ok {
		return v
	}
	var local bool
	err := fb.env.Node.Do(func() error {
		rs, err := netlink.RouteGet(a.AsSlice())
		if err != nil {
			return err
		}
		local = len(rs) > 0 && (rs[0].Type == unix.RTN_LOCAL || rs[0].Type == unix.RTN_BROADCAST)
		return nil
	})
	if err != nil {
		local = false
	}
	if fb.local == nil {
		fb.local = map[netip.Addr]bool{}
	}
	fb.local[a] = local
	return local
}

// forwardedFrame checks a frame the edge routes itself (nat mode, both
// ways): Ethernet from and to a next hop of the bed, untagged (a VLAN tag
// of the ingress link means nothing on the egress one), and an IPv4
// packet followed by the input's Ethernet padding, if any.
func forwardedFrame(in []byte, orig ipv4At, out []byte) (ipv4At, error) {
	if len(out) < 14 {
		return ipv4At{}, fmt.Errorf("%d bytes: too short", len(out))
	}
	switch [2]string{fmtMAC(out[6:12]), fmtMAC(out[0:6])} {
	case [2]string{dptest.ExtMAC, dptest.RtrMAC}, [2]string{dptest.UlMAC, dptest.FabMAC}, [2]string{dptest.GuestMAC, dptest.VMMAC}:
	default:
		return ipv4At{}, fmt.Errorf("Ethernet %s -> %s is no next hop of the bed", fmtMAC(out[6:]), fmtMAC(out))
	}
	if et := binary.BigEndian.Uint16(out[12:]); et != 0x0800 {
		return ipv4At{}, fmt.Errorf("ethertype %#04x, want an untagged IPv4 frame", et)
	}
	ip, err := parseIPv4(out, 14, false)
	if err != nil {
		return ip, err
	}
	if !bytes.Equal(out[ip.end():], in[orig.end():]) {
		return ip, fmt.Errorf("frame after the packet %x, the input's %x", out[ip.end():], in[orig.end():])
	}
	return ip, nil
}

// natFrom checks that out is orig forwarded (TTL - 1) with its destination
// (dst) or source rewritten to to and, if port is not 0 and the packet
// has a TCP/UDP header, that side's port to port, nothing else changed,
// and every checksum updated: the IP header's valid (parseIPv4), the
// TCP/UDP one the same one's complement sum as the input's (valid if the
// input's was: recomputed), a UDP checksum 0 (none) left 0 and no other
// made 0.
func natFrom(out, orig ipv4At, dst bool, to netip.Addr, port uint16) error {
	if orig.ttl() <= 1 || out.ttl() != orig.ttl()-1 {
		return fmt.Errorf("TTL %d forwarded as %d", orig.ttl(), out.ttl())
	}
	if len(out.pkt) != len(orig.pkt) || out.hl != orig.hl {
		return fmt.Errorf("packet of %d bytes (header %d) forwarded as %d (%d)", len(orig.pkt), orig.hl, len(out.pkt), out.hl)
	}
	want := append([]byte(nil), orig.pkt...)
	want[8]--
	a := to.As4()
	if dst {
		copy(want[16:20], a[:])
	} else {
		copy(want[12:16], a[:])
	}
	first := orig.frag()&0x1fff == 0
	sumAt := -1 // L4 checksum offset in the L4 header
	switch proto := orig.proto(); {
	case first && proto == 6:
		sumAt = 16
	case first && proto == 17:
		sumAt = 6
	}
	if port != 0 && sumAt >= 0 {
		at := orig.hl
		if dst {
			at += 2
		}
		binary.BigEndian.PutUint16(want[at:], port)
	}
	got := append([]byte(nil), out.pkt...)
	for _, b := range [][]byte{want, got} {
		b[10], b[11] = 0, 0
		if sumAt >= 0 {
			b[orig.hl+sumAt], b[orig.hl+sumAt+1] = 0, 0
		}
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("translated packet differs from the expected one beyond checksums: %s", diffBytes(want, got))
	}
	if sumAt < 0 {
		return nil
	}
	ic, oc := binary.BigEndian.Uint16(orig.l4()[sumAt:]), binary.BigEndian.Uint16(out.l4()[sumAt:])
	if orig.proto() == 17 && ic == 0 {
		if oc != 0 {
			return fmt.Errorf("UDP without a checksum got %#04x", oc)
		}
		return nil
	}
	if orig.proto() == 17 && oc == 0 {
		return errors.New("UDP checksum became 0 (none)")
	}
	if !onesEq(sum16(orig.pkt[12:20], orig.l4()), sum16(out.pkt[12:20], out.l4())) {
		return fmt.Errorf("L4 checksum %#04x not updated for the translation (input %#04x)", oc, ic)
	}
	if !orig.fragmented() && l4Csum(orig.pkt[12:16], orig.pkt[16:20], orig.proto(), orig.l4()) == 0 &&
		l4Csum(out.pkt[12:16], out.pkt[16:20], out.proto(), out.l4()) != 0 {
		return errors.New("L4 checksum wrong")
	}
	return nil
}

// lbForwarded: the input is a VIP's flow (not an ICMP error) the services
// give to a backend in mode.
func (fb *fuzzEdgeBed) lbForwarded(in []byte, mode uint8) (ipv4At, lbPick, error) {
	orig, err := inputIPv4(in)
	if err != nil {
		return orig, lbPick{}, fmt.Errorf("input: %v", err)
	}
	p, fails, err := fb.lbIngress(orig)
	switch {
	case err != nil:
		return orig, p, err
	case fails != "":
		return orig, p, fmt.Errorf("the services give this input no backend (%s: %s)", fails, p)
	case p.flow.icmp:
		return orig, p, errors.New("input is an ICMP error about a service flow")
	case p.be.Mode != mode:
		return orig, p, fmt.Errorf("backend of %s is in mode %d, not %d", p, p.be.Mode, mode)
	}
	return orig, p, nil
}

// checkLBNAT: a VIP's flow (not an ICMP error) to a nat-mode listener,
// DNATed to the backend the table picks: destination its address, TCP/UDP
// destination port its port (the input's for a backend of port 0; the
// ports of a fragment are unknown and its L4 header, if any, keeps them),
// TTL - 1, checksums right, nothing else changed.
func (fb *fuzzEdgeBed) checkLBNAT(in, out []byte) error {
	orig, p, err := fb.lbForwarded(in, ModeNAT)
	if err != nil {
		return err
	}
	ip, err := forwardedFrame(in, orig, out)
	if err != nil {
		return err
	}
	if err := natFrom(ip, orig, true, p.be.Addr, p.be.Port); err != nil {
		return fmt.Errorf("DNAT of %s: %v", p, err)
	}
	return nil
}

// checkLBNATPass: a nat-mode translation (checkLBNAT, checkLBReply or
// checkLBICMP) whose next hop has no neighbour yet, handed to the kernel
// to forward: the frame as it came (its Ethernet header, VLAN tags
// included, untouched, the TTL not yet decremented) with the translation
// done. It is checked as the frame the edge would have sent: the same
// packet, TTL - 1, from a next hop's Ethernet header.
func (fb *fuzzEdgeBed) checkLBNATPass(in, out []byte) error {
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	if len(out) != len(in) {
		return fmt.Errorf("%d bytes, the input has %d", len(out), len(in))
	}
	if !bytes.Equal(out[:orig.off], in[:orig.off]) {
		return fmt.Errorf("link header %x changed to %x", in[:orig.off], out[:orig.off])
	}
	if orig.proto() == 47 {
		return errors.New("input is GRE: a decapsulated frame is decap_pass")
	}
	ip := append([]byte(nil), out[orig.off:]...)
	if len(ip) < 20 || len(ip) < int(ip[0]&0xf)*4 || ip[8] == 0 {
		return errors.New("no IPv4 header with a TTL to forward")
	}
	if hs := ^sum16(ip[:int(ip[0]&0xf)*4]); hs != 0 {
		return fmt.Errorf("IPv4 header checksum wrong (off by %#04x)", hs)
	}
	ip[8]--
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^sum16(ip[:int(ip[0]&0xf)*4]))
	fwd := append(append(append([]byte(nil), mac(dptest.RtrMAC)...), mac(dptest.ExtMAC)...), 0x08, 0x00)
	fwd = append(fwd, ip...)
	var why []string
	for name, c := range map[string]func(in, out []byte) error{"lb_nat_tx": fb.checkLBNAT, "lb_reply_tx": fb.checkLBReply, "lb_icmp_tx": fb.checkLBICMP} {
		err := c(in, fwd)
		if err == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("as %s: %v", name, err))
	}
	slices.Sort(why)
	return errors.New(strings.Join(why, "; "))
}

// checkLBReply: a service's reply to its client, either a nat backend's
// translated back to its VIP and port (or its own port, for an any-port
// backend), to a destination a router may forward, or a guest's
// decapsulated (checkDecapVIP).
func (fb *fuzzEdgeBed) checkLBReply(in, out []byte) error {
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	if orig.proto() == 47 && orig.dst() == addr(dptest.UlAddr) {
		return fb.checkDecapVIP(in, out)
	}
	r, err := fb.natReplyOf(orig)
	if err != nil {
		return err
	}
	ip, err := forwardedFrame(in, orig, out)
	if err != nil {
		return err
	}
	if martianDst(ip.dst()) {
		return fmt.Errorf("destination %v is one a router must not forward", ip.dst())
	}
	if r.icmp {
		if err := natICMPFrom(ip, orig, r); err != nil {
			return fmt.Errorf("ICMP error about a nat connection, back to %v: %v", r.vip, err)
		}
		return nil
	}
	port := r.vip.Port()
	if port == r.backend.Port() {
		port = 0
	}
	if err := natFrom(ip, orig, false, r.vip.Addr(), port); err != nil {
		return fmt.Errorf("SNAT to %v: %v", r.vip, err)
	}
	return nil
}

// natICMPFrom checks an ICMP error about a nat connection translated back:
// the input with its TTL decremented, its source the VIP if it was the
// backend, the quote's destination address and port the VIP's, and the
// IPv4 and ICMP checksums right.
func natICMPFrom(out, orig ipv4At, r natRev) error {
	if orig.ttl() <= 1 || out.ttl() != orig.ttl()-1 {
		return fmt.Errorf("TTL %d forwarded as %d", orig.ttl(), out.ttl())
	}
	if len(out.pkt) != len(orig.pkt) || out.hl != orig.hl {
		return fmt.Errorf("packet of %d bytes forwarded as %d", len(orig.pkt), len(out.pkt))
	}
	want := append([]byte(nil), orig.pkt...)
	want[8]--
	v := r.vip.Addr().As4()
	if orig.src() == r.backend.Addr() {
		copy(want[12:16], v[:])
	}
	q := want[orig.hl+8:]
	qhl := int(q[0]&0xf) * 4
	copy(q[16:20], v[:])
	binary.BigEndian.PutUint16(q[qhl+2:], r.vip.Port())
	got := append([]byte(nil), out.pkt...)
	for _, b := range [][]byte{want, got} {
		b[10], b[11] = 0, 0                     // IP checksum
		b[orig.hl+2], b[orig.hl+3] = 0, 0       // ICMP checksum
		b[orig.hl+8+10], b[orig.hl+8+11] = 0, 0 // quoted IP checksum
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("translated error differs from the expected one beyond checksums: %s", diffBytes(want, got))
	}
	if csum(out.pkt[:out.hl]) != 0 {
		return errors.New("IPv4 checksum wrong")
	}
	// The ICMP checksum is updated, not recomputed: right if it was.
	if csum(orig.pkt[orig.hl:]) == 0 && csum(out.pkt[out.hl:]) != 0 {
		return errors.New("ICMP checksum wrong")
	}
	return nil
}

// lbTunnel checks an NVGRE frame to a service's encap backend: to its
// host, in its VSID, FlowID the flow hash's low byte (as for EIPs),
// inner destination MAC 02:01 and the guest's address, carrying the input
// with its TTL decremented.
func lbTunnel(out []byte, orig ipv4At, p lbPick) error {
	o, ip, key, err := nvgreOut(out)
	if err != nil {
		return err
	}
	if o.dst() != p.be.Addr || key>>8 != p.be.VSID {
		return fmt.Errorf("sent to %v VSID %d, but the flow's backend is %s", o.dst(), key>>8, p)
	}
	f := p.flow
	if fid := uint32(flowhash.FlowID(flowhash.Tuple{Src: f.client, Dst: f.vip, SrcPort: f.cport, DstPort: f.vport, Proto: f.proto}, testSeed)); key&0xff != fid {
		return fmt.Errorf("FlowID %#02x, want the flow hash's low byte %#02x for %v:%d -> %v:%d", key&0xff, fid, f.client, f.cport, f.vip, f.vport)
	}
	const innerEth = 14 + 20 + 8
	g := p.be.Guest.As4()
	if want := append([]byte{0x02, 0x01}, g[:]...); !bytes.Equal(out[innerEth:innerEth+6], want) {
		return fmt.Errorf("inner Ethernet destination %s, want %s", fmtMAC(out[innerEth:]), fmtMAC(want))
	}
	return forwardedFrom(ip, orig)
}

// checkLBEncap: a VIP's flow (not an ICMP error) to an encap-mode
// listener, tunnelled to the backend the table picks (lbTunnel).
func (fb *fuzzEdgeBed) checkLBEncap(in, out []byte) error {
	orig, p, err := fb.lbForwarded(in, ModeEncap)
	if err != nil {
		return err
	}
	return lbTunnel(out, orig, p)
}

// checkLBICMP: an ICMP error about a VIP's flow (quoting VIP -> client)
// steered to the flow's backend: tunnelled to an encap backend as it is
// (lbTunnel), or DNATed to a nat backend with the quote translated the
// same way (its source the backend's address and port), the quote's IP
// checksum and the ICMP checksum updated to match (valid if they were).
func (fb *fuzzEdgeBed) checkLBICMP(in, out []byte) error {
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	p, fails, err := fb.lbIngress(orig)
	switch {
	case err != nil:
		return err
	case fails != "":
		return fmt.Errorf("the services give this input no backend (%s: %s)", fails, p)
	case !p.flow.icmp:
		return errors.New("input is no ICMP error about a service flow")
	}
	if p.be.Mode == ModeEncap {
		return lbTunnel(out, orig, p)
	}
	ip, err := forwardedFrame(in, orig, out)
	if err != nil {
		return err
	}
	if orig.ttl() <= 1 || ip.ttl() != orig.ttl()-1 {
		return fmt.Errorf("TTL %d forwarded as %d", orig.ttl(), ip.ttl())
	}
	if len(ip.pkt) != len(orig.pkt) || ip.hl != orig.hl {
		return fmt.Errorf("packet of %d bytes (header %d) forwarded as %d (%d)", len(orig.pkt), orig.hl, len(ip.pkt), ip.hl)
	}
	// Expected: destination and quoted source the backend, quoted source
	// port its port; checksums masked, then compared as sums.
	want := append([]byte(nil), orig.pkt...)
	want[8]--
	b := p.be.Addr.As4()
	copy(want[16:20], b[:])
	q := orig.hl + 8 // the quote in the packet
	qhl := int(orig.pkt[q]&0xf) * 4
	copy(want[q+12:q+16], b[:])
	if p.be.Port != 0 {
		binary.BigEndian.PutUint16(want[q+qhl:], p.be.Port)
	}
	got := append([]byte(nil), ip.pkt...)
	for _, x := range [][]byte{want, got} {
		x[10], x[11] = 0, 0
		x[orig.hl+2], x[orig.hl+3] = 0, 0
		x[q+10], x[q+11] = 0, 0
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("steered error differs from the expected one beyond checksums (%s): %s", p, diffBytes(want, got))
	}
	oq, iq := ip.pkt[q:q+qhl], orig.pkt[q:q+qhl]
	if !onesEq(sum16(oq), sum16(iq)) || (csum(iq) == 0 && csum(oq) != 0) {
		return fmt.Errorf("quoted IP header checksum not updated for the translation")
	}
	if !onesEq(sum16(ip.l4()), sum16(orig.l4())) || (csum(orig.l4()) == 0 && csum(ip.l4()) != 0) {
		return fmt.Errorf("ICMP checksum not updated for the translation")
	}
	return nil
}

// checkARP: a reply, out of ext0 (the only interface the bed answers on),
// to an untagged ARP request for a VIP: from ext0's MAC, for the VIP asked
// about, to the requester's hardware and protocol addresses, the frame
// otherwise the request's.
func (fb *fuzzEdgeBed) checkARP(dev string, in, out []byte) error {
	if len(in) < 42 || binary.BigEndian.Uint16(in[12:]) != 0x0806 {
		return errors.New("input is not an untagged ARP frame")
	}
	if !bytes.Equal(in[14:22], []byte{0, 1, 8, 0, 6, 4, 0, 1}) {
		return fmt.Errorf("input is not an ARP request for IPv4 over Ethernet (%x)", in[14:22])
	}
	vip := netip.AddrFrom4([4]byte(in[38:42]))
	if !fb.lb.vips[vip] {
		return fmt.Errorf("ARP request for %v, not a VIP", vip)
	}
	if dev != dptest.ExtDev {
		return fmt.Errorf("ARP answered on %s", dev)
	}
	want := append([]byte(nil), in...)
	ours := mac(dptest.ExtMAC)
	copy(want[0:6], in[22:28])   // to the requester's MAC
	copy(want[6:12], ours)       // from ext0's
	want[21] = 2                 // reply
	copy(want[22:28], ours)      // sender: ext0's MAC ...
	copy(want[28:32], in[38:42]) // ... for the VIP
	copy(want[32:38], in[22:28]) // target: the requester
	copy(want[38:42], in[28:32])
	if !bytes.Equal(out, want) {
		return fmt.Errorf("ARP reply differs: %s", diffBytes(want, out))
	}
	return nil
}

// checkNDP holds a transmitted frame to the neighbor advertisement that
// answers the input, an untagged neighbor solicitation for one of the
// bed's VIPs on ext0 (ndpAnswerFor), byte for byte.
func (fb *fuzzEdgeBed) checkNDP(dev string, in, out []byte) error {
	want, target, err := ndpAnswerFor(in, mac(dptest.ExtMAC), 0)
	if err != nil {
		return err
	}
	if !fb.lb.vips[target] {
		return fmt.Errorf("neighbor solicitation for %v, not a VIP", target)
	}
	if dev != dptest.ExtDev {
		return fmt.Errorf("neighbor solicitation answered on %s", dev)
	}
	if !bytes.Equal(out, want) {
		return fmt.Errorf("neighbor advertisement differs: %s", diffBytes(want, out))
	}
	return nil
}

// ctProbe is the connection-table entry an input may touch (a VIP's flow,
// or a decapsulated reply's), looked up before the run.
type ctProbe struct {
	key    edgeCtKey
	pick   lbPick
	reply  bool // a decapsulated reply: only looked up
	insert bool // a packet of the flow itself, not a RST: may create it
	had    bool
	entry  edgeCtEntry
}

func (fb *fuzzEdgeBed) ctProbe(in []byte) (*ctProbe, error) {
	orig, err := inputIPv4(in)
	if err != nil {
		return nil, nil
	}
	var pr ctProbe
	if p, fails, err := fb.lbIngress(orig); err == nil && fails == "" {
		pr.pick, pr.insert = p, !p.flow.icmp && !p.flow.rst
	} else if orig.proto() == 47 && orig.dst() == addr(dptest.UlAddr) && !orig.fragmented() && len(orig.l4()) >= 8+14+20 {
		inner, err := parseIPv4(in, orig.off+orig.hl+8+14, false)
		if err != nil || !fb.lb.vips[inner.src()] {
			return nil, nil
		}
		p, fails := fb.lb.pick(replyFlow(inner), fb.seed)
		if fails != "" {
			return nil, nil
		}
		pr.pick, pr.reply = p, true
	} else {
		return nil, nil
	}
	f := pr.pick.flow
	pr.key = edgeCtKey{Src: ip4word(f.client), Dst: ip4word(f.vip), Sport: be16(f.cport), Dport: be16(f.vport), Proto: f.proto}
	err = fb.edge.objs.LbConns.Lookup(&pr.key, &pr.entry)
	switch {
	case err == nil:
		pr.had = true
	case !errors.Is(err, ebpf.ErrKeyNotExist):
		return nil, err
	}
	return &pr, nil
}

// checkConns holds the connection table to the run: an entry names the
// backend the table picks (with its generation); only a packet of the flow
// that is not a RST creates one, and one forwarded to a backend does
// (there is no insert cap in the bed); a packet dropped as spoofed changes
// nothing.
func (fb *fuzzEdgeBed) checkConns(pr *ctProbe, counter string) error {
	if pr == nil {
		return nil
	}
	var e edgeCtEntry
	err := fb.edge.objs.LbConns.Lookup(&pr.key, &e)
	has := err == nil
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	what := "a packet of the flow"
	switch {
	case pr.reply:
		what = "a reply"
	case pr.pick.flow.icmp:
		what = "an ICMP error"
	case pr.pick.flow.rst:
		what = "a RST"
	}
	switch {
	case has && !pr.had && !pr.insert:
		return fmt.Errorf("%s created an entry for %s", what, pr.pick)
	case !has && pr.insert && (counter == "lb_nat_tx" || counter == "lb_encap_tx" || counter == "lb_nat_pass"):
		return fmt.Errorf("no entry after %s went to its backend (%s)", what, pr.pick)
	case has && (uint32(e.Backend) != pr.pick.idx || e.Gen != pr.pick.be.Gen):
		return fmt.Errorf("entry names backend %d generation %d, the table picks %s", e.Backend, e.Gen, pr.pick)
	case counter == "drop_spoof" && (has != pr.had || e != pr.entry):
		return fmt.Errorf("%s dropped as spoofed changed the entry of %s: %+v -> %+v", what, pr.pick, pr.entry, e)
	}
	return nil
}

type fuzzSeed struct {
	dev   string
	frame []byte
}

// edgeFuzzSeeds are the packets of the edge fixtures (and a few more
// corners) as seeds.
func edgeFuzzSeeds(tb testing.TB) []fuzzSeed {
	fromInet := func(f flow) []byte { return f.frame(tb, dptest.RtrMAC, dptest.ExtMAC) }
	var s []fuzzSeed
	ext := func(b []byte) { s = append(s, fuzzSeed{dptest.ExtDev, b}) }
	ul := func(b []byte) { s = append(s, fuzzSeed{dptest.UlDev, b}) }

	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, df: true, tos: 0x10}
	udp := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}
	good := fromInet(syn)
	ext(good)
	ext(fromInet(udp))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolICMPv4}))
	ext(fromInet(flow{src: client, dst: eipOther, proto: layers.IPProtocolICMPv4, icmpType: 3, payload: good[14:42]}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2,
		options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2, ttl: 1,
		options: []layers.IPv4Option{{OptionType: 7, OptionLength: 39, OptionData: make([]byte, 37)}}}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 7, dport: 9, mf: true, payload: make([]byte, 64)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, fragOff: 9, payload: make([]byte, 40)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, fragOff: 9, ttl: 1, payload: make([]byte, 40)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1480-28)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, payload: make([]byte, 1480-28)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2, df: true, payload: make([]byte, 1458-28)}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 33434, dport: 33435, ttl: 1}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocol(99), ttl: 1, payload: []byte{}}))
	ext(append(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 3, dport: 4, payload: []byte{}}), make([]byte, 6)...))
	ext(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4}, &layersPayload{udp.ip(tb)}))
	ext(fromInet(flow{src: client, dst: "198.51.100.99", proto: layers.IPProtocolTCP, sport: 1, dport: 2}))
	ext(fromInet(flow{src: client, dst: eipNoNbr, proto: layers.IPProtocolUDP, sport: 1, dport: 2}))
	ext(fromInet(flow{src: client, dst: eipHole, proto: layers.IPProtocolUDP, sport: 1, dport: 2}))
	ext(fromInet(flow{src: "127.0.0.1", dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2}))
	ext(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(dptest.RtrAddr),
			DstHwAddress: make([]byte, 6), DstProtAddress: ip4(dptest.ExtAddr)}))
	ext(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolNoNextHeader, HopLimit: 64, SrcIP: netipIP("2001:db8::1"), DstIP: netipIP("2001:db8::2")}))

	// Malformed variants of a good packet.
	mut := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
	ext(append(append([]byte(nil), good[:12]...), 0x81, 0x00, 0x00))
	ext(append(append(append([]byte(nil), good[:12]...), 0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3, 0x08, 0x00), good[14:]...))
	ext(good[:14+12])
	ext(mut(func(b []byte) []byte { b[14+10] ^= 0xff; return b }))
	ext(mut(func(b []byte) []byte { b[14] = 0x44; return b }))
	ext(mut(func(b []byte) []byte { b[14] = 0x65; return b }))
	ext(mut(func(b []byte) []byte { b[14+2], b[14+3] = 0x05, 0xdc; setIPCsum(b[14:]); return b }))
	ext(mut(func(b []byte) []byte { b[14+2], b[14+3] = 0, 16; setIPCsum(b[14:]); return b }))
	tcpTrunc := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2})[:14+20+12]
	tcpTrunc[14+2], tcpTrunc[14+3] = 0, 32
	setIPCsum(tcpTrunc[14:])
	ext(tcpTrunc)

	// Host -> Internet.
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	inner := func(f flow) []byte { return ethFrame(tb, "02:cc:00:00:00:02", gwMAC, f.ip(tb)) }
	fromHost := func(host string, key uint32, in []byte) []byte {
		return nvgre(tb, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, in)
	}
	key := uint32(vsid<<8 | 0x5a)
	ul(fromHost(hostAddr, key, inner(reply)))
	ul(fromHost(otherHost, 6000<<8, inner(flow{src: eipOther, dst: client, proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: dptest.GuestAddr, proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: dptest.FabAddr, proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: "198.19.250.5", proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: "198.19.249.5", proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: "255.255.255.255", proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	ul(fromHost(hostAddr, key, inner(flow{src: "198.51.100.77", dst: client, proto: layers.IPProtocolTCP, sport: 1, dport: 2})))
	ul(fromHost(otherHost, key, inner(reply)))
	ul(fromHost(hostAddr, 6000<<8, inner(reply)))
	ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 1, ttl: 1})))
	ul(nvgre(tb, dptest.FabMAC, dptest.UlMAC, hostAddr, "198.18.0.99", key, 0, inner(reply)))
	ul(fromHost(hostAddr, key, inner(reply)[:14+10]))
	withOuter := func(fn func(b []byte) []byte) []byte { return fn(fromHost(hostAddr, key, inner(reply))) }
	ul(withOuter(func(b []byte) []byte { b[14+20] |= 0x80; return b }))
	ul(withOuter(func(b []byte) []byte { b[14+20+2], b[14+20+3] = 0x08, 0x00; return b }))
	ul(withOuter(func(b []byte) []byte { b[14+20+8+12], b[14+20+8+13] = 0x86, 0xdd; return b }))
	ul(withOuter(func(b []byte) []byte { b[14+20+8+14+10] ^= 0x55; return b }))
	ul(withOuter(func(b []byte) []byte { return append(b, 0, 0, 0, 0) })) // Ethernet padding
	innerLong := fromHost(hostAddr, key, inner(flow{src: eip, dst: client, proto: layers.IPProtocolUDP, sport: 1, dport: 2, payload: make([]byte, 100)}))
	innerLong = innerLong[:len(innerLong)-50]
	innerLong[14+2], innerLong[14+3] = byte((len(innerLong)-14)>>8), byte(len(innerLong)-14)
	setIPCsum(innerLong[14:])
	ul(innerLong)
	// Outer header with options, and a VLAN-tagged outer frame.
	ul(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.FabMAC), DstMAC: mac(dptest.UlMAC), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolGRE, SrcIP: ip4(hostAddr), DstIP: ip4(dptest.UlAddr),
			Options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}},
		&layers.GRE{KeyPresent: true, Protocol: layers.EthernetTypeTransparentEthernetBridging, Key: key},
		&layersPayload{inner(reply)}))
	ul(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.FabMAC), DstMAC: mac(dptest.UlMAC), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4}, &layersPayload{fromHost(hostAddr, key, inner(reply))[14:]}))
	// Decapsulated packets to destinations a router must not forward, or
	// that are the edge itself or another EIP.
	for _, dst := range []string{"224.0.0.1", "239.1.2.3", "255.255.255.255", "0.0.0.0", "0.1.2.3", "127.0.0.1",
		"240.0.0.1", dptest.UlAddr, dptest.ExtAddr, eipOther, eip} {
		ul(fromHost(hostAddr, key, inner(flow{src: eip, dst: dst, proto: layers.IPProtocolUDP, sport: 1, dport: 2})))
	}
	// An Internet packet for an EIP arriving on the underlay, and NVGRE
	// from a host arriving on the Internet side.
	ul(good)
	ext(fromHost(hostAddr, key, inner(reply)))

	return append(s, lbFuzzSeeds(tb)...)
}

// lbFuzzSeeds are packets for the services of the fuzz bed: every
// listener, the any-port ones, no listener and no backend, ICMP errors
// about service flows, replies of each nat backend and of the encap
// backend's guest, ARP for VIPs and for other addresses.
func lbFuzzSeeds(tb testing.TB) []fuzzSeed {
	fromInet := func(f flow) []byte { return f.frame(tb, dptest.RtrMAC, dptest.ExtMAC) }
	fromUl := func(f flow) []byte { return f.frame(tb, dptest.FabMAC, dptest.UlMAC) }
	var s []fuzzSeed
	ext := func(b []byte) { s = append(s, fuzzSeed{dptest.ExtDev, b}) }
	ul := func(b []byte) { s = append(s, fuzzSeed{dptest.UlDev, b}) }
	withSport := func(f flow, p uint16) flow { f.sport = p; return f }
	udpTo := func(dst string, dport uint16) flow {
		return flow{src: client, dst: dst, proto: layers.IPProtocolUDP, sport: 40000, dport: dport}
	}

	// Client -> VIP: pool A (either backend), the any-port pool, a RST,
	// UDP (with and without a checksum), fragments, no listener, no
	// backend, TTL expired, too big for the tunnel, VLAN-tagged.
	for p := uint16(40000); p < 40004; p++ {
		ext(fromInet(withSport(tcpTo(vipNAT, 80, "syn"), p)))
	}
	ext(fromInet(withSport(tcpTo(vipNAT, 80, "ack"), 41000)))
	ext(fromInet(tcpTo(vipNAT, 8000, "syn")))
	ext(fromInet(withSport(tcpTo(vipNAT, 80, "rst"), 40010)))
	ext(fromInet(withSport(tcpTo(vipNAT, 22, "rst"), 40011)))
	ext(fromInet(udpTo(vipNAT, 53)))
	noCsum := fromInet(withSport(udpTo(vipNAT, 53), 40001))
	noCsum[14+20+6], noCsum[14+20+7] = 0, 0
	ext(noCsum)
	ext(fromInet(udpTo(vipNAT, 9)))
	ext(fromInet(udpTo(vipNAT, 54)))
	ext(fromInet(flow{src: client, dst: vipNAT, proto: layers.IPProtocolICMPv4}))
	ext(fromInet(flow{src: client, dst: vipNAT, proto: layers.IPProtocol(99), payload: make([]byte, 8)}))
	ext(fromInet(flow{src: client, dst: vipNAT, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, mf: true, payload: make([]byte, 64)}))
	ext(fromInet(flow{src: client, dst: vipNAT, proto: layers.IPProtocolTCP, fragOff: 9, payload: make([]byte, 40)}))
	ext(fromInet(flow{src: client, dst: vipNAT, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, ttl: 1}))
	ext(fromInet(tcpTo(vipEncap, 443, "syn")))
	ext(fromInet(udpTo(vipEncap, 5000)))
	ext(fromInet(tcpTo(vipEncap, 80, "syn")))
	ext(fromInet(flow{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, fragOff: 9, payload: make([]byte, 40)}))
	ext(fromInet(flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 443, ttl: 1}))
	ext(fromInet(flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 443, df: true, payload: make([]byte, 1440)}))
	ext(fromInet(flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 443, payload: make([]byte, 1440)}))
	ext(ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4}, &layersPayload{tcpTo(vipEncap, 443, "syn").ip(tb)}))
	ul(fromUl(withSport(tcpTo(vipNAT, 80, "syn"), 40020)))

	// ICMP errors from a router on the client's side about replies
	// VIP -> client: to each kind of backend, and about no flow.
	icmpErr := func(typ, code uint8, ttl uint8, quoted flow) []byte {
		q := quoted.ip(tb)
		q = q[:min(len(q), int(q[0]&0xf)*4+8)]
		return ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, TTL: ttl, Protocol: layers.IPProtocolICMPv4, SrcIP: ip4("203.0.113.1"), DstIP: ip4(quoted.src)},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Seq: 1400},
			gopacket.Payload(q))
	}
	replyOf := func(f flow) flow {
		f.src, f.dst, f.sport, f.dport = f.dst, f.src, f.dport, f.sport
		f.syn, f.df = false, true
		return f
	}
	ext(icmpErr(3, 4, 62, replyOf(tcpTo(vipNAT, 80, "syn"))))
	for p := uint16(40001); p < 40004; p++ {
		ext(icmpErr(3, 4, 62, replyOf(withSport(tcpTo(vipNAT, 80, "syn"), p))))
	}
	ext(icmpErr(11, 0, 62, replyOf(tcpTo(vipNAT, 8000, "syn"))))
	ext(icmpErr(3, 3, 62, replyOf(udpTo(vipNAT, 53))))
	ext(icmpErr(3, 4, 62, replyOf(tcpTo(vipEncap, 443, "syn"))))
	ext(icmpErr(3, 1, 62, replyOf(udpTo(vipNAT, 9))))
	ext(icmpErr(3, 1, 62, replyOf(udpTo(vipNAT, 81))))
	ext(icmpErr(3, 4, 1, replyOf(tcpTo(vipNAT, 80, "syn"))))
	notAboutVIP := replyOf(tcpTo(vipNAT, 80, "syn"))
	notAboutVIP.src = "198.51.100.99"
	b := icmpErr(3, 4, 62, notAboutVIP)
	copy(b[14+16:14+20], ip4(vipNAT))
	setIPCsum(b[14:])
	ext(b)
	ipOpts := replyOf(tcpTo(vipNAT, 80, "syn"))
	ipOpts.options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	ext(icmpErr(3, 4, 62, ipOpts))

	// Replies of the nat connections (the requests above installed them),
	// a source port with no connection (a backend's own), an expired TTL,
	// an unresolved next hop (its client's request first), a first
	// fragment, ICMP errors from a backend and from no connection.
	natReply := func(be string, proto layers.IPProtocol, sport, dport uint16) flow {
		return flow{src: be, dst: client, proto: proto, sport: sport, dport: dport, ttl: 64}
	}
	ext(fromInet(flow{src: "198.19.249.5", dst: vipNAT, proto: layers.IPProtocolTCP, sport: 40000, dport: 8000, syn: true, ttl: 64}))
	ul(fromUl(flow{src: beB, dst: client, proto: layers.IPProtocolTCP, sport: 8000, dport: 40000, mf: true, payload: make([]byte, 64)}))
	beErr := func(from string, quoted flow) []byte {
		q := quoted.ip(tb)[:28]
		return ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.FabMAC), DstMAC: mac(dptest.UlMAC), EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: ip4(from), DstIP: ip4(quoted.src)},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload(q))
	}
	ul(beErr(beD, flow{src: client, dst: beD, proto: layers.IPProtocolUDP, sport: 40000, dport: 5353, ttl: 63}))
	ul(beErr(dptest.FabAddr, flow{src: client, dst: beA, proto: layers.IPProtocolTCP, sport: 40000, dport: 8080, ttl: 63}))
	ul(beErr(beD, flow{src: client, dst: beD, proto: layers.IPProtocolUDP, sport: 41999, dport: 5353, ttl: 63}))
	ul(fromUl(natReply(beA, layers.IPProtocolTCP, 8080, 40000)))
	ul(fromUl(natReply(beC, layers.IPProtocolTCP, 8080, 40001)))
	ul(fromUl(natReply(beB, layers.IPProtocolTCP, 8000, 40000)))
	ul(fromUl(natReply(beD, layers.IPProtocolUDP, 5353, 40000)))
	ul(fromUl(natReply(beA, layers.IPProtocolTCP, 9999, 40000)))
	ul(fromUl(natReply(beA, layers.IPProtocolUDP, 8080, 40000)))
	ul(fromUl(flow{src: beA, dst: client, proto: layers.IPProtocolTCP, sport: 8080, dport: 40000, ttl: 1}))
	ul(fromUl(flow{src: beB, dst: "198.19.249.5", proto: layers.IPProtocolTCP, sport: 8000, dport: 40000}))
	ul(fromUl(flow{src: beB, dst: client, proto: layers.IPProtocolTCP, fragOff: 9, payload: make([]byte, 40)}))

	// Replies of the encap backend's guest, tunnelled back by its host:
	// to its flow, from another host, in another VSID, for a port with no
	// listener, to an unresolved next hop, UDP of the any-port listener.
	gInner := func(f flow) []byte { return ethFrame(tb, "02:cc:00:00:00:02", gwMAC, f.ip(tb)) }
	fromHost := func(host string, vs uint32, f flow) []byte {
		return nvgre(tb, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, vs<<8|0x21, 0, gInner(f))
	}
	guestReply := flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40000, ttl: 64}
	ul(fromHost(hostAddr, vsid, guestReply))
	ul(fromHost(otherHost, vsid, guestReply))
	ul(fromHost(hostAddr, 6000, guestReply))
	ul(fromHost(hostAddr, vsid, flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 444, dport: 40000}))
	ul(fromHost(hostAddr, vsid, flow{src: vipEncap, dst: "198.19.249.5", proto: layers.IPProtocolTCP, sport: 443, dport: 40000}))
	ul(fromHost(hostAddr, vsid, flow{src: vipEncap, dst: client, proto: layers.IPProtocolUDP, sport: 5000, dport: 40000}))
	ul(fromHost(hostAddr, vsid, flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40000, ttl: 1}))

	// ARP: requests for each VIP, for an EIP and another address, on the
	// underlay, a reply, a tagged request.
	arp := func(op uint16, target string) []byte {
		return ser(tb, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
			&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: op, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(dptest.RtrAddr),
				DstHwAddress: make([]byte, 6), DstProtAddress: ip4(target)})
	}
	ext(arp(layers.ARPRequest, vipNAT))
	ext(arp(layers.ARPRequest, vipEncap))
	ext(arp(layers.ARPRequest, eip))
	ext(arp(layers.ARPRequest, "198.51.100.99"))
	ul(arp(layers.ARPRequest, vipNAT))
	ext(arp(layers.ARPReply, vipNAT))
	tagged := arp(layers.ARPRequest, vipNAT)
	ext(append(append(append([]byte(nil), tagged[:12]...), 0x81, 0x00, 0, 42), tagged[12:]...))
	return s
}

// The seeds reach every outcome the checker knows, so none of its
// acceptance paths is vacuous.
func TestFuzzEdgeSeedOutcomes(t *testing.T) {
	fb := newFuzzEdgeBed(t)
	got := map[string]int{}
	for _, s := range edgeFuzzSeeds(t) {
		c, out := fb.check(t, s.dev, s.frame)
		got[c]++
		// The parked runner is Env.Run.
		res, err := fb.env.Run(fb.edge.Program(), s.dev, s.frame)
		if err != nil {
			t.Fatal(err)
		}
		fb.last = nil // Env.Run moved the counters too
		if !bytes.Equal(res.Out, out) || (c != "" && strings.HasPrefix(c, "drop_") != (res.Action == xdpDrop)) {
			t.Errorf("Env.Run gave %s %x, the fuzz runner (%s) %x", actionNames[res.Action], res.Out, c, out)
		}
		// The checksum fix-ups leave a frame the edge accepts alone.
		if !strings.HasPrefix(c, "drop_") {
			fixed := append([]byte(nil), s.frame...)
			fixUp(selFixCsum|selFixL4, fixed)
			if !bytes.Equal(fixed, s.frame) {
				t.Errorf("checksum fix-up changed a well-formed seed (%s): %s", c, diffBytes(s.frame, fixed))
			}
		}
	}
	for _, want := range []string{"encap_tx", "decap_tx", "decap_pass", "icmp_ttl_tx", "icmp_frag_tx",
		"pass_not_ours", "pass_non_ip", "pass_ipv6", "drop_eth_trunc", "drop_ip_trunc", "drop_ip_bad",
		"drop_ip_csum", "drop_ip_martian", "drop_l4_trunc", "drop_gre_bad", "drop_inner_bad", "drop_spoof",
		"drop_ttl", "drop_too_big", "drop_fib", "drop_no_neigh", "drop_bad_dst", "lb_encap_tx", "lb_nat_tx",
		"lb_reply_tx", "lb_icmp_tx", "arp_reply", "drop_lb_no_backend", "drop_lb_no_port", "lb_nat_pass"} {
		if got[want] == 0 {
			t.Errorf("no seed ends in %s", want)
		}
	}
	t.Logf("seed outcomes: %v", got)
}

// The checkers reject every single-bit corruption, and a byte more or
// less, of each well-formed output the seeds produce: they compare every
// byte of what is transmitted.
func TestFuzzEdgeCheckersRejectCorruption(t *testing.T) {
	fb := newFuzzEdgeBed(t)
	checked := map[string]int{}
	for _, s := range edgeFuzzSeeds(t) {
		c, out := fb.check(t, s.dev, s.frame)
		var checker func(out []byte) error
		switch c {
		case "encap_tx":
			checker = func(out []byte) error { return fb.checkEncap(s.frame, out) }
		case "decap_tx", "decap_pass":
			checker = func(out []byte) error { return fb.checkDecap(s.frame, out, c == "decap_pass") }
		case "icmp_ttl_tx", "icmp_frag_tx":
			checker = func(out []byte) error { return fb.checkICMP(s.frame, out) }
		case "lb_encap_tx":
			checker = func(out []byte) error { return fb.checkLBEncap(s.frame, out) }
		case "lb_nat_tx":
			checker = func(out []byte) error { return fb.checkLBNAT(s.frame, out) }
		case "lb_reply_tx":
			checker = func(out []byte) error { return fb.checkLBReply(s.frame, out) }
		case "lb_icmp_tx":
			checker = func(out []byte) error { return fb.checkLBICMP(s.frame, out) }
		case "lb_nat_pass":
			checker = func(out []byte) error { return fb.checkLBNATPass(s.frame, out) }
		case "arp_reply":
			checker = func(out []byte) error { return fb.checkARP(s.dev, s.frame, out) }
		default:
			continue
		}
		if err := checker(out); err != nil {
			t.Fatalf("%s output rejected: %v", c, err)
		}
		checked[c]++
		for i := range out {
			for bit := 0; bit < 8; bit++ {
				bad := append([]byte(nil), out...)
				bad[i] ^= 1 << bit
				if checker(bad) == nil {
					t.Errorf("%s: checker accepts the output with byte %d bit %d flipped\n%s", c, i, bit, decode(bad).Dump())
				}
			}
		}
		if checker(out[:len(out)-1]) == nil || checker(append(append([]byte(nil), out...), 0)) == nil {
			t.Errorf("%s: checker accepts the output a byte shorter or longer", c)
		}
	}
	t.Logf("outputs checked: %v", checked)
}

// outcomeCoverage knows every counter (a new counter needs a case there).
func TestFuzzEdgeOutcomeCoverageKnowsCounters(t *testing.T) {
	for _, name := range StatNames() {
		if outcomeCoverage(dptest.ExtDev, name) == 0 {
			t.Errorf("outcomeCoverage has no case for counter %s", name)
		}
	}
}

// fixUp restores lengths and checksums of the outer and the inner header.
func TestFuzzFixUp(t *testing.T) {
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	for name, good := range map[string][]byte{
		"plain": flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2}.frame(t, dptest.RtrMAC, dptest.ExtMAC),
		"nvgre": nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, vsid<<8, 0,
			ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t))),
	} {
		bad := append([]byte(nil), good...)
		bad[14+2] ^= 0x10 // outer total length
		bad[14+11] ^= 0xff
		if name == "nvgre" {
			bad[56+3] ^= 1 // inner total length
			bad[56+10] ^= 0xff
		}
		fixUp(selAllFixes, bad)
		if !bytes.Equal(bad, good) {
			t.Errorf("%s: %s", name, diffBytes(good, bad))
		}
		fixUp(0, bad)
		if !bytes.Equal(bad, good) {
			t.Errorf("%s: fixUp without fix-up bits changed the frame", name)
		}
	}
	// L4 checksums: TCP and UDP (outer, and inner behind NVGRE), a UDP
	// checksum 0 left alone, an ICMP error and the header it quotes; not
	// those of a fragment.
	quoted := flow{src: vipNAT, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000}.ip(t)[:28]
	icmpErr := ethFrame(t, dptest.RtrMAC, dptest.ExtMAC, icmpError(t, "203.0.113.1", vipNAT, 3, 4, 1400, quoted))
	noCsum := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	noCsum[14+20+6], noCsum[14+20+7] = 0, 0
	frag := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2, mf: true}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	for name, c := range map[string]struct {
		good    []byte
		corrupt []int // bytes flipped
		fixes   bool  // whether fixUp must restore them
	}{
		"tcp":          {tcpTo(vipNAT, 80, "syn").frame(t, dptest.RtrMAC, dptest.ExtMAC), []int{14 + 20 + 16, 14 + 20 + 17}, true},
		"udp":          {flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2}.frame(t, dptest.RtrMAC, dptest.ExtMAC), []int{14 + 20 + 7}, true},
		"udp no csum":  {noCsum, nil, true},
		"inner tcp":    {nvgre(t, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, vsid<<8, 0, ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t))), []int{56 + 20 + 17}, true},
		"icmp":         {icmpErr, []int{14 + 20 + 2, 14 + 20 + 8 + 11}, true},
		"tcp fragment": {frag, []int{14 + 20 + 16}, false},
	} {
		bad := append([]byte(nil), c.good...)
		for _, i := range c.corrupt {
			bad[i] ^= 0x5a
		}
		fixUp(selAllFixes, bad)
		if c.fixes && !bytes.Equal(bad, c.good) {
			t.Errorf("%s: %s", name, diffBytes(c.good, bad))
		}
		if !c.fixes && bytes.Equal(bad, c.good) {
			t.Errorf("%s: L4 checksum of a fragment \"fixed\"", name)
		}
	}
}

func fuzzUlIfindex(tb testing.TB, env *dptest.Env) int {
	i, err := env.Node.Ifindex(dptest.UlDev)
	if err != nil {
		tb.Fatal(err)
	}
	return i
}

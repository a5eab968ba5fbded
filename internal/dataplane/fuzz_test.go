package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
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
	// Higher bits are ignored.
	selAllFixes = selFixLen | selFixCsum
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
// one behind a GRE header with a key and an Ethernet header.
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

// FuzzEdge feeds frames through the real edge program and holds it to its
// invariant: nothing malformed or unknown is ever transmitted. PASS leaves
// the frame untouched (except the decapsulated hand-off to the kernel),
// DROP is always acceptable, and TX/REDIRECT must emit exactly one of a
// well-formed NVGRE encapsulation to the EIP's host, a well-formed
// decapsulated packet from an EIP bound to the sending host, or a
// well-formed ICMP error quoting the input. Exactly one counter moves per
// packet, and it must agree with the action and the output.
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

// fuzzEdgeBed is the edge test bed of newEdgeBed, built once per fuzz
// process (every fuzz worker runs FuzzEdge's body once, then many inputs)
// and torn down with the fuzz target.
type fuzzEdgeBed struct {
	*edgeBed
	routes map[netip.Addr]Route // EIP -> route, as loaded
	hosts  map[netip.Addr]bool  // hosts of those routes
	seed   uint32
	run    func(dev string, data []byte) (dptest.Result, error)
	last   map[string]Count // counters after the previous input
}

// newFuzzEdgeBed builds the same bed as newEdgeBed (same namespace, config
// and routes). newEdgeBed takes a *testing.T, which a fuzz target only gets
// per input (its cleanups run after each input), hence this twin on
// testing.TB. The ICMP rate limit is raised so that at fuzzing speed ICMP
// errors are generated (and checked) rather than suppressed.
func newFuzzEdgeBed(tb testing.TB) *fuzzEdgeBed {
	tb.Helper()
	requireRoot(tb)
	env, err := dptest.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(env.Close)
	e, err := LoadEdge(LoadOptions{EIPMax: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	if err := e.SetConfig(EdgeConfig{
		Underlay: addr(dptest.UlAddr), ICMPSource: addr(dptest.ExtAddr), HashSeed: testSeed,
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
	fb.run = startNSRunner(tb, env, e.Program())
	return fb
}

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
		case strings.HasPrefix(counter, "pass_"):
			if !bytes.Equal(in, res.Out) {
				fail("PASS changed the frame: %s", diffBytes(in, res.Out))
			}
		default:
			fail("PASS counted as %s", counter)
		}
	case xdpTX, xdpRedirect:
		errs := map[string]error{
			"encap_tx": fb.checkEncap(in, res.Out),
			"decap_tx": fb.checkDecap(in, res.Out, false),
			"icmp":     fb.checkICMP(in, res.Out),
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
			fail("transmitted frame is not exactly one well-formed %s (matched %v)\n  as NVGRE: %v\n  as decapsulated: %v\n  as ICMP error: %v",
				want, matched, errs["encap_tx"], errs["decap_tx"], errs["icmp"])
		}
		if err := fb.checkAction(dev, counter, res.Action, res.Out); err != nil {
			fail("%v", err)
		}
	default:
		fail("unexpected action")
	}
	return counter, res.Out
}

// checkAction holds TX (out of the ingress interface) and REDIRECT
// (another one) to the egress the output's addresses imply.
func (fb *fuzzEdgeBed) checkAction(dev, counter string, action uint32, out []byte) error {
	var egress string
	switch counter {
	case "icmp_ttl_tx", "icmp_frag_tx":
		egress = dev // errors go back where the packet came from
	case "encap_tx":
		egress = dptest.UlDev // every route host is behind the underlay
	case "decap_tx":
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

// checkEncap: Internet -> host. out must be an NVGRE frame from the edge's
// underlay address to the host of the inner destination's route, with that
// route's VSID and the flow's FlowID, carrying the input's IPv4 packet with
// its TTL decremented.
func (fb *fuzzEdgeBed) checkEncap(in, out []byte) error {
	const innerEth = 14 + 20 + 8
	const innerIP = innerEth + 14
	if len(out) < innerIP+20 {
		return fmt.Errorf("%d bytes: too short for NVGRE", len(out))
	}
	if fmtMAC(out[0:6]) != dptest.FabMAC || fmtMAC(out[6:12]) != dptest.UlMAC {
		return fmt.Errorf("outer Ethernet %s -> %s, want the underlay next hop", fmtMAC(out[6:12]), fmtMAC(out[0:6]))
	}
	if et := binary.BigEndian.Uint16(out[12:]); et != 0x0800 {
		return fmt.Errorf("outer ethertype %#04x", et)
	}
	if out[14] != 0x45 {
		return fmt.Errorf("outer version/IHL %#02x, want 0x45", out[14])
	}
	o, err := parseIPv4(out, 14, true)
	if err != nil {
		return fmt.Errorf("outer: %v", err)
	}
	if o.proto() != 47 {
		return fmt.Errorf("outer protocol %d, want GRE", o.proto())
	}
	if o.frag() != 0x4000 || o.ttl() == 0 {
		return fmt.Errorf("outer frag_off %#04x TTL %d", o.frag(), o.ttl())
	}
	if o.src() != addr(dptest.UlAddr) {
		return fmt.Errorf("outer source %v, want the edge's underlay address %s", o.src(), dptest.UlAddr)
	}
	if !fb.hosts[o.dst()] {
		return fmt.Errorf("outer destination %v is no route's host", o.dst())
	}
	if fl, pr := binary.BigEndian.Uint16(out[34:]), binary.BigEndian.Uint16(out[36:]); fl != 0x2000 || pr != 0x6558 {
		return fmt.Errorf("GRE flags %#04x protocol %#04x, want 0x2000 0x6558", fl, pr)
	}
	key := binary.BigEndian.Uint32(out[38:])
	if et := binary.BigEndian.Uint16(out[innerEth+12:]); et != 0x0800 {
		return fmt.Errorf("inner ethertype %#04x", et)
	}
	ip, err := parseIPv4(out, innerIP, true)
	if err != nil {
		return fmt.Errorf("inner: %v", err)
	}
	r, ok := fb.routes[ip.dst()]
	if !ok {
		return fmt.Errorf("inner destination %v is not an EIP", ip.dst())
	}
	if r.Host != o.dst() || r.VSID != key>>8 {
		return fmt.Errorf("sent to %v VSID %d, but %v is bound to %v VSID %d", o.dst(), key>>8, ip.dst(), r.Host, r.VSID)
	}
	d := ip.dst().As4()
	if wantDst := append([]byte{0x02, 0x00}, d[:]...); !bytes.Equal(out[innerEth:innerEth+6], wantDst) ||
		!bytes.Equal(out[innerEth+6:innerEth+12], mac(gwMAC)) {
		return fmt.Errorf("inner Ethernet %s -> %s", fmtMAC(out[innerEth+6:]), fmtMAC(out[innerEth:]))
	}
	if out[15] != ip.pkt[1] {
		return fmt.Errorf("outer TOS %#02x, inner %#02x", out[15], ip.pkt[1])
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
// source. Forwarded (pass false): TTL decremented, MACs of a next hop of
// the bed. Handed to the kernel (pass true): untouched, with the outer
// Ethernet addresses.
func (fb *fuzzEdgeBed) checkDecap(in, out []byte, pass bool) error {
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
	r, ok := fb.routes[ip.src()]
	if !ok {
		return fmt.Errorf("source %v is not an EIP", ip.src())
	}
	// The input must be NVGRE to the edge from the EIP's host.
	o, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("input: %v", err)
	}
	if o.proto() != 47 || o.dst() != addr(dptest.UlAddr) || o.fragmented() {
		return fmt.Errorf("input %v is not an unfragmented GRE packet to the edge", o)
	}
	if r.Host != o.src() {
		return fmt.Errorf("source %v is bound to %v, but the input came from %v", ip.src(), r.Host, o.src())
	}
	g := o.l4()
	if len(g) < 8+14 {
		return fmt.Errorf("input GRE payload is %d bytes", len(g))
	}
	if fl, pr := binary.BigEndian.Uint16(g), binary.BigEndian.Uint16(g[2:]); fl != 0x2000 || pr != 0x6558 {
		return fmt.Errorf("input GRE flags %#04x protocol %#04x", fl, pr)
	}
	if v := binary.BigEndian.Uint32(g[4:]) >> 8; v != r.VSID {
		return fmt.Errorf("input VSID %d, but %v is in VSID %d", v, ip.src(), r.VSID)
	}
	inner, err := parseIPv4(in, o.off+o.hl+8+14, false)
	if err != nil {
		return fmt.Errorf("input inner: %v", err)
	}
	if inner.end() > o.end() {
		return fmt.Errorf("input inner packet ends at %d, beyond the outer one (%d)", inner.end(), o.end())
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
	case [2]string{dptest.ExtMAC, dptest.RtrMAC}, [2]string{dptest.UlMAC, dptest.FabMAC}, [2]string{dptest.GuestMAC, dptest.VMMAC}:
	default:
		return fmt.Errorf("Ethernet %s -> %s is no next hop of the bed", fmtMAC(out[6:]), fmtMAC(out))
	}
	return forwardedFrom(ip, inner)
}

// checkICMP: an ICMP error (time exceeded, or fragmentation needed with the
// underlay's inner MTU) from the edge's ICMP source back to the input's
// source and sender, quoting the input's IP header and 8 bytes of payload.
func (fb *fuzzEdgeBed) checkICMP(in, out []byte) error {
	if len(out) < 14+20+8 {
		return fmt.Errorf("%d bytes: too short for ICMP", len(out))
	}
	if et := binary.BigEndian.Uint16(out[12:]); et != 0x0800 {
		return fmt.Errorf("ethertype %#04x", et)
	}
	if out[14] != 0x45 {
		return fmt.Errorf("version/IHL %#02x, want 0x45", out[14])
	}
	ip, err := parseIPv4(out, 14, true)
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
		if mtu := binary.BigEndian.Uint16(icmp[6:]); mtu != 1500-42 {
			return fmt.Errorf("next-hop MTU %d, want %d", mtu, 1500-42)
		}
	default:
		return fmt.Errorf("ICMP type %d code %d", typ, code)
	}
	orig, err := inputIPv4(in)
	if err != nil {
		return fmt.Errorf("ICMP error about an input the edge should not have parsed: %v", err)
	}
	if orig.off != 14 {
		return errors.New("ICMP error about a VLAN-tagged input")
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
		// The checksum fix-up leaves a frame the edge accepts alone.
		if !strings.HasPrefix(c, "drop_") {
			fixed := append([]byte(nil), s.frame...)
			fixUp(selFixCsum, fixed)
			if !bytes.Equal(fixed, s.frame) {
				t.Errorf("checksum fix-up changed a well-formed seed (%s): %s", c, diffBytes(s.frame, fixed))
			}
		}
	}
	for _, want := range []string{"encap_tx", "decap_tx", "decap_pass", "icmp_ttl_tx", "icmp_frag_tx",
		"pass_not_ours", "pass_non_ip", "pass_ipv6", "drop_eth_trunc", "drop_ip_trunc", "drop_ip_bad",
		"drop_ip_csum", "drop_ip_martian", "drop_l4_trunc", "drop_gre_bad", "drop_inner_bad", "drop_spoof",
		"drop_ttl", "drop_too_big", "drop_fib", "drop_no_neigh", "drop_bad_dst"} {
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
}

func fuzzUlIfindex(tb testing.TB, env *dptest.Env) int {
	i, err := env.Node.Ifindex(dptest.UlDev)
	if err != nil {
		tb.Fatal(err)
	}
	return i
}

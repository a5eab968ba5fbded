package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/dpfuzz"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
)

// Fuzzing at scale (issue 9 part 7): every XDP program of the forwarding
// path, configured as in production (the edge with EIPs, load-balanced
// services in encap and nat modes and anti-spoofing prefixes; the agent
// both ways), is fed mutated and random frames through BPF_PROG_TEST_RUN,
// many runs per trip into the test namespace, and held to the oracle of
// internal/dpfuzz: nothing malformed, spoofed or denied is transmitted,
// what is transmitted is well formed (and, for the edge, is exactly one of
// the outputs the differential checkers of fuzz_test.go accept), and the
// per-reason counters account for every packet by action.
//
// Under go test each program gets a CI-sized run (scaleFuzzCI packets in
// all, a few seconds). `make fuzz-long` runs the same tests with
// AZG_FUZZ_PACKETS (default 10M in all); AZG_FUZZ_SEED fixes the seed (the
// one used is logged, and printed with any failure: the same seed and count
// replay the same inputs).
const (
	scaleFuzzCI    = 150_000
	scaleFuzzBatch = 2048 // runs per trip into the namespace, and per counter check
)

// scaleFuzzPlan is the packet count and seed of a run, split between the
// programs: the edge 60 %, the agent's two programs 20 % each.
func scaleFuzzPlan(t *testing.T, share float64) (n int, seed uint64) {
	total := scaleFuzzCI
	if s := os.Getenv("AZG_FUZZ_PACKETS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("AZG_FUZZ_PACKETS=%q: want a positive packet count", s)
		}
		total = v
	} else if testing.Short() {
		total = scaleFuzzCI / 10
	}
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("AZG_FUZZ_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("AZG_FUZZ_SEED=%q: want an unsigned integer", s)
		}
		seed = v
	}
	return max(1, int(float64(total)*share)), seed
}

// batchRunner runs a program on many frames per request from one OS thread
// parked in the test bed's namespace (see nsRunner), reusing its output
// buffers.
type batchRunner struct {
	reqs    chan []runItem
	done    chan struct{}
	ifindex map[string]uint32
}

// runItem is one run: the input (on ifindex), and the action and output.
type runItem struct {
	dev     string
	ifindex uint32
	in      []byte
	act     uint32
	out     []byte
	buf     []byte
	err     error
}

func startBatchRunner(tb testing.TB, env *dptest.Env, prog *ebpf.Program, devs ...string) *batchRunner {
	tb.Helper()
	br := &batchRunner{reqs: make(chan []runItem), done: make(chan struct{}), ifindex: map[string]uint32{}}
	for _, dev := range devs {
		br.ifindex[dev] = uint32(mustIfindex(tb, env, dev))
	}
	fd, err := unix.Open(netns.Path(env.Node.Name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		err := unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		ready <- err
		if err != nil {
			return
		}
		for items := range br.reqs {
			for i := range items {
				it := &items[i]
				if cap(it.buf) < len(it.in)+512 {
					it.buf = make([]byte, len(it.in)+512, dpfuzzMaxOut)
				}
				opts := &ebpf.RunOptions{
					Data:    it.in,
					DataOut: it.buf[:len(it.in)+512],
					Context: xdpMdCtx{DataEnd: uint32(len(it.in)), IngressIfindex: it.ifindex},
				}
				it.act, it.err = prog.Run(opts)
				it.out = opts.DataOut
			}
			br.done <- struct{}{}
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("enter the test namespace: %v", err)
	}
	tb.Cleanup(func() { close(br.reqs) })
	return br
}

const dpfuzzMaxOut = fuzzMaxFrame + 512

func (br *batchRunner) run(items []runItem) {
	for i := range items {
		items[i].ifindex = br.ifindex[items[i].dev]
	}
	br.reqs <- items
	<-br.done
}

// scaleSeed is a seed frame and the interface it arrives on.
type scaleSeed struct {
	dev   string
	frame []byte
}

// scaleFuzzer drives one program: its seeds, mutator, oracle, the checks
// of one output, and the counters.
type scaleFuzzer struct {
	name   string
	seeds  []scaleSeed
	frames [][]byte // the seeds' frames, for splicing
	devs   []string // interfaces inputs may arrive on
	mut    *dpfuzz.Mutator
	judge  func(dev string, in []byte) dpfuzz.Verdict
	check  func(it *runItem, v dpfuzz.Verdict) error // an output (TX, REDIRECT, or a changed PASS)
	stats  func() (map[string]Count, error)
	// mustDrop tells, for an input the oracle forbids, whether the
	// program must drop it (rather than hand it to the kernel untouched):
	// what the docs say it drops and counts.
	mustDrop func(v dpfuzz.Verdict) bool
	// expectFailure: a test of the harness itself, whose failure writes
	// no pcap.
	expectFailure bool
	// batch, if set, checks more counters after each batch: it sees the
	// batch's runs and verdicts and the per-reason counters' deltas.
	batch   func(items []runItem, verdicts []dpfuzz.Verdict, delta map[string]uint64) error
	events  map[string]bool // counters that are no outcome (moved besides one)
	runner  *batchRunner
	seed    uint64
	rng     *rand.Rand
	results scaleFuzzResult
}

// scaleFuzzResult is what a run saw.
type scaleFuzzResult struct {
	packets   int
	actions   map[uint32]int
	counters  map[string]uint64
	forbidden map[string]int // inputs the oracle forbids, by reason class
	outputs   map[string]int // transmitted outputs by kind
	elapsed   time.Duration
	runTime   time.Duration // inside the namespace thread
}

// input makes the next input: pure random bytes one time in 16, else a
// mutation of a seed, on its interface or (one time in 8) another.
func (f *scaleFuzzer) input() (string, []byte) {
	if f.rng.IntN(16) == 0 {
		return f.devs[f.rng.IntN(len(f.devs))], f.mut.Random()
	}
	s := f.seeds[f.rng.IntN(len(f.seeds))]
	dev := s.dev
	if f.rng.IntN(8) == 0 {
		dev = f.devs[f.rng.IntN(len(f.devs))]
	}
	if f.rng.IntN(32) == 0 {
		return dev, append([]byte(nil), s.frame...)
	}
	return dev, f.mut.Mutate(s.frame, f.frames)
}

// reasonClass is a verdict's reason up to its colon ("spoofed",
// "malformed", ...), to tally what the oracle forbade.
func reasonClass(r string) string {
	if i := strings.IndexByte(r, ':'); i > 0 {
		r = r[:i]
	}
	return r
}

// run feeds n inputs and returns the first failure (with the seed, the
// packet's index and a dump; input and output are written as a pcap), or
// nil. Setup errors fail t.
func (f *scaleFuzzer) run(t *testing.T, n int) error {
	t.Helper()
	t.Logf("%s: %d packets, AZG_FUZZ_SEED=%d", f.name, n, f.seed)
	r := &f.results
	r.actions, r.counters, r.forbidden, r.outputs = map[uint32]int{}, map[string]uint64{}, map[string]int{}, map[string]int{}
	before, err := f.stats()
	if err != nil {
		t.Fatal(err)
	}
	items := make([]runItem, scaleFuzzBatch)
	verdicts := make([]dpfuzz.Verdict, scaleFuzzBatch)
	start := time.Now()
	for done := 0; done < n; {
		k := min(scaleFuzzBatch, n-done)
		batch := items[:k]
		for i := range batch {
			batch[i].dev, batch[i].in = f.input()
		}
		t0 := time.Now()
		f.runner.run(batch)
		r.runTime += time.Since(t0)
		var tally [5]uint64 // by action
		for i := range batch {
			it := &batch[i]
			if it.err != nil {
				return fmt.Errorf("%s: packet %d: BPF_PROG_TEST_RUN: %v (AZG_FUZZ_SEED=%d)", f.name, done+i, it.err, f.seed)
			}
			v := f.judge(it.dev, it.in)
			verdicts[i] = v
			if v.Forbid != "" {
				r.forbidden[reasonClass(v.Forbid)]++
			}
			r.actions[it.act]++
			if it.act < uint32(len(tally)) {
				tally[it.act]++
			}
			var err error
			if v.Forbid != "" && it.act != xdpDrop && f.mustDrop != nil && f.mustDrop(v) {
				err = fmt.Errorf("not dropped")
			}
			switch it.act {
			case xdpDrop:
			case xdpPass:
				if !bytes.Equal(it.in, it.out) {
					err = f.check(it, v)
				}
			case xdpTX, xdpRedirect:
				err = f.check(it, v)
			default:
				err = fmt.Errorf("action %d", it.act)
			}
			if err != nil {
				return f.fail(t, done+i, it, v, err)
			}
		}
		after, err := f.stats()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.checkCounters(before, after, tally); err != nil {
			return fmt.Errorf("%s: packets %d..%d (AZG_FUZZ_SEED=%d): %v", f.name, done, done+k-1, f.seed, err)
		}
		delta := map[string]uint64{}
		for name, c := range after {
			if d := c.Packets - before[name].Packets; d != 0 {
				r.counters[name] += d
				delta[name] = d
			}
		}
		if err := checkV6Counters(verdicts[:k], delta); err != nil {
			return fmt.Errorf("%s: packets %d..%d (AZG_FUZZ_SEED=%d): %v", f.name, done, done+k-1, f.seed, err)
		}
		if f.batch != nil {
			if err := f.batch(batch, verdicts[:k], delta); err != nil {
				return fmt.Errorf("%s: packets %d..%d (AZG_FUZZ_SEED=%d): %v", f.name, done, done+k-1, f.seed, err)
			}
		}
		before = after
		done += k
	}
	r.packets = n
	r.elapsed = time.Since(start)
	t.Logf("%s: %d packets in %v: %.0f packets/s overall, %.0f packets/s through BPF_PROG_TEST_RUN", f.name, n,
		r.elapsed.Round(time.Millisecond), float64(n)/r.elapsed.Seconds(), float64(n)/r.runTime.Seconds())
	t.Logf("%s: actions %s", f.name, fmtActions(r.actions))
	t.Logf("%s: counters %v", f.name, r.counters)
	t.Logf("%s: forbidden by the oracle %v; outputs checked %v", f.name, r.forbidden, r.outputs)
	return nil
}

func fmtActions(m map[uint32]int) string {
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(m)) {
		name := actionNames[a]
		if name == "" {
			name = fmt.Sprintf("action(%d)", a)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, m[a]))
	}
	return strings.Join(parts, " ")
}

// checkCounters: every packet of the batch moved exactly one outcome
// counter (events such as flow_new aside), and the counters agree with the
// actions: drop_* with XDP_DROP, pass_*, decap_pass and lb_nat_pass with
// XDP_PASS, the rest with XDP_TX and XDP_REDIRECT together.
func (f *scaleFuzzer) checkCounters(before, after map[string]Count, tally [5]uint64) error {
	var drop, pass, tx uint64
	var moved []string
	for name, c := range after {
		d := c.Packets - before[name].Packets
		if d == 0 || f.events[name] {
			continue
		}
		moved = append(moved, fmt.Sprintf("%s+%d", name, d))
		switch {
		case strings.HasPrefix(name, "drop_"):
			drop += d
		case strings.HasPrefix(name, "pass_") || name == "decap_pass" || name == "lb_nat_pass":
			pass += d
		default:
			tx += d
		}
	}
	slices.Sort(moved)
	if drop != tally[xdpDrop] || pass != tally[xdpPass] || tx != tally[xdpTX]+tally[xdpRedirect] || tally[0] != 0 {
		return fmt.Errorf("counters do not account for the actions: drop counters %d for %d XDP_DROP, pass counters %d for %d XDP_PASS, "+
			"transmit counters %d for %d XDP_TX + %d XDP_REDIRECT, %d XDP_ABORTED; counters moved %v",
			drop, tally[xdpDrop], pass, tally[xdpPass], tx, tally[xdpTX], tally[xdpRedirect], tally[0], moved)
	}
	return nil
}

func (f *scaleFuzzer) fail(t *testing.T, i int, it *runItem, v dpfuzz.Verdict, err error) error {
	t.Helper()
	name := fmt.Sprintf("%s_seed%d_packet%d", t.Name(), f.seed, i)
	if !f.expectFailure {
		writePcap(t, name, map[string][]byte{"input": it.in, "got": it.out})
	}
	act := actionNames[it.act]
	return fmt.Errorf("%s: packet %d (AZG_FUZZ_SEED=%d, replay with the same seed and count): %s on %s: %v\noracle: %v\ninput (%d bytes) %x\n%s\noutput (%d bytes) %x\n%s",
		f.name, i, f.seed, act, it.dev, err, v, len(it.in), it.in, decode(it.in).Dump(), len(it.out), it.out, decode(it.out).Dump())
}

// The ranges of the edge bed's region: its set prefix (every EIP and VIP
// of the bed lies in 198.51.100.0/24) and its underlay (the edge, the
// hosts, the nat backends; 198.19.249.0/24 stays outside: a client behind
// an unresolved next hop on the Internet side).
var (
	scaleOwn      = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix(eip6Prefix)}
	scaleUnderlay = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("198.18.21.0/24"),
		netip.MustParsePrefix("198.18.31.0/24"), netip.MustParsePrefix("198.19.100.0/24"),
		netip.MustParsePrefix("198.19.250.0/24"), netip.MustParsePrefix("198.19.251.0/24"), netip.MustParsePrefix("2001:db8:ff::/48")}
)

// scaleAddrs are the addresses the mutator tries: the bed's own, clients,
// the classes anti-spoofing drops, martians, broadcast.
func scaleAddrs() []netip.Addr {
	var a []netip.Addr
	for _, s := range []string{eip, eipNoNbr, eipHole, eipOther, vipNAT, vipEncap, client, "203.0.113.1", "198.19.249.5",
		beA, beB, beC, beD, hostAddr, otherHost, "198.19.250.9", dptest.UlAddr, dptest.ExtAddr, dptest.FabAddr, dptest.RtrAddr,
		dptest.GuestAddr, "198.19.21.99", "198.19.21.3", edgeA, edgeB, "198.51.100.99", "192.0.2.7", "10.1.2.3", "172.16.5.5",
		"172.31.255.255", "192.168.1.1", "100.64.1.1", "169.254.1.1", "0.1.2.3", "127.0.0.1", "224.0.0.5", "240.0.0.1",
		"255.255.255.255", "198.18.101.255"} {
		a = append(a, addr(s))
	}
	return a
}

var scalePorts = []uint16{0, 9, 22, 23, 53, 54, 79, 80, 443, 444, 4999, 5000, 5353, 5354, 5999, 6000, 6999, 7000, 7777, 7999, 8000,
	8080, 8443, 8444, 33434, 40000, 40001, 40002, 40003, 65535}

// scaleEdgeOptions are the hooks of scaleFuzzEdge. The firewall (issue 9
// part 1) plugs in here: TestScaleFuzzEdge's configure (scaleFirewall)
// writes its rules (deny and allow by source prefix, per destination,
// protocol and ports) into fb.edge through the planner, as the edge's
// reconciler does, and returns a dpfuzz.Policy that reads the same rules
// as the docs do; the oracle then holds every denied Internet-side packet
// to "never transmitted, not even an ICMP error about it", drop_fw_deny
// and drop_fw_private to the oracle's counts, and each rule's counters
// (fw_stats) to the packets the oracle says it decided. A counter that is
// no per-packet outcome (like flow_new) goes into scaleFuzzer.events.
type scaleEdgeOptions struct {
	// configure, if set, programs more of the edge (firewall rules) and
	// returns the Policy that describes them to the oracle and, if the
	// rules' counters are to be checked, each rule's counter slot.
	configure func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32)
	// expectFailure: see scaleFuzzer.
	expectFailure bool
	// vip6, if set, changes what the oracle knows of the IPv6 VIPs (a
	// deliberately wrong oracle).
	vip6 func(map[netip.Addr]dpfuzz.VIP6)
}

// TestScaleFuzzEdge fuzzes xdp_edge with the services of FuzzEdge's bed,
// anti-spoofing prefixes and a firewall (scaleFirewall), from both sides.
func TestScaleFuzzEdge(t *testing.T) {
	if err := scaleFuzzEdge(t, scaleEdgeOptions{configure: scaleFirewall}); err != nil {
		t.Fatal(err)
	}
}

// scaleFWRule is one rule of the scale bed's firewall, written once and
// turned into a model.FirewallRule (for the planner and the maps) and a
// dpfuzz.FWRule (for the oracle) by separate code.
type scaleFWRule struct {
	name    string
	deny    bool
	srcs    []string
	dst     string // an address, "set" (scaleFWSet), or "" (global)
	proto   string // model.ProtoTCP, ... or ""
	lo, hi  uint16 // model.FirewallRule Port, PortEnd
	comment string
}

// The scale bed's edge set for set rules: the addresses it serves.
var scaleFWSet = []string{eip, vipNAT, eip6}

// scaleFWRules: global denies (nested: a tcp port range from a /16, a
// /32); a set's udp deny; a private EIP (eipOther: an allow list of
// nested prefixes both ways, icmp for path MTU discovery, a /32 allowed
// every protocol, fragments included); per-VIP rules, one VIP private.
// Sources lie in the ranges the mutator tries in and around
// (scaleFWPrefixes), and in the underlay (spoofed: anti-spoofing comes
// first) and bogons.
var scaleFWRules = []scaleFWRule{
	{name: "g-deny-bench-tcp", deny: true, srcs: []string{"198.19.0.0/16"}, proto: model.ProtoTCP, lo: 6000, hi: 6999,
		comment: "a port range from a /16 holding the underlay's 198.19.100.0/24 (spoofed first) and clients"},
	{name: "g-deny-host", deny: true, srcs: []string{"203.0.113.66/32", "10.0.0.0/8", "2001:db8:c::66/128"}, comment: "a /32, a bogon /8, an IPv6 /128: both families"},
	{name: "g6-deny-net", deny: true, srcs: []string{"2001:db8:bad::/48"}, comment: "IPv6 only"},
	{name: "g-deny-icmp", deny: true, srcs: []string{"192.0.2.128/25"}, proto: model.ProtoICMP},
	{name: "s-deny-udp", deny: true, dst: "set", srcs: []string{"192.0.2.0/24"}, proto: model.ProtoUDP, lo: 5000, hi: 5353},
	{name: "o-allow-web", dst: eipOther, srcs: []string{"203.0.0.0/16"}, proto: model.ProtoTCP, lo: 80, hi: 443},
	{name: "o-deny-in", deny: true, dst: eipOther, srcs: []string{"203.0.113.128/25"}, comment: "deny /25 inside an allowed /16"},
	{name: "o-deny-ssh-wide", deny: true, dst: eipOther, srcs: []string{"192.0.0.0/16"}, proto: model.ProtoTCP, lo: 22},
	{name: "o-allow-dns", dst: eipOther, srcs: []string{"192.0.2.0/24"}, proto: model.ProtoUDP, lo: 53, comment: "allow /24 inside a denied /16"},
	{name: "o-allow-icmp", dst: eipOther, srcs: []string{"0.0.0.0/0"}, proto: model.ProtoICMP},
	{name: "o-allow-client", dst: eipOther, srcs: []string{client + "/32"}, comment: "every protocol, fragments too"},
	{name: "v-deny-ssh", deny: true, dst: vipNAT, srcs: []string{"0.0.0.0/0"}, proto: model.ProtoTCP, lo: 22, hi: 23},
	{name: "v-deny-range", deny: true, dst: vipNAT, srcs: []string{"203.0.113.0/24"}, proto: model.ProtoTCP, lo: 8000, hi: 8443},
	{name: "e-allow-net", dst: vipEncap, srcs: []string{"203.0.113.0/24"}},
	{name: "e-allow-bench-udp", dst: vipEncap, srcs: []string{"198.19.249.0/24"}, proto: model.ProtoUDP},
	{name: "e-deny-mdns", deny: true, dst: vipEncap, srcs: []string{"203.0.113.0/28"}, proto: model.ProtoUDP, lo: 5353},
	{name: "o6-allow-web", dst: eip6Own, srcs: []string{"2001:db8:c::/48"}, proto: model.ProtoTCP, lo: 80, hi: 443, comment: "a private IPv6 EIP"},
	{name: "o6-deny-in", deny: true, dst: eip6Own, srcs: []string{"2001:db8:c:1::/64"}, comment: "deny /64 inside an allowed /48"},
	{name: "o6-allow-icmp", dst: eip6Own, srcs: []string{"::/0"}, proto: model.ProtoICMP, comment: "icmp is ICMPv6 for an IPv6 packet"},
	{name: "o6-allow-v4", dst: eip6Own, srcs: []string{"203.0.113.0/24"}, comment: "IPv4 sources only: no IPv6 source"},
}

// scaleFWPrefixes are the rules' source prefixes, for the mutator.
func scaleFWPrefixes() []netip.Prefix {
	var ps []netip.Prefix
	for _, r := range scaleFWRules {
		for _, s := range r.srcs {
			if p := netip.MustParsePrefix(s); p.Addr().Is4() { // IPv6 ones: scaleAddrs6
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// scaleFirewall programs scaleFWRules into the bed's edge the way the
// edge's reconciler does (internal/edge syncFirewall: fwplan.Build over
// the routed EIPs and VIPs with the sets' membership, then ApplyFirewall
// of the diff) and returns the oracle's reading of them.
func scaleFirewall(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
	slots := programScaleFirewall(t, fb, scaleFWRules)
	return scaleFWOracle(scaleFWRules, slots), slots
}

// programScaleFirewall plans rules and writes them into the bed's edge;
// it returns each rule's counter slot.
func programScaleFirewall(t *testing.T, fb *fuzzEdgeBed, rules []scaleFWRule) map[string]uint32 {
	const set = "fz-set"
	in := fwplan.Input{Serves: func(name string, a netip.Addr) bool {
		return name == set && slices.Contains(scaleFWSet, a.String())
	}}
	var dests []netip.Addr
	for a := range fb.routes {
		dests = append(dests, a)
	}
	for a := range fb.lb.vips {
		dests = append(dests, a)
	}
	in.Dests = dests
	for _, r := range rules {
		m := &model.FirewallRule{Name: r.name, Action: model.FirewallAllow, Protocol: r.proto, Port: r.lo, PortEnd: r.hi}
		if r.deny {
			m.Action = model.FirewallDeny
		}
		switch r.dst {
		case "":
		case "set":
			m.Set = set
		default:
			m.Address = netip.MustParseAddr(r.dst)
		}
		for _, s := range r.srcs {
			m.Sources = append(m.Sources, netip.MustParsePrefix(s))
		}
		if es := m.Validate(); len(es) > 0 {
			t.Fatalf("rule %s: %v", r.name, es)
		}
		in.Rules = append(in.Rules, m)
	}
	p, err := fwplan.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.edge.ApplyFirewall(p.Compare(nil)); err != nil {
		t.Fatal(err)
	}
	return p.Slots
}

// scaleFWOracle is the oracle's reading of rules, from the table and the
// docs alone; only the counter slots (an arbitrary numbering) come from
// the plan.
func scaleFWOracle(table []scaleFWRule, slots map[string]uint32) dpfuzz.Policy {
	var rules []dpfuzz.FWRule
	for _, r := range table {
		o := dpfuzz.FWRule{Name: r.name, Deny: r.deny, PortLo: r.lo, PortHi: r.hi, Slot: slots[r.name]}
		switch {
		case r.lo == 0:
			o.PortHi = 0xffff
		case r.hi == 0:
			o.PortHi = r.lo
		}
		o.Proto = map[string]uint8{model.ProtoTCP: dpfuzz.ProtoTCP, model.ProtoUDP: dpfuzz.ProtoUDP, model.ProtoICMP: dpfuzz.ProtoICMP}[r.proto]
		switch r.dst {
		case "":
		case "set":
			for _, a := range scaleFWSet {
				o.Dests = append(o.Dests, addr(a))
			}
		default:
			o.Dests = []netip.Addr{addr(r.dst)}
		}
		for _, s := range r.srcs {
			o.Sources = append(o.Sources, netip.MustParsePrefix(s))
		}
		rules = append(rules, o)
	}
	return dpfuzz.NewFirewall(rules)
}

// denySources is a firewall Policy for the oracle: deny by source prefix.
type denySources []netip.Prefix

func (d denySources) Decide(f dpfuzz.Flow) dpfuzz.FWDecision {
	for _, p := range d {
		if p.Contains(f.Src) {
			return dpfuzz.FWDecision{Drop: dpfuzz.FWDeny, Rule: "deny src " + p.String()}
		}
	}
	return dpfuzz.FWDecision{}
}

// The firewall hook works, and the harness fails when a program transmits
// what the oracle forbids: with a Policy denying the clients' prefix that
// nothing enforces in the data plane (no firewall rule is programmed), the
// run must fail on a transmitted denied packet. The firewall's own test
// programs its rules in configure and must pass.
func TestScaleFuzzEdgeCatchesUnenforcedDeny(t *testing.T) {
	t.Setenv("AZG_FUZZ_PACKETS", "20000")
	err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, configure: func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
		return denySources{netip.MustParsePrefix("203.0.113.0/24")}, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "denied by the firewall") {
		t.Fatalf("a transmitted denied packet went unnoticed: %v", err)
	}
}

// The firewall's counters are held to the oracle: with the real rules
// programmed but an oracle that lacks one deny rule (the /25 denied inside
// eipOther's allowed /16), the run must fail on drop_fw_deny or that
// rule's counter (what the edge drops there the oracle lets pass or
// calls private, and nothing forbidden is transmitted).
func TestScaleFuzzEdgeCatchesFirewallMiscount(t *testing.T) {
	t.Setenv("AZG_FUZZ_PACKETS", "20000")
	err := scaleFuzzEdge(t, scaleEdgeOptions{expectFailure: true, configure: func(t *testing.T, fb *fuzzEdgeBed) (dpfuzz.Policy, map[string]uint32) {
		slots := programScaleFirewall(t, fb, scaleFWRules)
		lacking := slices.DeleteFunc(slices.Clone(scaleFWRules), func(r scaleFWRule) bool { return r.name == "o-deny-in" })
		return scaleFWOracle(lacking, slots), slots
	}})
	if err == nil || !(strings.Contains(err.Error(), "drop_fw_") || strings.Contains(err.Error(), "firewall rule")) {
		t.Fatalf("a firewall miscount went unnoticed: %v", err)
	}
	t.Logf("caught, as it must be: %.300s", err)
}

// scaleFuzzEdge is TestScaleFuzzEdge with options: the firewall's tests
// call it with their rules (configure) so that denied traffic is held to
// "never transmitted" under fuzzing too.
func scaleFuzzEdge(t *testing.T, o scaleEdgeOptions) error {
	n, seed := scaleFuzzPlan(t, 0.6)
	fb := newFuzzEdgeBed(t)
	scaleEdge6(t, fb)
	if err := fb.edge.SetSpoofPrefixes(scaleOwn, scaleUnderlay); err != nil {
		t.Fatal(err)
	}
	region := &dpfuzz.Region{NVGREEndpoint: addr(dptest.UlAddr), NVGREEndpoint6: addr(dptest.UlAddr6), ICMPSource: addr(dptest.ExtAddr), ICMPSource6: addr(dptest.ExtAddr6),
		EIPs: map[netip.Addr]dpfuzz.Binding{}, VIPs: fb.lb.vips, VIP6s: scaleVIP6Oracle(), Own: scaleOwn, UnderlayNets: scaleUnderlay}
	if o.vip6 != nil {
		o.vip6(region.VIP6s)
	}
	for a, r := range fb.routes {
		region.EIPs[a] = dpfuzz.Binding{Host: r.Host, VSID: r.VSID}
	}
	var fwSlots map[string]uint32
	if o.configure != nil {
		region.Policy, fwSlots = o.configure(t, fb)
	}
	var seeds []scaleSeed
	for _, s := range edgeFuzzSeeds(t) {
		seeds = append(seeds, scaleSeed{s.dev, s.frame})
	}
	seeds = append(seeds, scaleExtraEdgeSeeds(t)...)
	seeds = append(seeds, scaleEdge6Seeds(t)...)
	seeds = append(seeds, scaleUl6Seeds(t)...)
	if fwSlots != nil {
		seeds = append(seeds, scaleFWSeeds(t)...)
	}
	t.Logf("xdp_edge: %d seeds", len(seeds))
	f := newScaleFuzzer("xdp_edge", seed, seeds, []string{dptest.ExtDev, dptest.UlDev})
	f.expectFailure = o.expectFailure
	f.mut.Keys = []uint32{vsid << 8, vsid<<8 | 0x21, 6000 << 8, 6000<<8 | 0x7f, 5002 << 8}
	f.mut.TunnelSrcs = []netip.Addr{addr(hostAddr), addr(otherHost), addr("198.19.250.9"), addr(dptest.FabAddr)}
	f.mut.Endpoint = addr(dptest.UlAddr)
	f.mut.Addrs6 = scaleAddrs6()
	if fwSlots != nil {
		f.mut.Prefixes = scaleFWPrefixes()
	}
	f.judge = func(dev string, in []byte) dpfuzz.Verdict { return region.JudgeEdge(edgeSide(dev), in) }
	f.check = func(it *runItem, v dpfuzz.Verdict) error {
		out := edgeOutput
		if v.IP6 != nil || v.Out6 != nil {
			out = edgeOutput6
		}
		kind, err := out(fb, region, it, v)
		if err == nil {
			f.results.outputs[kind]++
		}
		return err
	}
	f.stats = fb.edge.Stats
	// Everything forbidden is dropped, but what is not IPv4 (the kernel's:
	// ARP, IPv6) and what goes to no EIP or VIP (the kernel routes or
	// refuses it; a martian destination outside a tunnel is one).
	f.mustDrop = func(v dpfuzz.Verdict) bool {
		return !strings.HasPrefix(v.Forbid, "not IPv4") && !strings.HasPrefix(v.Forbid, "martian destination")
	}
	fwTotals := map[string]uint64{}
	f.batch = edgeBatchCheck(t, fb, region, fwSlots, fwTotals)
	f.runner = startBatchRunner(t, fb.env, fb.edge.Program(), dptest.ExtDev, dptest.UlDev)
	if err := f.run(t, n); err != nil {
		return err
	}
	if fwSlots != nil {
		t.Logf("xdp_edge: firewall rules' counters (each equal to the oracle's count) %v", fwTotals)
	}
	if len(f.results.outputs) == 0 {
		return errors.New("no output transmitted: the run checked nothing")
	}
	return nil
}

func edgeSide(dev string) dpfuzz.Side {
	if dev == dptest.UlDev {
		return dpfuzz.Underlay
	}
	return dpfuzz.Internet
}

// edgeOutput checks what xdp_edge transmitted (or handed to the kernel
// changed) for an input: the oracle's rules, then exactly the outputs the
// differential checkers of FuzzEdge accept (at least one must), then the
// action against the egress the output's MACs name.
func edgeOutput(fb *fuzzEdgeBed, region *dpfuzz.Region, it *runItem, v dpfuzz.Verdict) (string, error) {
	in, out := it.in, it.out
	if it.act == xdpPass {
		// A changed frame for the kernel to forward: decapsulated, or
		// translated with an unresolved next hop.
		if v.Forbid != "" {
			return "", fmt.Errorf("handed to the kernel changed, but the input must never be forwarded: %s", v.Forbid)
		}
		e1, e2 := fb.checkDecap(in, out, true), fb.checkLBNATPass(in, out)
		if e1 != nil && e2 != nil {
			return "", fmt.Errorf("changed frame for the kernel is neither a decapsulation (%v) nor a translation (%v)", e1, e2)
		}
		return "pass-changed", nil
	}
	kind, err := region.CheckOutput(v, dpfuzz.RouterHop, out)
	if err != nil {
		return kind, err
	}
	errs := map[string]error{
		"encap_tx":    fb.checkEncap(in, out),
		"decap_tx":    fb.checkDecap(in, out, false),
		"icmp":        fb.checkICMP(in, out),
		"lb_encap_tx": fb.checkLBEncap(in, out),
		"lb_nat_tx":   fb.checkLBNAT(in, out),
		"lb_reply_tx": fb.checkLBReply(in, out),
		"lb_icmp_tx":  fb.checkLBICMP(in, out),
		"arp_reply":   fb.checkARP(it.dev, in, out),
		"ndp_reply":   fb.checkNDP(it.dev, in, out),
	}
	var matched []string
	var why strings.Builder
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		if errs[k] == nil {
			matched = append(matched, k)
		} else {
			fmt.Fprintf(&why, "\n  as %s: %v", k, errs[k])
		}
	}
	if len(matched) != 1 {
		return kind, fmt.Errorf("transmitted frame (%s) is not exactly one well-formed output (matched %v)%s", kind, matched, why.String())
	}
	egress := it.dev
	switch matched[0] {
	case "icmp", "arp_reply", "ndp_reply":
	case "encap_tx":
		egress = dptest.UlDev
	default:
		egress = egressOf(out)
	}
	want := uint32(xdpRedirect)
	if egress == it.dev {
		want = xdpTX
	}
	if it.act != want {
		return kind, fmt.Errorf("%s from %s leaving by %s must be %s", matched[0], it.dev, egress, actionNames[want])
	}
	return matched[0], nil
}

// scaleExtraEdgeSeeds are corners the fixtures' seeds lack: IPv6, GRE that
// is not NVGRE, forged sources of every class to an EIP and a VIP, a land
// attack, NVGRE from the Internet side, three VLAN tags, an ICMP error
// about an ICMP error with TTL 1.
func scaleExtraEdgeSeeds(tb testing.TB) []scaleSeed {
	fromInet := func(f flow) []byte { return f.frame(tb, dptest.RtrMAC, dptest.ExtMAC) }
	var s []scaleSeed
	ext := func(b []byte) { s = append(s, scaleSeed{dptest.ExtDev, b}) }
	ul := func(b []byte) { s = append(s, scaleSeed{dptest.UlDev, b}) }
	for _, src := range []string{eip, eipOther, vipEncap, hostAddr, dptest.UlAddr, beA, "10.1.2.3", "172.16.5.5", "192.168.1.1",
		"100.64.1.1", "169.254.1.1"} {
		ext(fromInet(flow{src: src, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}))
		ext(fromInet(flow{src: src, dst: vipNAT, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true}))
	}
	ext(fromInet(flow{src: vipNAT, dst: vipNAT, proto: layers.IPProtocolUDP, sport: 53, dport: 53}))
	ext(fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolGRE, payload: []byte{0, 0, 8, 0, 0x45, 0, 0, 20}}))
	v6 := make([]byte, 14+40+8)
	copy(v6, mac(dptest.ExtMAC))
	copy(v6[6:], mac(dptest.RtrMAC))
	binary.BigEndian.PutUint16(v6[12:], 0x86dd)
	v6[14] = 0x60
	binary.BigEndian.PutUint16(v6[18:], 8)
	v6[20], v6[21] = 17, 64
	ext(v6)
	for _, b := range v6SeedFrames(dptest.RtrMAC, dptest.ExtMAC, true) {
		ext(b)
	}
	for _, b := range v6SeedFrames(dptest.FabMAC, dptest.UlMAC, true)[:3] {
		ul(b)
	}
	// Neighbor solicitations as a router sends them (hop limit 255,
	// checksummed) on the ARP owner's interface, for the mutator to take
	// through lib/ndp.h's validation: to an IPv6 EIP's solicited-node
	// group, unicast to it (forwarded as any packet), and DAD's.
	slla := ndpOpt(1, mac(dptest.RtrMAC))
	ext(nsFrame(ndpPeerLL, "ff02::1:ff00:7", "33:33:ff:00:00:07", nsMsg(eip6, slla)))
	ext(nsFrame(client6, eip6, dptest.ExtMAC, nsMsg(eip6, slla)))
	ext(nsFrame("::", "ff02::1:ff00:7", "33:33:ff:00:00:07", nsMsg(eip6, []byte(ndpNonce))))
	reply := flow{src: eip, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, ttl: 63}
	tun := nvgre(tb, dptest.FabMAC, dptest.UlMAC, hostAddr, dptest.UlAddr, vsid<<8|0x5a, 0, ethFrame(tb, "02:cc:00:00:00:02", gwMAC, reply.ip(tb)))
	ul(tun)
	inet := append([]byte(nil), tun...)
	copy(inet, mac(dptest.ExtMAC))
	copy(inet[6:], mac(dptest.RtrMAC))
	ext(inet)
	three := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2})
	for i := 0; i < 3; i++ {
		three = append(three[:12], append([]byte{0x81, 0x00, 0, byte(i + 1)}, three[12:]...)...)
	}
	ext(three)
	q := flow{src: eip, dst: client, proto: layers.IPProtocolICMPv4, icmpType: 3, payload: make([]byte, 28)}.ip(tb)
	ext(ethFrame(tb, dptest.RtrMAC, dptest.ExtMAC, icmpError(tb, client, eip, 11, 0, 0, q[:28])))
	tl := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolICMPv4, icmpType: 3, ttl: 1, payload: make([]byte, 28)})
	ext(tl)
	return s
}

// scaleFWSeeds: flows from the firewall rules' sources to the
// destinations with rules of their own (and to eip, under global and set
// rules), TCP and UDP to the ports the rules name, ICMP, and fragments
// (first and later), for the mutator to start from.
func scaleFWSeeds(tb testing.TB) []scaleSeed {
	var s []scaleSeed
	ext := func(f flow) { s = append(s, scaleSeed{dptest.ExtDev, f.frame(tb, dptest.RtrMAC, dptest.ExtMAC)}) }
	ports := []uint16{22, 53, 80, 443, 5353, 6000, 8080}
	i := 0
	for _, src := range []string{client, "203.0.113.66", "203.0.113.200", "203.0.7.1", "192.0.2.9", "192.0.2.200", "192.0.9.1", "198.19.249.5"} {
		for _, dst := range []string{eip, eipOther, vipNAT, vipEncap} {
			i++
			ext(flow{src: src, dst: dst, proto: layers.IPProtocolTCP, sport: 40000, dport: ports[i%len(ports)], syn: true})
			ext(flow{src: src, dst: dst, proto: layers.IPProtocolUDP, sport: 40000, dport: ports[(i+3)%len(ports)], payload: []byte("fuzz")})
			if i%2 == 0 {
				ext(flow{src: src, dst: dst, proto: layers.IPProtocolICMPv4, icmpType: 8, payload: make([]byte, 8)})
			} else {
				ext(flow{src: src, dst: dst, proto: layers.IPProtocolUDP, sport: 40000, dport: 53, mf: i%4 == 1, fragOff: uint16(i % 4 / 3 * 3), payload: make([]byte, 16)})
			}
		}
	}
	return s
}

func newScaleFuzzer(name string, seed uint64, seeds []scaleSeed, devs []string) *scaleFuzzer {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f := &scaleFuzzer{name: name, seeds: seeds, devs: devs, seed: seed, rng: rng, events: map[string]bool{"flow_new": true}}
	for _, s := range seeds {
		f.frames = append(f.frames, s.frame)
	}
	f.mut = &dpfuzz.Mutator{R: rng, Addrs: scaleAddrs(), Ports: scalePorts, MaxFrame: fuzzMaxFrame}
	return f
}

// edgeBatchCheck holds two more sets of counters to the oracle after each
// batch. Anti-spoofing: every input the oracle finds spoofed (well formed,
// from the Internet side, to an EIP or VIP, not denied) is dropped under
// its class's counter, and nothing else is (drop_spoof_own: a land attack
// or the region's own source; drop_spoof_underlay; drop_spoof_bogon). The
// per-EIP counters: rx packets move by the encapsulations to EIPs, tx
// packets by the decapsulations from EIPs (forwarded, or handed to the
// kernel), as the outputs show them.
func edgeBatchCheck(t *testing.T, fb *fuzzEdgeBed, region *dpfuzz.Region, fwSlots map[string]uint32, fwTotals map[string]uint64) func([]runItem, []dpfuzz.Verdict, map[string]uint64) error {
	var slots []uint32
	for _, r := range fb.routes {
		slots = append(slots, r.StatsIdx)
	}
	eipTotals := func() (rx, tx uint64) {
		for _, i := range slots {
			c, err := fb.edge.EIPStats(i)
			if err != nil {
				t.Fatal(err)
			}
			rx += c.RxPackets
			tx += c.TxPackets
		}
		return rx, tx
	}
	lastRx, lastTx := eipTotals()
	fwCounts := func() map[string]uint64 {
		m := map[string]uint64{}
		for name, i := range fwSlots {
			c, err := fb.edge.FirewallStats(i)
			if err != nil {
				t.Fatal(err)
			}
			m[name] = c.Packets
		}
		return m
	}
	lastFW := fwCounts()
	return func(items []runItem, verdicts []dpfuzz.Verdict, delta map[string]uint64) error {
		spoof := map[string]uint64{}
		fwDrops, fwRules := map[string]uint64{}, map[string]uint64{}
		var rx, tx uint64
		for i, v := range verdicts {
			switch {
			case strings.HasPrefix(v.Forbid, "land attack"), strings.HasPrefix(v.Forbid, "spoofed: the region's own"):
				spoof["drop_spoof_own"]++
			case strings.HasPrefix(v.Forbid, "spoofed: underlay"):
				spoof["drop_spoof_underlay"]++
			case strings.HasPrefix(v.Forbid, "spoofed: non-routable"):
				spoof["drop_spoof_bogon"]++
			}
			if v.FirewallRan {
				switch v.Firewall.Drop {
				case dpfuzz.FWDeny:
					fwDrops["drop_fw_deny"]++
				case dpfuzz.FWPrivate:
					fwDrops["drop_fw_private"]++
				}
				if v.Firewall.Rule != "" {
					fwRules[v.Firewall.Rule]++
				}
			}
			it := &items[i]
			switch {
			case it.act == xdpDrop || v.Forbid != "":
			case v.Out6 != nil:
				if v.Tunnel != nil && !bytes.Equal(it.in, it.out) {
					tx++ // an IPv6 EIP's guest's packet, decap_tx or decap_pass
				} else if isEncap6(v, it) {
					rx++ // encapsulated to an IPv6 EIP's host
				}
			case v.Fwd == nil:
			case v.Tunnel != nil && !bytes.Equal(it.in, it.out):
				if _, ok := region.EIPs[v.Fwd.Src()]; ok {
					tx++ // decap_tx or decap_pass from an EIP
				}
			case it.act == xdpTX || it.act == xdpRedirect:
				if _, ok := region.EIPs[v.Fwd.Dst()]; ok && len(it.out) == 14+42+len(v.Fwd.Pkt) &&
					binary.BigEndian.Uint16(it.out[12:]) == 0x0800 && it.out[14+9] == 47 {
					rx++ // encapsulated to an EIP's host
				}
			}
		}
		for _, c := range []string{"drop_spoof_own", "drop_spoof_underlay", "drop_spoof_bogon"} {
			if delta[c] != spoof[c] {
				return fmt.Errorf("%s moved by %d, the oracle found %d such inputs (all spoof classes: %v)", c, delta[c], spoof[c], spoof)
			}
		}
		if fwSlots != nil {
			for _, c := range []string{"drop_fw_deny", "drop_fw_private"} {
				if delta[c] != fwDrops[c] {
					return fmt.Errorf("%s moved by %d, the oracle's firewall dropped %d such inputs (%v)", c, delta[c], fwDrops[c], fwDrops)
				}
			}
			now := fwCounts()
			for name := range fwSlots {
				if d := now[name] - lastFW[name]; d != fwRules[name] {
					return fmt.Errorf("firewall rule %s counted %d packets, the oracle says it decided %d (all rules, oracle: %v)", name, d, fwRules[name], fwRules)
				}
				fwTotals[name] += fwRules[name]
			}
			lastFW = now
		}
		nowRx, nowTx := eipTotals()
		if nowRx-lastRx != rx || nowTx-lastTx != tx {
			return fmt.Errorf("EIP counters moved rx %d tx %d, the outputs show %d encapsulations to EIPs and %d decapsulations from them",
				nowRx-lastRx, nowTx-lastTx, rx, tx)
		}
		lastRx, lastTx = nowRx, nowTx
		return nil
	}
}

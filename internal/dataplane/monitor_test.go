package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/google/gopacket/layers"
)

// hostileFrame is a frame from the Internet the edge must drop, and the
// reason it must drop it under.
type hostileFrame struct {
	name, reason string
	in           []byte
}

// hostileFrames is a small corpus of malformed and hostile frames from
// the Internet side (the malformed ones of TestEdgeFixtures, a martian, a
// spoof of the region's own address and two an unreachable host gets).
func hostileFrames(t *testing.T) []hostileFrame {
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	good := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, df: true})
	cp := func() []byte { return append([]byte(nil), good...) }
	vlanCut := append(append([]byte(nil), good[:12]...), 0x81, 0x00, 0x00)
	qinqinq := append(append([]byte(nil), good[:12]...), 0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3, 0x08, 0x00)
	qinqinq = append(qinqinq, good[14:]...)
	badCsum := cp()
	badCsum[14+10] ^= 0xff
	ihl4 := cp()
	ihl4[14] = 0x44
	v6inv4 := cp()
	v6inv4[14] = 0x65
	longTot := cp()
	longTot[14+2], longTot[14+3] = 0x05, 0xdc
	setIPCsum(longTot[14:])
	shortTot := cp()
	shortTot[14+2], shortTot[14+3] = 0, 16
	setIPCsum(shortTot[14:])
	tcpTrunc := fromInet(flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 1, dport: 2})[:14+20+12]
	tcpTrunc[14+2], tcpTrunc[14+3] = 0, 32
	setIPCsum(tcpTrunc[14:])
	return []hostileFrame{
		{"vlan tag cut off", "drop_eth_trunc", vlanCut},
		{"three vlan tags", "drop_eth_trunc", qinqinq},
		{"truncated ip header", "drop_ip_trunc", good[:14+12]},
		{"total length beyond frame", "drop_ip_trunc", longTot},
		{"total length below header", "drop_ip_bad", shortTot},
		{"ihl below 5", "drop_ip_bad", ihl4},
		{"version 6 in an ipv4 frame", "drop_ip_bad", v6inv4},
		{"bad header checksum", "drop_ip_csum", badCsum},
		{"truncated tcp header", "drop_l4_trunc", tcpTrunc},
		{"loopback source", "drop_ip_martian", fromInet(flow{src: "127.0.0.1", dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2})},
		{"source is the EIP itself", "drop_spoof_own", fromInet(flow{src: eip, dst: eip, proto: layers.IPProtocolUDP, sport: 1, dport: 2})},
		{"host behind unresolved next hop", "drop_no_neigh", fromInet(flow{src: client, dst: eipNoNbr, proto: layers.IPProtocolUDP, sport: 1, dport: 2})},
		{"host behind blackhole", "drop_fib", fromInet(flow{src: client, dst: eipHole, proto: layers.IPProtocolUDP, sport: 1, dport: 2})},
	}
}

// readMonEvents reads the events waiting in r (none left within 100 ms).
func readMonEvents(t *testing.T, r *MonitorReader) []MonitorEvent {
	t.Helper()
	var out []MonitorEvent
	for {
		r.SetDeadline(time.Now().Add(100 * time.Millisecond))
		var ev MonitorEvent
		err := r.Read(&ev)
		if errors.Is(err, ErrNoEvent) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// TestMonitorShowsEachDropReason runs the hostile corpus through the edge
// (BPF_PROG_TEST_RUN) with the monitor on and reads, for each frame, one
// drop event with the reason it was counted under, the interface, its
// first bytes and its 5-tuple.
func TestMonitorShowsEachDropReason(t *testing.T) {
	b := newEdgeBed(t)
	r, err := b.edge.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ext, err := b.env.Node.Ifindex(dptest.ExtDev)
	if err != nil {
		t.Fatal(err)
	}
	corpus := hostileFrames(t)

	// Off: no event.
	if res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, corpus[0].in); err != nil || res.Action != xdpDrop {
		t.Fatalf("run: %v, action %d", err, res.Action)
	}
	if evs := readMonEvents(t, r); len(evs) != 0 {
		t.Fatalf("monitor off: %d events, want none", len(evs))
	}

	if err := b.edge.SetMonitor(MonitorConfig{Drops: true, Rate: 1000, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	before, err := b.edge.MonitorCounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range corpus {
		t.Run(f.name, func(t *testing.T) {
			res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.in)
			if err != nil {
				t.Fatal(err)
			}
			if res.Action != xdpDrop {
				t.Fatalf("action %d, want XDP_DROP", res.Action)
			}
			evs := readMonEvents(t, r)
			if len(evs) != 1 {
				t.Fatalf("%d events, want 1: %+v", len(evs), evs)
			}
			ev := evs[0]
			t.Logf("%s: %s on ifindex %d, %d bytes", f.name, ev.Reason, ev.Ifindex, ev.Len)
			if ev.Kind != MonDrop || ev.Reason != f.reason {
				t.Errorf("event %s %s, want drop %s", KindName(ev.Kind), ev.Reason, f.reason)
			}
			if ev.Ifindex != uint32(ext) {
				t.Errorf("ifindex %d, want %d (%s)", ev.Ifindex, ext, dptest.ExtDev)
			}
			n := min(len(f.in), MonitorSnap)
			if int(ev.Len) != len(f.in) || !bytes.Equal(ev.Data, f.in[:n]) {
				t.Errorf("frame: len %d and %x, want %d and %x", ev.Len, ev.Data, len(f.in), f.in[:n])
			}
			tu := ParseTuple(ev.Data)
			if f.reason == "drop_fib" && (!tu.OK || tu.Src != addr(client) || tu.Dst != addr(eipHole) || tu.Proto != 17 || tu.Sport != 1 || tu.Dport != 2) {
				t.Errorf("tuple %+v, want udp %s:1 -> %s:2", tu, client, eipHole)
			}
		})
	}
	after, err := b.edge.MonitorCounts()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sent - before.Sent; d != uint64(len(corpus)) {
		t.Errorf("sent grew by %d, want %d", d, len(corpus))
	}
	if after.LostRate != before.LostRate || after.LostFull != before.LostFull {
		t.Errorf("lost: %+v -> %+v, want none", before, after)
	}
}

// TestMonitorRateLimit: one token a second, a burst of one: of three drops
// in a row one is shown and two are counted as lost to the rate limit.
func TestMonitorRateLimit(t *testing.T) {
	b := newEdgeBed(t)
	r, err := b.edge.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := b.edge.SetMonitor(MonitorConfig{Drops: true, Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	f := hostileFrames(t)[0]
	for i := 0; i < 3; i++ {
		if _, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.in); err != nil {
			t.Fatal(err)
		}
	}
	if evs := readMonEvents(t, r); len(evs) != 1 {
		t.Errorf("%d events, want 1", len(evs))
	}
	c, err := b.edge.MonitorCounts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 1 || c.LostRate != 2 {
		t.Errorf("counts %+v, want 1 sent and 2 lost to the rate limit", c)
	}
	if err := b.edge.SetMonitor(MonitorConfig{Drops: true, Rate: MaxMonitorRate + 1}); err == nil {
		t.Error("a rate above MaxMonitorRate was taken")
	}
}

// TestMonitorTrace: a forwarded frame gives its input (kind in) and its
// output (kind out, the encapsulated frame) with the same sequence number.
func TestMonitorTrace(t *testing.T) {
	b := newEdgeBed(t)
	r, err := b.edge.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := b.edge.SetMonitor(MonitorConfig{Trace: true, Rate: 1000}); err != nil {
		t.Fatal(err)
	}
	f := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5353, dport: 53}
	in := f.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, in)
	if err != nil || res.Action != xdpRedirect {
		t.Fatalf("run: %v, action %d", err, res.Action)
	}
	evs := readMonEvents(t, r)
	if len(evs) != 2 {
		t.Fatalf("%d events, want in and out", len(evs))
	}
	if evs[0].Kind != MonIn || !bytes.Equal(evs[0].Data, in) {
		t.Errorf("first event %s %x, want in %x", KindName(evs[0].Kind), evs[0].Data, in)
	}
	want := encapOf(t, f, hostAddr, vsid)
	if evs[1].Kind != MonOut || evs[1].Reason != "encap_tx" || !bytes.Equal(evs[1].Data, want[:min(len(want), MonitorSnap)]) {
		t.Errorf("second event %s %s %x, want out encap_tx %x", KindName(evs[1].Kind), evs[1].Reason, evs[1].Data, want)
	}
	if evs[0].Seq != evs[1].Seq {
		t.Errorf("sequence numbers %d and %d differ", evs[0].Seq, evs[1].Seq)
	}
	// The encapsulated frame's tuple: its outer header (edge > host,
	// GRE) and, inside, the guest's flow with the tunnel's VSID.
	tu := ParseTuple(evs[1].Data)
	if !tu.OK || tu.Proto != 47 || tu.Dst != addr(hostAddr) || tu.Inner == nil || tu.VSID != vsid {
		t.Fatalf("out event's tuple %+v, want gre to %s vsid %d with an inner tuple", tu, hostAddr, vsid)
	}
	if in := *tu.Inner; in.Src != addr(client) || in.Dst != addr(eip) || in.Proto != 17 || in.Sport != 5353 || in.Dport != 53 || in.Inner != nil {
		t.Errorf("inner tuple %+v, want udp %s:5353 > %s:53", in, client, eip)
	}
}

// TestParseTupleThreeTags: after two VLAN tags the next two bytes must be
// the IPv4 ethertype; a third tag is not skipped and its ethertype is not
// read as an IPv4 header (a frame the data plane drops as drop_eth_trunc
// must not show a tuple made up of its tag bytes).
func TestParseTupleThreeTags(t *testing.T) {
	ip := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 203, 0, 113, 10, 198, 51, 100, 7, 0, 1, 0, 2, 0, 8, 0, 0}
	hdr := append(make([]byte, 12), 0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2)
	two := append(append(append([]byte(nil), hdr...), 0x08, 0x00), ip...)
	if tu := ParseTuple(two); !tu.OK || tu.Src != netip.MustParseAddr("203.0.113.10") || tu.Dport != 2 {
		t.Errorf("two tags: %+v, want udp 203.0.113.10:1 > 198.51.100.7:2", tu)
	}
	// A third tag, then an ethertype field (0x4500) that starts like an
	// IPv4 header.
	three := append(append(append([]byte(nil), hdr...), 0x81, 0x00, 0, 3), ip...)
	if tu := ParseTuple(three); tu.OK {
		t.Errorf("three tags parsed as %+v, want no tuple", tu)
	}
}

// TestMonitorBurstHoldsATick: the bucket is refilled once a tick of the
// coarse clock, so a burst below rate/100 (what a 10 ms tick adds) is
// refused: it would cap the rate far below the one asked for.
func TestMonitorBurstHoldsATick(t *testing.T) {
	for _, c := range []struct {
		cfg MonitorConfig
		ok  bool
	}{
		{MonitorConfig{Drops: true, Rate: 100, Burst: 100}, true},
		{MonitorConfig{Drops: true, Rate: 100, Burst: 1}, true},
		{MonitorConfig{Drops: true, Rate: MaxMonitorRate}, true}, // burst = rate
		{MonitorConfig{Drops: true, Rate: MaxMonitorRate, Burst: MaxMonitorRate / 100}, true},
		{MonitorConfig{Drops: true, Rate: MaxMonitorRate, Burst: 100}, false},
		{MonitorConfig{Drops: true, Rate: 20000, Burst: 199}, false},
	} {
		_, _, _, err := c.cfg.values()
		if (err == nil) != c.ok {
			t.Errorf("%+v: error %v, want ok %v", c.cfg, err, c.ok)
		}
	}
}

func TestParseTupleShortFrames(t *testing.T) {
	for n := 0; n < 40; n++ {
		if tu := ParseTuple(make([]byte, n)); tu.OK {
			t.Errorf("%d zero bytes parsed as %+v", n, tu)
		}
	}
}

// TestEveryDropReachesTheMonitor holds the BPF sources to one rule: a drop
// is counted through stats.h (count_drop), whose hook the monitor is, or,
// where a counter of a drop is added directly (lib/fw.h), the monitor's
// hook follows on the next line; the edge and agent programs return
// XDP_DROP nowhere else than after fw_drop, which counts its own.
func TestEveryDropReachesTheMonitor(t *testing.T) {
	files, err := filepath.Glob("../../bpf/lib/*.h")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../bpf/edge.c", "../../bpf/agent.c")
	for _, f := range files {
		if filepath.Base(f) == "stats.h" || filepath.Base(f) == "benchmode.h" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			at := fmt.Sprintf("%s:%d", filepath.Base(f), i+1)
			if m := regexp.MustCompile(`stat_add\((STAT_DROP_\w+)`).FindStringSubmatch(l); m != nil {
				if i+1 >= len(lines) || !strings.Contains(lines[i+1], "mon_event(ctx, "+m[1]+", MON_K_DROP)") {
					t.Errorf("%s: %s counted without the monitor's hook on the next line (use count_drop)", at, m[1])
				}
			}
			if regexp.MustCompile(`stat_add\([a-z]`).MatchString(l) {
				t.Errorf("%s: a counter chosen at run time added directly: use count_drop, count_pass or count_out", at)
			}
			if strings.Contains(l, "return XDP_DROP") && !(i > 0 && strings.Contains(lines[i-1], "fw_drop(ctx")) {
				t.Errorf("%s: XDP_DROP returned uncounted: use count_drop", at)
			}
		}
	}
}

// TestMonitorAgent: both agent programs write their drops to the monitor.
func TestMonitorAgent(t *testing.T) {
	requireRoot(t)
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r, err := a.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := a.SetMonitor(MonitorConfig{Drops: true}); err != nil {
		t.Fatal(err)
	}
	cut := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00, 0x00}
	for _, p := range []*ebpf.Program{a.UnderlayProgram(), a.GuestProgram()} {
		if _, err := p.Run(&ebpf.RunOptions{Data: cut, DataOut: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	evs := readMonEvents(t, r)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	for _, ev := range evs {
		if ev.Kind != MonDrop || ev.Reason != "drop_eth_trunc" || !bytes.Equal(ev.Data, cut) {
			t.Errorf("event %s %s %x, want drop drop_eth_trunc %x", KindName(ev.Kind), ev.Reason, ev.Data, cut)
		}
	}
	c, err := a.MonitorCounts()
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 2 {
		t.Errorf("counts %+v, want 2 sent", c)
	}
}

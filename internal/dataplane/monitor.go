package dataplane

// The monitor (bpf/lib/monitor.h): every verdict of the edge and agent
// programs can be written, rate limited per CPU, as a fixed-size record
// into the pinned ring buffer mon_events of the node's pin directory.
// The node daemon switches it on (SetMonitor); `azgate monitor` and
// `azgate capture` read the pinned ring (OpenMonitor), as root: the pin
// directory /sys/fs/bpf/azgate is root's (mode 0700), and reading a ring
// buffer takes CAP_BPF (or CAP_SYS_ADMIN) besides.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// MonitorSnap is how many bytes of a frame an event carries (MON_SNAP).
const MonitorSnap = 128

// The monitor's flags (MON_F_*).
const (
	monDrops = 0x1
	monTrace = 0x2
)

// Kinds of monitor events (MON_K_*).
const (
	MonIn   = 1 // the frame as it came in (trace)
	MonDrop = 2 // dropped, Reason says why
	MonPass = 3 // handed to the kernel (trace)
	MonOut  = 4 // sent: XDP_TX or a redirect, the frame as sent (trace)
)

// MonitorConfig is what the data plane writes events for.
type MonitorConfig struct {
	Drops bool   // every drop
	Trace bool   // every frame in and every verdict (Drops too)
	Rate  uint32 // events a second per CPU (0: DefaultMonitorRate)
	Burst uint32 // events at most in one go per CPU (0: Rate)
}

// DefaultMonitorRate is the per-CPU event rate when none is set, and the
// roles' --monitor-rate default; DefaultMonitorBurst their
// --monitor-burst default.
const (
	DefaultMonitorRate  = 100
	DefaultMonitorBurst = 100
)

// MaxMonitorRate bounds Rate and Burst: the bucket's arithmetic (tokens in
// 1e-9 events, 10 s of refill at most) is exact far beyond it.
const MaxMonitorRate = 1_000_000

// MonitorTicksPerSecond is the fewest ticks a second of the kernel's
// coarse clock (CONFIG_HZ=100), which the bucket runs on: it is refilled
// once a tick, Rate/HZ tokens at a time, so Burst must hold at least
// Rate/MonitorTicksPerSecond or what a tick adds beyond Burst is lost and
// the rate never reached (Burst 100 at Rate 1,000,000 gave about 16,000
// events a second at HZ=250).
const MonitorTicksPerSecond = 100

func (c MonitorConfig) values() (flags, rate, burst uint32, err error) {
	if c.Rate > MaxMonitorRate || c.Burst > MaxMonitorRate {
		return 0, 0, 0, fmt.Errorf("monitor rate %d and burst %d: at most %d events a second per CPU", c.Rate, c.Burst, MaxMonitorRate)
	}
	if c.Drops {
		flags |= monDrops
	}
	if c.Trace {
		flags |= monDrops | monTrace
	}
	rate, burst = c.Rate, c.Burst
	if rate == 0 {
		rate = DefaultMonitorRate
	}
	if burst == 0 {
		burst = rate
	}
	if uint64(burst)*MonitorTicksPerSecond < uint64(rate) {
		return 0, 0, 0, fmt.Errorf("monitor burst %d: at least the rate / %d (%d) for a rate of %d: the bucket is refilled once a tick of the coarse clock (up to 1/%d s)",
			burst, MonitorTicksPerSecond, (rate+MonitorTicksPerSecond-1)/MonitorTicksPerSecond, rate, MonitorTicksPerSecond)
	}
	return flags, rate, burst, nil
}

type monVars interface {
	Set(any) error
}

func setMonitor(flagsV, rateV, burstV monVars, c MonitorConfig) error {
	if flagsV == nil || rateV == nil || burstV == nil {
		return errors.New("monitor: the program is not loaded")
	}
	flags, rate, burst, err := c.values()
	if err != nil {
		return err
	}
	// The bucket's parameters before the switch, so the first event
	// already sees them.
	if err := rateV.Set(rate); err != nil {
		return fmt.Errorf("monitor rate: %w", err)
	}
	if err := burstV.Set(burst); err != nil {
		return fmt.Errorf("monitor burst: %w", err)
	}
	if err := flagsV.Set(flags); err != nil {
		return fmt.Errorf("monitor flags: %w", err)
	}
	return nil
}

// SetMonitor sets what the edge program writes monitor events for.
func (e *Edge) SetMonitor(c MonitorConfig) error {
	if e.objs.MonFlags == nil {
		return setMonitor(nil, nil, nil, c)
	}
	return setMonitor(e.objs.MonFlags, e.objs.MonRate, e.objs.MonBurst, c)
}

// SetMonitor sets what the agent programs write monitor events for.
func (a *Agent) SetMonitor(c MonitorConfig) error {
	if a.objs.MonFlags == nil {
		return setMonitor(nil, nil, nil, c)
	}
	return setMonitor(a.objs.MonFlags, a.objs.MonRate, a.objs.MonBurst, c)
}

// MonitorEvent is one record of mon_events (struct mon_event).
type MonitorEvent struct {
	Time    time.Duration // CLOCK_MONOTONIC (bpf_ktime_get_ns)
	Seq     uint64        // the CPU's count of frames traced in: pairs a frame's events
	Reason  string        // the counter it was counted under (StatNames); "" for MonIn
	Kind    int           // MonIn, MonDrop, MonPass, MonOut
	Ifindex uint32        // the interface it came in on
	CPU     uint32
	Len     uint32 // the frame's length at the event
	Data    []byte // its first bytes (at most MonitorSnap)
}

const monEventSize = 40 + MonitorSnap

// DecodeMonitorEvent decodes one raw record into ev (Data is copied).
func DecodeMonitorEvent(b []byte, ev *MonitorEvent) error {
	if len(b) < monEventSize {
		return fmt.Errorf("monitor event: %d bytes, want %d", len(b), monEventSize)
	}
	le := binary.LittleEndian
	ev.Time = time.Duration(le.Uint64(b[0:]))
	ev.Seq = le.Uint64(b[8:])
	reason := le.Uint32(b[16:])
	ev.Kind = int(le.Uint32(b[20:]))
	ev.Ifindex = le.Uint32(b[24:])
	ev.CPU = le.Uint32(b[28:])
	ev.Len = le.Uint32(b[32:])
	snap := le.Uint32(b[36:])
	if snap > MonitorSnap {
		return fmt.Errorf("monitor event: %d bytes of frame, at most %d", snap, MonitorSnap)
	}
	ev.Reason = ""
	if ev.Kind != MonIn {
		if int(reason) >= len(statNames) {
			ev.Reason = fmt.Sprintf("reason_%d", reason)
		} else {
			ev.Reason = statNames[reason]
		}
	}
	ev.Data = append(ev.Data[:0], b[40:40+snap]...)
	return nil
}

// KindName names an event kind.
func KindName(k int) string {
	switch k {
	case MonIn:
		return "in"
	case MonDrop:
		return "drop"
	case MonPass:
		return "pass"
	case MonOut:
		return "out"
	}
	return fmt.Sprintf("kind_%d", k)
}

// Tuple is the 5-tuple of an event's frame, parsed from its first bytes
// (Ethernet, up to two VLAN tags, IPv4 or IPv6 and its extension headers,
// the ports of TCP/UDP or the type and code of ICMP and ICMPv6); OK false
// when they hold no IP header. An NVGRE
// frame (IPv4, GRE carrying Ethernet: a host's tunnel) has its outer
// header here (Proto 47) and the guest's frame inside in Inner, with the
// tunnel's VSID.
type Tuple struct {
	Src, Dst     netip.Addr
	Proto        uint8
	Sport, Dport uint16
	OK           bool
	VSID         uint32 // NVGRE's virtual subnet (Inner set only)
	Inner        *Tuple // the NVGRE frame's inner tuple (nil: none, or not in the bytes)
}

// ParseTuple parses the 5-tuple of a frame's first bytes, and the inner
// one of an NVGRE frame.
func ParseTuple(b []byte) Tuple { return parseTuple(b, true) }

// greTEB is GRE's protocol type for Ethernet (NVGRE, RFC 7637).
const greTEB = 0x6558

func parseTuple(b []byte, inner bool) Tuple {
	var t Tuple
	off := 12
	for tags := 0; ; tags++ {
		if len(b) < off+2 {
			return t
		}
		et := binary.BigEndian.Uint16(b[off:])
		if (et == 0x8100 || et == 0x88a8) && tags < 2 {
			off += 4
			continue
		}
		if et == 0x86dd {
			t.parseIPv6(b[off+2:])
			return t
		}
		if et != 0x0800 {
			return t // not IP, or a third tag (the data plane takes two)
		}
		off += 2
		break
	}
	if len(b) < off+20 || b[off]>>4 != 4 {
		return t
	}
	ihl := int(b[off]&0xf) * 4
	t.Proto = b[off+9]
	t.Src = netip.AddrFrom4([4]byte(b[off+12 : off+16]))
	t.Dst = netip.AddrFrom4([4]byte(b[off+16 : off+20]))
	t.OK = true
	frag := binary.BigEndian.Uint16(b[off+6:]) & 0x1fff
	l4 := off + ihl
	if frag == 0 && ihl >= 20 && len(b) >= l4+4 {
		switch t.Proto {
		case 6, 17:
			t.Sport = binary.BigEndian.Uint16(b[l4:])
			t.Dport = binary.BigEndian.Uint16(b[l4+2:])
		case 1:
			t.Sport, t.Dport = uint16(b[l4]), uint16(b[l4+1])
		case 47:
			if inner {
				t.parseNVGRE(b[l4:])
			}
		}
	}
	return t
}

// parseIPv6 parses an IPv6 header and its extension headers (hop-by-hop,
// routing, fragment, destination options: as far as the bytes go, at most
// 8) to the upper-layer protocol: the ports of TCP/UDP, the type and code
// of ICMPv6 (none in a later fragment or past the bytes).
func (t *Tuple) parseIPv6(b []byte) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return
	}
	t.Src = netip.AddrFrom16([16]byte(b[8:24]))
	t.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	t.OK = true
	nh, off := b[6], 40
	for range 8 {
		if nh != 0 && nh != 43 && nh != 44 && nh != 60 {
			break
		}
		if len(b) < off+8 {
			t.Proto = nh
			return
		}
		if nh == 44 {
			if binary.BigEndian.Uint16(b[off+2:])>>3 != 0 {
				t.Proto = b[off] // a later fragment: no ports
				return
			}
			nh, off = b[off], off+8
			continue
		}
		nh, off = b[off], off+(int(b[off+1])+1)*8
	}
	t.Proto = nh
	if len(b) < off+4 {
		return
	}
	switch nh {
	case 6, 17:
		t.Sport = binary.BigEndian.Uint16(b[off:])
		t.Dport = binary.BigEndian.Uint16(b[off+2:])
	case 58:
		t.Sport, t.Dport = uint16(b[off]), uint16(b[off+1])
	}
}

// parseNVGRE parses GRE carrying Ethernet with a key (NVGRE: the key's
// high 24 bits are the VSID) and the inner frame's tuple (one level: a
// tunnel inside the tunnel is not looked into).
func (t *Tuple) parseNVGRE(g []byte) {
	flags := binary.BigEndian.Uint16(g)
	if flags&0x07 != 0 || binary.BigEndian.Uint16(g[2:]) != greTEB || flags&0x2000 == 0 {
		return // GRE version 0 with a key, carrying Ethernet
	}
	off := 4
	if flags&0x8000 != 0 { // checksum present
		off += 4
	}
	if len(g) < off+4 {
		return
	}
	vsid := binary.BigEndian.Uint32(g[off:]) >> 8
	off += 4
	if flags&0x1000 != 0 { // sequence number present
		off += 4
	}
	if len(g) < off {
		return
	}
	in := parseTuple(g[off:], false)
	if in.OK {
		t.VSID, t.Inner = vsid, &in
	}
}

// MonitorReader reads the events of a node's pinned ring buffer. One
// reader at a time: the ring has one consumer position.
type MonitorReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
}

// OpenMonitor opens the monitor ring buffer pinned in pinDir.
func OpenMonitor(pinDir string) (*MonitorReader, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapMonEvents), nil)
	if err != nil {
		return nil, fmt.Errorf("monitor ring buffer in %s (is the node's data plane loaded, by this release? root only): %w", pinDir, err)
	}
	defer m.Close()
	return newMonitorReader(m)
}

func newMonitorReader(m *ebpf.Map) (*MonitorReader, error) {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("monitor ring buffer: %w", err)
	}
	return &MonitorReader{r: r}, nil
}

// OpenMonitor opens the loaded edge's monitor ring buffer.
func (e *Edge) OpenMonitor() (*MonitorReader, error) { return newMonitorReader(e.objs.MonEvents) }

// OpenMonitor opens the loaded agent's monitor ring buffer.
func (a *Agent) OpenMonitor() (*MonitorReader, error) { return newMonitorReader(a.objs.MonEvents) }

// Read reads the next event into ev, waiting until the deadline set with
// SetDeadline (ErrNoEvent) or Close (ErrMonitorClosed).
func (m *MonitorReader) Read(ev *MonitorEvent) error {
	if err := m.r.ReadInto(&m.rec); err != nil {
		if errors.Is(err, ringbuf.ErrClosed) {
			return ErrMonitorClosed
		}
		return err
	}
	return DecodeMonitorEvent(m.rec.RawSample, ev)
}

// SetDeadline bounds the next Reads (zero: wait forever).
func (m *MonitorReader) SetDeadline(t time.Time) { m.r.SetDeadline(t) }

// Close wakes a waiting Read and releases the ring.
func (m *MonitorReader) Close() error { return m.r.Close() }

// ErrMonitorClosed is returned by a Read after Close.
var ErrMonitorClosed = errors.New("monitor: reader closed")

// MonitorCounts are the monitor's counts summed over the CPUs.
type MonitorCounts struct {
	Sent     uint64 // events written to the ring
	LostRate uint64 // events the per-CPU rate limit refused
	LostFull uint64 // events a full ring had no room for
}

func sumMonState(vals []edgeMonState) MonitorCounts {
	var c MonitorCounts
	for _, v := range vals {
		c.Sent += v.Sent
		c.LostRate += v.LostRate
		c.LostFull += v.LostFull
	}
	return c
}

func readMonCounts(m *ebpf.Map) (MonitorCounts, error) {
	var vals []edgeMonState
	if err := m.Lookup(uint32(0), &vals); err != nil {
		return MonitorCounts{}, fmt.Errorf("monitor counts: %w", err)
	}
	return sumMonState(vals), nil
}

// PinnedMonitorCounts reads the monitor's counts of a node's pin directory.
func PinnedMonitorCounts(pinDir string) (MonitorCounts, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapMonState), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return MonitorCounts{}, fmt.Errorf("monitor counts in %s: %w", pinDir, err)
	}
	defer m.Close()
	return readMonCounts(m)
}

// MonitorCounts reads the loaded edge's monitor counts.
func (e *Edge) MonitorCounts() (MonitorCounts, error) { return readMonCounts(e.objs.MonState) }

// MonitorCounts reads the loaded agent's monitor counts.
func (a *Agent) MonitorCounts() (MonitorCounts, error) { return readMonCounts(a.objs.MonState) }

// Mode names the setting: off, drops or trace (the roles' --monitor).
func (c MonitorConfig) Mode() string {
	switch {
	case c.Trace:
		return "trace"
	case c.Drops:
		return "drops"
	}
	return "off"
}

// ParseMonitorMode returns the flags of a mode (off, drops, trace), Rate
// and Burst unset.
func ParseMonitorMode(mode string) (MonitorConfig, error) {
	switch mode {
	case "off":
		return MonitorConfig{}, nil
	case "drops":
		return MonitorConfig{Drops: true}, nil
	case "trace":
		return MonitorConfig{Trace: true}, nil
	}
	return MonitorConfig{}, fmt.Errorf("monitor mode %q: want off, drops or trace", mode)
}

type monVarsGet interface {
	Get(any) error
}

func getMonitor(flagsV, rateV, burstV monVarsGet) (MonitorConfig, error) {
	var flags, rate, burst uint32
	for _, v := range []struct {
		v   monVarsGet
		out *uint32
	}{{flagsV, &flags}, {rateV, &rate}, {burstV, &burst}} {
		if v.v == nil {
			return MonitorConfig{}, errors.New("monitor: the program is not loaded")
		}
		if err := v.v.Get(v.out); err != nil {
			return MonitorConfig{}, fmt.Errorf("monitor: %w", err)
		}
	}
	return MonitorConfig{Drops: flags&monDrops != 0, Trace: flags&monTrace != 0, Rate: rate, Burst: burst}, nil
}

// Monitor reads what the edge program writes monitor events for (its
// .bss: the last SetMonitor's, by this process or another).
func (e *Edge) Monitor() (MonitorConfig, error) {
	if e.objs.MonFlags == nil {
		return getMonitor(nil, nil, nil)
	}
	return getMonitor(e.objs.MonFlags, e.objs.MonRate, e.objs.MonBurst)
}

// Monitor reads what the agent programs write monitor events for.
func (a *Agent) Monitor() (MonitorConfig, error) {
	if a.objs.MonFlags == nil {
		return getMonitor(nil, nil, nil)
	}
	return getMonitor(a.objs.MonFlags, a.objs.MonRate, a.objs.MonBurst)
}

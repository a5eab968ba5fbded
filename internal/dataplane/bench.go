package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// Bench holds the measuring programs of bpf/bench.c.
type Bench struct {
	objs benchObjects
}

// LoadBench loads the floor, sink and generator programs.
func LoadBench() (*Bench, error) {
	spec, err := loadBench()
	if err != nil {
		return nil, err
	}
	b := &Bench{}
	if err := spec.LoadAndAssign(&b.objs, nil); err != nil {
		return nil, loadErr("bench", err)
	}
	return b, nil
}

func (b *Bench) Close() error { return b.objs.Close() }

// Floor swaps MACs and returns XDP_TX: the reference cost.
func (b *Bench) Floor() *ebpf.Program { return b.objs.XdpFloor }

// Sink counts and drops.
func (b *Bench) Sink() *ebpf.Program { return b.objs.XdpSink }

// Pass returns XDP_PASS.
func (b *Bench) Pass() *ebpf.Program { return b.objs.XdpPass }

// Gen is the live-frames traffic generator.
func (b *Bench) Gen() *ebpf.Program { return b.objs.XdpGen }

// SinkCount reads the sink's packet count summed over CPUs.
func (b *Bench) SinkCount() (Count, error) {
	var vals []benchStatEntry
	if err := b.objs.SinkCount.Lookup(uint32(0), &vals); err != nil {
		return Count{}, err
	}
	var c Count
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c, nil
}

// SetGen writes the generator template: every frame gets tmpl (at most 64
// bytes: Ethernet, then IPv4 without options or IPv6 without extension
// headers, then UDP with source port sportBase) and a source port cycling
// over flows from sportBase. A template with a UDP checksum (IPv6's is
// mandatory) gets it updated for each port; a zero one (IPv4's "none")
// stays zero.
func (b *Bench) SetGen(tmpl []byte, flows uint32, sportBase uint16) error {
	if len(tmpl) > 64 {
		return fmt.Errorf("generator template is %d bytes, at most 64", len(tmpl))
	}
	off, err := genUDPOffset(tmpl)
	if err != nil {
		return err
	}
	if got := binary.BigEndian.Uint16(tmpl[off:]); got != sportBase {
		return fmt.Errorf("generator template's UDP source port is %d, not the first flow's %d", got, sportBase)
	}
	var c benchGenConfig
	copy(c.Tmpl[:], tmpl)
	c.TmplLen = uint32(len(tmpl))
	c.Flows = flows
	c.SportBase = sportBase
	c.UdpOff = uint16(off)
	return b.objs.GenCfg.Update(uint32(0), &c, ebpf.UpdateAny)
}

// genUDPOffset is where the UDP header of a generator template starts:
// after an Ethernet and an IPv4 header without options (34) or an IPv6
// header without extension headers (54), whose whole UDP header the
// template must hold.
func genUDPOffset(tmpl []byte) (int, error) {
	if len(tmpl) < 14 {
		return 0, fmt.Errorf("generator template is %d bytes, shorter than an Ethernet header", len(tmpl))
	}
	var off int
	switch et := binary.BigEndian.Uint16(tmpl[12:]); et {
	case 0x0800:
		if len(tmpl) < 34 || tmpl[14] != 0x45 || tmpl[14+9] != 17 {
			return 0, errors.New("generator template: not IPv4 without options carrying UDP")
		}
		off = 34
	case 0x86dd:
		if len(tmpl) < 54 || tmpl[14]>>4 != 6 || tmpl[14+6] != 17 {
			return 0, errors.New("generator template: not IPv6 carrying UDP (no extension headers)")
		}
		off = 54
	default:
		return 0, fmt.Errorf("generator template: ethertype %#04x, not IPv4 or IPv6", et)
	}
	if len(tmpl) < off+8 {
		return 0, fmt.Errorf("generator template is %d bytes, its UDP header ends at %d", len(tmpl), off+8)
	}
	return off, nil
}

// CaptureNext asks the sink to copy the next frame it counts (its first
// 128 bytes); Captured returns it.
func (b *Bench) CaptureNext() error {
	var c benchSinkCap
	c.Want = 1
	return b.objs.SinkCap.Update(uint32(0), &c, ebpf.UpdateAny)
}

// Captured is the frame the sink copied since CaptureNext (at most its
// first 128 bytes) and its whole length, or nil if it has counted none
// since.
func (b *Bench) Captured() (frame []byte, length int, err error) {
	var c benchSinkCap
	if err := b.objs.SinkCap.Lookup(uint32(0), &c); err != nil {
		return nil, 0, err
	}
	if c.Want != 0 || c.Len == 0 {
		return nil, 0, nil
	}
	n := min(int(c.Len), len(c.Data))
	return append([]byte(nil), c.Data[:n]...), int(c.Len), nil
}

// FlowHash runs flow_hash4 in the kernel (for tests of internal/flowhash).
func (b *Bench) FlowHash() *ebpf.Program { return b.objs.XdpFlowhash }

// SetHashSeed sets the seed xdp_flowhash uses.
func (b *Bench) SetHashSeed(seed uint32) error {
	return b.objs.HashSeed.Update(uint32(0), seed, ebpf.UpdateAny)
}

// Restore is xdp_restore: the per-repeat restore alone (see
// bpf/lib/benchmode.h).
func (b *Bench) Restore() *ebpf.Program { return b.objs.XdpRestore }

// BareEncap pushes a constant NVGRE header stack: the encapsulation floor.
func (b *Bench) BareEncap() *ebpf.Program { return b.objs.XdpBareEncap }

// SetBenchFrame sets the frame the restore puts back before every repeat.
func (b *Bench) SetBenchFrame(frame []byte) error { return setBenchFrame(b.objs.BenchFrame, frame) }

// BenchFrameMin is the shortest frame the bench programs accept.
const BenchFrameMin = 128

func setBenchFrame(m *ebpf.Map, frame []byte) error {
	if len(frame) < BenchFrameMin {
		return fmt.Errorf("bench frame is %d bytes, at least %d needed", len(frame), BenchFrameMin)
	}
	var v struct {
		Data [BenchFrameMin]byte
		Len  uint32
		Pad  uint32
	}
	copy(v.Data[:], frame)
	v.Len = uint32(len(frame))
	return m.Update(uint32(0), &v, ebpf.UpdateAny)
}

// Adjust2 grows and shrinks the head by 42 bytes (see bench.c).
func (b *Bench) Adjust2() *ebpf.Program { return b.objs.XdpAdjust2 }

// Fwd rewrites MACs and redirects everything to one interface (see
// SetFwd): the simplest XDP forwarder.
func (b *Bench) Fwd() *ebpf.Program { return b.objs.XdpFwd }

// SetFwd points xdp_fwd at an interface and next hop.
func (b *Bench) SetFwd(ifindex int, src, dst net.HardwareAddr) error {
	var c benchFwdConfig
	c.Ifindex = uint32(ifindex)
	copy(c.Smac[:], src)
	copy(c.Dmac[:], dst)
	return b.objs.FwdCfg.Update(uint32(0), &c, ebpf.UpdateAny)
}

// Jiffies reads the kernel's jiffies.
func (b *Bench) Jiffies() (uint64, error) {
	_, out, err := b.objs.XdpJiffies.Test(make([]byte, 64))
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(out[:8]), nil
}

// MeasureHZ returns the kernel's CONFIG_HZ (jiffies per second), read off
// bpf_jiffies64 200 ms apart and rounded to the usual values.
func (b *Bench) MeasureHZ() (uint32, error) {
	frame := make([]byte, 64)
	read := func() (uint64, error) {
		_, out, err := b.objs.XdpJiffies.Test(frame)
		if err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(out[:8]), nil
	}
	j0, err := read()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(200 * time.Millisecond)
	j1, err := read()
	if err != nil {
		return 0, err
	}
	hz := float64(j1-j0) / time.Since(t0).Seconds()
	best := uint32(100)
	for _, c := range []uint32{100, 250, 300, 1000} {
		if math.Abs(hz-float64(c)) < math.Abs(hz-float64(best)) {
			best = c
		}
	}
	return best, nil
}

// Calls4 makes four calls of a function that is not inlined: with Pass,
// it gives the cost of one call and return on this CPU.
func (b *Bench) Calls4() *ebpf.Program { return b.objs.XdpCalls4 }

// Chain is xdp_chain: restore the frame (SetBenchFrame), give the run its
// own client when SetVary is on, then tail-call the target (SetChainTarget).
func (b *Bench) Chain() *ebpf.Program { return b.objs.XdpChain }

// SetChainTarget makes xdp_chain tail-call prog: an XDP program of this or
// of an earlier version's object.
func (b *Bench) SetChainTarget(prog *ebpf.Program) error {
	if err := b.objs.BenchTarget.Update(uint32(0), prog, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bench_target: %w", err)
	}
	return nil
}

// SetVary turns the per-run client of xdp_chain on or off and restarts its
// run counter on every CPU: run n gets VaryFlow(base, n).
func (b *Bench) SetVary(on bool) error {
	zero := make([]uint64, ebpf.MustPossibleCPU())
	if err := b.objs.BenchVarySeq.Update(uint32(0), zero, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bench_vary_seq: %w", err)
	}
	var v benchBenchVary
	if on {
		v.On = 1
	}
	return b.objs.BenchVaryCfg.Update(uint32(0), &v, ebpf.UpdateAny)
}

// VaryRuns is the number of runs xdp_chain has counted since SetVary,
// over all CPUs.
func (b *Bench) VaryRuns() (uint64, error) {
	var vals []uint64
	if err := b.objs.BenchVarySeq.Lookup(uint32(0), &vals); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range vals {
		n += v
	}
	return n, nil
}

// VaryFlows is how many distinct clients xdp_chain's counter gives.
const VaryFlows = 256 * 64512

// VaryFlow is the client of run n of xdp_chain for a frame from base: the
// last byte of the address and the source port (bpf/bench.c), for an
// IPv4 or an IPv6 base.
func VaryFlow(base netip.Addr, n uint32) (netip.Addr, uint16) {
	port := uint16(1024 + (n>>8)%64512)
	if base.Is6() {
		a := base.As16()
		a[15] = byte(n)
		return netip.AddrFrom16(a), port
	}
	a := base.As4()
	a[3] = byte(n)
	return netip.AddrFrom4(a), port
}

// ct6Key is lb_conns6's key of a TCP or UDP flow.
func ct6Key(src, dst netip.Addr, sport, dport uint16, proto uint8) edgeCtKey6 {
	s, _, _ := addrTo(src)
	d, _, _ := addrTo(dst)
	return edgeCtKey6{Src: s, Dst: d, Sport: be16(sport), Dport: be16(dport), Proto: proto}
}

// DeleteVaryConns6 is DeleteVaryConns for IPv6 flows (lb_conns6).
func (e *Edge) DeleteVaryConns6(base, vip netip.Addr, vport uint16, n uint32) (int, error) {
	if !base.Is6() || !vip.Is6() {
		return 0, fmt.Errorf("DeleteVaryConns6: %v -> %v: not IPv6", base, vip)
	}
	deleted := 0
	for i := uint32(0); i < n; i++ {
		c, p := VaryFlow(base, i)
		k := ct6Key(c, vip, p, vport, ProtoTCP)
		if err := e.objs.LbConns6.Delete(&k); err == nil {
			deleted++
		}
	}
	return deleted, nil
}

// FillFlow6 is the client side of the i-th flow FillConns6 writes:
// clients from 2001:db8:fe::/64 (the last two bytes i / 60000), ports
// from 1024.
func FillFlow6(i uint32) (netip.Addr, uint16) {
	a := netip.MustParseAddr("2001:db8:fe::").As16()
	binary.BigEndian.PutUint16(a[14:], uint16(i/60000))
	return netip.AddrFrom16(a), uint16(1024 + i%60000)
}

// FillConns6 is FillConns for an IPv6 VIP (lb_conns6): n established
// flows (FillFlow6) to vip:vport, all going to backend (an IPv6 VIP's
// backends are encap ones).
func (e *Edge) FillConns6(n uint32, vip netip.Addr, vport uint16, backend uint16, now uint64) error {
	if !vip.Is6() {
		return fmt.Errorf("FillConns6: VIP %v is not IPv6", vip)
	}
	const chunk = 65536
	keys := make([]edgeCtKey6, 0, chunk)
	vals := make([]edgeCtEntry, 0, chunk)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := e.objs.LbConns6.BatchUpdate(keys, vals, nil)
		keys, vals = keys[:0], vals[:0]
		return err
	}
	for i := uint32(0); i < n; i++ {
		c, p := FillFlow6(i)
		keys = append(keys, ct6Key(c, vip, p, vport, ProtoTCP))
		vals = append(vals, edgeCtEntry{Backend: backend, Last: uint32(now), Gen: 1, State: 2})
		if len(keys) == chunk {
			if err := flush(); err != nil {
				return fmt.Errorf("fill IPv6 connection table: %w", err)
			}
		}
	}
	return flush()
}

// ConnCount6 counts lb_conns6's entries (a full walk).
func (e *Edge) ConnCount6() (int, error) {
	var k edgeCtKey6
	var v edgeCtEntry
	n := 0
	it := e.objs.LbConns6.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// DeleteVaryConns removes the connection entries runs 0..n-1 of
// xdp_chain created for TCP flows from base to vip:vport, and returns how
// many there were: the table is back to what it held before.
func (e *Edge) DeleteVaryConns(base, vip netip.Addr, vport uint16, n uint32) (int, error) {
	const chunk = 65536
	keys := make([]edgeCtKey, 0, chunk)
	deleted := 0
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		// BatchDelete stops at the first key it does not find: delete
		// one by one, counting what was there.
		for i := range keys {
			if err := e.objs.LbConns.Delete(&keys[i]); err == nil {
				deleted++
			}
		}
		keys = keys[:0]
		return nil
	}
	for i := uint32(0); i < n; i++ {
		c, p := VaryFlow(base, i)
		keys = append(keys, edgeCtKey{Src: ip4word(c), Dst: ip4word(vip), Sport: be16(p), Dport: be16(vport), Proto: ProtoTCP})
		if len(keys) == chunk {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	return deleted, flush()
}

// ConnCount counts the connection table's entries (a full walk).
func (e *Edge) ConnCount() (int, error) {
	var k edgeCtKey
	var v edgeCtEntry
	n := 0
	it := e.objs.LbConns.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}

// DeleteFlowOf removes the connection entry of the flow an Ethernet +
// option-less IPv4 (lb_conns) or extension-less IPv6 (lb_conns6) +
// TCP/UDP frame belongs to, if there is one.
func (e *Edge) DeleteFlowOf(frame []byte) error {
	if len(frame) >= 58 && frame[14]>>4 == 6 {
		// IPv6 without extension headers: lb_conns6.
		src, _ := netip.AddrFromSlice(frame[22:38])
		dst, _ := netip.AddrFromSlice(frame[38:54])
		k := ct6Key(src, dst, binary.BigEndian.Uint16(frame[54:56]), binary.BigEndian.Uint16(frame[56:58]), frame[20])
		if err := e.objs.LbConns6.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		return nil
	}
	if len(frame) < 38 || frame[14]>>4 != 4 || frame[14]&0xf != 5 {
		return fmt.Errorf("not an option-less IPv4 or extension-less IPv6 frame")
	}
	k := edgeCtKey{
		Src: binary.LittleEndian.Uint32(frame[26:30]), Dst: binary.LittleEndian.Uint32(frame[30:34]),
		Sport: binary.LittleEndian.Uint16(frame[34:36]), Dport: binary.LittleEndian.Uint16(frame[36:38]), Proto: frame[23],
	}
	if err := e.objs.LbConns.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
)

// Bandwidth is one EIP's bandwidth limit (eip_bw, bpf/lib/bw.h): on the
// edge it limits Internet -> EIP, on the agent guest -> Internet. Bytes are
// IP bytes (header and payload, as the EIP counters count them).
type Bandwidth struct {
	Rate  uint64 `json:"rate"`  // bits per second; 0: no limit
	Burst uint32 `json:"burst"` // bytes the bucket holds; 0: DefaultBandwidthBurst
}

// BandwidthDrops are what one EIP's limit dropped, since it was first set.
type BandwidthDrops struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Bounds of a bandwidth limit. Below MinBandwidthBurst a full-size packet
// could never conform; the rate bounds keep the fixed-point cost per byte
// (20 fraction bits) exact to better than 0.01 % and its products in 64 bits.
const (
	MinBandwidthRate  = 8_000           // bits/s (1 kB/s)
	MaxBandwidthRate  = 400_000_000_000 // bits/s (400 Gbit/s)
	MinBandwidthBurst = 1_500           // bytes: one full-size packet
	// BandwidthMax is how many EIPs can have a limit on one node (EIP_BW_MAX).
	BandwidthMax = 65536
)

// DefaultBandwidthBurst is the burst of a limit set with Burst 0: a tenth
// of a second's worth of bytes, at least ten full-size packets.
func DefaultBandwidthBurst(rate uint64) uint32 {
	b := rate / 8 / 10
	if b < 15_000 {
		b = 15_000
	}
	if b > 1<<32-1 {
		b = 1<<32 - 1
	}
	return uint32(b)
}

// Normal fills in the default burst (and clears the burst of no limit), so
// equal settings compare equal.
func (b Bandwidth) Normal() Bandwidth {
	if b.Rate == 0 {
		return Bandwidth{}
	}
	if b.Burst == 0 {
		b.Burst = DefaultBandwidthBurst(b.Rate)
	}
	return b
}

// BandwidthMaps programs per-EIP bandwidth limits (the Edge, the Agent,
// FakeBandwidth and FaultyBandwidth implement it). A limit takes effect at
// once; an EIP without one costs the data plane one flag test.
type BandwidthMaps interface {
	// SetEIPBandwidth sets eip's limit: rate in bits per second, burst in
	// bytes (0: the default). A zero rate removes the limit. The bucket's
	// state and the drop counters carry over a change of setting.
	SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error
	// EIPBandwidths lists the programmed limits (normalised).
	EIPBandwidths() (map[netip.Addr]Bandwidth, error)
	// EIPBandwidthDrops reads what eip's limit dropped (false: no limit).
	EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error)
}

var (
	_ BandwidthMaps = (*Edge)(nil)
	_ BandwidthMaps = (*Agent)(nil)
	_ BandwidthMaps = (*FakeBandwidth)(nil)
	_ BandwidthMaps = FaultyBandwidth{}
)

// errNoBandwidth: the loaded objects predate eip_bw (an older program,
// e.g. one an upgrade test loads).
var errNoBandwidth = errors.New("the loaded program has no eip_bw map")

// checkBandwidth validates a limit, naming the EIP and the field at fault.
func checkBandwidth(eip netip.Addr, b Bandwidth) error {
	if !eip.Is4() {
		return fmt.Errorf("bandwidth of %v: only IPv4 EIPs are supported", eip)
	}
	if b.Rate < MinBandwidthRate || b.Rate > MaxBandwidthRate {
		return fmt.Errorf("bandwidth of %v: rate %d bit/s: must be from %d to %d", eip, b.Rate, MinBandwidthRate, MaxBandwidthRate)
	}
	if b.Burst < MinBandwidthBurst {
		return fmt.Errorf("bandwidth of %v: burst %d bytes: at least %d (one full-size packet)", eip, b.Burst, MinBandwidthBurst)
	}
	return nil
}

// bwTo turns a normalised, valid limit into the map's value: the cost of
// a byte in ns with 20 fraction bits, rounded up (so the bucket never runs
// faster than the rate), and the tolerance tau, the burst's worth of ns.
func bwTo(b Bandwidth) agentEipBw {
	q := (8_000_000_000<<20 + b.Rate - 1) / b.Rate
	return agentEipBw{NsPerByteQ20: q, Tau: uint64(b.Burst) * q >> 20, Rate: b.Rate, Burst: b.Burst}
}

// bwPut writes eip's limit into m (the edge's or the agent's eip_bw),
// keeping its state and counters; created reports a new entry (its flag
// must be set). The TAT read back may lose the charges of the packets in
// between (one write's worth, only when a setting changes).
func bwPut(m *ebpf.Map, eip netip.Addr, b Bandwidth) (created bool, err error) {
	if m == nil {
		return false, fmt.Errorf("bandwidth of %v: %w", eip, errNoBandwidth)
	}
	v := bwTo(b)
	k := ip4word(eip)
	var old agentEipBw
	switch err := m.Lookup(k, &old); {
	case err == nil:
		if old.NsPerByteQ20 == v.NsPerByteQ20 && old.Tau == v.Tau && old.Rate == v.Rate && old.Burst == v.Burst {
			return false, nil
		}
		v.Tat, v.DropPackets, v.DropBytes = old.Tat, old.DropPackets, old.DropBytes
	case errors.Is(err, ebpf.ErrKeyNotExist):
		created = true
	default:
		return false, fmt.Errorf("read bandwidth of %v: %w", eip, err)
	}
	if err := m.Update(k, &v, ebpf.UpdateAny); err != nil {
		return false, fmt.Errorf("write bandwidth of %v: %w", eip, err)
	}
	return created, nil
}

// bwDelete removes eip's limit from m (none: false, nil).
func bwDelete(m *ebpf.Map, eip netip.Addr) (bool, error) {
	if m == nil {
		return false, nil
	}
	if err := m.Delete(ip4word(eip)); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("delete bandwidth of %v: %w", eip, err)
	}
	return true, nil
}

func bwList(m *ebpf.Map) (map[netip.Addr]Bandwidth, error) {
	out := map[netip.Addr]Bandwidth{}
	if m == nil {
		return out, nil
	}
	var k uint32
	var v agentEipBw
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[netip.AddrFrom4(le4(k))] = Bandwidth{Rate: v.Rate, Burst: v.Burst}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list bandwidth limits: %w", err)
	}
	return out, nil
}

func bwDrops(m *ebpf.Map, eip netip.Addr) (BandwidthDrops, bool, error) {
	if !eip.Is4() || m == nil {
		return BandwidthDrops{}, false, nil
	}
	var v agentEipBw
	if err := m.Lookup(ip4word(eip), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return BandwidthDrops{}, false, nil
		}
		return BandwidthDrops{}, false, fmt.Errorf("read bandwidth of %v: %w", eip, err)
	}
	return BandwidthDrops{Packets: v.DropPackets, Bytes: v.DropBytes}, true, nil
}

// SetEIPBandwidth sets the limit of Internet -> eip. A new or removed
// limit bumps the route generation, so the route cache learns the flag.
func (e *Edge) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) (err error) {
	b := Bandwidth{Rate: rate, Burst: burst}.Normal()
	if b.Rate == 0 {
		if !eip.Is4() {
			return nil
		}
		gone, err := bwDelete(e.objs.EipBw, eip)
		if err != nil || !gone {
			return err
		}
		return e.bumpRouteGen()
	}
	if err := checkBandwidth(eip, b); err != nil {
		return err
	}
	created, err := bwPut(e.objs.EipBw, eip, b)
	if err != nil || !created {
		return err
	}
	return e.bumpRouteGen()
}

// EIPBandwidths lists the edge's limits.
func (e *Edge) EIPBandwidths() (map[netip.Addr]Bandwidth, error) { return bwList(e.objs.EipBw) }

// EIPBandwidthDrops reads what eip's limit dropped on this edge.
func (e *Edge) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	return bwDrops(e.objs.EipBw, eip)
}

// agentFBw marks a guest whose EIP has a bandwidth limit (AGENT_F_BW).
const agentFBw = 0x2

// SetEIPBandwidth sets the limit of guest -> Internet through eip. The
// guest's entry carries the flag (set after the limit is written, cleared
// before it is removed; PutEIP keeps it), so other guests pay nothing.
func (a *Agent) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error {
	b := Bandwidth{Rate: rate, Burst: burst}.Normal()
	if b.Rate == 0 {
		if !eip.Is4() {
			return nil
		}
		if err := a.flagGuest(eip, false); err != nil {
			return err
		}
		_, err := bwDelete(a.objs.EipBw, eip)
		return err
	}
	if err := checkBandwidth(eip, b); err != nil {
		return err
	}
	if _, err := bwPut(a.objs.EipBw, eip, b); err != nil {
		return err
	}
	return a.flagGuest(eip, true)
}

// flagGuest sets or clears AGENT_F_BW on the guest eip is bound to (none
// bound: nothing to do; PutEIP sets it when the EIP comes).
func (a *Agent) flagGuest(eip netip.Addr, on bool) error {
	ek, err := keyOf(eip)
	if err != nil {
		return err
	}
	var e agentAgentEip
	if err := a.objs.AgentEips.Lookup(akey(ek), &e); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("bandwidth of %v: read EIP: %w", eip, err)
	}
	pk := akey(edgeEipKey{Addr: edgeIpAddr(e.PrivateAddr), Family: e.Family})
	var g agentAgentGuest
	if err := a.objs.AgentGuests.Lookup(pk, &g); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("bandwidth of %v: read guest: %w", eip, err)
	}
	if g.Eip != agentIpAddr(ek.Addr) {
		return nil
	}
	f := g.Flags &^ agentFBw
	if on {
		f |= agentFBw
	}
	if f == g.Flags {
		return nil
	}
	g.Flags = f
	if err := a.objs.AgentGuests.Update(pk, &g, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bandwidth of %v: write guest: %w", eip, err)
	}
	return nil
}

// hasBandwidth reports whether eip has a limit here (for PutEIP's flag).
func (a *Agent) hasBandwidth(eip netip.Addr) bool {
	if !eip.Is4() || a.objs.EipBw == nil {
		return false
	}
	var v agentEipBw
	return a.objs.EipBw.Lookup(ip4word(eip), &v) == nil
}

// EIPBandwidths lists the agent's limits.
func (a *Agent) EIPBandwidths() (map[netip.Addr]Bandwidth, error) { return bwList(a.objs.EipBw) }

// EIPBandwidthDrops reads what eip's limit dropped on this host.
func (a *Agent) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	return bwDrops(a.objs.EipBw, eip)
}

// FakeBandwidth is an in-memory BandwidthMaps for testing the bandwidth
// agent without a kernel. Drops holds what a test wants read back.
type FakeBandwidth struct {
	mu     sync.Mutex
	Limits map[netip.Addr]Bandwidth
	Drops  map[netip.Addr]BandwidthDrops
	// Capacity bounds the limits held (0: BandwidthMax).
	Capacity int
}

// SetEIPBandwidth records eip's limit, validated as the real maps do.
func (f *FakeBandwidth) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error {
	b := Bandwidth{Rate: rate, Burst: burst}.Normal()
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.Rate == 0 {
		delete(f.Limits, eip)
		return nil
	}
	if err := checkBandwidth(eip, b); err != nil {
		return err
	}
	if f.Limits == nil {
		f.Limits = map[netip.Addr]Bandwidth{}
	}
	c := f.Capacity
	if c == 0 {
		c = BandwidthMax
	}
	if _, ok := f.Limits[eip]; !ok && len(f.Limits) >= c {
		return fmt.Errorf("write bandwidth of %v: %w", eip, errors.New("map full"))
	}
	f.Limits[eip] = b
	return nil
}

// EIPBandwidths lists the recorded limits.
func (f *FakeBandwidth) EIPBandwidths() (map[netip.Addr]Bandwidth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.Limits), nil
}

// EIPBandwidthDrops reads Drops for an EIP with a limit.
func (f *FakeBandwidth) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.Limits[eip]; !ok {
		return BandwidthDrops{}, false, nil
	}
	return f.Drops[eip], true, nil
}

// FaultyBandwidth injects faults into a BandwidthMaps.
type FaultyBandwidth struct {
	BandwidthMaps
	F *Faults
}

func (f FaultyBandwidth) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error {
	return f.F.write("SetEIPBandwidth", func() error { return f.BandwidthMaps.SetEIPBandwidth(eip, rate, burst) })
}
func (f FaultyBandwidth) EIPBandwidths() (map[netip.Addr]Bandwidth, error) {
	if err := f.F.check("EIPBandwidths", false); err != nil {
		return nil, err
	}
	return f.BandwidthMaps.EIPBandwidths()
}
func (f FaultyBandwidth) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	if err := f.F.check("EIPBandwidthDrops", false); err != nil {
		return BandwidthDrops{}, false, err
	}
	return f.BandwidthMaps.EIPBandwidthDrops(eip)
}

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

// LockedBandwidth is m with every SetEIPBandwidth taken under mu. The
// roles pass their reconciler's mutex, so a limit write never runs between
// the reads and writes of a route or EIP update that share its slot
// (Edge.SetEIPBandwidth and Agent.SetEIPBandwidth say why).
func LockedBandwidth(mu sync.Locker, m BandwidthMaps) BandwidthMaps {
	return lockedBandwidth{mu, m}
}

type lockedBandwidth struct {
	mu sync.Locker
	BandwidthMaps
}

func (l lockedBandwidth) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.BandwidthMaps.SetEIPBandwidth(eip, rate, burst)
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
	if !bwAddrOK(eip) {
		return fmt.Errorf("bandwidth of %v: not an IPv4 or IPv6 EIP", eip)
	}
	return checkBandwidthRate(eip, b)
}

// bwAddrOK: whether eip can have a limit (IPv4, or IPv6 neither
// IPv4-mapped nor zoned).
func bwAddrOK(eip netip.Addr) bool {
	return eip.Is4() || plain6(eip)
}

// checkBandwidthRate checks a limit's rate and burst.
func checkBandwidthRate(eip netip.Addr, b Bandwidth) error {
	if b.Rate < MinBandwidthRate || b.Rate > MaxBandwidthRate {
		return fmt.Errorf("bandwidth of %v: rate %d bit/s: must be from %d to %d", eip, b.Rate, MinBandwidthRate, MaxBandwidthRate)
	}
	if b.Burst < MinBandwidthBurst {
		return fmt.Errorf("bandwidth of %v: burst %d bytes: at least %d (one full-size packet)", eip, b.Burst, MinBandwidthBurst)
	}
	return nil
}

// bwTo turns a normalised, valid limit into eip_bw's value: the cost of
// a byte in ns with 20 fraction bits, rounded up (so the bucket never runs
// faster than the rate), and the tolerance tau, the burst's worth of ns.
func bwTo(b Bandwidth) agentEipBw {
	q := (8_000_000_000<<20 + b.Rate - 1) / b.Rate
	return agentEipBw{NsPerByteQ20: q, Tau: uint64(b.Burst) * q >> 20, Rate: b.Rate, Burst: b.Burst}
}

// bwTables are one program's two bandwidth maps: eip_bw (address -> limit,
// what Go lists and what survives a slot change) and eip_bw_slots (stats
// slot -> bucket, what the packet path reads).
type bwTables struct {
	cfg, slots *ebpf.Map
}

// put writes eip's limit into eip_bw and, when the EIP has a stats slot
// here (slot, ok), copies it into the slot's bucket; created reports a new
// eip_bw entry (its flag must be set).
func (m bwTables) put(eip netip.Addr, b Bandwidth, slot uint32, ok bool) (created bool, err error) {
	if m.cfg == nil || m.slots == nil {
		return false, fmt.Errorf("bandwidth of %v: %w", eip, errNoBandwidth)
	}
	v := bwTo(b)
	k := ip4word(eip)
	var old agentEipBw
	switch err := m.cfg.Lookup(k, &old); {
	case err == nil:
	case errors.Is(err, ebpf.ErrKeyNotExist):
		created = true
	default:
		return false, fmt.Errorf("read bandwidth of %v: %w", eip, err)
	}
	if created || old != v {
		if err := m.cfg.Update(k, &v, ebpf.UpdateAny); err != nil {
			return false, fmt.Errorf("write bandwidth of %v: %w", eip, err)
		}
	}
	if ok {
		if err := m.place(eip, v, slot); err != nil {
			return false, err
		}
	}
	return created, nil
}

// place copies eip's limit v into the bucket of stats slot slot. The
// bucket's state and drop counters carry over when the slot already holds
// eip's bucket (a new setting; the TAT read back may lose the charges of
// the packets in between: one write's worth); a slot another EIP left
// starts empty (full burst, no drops). Nothing to write: no syscall.
func (m bwTables) place(eip netip.Addr, v agentEipBw, slot uint32) error {
	var cur agentEipBwSlot
	if err := m.slots.Lookup(slot, &cur); err != nil {
		return fmt.Errorf("bandwidth of %v: read bucket %d: %w", eip, slot, err)
	}
	next := agentEipBwSlot{NsPerByteQ20: v.NsPerByteQ20, Tau: v.Tau, Addr: ip4word(eip)}
	if cur.Addr == next.Addr {
		if cur.NsPerByteQ20 == next.NsPerByteQ20 && cur.Tau == next.Tau {
			return nil
		}
		next.Tat, next.DropPackets, next.DropBytes = cur.Tat, cur.DropPackets, cur.DropBytes
	}
	if err := m.slots.Update(slot, &next, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bandwidth of %v: write bucket %d: %w", eip, slot, err)
	}
	return nil
}

// delete removes eip's limit (none: false, nil) and empties its bucket in
// slot (when ok and the slot still holds it).
func (m bwTables) delete(eip netip.Addr, slot uint32, ok bool) (bool, error) {
	if m.cfg == nil {
		return false, nil
	}
	gone := true
	if err := m.cfg.Delete(ip4word(eip)); err != nil {
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, fmt.Errorf("delete bandwidth of %v: %w", eip, err)
		}
		gone = false
	}
	if ok && m.slots != nil {
		var cur agentEipBwSlot
		if err := m.slots.Lookup(slot, &cur); err != nil {
			return false, fmt.Errorf("bandwidth of %v: read bucket %d: %w", eip, slot, err)
		}
		if cur.Addr == ip4word(eip) {
			if err := m.slots.Update(slot, &agentEipBwSlot{}, ebpf.UpdateAny); err != nil {
				return false, fmt.Errorf("bandwidth of %v: clear bucket %d: %w", eip, slot, err)
			}
		}
	}
	return gone, nil
}

// limit reads eip's configured limit (false: none).
func (m bwTables) limit(eip netip.Addr) (agentEipBw, bool) {
	var v agentEipBw
	if !eip.Is4() || m.cfg == nil || m.slots == nil {
		return v, false
	}
	return v, m.cfg.Lookup(ip4word(eip), &v) == nil
}

func (m bwTables) list() (map[netip.Addr]Bandwidth, error) {
	out := map[netip.Addr]Bandwidth{}
	if m.cfg == nil {
		return out, nil
	}
	var k uint32
	var v agentEipBw
	it := m.cfg.Iterate()
	for it.Next(&k, &v) {
		out[netip.AddrFrom4(le4(k))] = Bandwidth{Rate: v.Rate, Burst: v.Burst}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list bandwidth limits: %w", err)
	}
	return out, nil
}

// drops reads eip's bucket in slot (ok: the EIP has a slot here).
func (m bwTables) drops(eip netip.Addr, slot uint32, ok bool) (BandwidthDrops, bool, error) {
	if _, has := m.limit(eip); !has {
		return BandwidthDrops{}, false, nil
	}
	if !ok {
		return BandwidthDrops{}, true, nil
	}
	var v agentEipBwSlot
	if err := m.slots.Lookup(slot, &v); err != nil {
		return BandwidthDrops{}, false, fmt.Errorf("bandwidth of %v: read bucket %d: %w", eip, slot, err)
	}
	if v.Addr != ip4word(eip) {
		return BandwidthDrops{}, true, nil
	}
	return BandwidthDrops{Packets: v.DropPackets, Bytes: v.DropBytes}, true, nil
}

func (e *Edge) bw() bwTables { return bwTables{e.objs.EipBw, e.objs.EipBwSlots} }

// bwSlot is the stats slot of eip's route (false: no route).
func (e *Edge) bwSlot(eip netip.Addr) (uint32, bool) {
	r, ok, err := e.Route(eip)
	if err != nil || !ok {
		return 0, false
	}
	return r.StatsIdx, true
}

// SetEIPBandwidth sets the limit of Internet -> eip. A new or removed
// limit bumps the route generation, so the route cache learns the flag.
// The bucket is the one of eip's route's stats slot; PutRoutes copies the
// limit into the slot of a route written later. Call it from the
// goroutine that calls PutRoutes: a route moved to another slot between
// the slot's lookup here and the copy would miss the limit until it is
// written again.
func (e *Edge) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) (err error) {
	b := Bandwidth{Rate: rate, Burst: burst}.Normal()
	if eip.Is6() {
		return e.setBandwidth6(eip, b)
	}
	slot, ok := e.bwSlot(eip)
	if b.Rate == 0 {
		if !eip.Is4() {
			return nil
		}
		gone, err := e.bw().delete(eip, slot, ok)
		if err != nil || !gone {
			return err
		}
		return e.bumpRouteGen()
	}
	if err := checkBandwidth(eip, b); err != nil {
		return err
	}
	created, err := e.bw().put(eip, b, slot, ok)
	if err != nil || !created {
		return err
	}
	return e.bumpRouteGen()
}

// placeBandwidths copies the limits of the addresses in routes into their
// routes' stats slots (PutRoutes: a route's slot may be new, or reused
// from another EIP). Up to bwPlaceLookups routes: one eip_bw lookup each;
// more: one walk over eip_bw.
func (e *Edge) placeBandwidths(routes map[netip.Addr]Route) error {
	m := e.bw()
	if m.cfg == nil || m.slots == nil || len(routes) == 0 {
		return nil
	}
	if len(routes) <= bwPlaceLookups {
		for a, r := range routes {
			if v, ok := m.limit(a); ok {
				if err := m.place(a, v, r.StatsIdx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var k uint32
	var v agentEipBw
	var todo []netip.Addr
	var vals []agentEipBw
	it := m.cfg.Iterate()
	for it.Next(&k, &v) {
		a := netip.AddrFrom4(le4(k))
		if _, ok := routes[a]; ok {
			todo, vals = append(todo, a), append(vals, v)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list bandwidth limits: %w", err)
	}
	for i, a := range todo {
		if err := m.place(a, vals[i], routes[a].StatsIdx); err != nil {
			return err
		}
	}
	return nil
}

// bwPlaceLookups: above this many routes in one PutRoutes, walking eip_bw
// (at most BandwidthMax entries) beats a lookup per route.
const bwPlaceLookups = 1024

// bw6Table is one program's eip_bw6 (the edge's: Internet -> IPv6 EIP,
// the agent's: guest -> Internet from an IPv6 EIP): IPv6 EIP -> its limit
// and bucket (bw6_over, bw6_over_eip). Both programs' entries have the
// layout of edgeEipBw6.
type bw6Table struct{ m *ebpf.Map }

// set sets (or, rate 0, removes) an IPv6 EIP's limit: its eip_bw6 entry
// holds the bucket too, whose state and drop counters carry over a new
// setting. flip: an entry was created or removed.
func (t bw6Table) set(eip netip.Addr, b Bandwidth) (flip bool, err error) {
	m := t.m
	if !bwAddrOK(eip) {
		return false, fmt.Errorf("bandwidth of %v: not an IPv4 or IPv6 EIP", eip)
	}
	if m == nil {
		if b.Rate == 0 {
			return false, nil
		}
		return false, fmt.Errorf("bandwidth of %v: the loaded program has no eip_bw6 map", eip)
	}
	k, _, _ := addrTo(eip)
	var old edgeEipBw6
	exists := true
	if err := m.Lookup(&k, &old); err != nil {
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, fmt.Errorf("read bandwidth of %v: %w", eip, err)
		}
		exists = false
	}
	if b.Rate == 0 {
		if !exists {
			return false, nil
		}
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, fmt.Errorf("delete bandwidth of %v: %w", eip, err)
		}
		return true, nil
	}
	if err := checkBandwidthRate(eip, b); err != nil {
		return false, err
	}
	c := bwTo(b)
	v := edgeEipBw6{B: edgeEipBwSlot{NsPerByteQ20: c.NsPerByteQ20, Tau: c.Tau}, Rate: c.Rate, Burst: c.Burst}
	if exists {
		if old.B.NsPerByteQ20 == v.B.NsPerByteQ20 && old.B.Tau == v.B.Tau && old.Rate == v.Rate && old.Burst == v.Burst {
			return false, nil
		}
		v.B.Tat, v.B.DropPackets, v.B.DropBytes = old.B.Tat, old.B.DropPackets, old.B.DropBytes
	}
	if err := m.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return false, fmt.Errorf("write bandwidth of %v: %w", eip, err)
	}
	return !exists, nil
}

// has reports whether eip has a limit here.
func (t bw6Table) has(eip netip.Addr) bool {
	if t.m == nil || !plain6(eip) {
		return false
	}
	k, _, _ := addrTo(eip)
	var v edgeEipBw6
	return t.m.Lookup(&k, &v) == nil
}

// list adds the limits to out.
func (t bw6Table) list(out map[netip.Addr]Bandwidth) error {
	if t.m == nil {
		return nil
	}
	var k edgeIpAddr
	var v edgeEipBw6
	it := t.m.Iterate()
	for it.Next(&k, &v) {
		out[addrFrom(k, 10)] = Bandwidth{Rate: v.Rate, Burst: v.Burst}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list IPv6 bandwidth limits: %w", err)
	}
	return nil
}

// drops reads what eip's limit dropped since it was set (false: none).
func (t bw6Table) drops(eip netip.Addr) (BandwidthDrops, bool, error) {
	if t.m == nil || !bwAddrOK(eip) {
		return BandwidthDrops{}, false, nil
	}
	k, _, _ := addrTo(eip)
	var v edgeEipBw6
	if err := t.m.Lookup(&k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return BandwidthDrops{}, false, nil
		}
		return BandwidthDrops{}, false, fmt.Errorf("read bandwidth of %v: %w", eip, err)
	}
	return BandwidthDrops{Packets: v.B.DropPackets, Bytes: v.B.DropBytes}, true, nil
}

// setBandwidth6 sets (or, rate 0, removes) an IPv6 EIP's limit. A new or
// removed entry bumps the route generation (ROUTE_F_BW in the IPv6 route
// cache).
func (e *Edge) setBandwidth6(eip netip.Addr, b Bandwidth) error {
	flip, err := bw6Table{e.objs.EipBw6}.set(eip, b)
	if err != nil || !flip {
		return err
	}
	return e.bumpRouteGen()
}

// EIPBandwidths lists the edge's limits, of both families.
func (e *Edge) EIPBandwidths() (map[netip.Addr]Bandwidth, error) {
	out, err := e.bw().list()
	if err != nil {
		return nil, err
	}
	if err := (bw6Table{e.objs.EipBw6}).list(out); err != nil {
		return nil, err
	}
	return out, nil
}

// EIPBandwidthDrops reads what eip's limit dropped on this edge, since the
// EIP took its route's stats slot (an IPv6 EIP: since its limit was set).
func (e *Edge) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	if eip.Is6() {
		return bw6Table{e.objs.EipBw6}.drops(eip)
	}
	slot, ok := e.bwSlot(eip)
	return e.bw().drops(eip, slot, ok)
}

// agentFBw marks a guest whose EIP has a bandwidth limit (AGENT_F_BW).
const agentFBw = 0x2

func (a *Agent) bw() bwTables { return bwTables{a.objs.EipBw, a.objs.EipBwSlots} }

// bwSlot is eip's stats slot here (false: the EIP is not bound here).
func (a *Agent) bwSlot(eip netip.Addr) (uint32, bool) {
	ek, err := agentKeyOf(eip)
	if err != nil {
		return 0, false
	}
	var e agentAgentEip
	if err := a.objs.AgentEips.Lookup(akey(ek), &e); err != nil {
		return 0, false
	}
	return e.StatsIdx, true
}

// SetEIPBandwidth sets the limit of guest -> Internet through eip. The
// guest's entry carries the flag (set after the limit is written, cleared
// before it is removed; PutEIP keeps it, and copies the limit into the
// EIP's stats slot), so other guests pay nothing. An IPv6 EIP's limit and
// bucket are its eip_bw6 entry (bw6_over_eip), no stats slot.
func (a *Agent) SetEIPBandwidth(eip netip.Addr, rate uint64, burst uint32) error {
	b := Bandwidth{Rate: rate, Burst: burst}.Normal()
	if eip.Is6() {
		return a.setBandwidth6(eip, b)
	}
	slot, ok := a.bwSlot(eip)
	if b.Rate == 0 {
		if !eip.Is4() {
			return nil
		}
		if err := a.flagGuest(eip, false); err != nil {
			return err
		}
		_, err := a.bw().delete(eip, slot, ok)
		return err
	}
	if err := checkBandwidth(eip, b); err != nil {
		return err
	}
	if _, err := a.bw().put(eip, b, slot, ok); err != nil {
		return err
	}
	return a.flagGuest(eip, true)
}

// setBandwidth6 is SetEIPBandwidth for an IPv6 EIP.
func (a *Agent) setBandwidth6(eip netip.Addr, b Bandwidth) error {
	t := bw6Table{a.objs.EipBw6}
	if b.Rate == 0 {
		if !bwAddrOK(eip) {
			return nil
		}
		if err := a.flagGuest(eip, false); err != nil {
			return err
		}
		_, err := t.set(eip, b)
		return err
	}
	if _, err := t.set(eip, b); err != nil {
		return err
	}
	return a.flagGuest(eip, true)
}

// flagGuest sets or clears AGENT_F_BW on the guest eip is bound to (none
// bound: nothing to do; PutEIP sets it when the EIP comes).
func (a *Agent) flagGuest(eip netip.Addr, on bool) error {
	ek, err := agentKeyOf(eip)
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

// placeBandwidth copies eip's limit, if any, into stats slot slot (for
// PutEIP, before it writes the guest's flag): whether it has one.
func (a *Agent) placeBandwidth(eip netip.Addr, slot uint32) (bool, error) {
	if eip.Is6() {
		return bw6Table{a.objs.EipBw6}.has(eip), nil
	}
	m := a.bw()
	v, ok := m.limit(eip)
	if !ok {
		return false, nil
	}
	return true, m.place(eip, v, slot)
}

// EIPBandwidths lists the agent's limits, of both families.
func (a *Agent) EIPBandwidths() (map[netip.Addr]Bandwidth, error) {
	out, err := a.bw().list()
	if err != nil {
		return nil, err
	}
	if err := (bw6Table{a.objs.EipBw6}).list(out); err != nil {
		return nil, err
	}
	return out, nil
}

// EIPBandwidthDrops reads what eip's limit dropped on this host, since the
// EIP took its stats slot (an IPv6 EIP: since its limit was set).
func (a *Agent) EIPBandwidthDrops(eip netip.Addr) (BandwidthDrops, bool, error) {
	if eip.Is6() {
		return bw6Table{a.objs.EipBw6}.drops(eip)
	}
	slot, ok := a.bwSlot(eip)
	return a.bw().drops(eip, slot, ok)
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

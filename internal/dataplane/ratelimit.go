package dataplane

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Limits are the rate limits of one EIP or VIP (edge_limits,
// bpf/lib/ratelimit.h): packets per second from any one source, and SYNs
// (without ACK) per second to the address from all sources together. A
// zero rate turns that limit off; a zero burst is one second's worth.
type Limits struct {
	SourcePPS   uint32
	SourceBurst uint32
	SYNRate     uint32
	SYNBurst    uint32
}

// IsZero reports whether no limit is on.
func (l Limits) IsZero() bool { return l.SourcePPS == 0 && l.SYNRate == 0 }

// Normal fills in the default bursts (one second's worth) and clears
// the burst of a limit that is off, so equal settings compare equal.
func (l Limits) Normal() Limits {
	if l.SourcePPS == 0 {
		l.SourceBurst = 0
	} else if l.SourceBurst == 0 {
		l.SourceBurst = l.SourcePPS
	}
	if l.SYNRate == 0 {
		l.SYNBurst = 0
	} else if l.SYNBurst == 0 {
		l.SYNBurst = l.SYNRate
	}
	return l
}

// MaxLimitRate bounds a configurable rate (packets or SYNs per second):
// the bucket's interval, 1e9 / rate ns, keeps 1 % accuracy up to it.
const MaxLimitRate = 10_000_000

// LimitsMax is how many addresses edge_limits holds (RL_DST_MAX): a plan
// with more is refused before any write (internal/edge syncLimits).
const LimitsMax = 65536

// LimitCounters are what one address's limits dropped, summed over CPUs.
type LimitCounters struct {
	DroppedSource uint64 `json:"dropped_source"`
	DroppedSYN    uint64 `json:"dropped_syn"`
}

// LimitMaps programs the per-address rate limits (the Edge, the FakeEdge
// and FaultyLimits implement it). A write takes effect at once: it bumps
// the route generation, so the route cache learns which addresses have
// limits (an address without them costs the fast path one flag test).
type LimitMaps interface {
	// PutLimits sets an address's limits (a zero Limits deletes them).
	PutLimits(netip.Addr, Limits) error
	DeleteLimits(netip.Addr) error
	// Limits lists the programmed limits (normalised).
	Limits() (map[netip.Addr]Limits, error)
}

// limitsTo turns limits into the map's value (GCRA intervals in ns).
func limitsTo(l Limits) (edgeRlDst, error) {
	l = l.Normal()
	var v edgeRlDst
	if l.SourcePPS > MaxLimitRate || l.SYNRate > MaxLimitRate {
		return v, fmt.Errorf("rate limits %d/%d per second: at most %d", l.SourcePPS, l.SYNRate, MaxLimitRate)
	}
	if l.SourcePPS > 0 {
		v.SrcNs = 1e9 / uint64(l.SourcePPS)
		v.SrcTau = uint64(l.SourceBurst-1) * v.SrcNs
	}
	if l.SYNRate > 0 {
		v.SynNs = 1e9 / uint64(l.SYNRate)
		v.SynTau = uint64(l.SYNBurst-1) * v.SynNs
	}
	v.SrcPps, v.SrcBurst, v.SynRate, v.SynBurst = l.SourcePPS, l.SourceBurst, l.SYNRate, l.SYNBurst
	return v, nil
}

// limitsMap is the map of a's family and a's key in it: edge_limits
// (IPv4, a 32-bit word) or edge_limits6 (IPv6, struct ip_addr; the IPv6
// EIPs' per-source buckets are keyed by the source's /64,
// bpf/lib/ratelimit.h rl6_check).
func (e *Edge) limitsMap(a netip.Addr) (*ebpf.Map, any, error) {
	switch {
	case a.Is4():
		return e.objs.EdgeLimits, ip4word(a), nil
	case plain6(a):
		if e.objs.EdgeLimits6 == nil {
			return nil, nil, fmt.Errorf("limits of %v: this program has no IPv6 limits (edge_limits6)", a)
		}
		ip, _, _ := addrTo(a)
		return e.objs.EdgeLimits6, &ip, nil
	}
	return nil, nil, fmt.Errorf("limits of %v: not an IPv4 or IPv6 address", a)
}

// PutLimits writes an address's limits; the drop counters carry over, and
// so does the SYN guard's state while its setting stays.
func (e *Edge) PutLimits(a netip.Addr, l Limits) (err error) {
	if l.IsZero() {
		return e.DeleteLimits(a)
	}
	m, k, err := e.limitsMap(a)
	if err != nil {
		return err
	}
	v, err := limitsTo(l)
	if err != nil {
		return fmt.Errorf("limits of %v: %w", a, err)
	}
	var old edgeRlDst
	if err := m.Lookup(k, &old); err == nil {
		if old.SrcNs == v.SrcNs && old.SrcTau == v.SrcTau && old.SynNs == v.SynNs && old.SynTau == v.SynTau &&
			old.SrcPps == v.SrcPps && old.SrcBurst == v.SrcBurst && old.SynRate == v.SynRate && old.SynBurst == v.SynBurst {
			return nil
		}
		v.DropSrc, v.DropSyn = old.DropSrc, old.DropSyn
		if old.SynNs == v.SynNs && old.SynTau == v.SynTau {
			v.SynTat = old.SynTat
		}
	}
	defer e.routesWritten(&err)
	if err := m.Update(k, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write limits of %v: %w", a, err)
	}
	return nil
}

// DeleteLimits removes an address's limits (none: nothing to do).
func (e *Edge) DeleteLimits(a netip.Addr) (err error) {
	m, k, err := e.limitsMap(a)
	if err != nil {
		return nil // no such map, or no such address: no limits
	}
	if err := m.Delete(k); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("delete limits of %v: %w", a, err)
	}
	return e.bumpRouteGen()
}

// Limits lists the programmed limits, of both families.
func (e *Edge) Limits() (map[netip.Addr]Limits, error) {
	out := map[netip.Addr]Limits{}
	of := func(v edgeRlDst) Limits {
		return Limits{SourcePPS: v.SrcPps, SourceBurst: v.SrcBurst, SYNRate: v.SynRate, SYNBurst: v.SynBurst}
	}
	var k uint32
	var v edgeRlDst
	it := e.objs.EdgeLimits.Iterate()
	for it.Next(&k, &v) {
		out[netip.AddrFrom4(le4(k))] = of(v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	if e.objs.EdgeLimits6 == nil {
		return out, nil
	}
	var k6 edgeIpAddr
	it = e.objs.EdgeLimits6.Iterate()
	for it.Next(&k6, &v) {
		out[addrFrom(k6, 10)] = of(v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list IPv6 limits: %w", err)
	}
	return out, nil
}

// LimitCounters reads what an address's limits dropped (false: no limits).
func (e *Edge) LimitCounters(a netip.Addr) (LimitCounters, bool, error) {
	m, k, err := e.limitsMap(a)
	if err != nil {
		return LimitCounters{}, false, nil
	}
	var v edgeRlDst
	if err := m.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return LimitCounters{}, false, nil
		}
		return LimitCounters{}, false, err
	}
	return LimitCounters{DroppedSource: v.DropSrc, DroppedSYN: v.DropSyn}, true, nil
}

// ICMPKind is a kind of ICMP error the data plane generates; each has its
// own budget (bpf/lib/consts.h ICMP_KIND_*), so a flood of one kind (expired
// TTLs) cannot starve another (fragmentation needed, which path MTU
// discovery depends on, RFC 1191).
type ICMPKind int

const (
	ICMPKindTTL   ICMPKind = iota // time exceeded
	ICMPKindFrag                  // fragmentation needed
	ICMPKindOther                 // any other error
	icmpKinds
)

// ICMPBudget is one kind's budget: errors per second per CPU (0: none are
// sent) and the burst.
type ICMPBudget struct {
	Rate, Burst uint32
}

// icmpBudgets resolves the budget of every kind: its own if set, else the
// default.
func icmpBudgets(per map[ICMPKind]ICMPBudget, rate, burst uint32) ([icmpKinds]ICMPBudget, error) {
	var out [icmpKinds]ICMPBudget
	for k := range out {
		b, ok := per[ICMPKind(k)]
		if !ok {
			b = ICMPBudget{Rate: rate, Burst: burst}
		}
		if b.Rate > MaxICMPRate {
			return out, fmt.Errorf("ICMP rate %d/s: at most %d", b.Rate, MaxICMPRate)
		}
		out[k] = b
	}
	for k := range per {
		if k < 0 || k >= icmpKinds {
			return out, fmt.Errorf("ICMP kind %d: no such kind", k)
		}
	}
	return out, nil
}

// writeICMPBudgets writes icmp_kinds (both programs' maps have its layout).
func writeICMPBudgets(m *ebpf.Map, b [icmpKinds]ICMPBudget) error {
	for k, v := range b {
		if err := m.Update(uint32(k), &edgeIcmpKindCfg{Rate: v.Rate, Burst: v.Burst}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write ICMP budget %d: %w", k, err)
		}
	}
	return nil
}

var _ LimitMaps = (*Edge)(nil)

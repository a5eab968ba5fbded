package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/lbplan"
)

// Load-balancer modes (bpf/lib/consts.h).
const (
	ModeEncap = lbplan.ModeEncap
	ModeNAT   = lbplan.ModeNAT
)

// IP protocols.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// LBConfig is the load balancer's configuration.
type LBConfig struct {
	HZ                      uint32 // the kernel's jiffies per second (MeasureHZ)
	SYN, Established, FIN   time.Duration
	UDP                     time.Duration
	InsertRate, InsertBurst uint32 // connection-table inserts per second per CPU (0: no cap)
	NAT                     bool   // some service is in nat mode
}

// Listener is a listener key: VIP, protocol, port (0: any port) and, for
// a range, its last port (0 for one port). One port is one entry of the
// exact-port map; a range, whatever its length, one entry of its (VIP,
// protocol)'s range set, as is the any-port listener. It is the plan's
// type (internal/lbplan), so plans need no conversion.
type Listener = lbplan.Listener

// LBRangesMax is how many port ranges one (VIP, protocol) may have
// (LB_RANGES_MAX in bpf/lib/consts.h).
const LBRangesMax = lbplan.RangesMax

// ListenerValue says where a listener's flows go.
type ListenerValue struct {
	Table uint32 // slot in the table map; the table's size M travels
	// with the table itself (its inner map's size), so the two change
	// together in one swap (SetTable)
}

// LBBackend is a backend slot.
type LBBackend struct {
	Addr  netip.Addr // nat: the backend; encap: its host's underlay address
	Guest netip.Addr // encap: the guest's private address
	VSID  uint32
	Port  uint16 // nat: backend port (0: the listener's)
	Gen   uint16 // bumped when the slot is given to another backend
	Down  bool   // failed its health checks
	Mode  uint8  // ModeEncap or ModeNAT
	Owner uint64 // the daemon's hash of the backend's identity (restarts)
}

// NATConn is a nat-mode connection's reverse entry: replies from Backend
// to Client over Proto leave as from VIP. The data plane installs one per
// new connection; PutNATConn is for tests and benchmarks.
type NATConn struct {
	Backend, Client, VIP netip.AddrPort
	Proto                uint8
}

// LBCounters count a backend's traffic.
type LBCounters struct {
	Packets, Bytes, Conns uint64
}

// LBInfo names the informational counters (bpf/lib/lb.h enum lb_info).
var LBInfo = []string{"ct_miss", "ct_insert", "ct_insert_limited", "ct_stale", "syn_repick", "nat_reply_stateless"}

// The load balancer's maps, one small interface per map (after Cilium's
// pkg/loadbalancer maps), each with a fake (FakeLB's parts) and a
// fault-injecting wrapper (FaultyLB's parts): the reconciler is tested
// against failures of any one operation without a kernel.

// VIPMap marks service VIPs in the route map (eip_routes, ROUTE_F_VIP).
type VIPMap interface {
	PutVIP(netip.Addr) error
	DeleteVIP(netip.Addr) error
	VIPs() ([]netip.Addr, error)
}

// ListenerMap holds the listeners: single ports in lb_listeners, ranges
// and any-port in the (VIP, protocol)'s set in lb_ranges.
type ListenerMap interface {
	PutListener(Listener, ListenerValue) error
	DeleteListener(Listener) error
	Listeners() (map[Listener]ListenerValue, error)
}

// TableMap holds the Maglev tables (lb_tables, an array of maps) and
// their owner records (lb_table_owner).
type TableMap interface {
	// SetTable swaps in a whole Maglev table (its size is len(entries)).
	SetTable(slot uint32, entries []uint32) error
	DeleteTable(slot uint32) error
	// SetTableOwner records which pool a table slot serves; TableOwners
	// reads the record back after a restart.
	SetTableOwner(slot uint32, owner uint64) error
	TableOwners() (map[uint32]uint64, error)
}

// BackendMap holds the backend slots (lb_backends) and their counters
// (lb_be_stats).
type BackendMap interface {
	SetBackend(idx uint32, b LBBackend) error
	// Backends lists the slots in use (an owner set), for adoption.
	Backends() (map[uint32]LBBackend, error)
	BackendCounters(idx uint32) (LBCounters, error)
	ResetBackendCounters(idx uint32) error
}

// NATBackend is a nat backend as its replies leave it (address, port,
// protocol): the key of the reply path's stateless fallback. It is the
// plan's type (internal/lbplan).
type NATBackend = lbplan.NATBackend

// NATBackendMap holds the reply path's stateless fallback
// (lb_nat_backends): nat backends of exactly one VIP and port, by which
// a reply with no connection entry yet is translated.
type NATBackendMap interface {
	PutNATBackend(NATBackend, netip.AddrPort) error
	DeleteNATBackend(NATBackend) error
	NATBackends() (map[NATBackend]netip.AddrPort, error)
}

// LBConfigMap holds the load balancer's configuration (lb_cfg) and the
// interfaces that answer ARP for VIPs (arp_ifaces).
type LBConfigMap interface {
	SetLBConfig(LBConfig) error
	SetARP(ifindex int, mac net.HardwareAddr) error
}

// LBMaps is what the service reconciler needs from a data plane.
type LBMaps interface {
	VIPMap
	ListenerMap
	TableMap
	BackendMap
	NATBackendMap
	LBConfigMap
}

var _ LBMaps = (*Edge)(nil)

func be16(p uint16) uint16 { return p<<8 | p>>8 }

func ip4word(a netip.Addr) uint32 {
	if !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:])
}

func wordIP4(w uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	return netip.AddrFrom4(b)
}

func (e *Edge) SetLBConfig(c LBConfig) error {
	hz := c.HZ
	if hz == 0 {
		hz = 250
	}
	j := func(d time.Duration) uint32 { return uint32(d.Seconds()*float64(hz) + 0.5) }
	v := edgeLbConfig{Hz: hz, ToSyn: j(c.SYN), ToEst: j(c.Established), ToFin: j(c.FIN), ToUdp: j(c.UDP),
		InsertRate: c.InsertRate, InsertBurst: c.InsertBurst}
	if c.NAT {
		v.Flags |= 1
	}
	return e.objs.LbCfg.Update(uint32(0), &v, ebpf.UpdateAny)
}

// PutVIP marks a VIP in the route map (a route flagged ROUTE_F_VIP): the
// data plane's one lookup on a destination tells VIPs, EIPs and the rest
// apart.
func (e *Edge) PutVIP(a netip.Addr) (err error) {
	k, err := vipKeyOf(a)
	if err != nil {
		return fmt.Errorf("VIP: %w", err)
	}
	var cur edgeEipRoute
	if err := e.objs.EipRoutes.Lookup(&k, &cur); err == nil {
		if cur.Flags&routeVIP == 0 {
			return fmt.Errorf("VIP %v is programmed as an EIP", a)
		}
		return nil // there, with its listener generation
	}
	defer e.routesWritten(&err)
	// A new VIP starts a listener generation no earlier VIP at this address
	// had (connection entries of a deleted VIP may linger in the LRU): the
	// route generation's low bits, which every route write moves.
	lgen, err := e.routeGen()
	if err != nil {
		return err
	}
	gen := uint16(lgen + 1)
	if gen == 0 {
		gen = 1 // 0 is an earlier version's (startListenerGens)
	}
	return e.objs.EipRoutes.Update(&k, &edgeEipRoute{Flags: routeVIP, Family: 2, Lgen: gen}, ebpf.UpdateAny)
}

// listenerNarrowed bumps the listener generation of l's VIP after a
// listener was removed or a range set rewritten: connection entries made
// before then are used again only after their listener is found (see
// lb_decide in bpf/lib/lb.h). A VIP without a route mark has nothing to
// bump.
func (e *Edge) listenerNarrowed(l Listener) (err error) {
	k, err := vipKeyOf(l.VIP)
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	var cur edgeEipRoute
	if err := e.objs.EipRoutes.Lookup(&k, &cur); err != nil || cur.Flags&routeVIP == 0 {
		return nil
	}
	defer e.routesWritten(&err)
	if cur.Lgen++; cur.Lgen == 0 {
		cur.Lgen = 1 // 0 is an earlier version's (startListenerGens)
	}
	if err := e.objs.EipRoutes.Update(&k, &cur, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("listener %v: bump the VIP's listener generation: %w", l.VIP, err)
	}
	return nil
}

// DeleteVIP removes a VIP mark (never an EIP's route).
func (e *Edge) DeleteVIP(a netip.Addr) (err error) {
	defer e.routesWritten(&err)
	k, err := vipKeyOf(a)
	if err != nil {
		return err
	}
	var cur edgeEipRoute
	if err := e.objs.EipRoutes.Lookup(&k, &cur); err != nil || cur.Flags&routeVIP == 0 {
		return nil
	}
	err = e.objs.EipRoutes.Delete(&k)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// VIPs lists the VIP marks.
func (e *Edge) VIPs() ([]netip.Addr, error) {
	var out []netip.Addr
	err := e.rangeRaw(func(k edgeEipKey, v edgeEipRoute) bool {
		if v.Flags&routeVIP != 0 {
			out = append(out, addrFrom(k.Addr, k.Family))
		}
		return true
	})
	return out, err
}

// vipKeyOf is the route map's key of a VIP: IPv4, or IPv6 (issue 21: the
// IPv6 VIP path, bpf/edge.c lb6_ingress), neither IPv4-mapped nor zoned.
func vipKeyOf(a netip.Addr) (edgeEipKey, error) {
	if !a.Is4() && !plain6(a) {
		return edgeEipKey{}, fmt.Errorf("%v: a VIP is an IPv4 or a global IPv6 address, not IPv4-mapped or zoned", a)
	}
	return routeKeyOf(a)
}

func lkey(l Listener) edgeLbKey {
	return edgeLbKey{Vip: ip4word(l.VIP), Port: be16(l.Port), Proto: l.Proto}
}

func ip6addr(a netip.Addr) edgeIpAddr {
	ip, _, _ := addrTo(a)
	return ip
}

// lmaps is where a listener of l's VIP family lives: the exact-port map
// and its key for l, the range-set map and the key of l's (VIP,
// protocol). IPv6 VIPs have maps of their own (lb_listeners6, lb_ranges6:
// 16-byte VIPs), so the IPv4 keys stay as small as they were.
type lmaps struct {
	exact, ranges *ebpf.Map
	k, rk         any
}

func (e *Edge) lmapsOf(l Listener) (lmaps, error) {
	switch {
	case l.VIP.Is4():
		k, rk := lkey(l), edgeLbRkey{Vip: ip4word(l.VIP), Proto: l.Proto}
		return lmaps{e.objs.LbListeners, e.objs.LbRanges, &k, &rk}, nil
	case plain6(l.VIP):
		ip := ip6addr(l.VIP)
		k, rk := edgeLbKey6{Vip: ip, Port: be16(l.Port), Proto: l.Proto}, edgeLbRkey6{Vip: ip, Proto: l.Proto}
		return lmaps{e.objs.LbListeners6, e.objs.LbRanges6, &k, &rk}, nil
	}
	return lmaps{}, fmt.Errorf("listener %v: a VIP is an IPv4 or a global IPv6 address", l.VIP)
}

// PutListener programs a listener: one port in the exact-port map; a
// range or the any-port listener in its (VIP, protocol)'s range set, which
// is rewritten whole (readers see the old set or the new one). A range
// replaces the ranges it overlaps: they are what a changed listener had
// before (the reconciler removes what is gone after adding what is new).
func (e *Edge) PutListener(l Listener, v ListenerValue) error {
	m, err := e.lmapsOf(l)
	if err != nil {
		return err
	}
	if l.Port != 0 && !l.IsRange() {
		return m.exact.Update(m.k, &edgeLbListener{Table: v.Table}, ebpf.UpdateAny)
	}
	set, err := e.rangeSet(l, m)
	if err != nil {
		return err
	}
	if l.Port == 0 {
		set.HasAny, set.Any = 1, edgeLbListener{Table: v.Table}
	} else {
		keep := set.R[:0:0]
		for _, r := range set.R[:set.N] {
			if r.Hi < l.Port || r.Lo > l.Last {
				keep = append(keep, r)
			}
		}
		if len(keep) >= LBRangesMax {
			return fmt.Errorf("listener %v %d %d-%d: the VIP already has %d port ranges for the protocol, the data plane holds %d",
				l.VIP, l.Proto, l.Port, l.Last, len(keep), LBRangesMax)
		}
		narrowed := len(keep) < int(set.N)
		keep = append(keep, edgeLbRange{Lo: l.Port, Hi: l.Last, L: edgeLbListener{Table: v.Table}})
		slices.SortFunc(keep, func(a, b edgeLbRange) int { return int(a.Lo) - int(b.Lo) })
		set.N = uint32(copy(set.R[:], keep))
		clear(set.R[set.N:])
		if err := m.ranges.Update(m.rk, &set, ebpf.UpdateAny); err != nil || !narrowed {
			return err
		}
		// Ranges it overlapped are gone (the new one may be narrower).
		return e.listenerNarrowed(l)
	}
	return m.ranges.Update(m.rk, &set, ebpf.UpdateAny)
}

// rangeSet reads the range set of l's (VIP, protocol) (empty if none).
func (e *Edge) rangeSet(l Listener, m lmaps) (edgeLbRanges, error) {
	var set edgeLbRanges
	if err := m.ranges.Lookup(m.rk, &set); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return set, fmt.Errorf("listener %v proto %d: read its ranges: %w", l.VIP, l.Proto, err)
	}
	return set, nil
}

// DeleteListener removes a listener, then bumps its VIP's listener
// generation (in that order: see listenerNarrowed).
func (e *Edge) DeleteListener(l Listener) error {
	if err := e.deleteListener(l); err != nil {
		return err
	}
	return e.listenerNarrowed(l)
}

func (e *Edge) deleteListener(l Listener) error {
	m, err := e.lmapsOf(l)
	if err != nil {
		return err
	}
	if l.Port != 0 && !l.IsRange() {
		err := m.exact.Delete(m.k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	set, err := e.rangeSet(l, m)
	if err != nil {
		return err
	}
	if l.Port == 0 {
		set.HasAny, set.Any = 0, edgeLbListener{}
	} else {
		keep := set.R[:0:0]
		for _, r := range set.R[:set.N] {
			if r.Lo != l.Port || r.Hi != l.Last {
				keep = append(keep, r)
			}
		}
		set.N = uint32(copy(set.R[:], keep))
		clear(set.R[set.N:])
	}
	if set.N == 0 && set.HasAny == 0 {
		err = m.ranges.Delete(m.rk)
	} else {
		err = m.ranges.Update(m.rk, &set, ebpf.UpdateAny)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

func (e *Edge) Listeners() (map[Listener]ListenerValue, error) {
	out := map[Listener]ListenerValue{}
	var k edgeLbKey
	var v edgeLbListener
	it := e.objs.LbListeners.Iterate()
	for it.Next(&k, &v) {
		out[Listener{VIP: wordIP4(k.Vip), Proto: k.Proto, Port: be16(k.Port)}] = ListenerValue{Table: v.Table}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	var rk edgeLbRkey
	var set edgeLbRanges
	rit := e.objs.LbRanges.Iterate()
	for rit.Next(&rk, &set) {
		vip := wordIP4(rk.Vip)
		rangesInto(out, vip, rk.Proto, &set)
	}
	if err := rit.Err(); err != nil {
		return nil, err
	}
	var k6 edgeLbKey6
	it6 := e.objs.LbListeners6.Iterate()
	for it6.Next(&k6, &v) {
		out[Listener{VIP: addrFrom(k6.Vip, 10), Proto: k6.Proto, Port: be16(k6.Port)}] = ListenerValue{Table: v.Table}
	}
	if err := it6.Err(); err != nil {
		return nil, err
	}
	var rk6 edgeLbRkey6
	rit6 := e.objs.LbRanges6.Iterate()
	for rit6.Next(&rk6, &set) {
		rangesInto(out, addrFrom(rk6.Vip, 10), rk6.Proto, &set)
	}
	return out, rit6.Err()
}

// rangesInto adds a (VIP, protocol)'s range set to out.
func rangesInto(out map[Listener]ListenerValue, vip netip.Addr, proto uint8, set *edgeLbRanges) {
	if set.HasAny != 0 {
		out[Listener{VIP: vip, Proto: proto}] = ListenerValue{Table: set.Any.Table}
	}
	for _, r := range set.R[:min(int(set.N), len(set.R))] {
		out[Listener{VIP: vip, Proto: proto, Port: r.Lo, Last: r.Hi}] = ListenerValue{Table: r.L.Table}
	}
}

// ListenerEntries counts the entries of the exact-port listener map and of the
// range-set map (tests: a range costs one whatever its length).
func (e *Edge) ListenerEntries() (exact, rangeSets, ranges int, err error) {
	var k edgeLbKey
	var v edgeLbListener
	it := e.objs.LbListeners.Iterate()
	for it.Next(&k, &v) {
		exact++
	}
	if err := it.Err(); err != nil {
		return 0, 0, 0, err
	}
	var k6 edgeLbKey6
	it6 := e.objs.LbListeners6.Iterate()
	for it6.Next(&k6, &v) {
		exact++
	}
	if err := it6.Err(); err != nil {
		return 0, 0, 0, err
	}
	var rk edgeLbRkey
	var set edgeLbRanges
	rit := e.objs.LbRanges.Iterate()
	for rit.Next(&rk, &set) {
		rangeSets++
		ranges += int(set.N)
	}
	if err := rit.Err(); err != nil {
		return 0, 0, 0, err
	}
	var rk6 edgeLbRkey6
	rit6 := e.objs.LbRanges6.Iterate()
	for rit6.Next(&rk6, &set) {
		rangeSets++
		ranges += int(set.N)
	}
	return exact, rangeSets, ranges, rit6.Err()
}

// SetTable builds a new inner array map holding entries and swaps it into
// slot with one update: flows see the old table or the new one, never a
// mix.
func (e *Edge) SetTable(slot uint32, entries []uint32) error {
	if len(entries) == 0 {
		return e.DeleteTable(slot)
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lb_table", Type: ebpf.Array, KeySize: 4, ValueSize: 4,
		MaxEntries: uint32(len(entries)), Flags: 0x1000 /* BPF_F_INNER_MAP */})
	if err != nil {
		return fmt.Errorf("table %d: create: %w", slot, err)
	}
	defer inner.Close()
	keys := make([]uint32, len(entries))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, entries, nil); err != nil {
		return fmt.Errorf("table %d: fill: %w", slot, err)
	}
	if err := e.objs.LbTables.Update(slot, inner, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("table %d: swap in: %w", slot, err)
	}
	return nil
}

func (e *Edge) DeleteTable(slot uint32) error {
	err := e.objs.LbTables.Delete(slot)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Table reads a table back (for tests and checksums of what the data
// plane really holds).
func (e *Edge) Table(slot uint32) ([]uint32, error) {
	var id ebpf.MapID
	if err := e.objs.LbTables.Lookup(slot, &id); err != nil {
		return nil, err
	}
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out := make([]uint32, m.MaxEntries())
	keys := make([]uint32, len(out))
	var cursor ebpf.MapBatchCursor
	n, err := m.BatchLookup(&cursor, keys, out, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, err
	}
	return out[:n], nil
}

// SetBackend writes backend slot idx. An IPv6 nat backend's address,
// which lb_backends' 4-byte addr cannot hold, is written first under its
// slot's key in lb_nat_backends6 (natSlotKey6; the data plane's
// lb6_nat_addr), and taken away when the slot holds anything else: a
// slot never points at an address it no longer has.
func (e *Edge) SetBackend(idx uint32, b LBBackend) error {
	v := edgeLbBackend{Addr: ip4word(b.Addr), Guest: ip4word(b.Guest), Vsid: b.VSID, Port: be16(b.Port), Gen: b.Gen, Mode: b.Mode, Owner: b.Owner}
	if b.Mode == ModeEncap && b.Addr.IsValid() {
		// An encap backend's host by its map word: an IPv6 underlay
		// address by its name in ul6_hosts (ul6.go).
		w, err := e.hostWord(b.Addr)
		if err != nil {
			return fmt.Errorf("backend %d: %w", idx, err)
		}
		v.Addr = w
	}
	if b.Down {
		v.Flags |= 1
	}
	sk := natSlotKey6(idx)
	m6 := e.objs.LbNatBackends6 // nil in an earlier release's objects
	switch {
	case b.Mode == ModeNAT && plain6(b.Addr) && m6 == nil:
		return fmt.Errorf("backend slot %d: %v: these objects have no IPv6 nat backends", idx, b.Addr)
	case b.Mode == ModeNAT && plain6(b.Addr):
		if err := m6.Update(&sk, &edgeNatRentry6{Vip: ip6addr(b.Addr)}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("backend slot %d: its IPv6 address: %w", idx, err)
		}
	case m6 != nil:
		if err := m6.Delete(&sk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("backend slot %d: its old IPv6 address: %w", idx, err)
		}
	}
	return e.objs.LbBackends.Update(idx, &v, ebpf.UpdateAny)
}

// natSlotKey6 is lb_nat_backends6's key of backend slot idx's IPv6
// address (bpf/lib/lb.h lb6_nat_addr: the address's last word the slot
// index, in host order, the rest, the port and the protocol 0).
func natSlotKey6(idx uint32) edgeNatBkey6 {
	var k edgeNatBkey6
	k.Baddr.A[3] = idx
	return k
}

// backendOf is the LBBackend of slot idx's value v (an IPv6 nat
// backend's address from lb_nat_backends6).
func (e *Edge) backendOf(idx uint32, v *edgeLbBackend) LBBackend {
	b := LBBackend{Addr: e.hostAddr(v.Addr), VSID: v.Vsid, Port: be16(v.Port), Gen: v.Gen, Down: v.Flags&1 != 0, Mode: v.Mode, Owner: v.Owner}
	if v.Guest != 0 {
		b.Guest = wordIP4(v.Guest)
	}
	if v.Mode == ModeNAT && v.Addr == 0 && e.objs.LbNatBackends6 != nil {
		sk := natSlotKey6(idx)
		var a edgeNatRentry6
		if e.objs.LbNatBackends6.Lookup(&sk, &a) == nil {
			b.Addr = addrFrom(a.Vip, 10)
		}
	}
	return b
}

func (e *Edge) Backend(idx uint32) (LBBackend, error) {
	var v edgeLbBackend
	if err := e.objs.LbBackends.Lookup(idx, &v); err != nil {
		return LBBackend{}, err
	}
	return e.backendOf(idx, &v), nil
}

func (e *Edge) Backends() (map[uint32]LBBackend, error) {
	out := map[uint32]LBBackend{}
	keys := make([]uint32, 4096)
	vals := make([]edgeLbBackend, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbBackends.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			v := vals[i]
			if v.Owner == 0 {
				continue
			}
			out[keys[i]] = e.backendOf(keys[i], &v)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (e *Edge) SetTableOwner(slot uint32, owner uint64) error {
	return e.objs.LbTableOwner.Update(slot, owner, ebpf.UpdateAny)
}

func (e *Edge) TableOwners() (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	var k uint32
	var v uint64
	it := e.objs.LbTableOwner.Iterate()
	for it.Next(&k, &v) {
		if v != 0 {
			out[k] = v
		}
	}
	return out, it.Err()
}

// PutNATConn writes a nat connection's reverse entry, as the data plane
// does on a connection's first packet (tests, benchmarks): in
// lb_nat_conns, or lb_nat_conns6 for an IPv6 connection (all three
// addresses of one family).
func (e *Edge) PutNATConn(c NATConn) error {
	switch natFamily(c.Backend.Addr(), c.Client.Addr(), c.VIP.Addr()) {
	case 4:
		k := edgeNatRkey{Baddr: ip4word(c.Backend.Addr()), Caddr: ip4word(c.Client.Addr()), Bport: be16(c.Backend.Port()),
			Cport: be16(c.Client.Port()), Proto: c.Proto}
		return e.objs.LbNatConns.Update(&k, &edgeNatRentry{Vip: ip4word(c.VIP.Addr()), Vport: be16(c.VIP.Port())}, ebpf.UpdateAny)
	case 6:
		if e.objs.LbNatConns6 == nil {
			return errors.New("these objects have no IPv6 nat connections")
		}
		k, v := natConnKV6(c)
		return e.objs.LbNatConns6.Update(&k, &v, ebpf.UpdateAny)
	}
	return fmt.Errorf("nat connection %v -> %v (VIP %v): the addresses are not of one family", c.Backend, c.Client, c.VIP)
}

// natFamily is 4 or 6 when every address is a plain one of that family
// (IPv4; IPv6 neither IPv4-mapped nor zoned), else 0.
func natFamily(as ...netip.Addr) int {
	f := 0
	for _, a := range as {
		g := 0
		switch {
		case a.Is4():
			g = 4
		case plain6(a):
			g = 6
		}
		if g == 0 || (f != 0 && g != f) {
			return 0
		}
		f = g
	}
	return f
}

func natConnKV6(c NATConn) (edgeNatRkey6, edgeNatRentry6) {
	return edgeNatRkey6{Baddr: ip6addr(c.Backend.Addr()), Caddr: ip6addr(c.Client.Addr()), Bport: be16(c.Backend.Port()),
			Cport: be16(c.Client.Port()), Proto: c.Proto},
		edgeNatRentry6{Vip: ip6addr(c.VIP.Addr()), Vport: be16(c.VIP.Port())}
}

func natBkey(b NATBackend) edgeNatBkey {
	return edgeNatBkey{Baddr: ip4word(b.Addr), Bport: be16(b.Port), Proto: b.Proto}
}

func natBkey6(b NATBackend) edgeNatBkey6 {
	return edgeNatBkey6{Baddr: ip6addr(b.Addr), Bport: be16(b.Port), Proto: b.Proto}
}

// PutNATBackend writes a nat backend of one VIP and port to the reply
// path's stateless fallback: lb_nat_backends for IPv4, lb_nat_backends6
// for IPv6 (the backend's and VIP's families must match; the protocol is
// TCP or UDP: protocol 0 keys are the slots' addresses there).
func (e *Edge) PutNATBackend(b NATBackend, vip netip.AddrPort) error {
	if b.Proto != ProtoTCP && b.Proto != ProtoUDP {
		return fmt.Errorf("nat backend %v port %d: protocol %d is neither TCP nor UDP", b.Addr, b.Port, b.Proto)
	}
	switch natFamily(b.Addr, vip.Addr()) {
	case 4:
		k := natBkey(b)
		return e.objs.LbNatBackends.Update(&k, &edgeNatRentry{Vip: ip4word(vip.Addr()), Vport: be16(vip.Port())}, ebpf.UpdateAny)
	case 6:
		if e.objs.LbNatBackends6 == nil {
			return fmt.Errorf("nat backend %v: these objects have no IPv6 nat backends", b.Addr)
		}
		k := natBkey6(b)
		return e.objs.LbNatBackends6.Update(&k, &edgeNatRentry6{Vip: ip6addr(vip.Addr()), Vport: be16(vip.Port())}, ebpf.UpdateAny)
	}
	return fmt.Errorf("nat backend %v port %d: VIP %v is not of the backend's family", b.Addr, b.Port, vip)
}

func (e *Edge) DeleteNATBackend(b NATBackend) error {
	var err error
	switch {
	case b.Addr.Is4():
		k := natBkey(b)
		err = e.objs.LbNatBackends.Delete(&k)
	case plain6(b.Addr) && b.Proto != 0 && e.objs.LbNatBackends6 != nil:
		k := natBkey6(b)
		err = e.objs.LbNatBackends6.Delete(&k)
	default:
		return nil
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// NATBackends lists both families' fallback entries (not the IPv6 slot
// addresses lb_nat_backends6 also holds).
func (e *Edge) NATBackends() (map[NATBackend]netip.AddrPort, error) {
	out := map[NATBackend]netip.AddrPort{}
	var k edgeNatBkey
	var v edgeNatRentry
	it := e.objs.LbNatBackends.Iterate()
	for it.Next(&k, &v) {
		out[NATBackend{Addr: wordIP4(k.Baddr), Port: be16(k.Bport), Proto: k.Proto}] = netip.AddrPortFrom(wordIP4(v.Vip), be16(v.Vport))
	}
	if err := it.Err(); err != nil || e.objs.LbNatBackends6 == nil {
		return out, err
	}
	var k6 edgeNatBkey6
	var v6 edgeNatRentry6
	it = e.objs.LbNatBackends6.Iterate()
	for it.Next(&k6, &v6) {
		if k6.Proto == 0 {
			continue // a slot's address
		}
		out[NATBackend{Addr: addrFrom(k6.Baddr, 10), Port: be16(k6.Bport), Proto: k6.Proto}] =
			netip.AddrPortFrom(addrFrom(v6.Vip, 10), be16(v6.Vport))
	}
	return out, it.Err()
}

// NATConns walks the nat reverse entries, IPv4 (lb_nat_conns) then IPv6
// (lb_nat_conns6).
func (e *Edge) NATConns(f func(NATConn) bool) error {
	var k edgeNatRkey
	var v edgeNatRentry
	it := e.objs.LbNatConns.Iterate()
	for it.Next(&k, &v) {
		c := NATConn{Backend: netip.AddrPortFrom(wordIP4(k.Baddr), be16(k.Bport)), Client: netip.AddrPortFrom(wordIP4(k.Caddr), be16(k.Cport)),
			VIP: netip.AddrPortFrom(wordIP4(v.Vip), be16(v.Vport)), Proto: k.Proto}
		if !f(c) {
			return nil
		}
	}
	if err := it.Err(); err != nil || e.objs.LbNatConns6 == nil {
		return err
	}
	var k6 edgeNatRkey6
	var v6 edgeNatRentry6
	it = e.objs.LbNatConns6.Iterate()
	for it.Next(&k6, &v6) {
		c := NATConn{Backend: netip.AddrPortFrom(addrFrom(k6.Baddr, 10), be16(k6.Bport)),
			Client: netip.AddrPortFrom(addrFrom(k6.Caddr, 10), be16(k6.Cport)),
			VIP:    netip.AddrPortFrom(addrFrom(v6.Vip, 10), be16(v6.Vport)), Proto: k6.Proto}
		if !f(c) {
			return nil
		}
	}
	return it.Err()
}

func (e *Edge) SetARP(ifindex int, mac net.HardwareAddr) error {
	if mac == nil {
		err := e.objs.ArpIfaces.Delete(uint32(ifindex))
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	var v edgeArpIface
	copy(v.Mac[:], mac)
	return e.objs.ArpIfaces.Update(uint32(ifindex), &v, ebpf.UpdateAny)
}

func readLBCounters(m *ebpf.Map, idx uint32) (LBCounters, error) {
	var vals []edgeLbCounters
	if err := m.Lookup(idx, &vals); err != nil {
		return LBCounters{}, err
	}
	var c LBCounters
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
		c.Conns += v.Conns
	}
	return c, nil
}

func (e *Edge) BackendCounters(idx uint32) (LBCounters, error) {
	return readLBCounters(e.objs.LbBeStats, idx)
}

func (e *Edge) ResetBackendCounters(idx uint32) error {
	zero := make([]edgeLbCounters, ebpf.MustPossibleCPU())
	return e.objs.LbBeStats.Update(idx, zero, ebpf.UpdateAny)
}

// LBInfoCounters reads the informational counters.
func (e *Edge) LBInfoCounters() (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, name := range LBInfo {
		var vals []uint64
		if err := e.objs.LbInfo.Lookup(uint32(i), &vals); err != nil {
			return nil, err
		}
		var s uint64
		for _, v := range vals {
			s += v
		}
		out[name] = s
	}
	return out, nil
}

// Conn is a connection-table entry.
type Conn struct {
	Src, Dst     netip.Addr
	Sport, Dport uint16
	Proto        uint8
	Backend      uint32
	State        uint8
}

// Conns walks the connection tables: IPv4 flows (lb_conns), then IPv6
// flows (lb_conns6).
func (e *Edge) Conns(f func(Conn) bool) error {
	more := true
	if err := e.conns4(func(c Conn) bool { more = f(c); return more }); err != nil || !more {
		return err
	}
	keys := make([]edgeCtKey6, 1024)
	vals := make([]edgeCtEntry, 1024)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns6.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			k, v := keys[i], vals[i]
			if !f(Conn{Src: addrFrom(k.Src, 10), Dst: addrFrom(k.Dst, 10), Sport: be16(k.Sport), Dport: be16(k.Dport), Proto: k.Proto, Backend: uint32(v.Backend), State: v.State}) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (e *Edge) conns4(f func(Conn) bool) error {
	keys := make([]edgeCtKey, 4096)
	vals := make([]edgeCtEntry, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			k, v := keys[i], vals[i]
			if !f(Conn{Src: wordIP4(k.Src), Dst: wordIP4(k.Dst), Sport: be16(k.Sport), Dport: be16(k.Dport), Proto: k.Proto, Backend: uint32(v.Backend), State: v.State}) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// FillFlow is the client side of the i-th flow FillConns writes: clients
// from 203.0.113.0/24, ports from 1024.
func FillFlow(i uint32) (netip.Addr, uint16) {
	return netip.AddrFrom4([4]byte{203, 0, 113, byte(i / 60000)}), uint16(1024 + i%60000)
}

// FillConns writes n established connection entries, flow i (FillFlow)
// to vip:vport going to backend i % backends, last seen at jiffies now
// (benchmarks: a large table that must serve). Their FlowID is 0, not the
// flow hash's: only the spread of their tunnels over ECMP paths differs.
func (e *Edge) FillConns(n uint32, vip netip.Addr, vport uint16, backends uint32, now uint64) error {
	const chunk = 65536
	keys := make([]edgeCtKey, 0, chunk)
	vals := make([]edgeCtEntry, 0, chunk)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := e.objs.LbConns.BatchUpdate(keys, vals, nil)
		keys, vals = keys[:0], vals[:0]
		return err
	}
	for i := uint32(0); i < n; i++ {
		c, p := FillFlow(i)
		keys = append(keys, edgeCtKey{Src: ip4word(c), Dst: ip4word(vip), Sport: be16(p), Dport: be16(vport), Proto: ProtoTCP})
		vals = append(vals, edgeCtEntry{Backend: uint16(i % backends), Last: uint32(now), Gen: 1, State: 2})
		if len(keys) == chunk {
			if err := flush(); err != nil {
				return fmt.Errorf("fill connection table: %w", err)
			}
		}
	}
	return flush()
}

// ConnTableMemory is the kernel memory charged to the connection table
// (the map's memlock in fdinfo).
func (e *Edge) ConnTableMemory() (uint64, error) { return memlock(e.objs.LbConns) }

// NATConnMemory is the kernel memory charged to the nat reverse table.
func (e *Edge) NATConnMemory() (uint64, error) { return memlock(e.objs.LbNatConns) }

// memlock reads a map's memlock from fdinfo.
func memlock(m *ebpf.Map) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no memlock in fdinfo")
}

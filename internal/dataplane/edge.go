package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Edge is a loaded edge data plane.
type Edge struct {
	objs   edgeObjects
	pinDir string
	links  map[string]link.Link // only when not pinned
	cfgMu  sync.Mutex           // the config entry is read, modified and written
	genMu  sync.Mutex           // eip_route_gen is read, incremented and written
	// ApplyConns' buffers (connsync.go), reused across calls.
	syncMu   sync.Mutex
	syncBufs connBufs
	upgrade  UpgradeReport
	prevMu   sync.Mutex
	prevs    map[edgeEipKey]struct{} // eip_prev's keys (prevKeys)
	ul6Once  sync.Once
	ul6      ul6Names // the IPv6 underlay hosts' names (ul6.go; names())
}

var _ EdgeMaps = (*Edge)(nil)

// LoadEdge loads the edge program and its maps (reusing pinned ones, or
// migrating them when this version's layout differs: upgrade.go).
func LoadEdge(o LoadOptions) (*Edge, error) {
	spec, err := loadEdge()
	if err != nil {
		return nil, err
	}
	return loadEdgeSpec(spec, o)
}

// eipSized are the edge maps LoadOptions.EIPMax sizes; eipCapped those
// it caps (an entry per EIP or VIP with a limit: never more than the EIPs
// and VIPs an edge holds, 64k by default). It caps eip_prev too (an entry
// per drifting EIP, 16k by default).
var (
	eipSized  = []string{edgeMapEipRoutes, edgeMapEipStats, edgeMapEipBwSlots, edgeMapFwDst, edgeMapFwDst6}
	eipCapped = []string{edgeMapEdgeLimits, edgeMapEdgeLimits6, edgeMapEipBw, edgeMapEipBw6}
	// backendSized are those LoadOptions.BackendMax sizes: an entry per
	// backend slot (lb_backends, its counters lb_be_stats), per nat
	// backend of one VIP and port (lb_nat_backends) and per
	// health-checked backend (hc_marks, hc_marks6; hc_peers twice that,
	// below).
	backendSized = []string{edgeMapLbBackends, edgeMapLbBeStats, edgeMapLbNatBackends, edgeMapHcMarks, edgeMapHcMarks6}
)

// edgeCapacities applies o's capacity overrides to spec. An earlier
// release's object (the upgrade test, LoadEdgeObject) may lack some maps.
func edgeCapacities(spec *ebpf.CollectionSpec, o LoadOptions) {
	size := func(n string, v uint32) {
		if m := spec.Maps[n]; m != nil && v > 0 {
			m.MaxEntries = v
		}
	}
	if o.EIPMax > 0 {
		// Every map with an entry per EIP or VIP: the routes, the
		// counters and bandwidth buckets (indexed by a route's
		// stats_idx, below EIPMax) and the firewall scopes.
		for _, n := range eipSized {
			size(n, o.EIPMax)
		}
		// The limits: an entry per EIP or VIP with one.
		for _, n := range eipCapped {
			if m := spec.Maps[n]; m != nil && o.EIPMax < m.MaxEntries {
				m.MaxEntries = o.EIPMax
			}
		}
	}
	if m := spec.Maps[edgeMapEipPrev]; m != nil && o.EIPMax > 0 && o.EIPMax < m.MaxEntries {
		m.MaxEntries = o.EIPMax
	}
	size(edgeMapLbConns, o.ConnMax)
	size(edgeMapLbNatConns, o.ConnMax) // a reverse entry per nat connection
	size(edgeMapLbConns6, conns6(o))
	size(edgeMapLbNatConns6, conns6(o)) // a reverse entry per IPv6 nat connection
	size(edgeMapDriftFlows, o.DriftFlows)
	size(edgeMapLbListeners, o.ListenerMax)
	// IPv6 VIPs' exact-port listeners: LB_LISTENERS6_MAX (a quarter of
	// lb_listeners'), never more than ListenerMax.
	if m := spec.Maps[edgeMapLbListeners6]; m != nil && o.ListenerMax > 0 && o.ListenerMax < m.MaxEntries {
		m.MaxEntries = o.ListenerMax
	}
	for _, n := range backendSized {
		size(n, o.BackendMax)
	}
	// lb_nat_backends6: an IPv6 nat backend of one VIP and port, and an
	// IPv6 nat backend slot's address (bpf/lib/maps.h): twice BackendMax.
	if o.BackendMax > 0 {
		size(edgeMapLbNatBackends6, 2*o.BackendMax)
		// hc_peers: a guest checked at its IPv4 and its IPv6 address.
		size(edgeMapHcPeers, 2*o.BackendMax)
	}
}

// conns6 is the capacity LoadOptions give lb_conns6: ConnMax6, else a
// quarter of ConnMax (at least 1), else 0 (the compiled CT6_MAX).
func conns6(o LoadOptions) uint32 {
	if o.ConnMax6 > 0 {
		return o.ConnMax6
	}
	if o.ConnMax > 0 {
		return max(o.ConnMax/4, 1)
	}
	return 0
}

// loadEdgeSpec loads an edge object (this version's, or an earlier
// release's in the upgrade test) with o.
func loadEdgeSpec(spec *ebpf.CollectionSpec, o LoadOptions) (*Edge, error) {
	edgeCapacities(spec, o)
	if err := setBwClock(spec); err != nil {
		return nil, loadErr("edge", err)
	}
	up, opts, err := beginLoad(spec, o)
	if err != nil {
		return nil, loadErr("edge", err)
	}
	e := &Edge{pinDir: o.PinDir, links: map[string]link.Link{}}
	if err := loadInto(spec, opts, &e.objs); err != nil {
		up.close()
		return nil, loadErr("edge", err)
	}
	if e.upgrade, err = up.finish(progsOf(&e.objs)); err != nil {
		e.objs.Close()
		return nil, fmt.Errorf("upgrade edge data plane in %s: %w", o.PinDir, err)
	}
	if err := e.startListenerGens(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// LoadEdgeMaps loads the edge's maps without its programs: a table that
// receives connection entries (internal/connsync's tests and benchmark)
// or is read, at a fraction of the cost of verifying the program. Program,
// Attach and the program's globals (SetConnSync) are unavailable. It
// refuses to migrate pinned maps a running program holds.
func LoadEdgeMaps(o LoadOptions) (*Edge, error) {
	spec, err := loadEdge()
	if err != nil {
		return nil, err
	}
	edgeCapacities(spec, o)
	up, opts, err := beginLoad(spec, o)
	if err != nil {
		return nil, loadErr("edge maps", err)
	}
	if err := up.refuseIfLinked(); err != nil {
		up.close()
		return nil, err
	}
	e := &Edge{pinDir: o.PinDir, links: map[string]link.Link{}}
	if err := spec.LoadAndAssign(&e.objs.edgeMaps, opts); err != nil {
		up.close()
		return nil, loadErr("edge maps", err)
	}
	if e.upgrade, err = up.finish(nil); err != nil {
		e.objs.Close()
		return nil, err
	}
	return e, nil
}

// Upgrade reports what the load did with the pinned maps.
func (e *Edge) Upgrade() UpgradeReport { return e.upgrade }

// Program is the XDP program (for attaching and BPF_PROG_TEST_RUN).
func (e *Edge) Program() *ebpf.Program { return e.objs.XdpEdge }

// Attach attaches the edge program to an interface (atomically replacing a
// previous version of it).
func (e *Edge) Attach(ifname string) error {
	l, err := attachXDP(e.objs.XdpEdge, ifname, e.pinDir)
	if l != nil {
		e.links[ifname] = l
	}
	return err
}

// Detach removes the program from an interface.
func (e *Edge) Detach(ifname string) error {
	if l, ok := e.links[ifname]; ok {
		delete(e.links, ifname)
		return l.Close()
	}
	if e.pinDir == "" {
		return nil
	}
	return detachXDP(ifname, e.pinDir)
}

// Attached lists the interfaces holding a pinned edge link.
func (e *Edge) Attached() []string { return attachedLinks(e.pinDir) }

// Close releases the daemon's handles. Pinned links and maps stay: the
// program keeps forwarding.
func (e *Edge) Close() error {
	for _, l := range e.links {
		l.Close()
	}
	return e.objs.Close()
}

// SetConfig writes the configuration entry.
func (e *Edge) SetConfig(c EdgeConfig) error {
	var v edgeEdgeConfig
	var err error
	if c.Underlay.IsValid() {
		if v.Underlay, _, err = addrTo(c.Underlay); err != nil {
			return err
		}
	}
	if c.ICMPSource.IsValid() {
		if v.IcmpSrc, _, err = addrTo(c.ICMPSource); err != nil {
			return err
		}
	}
	var v6 edgeEdgeConfig6
	if c.ICMPSource6.IsValid() {
		a := c.ICMPSource6
		if !plain6(a) || !a.IsGlobalUnicast() {
			return fmt.Errorf("ICMPv6 source %v: not a global unicast IPv6 address", a)
		}
		if v6.IcmpSrc, _, err = addrTo(a); err != nil {
			return err
		}
	}
	if c.Underlay6.IsValid() {
		if !validUl6(c.Underlay6) {
			return fmt.Errorf("IPv6 underlay %v: not a global unicast IPv6 address", c.Underlay6)
		}
		v6.Underlay, _, _ = addrTo(c.Underlay6)
	}
	v.HashSeed = c.HashSeed
	if c.ICMPRate > MaxICMPRate {
		return fmt.Errorf("ICMP rate %d/s: at most %d", c.ICMPRate, MaxICMPRate)
	}
	budgets, err := icmpBudgets(c.ICMPBudgets, c.ICMPRate, c.ICMPBurst)
	if err != nil {
		return err
	}
	if err := writeICMPBudgets(e.objs.IcmpKinds, budgets); err != nil {
		return err
	}
	v.UlIfindex = c.UnderlayIfindex
	v.IcmpRate = c.ICMPRate
	v.IcmpBurst = c.ICMPBurst
	if c.ICMPTimeExceeded {
		v.Flags |= 1
	}
	v.GwMac = macTo(c.GatewayMAC)
	var old edgeEdgeConfig
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	if err := e.objs.EdgeCfg.Lookup(uint32(0), &old); err == nil {
		v.NhGen = old.NhGen + 1 // a new config invalidates cached next hops
	}
	// (An older program, loaded by the upgrade tests, has no edge_cfg6.)
	if e.objs.EdgeCfg6 != nil {
		var err error
		if e.objs.EdgeCfg6.ValueSize() == 16 {
			// An older program's entry (baseline objects): the
			// ICMPv6 source alone, no IPv6 underlay.
			if c.Underlay6.IsValid() {
				return fmt.Errorf("IPv6 underlay %v: this edge program has none", c.Underlay6)
			}
			err = e.objs.EdgeCfg6.Update(uint32(0), &v6.IcmpSrc, ebpf.UpdateAny)
		} else {
			err = e.objs.EdgeCfg6.Update(uint32(0), &v6, ebpf.UpdateAny)
		}
		if err != nil {
			return fmt.Errorf("write edge IPv6 config: %w", err)
		}
	} else if c.ICMPSource6.IsValid() || c.Underlay6.IsValid() {
		return fmt.Errorf("ICMPv6 source %v, IPv6 underlay %v: this edge program has no IPv6 settings", c.ICMPSource6, c.Underlay6)
	}
	if err := e.objs.EdgeCfg.Update(uint32(0), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write edge config: %w", err)
	}
	return nil
}

// InvalidateNextHops makes the program ask the FIB again for every next
// hop (call it when routes, neighbours or links change).
func (e *Edge) InvalidateNextHops() error {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	var v edgeEdgeConfig
	if err := e.objs.EdgeCfg.Lookup(uint32(0), &v); err != nil {
		return err
	}
	v.NhGen++
	return e.objs.EdgeCfg.Update(uint32(0), &v, ebpf.UpdateAny)
}

// routeKeyOf is the route map's key of an EIP: IPv4 or IPv6 (the IPv6
// EIP path, bpf/edge.c edge_ipv6). Only the edge's EIP routes take IPv6:
// VIPs and the agent's maps go through keyOf, IPv4 only.
func routeKeyOf(a netip.Addr) (edgeEipKey, error) {
	if a.Is4In6() || a.Zone() != "" {
		return edgeEipKey{}, fmt.Errorf("%v: an EIP is an IPv4 or a global IPv6 address, not IPv4-mapped or zoned", a)
	}
	ip, fam, err := addrTo(a)
	if err != nil {
		return edgeEipKey{}, err
	}
	return edgeEipKey{Addr: ip, Family: fam}, nil
}

// routeTo is the eip_routes entry of r, hosts named by hostWord (an IPv6
// host by its name in ul6_hosts: UL6_HOST, ul6.go).
func (e *Edge) routeTo(r Route) (edgeEipRoute, error) {
	if !r.Host.IsValid() {
		return edgeEipRoute{}, fmt.Errorf("route host: invalid address %v", r.Host)
	}
	w, err := e.hostWord(r.Host)
	if err != nil {
		return edgeEipRoute{}, fmt.Errorf("route host: %w", err)
	}
	if r.VSID > 0xFFFFFF {
		return edgeEipRoute{}, fmt.Errorf("VSID %d does not fit 24 bits", r.VSID)
	}
	// The program reads host.a[0] (family AF_INET), whatever the EIP's
	// family: an IPv6 host's name there.
	v := edgeEipRoute{Vsid: r.VSID, StatsIdx: r.StatsIdx, Family: 2}
	v.Host.A[0] = w
	if r.Drifts() {
		if !r.PrevHost.Is4() && !r.PrevHost.Is6() {
			return edgeEipRoute{}, fmt.Errorf("route previous host: invalid address %v", r.PrevHost)
		}
		if _, err := e.hostWord(r.PrevHost); err != nil {
			return edgeEipRoute{}, fmt.Errorf("route previous host: %w", err)
		}
		if r.PrevVSID > 0xFFFFFF {
			return edgeEipRoute{}, fmt.Errorf("previous VSID %d does not fit 24 bits", r.PrevVSID)
		}
		v.Flags |= routeDrift
	} else if r.PrevVSID != 0 || r.PrevAll {
		return edgeEipRoute{}, fmt.Errorf("previous VSID %d (all: %v) without a previous host", r.PrevVSID, r.PrevAll)
	}
	return v, nil
}

// prevTo is eip_prev's entry of a drifting route r (routeTo checked it
// and named its previous host).
func (e *Edge) prevTo(r Route) (edgeEipPrev, error) {
	w, err := e.hostWord(r.PrevHost)
	if err != nil {
		return edgeEipPrev{}, err
	}
	p := edgeEipPrev{Host: w, Vsid: r.PrevVSID}
	if r.PrevAll {
		p.Flags |= prevAll
	}
	return p, nil
}

// routeOf is the Route of an EIP's entry of eip_routes, p its entry of
// eip_prev when it drifts, hostOf the address a host word names
// (Edge.hostAddr).
func routeOf(v edgeEipRoute, p *edgeEipPrev, hostOf func(uint32) netip.Addr) Route {
	r := Route{Host: addrFrom(v.Host, v.Family), VSID: v.Vsid, StatsIdx: v.StatsIdx}
	if v.Family == 2 {
		r.Host = hostOf(v.Host.A[0])
	}
	if v.Flags&routeDrift != 0 && p != nil {
		r.PrevHost = hostOf(p.Host)
		r.PrevVSID = p.Vsid
		r.PrevAll = p.Flags&prevAll != 0
	}
	return r
}

// prevOf reads the eip_prev entry of a route flagged ROUTE_F_DRIFT (nil:
// none).
func (e *Edge) prevOf(k *edgeEipKey, v *edgeEipRoute) (*edgeEipPrev, error) {
	if v.Flags&routeDrift == 0 || e.objs.EipPrev == nil {
		return nil, nil
	}
	var p edgeEipPrev
	if err := e.objs.EipPrev.Lookup(k, &p); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read previous binding: %w", err)
	}
	return &p, nil
}

// prevKeys are the keys eip_prev holds (read from the map at first use):
// PutRoutes and DeleteRoutes remove the entries of routes that no longer
// drift. Under prevMu.
func (e *Edge) prevKeys() (map[edgeEipKey]struct{}, error) {
	if e.prevs != nil {
		return e.prevs, nil
	}
	e.prevs = map[edgeEipKey]struct{}{}
	if e.objs.EipPrev == nil {
		return e.prevs, nil
	}
	var k edgeEipKey
	var v edgeEipPrev
	it := e.objs.EipPrev.Iterate()
	for it.Next(&k, &v) {
		e.prevs[k] = struct{}{}
	}
	if err := it.Err(); err != nil {
		e.prevs = nil
		return nil, fmt.Errorf("list previous bindings: %w", err)
	}
	return e.prevs, nil
}

// dropPrevs deletes the eip_prev entries of keys (those it has).
func (e *Edge) dropPrevs(prevs map[edgeEipKey]struct{}, keys []edgeEipKey) error {
	for i := range keys {
		if _, ok := prevs[keys[i]]; !ok {
			continue
		}
		if err := e.objs.EipPrev.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete previous binding: %w", err)
		}
		delete(prevs, keys[i])
	}
	return nil
}

// batchSize bounds one BPF_MAP_UPDATE_BATCH call.
const batchSize = 8192

// bumpRouteGen invalidates the program's per-CPU route cache (eip_cache,
// bpf/edge.c) after a write to eip_routes. Deferred by every writer, so it
// runs after the write whatever it returned. An object without the map
// (an earlier version's, loaded for a benchmark) caches nothing.
func (e *Edge) bumpRouteGen() error {
	if e.objs.EipRouteGen == nil {
		return nil
	}
	e.genMu.Lock()
	defer e.genMu.Unlock()
	var g uint64
	if err := e.objs.EipRouteGen.Lookup(uint32(0), &g); err != nil {
		return fmt.Errorf("read eip_route_gen: %w", err)
	}
	if err := e.objs.EipRouteGen.Update(uint32(0), g+1, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bump eip_route_gen: %w", err)
	}
	return nil
}

// startListenerGens gives every VIP of a pinned route map written by an
// earlier version (listener generation 0, its former padding) generation
// 1: connection entries of that version (generation 0) are then used only
// after their listener is found (see lb_decide), never on the strength of
// a generation no listener change of theirs ever moved. PutVIP never
// gives 0.
func (e *Edge) startListenerGens() (err error) {
	var olds []edgeEipKey
	if err := e.rangeRaw(func(k edgeEipKey, r edgeEipRoute) bool {
		if r.Flags&routeVIP != 0 && r.Lgen == 0 {
			olds = append(olds, k)
		}
		return true
	}); err != nil {
		return fmt.Errorf("read VIP listener generations: %w", err)
	}
	if len(olds) == 0 {
		return nil
	}
	defer e.routesWritten(&err)
	for i := range olds {
		var r edgeEipRoute
		if err := e.objs.EipRoutes.Lookup(&olds[i], &r); err != nil {
			continue // gone meanwhile
		}
		r.Lgen = 1
		if err := e.objs.EipRoutes.Update(&olds[i], &r, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("set a VIP's listener generation: %w", err)
		}
	}
	return nil
}

// routeGen reads eip_route_gen (0 for an object without it).
func (e *Edge) routeGen() (uint64, error) {
	var g uint64
	if e.objs.EipRouteGen == nil {
		return 0, nil
	}
	if err := e.objs.EipRouteGen.Lookup(uint32(0), &g); err != nil {
		return 0, fmt.Errorf("read eip_route_gen: %w", err)
	}
	return g, nil
}

// routesWritten bumps the route generation after a write, keeping the
// write's error first.
func (e *Edge) routesWritten(err *error) {
	if gerr := e.bumpRouteGen(); gerr != nil && *err == nil {
		*err = gerr
	}
}

// PutRoutes adds or replaces routes, in batches. A drifting route's
// previous binding (eip_prev) is written before the route that flags it,
// and removed after the route that no longer does.
func (e *Edge) PutRoutes(routes map[netip.Addr]Route) (err error) {
	defer e.routesWritten(&err)
	e.prevMu.Lock()
	defer e.prevMu.Unlock()
	prevs, err := e.prevKeys()
	if err != nil {
		return err
	}
	var undrift []edgeEipKey // routes written without a previous binding that had one
	for a, r := range routes {
		if !r.Drifts() {
			continue
		}
		if e.objs.EipPrev == nil {
			return fmt.Errorf("route for %v: this data plane has no previous bindings (eip_prev)", a)
		}
		k, err := routeKeyOf(a)
		if err != nil {
			return err
		}
		if _, err := e.routeTo(r); err != nil {
			return fmt.Errorf("route for %v: %w", a, err)
		}
		p, err := e.prevTo(r)
		if err != nil {
			return fmt.Errorf("route for %v: %w", a, err)
		}
		if err := e.objs.EipPrev.Update(&k, &p, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write previous binding of %v: %w", a, err)
		}
		prevs[k] = struct{}{}
	}
	keys := make([]edgeEipKey, 0, min(len(routes), batchSize))
	vals := make([]edgeEipRoute, 0, cap(keys))
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := e.objs.EipRoutes.BatchUpdate(keys, vals, &ebpf.BatchOptions{})
		if errors.Is(err, ebpf.ErrNotSupported) {
			for i := range keys {
				if err := e.objs.EipRoutes.Update(&keys[i], &vals[i], ebpf.UpdateAny); err != nil {
					return err
				}
			}
			err = nil
		}
		keys, vals = keys[:0], vals[:0]
		if err != nil {
			return fmt.Errorf("write EIP routes: %w", err)
		}
		return nil
	}
	for a, r := range routes {
		k, err := routeKeyOf(a)
		if err != nil {
			return err
		}
		v, err := e.routeTo(r)
		if err != nil {
			return fmt.Errorf("route for %v: %w", a, err)
		}
		keys = append(keys, k)
		vals = append(vals, v)
		if _, ok := prevs[k]; ok && !r.Drifts() {
			undrift = append(undrift, k)
		}
		if len(keys) == batchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := e.dropPrevs(prevs, undrift); err != nil {
		return err
	}
	return e.placeBandwidths(routes)
}

// DeleteRoutes removes routes; missing ones are ignored.
func (e *Edge) DeleteRoutes(addrs []netip.Addr) (err error) {
	defer e.routesWritten(&err)
	for _, a := range addrs {
		k, err := routeKeyOf(a)
		if err != nil {
			return err
		}
		if err := e.objs.EipRoutes.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete route %v: %w", a, err)
		}
		e.prevMu.Lock()
		prevs, err := e.prevKeys()
		if err == nil {
			err = e.dropPrevs(prevs, []edgeEipKey{k})
		}
		e.prevMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// routeVIP is ROUTE_F_VIP: a VIP's mark in the route map.
const routeVIP = 1

// routeDrift is ROUTE_F_DRIFT: the route carries a previous binding.
const routeDrift = 2

// prevAll is PREV_F_ALL (bpf/lib/consts.h), eip_prev.flags.
const prevAll = 1

// rangeRaw walks the route map in batches.
func (e *Edge) rangeRaw(f func(edgeEipKey, edgeEipRoute) bool) error {
	keys := make([]edgeEipKey, 8192)
	vals := make([]edgeEipRoute, 8192)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.EipRoutes.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			if !f(keys[i], vals[i]) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list EIP routes: %w", err)
		}
	}
}

// RangeRoutes walks the EIP routes (VIP marks are skipped).
func (e *Edge) RangeRoutes(f func(netip.Addr, Route) bool) error {
	var perr error
	err := e.rangeRaw(func(k edgeEipKey, v edgeEipRoute) bool {
		if v.Flags&routeVIP != 0 {
			return true
		}
		p, err := e.prevOf(&k, &v)
		if err != nil {
			perr = err
			return false
		}
		return f(addrFrom(k.Addr, k.Family), routeOf(v, p, e.hostAddr))
	})
	return errors.Join(err, perr)
}

// Routes lists every route in the map (for tests and small tables).
func (e *Edge) Routes() (map[netip.Addr]Route, error) {
	out := map[netip.Addr]Route{}
	err := e.RangeRoutes(func(a netip.Addr, r Route) bool { out[a] = r; return true })
	return out, err
}

// Route reads one route.
func (e *Edge) Route(a netip.Addr) (Route, bool, error) {
	k, err := routeKeyOf(a)
	if err != nil {
		return Route{}, false, err
	}
	var v edgeEipRoute
	if err := e.objs.EipRoutes.Lookup(&k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Route{}, false, nil
		}
		return Route{}, false, err
	}
	if v.Flags&routeVIP != 0 {
		return Route{}, false, nil // a VIP, not an EIP
	}
	p, err := e.prevOf(&k, &v)
	if err != nil {
		return Route{}, false, err
	}
	return routeOf(v, p, e.hostAddr), true, nil
}

func (e *Edge) ResetEIPStats(idx uint32) error { return resetEIPStats(e.objs.EipStats, idx) }

func (e *Edge) EIPStats(idx uint32) (Counters, error) { return readEIPStats(e.objs.EipStats, idx) }

// ReadEIPStats reads counter slots 0..len(out)-1 in batches.
func (e *Edge) ReadEIPStats(out []Counters) error { return readEIPStatsBatch(e.objs.EipStats, out) }

func (e *Edge) Stats() (map[string]Count, error) { return readStats(e.objs.Stats) }

// Spoof-source classes (bpf/lib/consts.h SPOOF_*): which counter a packet
// from the Internet side with such a source is dropped under.
const (
	SpoofOwn      uint32 = 1 // a set prefix, EIP or VIP of the region: drop_spoof_own
	SpoofUnderlay uint32 = 2 // the underlay: drop_spoof_underlay
)

// SetSpoofPrefixes replaces the source prefixes the edge drops from the
// Internet side (edge_spoof_src, and edge_spoof_src6 for IPv6 prefixes):
// own are the region's set prefixes, EIPs and VIPs, underlay the hosts'
// and edges' underlay addresses or prefixes. A prefix in both is counted
// as underlay. The non-routable ranges are fixed in the program and need
// no entry.
func (e *Edge) SetSpoofPrefixes(own, underlay []netip.Prefix) error {
	want := map[edgeLpm4Key]uint32{}
	want6 := map[edgeLpm6Key]uint32{}
	for _, l := range []struct {
		ps    []netip.Prefix
		class uint32
	}{{own, SpoofOwn}, {underlay, SpoofUnderlay}} {
		for _, p := range l.ps {
			if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				return fmt.Errorf("anti-spoofing prefix %v: not an IPv4 or IPv6 prefix", p)
			}
			if p.Addr().Is6() {
				ip, _, _ := addrTo(p.Masked().Addr())
				want6[edgeLpm6Key{Prefixlen: uint32(p.Bits()), Addr: ip}] = l.class
				continue
			}
			b := p.Masked().Addr().As4()
			want[edgeLpm4Key{Prefixlen: uint32(p.Bits()), Addr: binary.LittleEndian.Uint32(b[:])}] = l.class
		}
	}
	if len(want) > int(e.objs.EdgeSpoofSrc.MaxEntries()) {
		return fmt.Errorf("anti-spoofing prefixes: %d, the map holds %d", len(want), e.objs.EdgeSpoofSrc.MaxEntries())
	}
	m6 := e.objs.EdgeSpoofSrc6
	if m6 == nil && len(want6) > 0 {
		return fmt.Errorf("anti-spoofing prefixes: %d IPv6, this program has no IPv6 trie (edge_spoof_src6)", len(want6))
	}
	if m6 != nil && len(want6) > int(m6.MaxEntries()) {
		return fmt.Errorf("anti-spoofing prefixes: %d IPv6, the map holds %d", len(want6), m6.MaxEntries())
	}
	for k, c := range want {
		if err := e.objs.EdgeSpoofSrc.Update(k, c, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write anti-spoofing prefix %v/%d: %w", netip.AddrFrom4(le4(k.Addr)), k.Prefixlen, err)
		}
	}
	for k, c := range want6 {
		if err := m6.Update(k, c, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write anti-spoofing prefix %v/%d: %w", addrFrom(k.Addr, 10), k.Prefixlen, err)
		}
	}
	if err := deleteStale[edgeLpm4Key, uint32](e.objs.EdgeSpoofSrc, func(k edgeLpm4Key) bool { _, ok := want[k]; return ok }); err != nil {
		return err
	}
	if m6 == nil {
		return nil
	}
	return deleteStale[edgeLpm6Key, uint32](m6, func(k edgeLpm6Key) bool { _, ok := want6[k]; return ok })
}

// SpoofPrefixes reads the anti-spoofing tries back: every prefix with
// its class (SpoofOwn, SpoofUnderlay), IPv4 and IPv6.
func (e *Edge) SpoofPrefixes() (map[netip.Prefix]uint32, error) {
	out := map[netip.Prefix]uint32{}
	var k edgeLpm4Key
	var c uint32
	it := e.objs.EdgeSpoofSrc.Iterate()
	for it.Next(&k, &c) {
		out[netip.PrefixFrom(netip.AddrFrom4(le4(k.Addr)), int(k.Prefixlen))] = c
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list anti-spoofing prefixes: %w", err)
	}
	if e.objs.EdgeSpoofSrc6 == nil {
		return out, nil
	}
	var k6 edgeLpm6Key
	it = e.objs.EdgeSpoofSrc6.Iterate()
	for it.Next(&k6, &c) {
		out[netip.PrefixFrom(addrFrom(k6.Addr, 10), int(k6.Prefixlen))] = c
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list IPv6 anti-spoofing prefixes: %w", err)
	}
	return out, nil
}

func le4(v uint32) [4]byte {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return b
}

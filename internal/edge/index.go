package edge

import (
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
)

// index is the part of the desired state an edge needs, kept small enough
// for millions of EIPs: an IPv4 EIP costs a map entry of 4 bytes of key and
// the IDs of its interned host and guest names, 8 bytes (about 25 bytes
// with the map's overhead; two strings were 32 bytes and ~80 with it),
// and as much again in byGuest, where a full model.State costs over 300.
type index struct {
	// self is the edge's name: it builds the tables of the services its
	// set serves only (lbServices). "" (tests of the plan alone): every
	// service.
	self string
	// hosts are whole Host objects (an edge following the whole region,
	// --follow-share=false, or a set scope of an older controller);
	// copied are the hosts as the guest copies of the edge's set scope
	// give them (model.GuestCopy: the underlay and the guests the set
	// routes to). A guest is looked up in hosts, then in copied (lookup).
	hosts  map[string]*hostEntry
	copied map[string]*hostEntry
	// byGuest: the EIP bound to each guest, built at the first commit
	// after the index holds a guest copy (ensureByGuest; nil before: an
	// edge of whole hosts does not pay ~25 bytes per EIP for it). It is
	// built between batches, when one EIP is bound to each guest: in
	// the middle of one, a swap of two EIPs' guests holds two.
	byGuest map[binding][4]byte
	sets    map[string]*model.EdgeSet
	eips    map[[4]byte]binding // bound EIPs only
	// eips6 and byGuest6: the same for IPv6 EIPs (a guest holds one EIP
	// of each family). Their own maps keep an IPv4 EIP's entry as small
	// as it was.
	eips6    map[[16]byte]binding
	byGuest6 map[binding][16]byte
	services map[string]*model.Service
	health   map[string]*model.Health
	// ids and names: the interned host and guest names, by name and by
	// ID (binding holds IDs: 8 bytes a binding rather than 32). Never
	// shrunk, as the strings they replace were not: a region has few
	// distinct names (guest names repeat from host to host).
	ids   map[string]nameID
	names []string
	// What the BGP announcement needs beyond the sets and services
	// (setplan): the EIPs pulled out into a dedicated set (few) and the
	// quarantined addresses.
	pulled      map[[4]byte]string
	quarantined map[[4]byte]bool
	// The same for IPv6 addresses.
	pulled6      map[[16]byte]string
	quarantined6 map[[16]byte]bool
	// The EIPs with rate limits (few: most EIPs have none).
	limits map[[4]byte]model.Limits
	// limits6: the same for IPv6 EIPs (edge_limits6).
	limits6 map[[16]byte]model.Limits
	// fw: the firewall rules (firewall.go); fwAddrs counts the rules
	// naming each address, fwSets the rules naming a set.
	fw      map[string]*model.FirewallRule
	fwAddrs map[netip.Addr]int
	fwSets  int
	// The bandwidth packages (bandwidth.go) and the package of each of
	// their EIPs.
	packages map[string]*model.BandwidthPackage
	bwOf     map[netip.Addr]string
	// prev: the previous binding of each bound EIP that has one (few: a
	// bind to another host sets it for the controller's drift grace;
	// drift.go).
	prev map[netip.Addr]model.PreviousBinding
}

type hostEntry struct {
	underlay netip.Addr
	guest    map[string]guestInfo // by guest name
	// guest6: the IPv6 addresses (address6) of the guests that have one,
	// by guest name (nil: none): an IPv6 VIP's backends are checked there.
	guest6 map[string][16]byte
}

// setGuest6 records (or forgets) guest name's IPv6 address.
func (e *hostEntry) setGuest6(name string, a netip.Addr) {
	if !a.Is6() || a.Is4In6() {
		delete(e.guest6, name)
		return
	}
	if e.guest6 == nil {
		e.guest6 = map[string][16]byte{}
	}
	e.guest6[name] = a.As16()
}

type guestInfo struct {
	addr [4]byte // IPv4 (guests are IPv4); netip.Addr would add 60 MB per million guests
	vsid uint32
}

// binding is an EIP's host and guest, as the IDs of their interned
// names (index.name).
type binding struct{ host, guest nameID }

// nameID is an interned name's index in index.names.
type nameID uint32

func newIndex() *index {
	return &index{hosts: map[string]*hostEntry{}, copied: map[string]*hostEntry{},
		sets: map[string]*model.EdgeSet{},
		eips: map[[4]byte]binding{}, eips6: map[[16]byte]binding{}, services: map[string]*model.Service{}, health: map[string]*model.Health{},
		ids: map[string]nameID{}, pulled: map[[4]byte]string{}, quarantined: map[[4]byte]bool{},
		pulled6: map[[16]byte]string{}, quarantined6: map[[16]byte]bool{},
		limits: map[[4]byte]model.Limits{}, limits6: map[[16]byte]model.Limits{},
		fw: map[string]*model.FirewallRule{}, fwAddrs: map[netip.Addr]int{},
		packages: map[string]*model.BandwidthPackage{}, bwOf: map[netip.Addr]string{},
		prev: map[netip.Addr]model.PreviousBinding{}}
}

// intern is s as the index keeps it (one copy of each name).
func (x *index) intern(s string) string { return x.names[x.id(s)] }

// id is s's ID, interning s if it is new.
func (x *index) id(s string) nameID {
	if v, ok := x.ids[s]; ok {
		return v
	}
	v := nameID(len(x.names))
	x.ids[s] = v
	x.names = append(x.names, s)
	return v
}

// name is the name of ID v.
func (x *index) name(v nameID) string { return x.names[v] }

// change says what a stored change touched.
type change struct {
	eip netip.Addr // one EIP (valid when set)
	// eip6: a guest's IPv6 EIP, when the change is its guest's (eip is
	// then its IPv4 one, if any).
	eip6 netip.Addr
	// host: the routes of this host's EIPs may change (its underlay or
	// guests changed, it appeared or it went); underlay: its underlay
	// address when the edge did not know it before (a new host, or one
	// that moved), whose next hop the edge should resolve before routing
	// to it (Reconciler.OnHosts).
	host     string
	underlay netip.Addr
	lb       bool // services, their health or hosts changed
	fw       bool // the firewall's plan may change
	spoof    bool // the anti-spoofing prefixes may change (sets, services, hosts)
	bw       bool // the packaged EIPs the edge carries may change (bandwidth.go)
}

// put records a validated object (model.DecodeStored).
func (x *index) put(kind, key string, o model.Object) change {
	switch o := o.(type) {
	case *model.EIP:
		if o.Address.Is6() {
			return putEIPIn(x, x.maps6(), o.Address.As16(), o)
		}
		if !o.Address.Is4() {
			return change{}
		}
		return putEIPIn(x, x.maps4(), o.Address.As4(), o)
	case *model.Host:
		e := &hostEntry{underlay: o.Underlay, guest: make(map[string]guestInfo, len(o.Guests))}
		for _, g := range o.Guests {
			if g.Address.Is4() {
				e.guest[x.intern(g.Name)] = guestInfo{addr: g.Address.As4(), vsid: g.VSID}
				e.setGuest6(x.intern(g.Name), g.Address6)
			}
		}
		name := x.intern(o.Name)
		c := change{host: name, lb: len(x.services) > 0, spoof: true, bw: len(x.bwOf) > 0}
		if old, ok := x.hosts[name]; !ok || old.underlay != o.Underlay {
			c.underlay = o.Underlay
		}
		x.hosts[name] = e
		return c
	case *model.GuestCopy:
		return x.putGuest(o)
	case *model.EdgeSet:
		x.sets[key] = o
		// lb: the set may now serve (or stop serving) services' VIPs.
		return change{lb: len(x.services) > 0, fw: x.fwSets > 0, spoof: true, bw: len(x.bwOf) > 0} // applyConfig reads the sets at every commit
	case *model.Service:
		// The firewall sees a service as its VIP and its set only: a
		// change of its pools or listeners leaves the plan alone.
		old := x.services[key]
		x.services[key] = o
		fw := old == nil || old.VIP != o.VIP || old.Set != o.Set
		return change{lb: true, fw: fw, spoof: true}
	case *model.Health:
		x.health[key] = o
		return change{lb: true}
	case *model.Quarantine:
		if o.Address.Is4() {
			x.quarantined[o.Address.As4()] = true
		} else if o.Address.Is6() {
			x.quarantined6[o.Address.As16()] = true
		}
		_, packaged := x.bwOf[o.Address]
		// A quarantined VIP's tables move to the quarantine set's edges.
		return change{lb: x.isVIP(o.Address), fw: x.fwSets > 0, bw: packaged}
	case *model.FirewallRule:
		x.putFirewall(key, o)
		return change{fw: true}
	case *model.BandwidthPackage:
		x.putPackage(key, o)
		return change{bw: true}
	}
	return change{}
}

func (x *index) delete(kind, key string) change {
	switch kind {
	case model.KindEIP:
		a, err := netip.ParseAddr(key)
		if err == nil && a.Is6() && a.Zone() == "" {
			return deleteEIPIn(x, x.maps6(), a.As16(), a)
		}
		if err != nil || !a.Is4() {
			return change{}
		}
		return deleteEIPIn(x, x.maps4(), a.As4(), a)
	case model.KindHost:
		delete(x.hosts, key)
		return change{host: key, lb: len(x.services) > 0, spoof: true, bw: len(x.bwOf) > 0}
	case model.KindGuestCopy:
		return x.deleteGuest(key)
	case model.KindEdgeSet:
		delete(x.sets, key)
		return change{lb: len(x.services) > 0, fw: x.fwSets > 0, spoof: true, bw: len(x.bwOf) > 0}
	case model.KindService:
		delete(x.services, key)
		return change{lb: true, fw: true, spoof: true}
	case model.KindHealth:
		delete(x.health, key)
		return change{lb: true}
	case model.KindQuarantine:
		a, err := netip.ParseAddr(key)
		if err == nil && a.Is4() {
			delete(x.quarantined, a.As4())
		} else if err == nil && a.Is6() {
			delete(x.quarantined6, a.As16())
		}
		_, packaged := x.bwOf[a]
		return change{lb: err == nil && x.isVIP(a), fw: x.fwSets > 0, bw: packaged}
	case model.KindFirewallRule:
		x.putFirewall(key, nil)
		return change{fw: true}
	case model.KindBandwidthPackage:
		x.putPackage(key, nil)
		return change{bw: true}
	}
	return change{}
}

// putPackage records package key (nil: deleted) and its EIPs.
func (x *index) putPackage(key string, p *model.BandwidthPackage) {
	if old := x.packages[key]; old != nil {
		for _, e := range old.EIPs {
			if x.bwOf[e.Address] == key {
				delete(x.bwOf, e.Address)
			}
		}
	}
	if p == nil {
		delete(x.packages, key)
		return
	}
	x.packages[key] = p
	for _, e := range p.EIPs {
		x.bwOf[e.Address] = key
	}
}

// setplan is the input of setplan (what each set announces) from the
// index.
func (x *index) setplan() setplan.Input {
	in := setplan.Input{Sets: x.sets, PulledOut: make(map[netip.Addr]string, len(x.pulled)+len(x.pulled6)),
		Quarantined: make(map[netip.Addr]bool, len(x.quarantined)+len(x.quarantined6))}
	for k, set := range x.pulled {
		in.PulledOut[netip.AddrFrom4(k)] = set
	}
	for k, set := range x.pulled6 {
		in.PulledOut[netip.AddrFrom16(k)] = set
	}
	for _, v := range x.services {
		if v.Set != "" {
			in.PulledOut[v.VIP] = v.Set
		}
	}
	for k := range x.quarantined {
		in.Quarantined[netip.AddrFrom4(k)] = true
	}
	for k := range x.quarantined6 {
		in.Quarantined[netip.AddrFrom16(k)] = true
	}
	return in
}

// isVIP says whether a is a service's VIP.
func (x *index) isVIP(a netip.Addr) bool {
	for _, v := range x.services {
		if v.VIP == a {
			return true
		}
	}
	return false
}

// lbServices are the services whose tables this edge builds: those whose
// VIP's traffic may reach its set from upstream (setplan.Carriers: the set
// serving the VIP now, and the sets that would without its quarantine or
// pull-out, which carry it while routes converge). Building every
// service's tables on every edge let one large service exhaust the memory
// of every edge of the region (issue 17). An edge in no set receives no
// traffic and builds nothing.
func (x *index) lbServices() map[string]*model.Service {
	if x.self == "" {
		return x.services
	}
	set, _, ok := x.edgeSetOf(x.self)
	if !ok {
		return nil
	}
	in := x.setplan()
	out := make(map[string]*model.Service, len(x.services))
	for name, v := range x.services {
		if c := in.Carriers(v.VIP); slices.Contains(c[:], set.Name) {
			out[name] = v
		}
	}
	return out
}

// putGuest records a guest copy of the edge's set scope. Only the EIP
// bound to the guest may route differently (and the services it backs):
// a rebind's new guest comes with the EIP's own change, so no pass over
// the bindings is needed, unlike for a whole host.
func (x *index) putGuest(o *model.GuestCopy) change {
	if !o.Guest.Address.Is4() {
		return change{} // IPv4 data plane (validated IPv4 already)
	}
	b := binding{x.id(o.Host), x.id(o.Guest.Name)}
	name := x.name(b.host)
	c := change{lb: len(x.services) > 0 && x.backs(b), bw: len(x.bwOf) > 0}
	e, ok := x.copied[name]
	if !ok {
		e = &hostEntry{guest: map[string]guestInfo{}}
		x.copied[name] = e
	}
	if !ok || e.underlay != o.Underlay {
		// A new underlay to resolve before routing to it, and to accept
		// from the underlay side (anti-spoofing).
		e.underlay, c.underlay, c.spoof = o.Underlay, o.Underlay, true
		if ok {
			// The host moved: its other guests' routes too (the
			// controller rewrites every copy of a moved host in one
			// commit; this covers one that arrives alone).
			c.host = name
		}
	}
	e.guest[x.name(b.guest)] = guestInfo{addr: o.Guest.Address.As4(), vsid: o.Guest.VSID}
	e.setGuest6(x.name(b.guest), o.Guest.Address6)
	x.boundEIP(b, &c)
	return c
}

// boundEIP notes in c the EIP bound to guest b: from byGuest, or, before
// byGuest is built, every EIP of b's host (the commit's pass over the
// bindings).
func (x *index) boundEIP(b binding, c *change) {
	if x.byGuest == nil {
		c.host = x.name(b.host)
		return
	}
	if k, ok := x.byGuest[b]; ok {
		c.eip = netip.AddrFrom4(k)
	}
	if k, ok := x.byGuest6[b]; ok {
		c.eip6 = netip.AddrFrom16(k)
	}
}

// ensureByGuest builds byGuest once the index holds guest copies; the
// Reconciler calls it after a batch.
func (x *index) ensureByGuest() {
	if x.byGuest != nil || len(x.copied) == 0 {
		return
	}
	x.byGuest = make(map[binding][4]byte, len(x.eips))
	for k, b := range x.eips {
		x.byGuest[b] = k
	}
	x.byGuest6 = make(map[binding][16]byte, len(x.eips6))
	for k, b := range x.eips6 {
		x.byGuest6[b] = k
	}
}

// deleteGuest forgets a guest copy.
func (x *index) deleteGuest(key string) change {
	host, guest, ok := model.SplitGuestCopyKey(key)
	if !ok {
		return change{}
	}
	b := binding{x.id(host), x.id(guest)}
	c := change{lb: len(x.services) > 0 && x.backs(b), bw: len(x.bwOf) > 0}
	if e, ok := x.copied[host]; ok {
		delete(e.guest, guest)
		if len(e.guest) == 0 {
			delete(x.copied, host)
			c.spoof = true
		}
	}
	x.boundEIP(b, &c)
	return c
}

// backs says whether guest b is a backend of one of the services.
func (x *index) backs(b binding) bool {
	for _, v := range x.services {
		for _, p := range v.Pools {
			for _, be := range p.Backends {
				if be.Host == x.name(b.host) && be.Guest == x.name(b.guest) {
					return true
				}
			}
		}
	}
	return false
}

// lookup finds a guest: in the guest copies, then in the whole hosts. A
// guest copy comes from a controller of this release, which keeps it
// current; a whole host in a set scope is an older controller's, which
// the repair replaces (docs/scale.md "Scopes").
func (x *index) lookup(host, guest string) (netip.Addr, guestInfo, bool) {
	if h, ok := x.copied[host]; ok {
		if g, ok := h.guest[guest]; ok {
			return h.underlay, g, true
		}
	}
	if h, ok := x.hosts[host]; ok {
		if g, ok := h.guest[guest]; ok {
			return h.underlay, g, true
		}
	}
	return netip.Addr{}, guestInfo{}, false
}

// guest6Of is the IPv6 address of guest on host, as lookup finds the
// guest (the invalid Addr: none).
func (x *index) guest6Of(host, guest string) netip.Addr {
	for _, m := range []map[string]*hostEntry{x.copied, x.hosts} {
		if h, ok := m[host]; ok {
			if _, ok := h.guest[guest]; ok {
				if a, ok := h.guest6[guest]; ok {
					return netip.AddrFrom16(a)
				}
				return netip.Addr{}
			}
		}
	}
	return netip.Addr{}
}

// underlays calls f with the underlay address of every host the edge
// knows (whole or by its guests; a host may come twice).
func (x *index) underlays(f func(netip.Addr)) {
	for _, h := range x.hosts {
		f(h.underlay)
	}
	for _, h := range x.copied {
		f(h.underlay)
	}
}

// want is the route an EIP must have, if any.
func (x *index) want(k [4]byte) (Want, bool) {
	b, ok := x.eips[k]
	if !ok {
		return Want{}, false
	}
	return x.wantOf(b)
}

// want6 is the route an IPv6 EIP must have, if any: to its guest's host
// over the (IPv4) underlay with the guest's VSID, as for IPv4 (the
// host's agent translates it to the guest's IPv6 address).
func (x *index) want6(k [16]byte) (Want, bool) {
	b, ok := x.eips6[k]
	if !ok {
		return Want{}, false
	}
	return x.wantOf(b)
}

// wantAddr is want or want6, by a's family.
func (x *index) wantAddr(a netip.Addr) (Want, bool) {
	if a.Is6() {
		return x.want6(a.As16())
	}
	return x.want(a.As4())
}

// wantOf is the route to the guest of binding b.
func (x *index) wantOf(b binding) (Want, bool) {
	u, g, ok := x.lookup(x.name(b.host), x.name(b.guest))
	if !ok {
		return Want{}, false
	}
	return Want{Host: u, VSID: g.vsid}, true
}

// boundTo adds to out the EIPs bound to one of hosts: one pass over the
// bindings, however many hosts changed.
func (x *index) boundTo(hosts map[string]struct{}, out map[netip.Addr]struct{}) {
	for k, b := range x.eips {
		if _, ok := hosts[x.name(b.host)]; ok {
			out[netip.AddrFrom4(k)] = struct{}{}
		}
	}
	for k, b := range x.eips6 {
		if _, ok := hosts[x.name(b.host)]; ok {
			out[netip.AddrFrom16(k)] = struct{}{}
		}
	}
}

// edgeSetOf finds the set an edge belongs to.
func (x *index) edgeSetOf(name string) (*model.EdgeSet, model.EdgeNode, bool) {
	for _, s := range x.sets {
		for _, e := range s.Edges {
			if e.Name == name {
				return s, e, true
			}
		}
	}
	return nil, model.EdgeNode{}, false
}

// spoofPrefixes are the sources the edge refuses from the Internet side,
// sorted: own, every set's prefixes (IPv4 and IPv6: the edge's IPv6 trie
// takes the IPv6 ones) and every service's VIP; underlay, every host's
// and every edge's underlay address. EIPs lie in their sets' prefixes.
func (x *index) spoofPrefixes() (own, underlay []netip.Prefix) {
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
	for _, set := range x.sets {
		for _, p := range set.Prefixes {
			if p.IsValid() {
				own = append(own, p.Masked())
			}
		}
		for _, e := range set.Edges {
			if e.Underlay.IsValid() {
				underlay = append(underlay, host(e.Underlay))
			}
			if e.Underlay6.IsValid() {
				underlay = append(underlay, host(e.Underlay6))
			}
		}
	}
	for _, svc := range x.services {
		if svc.VIP.IsValid() {
			own = append(own, host(svc.VIP))
		}
	}
	x.underlays(func(u netip.Addr) {
		if u.IsValid() {
			underlay = append(underlay, host(u))
		}
	})
	cmp := func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	}
	slices.SortFunc(own, cmp)
	slices.SortFunc(underlay, cmp)
	return slices.Compact(own), slices.Compact(underlay)
}

// eipMaps are the index's EIP maps of one family: IPv4 EIPs keyed by
// their 4 bytes, IPv6 ones by their 16 (an IPv4 entry stays as small).
type eipMaps[K comparable] struct {
	eips    map[K]binding
	pulled  map[K]string
	limits  map[K]model.Limits
	byGuest map[binding]K // nil until built
}

func (x *index) maps4() eipMaps[[4]byte] {
	return eipMaps[[4]byte]{x.eips, x.pulled, x.limits, x.byGuest}
}

func (x *index) maps6() eipMaps[[16]byte] {
	return eipMaps[[16]byte]{x.eips6, x.pulled6, x.limits6, x.byGuest6}
}

// putEIPIn records EIP o, keyed k in its family's maps m: its binding,
// its pull-out, its rate limits. The firewall sees an EIP only as routed
// or not and as pulled into a set or not: a binding moved to another
// host or new rate limits leave its plan alone (no rebuild of every
// rule).
func putEIPIn[K comparable](x *index, m eipMaps[K], k K, o *model.EIP) change {
	old, wasRouted := m.eips[k]
	wasPulled := m.pulled[k]
	if o.Set != "" {
		m.pulled[k] = x.intern(o.Set)
	} else {
		delete(m.pulled, k)
	}
	if o.Limits != nil {
		m.limits[k] = *o.Limits
	} else {
		delete(m.limits, k)
	}
	if wasRouted && m.byGuest != nil && m.byGuest[old] == k {
		delete(m.byGuest, old)
	}
	if o.Binding == nil {
		delete(m.eips, k)
	} else {
		b := binding{x.id(o.Binding.Host), x.id(o.Binding.Guest)}
		m.eips[k] = b
		if m.byGuest != nil {
			m.byGuest[b] = k
		}
	}
	if o.Binding != nil && o.Previous != nil {
		x.prev[o.Address] = *o.Previous
	} else {
		delete(x.prev, o.Address)
	}
	_, routed := m.eips[k]
	fw := (routed != wasRouted || m.pulled[k] != wasPulled) && x.fwTouches(o.Address)
	_, packaged := x.bwOf[o.Address]
	return change{eip: o.Address, fw: fw, bw: packaged}
}

// deleteEIPIn forgets EIP a, keyed k in its family's maps m.
func deleteEIPIn[K comparable](x *index, m eipMaps[K], k K, a netip.Addr) change {
	if b, ok := m.eips[k]; ok && m.byGuest != nil && m.byGuest[b] == k {
		delete(m.byGuest, b)
	}
	delete(m.eips, k)
	delete(m.pulled, k)
	delete(m.limits, k)
	delete(x.prev, a)
	_, packaged := x.bwOf[a]
	return change{eip: a, fw: x.fwTouches(a), bw: packaged}
}

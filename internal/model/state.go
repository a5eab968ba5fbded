package model

import (
	"fmt"
	"maps"
	"net/netip"
	"time"
)

type guestRef struct{ host, guest string }

// State is the whole desired state with the indexes the referential checks
// need. Put and Delete check a change against everything else and apply it,
// returning an undo function so a batch can be rolled back whole.
type State struct {
	AZs      map[string]*AZ
	Hosts    map[string]*Host
	EdgeSets map[string]*EdgeSet
	EIPs     map[string]*EIP
	Services map[string]*Service
	// Quarantines by address (sets.go).
	Quarantines map[string]*Quarantine
	// FirewallRules by name (firewall.go).
	FirewallRules map[string]*FirewallRule
	// BandwidthPackages by name (bandwidth.go).
	BandwidthPackages map[string]*BandwidthPackage
	// DDoSPolicies by name: "region" or an edge set's (ddospolicy.go).
	DDoSPolicies map[string]*DDoSPolicy
	// DNSZones and GSLBRecords by name (dns.go).
	DNSZones    map[string]*DNSZone
	GSLBRecords map[string]*GSLBRecord
	// Health holds the controller's verdicts by service name; it is
	// changed with Set and Remove only (Put and Delete refuse it).
	Health map[string]*Health

	bound     map[guestRef]string   // guest -> IPv4 EIP bound to it
	bound6    map[guestRef]string   // guest -> IPv6 EIP bound to it
	hostEIPs  map[string]int        // host -> number of EIPs bound to it
	underlays map[netip.Addr]string // underlay address (an edge's underlay6 too) -> owner ("host X", "edge S/E")
	ul6Hosts  map[string]bool       // hosts whose underlay is IPv6
	edges     map[string]string     // edge name -> set
	vips      map[netip.Addr]string // VIP -> service
	// backendOf: guest -> service -> how many of the service's backends
	// are that guest (inner maps are never empty).
	backendOf map[guestRef]map[string]int
	bwOf      map[netip.Addr]string // EIP -> bandwidth package listing it
	draining  map[string]time.Time  // EIP with a Previous -> its Until
}

// NewState returns an empty state.
func NewState() *State {
	s := &State{
		bound: map[guestRef]string{}, bound6: map[guestRef]string{}, hostEIPs: map[string]int{}, underlays: map[netip.Addr]string{}, ul6Hosts: map[string]bool{}, edges: map[string]string{},
		vips: map[netip.Addr]string{}, backendOf: map[guestRef]map[string]int{}, bwOf: map[netip.Addr]string{},
		draining: map[string]time.Time{},
	}
	for _, k := range registry {
		k.initState(s)
	}
	return s
}

// Clone returns a copy of the state that shares the objects (which are
// never modified in place: a change replaces the object) but none of the
// maps, so either copy can change without affecting the other.
func (s *State) Clone() *State {
	c := &State{
		bound: maps.Clone(s.bound), bound6: maps.Clone(s.bound6), hostEIPs: maps.Clone(s.hostEIPs), underlays: maps.Clone(s.underlays), ul6Hosts: maps.Clone(s.ul6Hosts), edges: maps.Clone(s.edges),
		vips: maps.Clone(s.vips), backendOf: make(map[guestRef]map[string]int, len(s.backendOf)), bwOf: maps.Clone(s.bwOf),
		draining: maps.Clone(s.draining),
	}
	for _, k := range registry {
		k.cloneInto(c, s)
	}
	for g, m := range s.backendOf {
		c.backendOf[g] = maps.Clone(m)
	}
	return c
}

// Get returns an object by kind and key.
func (s *State) Get(kind, key string) (Object, bool) {
	k, err := lookupKind(kind)
	if err != nil {
		return nil, false
	}
	return k.get(s, key)
}

// Keys lists the keys of a kind in order (EIPs by address, the others by
// name).
func (s *State) Keys(kind string) []string {
	k, err := lookupKind(kind)
	if err != nil {
		return nil
	}
	return k.keys(s)
}

// Len is the number of objects of a kind.
func (s *State) Len(kind string) int {
	k, err := lookupKind(kind)
	if err != nil {
		return 0
	}
	return k.count(s)
}

// BoundEIP returns an EIP bound to a guest: its IPv4 EIP, else its IPv6
// one (BoundEIPs gives both).
func (s *State) BoundEIP(host, guest string) (string, bool) {
	if e, ok := s.bound[guestRef{host, guest}]; ok {
		return e, true
	}
	e, ok := s.bound6[guestRef{host, guest}]
	return e, ok
}

// BoundEIPs returns the IPv4 and the IPv6 EIP bound to a guest ("":
// none): a guest holds at most one of each family.
func (s *State) BoundEIPs(host, guest string) (v4, v6 string) {
	g := guestRef{host, guest}
	return s.bound[g], s.bound6[g]
}

// Draining returns the EIPs that have a Previous binding, by key, with
// its Until (a copy; few: the EIPs moved within the controller's drift
// grace, and those whose clearing write has not come yet).
func (s *State) Draining() map[string]time.Time { return maps.Clone(s.draining) }

// boundOf is the index of the EIPs of a's family bound to guests.
func (s *State) boundOf(a netip.Addr) map[guestRef]string {
	if a.Is6() {
		return s.bound6
	}
	return s.bound
}

// EdgeSetOf returns the set an edge belongs to and the edge.
func (s *State) EdgeSetOf(edge string) (*EdgeSet, EdgeNode, bool) {
	set, ok := s.edges[edge]
	if !ok {
		return nil, EdgeNode{}, false
	}
	es := s.EdgeSets[set]
	for _, e := range es.Edges {
		if e.Name == edge {
			return es, e, true
		}
	}
	return nil, EdgeNode{}, false
}

func (s *State) covered(a netip.Addr) bool {
	for _, es := range s.EdgeSets {
		if es.Contains(a) {
			return true
		}
	}
	return false
}

// Put checks o against the state and stores it. On failure the state is
// unchanged and the errors name the fields at fault.
func (s *State) Put(o Object) (undo func(), err error) {
	if es := o.Validate(); len(es) > 0 {
		return nil, es
	}
	k := kindOfObject(o)
	if k == nil {
		return nil, fmt.Errorf("unknown object %T", o)
	}
	return k.put(s, o)
}

// checkHost: a host's AZ exists, its underlay address is its own, and no
// guest it drops is still bound to an EIP or a backend of a service.
func (s *State) checkHost(h, old *Host, had bool) Errors {
	var es Errors
	if _, ok := s.AZs[h.AZ]; !ok {
		es.add("az", "AZ %q does not exist", h.AZ)
	}
	if owner, ok := s.underlays[h.Underlay]; ok && owner != "host "+h.Name {
		es.add("underlay", "%v is already the underlay address of %s", h.Underlay, owner)
	}
	if set, q, ok := s.announcedBy(h.Underlay, ""); ok {
		es.add("underlay", "%v lies in %v announced by set %q", h.Underlay, q, set)
	}
	// A host of the IPv6 underlay is reached by every edge (any set's
	// addresses may be bound to its guests): each needs its underlay6.
	if h.Underlay.Is6() {
		if set, e, ok := s.edgeWithoutUnderlay6(); ok {
			es.add("underlay", "%v is an IPv6 underlay address: every edge needs an underlay6 to reach the host, and edge %s/%s has none", h.Underlay, set, e)
		}
	}
	if had {
		for _, g := range old.Guests {
			if now, still := h.Guest(g.Name); still {
				if eip, bound := s.bound6[guestRef{h.Name, g.Name}]; bound && !now.Address6.IsValid() {
					es.add("guests", "guest %q is bound to the IPv6 EIP %s, translated to its address6: unbind it before removing the guest's address6", g.Name, eip)
				}
				if !now.Address6.IsValid() {
					if svc, ok := s.v6ServiceOfGuest(h.Name, g.Name); ok {
						es.add("guests", "guest %q is a backend of service %s, whose IPv6 VIP is translated to its address6: remove it from the pools before removing the guest's address6", g.Name, svc)
					}
				}
				continue
			}
			if eip, bound := s.BoundEIP(h.Name, g.Name); bound {
				es.add("guests", "guest %q is bound to EIP %s: unbind it before removing the guest", g.Name, eip)
			}
			if svc, n := s.serviceOfGuest(h.Name, g.Name); n > 0 {
				es.add("guests", "guest %q is a backend of service %s%s: remove it from the pools first", g.Name, svc, more(n))
			}
		}
	}
	return es
}

// indexHost keeps the underlay index and the hosts of the IPv6 underlay.
func (s *State) indexHost(h *Host, add bool) {
	if add {
		s.underlays[h.Underlay] = "host " + h.Name
		if h.Underlay.Is6() {
			s.ul6Hosts[h.Name] = true
		}
	} else {
		delete(s.underlays, h.Underlay)
		delete(s.ul6Hosts, h.Name)
	}
}

// edgeWithoutUnderlay6 is the first edge (by set and edge name) with no
// underlay6.
func (s *State) edgeWithoutUnderlay6() (set, edge string, ok bool) {
	for _, name := range sortedKeys(s.EdgeSets) {
		for _, e := range s.EdgeSets[name].Edges {
			if !e.Underlay6.IsValid() {
				return name, e.Name, true
			}
		}
	}
	return "", "", false
}

// anUl6Host is a host of the IPv6 underlay (the first by name).
func (s *State) anUl6Host() (string, bool) {
	if len(s.ul6Hosts) == 0 {
		return "", false
	}
	return sortedKeys(s.ul6Hosts)[0], true
}

func (s *State) checkDeleteAZ(a *AZ) error {
	for _, name := range sortedKeys(s.Hosts) {
		if s.Hosts[name].AZ == a.Name {
			return &ConflictError{Msg: fmt.Sprintf("AZ %s still has host %s", a.Name, name)}
		}
	}
	return nil
}

func (s *State) checkDeleteHost(h *Host) error {
	if s.hostEIPs[h.Name] > 0 {
		n, low := s.eipsWhere(func(e *EIP) bool { return e.Binding != nil && e.Binding.Host == h.Name })
		return &ConflictError{Msg: fmt.Sprintf("host %s has %d bound EIP(s), the lowest %s: unbind them first", h.Name, n, low)}
	}
	if svc, n := s.serviceOfHost(h); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("host %s has guests that are backends of service %s%s: remove them from the pools first", h.Name, svc, more(n))}
	}
	return nil
}

// checkEdgeSet: an edge belongs to one set, underlay addresses are unique,
// and no prefix is announced by two sets.
func (s *State) checkEdgeSet(set, old *EdgeSet, had bool) Errors {
	var es Errors
	s.checkSetRoles(&es, set, old, had)
	for i, e := range set.Edges {
		if other, ok := s.edges[e.Name]; ok && other != set.Name {
			es.add(fmt.Sprintf("edges[%d].name", i), "edge %q already belongs to set %q", e.Name, other)
		}
		if owner, ok := s.underlays[e.Underlay]; ok && owner != "edge "+set.Name+"/"+e.Name {
			es.add(fmt.Sprintf("edges[%d].underlay", i), "%v is already the underlay address of %s", e.Underlay, owner)
		}
		if e.Underlay6.IsValid() {
			if owner, ok := s.underlays[e.Underlay6]; ok && owner != "edge "+set.Name+"/"+e.Name {
				es.add(fmt.Sprintf("edges[%d].underlay6", i), "%v is already the underlay address of %s", e.Underlay6, owner)
			}
		} else if h, ok := s.anUl6Host(); ok {
			es.add(fmt.Sprintf("edges[%d].underlay6", i), "required: host %s has an IPv6 underlay address (%v), which every edge reaches over IPv6", h, s.Hosts[h].Underlay)
		}
	}
	// Prefixes of two sets may not overlap: a /32 is pulled out through
	// EIP.Set or Service.Set into a dedicated set, so a prefix inside
	// another set's prefix is a mistake that splits its traffic.
	for i, p := range set.Prefixes {
		f := fmt.Sprintf("prefixes[%d]", i)
		for _, other := range s.EdgeSets {
			if other.Name == set.Name {
				continue
			}
			for _, q := range other.Prefixes {
				switch {
				case p == q:
					es.add(f, "%v is already announced by set %q", p, other.Name)
				case p.Overlaps(q):
					es.add(f, "%v overlaps %v announced by set %q (pull a /32 out with the EIP's or the service's set instead)", p, q, other.Name)
				}
			}
		}
		// Announcing the underlay, a router ID or a BGP next hop would
		// draw the edges' and hosts' own traffic into the data plane.
		if a, owner, ok := s.infraIn(p, set); ok {
			es.add(f, "%v contains %v, %s", p, a, owner)
		}
	}
	// A set announcing IPv6 /128s needs every BGP edge's IPv6 next hop.
	if a, ok := s.firstIPv6Served(set); ok {
		for i, e := range set.Edges {
			if e.BGP != nil && !e.BGP.NextHop6.IsValid() {
				es.add(fmt.Sprintf("edges[%d].bgp.nextHop6", i), "required: the set announces the IPv6 address %v", a)
			}
		}
	}
	// And the reverse: this set's edges' addresses may not lie in a prefix
	// another set announces.
	for i, e := range set.Edges {
		f := fmt.Sprintf("edges[%d]", i)
		if other, q, ok := s.announcedBy(e.Underlay, set.Name); ok {
			es.add(f+".underlay", "%v lies in %v announced by set %q", e.Underlay, q, other)
		}
		if other, q, ok := s.announcedBy(e.Underlay6, set.Name); ok {
			es.add(f+".underlay6", "%v lies in %v announced by set %q", e.Underlay6, q, other)
		}
		if e.BGP != nil {
			if other, q, ok := s.announcedBy(e.BGP.RouterID, set.Name); ok {
				es.add(f+".bgp.routerID", "%v lies in %v announced by set %q", e.BGP.RouterID, q, other)
			}
			if other, q, ok := s.announcedBy(e.BGP.NextHop, set.Name); ok {
				es.add(f+".bgp.nextHop", "%v lies in %v announced by set %q", e.BGP.NextHop, q, other)
			}
			if other, q, ok := s.announcedBy(e.BGP.NextHop6, set.Name); ok {
				es.add(f+".bgp.nextHop6", "%v lies in %v announced by set %q", e.BGP.NextHop6, q, other)
			}
		}
	}
	return es
}

// infraIn returns an underlay address of a host or an edge, or an edge's
// BGP router ID or next hop (IPv4 or IPv6), that p contains. set is the set being written:
// its edges count as they are in it, not as they are stored.
func (s *State) infraIn(p netip.Prefix, set *EdgeSet) (netip.Addr, string, bool) {
	for _, h := range s.Hosts {
		if p.Contains(h.Underlay) {
			return h.Underlay, "the underlay address of host " + h.Name, true
		}
	}
	sets := []*EdgeSet{set}
	for _, o := range s.EdgeSets {
		if o.Name != set.Name {
			sets = append(sets, o)
		}
	}
	for _, o := range sets {
		for _, e := range o.Edges {
			who := "edge " + o.Name + "/" + e.Name
			if p.Contains(e.Underlay) {
				return e.Underlay, "the underlay address of " + who, true
			}
			if p.Contains(e.Underlay6) {
				return e.Underlay6, "the IPv6 underlay address of " + who, true
			}
			if e.BGP == nil {
				continue
			}
			if p.Contains(e.BGP.RouterID) {
				return e.BGP.RouterID, "the BGP router ID of " + who, true
			}
			if p.Contains(e.BGP.NextHop) {
				return e.BGP.NextHop, "the BGP next hop of " + who, true
			}
			if p.Contains(e.BGP.NextHop6) {
				return e.BGP.NextHop6, "the BGP IPv6 next hop of " + who, true
			}
		}
	}
	return netip.Addr{}, "", false
}

// announcedBy returns the set (other than except) and prefix covering a.
func (s *State) announcedBy(a netip.Addr, except string) (string, netip.Prefix, bool) {
	if !a.IsValid() {
		return "", netip.Prefix{}, false
	}
	for _, o := range s.EdgeSets {
		if o.Name == except {
			continue
		}
		for _, q := range o.Prefixes {
			if q.Contains(a) {
				return o.Name, q, true
			}
		}
	}
	return "", netip.Prefix{}, false
}

// afterPutEdgeSet: shrinking the prefixes must not strand an EIP or a VIP.
func (s *State) afterPutEdgeSet(_, old *EdgeSet, had bool) error {
	if !had {
		return nil
	}
	if n, low := s.eipsWhere(func(e *EIP) bool { return old.Contains(e.Address) && !s.covered(e.Address) }); n > 0 {
		return Errors{{Field: "prefixes", Msg: fmt.Sprintf("%d EIP(s) would no longer be covered by any edge set, the lowest %s", n, low)}}
	}
	if n, low := s.servicesWhere(func(v *Service) bool { return old.Contains(v.VIP) && !s.covered(v.VIP) }); n > 0 {
		return Errors{{Field: "prefixes", Msg: fmt.Sprintf("the VIP of %d service(s) would no longer be covered by any edge set, the first %s (%v)", n, low, s.Services[low].VIP)}}
	}
	return nil
}

// afterDeleteEdgeSet: the last set covering an EIP or a VIP stays.
func (s *State) afterDeleteEdgeSet(o *EdgeSet) error {
	if n, low := s.eipsWhere(func(e *EIP) bool { return o.Contains(e.Address) && !s.covered(e.Address) }); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("edge set %s is the only one covering %d EIP(s), the lowest %s", o.Name, n, low)}
	}
	if n, low := s.servicesWhere(func(v *Service) bool { return o.Contains(v.VIP) && !s.covered(v.VIP) }); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("edge set %s is the only one covering the VIP of %d service(s), the first %s (%v)", o.Name, n, low, s.Services[low].VIP)}
	}
	return nil
}

func (s *State) indexEdges(set *EdgeSet, add bool) {
	for _, e := range set.Edges {
		if add {
			s.edges[e.Name] = set.Name
			s.underlays[e.Underlay] = "edge " + set.Name + "/" + e.Name
			if e.Underlay6.IsValid() {
				s.underlays[e.Underlay6] = "edge " + set.Name + "/" + e.Name
			}
		} else {
			delete(s.edges, e.Name)
			delete(s.underlays, e.Underlay)
			if e.Underlay6.IsValid() {
				delete(s.underlays, e.Underlay6)
			}
		}
	}
}

// checkEIP: an EIP lies in an edge set's prefix, is no VIP, and is bound
// to an existing guest that has no other EIP of its family (a guest holds
// one IPv4 and one IPv6 EIP at most); an IPv6 EIP's guest has an IPv6
// address (Guest.Address6) to translate it to.
func (s *State) checkEIP(e, _ *EIP, _ bool) Errors {
	var es Errors
	key := e.Key()
	if !s.covered(e.Address) {
		es.add("address", "%v is not inside a prefix of any edge set", e.Address)
	}
	s.checkPullOut(&es, e.Set, e.Address)
	if svc, ok := s.vips[e.Address]; ok {
		es.add("address", "%v is the VIP of service %s", e.Address, svc)
	}
	if b := e.Binding; b != nil {
		h, ok := s.Hosts[b.Host]
		if !ok {
			es.add("binding.host", "host %q does not exist", b.Host)
		} else if g, ok := h.Guest(b.Guest); !ok {
			es.add("binding.guest", "host %q has no guest %q", b.Host, b.Guest)
		} else {
			if other, ok := s.boundOf(e.Address)[guestRef{b.Host, b.Guest}]; ok && other != key {
				es.add("binding.guest", "guest %s/%s is already bound to EIP %s (a guest holds one EIP of each family, IPv4 and IPv6)", b.Host, b.Guest, other)
			}
			if e.Address.Is6() && !g.Address6.IsValid() {
				es.add("binding.guest", "guest %s/%s has no IPv6 address (address6) to translate the IPv6 EIP to: set the guest's address6 in host %s", b.Host, b.Guest, b.Host)
			}
		}
	}
	return es
}

// indexEIP keeps the binding indexes.
func (s *State) indexEIP(e *EIP, add bool) {
	if add {
		s.bindIndex(e)
	} else {
		s.unbindIndex(e)
	}
}

func (s *State) bindIndex(e *EIP) {
	if e != nil && e.Previous != nil {
		s.draining[e.Key()] = e.Previous.Until
	}
	if e == nil || e.Binding == nil {
		return
	}
	s.boundOf(e.Address)[guestRef{e.Binding.Host, e.Binding.Guest}] = e.Key()
	s.hostEIPs[e.Binding.Host]++
}

func (s *State) unbindIndex(e *EIP) {
	if e != nil && e.Previous != nil {
		delete(s.draining, e.Key())
	}
	if e == nil || e.Binding == nil {
		return
	}
	delete(s.boundOf(e.Address), guestRef{e.Binding.Host, e.Binding.Guest})
	if s.hostEIPs[e.Binding.Host]--; s.hostEIPs[e.Binding.Host] <= 0 {
		delete(s.hostEIPs, e.Binding.Host)
	}
}

// Delete checks that nothing refers to the object and removes it.
func (s *State) Delete(kind, key string) (undo func(), err error) {
	k, err := lookupKind(kind)
	if err != nil {
		return nil, err
	}
	o, ok := k.get(s, key)
	if !ok {
		return nil, &NotFoundError{Kind: kind, Key: key}
	}
	return k.del(s, o)
}

// NotFoundError: no such object.
type NotFoundError struct{ Kind, Key string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s %q not found", Singular(e.Kind), e.Key)
}

// ConflictError: the change contradicts other objects.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Set stores an object without referential checks, keeping the indexes
// right: for state read back from the store, which was checked on write.
func (s *State) Set(o Object) {
	if k := kindOfObject(o); k != nil {
		k.set(s, o)
	}
}

// Remove deletes an object without checks (see Set).
func (s *State) Remove(kind, key string) {
	k, err := lookupKind(kind)
	if err != nil {
		return
	}
	if o, ok := k.get(s, key); ok {
		k.remove(s, o)
	}
}

// eipsWhere counts the EIPs matching f and returns the lowest of them, so
// messages name the same EIP whatever the map order.
func (s *State) eipsWhere(f func(*EIP) bool) (n int, lowest netip.Addr) {
	for _, e := range s.EIPs {
		if f(e) {
			n++
			if !lowest.IsValid() || e.Address.Less(lowest) {
				lowest = e.Address
			}
		}
	}
	return n, lowest
}

// checkService: the VIP lies in an edge set's prefix, is no EIP and no
// other service's, and encap backends are existing guests. A backend may
// serve any number of services and VIP ports: the data planes translate
// replies by their connection (nat: the edge's lb_nat_conns) or flow
// (encap: the agent's agent_flows), not by the backend.
func (s *State) checkService(v, old *Service, had bool) Errors {
	var es Errors
	s.checkPullOut(&es, v.Set, v.VIP)
	if had && old.VIP != v.VIP {
		if _, ok := s.Quarantines[old.VIP.String()]; ok {
			es.add("vip", "the old VIP %v is quarantined: release it before changing the VIP", old.VIP)
		}
		if n, first := namedWhere(s.FirewallRules, func(f *FirewallRule) bool { return f.Address == old.VIP }); n > 0 {
			es.add("vip", "the old VIP %v is the destination of %d firewall rule(s), the first %s: change them before the VIP", old.VIP, n, first)
		}
	}
	if !s.covered(v.VIP) {
		es.add("vip", "%v is not inside a prefix of any edge set", v.VIP)
	}
	if _, ok := s.EIPs[v.VIP.String()]; ok {
		es.add("vip", "%v is an EIP; a VIP must not be one", v.VIP)
	}
	if other, ok := s.vips[v.VIP]; ok && other != v.Name {
		es.add("vip", "%v is already the VIP of service %s (one service per VIP)", v.VIP, other)
	}
	s.checkTableBudget(&es, v)
	if v.Mode == ModeEncap {
		for i, p := range v.Pools {
			for j, b := range p.Backends {
				f := fmt.Sprintf("pools[%d].backends[%d]", i, j)
				h, ok := s.Hosts[b.Host]
				if !ok {
					es.add(f+".host", "host %q does not exist", b.Host)
				} else if g, ok := h.Guest(b.Guest); !ok {
					es.add(f+".guest", "host %q has no guest %q", b.Host, b.Guest)
				} else if v.VIP.Is6() && !g.Address6.IsValid() {
					es.add(f+".guest", "guest %s/%s has no IPv6 address (address6) to translate the IPv6 VIP %v to: set the guest's address6 in host %s", b.Host, b.Guest, v.VIP, b.Host)
				}
			}
		}
	}
	return es
}

// indexService adds or removes a service's VIP and encap backends in the
// indexes.
func (s *State) indexService(v *Service, add bool) {
	if add {
		s.vips[v.VIP] = v.Name
	} else if s.vips[v.VIP] == v.Name {
		delete(s.vips, v.VIP)
	}
	if v.Mode != ModeEncap {
		return
	}
	for _, p := range v.Pools {
		for _, b := range p.Backends {
			g := guestRef{b.Host, b.Guest}
			m := s.backendOf[g]
			if add {
				if m == nil {
					m = map[string]int{}
					s.backendOf[g] = m
				}
				m[v.Name]++
				continue
			}
			if m[v.Name]--; m[v.Name] <= 0 {
				delete(m, v.Name)
			}
			if len(m) == 0 {
				delete(s.backendOf, g)
			}
		}
	}
}

// ServiceOfVIP returns the service whose VIP is a.
func (s *State) ServiceOfVIP(a netip.Addr) (string, bool) {
	v, ok := s.vips[a]
	return v, ok
}

// BackendOf lists, in order, the services that have a guest among their
// backends.
func (s *State) BackendOf(host, guest string) []string {
	return sortedKeys(s.backendOf[guestRef{host, guest}])
}

// v6ServiceOfGuest returns the first (by name) service with an IPv6 VIP
// that has a guest among its backends.
func (s *State) v6ServiceOfGuest(host, guest string) (string, bool) {
	for _, name := range sortedKeys(s.backendOf[guestRef{host, guest}]) {
		if v, ok := s.Services[name]; ok && v.VIP.Is6() {
			return name, true
		}
	}
	return "", false
}

// serviceOfGuest returns the first (by name) service a guest is a backend
// of and how many services it is a backend of.
func (s *State) serviceOfGuest(host, guest string) (string, int) {
	m := s.backendOf[guestRef{host, guest}]
	if len(m) == 0 {
		return "", 0
	}
	return sortedKeys(m)[0], len(m)
}

// serviceOfHost does the same for any guest of a host.
func (s *State) serviceOfHost(h *Host) (string, int) {
	all := map[string]bool{}
	for _, g := range h.Guests {
		for svc := range s.backendOf[guestRef{h.Name, g.Name}] {
			all[svc] = true
		}
	}
	if len(all) == 0 {
		return "", 0
	}
	return sortedKeys(all)[0], len(all)
}

// servicesWhere counts the services matching f and returns the first by
// name.
func (s *State) servicesWhere(f func(*Service) bool) (n int, first string) {
	return namedWhere(s.Services, f)
}

// namedWhere counts the objects of m matching f and returns the first
// name among them, so messages name the same object whatever the map
// order.
func namedWhere[V any](m map[string]V, f func(V) bool) (n int, first string) {
	for name, v := range m {
		if f(v) {
			n++
			if first == "" || name < first {
				first = name
			}
		}
	}
	return n, first
}

// more says how many others there are, if any.
func more(n int) string {
	if n > 1 {
		return fmt.Sprintf(" (and %d more)", n-1)
	}
	return ""
}

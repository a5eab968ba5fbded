package model

import (
	"fmt"
	"net/netip"
	"strings"
)

// Edge set roles (EdgeSet.Role).
const (
	// RolePrefix: the set announces its prefixes (the default).
	RolePrefix = ""
	// RoleDedicated: the set announces the /32 of every EIP and VIP
	// pulled out into it (EIP.Set, Service.Set), taking that address's
	// traffic from its prefix set: a hot EIP gets edges of its own.
	RoleDedicated = "dedicated"
	// RoleQuarantine: the region's one quarantine set announces the /32
	// of every quarantined address (Quarantine objects).
	RoleQuarantine = "quarantine"
)

// KindQuarantine is the kind of Quarantine objects.
const KindQuarantine = "quarantines"

// MaxSetEdges is how many edges one set may have: upstream routers spread
// a prefix over at most this many equal-cost paths (and the agents' choice
// of a set's members is sized for it, bpf/lib/consts.h EDGE_SET_MAX).
const MaxSetEdges = 32

// MaxBGPPeers bounds the sessions one edge opens.
const MaxBGPPeers = 16

// SetBGP is what the edges of a set share of their BGP speakers.
type SetBGP struct {
	// ASN is the edges' local AS number.
	ASN uint32 `json:"asn"`
	// HoldTime and Keepalive in seconds (0: 90 and 30, BGP's defaults).
	// The hold time is how long an upstream router keeps routes of an
	// edge that stopped without withdrawing them (killed, cable cut).
	HoldTime  uint16 `json:"holdTime,omitempty"`
	Keepalive uint16 `json:"keepalive,omitempty"`
}

// NodeBGP is one edge's BGP speaker.
type NodeBGP struct {
	// RouterID identifies the speaker (an IPv4 address, unique in the AS).
	RouterID netip.Addr `json:"routerID"`
	// NextHop is the address upstream routers send the set's traffic to:
	// this edge's Internet-side address.
	NextHop netip.Addr `json:"nextHop"`
	// NextHop6 is the IPv6 next hop of the set's IPv6 routes: this edge's
	// global IPv6 address on the routers' segment. Set, the speaker also
	// negotiates IPv6 unicast (MP-BGP, RFC 4760) on its sessions (still
	// over IPv4) and carries the set's IPv6 prefixes and IPv6 pull-outs
	// there; unset, it carries IPv4 only. Required on every BGP edge of
	// a set that owns IPv6 prefixes.
	NextHop6 netip.Addr `json:"nextHop6,omitzero"`
	Peers    []BGPPeer  `json:"peers"`
}

// BGPPeer is an upstream router the edge opens a session to. Edges only
// dial out: they never accept BGP connections. Its address, the
// session's transport, is IPv4 or IPv6 (a global address: no zone); a
// session carries IPv6 routes when the edge has a NextHop6, whatever its
// transport.
type BGPPeer struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn"`
	// Port of the peer (0: 179).
	Port uint16 `json:"port,omitempty"`
	// Password is the TCP MD5 signature key (RFC 2385) of the session. It
	// is write-only through the API: answers show RedactedSecret, and a
	// write giving RedactedSecret keeps the stored one (secrets.go).
	Password string `json:"password,omitempty"`
}

// Defaults of SetBGP.
const (
	DefaultHoldTime  = 90
	DefaultKeepalive = 30
)

// Timers returns the hold time and keepalive in seconds, defaults filled.
func (b *SetBGP) Timers() (hold, keepalive uint16) {
	hold, keepalive = b.HoldTime, b.Keepalive
	if hold == 0 {
		hold = DefaultHoldTime
	}
	if keepalive == 0 {
		keepalive = max(hold/3, 1)
	}
	return hold, keepalive
}

func checkASN(es *Errors, field string, asn uint32) {
	switch asn {
	case 0:
		es.add(field, "required (1-4294967294)")
	case 23456:
		es.add(field, "23456 is AS_TRANS (RFC 6793), not a real AS")
	case 4294967295:
		es.add(field, "4294967295 is reserved (RFC 7300)")
	}
}

func (b *SetBGP) validate(es *Errors, f string) {
	checkASN(es, f+".asn", b.ASN)
	if b.HoldTime != 0 && b.HoldTime < 3 {
		es.add(f+".holdTime", "%d s: the hold time is 0 (default 90) or at least 3 s (RFC 4271)", b.HoldTime)
	}
	if hold, ka := b.Timers(); b.Keepalive != 0 && ka >= hold {
		es.add(f+".keepalive", "%d s must be shorter than the hold time (%d s)", ka, hold)
	}
}

func (n *NodeBGP) validate(es *Errors, f string, setHasBGP bool) {
	if !setHasBGP {
		es.add(f, "the set has no bgp (its asn and timers): set bgp.asn on the set")
	}
	if !n.RouterID.Is4() || n.RouterID.IsUnspecified() {
		es.add(f+".routerID", "an IPv4 address other than 0.0.0.0 is required")
	}
	checkUnicast4(es, f+".nextHop", n.NextHop)
	if n.NextHop6.IsValid() {
		checkUnicast6(es, f+".nextHop6", n.NextHop6)
	}
	if len(n.Peers) == 0 {
		es.add(f+".peers", "at least one peer is required")
	}
	if len(n.Peers) > MaxBGPPeers {
		es.add(f+".peers", "%d peers: at most %d", len(n.Peers), MaxBGPPeers)
	}
	seen := map[netip.Addr]bool{}
	for i, p := range n.Peers {
		pf := fmt.Sprintf("%s.peers[%d]", f, i)
		if p.Address.Is6() {
			checkUnicast6(es, pf+".address", p.Address) // a session over IPv6
		} else {
			checkUnicast4(es, pf+".address", p.Address)
		}
		if seen[p.Address] {
			es.add(pf+".address", "%v appears twice", p.Address)
		}
		seen[p.Address] = true
		checkASN(es, pf+".asn", p.ASN)
		// Linux keys TCP MD5 with at most 80 bytes (TCP_MD5SIG_MAXKEYLEN).
		if len(p.Password) > 80 {
			es.add(pf+".password", "longer than 80 bytes (the kernel's TCP MD5 key limit)")
		}
		if strings.ContainsFunc(p.Password, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			es.add(pf+".password", "contains control characters")
		}
	}
}

// Quarantine moves an address (an EIP or a VIP) to the region's quarantine
// set: its /32 is announced by that set's edges only, so an attack on it
// lands there and nowhere else. Deleting the object releases the address.
type Quarantine struct {
	Address netip.Addr `json:"address"`
	// Reason says why (the figures that triggered an automatic decision).
	Reason string `json:"reason,omitempty"`
	// By names who decided: "operator" (the default) or "ddos".
	By string `json:"by,omitempty"`
}

// Key of a quarantine is its address.
func (q *Quarantine) Key() string { return q.Address.String() }

// Validate checks the quarantine on its own.
func (q *Quarantine) Validate() Errors {
	var es Errors
	// An EIP's or a VIP's address (the state's check says which): VIPs
	// are IPv4, an IPv6 address can only be an EIP's.
	checkEIPAddress(&es, "address", q.Address)
	if len(q.Reason) > 1024 {
		es.add("reason", "longer than 1024 characters")
	}
	switch q.By {
	case "", "operator", "ddos":
	default:
		es.add("by", "%q: want operator or ddos", q.By)
	}
	return es
}

// QuarantineSet returns the region's quarantine set, if it has one.
func (s *State) QuarantineSet() (*EdgeSet, bool) {
	for _, es := range s.EdgeSets {
		if es.Role == RoleQuarantine {
			return es, true
		}
	}
	return nil, false
}

// checkPullOut: an EIP or a VIP is pulled out only into a dedicated set,
// and an IPv6 one only into a set whose BGP edges have an IPv6 next hop.
func (s *State) checkPullOut(es *Errors, set string, a netip.Addr) {
	if set == "" {
		return
	}
	d, ok := s.EdgeSets[set]
	switch {
	case !ok:
		es.add("set", "edge set %q does not exist", set)
	case d.Role != RoleDedicated:
		es.add("set", "edge set %q is not a dedicated set (role %q): only a dedicated set takes pulled-out addresses (quarantine through a quarantine object)", set, d.Role)
	case a.Is6():
		if e, ok := d.withoutNextHop6(); ok {
			es.add("set", "edge %s of set %q has no bgp.nextHop6: the set's edges announce %v's /128 with their IPv6 next hop", e, set, a)
		}
	}
}

// withoutNextHop6 returns the first edge of the set that speaks BGP but
// has no IPv6 next hop: it cannot announce an IPv6 route.
func (s *EdgeSet) withoutNextHop6() (string, bool) {
	for _, e := range s.Edges {
		if e.BGP != nil && !e.BGP.NextHop6.IsValid() {
			return e.Name, true
		}
	}
	return "", false
}

// firstIPv6Served names an IPv6 address set announces as a /128 (an EIP
// pulled out into a dedicated set, a quarantined address for the
// quarantine set; VIPs are IPv4), if any.
func (s *State) firstIPv6Served(set *EdgeSet) (netip.Addr, bool) {
	var found netip.Addr
	take := func(a netip.Addr) {
		if a.Is6() && (!found.IsValid() || a.Less(found)) {
			found = a
		}
	}
	switch set.Role {
	case RoleDedicated:
		for _, e := range s.EIPs {
			if e.Set == set.Name {
				take(e.Address)
			}
		}
		for _, v := range s.Services {
			if v.Set == set.Name {
				take(v.VIP)
			}
		}
	case RoleQuarantine:
		for _, q := range s.Quarantines {
			take(q.Address)
		}
	}
	return found, found.IsValid()
}

// pulledInto counts the EIPs and services pulled out into set and names
// the lowest.
func (s *State) pulledInto(set string) (n int, first string) {
	n, low := s.eipsWhere(func(e *EIP) bool { return e.Set == set })
	if n > 0 {
		first = "EIP " + low.String()
	}
	if m, low := s.servicesWhere(func(v *Service) bool { return v.Set == set }); m > 0 {
		if n == 0 {
			first = "service " + low
		}
		n += m
	}
	return n, first
}

// checkSetRoles: one quarantine set per region; a dedicated set keeps its
// role while addresses are pulled into it, a quarantine set while
// addresses are quarantined.
func (s *State) checkSetRoles(es *Errors, set, old *EdgeSet, had bool) {
	if set.Role == RoleQuarantine {
		if q, ok := s.QuarantineSet(); ok && q.Name != set.Name {
			es.add("role", "set %q is already the region's quarantine set (a region has one)", q.Name)
		}
	}
	if !had || old.Role == set.Role {
		return
	}
	if old.Role == RoleDedicated {
		if n, first := s.pulledInto(set.Name); n > 0 {
			es.add("role", "%d address(es) are pulled out into this dedicated set, the first %s: return them first", n, first)
		}
	}
	if old.Role == RoleQuarantine && len(s.Quarantines) > 0 {
		es.add("role", "%d address(es) are quarantined in this set: release them first", len(s.Quarantines))
	}
}

func (s *State) checkDeleteEdgeSet(o *EdgeSet) error {
	if n, first := s.pulledInto(o.Name); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("edge set %s has %d address(es) pulled out into it, the first %s: return them first", o.Name, n, first)}
	}
	if o.Role == RoleQuarantine && len(s.Quarantines) > 0 {
		return &ConflictError{Msg: fmt.Sprintf("edge set %s is the quarantine set of %d quarantined address(es): release them first", o.Name, len(s.Quarantines))}
	}
	if err := s.checkDDoSPolicyRefs(o.Name); err != nil {
		return err
	}
	return s.checkFirewallRefs("edge set "+o.Name, func(f *FirewallRule) bool { return f.Set == o.Name })
}

// checkQuarantine: the address is an EIP or a VIP and the region has a
// quarantine set.
func (s *State) checkQuarantine(q, _ *Quarantine, _ bool) Errors {
	var es Errors
	if _, ok := s.QuarantineSet(); !ok {
		es.add("address", "the region has no quarantine set: create an edge set with role quarantine first")
	}
	_, eip := s.EIPs[q.Address.String()]
	_, vip := s.vips[q.Address]
	if !eip && !vip {
		es.add("address", "%v is neither an EIP nor a VIP", q.Address)
	}
	if qs, ok := s.QuarantineSet(); ok && q.Address.Is6() {
		if e, ok := qs.withoutNextHop6(); ok {
			es.add("address", "edge %s of the quarantine set %q has no bgp.nextHop6: the set's edges announce %v's /128 with their IPv6 next hop", e, qs.Name, q.Address)
		}
	}
	return es
}

func (s *State) checkDeleteEIP(e *EIP) error {
	if _, ok := s.Quarantines[e.Key()]; ok {
		return &ConflictError{Msg: fmt.Sprintf("EIP %s is quarantined: release it first (azgate quarantine release %s)", e.Key(), e.Key())}
	}
	if err := s.checkBandwidthRefs(e); err != nil {
		return err
	}
	return s.checkFirewallRefs("EIP "+e.Key(), func(f *FirewallRule) bool { return f.Address == e.Address })
}

func (s *State) checkDeleteService(v *Service) error {
	if _, ok := s.Quarantines[v.VIP.String()]; ok {
		return &ConflictError{Msg: fmt.Sprintf("the VIP %v of service %s is quarantined: release it first (azgate quarantine release %v)", v.VIP, v.Name, v.VIP)}
	}
	return s.checkFirewallRefs(fmt.Sprintf("the VIP %v of service %s", v.VIP, v.Name), func(f *FirewallRule) bool { return f.Address == v.VIP })
}

// Package model holds azgate's API objects, their validation and the
// in-memory State the controller checks every change against. It is pure:
// no I/O, no etcd, no kernel.
package model

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kinds of objects, also the path segment of their API and store keys.
const (
	KindAZ      = "azs"
	KindHost    = "hosts"
	KindEdgeSet = "edgesets"
	KindEIP     = "eips"
)

// Kinds and UserKinds, their order and everything else about each kind
// are in the registry (kinds.go).

// VSID range usable by tenants: RFC 7637 section 3.2 reserves
// 0x000000-0x000FFF and 0xFFFFFF.
const (
	VSIDMin = 0x001000
	VSIDMax = 0xFFFFFE
)

// AZ is an availability zone.
type AZ struct {
	Name        string `json:"name"`
	Region      string `json:"region,omitempty"`
	Description string `json:"description,omitempty"`
}

// Guest is a VM or container on a host, reachable at a private address in
// a virtual subnet (VSID).
type Guest struct {
	Name    string     `json:"name"`
	Address netip.Addr `json:"address"`
	// Address6 is the guest's private IPv6 address, what the host's
	// agent translates an IPv6 EIP bound to the guest to (NAT66, 1:1):
	// a unique local address (fd00::/8, RFC 4193) or a global unicast
	// one (2000::/3), unique on the host (checkPrivate6). Optional: a
	// guest without one may hold an IPv4 EIP only. The IPv4 Address
	// stays required (a guest is IPv4 or dual-stack; the agent finds the
	// guest's interface through it).
	Address6 netip.Addr `json:"address6,omitzero"`
	VSID     uint32     `json:"vsid"`
}

// Host is an AZ host running the agent.
type Host struct {
	Name string `json:"name"`
	AZ   string `json:"az"`
	// Underlay is the host's underlay address, IPv4 or IPv6 (issue 21:
	// NVGRE to the host over an IPv6 underlay; every edge then needs its
	// underlay6, State's check).
	Underlay netip.Addr `json:"underlay"`
	Guests   []Guest    `json:"guests,omitempty"`
}

// EdgeNode is one edge of an edge set.
type EdgeNode struct {
	Name string `json:"name"`
	// Underlay is the edge's IPv4 underlay address (required: BGP, the
	// hosts of the IPv4 underlay and the edges' connection sync use it).
	Underlay netip.Addr `json:"underlay"`
	// Underlay6 is its IPv6 underlay address, where the hosts of the
	// IPv6 underlay send their NVGRE and the source of the edge's NVGRE
	// to them: required of every edge once a host's underlay is IPv6
	// (State's check), optional otherwise.
	Underlay6 netip.Addr `json:"underlay6,omitzero"`
	// Drained: the edge withdraws its routes (upstream ECMP stops sending
	// to it) but keeps forwarding what still arrives (azgate edge drain).
	Drained bool `json:"drained,omitempty"`
	// BGP: the edge's speaker (sets.go); nil: it announces nothing.
	BGP *NodeBGP `json:"bgp,omitempty"`
}

// EdgeSet is a group of edges that announce the same routes (ECMP). A
// prefix set (Role "") announces its prefixes; a dedicated set announces
// the /32 of every EIP and VIP pulled out into it; the region's one
// quarantine set announces the /32 of every quarantined address. The
// longest prefix wins upstream, so a /32 takes its address's traffic away
// from the prefix set and from no other address.
type EdgeSet struct {
	Name     string         `json:"name"`
	Role     string         `json:"role,omitempty"`
	Prefixes []netip.Prefix `json:"prefixes"`
	Edges    []EdgeNode     `json:"edges"`
	// BGP settings every edge of the set shares (sets.go).
	BGP *SetBGP `json:"bgp,omitempty"`
}

// Binding ties an EIP to a guest on a host.
type Binding struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}

// EIP is a public address; bound, it reaches its guest through the edge.
type EIP struct {
	Address     netip.Addr `json:"address"`
	Description string     `json:"description,omitempty"`
	Binding     *Binding   `json:"binding,omitempty"`
	// Set names the dedicated edge set the EIP is pulled out into ("":
	// served by the prefix set that covers it).
	Set string `json:"set,omitempty"`
	// Limits are the EIP's rate limits at the edges (nil: none).
	Limits *Limits `json:"limits,omitempty"`
	// Previous is the binding a bind moved the EIP from, while the
	// connections open at the move drain there (nil: none; set by the
	// controller's bind, cleared when Until passes).
	Previous *PreviousBinding `json:"previous,omitempty"`
}

// PreviousBinding is where an EIP was bound before a bind moved it
// (docs/eip.md, "Drift"). Until Until the old host's agent keeps
// translating the EIP to the old guest, and the edges send it the
// packets of the connections that were open at the move (a TCP segment
// other than a SYN of a flow the edge did not see start after the move)
// and accept its replies. Underlay and VSID are the old host's underlay
// address and the old guest's VSID at the move (the edges need nothing
// else of the old guest, so its copy does not stay in their sets).
type PreviousBinding struct {
	Host     string     `json:"host"`
	Guest    string     `json:"guest"`
	Underlay netip.Addr `json:"underlay"`
	VSID     uint32     `json:"vsid"`
	Until    time.Time  `json:"until"`
}

// Active says whether the previous binding still drains at now (nil:
// no).
func (p *PreviousBinding) Active(now time.Time) bool {
	return p != nil && now.Before(p.Until)
}

// Name returns the object's key within its kind.
func (a *AZ) Key() string      { return a.Name }
func (h *Host) Key() string    { return h.Name }
func (s *EdgeSet) Key() string { return s.Name }
func (e *EIP) Key() string     { return e.Address.String() }

// FieldError names the field at fault.
type FieldError struct {
	Field string `json:"field"`
	Msg   string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Errors is a list of field errors; it is nil-safe.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Err returns nil for an empty list.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func (es *Errors) add(field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// isName reports whether name is a valid name: what nameRE matches (the
// same test by hand, without the regexp machine; TestIsName holds them
// equal).
func isName(name string) bool {
	n := len(name)
	if n == 0 || n > 63 || name[0] == '-' || name[n-1] == '-' {
		return false
	}
	for i := 0; i < n; i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func checkName(es *Errors, field, name string) {
	if name == "" {
		es.add(field, "required")
	} else if !isName(name) {
		es.add(field, "%q is not a valid name (lower-case letters, digits and '-', 1-63 characters, starting and ending alphanumeric)", name)
	}
}

// isUnicast4 reports whether checkUnicast4 finds nothing wrong with a.
func isUnicast4(a netip.Addr) bool {
	if !a.Is4() { // also the zero Addr
		return false
	}
	b := a.As4()
	return !(a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || b[0] >= 240)
}

// checkUnicast4 checks an address is a usable IPv4 unicast address.
func checkUnicast4(es *Errors, field string, a netip.Addr) {
	if isUnicast4(a) {
		return
	}
	switch {
	case !a.IsValid():
		es.add(field, "required")
	case !a.Is4():
		es.add(field, "%v: only IPv4 is supported for now", a)
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		es.add(field, "%v is not a unicast address", a)
	case a.As4()[0] >= 240:
		es.add(field, "%v is in the reserved 240.0.0.0/4 range", a)
	}
}

// isUnderlay says whether a may be an edge's (IPv4) underlay address:
// an IPv4 unicast address outside 0.0.0.0/8 ("this network", RFC 1122,
// never a source; the data planes name the IPv6 underlay's hosts and
// edges there, docs/dataplane.md "The IPv6 underlay").
func isUnderlay(a netip.Addr) bool { return isUnicast4(a) && a.As4()[0] != 0 }

// isUnderlay6 says whether a may be an IPv6 underlay address: a global
// unicast address (unique local fc00::/7 and 2001:db8::/32 included), not
// IPv4-mapped, no zone.
func isUnderlay6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.Zone() == "" && a.IsGlobalUnicast()
}

// isHostUnderlay says whether a may be a host's underlay address: an
// IPv4 one (isUnderlay) or an IPv6 one (isUnderlay6).
func isHostUnderlay(a netip.Addr) bool { return isUnderlay(a) || isUnderlay6(a) }

// checkUnderlay checks a host's underlay address, IPv4 (checkUnderlay4)
// or IPv6 (checkUnderlay6).
func checkUnderlay(es *Errors, field string, a netip.Addr) {
	if a.Is6() && !a.Is4In6() {
		checkUnderlay6(es, field, a)
		return
	}
	checkUnderlay4(es, field, a)
}

// checkUnderlay4 checks an IPv4 underlay address (isUnderlay): an edge's
// underlay is one, its IPv6 underlay address is underlay6.
func checkUnderlay4(es *Errors, field string, a netip.Addr) {
	switch {
	case a.Is6() && !a.Is4In6():
		es.add(field, "%v: an edge's underlay is IPv4 (BGP and the hosts of the IPv4 underlay use it): its IPv6 underlay address is underlay6", a)
	case isUnicast4(a) && a.As4()[0] == 0:
		es.add(field, "%v is in 0.0.0.0/8 (this network), never an underlay address", a)
	default:
		checkUnicast4(es, field, a)
	}
}

// checkUnderlay6 checks an IPv6 underlay address (isUnderlay6): global
// unicast or unique local, never unspecified, loopback, link-local,
// multicast or IPv4-mapped.
func checkUnderlay6(es *Errors, field string, a netip.Addr) {
	var sub Errors
	checkUnicast6(&sub, field, a)
	if len(sub) > 0 {
		*es = append(*es, sub...)
		return
	}
	if !isUnderlay6(a) {
		es.add(field, "%v is not a global unicast IPv6 address", a)
	}
}

// checkUnicast6 checks an address is a usable IPv6 unicast address: not
// IPv4-mapped, no zone, not unspecified, loopback, link-local or
// multicast.
func checkUnicast6(es *Errors, field string, a netip.Addr) {
	switch {
	case !a.IsValid():
		es.add(field, "required")
	case a.Is4():
		es.add(field, "%v is an IPv4 address: an IPv6 address is required", a)
	case a.Is4In6():
		es.add(field, "%v is an IPv4-mapped address (::ffff:0:0/96, RFC 4291): not usable on the wire", a)
	case a.Zone() != "":
		es.add(field, "%v has a zone: a global address is required", a)
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast():
		es.add(field, "%v is not a global unicast address", a)
	}
}

// checkPublic6 checks an IPv6 address the edges serve (an EIP's, a
// quarantined one's): global unicast (checkUnicast6), inside 2000::/3 and
// outside the reserved blocks, as a set's IPv6 prefix must be (its /128
// is announced when it is pulled out or quarantined). Whether a set's
// prefix covers it is the state's check.
func checkPublic6(es *Errors, field string, a netip.Addr) {
	n := len(*es)
	checkUnicast6(es, field, a)
	if len(*es) > n {
		return
	}
	p := netip.PrefixFrom(a, 128)
	if r, ok := ReservedRange(p); ok {
		es.add(field, "%v lies in %v (%s), which cannot be announced", a, r.Prefix, r.Name)
	} else if !GlobalUnicast6.Contains(a) {
		es.add(field, "%v lies outside %v, the IPv6 global unicast space (RFC 4291): it cannot be announced", a, GlobalUnicast6)
	}
}

// checkEIPAddress checks an EIP's address on its own: IPv4 unicast, or an
// IPv6 address the edges may serve (checkPublic6).
func checkEIPAddress(es *Errors, field string, a netip.Addr) {
	if a.Is6() {
		checkPublic6(es, field, a)
		return
	}
	checkUnicast4(es, field, a)
}

// checkVIP checks a service's VIP: IPv4 unicast, or an IPv6 address the
// edges may serve (checkPublic6, as an IPv6 EIP), in mode encap or nat
// (a nat VIP's backends are of its family: Service.validate).
func checkVIP(es *Errors, field string, a netip.Addr) {
	if a.Is6() {
		checkPublic6(es, field, a)
		return
	}
	checkUnicast4(es, field, a)
}

// checkNATBackend6 checks the address of an IPv6 VIP's nat backend: one
// the edge routes to, as checkPrivate6 takes a guest's (a unique local
// address of fd00::/8, or global unicast outside the reserved blocks).
func checkNATBackend6(es *Errors, field string, a netip.Addr) {
	if isPrivate6(a) {
		return
	}
	n := len(*es)
	checkUnicast6(es, field, a)
	if len(*es) > n {
		return
	}
	if r, ok := ReservedRange(netip.PrefixFrom(a, 128)); ok && GlobalUnicast6.Contains(a) {
		es.add(field, "%v lies in %v (%s): a nat backend's IPv6 address is a unique local (fd00::/8) or a global unicast one", a, r.Prefix, r.Name)
		return
	}
	es.add(field, "%v is neither a unique local address (fd00::/8, RFC 4193) nor a global unicast one (2000::/3)", a)
}

// ula6 is the locally assigned half of the unique local addresses
// (fd00::/8, RFC 4193 3.2): fc00::/8 has no assignment procedure.
var ula6 = netip.MustParsePrefix("fd00::/8")

// isPrivate6 reports whether checkPrivate6 finds nothing wrong with a.
func isPrivate6(a netip.Addr) bool {
	if !a.Is6() || a.Is4In6() || a.Zone() != "" {
		return false
	}
	if ula6.Contains(a) {
		return true
	}
	if !GlobalUnicast6.Contains(a) {
		return false
	}
	_, reserved := ReservedRange(netip.PrefixFrom(a, 128))
	return !reserved
}

// checkPrivate6 checks a guest's private IPv6 address (Guest.Address6):
// a unique local address of fd00::/8 or a global unicast address
// (2000::/3 outside the reserved blocks). Link-local, multicast, ::,
// ::1, IPv4-mapped and zoned addresses are refused: the agent's NAT66
// writes it into packets a router forwards.
func checkPrivate6(es *Errors, field string, a netip.Addr) {
	if isPrivate6(a) {
		return
	}
	n := len(*es)
	checkUnicast6(es, field, a)
	if len(*es) > n {
		return
	}
	if r, ok := ReservedRange(netip.PrefixFrom(a, 128)); ok && GlobalUnicast6.Contains(a) {
		es.add(field, "%v lies in %v (%s): a guest's IPv6 address is a unique local (fd00::/8) or a global unicast one", a, r.Prefix, r.Name)
		return
	}
	es.add(field, "%v is neither a unique local address (fd00::/8, RFC 4193) nor a global unicast one (2000::/3)", a)
}

// A SpecialRange is an RFC 6890 special-purpose block (IPv4), or one of
// the IANA IPv6 special-purpose registry's.
type SpecialRange struct {
	Prefix netip.Prefix
	Name   string
}

// ReservedRanges are the RFC 6890 special-purpose blocks an edge set may
// not announce: upstream routers drop or mis-handle them, and announcing
// one would steal traffic the host itself needs. Private (RFC 1918),
// shared (100.64.0.0/10), documentation and benchmarking blocks stay
// allowed: private clouds and the lab announce them. docs/api.md has the
// same table.
var ReservedRanges = []SpecialRange{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network", RFC 791`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback, RFC 1122"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, RFC 3927"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments, RFC 6890"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast, RFC 7526"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast, RFC 5771"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved and limited broadcast, RFC 1112 and RFC 919"},
}

// ReservedRanges6 are the IPv6 blocks an edge set may not announce (the
// IANA IPv6 special-purpose address registry, RFC 6890, and the
// non-unicast space), in the order ReservedRange tries them: the first
// one a prefix overlaps names the reason. Besides these, a set prefix
// must lie in 2000::/3 (GlobalUnicast6), which excludes ULA and the
// rest. Allowed, as the IPv4 table allows their IPv4 counterparts: the
// documentation blocks 2001:db8::/32 (RFC 3849) and 3fff::/20 (RFC 9637),
// which the lab and the tests use, and the benchmarking block
// 2001:2::/48 (RFC 5180) although it lies inside 2001::/23.
// docs/api.md has the same table.
var ReservedRanges6 = []SpecialRange{
	{netip.MustParsePrefix("::/128"), "unspecified address, RFC 4291"},
	{netip.MustParsePrefix("::1/128"), "loopback, RFC 4291"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped addresses, RFC 4291"},
	{netip.MustParsePrefix("64:ff9b::/96"), "IPv4/IPv6 translation (NAT64 well-known prefix), RFC 6052"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use IPv4/IPv6 translation, RFC 8215"},
	{netip.MustParsePrefix("100::/64"), "discard-only, RFC 6666"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (Teredo, ORCHID, AMT...), RFC 2928"},
	{netip.MustParsePrefix("2002::/16"), "6to4, RFC 3056"},
	{netip.MustParsePrefix("fc00::/7"), "unique local addresses, RFC 4193"},
	{netip.MustParsePrefix("fe80::/10"), "link-local unicast, RFC 4291"},
	{netip.MustParsePrefix("ff00::/8"), "multicast, RFC 4291"},
}

// GlobalUnicast6 is the IPv6 global unicast space (RFC 4291, IANA): the
// only IPv6 space an edge set announces.
var GlobalUnicast6 = netip.MustParsePrefix("2000::/3")

// benchmarking6 is allowed inside 2001::/23 (RFC 5180), as 198.18.0.0/15
// is in IPv4.
var benchmarking6 = netip.MustParsePrefix("2001:2::/48")

// Bounds of an IPv6 set prefix: shorter than /16 is no real allocation;
// longer than /64 splits a subnet (a single address is pulled out into a
// dedicated set through the EIP's or the service's set instead).
const (
	MinPrefix6Bits = 16
	MaxPrefix6Bits = 64
)

// ReservedRange returns the first reserved range p overlaps (of its
// family's table).
func ReservedRange(p netip.Prefix) (SpecialRange, bool) {
	table := ReservedRanges
	if p.Addr().Is6() {
		if benchmarking6.Bits() <= p.Bits() && benchmarking6.Contains(p.Addr()) {
			return SpecialRange{}, false
		}
		table = ReservedRanges6
	}
	for _, r := range table {
		if r.Prefix.Overlaps(p) {
			return r, true
		}
	}
	return SpecialRange{}, false
}

// Validate checks the AZ on its own.
func (a *AZ) Validate() Errors {
	var es Errors
	checkName(&es, "name", a.Name)
	if a.Region != "" {
		checkName(&es, "region", a.Region)
	}
	if len(a.Description) > 1024 {
		es.add("description", "longer than 1024 characters")
	}
	return es
}

// Validate checks the host on its own.
func (h *Host) Validate() Errors {
	if h.valid() {
		return nil
	}
	return h.validate()
}

// valid reports that validate would find nothing wrong, without building
// the places and messages validate names every error with: every store
// load validates every host, and a host of 1,000 guests made validate
// allocate 5 times the host's own size. It may say false for a valid
// host (two names of one hash): validate then decides. TestHostValid
// holds valid() to imply len(validate()) == 0.
func (h *Host) valid() bool {
	if !isName(h.Name) || !isName(h.AZ) || !isHostUnderlay(h.Underlay) {
		return false
	}
	n := len(h.Guests)
	sp := scratchPool.Get().(*[]uint64)
	defer scratchPool.Put(sp)
	if cap(*sp) < 2*n {
		*sp = make([]uint64, 2*n)
	}
	names, addrs := (*sp)[:n], (*sp)[n:2*n]
	var addrs6 []uint64 // the guests' IPv6 addresses, hashed (few hosts have any)
	for i, g := range h.Guests {
		if !isName(g.Name) || !isUnicast4(g.Address) || g.VSID < VSIDMin || g.VSID > VSIDMax {
			return false
		}
		names[i] = maphash.String(nameSeed, g.Name)
		b := g.Address.As4()
		addrs[i] = uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
		if g.Address6.IsValid() {
			if !isPrivate6(g.Address6) {
				return false
			}
			addrs6 = append(addrs6, maphash.Comparable(nameSeed, g.Address6))
		}
	}
	return !hasDup(names) && !hasDup(addrs) && !hasDup(addrs6)
}

// hasDup sorts s and reports whether a value appears twice.
func hasDup(s []uint64) bool {
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return true
		}
	}
	return false
}

var (
	nameSeed    = maphash.MakeSeed()
	scratchPool = sync.Pool{New: func() any { return new([]uint64) }}
)

// validate is Validate's full check: every error, with its place.
func (h *Host) validate() Errors {
	var es Errors
	checkName(&es, "name", h.Name)
	checkName(&es, "az", h.AZ)
	checkUnderlay(&es, "underlay", h.Underlay)
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for i, g := range h.Guests {
		f := fmt.Sprintf("guests[%d]", i)
		checkName(&es, f+".name", g.Name)
		if names[g.Name] {
			es.add(f+".name", "guest %q appears twice", g.Name)
		}
		names[g.Name] = true
		checkUnicast4(&es, f+".address", g.Address)
		if addrs[g.Address] {
			es.add(f+".address", "%v is used by another guest on this host", g.Address)
		}
		addrs[g.Address] = true
		if g.Address6.IsValid() {
			checkPrivate6(&es, f+".address6", g.Address6)
			if addrs[g.Address6] {
				es.add(f+".address6", "%v is used by another guest on this host", g.Address6)
			}
			addrs[g.Address6] = true
		}
		if g.VSID < VSIDMin || g.VSID > VSIDMax {
			es.add(f+".vsid", "%d is outside %d-%d (RFC 7637 reserves the rest)", g.VSID, VSIDMin, VSIDMax)
		}
	}
	return es
}

// Guest returns the named guest.
func (h *Host) Guest(name string) (Guest, bool) {
	for _, g := range h.Guests {
		if g.Name == name {
			return g, true
		}
	}
	return Guest{}, false
}

// Validate checks the edge set on its own.
func (s *EdgeSet) Validate() Errors {
	var es Errors
	checkName(&es, "name", s.Name)
	switch s.Role {
	case RolePrefix:
		if len(s.Prefixes) == 0 {
			es.add("prefixes", "at least one prefix is required")
		}
	case RoleDedicated, RoleQuarantine:
		if len(s.Prefixes) > 0 {
			es.add("prefixes", "a %s set announces the /32s assigned to it and has no prefixes", s.Role)
		}
	default:
		es.add("role", "%q is not a set role (want %q for a prefix set, %q or %q)", s.Role, RolePrefix, RoleDedicated, RoleQuarantine)
	}
	first6 := -1 // the first IPv6 prefix
	for i, p := range s.Prefixes {
		f := fmt.Sprintf("prefixes[%d]", i)
		if p.IsValid() && p.Addr().Is6() && first6 < 0 {
			first6 = i
		}
		switch {
		case !p.IsValid():
			es.add(f, "invalid prefix")
		case p.Addr().Is4In6():
			es.add(f, "%v is IPv4-mapped (::ffff:0:0/96, RFC 4291): write the IPv4 prefix itself", p)
		case p.Masked() != p:
			es.add(f, "%v has host bits set (did you mean %v?)", p, p.Masked())
		case p.Addr().Is4() && p.Bits() < 8:
			es.add(f, "%v is shorter than /8", p)
		case p.Addr().Is6() && p.Bits() < MinPrefix6Bits:
			es.add(f, "%v is shorter than /%d", p, MinPrefix6Bits)
		case p.Addr().Is6() && p.Bits() > MaxPrefix6Bits:
			es.add(f, "%v is longer than /%d: an IPv6 set prefix is /%d to /%d (a single address is pulled out into a dedicated set through the EIP's or the service's set)", p, MaxPrefix6Bits, MinPrefix6Bits, MaxPrefix6Bits)
		default:
			if r, ok := ReservedRange(p); ok {
				es.add(f, "%v overlaps %v (%s), which cannot be announced", p, r.Prefix, r.Name)
			} else if p.Addr().Is6() && !GlobalUnicast6.Overlaps(p) {
				es.add(f, "%v lies outside %v, the IPv6 global unicast space (RFC 4291): it cannot be announced", p, GlobalUnicast6)
			}
		}
	}
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for i, e := range s.Edges {
		f := fmt.Sprintf("edges[%d]", i)
		checkName(&es, f+".name", e.Name)
		if names[e.Name] {
			es.add(f+".name", "edge %q appears twice", e.Name)
		}
		names[e.Name] = true
		checkUnderlay4(&es, f+".underlay", e.Underlay)
		if addrs[e.Underlay] {
			es.add(f+".underlay", "%v is used by another edge of this set", e.Underlay)
		}
		addrs[e.Underlay] = true
		if e.Underlay6.IsValid() {
			checkUnderlay6(&es, f+".underlay6", e.Underlay6)
			if addrs[e.Underlay6] {
				es.add(f+".underlay6", "%v is used by another edge of this set", e.Underlay6)
			}
			addrs[e.Underlay6] = true
		}
		if e.BGP != nil {
			e.BGP.validate(&es, f+".bgp", s.BGP != nil)
			if first6 >= 0 && !e.BGP.NextHop6.IsValid() {
				es.add(f+".bgp.nextHop6", "required: the set owns IPv6 prefixes (prefixes[%d] %v), announced with each edge's IPv6 next hop", first6, s.Prefixes[first6])
			}
		}
	}
	if len(s.Edges) > MaxSetEdges {
		es.add("edges", "%d edges: a set has at most %d", len(s.Edges), MaxSetEdges)
	}
	if s.BGP != nil {
		s.BGP.validate(&es, "bgp")
	}
	return es
}

// Contains reports whether one of the set's prefixes covers a.
func (s *EdgeSet) Contains(a netip.Addr) bool {
	for _, p := range s.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Validate checks the EIP on its own.
func (e *EIP) Validate() Errors {
	var es Errors
	checkEIPAddress(&es, "address", e.Address)
	if len(e.Description) > 1024 {
		es.add("description", "longer than 1024 characters")
	}
	if e.Binding != nil {
		checkName(&es, "binding.host", e.Binding.Host)
		checkName(&es, "binding.guest", e.Binding.Guest)
	}
	if e.Set != "" {
		checkName(&es, "set", e.Set)
	}
	e.Limits.validate(&es, "limits")
	if p := e.Previous; p != nil {
		checkName(&es, "previous.host", p.Host)
		checkName(&es, "previous.guest", p.Guest)
		checkUnderlay(&es, "previous.underlay", p.Underlay)
		if p.VSID < VSIDMin || p.VSID > VSIDMax {
			es.add("previous.vsid", "%d is outside %d-%d (RFC 7637 reserves the rest)", p.VSID, VSIDMin, VSIDMax)
		}
		if p.Until.IsZero() {
			es.add("previous.until", "missing")
		}
		switch b := e.Binding; {
		case b == nil:
			es.add("previous", "set without a binding (an EIP drains from its previous host only to its current one)")
		case b.Host == p.Host:
			es.add("previous.host", "%s is the binding's host too (a move within a host does not drain)", p.Host)
		}
	}
	return es
}

// Object is any API object.
type Object interface {
	Key() string
	Validate() Errors
}

// Decode parses a JSON object of a kind, rejecting unknown fields.
func Decode(kind string, data []byte) (Object, error) {
	o, err := New(kind)
	if err != nil {
		return nil, err
	}
	if err := strictJSON(data, o); err != nil {
		return nil, err
	}
	return o, nil
}

// UnmarshalStrict decodes one JSON value into v like json.Unmarshal, but
// rejects unknown fields, trailing data, duplicate keys and keys that match
// a field only case-insensitively, and its errors name the place at fault
// ("guests[1].address").
func UnmarshalStrict(data []byte, v any) error { return strictJSON(data, v) }

func strictJSON(data []byte, v any) error {
	if json.Valid(data) {
		if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if fe := locateJSONError(data, reflect.TypeOf(v)); fe != nil {
			if fe.Field == "" {
				return errors.New(fe.Msg)
			}
			return *fe
		}
		return describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if ok := asErr(err, &te); ok {
		return FieldError{Field: te.Field, Msg: fmt.Sprintf("cannot be a JSON %s (want %v)", te.Value, te.Type)}
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return FieldError{Field: strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`), Msg: "unknown field"}
	}
	return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// locateJSONError finds the first value in data that does not fit type t
// and names its place ("guests[1].address"): encoding/json reports neither
// array indexes nor, for text values such as addresses, the field at all.
// It returns nil when data is not even JSON (the decoder's own message says
// where) or when it finds nothing wrong.
func locateJSONError(data []byte, t reflect.Type) *FieldError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return walkJSON(v, t, "")
}

func walkJSON(v any, t reflect.Type, place string) *FieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return checkLeaf(v, t, place)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return &FieldError{Field: place, Msg: fmt.Sprintf("must be a JSON object, not %s", jsonKind(v))}
		}
		for _, k := range sortedKeys(m) {
			f, ok := jsonField(t, k)
			if !ok {
				return &FieldError{Field: join(place, k), Msg: "unknown field"}
			}
			if fe := walkJSON(m[k], f.Type, join(place, k)); fe != nil {
				return fe
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		a, ok := v.([]any)
		if !ok {
			return &FieldError{Field: place, Msg: fmt.Sprintf("must be a JSON array, not %s", jsonKind(v))}
		}
		for i, e := range a {
			if fe := walkJSON(e, t.Elem(), fmt.Sprintf("%s[%d]", place, i)); fe != nil {
				return fe
			}
		}
		return nil
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return &FieldError{Field: place, Msg: fmt.Sprintf("must be a JSON object, not %s", jsonKind(v))}
		}
		for _, k := range sortedKeys(m) {
			if fe := walkJSON(m[k], t.Elem(), join(place, k)); fe != nil {
				return fe
			}
		}
		return nil
	}
	return checkLeaf(v, t, place)
}

// checkLeaf decodes one value on its own into a fresh t.
func checkLeaf(v any, t reflect.Type, place string) *FieldError {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	err = json.Unmarshal(b, reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &FieldError{Field: place, Msg: fmt.Sprintf("must not be %s (want %v)", jsonKind(v), t)}
	}
	return &FieldError{Field: place, Msg: strings.TrimPrefix(err.Error(), "json: ")}
}

// jsonField finds the struct field a JSON key decodes into, matching the
// way encoding/json does (exact name first, then case-insensitively).
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if !found && strings.EqualFold(name, key) {
			fold, found = f, true
		}
	}
	return fold, found
}

func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + v.String()
	case string:
		return fmt.Sprintf("the string %q", v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func join(place, field string) string {
	if place == "" {
		return field
	}
	return place + "." + field
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

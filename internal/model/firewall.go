package model

import (
	"fmt"
	"net/netip"
)

// KindFirewallRule is the kind of FirewallRule objects.
const KindFirewallRule = "firewallrules"

// Firewall rule actions.
const (
	FirewallDeny  = "deny"
	FirewallAllow = "allow"
)

// Firewall rule protocols besides ProtoTCP and ProtoUDP.
const (
	ProtoICMP = "icmp"
	ProtoAny  = "any"
)

// Bounds of the firewall, matched by the edge's maps (bpf/lib/consts.h
// FW_RULES_MAX, FW_REFS): rules in a region, source prefixes per rule,
// and rules whose sources may overlap at one source prefix for one
// destination (the data plane reads them from one entry).
const (
	MaxFirewallRules   = 131072
	MaxFirewallSources = 1024
	MaxFirewallOverlap = 8
)

// FirewallRule denies or allows packets from the Internet side to the
// region's EIPs and VIPs by source prefix, destination, protocol and
// destination port (docs/dataplane.md, "Firewall"). For a packet:
//
//  1. if any deny rule matches it, it is dropped (deny beats allow,
//     whatever the prefix lengths);
//  2. else, if its destination has an allow list (an allow rule applies
//     to it: global, its set's or its own) and no allow rule matches, it
//     is dropped: an allow list makes an EIP or VIP private;
//  3. else it passes on to anti-DDoS, the load balancer and the routes.
//
// A rule matches a packet when one of its sources contains the packet's
// source address (prefixes nest freely: a /32 inside a /8 of another rule
// does not hide either), its destination covers the packet's, and its
// protocol and port range (if any) cover the packet's.
type FirewallRule struct {
	Name   string `json:"name"`
	Action string `json:"action"` // deny or allow
	// Sources are IPv4 or IPv6 prefixes (0.0.0.0/0 is every IPv4 source,
	// ::/0 every IPv6 one; a rule may hold both families). A source of
	// one family never matches a packet of the other.
	Sources []netip.Prefix `json:"sources"`
	// The destination: Address (one EIP or VIP, by its address), or Set
	// (every EIP and VIP that edge set serves: a prefix set's covered
	// addresses, a dedicated set's pulled-out ones, the quarantine set's
	// quarantined ones), or neither: global, every EIP and VIP.
	Set     string     `json:"set,omitempty"`
	Address netip.Addr `json:"address,omitzero"`
	// Protocol: tcp, udp, icmp or any ("" is any).
	Protocol string `json:"protocol,omitempty"`
	// Destination ports, tcp and udp only: Port alone is one port,
	// Port-PortEnd a range, neither every port.
	Port        uint16 `json:"port,omitempty"`
	PortEnd     uint16 `json:"portEnd,omitempty"`
	Description string `json:"description,omitempty"`
}

// Key of a firewall rule is its name.
func (f *FirewallRule) Key() string { return f.Name }

// Global reports whether the rule applies to every destination.
func (f *FirewallRule) Global() bool { return f.Set == "" && !f.Address.IsValid() }

// Ports returns the rule's destination port range; 0, 65535 for every port.
func (f *FirewallRule) Ports() (lo, hi uint16) {
	switch {
	case f.Port == 0 && f.PortEnd == 0:
		return 0, 65535
	case f.PortEnd > f.Port:
		return f.Port, f.PortEnd
	}
	return f.Port, f.Port
}

// IPProto returns the rule's IP protocol number (0: any).
func (f *FirewallRule) IPProto() uint8 {
	switch f.Protocol {
	case ProtoTCP:
		return 6
	case ProtoUDP:
		return 17
	case ProtoICMP:
		return 1
	}
	return 0
}

// Validate checks the rule on its own.
func (f *FirewallRule) Validate() Errors {
	var es Errors
	checkName(&es, "name", f.Name)
	switch f.Action {
	case FirewallDeny, FirewallAllow:
	case "":
		es.add("action", "required (deny or allow)")
	default:
		es.add("action", "%q: want deny or allow", f.Action)
	}
	switch {
	case len(f.Sources) == 0:
		es.add("sources", "at least one source prefix is required (0.0.0.0/0 and ::/0 for every source)")
	case len(f.Sources) > MaxFirewallSources:
		es.add("sources", "%d prefixes: a rule has at most %d", len(f.Sources), MaxFirewallSources)
	}
	seen := map[netip.Prefix]int{}
	for i, p := range f.Sources {
		pf := fmt.Sprintf("sources[%d]", i)
		switch {
		case !p.IsValid():
			es.add(pf, "invalid prefix")
		case p.Addr().Zone() != "":
			es.add(pf, "%v has a zone: a global prefix is required", p)
		case p.Addr().Is4In6():
			es.add(pf, "%v is IPv4-mapped (::ffff:0:0/96, RFC 4291): no packet has such a source; write the IPv4 prefix", p)
		case p.Masked() != p:
			es.add(pf, "%v has host bits set (did you mean %v?)", p, p.Masked())
		default:
			if j, dup := seen[p]; dup {
				es.add(pf, "%v appears twice (sources[%d])", p, j)
			}
			seen[p] = i
		}
	}
	if f.Set != "" {
		checkName(&es, "set", f.Set)
		if f.Address.IsValid() {
			es.add("address", "a rule has one destination: an address or a set, not both")
		}
	}
	if f.Address.IsValid() {
		if f.Address.Is6() {
			checkUnicast6(&es, "address", f.Address)
		} else {
			checkUnicast4(&es, "address", f.Address)
		}
	}
	ports := f.Port != 0 || f.PortEnd != 0
	switch f.Protocol {
	case ProtoTCP, ProtoUDP:
	case "", ProtoAny, ProtoICMP:
		if ports {
			es.add("port", "ports need protocol tcp or udp (protocol is %q)", f.Protocol)
		}
	default:
		es.add("protocol", "%q: want tcp, udp, icmp or any", f.Protocol)
	}
	switch {
	case f.Port == 0 && f.PortEnd != 0:
		es.add("port", "a range needs its first port (1-65535); no port means every port")
	case f.PortEnd != 0 && f.PortEnd < f.Port:
		es.add("portEnd", "%d is below port %d", f.PortEnd, f.Port)
	}
	if len(f.Description) > 1024 {
		es.add("description", "longer than 1024 characters")
	}
	return es
}

// Destination names the rule's destination in messages and tables.
func (f *FirewallRule) Destination() string {
	switch {
	case f.Address.IsValid():
		return f.Address.String()
	case f.Set != "":
		return "set " + f.Set
	}
	return "global"
}

// checkFirewallRule: the destination exists (an edge set, an EIP or a
// VIP), and the region holds at most MaxFirewallRules.
func (s *State) checkFirewallRule(f, _ *FirewallRule, had bool) Errors {
	var es Errors
	if f.Set != "" {
		if _, ok := s.EdgeSets[f.Set]; !ok {
			es.add("set", "edge set %q does not exist", f.Set)
		}
	}
	if f.Address.IsValid() {
		_, eip := s.EIPs[f.Address.String()]
		_, vip := s.vips[f.Address]
		if !eip && !vip {
			es.add("address", "%v is neither an EIP nor a VIP", f.Address)
		}
	}
	if !had && len(s.FirewallRules) >= MaxFirewallRules {
		es.add("name", "the region has %d firewall rules, the most it may hold", len(s.FirewallRules))
	}
	return es
}

// checkFirewallRefs refuses removing a destination firewall rules name. A
// scan: deletes of sets, EIPs and services are rare next to a rule's
// lookups.
func (s *State) checkFirewallRefs(what string, f func(*FirewallRule) bool) error {
	if n, first := namedWhere(s.FirewallRules, f); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("%s is the destination of %d firewall rule(s), the first %s: delete or change them first", what, n, first)}
	}
	return nil
}

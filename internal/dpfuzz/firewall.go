package dpfuzz

import (
	"cmp"
	"net/netip"
	"slices"
)

// The oracle's firewall (issue 9 part 1), written from docs/dataplane.md,
// "Firewall", not from the planner (internal/fwplan) nor bpf/lib/fw.h: the
// harness programs the same rules into the edge through the planner and
// the edge's map writes, and holds each packet to this reading of them.

// FWRule is a firewall rule as the docs state it.
type FWRule struct {
	Name string
	Deny bool // else allow
	// Sources: a rule matches a source one of them contains.
	Sources []netip.Prefix
	// Dests: the EIPs and VIPs the rule applies to (its own address, or
	// the addresses its set serves); nil: a global rule, every EIP and VIP.
	Dests []netip.Addr
	// Proto: 0 any, else the IP protocol.
	Proto uint8
	// PortLo..PortHi: the destination ports; 0..65535 is every port (and
	// then the rule has no port range).
	PortLo, PortHi uint16
	// Slot is the rule's counter slot (fw_stats): the counted rule is the
	// first matching one in slot order.
	Slot uint32
}

func (r *FWRule) global() bool { return r.Dests == nil }

func (r *FWRule) applies(dst netip.Addr) bool { return r.global() || slices.Contains(r.Dests, dst) }

// matches: a source contains f's, its destination covers f's, its
// protocol is any or f's, and a port range matches only a TCP or UDP
// packet carrying its ports (unfragmented or a first fragment; a later
// fragment has none).
func (r *FWRule) matches(f Flow) bool {
	if !r.applies(f.Dst) {
		return false
	}
	if r.Proto != 0 {
		// A rule's icmp matches ICMPv6 (next header 58) in an IPv6
		// packet, and only it (docs: "Firewall, IPv6").
		want := r.Proto
		if f.Src.Is6() && want == ProtoICMP {
			want = ProtoICMPv6
		}
		if want != f.Proto {
			return false
		}
	}
	if r.PortLo != 0 || r.PortHi != 0xffff {
		if f.Fragment || (f.Proto != ProtoTCP && f.Proto != ProtoUDP) || f.DPort < r.PortLo || f.DPort > r.PortHi {
			return false
		}
	}
	return slices.ContainsFunc(r.Sources, func(p netip.Prefix) bool { return p.Contains(f.Src) })
}

// FWDecision is the firewall's verdict on a packet to an EIP or VIP.
type FWDecision struct {
	// Drop: "" (passes), FWDeny or FWPrivate.
	Drop string
	// Rule is the rule whose counter the packet moves: the deny rule, or
	// the allow rule that let it through ("" for an uncounted pass or a
	// private drop).
	Rule string
}

// Drop reasons of FWDecision (the counters drop_fw_deny, drop_fw_private).
const (
	FWDeny    = "deny"
	FWPrivate = "private"
)

// Firewall is a Policy: the rules, read as the docs say.
type Firewall struct {
	rules []FWRule // the destinations' rules, then the global ones, each in slot order
}

// NewFirewall is the Policy of rules.
func NewFirewall(rules []FWRule) *Firewall {
	rules = slices.Clone(rules)
	slices.SortStableFunc(rules, func(a, b FWRule) int {
		if a.global() != b.global() {
			if a.global() {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Slot, b.Slot)
	})
	return &Firewall{rules: rules}
}

// Decide: any matching deny rule drops (deny beats allow, whatever the
// prefix lengths); else a destination with an allow list (a global allow
// rule, or an allow rule of its own or its set's) admits only a packet
// some allow rule matches; else the packet passes uncounted. The counted
// rule is the first matching one of the destination's own and set rules
// in slot order, else of the global rules in slot order (docs: "the
// destination's rules first, then the global ones").
func (fw *Firewall) Decide(f Flow) FWDecision {
	rules := fw.rules
	var allow string
	private := false
	for i := range rules {
		r := &rules[i]
		if !r.Deny && r.applies(f.Dst) {
			private = true
		}
		if !r.matches(f) {
			continue
		}
		if r.Deny {
			return FWDecision{Drop: FWDeny, Rule: r.Name}
		}
		if allow == "" {
			allow = r.Name
		}
	}
	switch {
	case allow != "":
		return FWDecision{Rule: allow}
	case private:
		return FWDecision{Drop: FWPrivate}
	}
	return FWDecision{}
}

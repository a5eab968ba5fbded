package agent

// What a guest may reach in its host's kernel (--local-allow). A guest's
// packet is encapsulated to an edge through its EIP or dropped; the only
// exception is a destination in a local prefix, and of that only what a
// rule allows goes to the host's kernel, the rest is dropped
// (bpf/agent.c). The default is no prefix: a guest reaches nothing of its
// host, not the host's listeners, not another tenant's guest routed by the
// host's kernel, not the underlay behind it (docs/roles.md, "What a guest
// reaches on its host").

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/azgate/azgate/internal/dataplane"
)

// LocalAllow is one --local-allow setting: a prefix and what may be sent
// to it (Rule.Proto 0: anything).
type LocalAllow struct {
	Prefix netip.Prefix
	Rule   dataplane.LocalRule
}

func (a LocalAllow) String() string {
	r := a.Rule
	switch {
	case r.Proto == 0:
		return a.Prefix.String()
	case r.Proto == 6 || r.Proto == 17:
		p := map[uint8]string{6: "tcp", 17: "udp"}[r.Proto]
		if r.Lo == r.Hi {
			return fmt.Sprintf("%v:%s:%d", a.Prefix, p, r.Lo)
		}
		return fmt.Sprintf("%v:%s:%d-%d", a.Prefix, p, r.Lo, r.Hi)
	case r.Proto == 1:
		return a.Prefix.String() + ":icmp"
	}
	return fmt.Sprintf("%v:%d", a.Prefix, r.Proto)
}

// ParseLocalAllow reads PREFIX[:PROTO[:PORT[-PORT]]]: PROTO is tcp, udp
// (both need a port or range), icmp, any, or a protocol number (no
// ports); PREFIX alone allows every protocol and port.
func ParseLocalAllow(s string) (LocalAllow, error) {
	if p, err := netip.ParsePrefix(s); err == nil && !p.Addr().Is4() {
		return LocalAllow{}, fmt.Errorf("%q: only IPv4 prefixes (guests' IPv6 is dropped)", s)
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return LocalAllow{}, fmt.Errorf("%q: want PREFIX[:PROTO[:PORT[-PORT]]]", s)
	}
	p, err := netip.ParsePrefix(parts[0])
	if err != nil {
		return LocalAllow{}, fmt.Errorf("%q: prefix: %w", s, err)
	}
	if !p.Addr().Is4() {
		return LocalAllow{}, fmt.Errorf("%q: only IPv4 prefixes (guests' IPv6 is dropped)", s)
	}
	p = p.Masked()
	if a := p.Addr(); a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() || p.Bits() < 8 {
		return LocalAllow{}, fmt.Errorf("%q: prefix %v is loopback, multicast, unspecified or shorter than /8: name the service's address", s, p)
	}
	out := LocalAllow{Prefix: p, Rule: dataplane.LocalRule{Hi: 65535}}
	if len(parts) == 1 {
		return out, nil
	}
	proto := strings.ToLower(parts[1])
	switch proto {
	case "any":
		if len(parts) == 3 {
			return LocalAllow{}, fmt.Errorf("%q: protocol any takes no port", s)
		}
		return out, nil
	case "tcp", "udp":
		out.Rule.Proto = map[string]uint8{"tcp": 6, "udp": 17}[proto]
		if len(parts) != 3 {
			return LocalAllow{}, fmt.Errorf("%q: %s needs a port or range (PREFIX:%s:PORT[-PORT])", s, proto, proto)
		}
		lo, hi, ok := strings.Cut(parts[2], "-")
		if !ok {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 10, 16)
		h, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || l == 0 || l > h {
			return LocalAllow{}, fmt.Errorf("%q: port %q: want PORT or LO-HI, 1-65535, LO <= HI", s, parts[2])
		}
		out.Rule.Lo, out.Rule.Hi = uint16(l), uint16(h)
		return out, nil
	case "icmp":
		out.Rule.Proto = 1
	default:
		n, err := strconv.ParseUint(proto, 10, 8)
		if err != nil || n == 0 {
			return LocalAllow{}, fmt.Errorf("%q: protocol %q: want tcp, udp, icmp, any or a number 1-255", s, parts[1])
		}
		if n == 6 || n == 17 {
			return LocalAllow{}, fmt.Errorf("%q: protocol %d: write tcp or udp with a port", s, n)
		}
		out.Rule.Proto = uint8(n)
	}
	if len(parts) == 3 {
		return LocalAllow{}, fmt.Errorf("%q: protocol %s has no ports", s, parts[1])
	}
	out.Rule.Lo, out.Rule.Hi = 0, 0
	return out, nil
}

// PlanLocal gives each prefix its rules and those of every shorter
// prefix covering it: the data plane's trie finds the longest prefix
// only, and a shorter prefix's rule must hold inside a longer one too.
func PlanLocal(allow []LocalAllow) (map[netip.Prefix][]dataplane.LocalRule, error) {
	out := map[netip.Prefix][]dataplane.LocalRule{}
	for _, a := range allow {
		out[a.Prefix] = nil
	}
	for p := range out {
		var rules []dataplane.LocalRule
		for _, a := range allow {
			if a.Prefix.Bits() <= p.Bits() && a.Prefix.Contains(p.Addr()) && !slices.Contains(rules, a.Rule) {
				rules = append(rules, a.Rule)
			}
		}
		if len(rules) > dataplane.MaxLocalRules {
			return nil, fmt.Errorf("--local-allow: prefix %v has %d rules with those of the prefixes covering it, at most %d", p, len(rules), dataplane.MaxLocalRules)
		}
		out[p] = rules
	}
	return out, nil
}

// CheckLocalAllow refuses a local prefix that would hand the host's
// kernel a packet it must never route for a guest: to a guest of this
// host (another tenant's, or the guest's own VSID's, which the host's
// kernel would forward between tenants without the edge), to the host's
// own underlay address, or to an edge's (the underlay behind the host:
// connection sync, BGP, the edges' kernels).
func CheckLocalAllow(allow []LocalAllow, want HostWant) error {
	for _, a := range allow {
		for _, g := range want.Guests {
			if a.Prefix.Contains(g.Address) {
				return fmt.Errorf("--local-allow %v contains guest %s (%v, VSID %d): guests never reach each other through the host's kernel", a, g.Name, g.Address, g.VSID)
			}
		}
		if want.Underlay.IsValid() && a.Prefix.Contains(want.Underlay) {
			return fmt.Errorf("--local-allow %v contains the host's underlay address %v", a, want.Underlay)
		}
		for _, e := range want.Edges {
			if a.Prefix.Contains(e) {
				return fmt.Errorf("--local-allow %v contains edge underlay address %v", a, e)
			}
		}
	}
	return nil
}

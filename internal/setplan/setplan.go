// Package setplan says which edge set serves an address and what each
// edge announces: the prefix sets their prefixes, a dedicated set the /32
// of every EIP and VIP pulled out into it, the quarantine set the /32 of
// every quarantined address. Upstream, the longest prefix wins, so a /32
// takes exactly its own address's traffic from the prefix set. It is
// family-generic: a set's prefixes may be IPv4 or IPv6, and an IPv6
// address is pulled out or quarantined as its /128 (the model does not
// take IPv6 EIPs and VIPs yet).
//
// It is pure: the edge (what to announce), the agents (which set's members
// to send replies to) and the CLI compute from the same Input.
package setplan

import (
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/model"
)

// Input is what the plan needs of the desired state.
type Input struct {
	Sets map[string]*model.EdgeSet
	// PulledOut maps an EIP or a VIP to the dedicated set it is pulled out
	// into (EIP.Set, Service.Set).
	PulledOut map[netip.Addr]string
	// Quarantined addresses (Quarantine objects).
	Quarantined map[netip.Addr]bool
}

// FromState collects the Input from a State.
func FromState(st *model.State) Input {
	in := Input{Sets: st.EdgeSets, PulledOut: map[netip.Addr]string{}, Quarantined: map[netip.Addr]bool{}}
	for _, e := range st.EIPs {
		if e.Set != "" {
			in.PulledOut[e.Address] = e.Set
		}
	}
	for _, v := range st.Services {
		if v.Set != "" {
			in.PulledOut[v.VIP] = v.Set
		}
	}
	for _, q := range st.Quarantines {
		in.Quarantined[q.Address] = true
	}
	return in
}

// Why a set serves an address.
const (
	ByPrefix     = "prefix"
	ByPullOut    = "pulled out"
	ByQuarantine = "quarantined"
)

// quarantineSet returns the region's quarantine set's name.
func (in Input) quarantineSet() string {
	for name, s := range in.Sets {
		if s.Role == model.RoleQuarantine {
			return name
		}
	}
	return ""
}

// Serving returns the set whose edges receive a's traffic from upstream,
// why, and the route that carries it ("" and an invalid prefix: no set
// covers a). Quarantine beats pull-out, which beats the prefix sets; among
// prefix sets the longest prefix wins, as it does upstream.
func (in Input) Serving(a netip.Addr) (set, why string, route netip.Prefix) {
	if in.Quarantined[a] {
		if q := in.quarantineSet(); q != "" {
			return q, ByQuarantine, netip.PrefixFrom(a, a.BitLen())
		}
	}
	if d, ok := in.PulledOut[a]; ok {
		if s, ok := in.Sets[d]; ok && s.Role == model.RoleDedicated {
			return d, ByPullOut, netip.PrefixFrom(a, a.BitLen())
		}
	}
	best := -1
	for name, s := range in.Sets {
		if s.Role != model.RolePrefix {
			continue
		}
		for _, p := range s.Prefixes {
			// Equal prefixes in two sets are refused by the model; the
			// name breaks a tie deterministically anyway.
			if p.Contains(a) && (p.Bits() > best || p.Bits() == best && name < set) {
				set, why, route, best = name, ByPrefix, p, p.Bits()
			}
		}
	}
	return set, why, route
}

// Carriers returns the sets that may see a's traffic from upstream (""
// where none): the one serving a now, the one that would without a's
// quarantine, and the one without its pull-out as well (the prefix set it
// came from). Traffic moves between these sets while the routes converge:
// the DDoS detection keeps seeing a flood that follows a quarantined
// address, and the edges of each keep enforcing a's bandwidth limit.
func (in Input) Carriers(a netip.Addr) [3]string {
	var c [3]string
	c[0], _, _ = in.Serving(a)
	// The same sets with a neither quarantined nor (then) pulled out;
	// in itself is left as it is.
	unquarantined := Input{Sets: in.Sets}
	if d, ok := in.PulledOut[a]; ok {
		unquarantined.PulledOut = map[netip.Addr]string{a: d}
	}
	c[1], _, _ = unquarantined.Serving(a)
	c[2], _, _ = Input{Sets: in.Sets}.Serving(a)
	return c
}

// SetOf returns the set edge belongs to.
func (in Input) SetOf(edge string) (*model.EdgeSet, model.EdgeNode, bool) {
	for _, s := range in.Sets {
		for _, e := range s.Edges {
			if e.Name == edge {
				return s, e, true
			}
		}
	}
	return nil, model.EdgeNode{}, false
}

// Announcements returns the routes edge announces when it is well, sorted:
// its set's prefixes for a prefix set, the /32 of each address the set
// serves for a dedicated or quarantine set. An edge in no set announces
// nothing. Edges of other sets never announce a pulled-out /32.
func (in Input) Announcements(edge string) []netip.Prefix {
	s, _, ok := in.SetOf(edge)
	if !ok {
		return nil
	}
	var out []netip.Prefix
	switch s.Role {
	case model.RolePrefix:
		out = append(out, s.Prefixes...)
	case model.RoleDedicated:
		for a, d := range in.PulledOut {
			if d == s.Name {
				if set, _, _ := in.Serving(a); set == s.Name {
					out = append(out, netip.PrefixFrom(a, a.BitLen()))
				}
			}
		}
	case model.RoleQuarantine:
		for a := range in.Quarantined {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

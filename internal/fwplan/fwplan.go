// Package fwplan turns firewall rules (model.FirewallRule) into the
// contents of the edge's firewall maps (bpf/lib/fw.h), and diffs two plans
// so the edge writes only what changed. It is pure: no I/O, no kernel.
//
// The data plane answers a packet with at most two longest-prefix lookups,
// so the planner does the rest ahead of time:
//
//   - Scopes: global rules are scope 0. Every destination (EIP or VIP) some
//     set or address rule applies to gets the scope of its exact list of
//     such rules; destinations with the same list share a scope, so a set
//     rule costs its entries once, not once per address of the set.
//   - Entries: within a scope, one entry per distinct source prefix,
//     carrying every rule of the scope whose source prefix contains it (the
//     shorter prefixes' rules pushed down into the longer ones). The
//     trie's longest match therefore sees every rule matching a source,
//     whatever the nesting: deny beats allow, not the longer prefix.
//   - Flags: whether global rules exist (a destination with no scope of
//     its own still looks up scope 0), and whether a destination has an
//     allow list (a global allow rule makes every destination private).
package fwplan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/azgate/azgate/internal/model"
)

// Bounds of the data plane's maps (bpf/lib/consts.h; TestCapacitiesMatchC).
const (
	MaxRefs    = model.MaxFirewallOverlap // FW_REFS
	RulesMax   = 131072                   // FW_RULES_MAX
	EntriesMax = 1 << 20                  // FW_ENTRIES_MAX
	DestsMax   = 1 << 20                  // FW_DST_MAX
	ScopeMax   = 0xffffff                 // FW_SCOPE_MASK
	BloomWords = 32768                    // FW_BLOOM_WORDS
	MaxLens    = 7                        // FW_LENS
	NoBloom    = 255                      // FW_NO_BLOOM
)

// BloomBit is the bit of the firewall's Bloom filter for the key (scope,
// src masked to bits, bits), src in host order: the same function as
// bpf/lib/fw.h fw_bloom_bit. MUST NOT change without the C side.
func BloomBit(scope, src uint32, bits int) uint32 {
	h := scope*0x9E3779B1 ^ src*0x85EBCA77 ^ uint32(bits)*0xC2B2AE3D
	h ^= h >> 15
	h *= 0x2C1B3C6D
	h ^= h >> 12
	return h & (BloomWords*64 - 1)
}

func bloomBitOf(k Key) uint32 {
	b := k.Source.Masked().Addr().As4()
	return BloomBit(k.Scope, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]), k.Source.Bits())
}

// Actions of a Ref (FW_DENY, FW_ALLOW).
const (
	Deny  = 1
	Allow = 2
)

// Key of an entry: a scope and a source prefix.
type Key struct {
	Scope  uint32
	Source netip.Prefix
}

// Ref is one rule an entry carries.
type Ref struct {
	Rule           uint32 // counter index
	Action         uint8  // Deny or Allow
	Proto          uint8  // 0: any
	PortLo, PortHi uint16 // 0-65535: every port
}

// Entry is what one key holds (comparable, so plans diff with ==).
type Entry struct {
	N    int
	Refs [MaxRefs]Ref
}

// Dest is the firewall state of a destination (or, as Plan.Global, of
// every destination).
type Dest struct {
	Scope   uint32 // 0: no rules of its own or its set's
	Global  bool   // global rules exist (Plan.Global only)
	Private bool   // the destination has an allow list
	// Plan.Global only: the distinct source prefix lengths of the
	// entries, which the Bloom filter is probed at (NLens NoBloom: more
	// than MaxLens, the filter is not used).
	NLens uint8
	Lens  [MaxLens]uint8
}

// Input is what the planner needs to know of the region.
type Input struct {
	Rules []*model.FirewallRule
	// Dests are the EIPs and VIPs the edge routes.
	Dests []netip.Addr
	// Serves reports whether an edge set serves an address (see
	// model.FirewallRule.Set); nil: no set rule applies anywhere.
	Serves func(set string, a netip.Addr) bool
	// Slots are the counter indexes of the previous plan (Plan.Slots):
	// a rule keeps its index, and its counters, across plans.
	Slots map[string]uint32
}

// Plan is the desired content of the firewall maps.
type Plan struct {
	Global  Dest
	Dests   map[netip.Addr]Dest // only destinations with a scope or an allow list of their own
	Entries map[Key]Entry
	// Slots: each rule's counter index (fw_stats).
	Slots map[string]uint32
	// Fresh are the indexes given to rules that had none: their counters
	// are zeroed before the rule is written.
	Fresh []uint32
	// Bloom is the filter of the entries' keys (BloomWords words).
	Bloom []uint64
}

// Build plans the rules. It fails, naming the rules, when more than
// MaxRefs rules of one scope overlap at a source prefix or a map would
// overflow; rules whose address is no destination of this edge are
// planned for no destination (they cannot match).
func Build(in Input) (*Plan, error) {
	p := &Plan{Dests: map[netip.Addr]Dest{}, Entries: map[Key]Entry{}, Slots: map[string]uint32{}}
	rules := slices.Clone(in.Rules)
	slices.SortFunc(rules, func(a, b *model.FirewallRule) int { return strings.Compare(a.Name, b.Name) })
	if len(rules) > RulesMax {
		return nil, fmt.Errorf("firewall: %d rules, the edge holds %d", len(rules), RulesMax)
	}
	// Counter slots: kept from the previous plan, the lowest free for
	// new rules.
	used := make(map[uint32]bool, len(rules))
	for _, r := range rules {
		if i, ok := in.Slots[r.Name]; ok && i < RulesMax {
			p.Slots[r.Name] = i
			used[i] = true
		}
	}
	next := uint32(0)
	for _, r := range rules {
		if _, ok := p.Slots[r.Name]; ok {
			continue
		}
		for used[next] {
			next++
		}
		p.Slots[r.Name] = next
		used[next] = true
		p.Fresh = append(p.Fresh, next)
	}

	// Scopes: each destination's list of set and address rules.
	var global []*model.FirewallRule
	byAddr := map[netip.Addr][]*model.FirewallRule{}
	bySet := map[string][]*model.FirewallRule{}
	for _, r := range rules {
		switch {
		case r.Address.IsValid():
			byAddr[r.Address] = append(byAddr[r.Address], r)
		case r.Set != "":
			bySet[r.Set] = append(bySet[r.Set], r)
		default:
			global = append(global, r)
			p.Global.Global = true
			p.Global.Private = p.Global.Private || r.Action == model.FirewallAllow
		}
	}
	sets := make([]string, 0, len(bySet))
	for s := range bySet {
		sets = append(sets, s)
	}
	slices.Sort(sets)
	type scope struct {
		rules []*model.FirewallRule
		dests []netip.Addr
	}
	scopes := map[string]*scope{}
	dests := slices.Clone(in.Dests)
	slices.SortFunc(dests, netip.Addr.Compare)
	dests = slices.Compact(dests)
	for _, d := range dests {
		var rs []*model.FirewallRule
		for _, s := range sets {
			if in.Serves != nil && in.Serves(s, d) {
				rs = append(rs, bySet[s]...)
			}
		}
		rs = append(rs, byAddr[d]...)
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b *model.FirewallRule) int { return strings.Compare(a.Name, b.Name) })
		names := make([]string, len(rs))
		for i, r := range rs {
			names[i] = r.Name
		}
		id := strings.Join(names, "\x00")
		sc := scopes[id]
		if sc == nil {
			sc = &scope{rules: rs}
			scopes[id] = sc
		}
		sc.dests = append(sc.dests, d)
	}
	if len(scopes) > ScopeMax {
		return nil, fmt.Errorf("firewall: %d destination scopes, the edge holds %d", len(scopes), ScopeMax)
	}
	ids := make([]string, 0, len(scopes))
	for id := range scopes {
		ids = append(ids, id)
	}
	slices.Sort(ids) // scope numbers follow the rule names: stable as rules come and go elsewhere
	if err := p.addEntries(0, global); err != nil {
		return nil, err
	}
	for i, id := range ids {
		sc := scopes[id]
		n := uint32(i + 1)
		private := slices.ContainsFunc(sc.rules, func(r *model.FirewallRule) bool { return r.Action == model.FirewallAllow })
		for _, d := range sc.dests {
			p.Dests[d] = Dest{Scope: n, Private: private}
		}
		if err := p.addEntries(n, sc.rules); err != nil {
			return nil, err
		}
	}
	if len(p.Dests) > DestsMax {
		return nil, fmt.Errorf("firewall: %d destinations with rules of their own or their set's, the edge holds %d", len(p.Dests), DestsMax)
	}
	if len(p.Entries) > EntriesMax {
		return nil, fmt.Errorf("firewall: %d (scope, source prefix) entries, the edge holds %d", len(p.Entries), EntriesMax)
	}
	p.Bloom = make([]uint64, BloomWords)
	var lens [33]bool
	for k := range p.Entries {
		if !k.Source.Addr().Is4() {
			continue // fw_rules6 has no filter in front of it
		}
		b := bloomBitOf(k)
		p.Bloom[b/64] |= 1 << (b % 64)
		lens[k.Source.Bits()] = true
	}
	for l := 32; l >= 0; l-- { // longest first: a /32 blocklist's probe comes first
		if !lens[l] {
			continue
		}
		if p.Global.NLens == MaxLens {
			p.Global.NLens, p.Global.Lens = NoBloom, [MaxLens]uint8{}
			break
		}
		p.Global.Lens[p.Global.NLens] = uint8(l)
		p.Global.NLens++
	}
	return p, nil
}

// addEntries writes a scope's entries: one per distinct source prefix,
// with the rules of every prefix of the scope containing it.
func (p *Plan) addEntries(scope uint32, rules []*model.FirewallRule) error {
	if len(rules) == 0 {
		return nil
	}
	at := map[netip.Prefix][]*model.FirewallRule{}
	// The prefix lengths in use, per family (IPv6 at 33 + bits):
	// ancestors are looked up at these only.
	var lens [33 + 129]bool
	for _, r := range rules {
		for _, s := range r.Sources {
			s = s.Masked()
			if !s.IsValid() || s.Addr().Is4In6() || s.Addr().Zone() != "" {
				continue // model.FirewallRule.Validate refuses them
			}
			if l := at[s]; len(l) == 0 || l[len(l)-1] != r {
				at[s] = append(at[s], r)
			}
			lens[lensIndex(s.Addr(), s.Bits())] = true
		}
	}
	for pfx := range at {
		var refs []*model.FirewallRule
		for b := pfx.Bits(); b >= 0; b-- {
			if !lens[lensIndex(pfx.Addr(), b)] {
				continue
			}
			anc, _ := pfx.Addr().Prefix(b)
			for _, r := range at[anc] {
				if !slices.Contains(refs, r) {
					refs = append(refs, r)
				}
			}
		}
		if len(refs) > MaxRefs {
			names := make([]string, len(refs))
			for i, r := range refs {
				names[i] = r.Name
			}
			slices.Sort(names)
			return fmt.Errorf("firewall: %d rules overlap at source %v for the same destination (%s): at most %d may",
				len(refs), pfx, strings.Join(names, ", "), MaxRefs)
		}
		slices.SortFunc(refs, func(a, b *model.FirewallRule) int { return cmp.Compare(p.Slots[a.Name], p.Slots[b.Name]) })
		var e Entry
		for _, r := range refs {
			lo, hi := r.Ports()
			act := uint8(Deny)
			if r.Action == model.FirewallAllow {
				act = Allow
			}
			e.Refs[e.N] = Ref{Rule: p.Slots[r.Name], Action: act, Proto: r.IPProto(), PortLo: lo, PortHi: hi}
			e.N++
		}
		p.Entries[Key{Scope: scope, Source: pfx}] = e
	}
	return nil
}

// lensIndex: where addEntries notes a prefix length of a's family.
func lensIndex(a netip.Addr, bits int) int {
	if a.Is4() {
		return bits
	}
	return 33 + bits
}

// Diff is what turns the maps from one plan into another.
type Diff struct {
	PutEntries  map[Key]Entry
	DelEntries  []Key
	PutDests    map[netip.Addr]Dest
	DelDests    []netip.Addr
	Global      Dest
	GlobalDirty bool
	// Fresh: counter indexes to zero before the entries are written.
	Fresh []uint32
	// BloomOr: bits to set in the Bloom filter before the entries are
	// written (a new key must not be skipped); BloomSet: words to write
	// after the deletes (stale bits cleared); BloomAll (with Prune):
	// write every word of Want.Bloom after the deletes.
	BloomOr  map[uint32]uint64
	BloomSet map[uint32]uint64
	BloomAll bool
	// Prune (a diff from no known plan: the maps may hold a previous
	// daemon's plan): after writing, delete whatever Want does not hold.
	Prune bool
	Want  *Plan
}

// Empty reports whether the diff changes nothing.
func (d *Diff) Empty() bool {
	return len(d.PutEntries) == 0 && len(d.DelEntries) == 0 && len(d.PutDests) == 0 && len(d.DelDests) == 0 &&
		!d.GlobalDirty && len(d.Fresh) == 0 && !d.Prune && len(d.BloomOr) == 0 && len(d.BloomSet) == 0
}

// Compare returns the changes from old (nil: maps that may hold anything:
// everything is written, then whatever p does not hold is pruned) to p.
func (p *Plan) Compare(old *Plan) Diff {
	d := Diff{PutEntries: map[Key]Entry{}, PutDests: map[netip.Addr]Dest{}, Global: p.Global, Fresh: p.Fresh,
		BloomOr: map[uint32]uint64{}, BloomSet: map[uint32]uint64{}}
	if old == nil {
		old = &Plan{}
		d.GlobalDirty = true
		d.Prune, d.Want, d.BloomAll = true, p, true
	} else if old.Global != p.Global {
		d.GlobalDirty = true
	}
	for i, w := range p.Bloom {
		var o uint64
		if i < len(old.Bloom) {
			o = old.Bloom[i]
		}
		if add := w &^ o; add != 0 {
			d.BloomOr[uint32(i)] = add
		}
		if o&^w != 0 {
			d.BloomSet[uint32(i)] = w
		}
	}
	for k, e := range p.Entries {
		if o, ok := old.Entries[k]; !ok || o != e {
			d.PutEntries[k] = e
		}
	}
	for k := range old.Entries {
		if _, ok := p.Entries[k]; !ok {
			d.DelEntries = append(d.DelEntries, k)
		}
	}
	for a, v := range p.Dests {
		if o, ok := old.Dests[a]; !ok || o != v {
			d.PutDests[a] = v
		}
	}
	for a := range old.Dests {
		if _, ok := p.Dests[a]; !ok {
			d.DelDests = append(d.DelDests, a)
		}
	}
	slices.SortFunc(d.DelEntries, func(a, b Key) int {
		if c := cmp.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return a.Source.Addr().Compare(b.Source.Addr())*64 + a.Source.Bits() - b.Source.Bits()
	})
	slices.SortFunc(d.DelDests, netip.Addr.Compare)
	return d
}

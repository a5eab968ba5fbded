package fwplan

import (
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

func rule(name, action string, src ...string) *model.FirewallRule {
	r := &model.FirewallRule{Name: name, Action: action}
	for _, s := range src {
		r.Sources = append(r.Sources, pfx(s))
	}
	return r
}

// TestNesting: an entry carries the rules of every shorter prefix of its
// scope containing it, so the longest match sees them all.
func TestNesting(t *testing.T) {
	wide := rule("a-wide", model.FirewallDeny, "203.0.0.0/8")
	narrow := rule("b-narrow", model.FirewallAllow, "203.0.113.0/24")
	host := rule("c-host", model.FirewallDeny, "203.0.113.7/32")
	other := rule("d-other", model.FirewallDeny, "198.18.0.0/15")
	p, err := Build(Input{Rules: []*model.FirewallRule{wide, narrow, host, other}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint32{ // prefix -> rule slots, in slot order
		"203.0.0.0/8":    {0},
		"203.0.113.0/24": {0, 1},
		"203.0.113.7/32": {0, 1, 2},
		"198.18.0.0/15":  {3},
	}
	if len(p.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(p.Entries), len(want), p.Entries)
	}
	for s, rules := range want {
		e, ok := p.Entries[Key{0, pfx(s)}]
		if !ok || e.N != len(rules) {
			t.Fatalf("%s: %+v, want rules %v", s, e, rules)
		}
		for i, r := range rules {
			if e.Refs[i].Rule != r {
				t.Errorf("%s: ref %d is rule %d, want %d", s, i, e.Refs[i].Rule, r)
			}
		}
	}
	if !p.Global.Global || !p.Global.Private {
		t.Errorf("global flags %+v: want global rules and an allow list", p.Global)
	}
}

// TestScopes: destinations with the same set and address rules share a
// scope; a set rule reaches the addresses its set serves only.
func TestScopes(t *testing.T) {
	setRule := rule("set-deny", model.FirewallDeny, "203.0.113.0/24")
	setRule.Set = "pop-a"
	own := rule("vip-allow", model.FirewallAllow, "198.18.7.0/24")
	own.Address = ip("198.51.100.9")
	own.Protocol, own.Port, own.PortEnd = model.ProtoTCP, 8000, 8100
	in := Input{
		Rules: []*model.FirewallRule{setRule, own},
		Dests: []netip.Addr{ip("198.51.100.7"), ip("198.51.100.8"), ip("198.51.100.9"), ip("192.0.2.1")},
		Serves: func(set string, a netip.Addr) bool {
			return set == "pop-a" && pfx("198.51.100.0/24").Contains(a)
		},
	}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := p.Dests[ip("198.51.100.7")], p.Dests[ip("198.51.100.8")], p.Dests[ip("198.51.100.9")]
	if a.Scope == 0 || a != b || a.Private {
		t.Errorf("two addresses of the set: %+v %+v, want one public scope", a, b)
	}
	if c.Scope == 0 || c.Scope == a.Scope || !c.Private {
		t.Errorf("the VIP with its allow list: %+v", c)
	}
	if _, ok := p.Dests[ip("192.0.2.1")]; ok {
		t.Error("an address no rule applies to has a scope")
	}
	if p.Global.Global || p.Global.Private {
		t.Errorf("no global rules, flags %+v", p.Global)
	}
	// The VIP's scope holds the set's rule and its own (with its ports).
	e := p.Entries[Key{c.Scope, pfx("198.18.7.0/24")}]
	if e.N != 1 || e.Refs[0].Action != Allow || e.Refs[0].Proto != 6 || e.Refs[0].PortLo != 8000 || e.Refs[0].PortHi != 8100 {
		t.Errorf("VIP allow entry %+v", e)
	}
	if e := p.Entries[Key{c.Scope, pfx("203.0.113.0/24")}]; e.N != 1 || e.Refs[0].Action != Deny {
		t.Errorf("VIP's set entry %+v", e)
	}
	if len(p.Entries) != 3 {
		t.Errorf("%d entries, want 3 (the set's once for its shared scope, twice in the VIP's)", len(p.Entries))
	}
}

// TestOverlapBound: more than MaxRefs rules at one source fail, naming them.
func TestOverlapBound(t *testing.T) {
	var rs []*model.FirewallRule
	for i := range MaxRefs + 1 {
		rs = append(rs, rule("r"+strconv.Itoa(i), model.FirewallDeny, "203.0.113.0/24"))
	}
	_, err := Build(Input{Rules: rs})
	if err == nil || !strings.Contains(err.Error(), "overlap at source 203.0.113.0/24") || !strings.Contains(err.Error(), "r8") {
		t.Fatalf("err %v", err)
	}
	if _, err := Build(Input{Rules: rs[:MaxRefs]}); err != nil {
		t.Fatal(err)
	}
}

// TestSlotsAndDiff: rules keep their counter slots across plans; the diff
// writes only what changed.
func TestSlotsAndDiff(t *testing.T) {
	a := rule("a", model.FirewallDeny, "203.0.113.0/24")
	b := rule("b", model.FirewallDeny, "198.18.0.0/24")
	p1, err := Build(Input{Rules: []*model.FirewallRule{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if d := p1.Compare(nil); len(d.PutEntries) != 2 || !d.GlobalDirty || len(d.Fresh) != 2 {
		t.Errorf("first diff %+v", d)
	}
	aa := rule("0a", model.FirewallDeny, "192.0.2.0/24") // sorts first: must not take a's slot
	p2, err := Build(Input{Rules: []*model.FirewallRule{aa, b}, Slots: p1.Slots})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Slots["b"] != p1.Slots["b"] {
		t.Errorf("b moved from slot %d to %d", p1.Slots["b"], p2.Slots["b"])
	}
	if p2.Slots["0a"] != 0 || len(p2.Fresh) != 1 {
		t.Errorf("new rule: slot %d, fresh %v (want a's freed slot 0)", p2.Slots["0a"], p2.Fresh)
	}
	d := p2.Compare(p1)
	if len(d.PutEntries) != 1 || len(d.DelEntries) != 1 || d.DelEntries[0].Source != pfx("203.0.113.0/24") || d.GlobalDirty {
		t.Errorf("diff %+v", d)
	}
	if d := p2.Compare(p2); len(d.PutEntries)+len(d.DelEntries)+len(d.PutDests)+len(d.DelDests) != 0 || d.GlobalDirty {
		t.Errorf("diff of a plan with itself %+v", d)
	}
}

// TestImports: the planner is core (model only).
func TestImports(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.Contains(strings.Split(p, "/")[0], ".") && p != "github.com/azgate/azgate/internal/model" {
				t.Errorf("%s imports %s: fwplan may import model only", f, p)
			}
		}
	}
}

// BenchmarkBuild100k: planning 100k global /32 deny rules.
func BenchmarkBuild100k(b *testing.B) {
	rs := make([]*model.FirewallRule, 100000)
	for i := range rs {
		rs[i] = &model.FirewallRule{Name: "r" + strconv.Itoa(i), Action: model.FirewallDeny,
			Sources: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{203, byte(i >> 16), byte(i >> 8), byte(i)}), 32)}}
	}
	for b.Loop() {
		if _, err := Build(Input{Rules: rs}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBloom: every entry's key has its bit; the lengths in use are
// listed longest first, and more than MaxLens turn the filter off; the
// diff sets new bits before and clears stale ones after.
func TestBloom(t *testing.T) {
	a := rule("a", model.FirewallDeny, "203.0.113.0/24", "198.18.0.7/32")
	p1, err := Build(Input{Rules: []*model.FirewallRule{a}})
	if err != nil {
		t.Fatal(err)
	}
	for k := range p1.Entries {
		b := bloomBitOf(k)
		if p1.Bloom[b/64]&(1<<(b%64)) == 0 {
			t.Errorf("entry %v has no bit", k)
		}
	}
	if p1.Global.NLens != 2 || p1.Global.Lens[0] != 32 || p1.Global.Lens[1] != 24 {
		t.Errorf("lens %d %v", p1.Global.NLens, p1.Global.Lens)
	}
	var srcs []string
	for l := 8; l <= 32; l += 3 { // 9 lengths
		pf, _ := netip.MustParseAddr("203.0.113.255").Prefix(l)
		srcs = append(srcs, pf.String())
	}
	p2, err := Build(Input{Rules: []*model.FirewallRule{rule("many", model.FirewallDeny, srcs...)}})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Global.NLens != NoBloom {
		t.Errorf("%d lengths: nlens %d, want NoBloom", len(srcs), p2.Global.NLens)
	}
	d := p2.Compare(p1)
	if len(d.BloomOr) == 0 || len(d.BloomSet) == 0 || !d.GlobalDirty {
		t.Errorf("diff: or %d words, set %d words, global dirty %v", len(d.BloomOr), len(d.BloomSet), d.GlobalDirty)
	}
	for i, add := range d.BloomOr {
		if p1.Bloom[i]&add != 0 || p2.Bloom[i]&add != add {
			t.Errorf("word %d: adds %x, old %x new %x", i, add, p1.Bloom[i], p2.Bloom[i])
		}
	}
}

// TestIPv6: IPv6 sources get entries of their own family (nested as IPv4
// ones, the two families never mixed), one rule holding both families
// keeps one counter slot, the Bloom filter and its lengths hold IPv4 keys
// only, and a set rule reaches the set's IPv6 EIPs.
func TestIPv6(t *testing.T) {
	dual := rule("a-dual", model.FirewallDeny, "203.0.113.0/24", "2001:db8:bad::/48")
	wide := rule("b-wide", model.FirewallAllow, "2001:db8::/32", "::/0")
	dual.Set = "pop-a"
	wide.Set = "pop-a"
	in := Input{
		Rules: []*model.FirewallRule{dual, wide},
		Dests: []netip.Addr{ip("198.51.100.7"), ip("2001:db8:f::7"), ip("2001:db8:e::1")},
		Serves: func(set string, a netip.Addr) bool {
			return set == "pop-a" && (a == ip("198.51.100.7") || pfx("2001:db8:f::/48").Contains(a))
		},
	}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint32{
		"203.0.113.0/24":    {0},
		"::/0":              {1},
		"2001:db8::/32":     {1},
		"2001:db8:bad::/48": {0, 1}, // the /32's and ::/0's allow pushed down
	}
	if len(p.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(p.Entries), len(want), p.Entries)
	}
	for s, rules := range want {
		e, ok := p.Entries[Key{1, pfx(s)}]
		if !ok || e.N != len(rules) {
			t.Fatalf("%s: %+v, want rules %v", s, e, rules)
		}
		for i, r := range rules {
			if e.Refs[i].Rule != r {
				t.Errorf("%s: ref %d is rule %d, want %d", s, i, e.Refs[i].Rule, r)
			}
		}
	}
	for _, a := range []string{"198.51.100.7", "2001:db8:f::7"} {
		if d := p.Dests[ip(a)]; d.Scope != 1 || !d.Private {
			t.Errorf("%s: %+v, want scope 1 with an allow list", a, d)
		}
	}
	if _, ok := p.Dests[ip("2001:db8:e::1")]; ok {
		t.Errorf("2001:db8:e::1 is outside the set: %+v", p.Dests)
	}
	if p.Global.NLens != 1 || p.Global.Lens[0] != 24 {
		t.Errorf("Bloom lengths %d %v: want the IPv4 /24 only", p.Global.NLens, p.Global.Lens)
	}
	bits := 0
	for _, w := range p.Bloom {
		for ; w != 0; w &= w - 1 {
			bits++
		}
	}
	if bits != 1 {
		t.Errorf("%d Bloom bits, want 1 (the one IPv4 key)", bits)
	}
	// Nine rules overlapping at an IPv6 source: refused, naming the source.
	var many []*model.FirewallRule
	for i := range MaxRefs + 1 {
		many = append(many, rule("r"+strconv.Itoa(i), model.FirewallDeny, "2001:db8::/32"))
	}
	if _, err := Build(Input{Rules: many}); err == nil || !strings.Contains(err.Error(), "2001:db8::/32") {
		t.Errorf("9 rules at one IPv6 source: %v", err)
	}
	// ... while 8 at an IPv6 source and 8 at an IPv4 one are two entries.
	many = many[:MaxRefs]
	for i := range MaxRefs {
		many = append(many, rule("s"+strconv.Itoa(i), model.FirewallDeny, "0.0.0.0/0"))
	}
	if _, err := Build(Input{Rules: many}); err != nil {
		t.Errorf("8 rules per family: %v", err)
	}
}

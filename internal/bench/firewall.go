package bench

import (
	"fmt"
	"net/netip"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/model"
)

// FirewallRules is how many rules the firewall suite loads in each scope
// (issue 9: 100k rules must not slow the fast path measurably).
const FirewallRules = 100_000

// fwRules makes n deny rules of distinct /32 sources in 198.18.0.0/15
// (never the benchmark's client), scoped to dst (invalid: global).
func fwRules(prefix string, n int, dst netip.Addr) []*model.FirewallRule {
	out := make([]*model.FirewallRule, n)
	for i := range out {
		a := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)})
		out[i] = &model.FirewallRule{Name: fmt.Sprintf("%s-%06d", prefix, i), Action: model.FirewallDeny,
			Sources: []netip.Prefix{netip.PrefixFrom(a, 32)}, Address: dst}
	}
	return out
}

// Firewall measures the edge's Internet -> EIP path (the dataplane
// suite's edge_encap) with no firewall rule against 100k rules loaded, in
// one run, interleaved round by round: rules of other destinations (the
// route cache's flag skips the firewall), 100k global rules (one trie
// lookup on the source, no match), 100k global rules and 100k of the
// EIP's own (two lookups), and the EIP made private with the client on
// its allow list (two lookups, a matching entry, its counter written).
// The first case empties the maps, the others fill them (300k entries:
// 100k global, copies in the EIP's and the other's scopes) and switch
// the destination's scope and the global flags. The last two are the
// IPv6 EIP's (edge_encap6, issue 21): no rule, and the twin of the
// private IPv4 case (its allow rule in fw_rules6, the 100k global IPv4
// rules loaded: a cache hit in fw_vcache6).
func Firewall(o DataplaneOptions) ([]Result, error) {
	if o.Repeat == 0 {
		o.Repeat = 2_000_000
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	s, err := dataplaneSide(env, "", "", "")
	if err != nil {
		return nil, err
	}
	defer s.Close()
	e := s.edge

	eip := netip.MustParseAddr(benchEIP)
	other := netip.MustParseAddr("192.0.0.1") // a routed address of the side's table
	// 100k global rules, an allow rule on the EIP and one rule on another
	// address plan three scopes; the EIP's and the other's then get a
	// copy of the global entries too (the fwplan bound of 131072 rules
	// applies to rules, not to entries).
	rules := fwRules("global", FirewallRules, netip.Addr{})
	allow := &model.FirewallRule{Name: "allow-client", Action: model.FirewallAllow,
		Sources: []netip.Prefix{netip.MustParsePrefix(benchClient + "/32")}, Address: eip}
	deny := &model.FirewallRule{Name: "other", Action: model.FirewallDeny,
		Sources: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")}, Address: other}
	// The IPv6 EIP's twin of allow (issue 21): its own scope, an entry
	// in fw_rules6.
	eip6 := netip.MustParseAddr(benchEIP6)
	allow6 := &model.FirewallRule{Name: "allow-client6", Action: model.FirewallAllow,
		Sources: []netip.Prefix{netip.MustParsePrefix(benchClient6 + "/128")}, Address: eip6}
	p, err := fwplan.Build(fwplan.Input{Rules: append(rules, allow, deny, allow6), Dests: []netip.Addr{eip, other, eip6}})
	if err != nil {
		return nil, err
	}
	eipScope, otherScope := p.Dests[eip], p.Dests[other]
	d := p.Compare(nil)
	for k, v := range p.Entries {
		if k.Scope == 0 {
			for _, sc := range []uint32{eipScope.Scope, otherScope.Scope} {
				d.PutEntries[fwplan.Key{Scope: sc, Source: k.Source}] = v
				a := k.Source.Addr().As4()
				bit := fwplan.BloomBit(sc, uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]), k.Source.Bits())
				d.BloomOr[bit/64] |= 1 << (bit % 64)
			}
		}
	}
	d.BloomAll = false // BloomOr holds the plan's bits and the copies'
	d.Prune = false
	empty := fwplan.Diff{GlobalDirty: true, DelDests: []netip.Addr{eip, other, eip6}}
	for k := range d.PutEntries {
		empty.DelEntries = append(empty.DelEntries, k)
	}
	empty.BloomSet = map[uint32]uint64{}
	for i := range d.BloomOr {
		empty.BloomSet[i] = 0
	}
	loaded := false
	// load fills the maps (or empties them) when the case needs it.
	load := func(want bool) error {
		if loaded == want {
			return nil
		}
		diff := empty
		if want {
			diff = d
		}
		if err := e.ApplyFirewall(diff); err != nil {
			return fmt.Errorf("firewall entries (loading %v): %w", want, err)
		}
		loaded = want
		return nil
	}
	// set points the EIP at a scope (0: none) and sets the global flags.
	set := func(scope uint32, private, global bool) func(*side) error {
		return func(*side) error {
			if err := load(true); err != nil {
				return err
			}
			g := p.Global // the Bloom filter's lengths
			g.Global = global
			d := fwplan.Diff{Global: g, GlobalDirty: true,
				PutDests: map[netip.Addr]fwplan.Dest{other: otherScope}}
			if scope == 0 {
				d.DelDests = []netip.Addr{eip}
			} else {
				d.PutDests[eip] = fwplan.Dest{Scope: scope, Private: private}
			}
			return e.ApplyFirewall(d)
		}
	}
	// set6 makes the IPv6 EIP private (its allow rule, the global flags
	// as set's last case); the IPv4 cases leave its scope as it is.
	set6 := func(*side) error {
		if err := load(true); err != nil {
			return err
		}
		return e.ApplyFirewall(fwplan.Diff{Global: p.Global, GlobalDirty: true, PutDests: map[netip.Addr]fwplan.Dest{eip6: p.Dests[eip6]}})
	}
	frame := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, benchClient, benchEIP, 40000, 80, 128)
	frame6 := tcpFrame6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, benchEIP6, 40000, 80, 128)
	cases := []nsCase{
		{name: "edge_encap, no firewall rule (empty maps)", prog: "edge", dev: dptest.ExtDev, frame: frame,
			action: actRedirect, chain: true, moves: true, before: func(*side) error { return load(false) }},
		{name: "edge_encap, 100k rules of another destination", prog: "edge", dev: dptest.ExtDev, frame: frame,
			action: actRedirect, chain: true, moves: true, before: set(0, false, false), target: "<= +10 ns"},
		{name: "edge_encap, 100k global rules (one lookup, no match)", prog: "edge", dev: dptest.ExtDev, frame: frame,
			action: actRedirect, chain: true, moves: true, before: set(0, false, true)},
		{name: "edge_encap, 100k global + 100k own rules (two lookups, the own scope holds the client's allow entry)", prog: "edge", dev: dptest.ExtDev, frame: frame,
			action: actRedirect, chain: true, moves: true, before: set(eipScope.Scope, false, true)},
		{name: "edge_encap, the same with the EIP private (client allowed, counted)", prog: "edge", dev: dptest.ExtDev, frame: frame,
			action: actRedirect, chain: true, moves: true, before: set(eipScope.Scope, true, true)},
		{name: "edge_encap6, no firewall rule (empty maps)", prog: "edge", dev: dptest.ExtDev, frame: frame6,
			action: actRedirect, chain: true, moves: true, before: func(*side) error { return load(false) }},
		{name: "edge_encap6, 100k global rules, the IPv6 EIP private (client allowed, counted)", prog: "edge", dev: dptest.ExtDev, frame: frame6,
			action: actRedirect, chain: true, moves: true, before: set6, target: "within 10 % of its IPv4 twin above the floor"},
	}
	n := newNSBed(env, b, o.Repeat)
	n.only, n.soak, n.lines = o.Only, o.Soak, o.JITLines
	out, err := n.run("firewall", o.Rounds, []*side{s}, cases)
	if err != nil {
		return nil, err
	}
	// The first case is the baseline of the IPv4 ones, the IPv6 EIP's
	// first of its own: with no rule the firewall costs nothing but the
	// flag test.
	var none, none6 float64
	for i := range out {
		switch out[i].Name {
		case cases[0].name:
			none = out[i].Value
		case cases[5].name:
			none6 = out[i].Value
		}
	}
	for i := range out {
		for j, c := range cases {
			if out[i].Name != c.name || j == 0 || j == 5 {
				continue
			}
			base := none
			if j > 5 {
				base = none6
			}
			out[i].Note = fmt.Sprintf("%+.1f ns against no rule in the same run", out[i].Value-base)
		}
	}
	return out, nil
}

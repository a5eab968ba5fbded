package edge

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/model"
)

// fwEdge is a fake edge whose firewall writes go through injected faults.
type fwEdge struct {
	*dataplane.FakeEdge
	dataplane.FaultyFirewall
}

func (f fwEdge) ApplyFirewall(d fwplan.Diff) error { return f.FaultyFirewall.ApplyFirewall(d) }
func (f fwEdge) FirewallStats(i uint32) (dataplane.Count, error) {
	return f.FaultyFirewall.FirewallStats(i)
}

// TestFirewallReconcile: the edge programs its rules (scoped to an EIP, a
// set, globally), follows their changes by diff, reaches a set's newly
// bound EIP, survives a failed write (the next commit writes everything
// and prunes), reports rules that do not fit without failing the commit,
// and shows each rule's counters in its status.
func TestFirewallReconcile(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	faults := dataplane.NewFaults()
	m := fwEdge{FakeEdge: fake, FaultyFirewall: dataplane.FaultyFirewall{FirewallMaps: fake, F: faults}}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, m)
	src := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	eipRule := &model.FirewallRule{Name: "eip-allow", Action: model.FirewallAllow, Sources: src, Address: a("198.51.100.7")}
	load(t, r, 10, append(region(), eipRule)...)
	d, ok := fake.FW.FWDests[a("198.51.100.7")]
	if !ok || !d.Private || d.Scope == 0 {
		t.Fatalf("destinations %v: want 198.51.100.7 private with a scope", fake.FW.FWDests)
	}
	if e := fake.FW.FWEntries[fwplan.Key{Scope: d.Scope, Source: src[0]}]; e.N != 1 || e.Refs[0].Action != fwplan.Allow {
		t.Fatalf("entries %v", fake.FW.FWEntries)
	}

	// A set rule reaches the set's EIPs, the one bound later too.
	setRule := &model.FirewallRule{Name: "set-deny", Action: model.FirewallDeny, Set: "pop-a", Sources: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	watched(t, r, 11, setRule)
	if _, ok := fake.FW.FWDests[a("198.51.100.8")]; ok {
		t.Fatal("an unbound EIP has a firewall scope")
	}
	watched(t, r, 12, &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	if d8, ok := fake.FW.FWDests[a("198.51.100.8")]; !ok || d8.Private || d8.Scope == fake.FW.FWDests[a("198.51.100.7")].Scope {
		t.Fatalf("the newly bound EIP of the set: %+v %v", d8, ok)
	}
	// Moving a bound EIP to another host changes no destination: the
	// rules are not planned again.
	put(t, r, 12, &model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	if r.fwDirty {
		t.Error("a binding moved between hosts marks the firewall for a rebuild")
	}
	r.Commit(12, false)
	// So does a service's new pool; its VIP is a destination, though.
	svc := &model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeNAT, TableSize: 101,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
		Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}}}}
	watched(t, r, 12, svc)
	if _, ok := fake.FW.FWDests[svc.VIP]; !ok {
		t.Fatalf("the set rule does not reach the new VIP: %v", fake.FW.FWDests)
	}
	svc2 := *svc
	svc2.Pools = []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.2")}}}}
	put(t, r, 12, &svc2)
	if r.fwDirty {
		t.Error("a service's new backend marks the firewall for a rebuild")
	}
	r.Commit(12, false)

	// A global rule sets the global flags; a failed write is retried whole.
	faults.FailNth("ApplyFirewall", 1)
	global := &model.FirewallRule{Name: "global", Action: model.FirewallDeny, Sources: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Protocol: model.ProtoUDP}
	watched(t, r, 13, global)
	if faults.Injected != 1 || fake.FW.FWGlobal.Global {
		t.Fatalf("injected %d, global %+v: the failed write must not be half-applied in the fake", faults.Injected, fake.FW.FWGlobal)
	}
	r.Commit(13, false) // what the retry timer does
	if !fake.FW.FWGlobal.Global || fake.FW.FWGlobal.Private {
		t.Fatalf("global flags %+v after the retry", fake.FW.FWGlobal)
	}
	if _, ok := fake.FW.FWEntries[fwplan.Key{Scope: 0, Source: netip.MustParsePrefix("198.18.0.0/15")}]; !ok {
		t.Fatal("the global rule's entry is missing")
	}

	// Counters in the status, by rule name.
	slot := r.fwPlan.Slots["global"]
	fake.FW.FWStats[slot] = dataplane.Count{Packets: 5, Bytes: 500}
	st := r.Status(time.Time{}, nil)
	if st.Firewall["global"].Packets != 5 || len(st.Firewall) != 3 {
		t.Errorf("status firewall %v", st.Firewall)
	}

	// Rules that overlap beyond the data plane's bound: reported, the
	// commit stands, the firewall before stays.
	var many []model.Object
	for i := range fwplan.MaxRefs + 1 {
		many = append(many, &model.FirewallRule{Name: "dup-" + itoa(i), Action: model.FirewallDeny, Sources: src})
	}
	before := len(fake.FW.FWEntries)
	watched(t, r, 14, many...)
	st = r.Status(time.Time{}, nil)
	if !strings.Contains(strings.Join(st.Errors, ";"), "overlap at source 203.0.113.0/24") || r.rev != 14 {
		t.Errorf("errors %v, revision %d", st.Errors, r.rev)
	}
	if len(fake.FW.FWEntries) != before {
		t.Errorf("entries changed from %d to %d on a plan that does not fit", before, len(fake.FW.FWEntries))
	}
	// Deleting the rules removes their entries and destinations.
	for _, o := range many {
		r.Delete(model.KindFirewallRule, o.Key(), 15)
	}
	for _, n := range []string{"eip-allow", "set-deny", "global"} {
		r.Delete(model.KindFirewallRule, n, 15)
	}
	r.Commit(15, false)
	if len(fake.FW.FWEntries) != 0 || len(fake.FW.FWDests) != 0 || fake.FW.FWGlobal.Global {
		t.Errorf("after deleting every rule: entries %v dests %v global %+v", fake.FW.FWEntries, fake.FW.FWDests, fake.FW.FWGlobal)
	}
}

// TestFirewallReconcileIPv6: a rule with sources of both families is
// planned into entries of both (one counter slot), and a prefix set's
// rule reaches an IPv6 address its IPv6 prefix covers (Serves: the
// planner's destinations take the IPv6 EIPs once the index holds them).
func TestFirewallReconcileIPv6(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	v4, v6 := netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:bad::/48")
	rule := &model.FirewallRule{Name: "dual", Action: model.FirewallDeny, Sources: []netip.Prefix{v4, v6}, Address: a("198.51.100.7")}
	objs := region()
	for _, o := range objs {
		if s, ok := o.(*model.EdgeSet); ok && s.Name == "pop-a" {
			s.Prefixes = append(s.Prefixes, netip.MustParsePrefix("2001:db8:e1::/48"))
		}
	}
	load(t, r, 10, append(objs, rule)...)
	d, ok := fake.FW.FWDests[a("198.51.100.7")]
	if !ok || d.Scope == 0 {
		t.Fatalf("destinations %v", fake.FW.FWDests)
	}
	e4, e6 := fake.FW.FWEntries[fwplan.Key{Scope: d.Scope, Source: v4}], fake.FW.FWEntries[fwplan.Key{Scope: d.Scope, Source: v6}]
	if e4.N != 1 || e6.N != 1 || e4.Refs[0].Rule != e6.Refs[0].Rule {
		t.Fatalf("entries %v: want the rule under both sources, one slot", fake.FW.FWEntries)
	}
	in := r.idx.fwInput(nil)
	if !in.Serves("pop-a", a("2001:db8:e1::7")) || in.Serves("pop-a", a("2001:db8:e2::7")) {
		t.Error("pop-a must serve the IPv6 addresses its IPv6 prefix covers, and only those")
	}
}

// TestFirewallIPv6EIPs: the firewall reaches IPv6 EIPs as it reaches
// IPv4 ones: a rule naming one, its set's rules (a prefix set's, a
// dedicated set's once pulled out into it), following its binding.
func TestFirewallIPv6EIPs(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	bad := netip.MustParsePrefix("2001:db8:bad::/48")
	own := &model.FirewallRule{Name: "v6-deny", Action: model.FirewallDeny, Sources: []netip.Prefix{bad}, Address: a("2001:db8:a::7")}
	load(t, r, 10, append(region6(), own)...)
	d, ok := fake.FW.FWDests[a("2001:db8:a::7")]
	if !ok || d.Scope == 0 || d.Private {
		t.Fatalf("destinations %v: want 2001:db8:a::7 with a scope of its own", fake.FW.FWDests)
	}
	if e := fake.FW.FWEntries[fwplan.Key{Scope: d.Scope, Source: bad}]; e.N != 1 || e.Refs[0].Action != fwplan.Deny {
		t.Fatalf("entries %v", fake.FW.FWEntries)
	}

	// A prefix set's allow rule makes its IPv6 EIPs private too; the
	// unbound one is no destination until it is bound.
	allow := &model.FirewallRule{Name: "pop-a-allow", Action: model.FirewallAllow, Set: "pop-a", Sources: []netip.Prefix{netip.MustParsePrefix("2001:db8:5::/48")}}
	watched(t, r, 11, allow)
	for _, e := range []string{"198.51.100.7", "2001:db8:a::7"} {
		if d, ok := fake.FW.FWDests[a(e)]; !ok || !d.Private {
			t.Errorf("%s under pop-a's allow rule: %+v %v, want private", e, d, ok)
		}
	}
	if _, ok := fake.FW.FWDests[a("2001:db8:a::8")]; ok {
		t.Fatal("an unbound IPv6 EIP has a firewall scope")
	}
	watched(t, r, 12, eipB("2001:db8:a::8", "az2-h1", "g1"))
	if d, ok := fake.FW.FWDests[a("2001:db8:a::8")]; !ok || !d.Private {
		t.Fatalf("the newly bound IPv6 EIP of pop-a: %+v %v", d, ok)
	}

	// Pulled out into the dedicated set: that set's rules reach it, the
	// prefix set's no longer.
	in := r.idx.fwInput(nil)
	if !in.Serves("pop-a", a("2001:db8:a::8")) || in.Serves("hot", a("2001:db8:a::8")) {
		t.Fatal("before the pull-out: pop-a must serve 2001:db8:a::8, hot must not")
	}
	pulled := eipB("2001:db8:a::8", "az2-h1", "g1")
	pulled.Set = "hot"
	watched(t, r, 13, pulled)
	in = r.idx.fwInput(nil)
	if !in.Serves("hot", a("2001:db8:a::8")) || !in.Serves("pop-a", a("2001:db8:a::8")) {
		t.Fatal("pulled out: hot must serve 2001:db8:a::8 (and pop-a's prefix still covers it: a pull-out moves traffic, not rules)")
	}

	// Unbound, it leaves the firewall's destinations.
	watched(t, r, 14, &model.EIP{Address: a("2001:db8:a::8")})
	if _, ok := fake.FW.FWDests[a("2001:db8:a::8")]; ok {
		t.Fatal("an unbound IPv6 EIP kept its firewall scope")
	}
}

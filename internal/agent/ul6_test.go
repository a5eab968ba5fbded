package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestAgentUl6: a host of the IPv6 underlay (issue 21) programs its IPv6
// underlay address, reaches every edge at its underlay6 (the edge set
// NVGRE is taken from, the groups its replies go to, the next hops kept
// resolved) and has no ICMP source (no IPv4 address to send one from);
// a host of the IPv4 underlay in the same region keeps the edges' IPv4
// addresses.
func TestAgentUl6(t *testing.T) {
	st := state(t)
	for _, o := range []model.Object{
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-b2", Underlay: a("198.18.0.5"), Underlay6: a("2001:db8:ff::5")},
				{Name: "edge-b1", Underlay: a("198.18.0.3"), Underlay6: a("2001:db8:ff::3")}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1"), Underlay6: a("2001:db8:ff::1")}}},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("2001:db8:f0::11"), Guests: []model.Guest{
			{Name: "g1", Address: a("198.19.11.1"), VSID: 5111}, {Name: "g2", Address: a("198.19.11.3"), VSID: 5112}}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	run := func(host string) (*dataplane.FakeAgent, *fakeLinks) {
		fake := dataplane.NewFakeAgent()
		links := newFakeLinks()
		r, err := NewReconciler(Config{NoRetry: true, Name: host, Underlay: "ul0", Log: quiet}, fake, links)
		if err != nil {
			t.Fatal(err)
		}
		r.Handle(st, 3, nil, true)
		return fake, links
	}

	fake, links := run("az1-h1")
	if fake.Config.Underlay != a("2001:db8:f0::11") || fake.Config.ICMPSource.IsValid() || fake.Config.ICMPSource6 != a("2001:db8:f0::11") {
		t.Fatalf("underlay %v, ICMP source %v, ICMPv6 source %v: want the IPv6 underlay address, none, the IPv6 underlay address",
			fake.Config.Underlay, fake.Config.ICMPSource, fake.Config.ICMPSource6)
	}
	want := []netip.Addr{a("2001:db8:ff::1"), a("2001:db8:ff::3"), a("2001:db8:ff::5")}
	if fmt.Sprint(fake.Config.Edges) != fmt.Sprint(want) {
		t.Fatalf("edges %v, want their underlay6 %v", fake.Config.Edges, want)
	}
	groups, _ := fake.Groups()
	for slot, g := range groups {
		for _, m := range g.Members {
			if !m.Is6() {
				t.Errorf("group %d (set %q): member %v, want the edges' underlay6", slot, g.Set, m)
			}
		}
	}
	if g := groups[0]; fmt.Sprint(g.Members) != fmt.Sprint(want) {
		t.Errorf("group 0: %v, want every edge's underlay6 %v", g.Members, want)
	}
	if !links.resolved[a("2001:db8:ff::3")] || links.resolved[a("198.18.0.3")] {
		t.Errorf("next hops kept resolved: %v, want the edges' IPv6 addresses", links.resolved)
	}
	if e := fake.EIPMap[a("198.51.100.7")]; e.Private != a("198.19.11.1") {
		t.Errorf("EIP %+v, want it programmed as over IPv4", e)
	}

	// An edge written past the model's check, with no underlay6: left
	// out of the IPv6 host's plan, reported.
	st.EdgeSets["pop-a"] = &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}}
	w, err := Desired(st, "az1-h1")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.Edges) != fmt.Sprint(want[1:]) || len(w.Sets["pop-a"]) != 0 || len(w.Problems) != 1 ||
		w.Problems[0] != "edge pop-a/edge-a1 has no underlay6: this host of the IPv6 underlay cannot reach it" {
		t.Fatalf("edges %v, pop-a %v, problems %q", w.Edges, w.Sets["pop-a"], w.Problems)
	}

	// The IPv4 host beside it: the edges' IPv4 addresses.
	fake, _ = run("az1-h2")
	if fake.Config.Underlay != a("198.18.12.1") || fake.Config.ICMPSource != a("198.18.12.1") || fake.Config.ICMPSource6.IsValid() {
		t.Fatalf("IPv4 host: underlay %v, ICMP source %v, ICMPv6 source %v (want none)", fake.Config.Underlay, fake.Config.ICMPSource, fake.Config.ICMPSource6)
	}
	// With --icmp-source6: that address, on either underlay.
	for _, host := range []string{"az1-h1", "az1-h2"} {
		fake := dataplane.NewFakeAgent()
		r, err := NewReconciler(Config{NoRetry: true, Name: host, Underlay: "ul0", Log: quiet, ICMPSource6: a("2001:db8:f0::99")}, fake, newFakeLinks())
		if err != nil {
			t.Fatal(err)
		}
		r.Handle(st, 3, nil, true)
		if fake.Config.ICMPSource6 != a("2001:db8:f0::99") {
			t.Errorf("%s with --icmp-source6: ICMPv6 source %v", host, fake.Config.ICMPSource6)
		}
	}
	if want4 := []netip.Addr{a("198.18.0.1"), a("198.18.0.3"), a("198.18.0.5")}; fmt.Sprint(fake.Config.Edges) != fmt.Sprint(want4) {
		t.Fatalf("IPv4 host: edges %v, want %v", fake.Config.Edges, want4)
	}
}

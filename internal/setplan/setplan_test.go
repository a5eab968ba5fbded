package setplan

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

func a(s string) netip.Addr   { return netip.MustParseAddr(s) }
func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ps(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, p(x))
	}
	return out
}

// region: two prefix sets (side by side: the model refuses overlapping
// prefixes, pull-outs are /32s of a dedicated set), a dedicated
// set and the quarantine set, built through the model's checks.
func region(t *testing.T) *model.State {
	t.Helper()
	st := model.NewState()
	for _, o := range []model.Object{
		&model.EdgeSet{Name: "pop-a", Prefixes: ps("198.51.0.0/18"), Edges: []model.EdgeNode{{Name: "a1", Underlay: a("198.18.0.1")}, {Name: "a2", Underlay: a("198.18.0.2")}}},
		&model.EdgeSet{Name: "pop-b", Prefixes: ps("198.51.100.0/24"), Edges: []model.EdgeNode{{Name: "b1", Underlay: a("198.18.0.3")}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "d1", Underlay: a("198.18.0.4")}}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "q1", Underlay: a("198.18.0.5")}}},
		&model.EIP{Address: a("198.51.100.7")},
		&model.EIP{Address: a("198.51.100.8"), Set: "hot"},
		&model.EIP{Address: a("198.51.7.9")},
		&model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeNAT, Set: "hot",
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}}}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("%s %s: %v", model.KindOf(o), o.Key(), err)
		}
	}
	return st
}

func TestServing(t *testing.T) {
	st := region(t)
	check := func(addr, set, why, route string) {
		t.Helper()
		gs, gw, gr := FromState(st).Serving(a(addr))
		if gs != set || gw != why || (route != "" && gr != p(route)) || (route == "" && gr.IsValid()) {
			t.Errorf("Serving(%s) = %s, %s, %v; want %s, %s, %s", addr, gs, gw, gr, set, why, route)
		}
	}
	check("198.51.100.7", "pop-b", ByPrefix, "198.51.100.0/24") // its prefix set
	check("198.51.7.9", "pop-a", ByPrefix, "198.51.0.0/18")
	check("198.51.100.8", "hot", ByPullOut, "198.51.100.8/32")
	check("198.51.100.20", "hot", ByPullOut, "198.51.100.20/32")
	check("192.0.2.1", "", "", "")

	if _, err := st.Put(&model.Quarantine{Address: a("198.51.100.8")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(&model.Quarantine{Address: a("198.51.100.7")}); err != nil {
		t.Fatal(err)
	}
	check("198.51.100.8", "quar", ByQuarantine, "198.51.100.8/32") // quarantine beats pull-out
	check("198.51.100.7", "quar", ByQuarantine, "198.51.100.7/32")
}

func TestAnnouncements(t *testing.T) {
	st := region(t)
	ann := func(edge string) []netip.Prefix { return FromState(st).Announcements(edge) }
	want := func(edge string, w []netip.Prefix) {
		t.Helper()
		if got := ann(edge); !slices.Equal(got, w) {
			t.Errorf("%s announces %v, want %v", edge, got, w)
		}
	}
	want("a1", ps("198.51.0.0/18"))
	want("a2", ps("198.51.0.0/18"))
	want("b1", ps("198.51.100.0/24"))
	want("d1", ps("198.51.100.8/32", "198.51.100.20/32"))
	want("q1", nil)
	want("nobody", nil)

	// Quarantine moves exactly one /32, from the dedicated set to the
	// quarantine set; nobody else's announcements change.
	if _, err := st.Put(&model.Quarantine{Address: a("198.51.100.8")}); err != nil {
		t.Fatal(err)
	}
	want("d1", ps("198.51.100.20/32"))
	want("q1", ps("198.51.100.8/32"))
	want("b1", ps("198.51.100.0/24"))
	// Back again: the pull-out returns to the prefix set.
	if _, err := st.Delete(model.KindQuarantine, "198.51.100.8"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(&model.EIP{Address: a("198.51.100.8")}); err != nil {
		t.Fatal(err)
	}
	want("d1", ps("198.51.100.20/32"))
	want("q1", nil)
	if set, why, _ := FromState(st).Serving(a("198.51.100.8")); set != "pop-b" || why != ByPrefix {
		t.Errorf("returned EIP served by %s (%s), want pop-b by prefix", set, why)
	}
}

// IPv6: a prefix set owns an IPv6 prefix beside its IPv4 one and
// announces both; a /128 pull-out and a /128 quarantine (fed below the
// model, which refuses IPv6 EIPs and VIPs until the edge has an IPv6 data
// path) move exactly their address, as a /32 does.
func TestAnnouncementsIPv6(t *testing.T) {
	st := region(t)
	a6 := *st.EdgeSets["pop-a"]
	a6.Prefixes = ps("198.51.0.0/18", "2001:db8:a::/48")
	if _, err := st.Put(&a6); err != nil {
		t.Fatal(err)
	}
	in := FromState(st)
	hot, quarantined := a("2001:db8:a::7"), a("2001:db8:a::9")
	in.PulledOut[hot] = "hot"
	in.Quarantined[quarantined] = true
	want := func(edge string, w []netip.Prefix) {
		t.Helper()
		if got := in.Announcements(edge); !slices.Equal(got, w) {
			t.Errorf("%s announces %v, want %v", edge, got, w)
		}
	}
	want("a1", ps("198.51.0.0/18", "2001:db8:a::/48"))
	want("b1", ps("198.51.100.0/24"))
	want("d1", ps("198.51.100.8/32", "198.51.100.20/32", "2001:db8:a::7/128"))
	want("q1", ps("2001:db8:a::9/128"))
	for _, c := range []struct {
		addr     netip.Addr
		set, why string
		route    netip.Prefix
		carriers [3]string
	}{
		{a("2001:db8:a::5"), "pop-a", ByPrefix, p("2001:db8:a::/48"), [3]string{"pop-a", "pop-a", "pop-a"}},
		{hot, "hot", ByPullOut, p("2001:db8:a::7/128"), [3]string{"hot", "hot", "pop-a"}},
		{quarantined, "quar", ByQuarantine, p("2001:db8:a::9/128"), [3]string{"quar", "pop-a", "pop-a"}},
		{a("2001:db8:b::1"), "", "", netip.Prefix{}, [3]string{}},
	} {
		if s, why, r := in.Serving(c.addr); s != c.set || why != c.why || r != c.route {
			t.Errorf("Serving(%v) = %s, %s, %v; want %s, %s, %v", c.addr, s, why, r, c.set, c.why, c.route)
		}
		if got := in.Carriers(c.addr); got != c.carriers {
			t.Errorf("Carriers(%v) = %v, want %v", c.addr, got, c.carriers)
		}
	}
	// What the edges announce, as the agents read it back.
	live := AnnouncingFrom(map[string]model.Announcement{
		"a1": {Set: "pop-a", Edge: "a1", Prefixes: in.Announcements("a1")},
		"d1": {Set: "hot", Edge: "d1", Prefixes: in.Announcements("d1")},
	})
	if !live.Covers("pop-a", "a1", a("2001:db8:a::5")) || !live.Covers("hot", "d1", hot) || live.Covers("hot", "d1", a("2001:db8:a::8")) {
		t.Error("Covers: IPv6 routes not read back")
	}
}

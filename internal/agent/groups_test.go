package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

func bgpNode(name, underlay string) model.EdgeNode {
	return model.EdgeNode{Name: name, Underlay: a(underlay), BGP: &model.NodeBGP{RouterID: a(underlay), NextHop: a("203.0.113.9"),
		Peers: []model.BGPPeer{{Address: a("203.0.113.1"), ASN: 64500}}}}
}

// setsState is state() with a dedicated set "hot" (two BGP members), a
// quarantine set "quar" (one static member), a second EIP of az1-h1 in
// pop-b's prefix and a service whose VIP is in pop-a's.
func setsState(t *testing.T) *model.State {
	st := state(t)
	for _, o := range []model.Object{
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, BGP: &model.SetBGP{ASN: 64512},
			Edges: []model.EdgeNode{bgpNode("edge-h2", "198.18.0.22"), bgpNode("edge-h1", "198.18.0.21")}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.0.31")}}},
		&model.EIP{Address: a("192.0.2.9"), Binding: &model.Binding{Host: "az1-h1", Guest: "g2"}},
		&model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
			Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}}}}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func put(t *testing.T, st *model.State, o model.Object) {
	t.Helper()
	if _, err := st.Put(o); err != nil {
		t.Fatal(err)
	}
}

// TestDesiredServingSets: each EIP and VIP names the set that serves it:
// the prefix set, the dedicated set it is pulled out into, the quarantine
// set while it is quarantined; back again when that ends.
func TestDesiredServingSets(t *testing.T) {
	st := setsState(t)
	check := func(what, eip7, eip9, vip string) {
		t.Helper()
		w, err := Desired(st, "az1-h1")
		if err != nil {
			t.Fatal(err)
		}
		if got := [3]string{w.EIPs[a("198.51.100.7")].Set, w.EIPs[a("192.0.2.9")].Set, w.VIPSets[a("198.51.100.20")]}; got != [3]string{eip7, eip9, vip} {
			t.Errorf("%s: sets of 198.51.100.7, 192.0.2.9, the VIP: %q, want %q", what, got, [3]string{eip7, eip9, vip})
		}
		if c := [3]string{w.EIPs[a("198.51.100.7")].Covering, w.EIPs[a("192.0.2.9")].Covering, w.VIPCovering[a("198.51.100.20")]}; c != [3]string{"pop-a", "pop-b", "pop-a"} {
			t.Errorf("%s: covering prefix sets %q, want pop-a, pop-b, pop-a whatever serves them", what, c)
		}
		if len(w.Sets) != 4 || len(w.Sets["hot"]) != 2 || w.Sets["hot"][0].Name != "edge-h1" {
			t.Errorf("%s: sets %v: want all four, members in name order", what, w.Sets)
		}
	}
	check("by prefix", "pop-a", "pop-b", "pop-a")

	put(t, st, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Set: "hot"})
	check("EIP pulled out", "hot", "pop-b", "pop-a")

	svc := *st.Services["web"]
	svc.Set = "hot"
	put(t, st, &svc)
	check("VIP pulled out too", "hot", "pop-b", "hot")

	put(t, st, &model.Quarantine{Address: a("198.51.100.7")})
	put(t, st, &model.Quarantine{Address: a("192.0.2.9")})
	check("quarantined (beats the pull-out)", "quar", "quar", "hot")

	if _, err := st.Delete(model.KindQuarantine, "198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(model.KindQuarantine, "192.0.2.9"); err != nil {
		t.Fatal(err)
	}
	put(t, st, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	check("released and returned", "pop-a", "pop-b", "hot")

	// An address no set covers (the model refuses one; written past it)
	// goes to group 0.
	st.Set(&model.EIP{Address: a("203.0.113.77"), Binding: &model.Binding{Host: "az1-h1", Guest: "g2"}})
	w, _ := Desired(st, "az1-h1")
	if s := w.EIPs[a("203.0.113.77")].Set; s != "" {
		t.Errorf("an EIP no set covers: set %q, want none", s)
	}
}

// ann is what the announce keys set/edge give, each "SET/EDGE" or
// "SET/EDGE=ROUTE,ROUTE" (the routes the edge announces).
func ann(keys ...string) map[string]model.Announcement {
	out := map[string]model.Announcement{}
	for _, k := range keys {
		k, routes, _ := strings.Cut(k, "=")
		set, edge, _ := strings.Cut(k, "/")
		an := model.Announcement{Set: set, Edge: edge}
		for r := range strings.SplitSeq(routes, ",") {
			if r != "" {
				an.Prefixes = append(an.Prefixes, netip.MustParsePrefix(r))
			}
		}
		out[store.AnnounceKey(set, edge)] = an
	}
	return out
}

// TestLiveMembers: static members are live, BGP members while they
// announce, drained ones never; a set with no live member falls back.
func TestLiveMembers(t *testing.T) {
	static := []model.EdgeNode{{Name: "e1", Underlay: a("198.18.0.1")}, {Name: "e2", Underlay: a("198.18.0.2")}}
	drained := []model.EdgeNode{{Name: "e1", Underlay: a("198.18.0.1"), Drained: true}, {Name: "e2", Underlay: a("198.18.0.2")}}
	allDrained := []model.EdgeNode{{Name: "e1", Underlay: a("198.18.0.1"), Drained: true}}
	bgp := []model.EdgeNode{bgpNode("e1", "198.18.0.1"), bgpNode("e2", "198.18.0.2"), bgpNode("e3", "198.18.0.3")}
	bgpDrained := []model.EdgeNode{bgpNode("e1", "198.18.0.1"), bgpNode("e2", "198.18.0.2")}
	bgpDrained[0].Drained = true
	mixed := []model.EdgeNode{bgpNode("e1", "198.18.0.1"), {Name: "e2", Underlay: a("198.18.0.2")}}
	for _, c := range []struct {
		name     string
		members  []model.EdgeNode
		ann      map[string]model.Announcement
		want     string
		fellBack bool
	}{
		{"static: all live", static, ann(), "[198.18.0.1 198.18.0.2]", false},
		{"static, one drained", drained, ann(), "[198.18.0.2]", false},
		{"static, all drained: fall back to all", allDrained, ann(), "[198.18.0.1]", true},
		{"bgp: the announcing ones", bgp, ann("s/e1", "s/e3"), "[198.18.0.1 198.18.0.3]", false},
		{"bgp: another set's key does not count", bgp, ann("other/e2", "s/e3"), "[198.18.0.3]", false},
		{"bgp: none announces: fall back to all", bgp, ann(), "[198.18.0.1 198.18.0.2 198.18.0.3]", true},
		{"bgp: a drained member that still announces is out", bgpDrained, ann("s/e1", "s/e2"), "[198.18.0.2]", false},
		{"bgp: none announces, fall back to the undrained", bgpDrained, ann(), "[198.18.0.2]", true},
		{"mixed: the static member is live", mixed, ann(), "[198.18.0.2]", false},
		{"no members", nil, ann(), "[]", false},
	} {
		live, fb := LiveMembers("s", c.members, setplan.AnnouncingFrom(c.ann))
		if fmt.Sprint(live) != c.want || fb != c.fellBack {
			t.Errorf("%s: %v fell back %v, want %s %v", c.name, live, fb, c.want, c.fellBack)
		}
	}
}

// TestAgentGroupsReconcile: every set gets a slot; EIPs and VIP backends
// name the slot of the set that serves them; a member whose announce key
// goes leaves its group (the generation moves); a pulled-out EIP changes
// slot; a set deleted frees its slot; a restarted reconciler keeps the
// slots and moves no generation.
func TestAgentGroupsReconcile(t *testing.T) {
	st := setsState(t)
	fake := dataplane.NewFakeAgent()
	cfg := Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}
	r, err := NewReconciler(cfg, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2"))
	r.Handle(st, 1, nil, true)
	if errs := r.Status(time.Now(), nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	slot := func(set string) uint16 {
		t.Helper()
		s, ok := r.groupSlot[set]
		if !ok || s == 0 {
			t.Fatalf("set %s has no slot: %v", set, r.groupSlot)
		}
		return s
	}
	group := func(set string) dataplane.AgentGroup {
		t.Helper()
		if set == "" {
			return fake.GroupMap[0]
		}
		return fake.GroupMap[slot(set)]
	}
	members := func(set string) string { return fmt.Sprint(group(set).Members) }
	if members("hot") != "[198.18.0.21 198.18.0.22]" || members("quar") != "[198.18.0.31]" || members("pop-b") != "[198.18.0.3 198.18.0.5]" {
		t.Fatalf("groups %+v", fake.GroupMap)
	}
	// Group 0: every set's live members, sets and edges in name order.
	if members("") != "[198.18.0.21 198.18.0.22 198.18.0.1 198.18.0.3 198.18.0.5 198.18.0.31]" {
		t.Fatalf("group 0: %v", members(""))
	}
	if e := fake.EIPMap[a("198.51.100.7")]; e.Group != slot("pop-a") {
		t.Fatalf("EIP in pop-a's prefix: group %d, want %d", e.Group, slot("pop-a"))
	}
	if e := fake.EIPMap[a("192.0.2.9")]; e.Group != slot("pop-b") {
		t.Fatalf("EIP in pop-b's prefix: group %d, want %d", e.Group, slot("pop-b"))
	}

	// edge-h2 stops announcing: it leaves "hot", the generation moves.
	gen := group("hot").Gen
	r.SetAnnouncements(ann("hot/edge-h1"))
	if g := group("hot"); fmt.Sprint(g.Members) != "[198.18.0.21]" || g.Gen != gen+1 {
		t.Fatalf("after edge-h2's key went: %+v (gen was %d)", g, gen)
	}
	// It comes back: a member joining moves no generation.
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2"))
	if g := group("hot"); len(g.Members) != 2 || g.Gen != gen+1 {
		t.Fatalf("after edge-h2 came back: %+v", g)
	}
	// Neither announces: all of them (counted).
	r.SetAnnouncements(ann())
	if _, n := r.Groups(); len(group("hot").Members) != 2 || n != 1 {
		t.Fatalf("no member announces: %+v, %d fallbacks", group("hot"), n)
	}
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2"))

	// Pull 198.51.100.7 out into "hot", quarantine 192.0.2.9.
	put(t, st, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Set: "hot"})
	put(t, st, &model.Quarantine{Address: a("192.0.2.9")})
	r.Handle(st, 2, nil, true)
	if e := fake.EIPMap[a("198.51.100.7")]; e.Group != slot("pop-a") {
		t.Fatalf("pulled-out EIP, hot does not announce it yet: group %d, want pop-a's %d", e.Group, slot("pop-a"))
	}
	r.SetAnnouncements(ann("hot/edge-h1=198.51.100.7/32", "hot/edge-h2=198.51.100.7/32"))
	if e := fake.EIPMap[a("198.51.100.7")]; e.Group != slot("hot") {
		t.Fatalf("pulled-out EIP: group %d, want hot's %d", e.Group, slot("hot"))
	}
	if e := fake.EIPMap[a("192.0.2.9")]; e.Group != slot("quar") {
		t.Fatalf("quarantined EIP: group %d, want quar's %d", e.Group, slot("quar"))
	}
	for s := range fake.Svc {
		if s.Group != slot("pop-a") {
			t.Fatalf("VIP backend %+v: want pop-a's group %d", s, slot("pop-a"))
		}
	}
	// No member of hot announces: its /32 is withdrawn upstream, pop-a's
	// /24 takes the traffic, and the EIP's replies follow; back when one
	// announces again.
	r.SetAnnouncements(ann())
	if e := fake.EIPMap[a("198.51.100.7")]; e.Group != slot("pop-a") {
		t.Fatalf("pulled-out EIP, hot dead: group %d, want pop-a's %d", e.Group, slot("pop-a"))
	}
	r.SetAnnouncements(ann("hot/edge-h2=198.51.100.7/32"))
	if e := fake.EIPMap[a("198.51.100.7")]; e.Group != slot("hot") || members("hot") != "[198.18.0.22]" {
		t.Fatalf("pulled-out EIP, edge-h2 back: group %d (want hot's %d), hot %s", e.Group, slot("hot"), members("hot"))
	}
	r.SetAnnouncements(ann("hot/edge-h1=198.51.100.7/32", "hot/edge-h2=198.51.100.7/32"))
	// Drain edge-a1 (pop-a's only member): with no live member left the
	// set falls back to it.
	popA := *st.EdgeSets["pop-a"]
	popA.Edges = []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1"), Drained: true}, {Name: "edge-a2", Underlay: a("198.18.0.2")}}
	put(t, st, &popA)
	r.Handle(st, 3, nil, true)
	if members("pop-a") != "[198.18.0.2]" {
		t.Fatalf("pop-a with edge-a1 drained: %v", members("pop-a"))
	}

	// A restarted agent adopts the slots and writes nothing new.
	before := map[uint16]dataplane.AgentGroup{}
	for k, v := range fake.GroupMap {
		before[k] = v
	}
	writes := 0
	fake.OnGroup = func(uint16, dataplane.AgentGroup) { writes++ }
	r2, err := NewReconciler(cfg, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	r2.SetAnnouncements(ann("hot/edge-h1=198.51.100.7/32", "hot/edge-h2=198.51.100.7/32"))
	r2.Handle(st, 3, nil, true)
	if writes != 0 || fmt.Sprint(r2.groupSlot) != fmt.Sprint(r.groupSlot) {
		t.Fatalf("a restart wrote %d groups; slots %v, were %v", writes, r2.groupSlot, r.groupSlot)
	}

	// Delete set "quar" (release the quarantine first): its slot is
	// cleared and reused by the next set.
	if _, err := st.Delete(model.KindQuarantine, "192.0.2.9"); err != nil {
		t.Fatal(err)
	}
	quar := slot("quar")
	if _, err := st.Delete(model.KindEdgeSet, "quar"); err != nil {
		t.Fatal(err)
	}
	r2.Handle(st, 4, nil, true)
	if _, ok := r2.groupSlot["quar"]; ok {
		t.Fatal("a deleted set keeps its slot")
	}
	if g := fake.GroupMap[quar]; g.Set != "" || len(g.Members) != 0 {
		t.Fatalf("slot %d of a deleted set: %+v", quar, g)
	}
	if e := fake.EIPMap[a("192.0.2.9")]; e.Group != r2.groupSlot["pop-b"] {
		t.Fatalf("released EIP: group %d, want pop-b's", e.Group)
	}
	put(t, st, &model.EdgeSet{Name: "new", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-n1", Underlay: a("198.18.0.41")}}})
	r2.Handle(st, 5, nil, true)
	if r2.groupSlot["new"] != quar {
		t.Fatalf("the new set took slot %d, want the free %d", r2.groupSlot["new"], quar)
	}
	if !slices.Equal(fake.GroupMap[quar].Members, []netip.Addr{a("198.18.0.41")}) {
		t.Fatalf("slot %d: %+v", quar, fake.GroupMap[quar])
	}
}

// An announce key vouches only for its edge's liveness: the members'
// addresses come from the desired state. An announcement naming a foreign
// underlay, one for an edge of no set, one naming a member under another
// set's path: none puts an address outside the set into its group.
func TestAnnounceKeysCannotAddMembers(t *testing.T) {
	st := setsState(t)
	w, err := Desired(st, "az1-h1")
	if err != nil {
		t.Fatal(err)
	}
	foreign := a("203.0.113.66")
	all := map[string]model.Announcement{
		store.AnnounceKey("hot", "edge-h1"):   {Set: "hot", Edge: "edge-h1", Underlay: foreign},
		store.AnnounceKey("hot", "edge-x"):    {Set: "hot", Edge: "edge-x", Underlay: a("203.0.113.67")},
		store.AnnounceKey("pop-a", "edge-h2"): {Set: "pop-a", Edge: "edge-h2", Underlay: a("203.0.113.68")},
	}
	p := PlanGroups(w.Sets, setplan.AnnouncingFrom(all))
	if got := fmt.Sprint(p.Sets["hot"]); got != "[198.18.0.21]" {
		t.Errorf("group hot %s: want edge-h1's underlay from the desired state alone", got)
	}
	known := map[netip.Addr]bool{}
	for _, es := range st.EdgeSets {
		for _, e := range es.Edges {
			known[e.Underlay] = true
		}
	}
	for set, ms := range p.Sets {
		for _, m := range ms {
			if !known[m] {
				t.Errorf("group %s has %v, no edge's underlay", set, m)
			}
		}
	}
	for _, m := range p.All {
		if !known[m] {
			t.Errorf("group 0 has %v, no edge's underlay", m)
		}
	}
}

// TestAgentStateErrorSurvivesAnnouncements: a newer state that gives this
// host no desired state (here: the host is gone) is reported until a
// later state gives one, though an announcement change reconciles the
// maps meanwhile (it used to clear the report while the agent ran on the
// older state).
func TestAgentStateErrorSurvivesAnnouncements(t *testing.T) {
	st := setsState(t)
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2"))
	r.Handle(st, 1, nil, true)
	if errs := r.Status(time.Now(), nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	gone := st.Clone()
	gone.Remove(model.KindHost, "az1-h1")
	r.Handle(gone, 2, nil, false)
	errs := r.Status(time.Now(), nil).Errors
	if len(errs) != 1 {
		t.Fatalf("a host gone from the state: errors %v, want one", errs)
	}
	r.SetAnnouncements(ann("hot/edge-h1"))
	if got := r.Status(time.Now(), nil).Errors; len(got) != 1 || got[0] != errs[0] {
		t.Fatalf("after an announcement change: errors %v, want %v", got, errs)
	}
	r.Handle(st, 3, nil, false)
	if got := r.Status(time.Now(), nil).Errors; len(got) != 0 {
		t.Fatalf("the host is back: errors %v", got)
	}
}

// TestReplySet: which set's group gets an address's replies, from the
// set serving it, the prefix set covering it, the members and their
// announcements (make-before-break: a dedicated or quarantine set only
// once every live member announces the address).
func TestReplySet(t *testing.T) {
	drained := bgpNode("h3", "198.18.2.3")
	drained.Drained = true
	sets := map[string][]model.EdgeNode{
		"pop":   {{Name: "p1", Underlay: a("198.18.1.1")}},
		"popb":  {bgpNode("b1", "198.18.1.2")},
		"hot":   {bgpNode("h1", "198.18.2.1"), bgpNode("h2", "198.18.2.2"), drained},
		"quar":  {bgpNode("q1", "198.18.3.1")},
		"qs":    {{Name: "s1", Underlay: a("198.18.4.1")}},
		"mixed": {bgpNode("m1", "198.18.5.1"), {Name: "m2", Underlay: a("198.18.5.2")}},
		"empty": nil,
	}
	eip := a("198.51.100.7")
	for _, c := range []struct {
		name          string
		ann           map[string]model.Announcement
		set, covering string
		reply         string
		waiting       bool
	}{
		{"served by its prefix set", ann(), "pop", "pop", "pop", false},
		{"served by a BGP prefix set that does not list it", ann("popb/b1"), "popb", "popb", "popb", false},
		{"no set serves it", ann(), "", "", "", false},
		{"a dedicated set, no prefix set covers it", ann("hot/h1", "hot/h2"), "hot", "", "hot", false},
		{"pulled out, no member announces the /32 yet", ann("hot/h1", "hot/h2"), "hot", "pop", "pop", true},
		{"pulled out, one of two live members announces it", ann("hot/h1=198.51.100.7/32", "hot/h2"), "hot", "pop", "pop", true},
		{"pulled out, both announce it", ann("hot/h1=198.51.100.7/32", "hot/h2=198.51.100.8/32,198.51.100.7/32"), "hot", "pop", "hot", false},
		{"pulled out, the only live member announces it", ann("hot/h1=198.51.100.7/32"), "hot", "pop", "hot", false},
		{"pulled out, a drained member that announces does not count", ann("hot/h3=198.51.100.7/32", "hot/h1"), "hot", "pop", "pop", true},
		{"pulled out, a drained member that does not announce it does not hold it back", ann("hot/h3", "hot/h1=198.51.100.7/32"), "hot", "pop", "hot", false},
		{"another address's /32 does not count", ann("hot/h1=198.51.100.8/32", "hot/h2=198.51.100.8/32"), "hot", "pop", "pop", true},
		{"a covering route counts", ann("hot/h1=198.51.100.0/25", "hot/h2=198.51.100.7/32"), "hot", "pop", "hot", false},
		{"another set's key listing it does not count", ann("quar/h1=198.51.100.7/32", "quar/h2=198.51.100.7/32", "hot/h1", "hot/h2"), "hot", "pop", "pop", true},
		{"pulled out, no member of hot live: the prefix set", ann(), "hot", "pop", "pop", false},
		{"quarantined, the quarantine set does not announce it yet", ann("quar/q1"), "quar", "pop", "pop", true},
		{"quarantined, announced", ann("quar/q1=198.51.100.7/32"), "quar", "pop", "quar", false},
		{"quarantined, the covering prefix set has no live member either", ann("quar/q1"), "quar", "popb", "quar", false},
		{"quarantined, no live member anywhere", ann(), "quar", "popb", "quar", false},
		{"quarantined, the covering BGP prefix set is live", ann("popb/b1=198.51.100.0/24", "quar/q1"), "quar", "popb", "popb", true},
		{"a statically routed quarantine set: at once", ann(), "qs", "pop", "qs", false},
		{"a set with a static member: at once", ann("mixed/m1"), "mixed", "pop", "mixed", false},
		{"a set without members", ann(), "empty", "pop", "pop", true},
	} {
		p := PlanGroups(sets, setplan.AnnouncingFrom(c.ann))
		reply, waiting := p.ReplySet(eip, c.set, c.covering)
		if reply != c.reply || waiting != c.waiting {
			t.Errorf("%s: %q waiting %v, want %q %v", c.name, reply, waiting, c.reply, c.waiting)
		}
	}
}

// recordingAgent is a fake data plane that records the group every
// write of an EIP or a service names, in order.
type recordingAgent struct {
	*dataplane.FakeAgent
	writes map[netip.Addr][]uint16
}

func (f *recordingAgent) PutEIP(e dataplane.AgentEIP) error {
	f.writes[e.EIP] = append(f.writes[e.EIP], e.Group)
	return f.FakeAgent.PutEIP(e)
}

func (f *recordingAgent) PutService(s dataplane.AgentService) error {
	f.writes[s.VIP] = append(f.writes[s.VIP], s.Group)
	return f.FakeAgent.PutService(s)
}

// TestAgentQuarantineMakeBeforeBreak: an EIP and a VIP quarantined at
// revision 2 into a quarantine set whose members speak BGP keep their
// replies on their prefix sets' groups (which hold them all along) until
// every live member of the quarantine set announces their /32, each
// address on its own; released, they go back to the prefix set's group
// at once, while the quarantine set still announces them. No write ever
// names the quarantine set's group before its announcement.
func TestAgentQuarantineMakeBeforeBreak(t *testing.T) {
	st := setsState(t)
	put(t, st, &model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, BGP: &model.SetBGP{ASN: 64512},
		Edges: []model.EdgeNode{bgpNode("edge-q1", "198.18.0.31"), bgpNode("edge-q2", "198.18.0.32")}})
	fake := &recordingAgent{FakeAgent: dataplane.NewFakeAgent(), writes: map[netip.Addr][]uint16{}}
	var applied int64
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	r.OnApplied = func(rev int64) { applied = rev }
	eip, vip := a("192.0.2.9"), a("198.51.100.20")
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2", "quar/edge-q1", "quar/edge-q2"))
	r.Handle(st, 1, nil, true)
	slot := func(set string) uint16 {
		t.Helper()
		s, ok := r.groupSlot[set]
		if !ok || s == 0 {
			t.Fatalf("set %s has no slot: %v", set, r.groupSlot)
		}
		return s
	}
	vipGroups := func() []uint16 {
		var out []uint16
		for s := range fake.Svc {
			if s.VIP == vip {
				out = append(out, s.Group)
			}
		}
		return out
	}
	check := func(what, eipSet, vipSet string, waiting int) {
		t.Helper()
		if errs := r.Status(time.Now(), nil).Errors; len(errs) != 0 {
			t.Fatalf("%s: errors %v", what, errs)
		}
		if g := fake.EIPMap[eip].Group; g != slot(eipSet) {
			t.Errorf("%s: the EIP's group %d, want %s's %d", what, g, eipSet, slot(eipSet))
		}
		if gs := vipGroups(); len(gs) == 0 || slices.ContainsFunc(gs, func(g uint16) bool { return g != slot(vipSet) }) {
			t.Errorf("%s: the VIP's groups %v, want %s's %d", what, gs, vipSet, slot(vipSet))
		}
		if len(r.waiting) != waiting {
			t.Errorf("%s: waiting %v, want %d addresses", what, r.waiting, waiting)
		}
	}
	check("by prefix", "pop-b", "pop-a", 0)

	put(t, st, &model.Quarantine{Address: eip})
	put(t, st, &model.Quarantine{Address: vip})
	r.Handle(st, 2, nil, false)
	if applied != 2 {
		t.Fatalf("revision 2 not applied: %d", applied)
	}
	check("quarantined at revision 2, no member of quar announces them", "pop-b", "pop-a", 2)
	if fmt.Sprint(fake.GroupMap[slot("quar")].Members) != "[198.18.0.31 198.18.0.32]" {
		t.Fatalf("quar's group: %+v", fake.GroupMap[slot("quar")])
	}
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2", "quar/edge-q1=192.0.2.9/32,198.51.100.20/32", "quar/edge-q2"))
	check("edge-q1 announces both, edge-q2 neither", "pop-b", "pop-a", 2)
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2", "quar/edge-q1=192.0.2.9/32,198.51.100.20/32", "quar/edge-q2=192.0.2.9/32"))
	check("edge-q2 announces the EIP", "quar", "pop-a", 1)
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2", "quar/edge-q1=192.0.2.9/32,198.51.100.20/32", "quar/edge-q2=192.0.2.9/32,198.51.100.20/32"))
	check("both announce both", "quar", "quar", 0)
	// edge-q1 dies: edge-q2 still announces both.
	r.SetAnnouncements(ann("hot/edge-h1", "hot/edge-h2", "quar/edge-q2=192.0.2.9/32,198.51.100.20/32"))
	check("edge-q1 gone", "quar", "quar", 0)

	// Released at revision 3: back at once, though edge-q2 has not
	// withdrawn the /32s yet.
	for _, x := range []netip.Addr{eip, vip} {
		if _, err := st.Delete(model.KindQuarantine, x.String()); err != nil {
			t.Fatal(err)
		}
	}
	r.Handle(st, 3, nil, false)
	check("released", "pop-b", "pop-a", 0)

	// The EIP's writes, in order: pop-b's group, quar's once announced,
	// pop-b's again.
	if got, want := fake.writes[eip], []uint16{slot("pop-b"), slot("quar"), slot("pop-b")}; !slices.Equal(got, want) {
		t.Errorf("the EIP's writes named groups %v, want %v", got, want)
	}
	var order []uint16
	for _, g := range fake.writes[vip] {
		if len(order) == 0 || order[len(order)-1] != g {
			order = append(order, g)
		}
	}
	if want := []uint16{slot("pop-a"), slot("quar"), slot("pop-a")}; !slices.Equal(order, want) {
		t.Errorf("the VIP's writes named groups %v (in turn), want %v", order, want)
	}
}

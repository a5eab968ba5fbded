package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// state6 is state with pop-a dual-stack, az1-h1/g1 and az1-h2/g1 with
// private IPv6 addresses and az1-h1/g1 holding an IPv6 EIP beside its
// IPv4 one.
func state6(t *testing.T) *model.State {
	t.Helper()
	st := state(t)
	a6 := *st.EdgeSets["pop-a"]
	a6.Prefixes = append(append([]netip.Prefix(nil), a6.Prefixes...), netip.MustParsePrefix("2001:db8:a::/48"))
	h1, h2 := *st.Hosts["az1-h1"], *st.Hosts["az1-h2"]
	h1.Guests = append([]model.Guest(nil), h1.Guests...)
	h1.Guests[0].Address6 = a("2001:db8:11::1")
	h2.Guests = append([]model.Guest(nil), h2.Guests...)
	h2.Guests[0].Address6 = a("2001:db8:12::1")
	for _, o := range []model.Object{&a6, &h1, &h2,
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: a("198.18.0.9")}}}} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	put6(t, st, eip6("2001:db8:a::7", "az1-h1", "g1"))
	return st
}

func put6(t *testing.T, st *model.State, e *model.EIP) {
	t.Helper()
	if _, err := st.Put(e); err != nil {
		t.Fatal(err)
	}
}

func eip6(addr, host, guest string) *model.EIP {
	e := &model.EIP{Address: a(addr)}
	if host != "" {
		e.Binding = &model.Binding{Host: host, Guest: guest}
	}
	return e
}

// checkFamilies holds what the agent's data plane requires of what the
// reconciler writes (dataplane.Agent.PutEIP and SetIfAddrs): an EIP and
// its private address of one family, IPv4 guest addresses only in
// agent_ifaddrs.
func checkFamilies(t *testing.T, fake *dataplane.FakeAgent) {
	t.Helper()
	for a, e := range fake.EIPMap {
		if e.EIP != a || a.Is4() != e.Private.Is4() || !e.Private.IsValid() {
			t.Errorf("EIP %v: entry %+v mixes families", a, e)
		}
	}
	for _, ia := range fake.IfAddrs {
		if !ia.Addr.Is4() {
			t.Errorf("IPv6 address in agent_ifaddrs: %+v", ia)
		}
	}
}

// An IPv6 EIP is programmed as an IPv4 one, translated to its guest's
// IPv6 address on the guest's interface, in its set's edge group; it
// follows its guest within the host, leaves the agent when moved to
// another host (and the other host's agent takes it), and goes when
// deleted. Its guest's IPv4 EIP keeps its own entry and counter slot.
func TestAgentIPv6EIP(t *testing.T) {
	st := state6(t)
	// g1 backs an encap service with an IPv4 VIP: its IPv4 EIP's replies
	// look at the flow table, its IPv6 one's need not (agent_flows6 holds
	// IPv6 VIPs' flows only: TestAgentIPv6VIP).
	if _, err := st.Put(&model.Service{Name: "web", VIP: a("198.51.100.80"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
		Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}}}}}); err != nil {
		t.Fatal(err)
	}
	fake := dataplane.NewFakeAgent()
	links := newFakeLinks()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, links)
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 3, nil, true)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	checkFamilies(t, fake)
	// Every guest's addresses of both families are kept resolved (the
	// IPv6 EIP's packets go to its guest through bpf_fib_lookup, which
	// only reads the neighbour table); g2 has no IPv6 address.
	if got, want := fmt.Sprint(links.groups["guests"]), "[198.19.11.1 2001:db8:11::1 198.19.11.3]"; got != want {
		t.Fatalf("guests kept resolved %s, want %s", got, want)
	}
	v4, v6 := fake.EIPMap[a("198.51.100.7")], fake.EIPMap[a("2001:db8:a::7")]
	if v6.Private != a("2001:db8:11::1") || v6.VSID != 5111 || v6.Ifindex != 101 || v6.Service {
		t.Fatalf("IPv6 EIP %+v", v6)
	}
	if v6.Group == 0 || v6.Group != v4.Group {
		t.Fatalf("IPv6 EIP in group %d, its set pop-a's is %d", v6.Group, v4.Group)
	}
	if !v4.Service || v4.Private != a("198.19.11.1") || v4.StatsIdx == v6.StatsIdx {
		t.Fatalf("IPv4 EIP %+v beside %+v", v4, v6)
	}
	if st := r.Status(time.Now(), nil); len(st.EIPs) != 2 || st.Routes != 2 {
		t.Fatalf("status EIPs %v routes %d", st.EIPs, st.Routes)
	} else if _, ok := st.EIPs["2001:db8:a::7"]; !ok {
		t.Fatalf("status EIPs %v", st.EIPs)
	}

	// To g2 on the same host once g2 has an IPv6 address: the entry
	// follows, its counter slot stays.
	h1 := *st.Hosts["az1-h1"]
	h1.Guests = append([]model.Guest(nil), h1.Guests...)
	h1.Guests[1].Address6 = a("2001:db8:11::3")
	if _, err := st.Put(&h1); err != nil {
		t.Fatal(err)
	}
	put6(t, st, eip6("2001:db8:a::7", "az1-h1", "g2"))
	r.Handle(st, 4, nil, false)
	checkFamilies(t, fake)
	if got, want := fmt.Sprint(links.groups["guests"]), "[198.19.11.1 2001:db8:11::1 198.19.11.3 2001:db8:11::3]"; got != want {
		t.Fatalf("guests kept resolved %s, want %s", got, want)
	}
	if e := fake.EIPMap[a("2001:db8:a::7")]; e.Private != a("2001:db8:11::3") || e.VSID != 5112 || e.Ifindex != 102 || e.StatsIdx != v6.StatsIdx {
		t.Fatalf("after the move within the host %+v (was %+v)", e, v6)
	}
	if e := fake.EIPMap[a("198.51.100.7")]; e != v4 {
		t.Fatalf("the IPv4 EIP changed: %+v -> %+v", v4, e)
	}

	// To another host (eip bind: the drift): it leaves this agent, the
	// other host's agent programs it.
	put6(t, st, eip6("2001:db8:a::7", "az1-h2", "g1"))
	r.Handle(st, 5, nil, false)
	if _, ok := fake.EIPMap[a("2001:db8:a::7")]; ok || len(fake.EIPMap) != 1 {
		t.Fatalf("after the drift: %v", fake.EIPMap)
	}
	fake2 := dataplane.NewFakeAgent()
	r2, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h2", Underlay: "ul0", Log: quiet}, fake2, newFakeLinks())
	r2.Handle(st, 5, nil, true)
	checkFamilies(t, fake2)
	if e := fake2.EIPMap[a("2001:db8:a::7")]; e.Private != a("2001:db8:12::1") || e.VSID != 5121 {
		t.Fatalf("az1-h2's agent: %+v", fake2.EIPMap)
	}

	// Deleted: gone there too.
	st.Remove(model.KindEIP, "2001:db8:a::7")
	r2.Handle(st, 6, nil, false)
	if _, ok := fake2.EIPMap[a("2001:db8:a::7")]; ok {
		t.Fatalf("deleted IPv6 EIP still programmed: %v", fake2.EIPMap)
	}
}

// What the plan says of an IPv6 EIP: its serving and covering sets (a
// pull-out into a dedicated set), and a guest without an IPv6 address
// (a store written past the model's check) is reported, not programmed.
func TestDesiredIPv6EIP(t *testing.T) {
	st := state6(t)
	put6(t, st, &model.EIP{Address: a("2001:db8:a::7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Set: "hot"})
	st.Set(eip6("2001:db8:a::8", "az1-h1", "g2")) // g2 has no address6: past the model's check
	w, err := Desired(st, "az1-h1")
	if err != nil {
		t.Fatal(err)
	}
	e := w.EIPs[a("2001:db8:a::7")]
	if e.Private != a("2001:db8:11::1") || e.Set != "hot" || e.Covering != "pop-a" || e.Guest != "g1" {
		t.Fatalf("want %+v", e)
	}
	if _, ok := w.EIPs[a("2001:db8:a::8")]; ok {
		t.Fatalf("EIP of a guest without address6 planned: %+v", w.EIPs)
	}
	if len(w.Problems) != 1 || !strings.Contains(w.Problems[0], "EIP 2001:db8:a::8: guest g2 has no IPv6 address (address6)") {
		t.Fatalf("problems %q", w.Problems)
	}
}

// A failed write of an IPv6 EIP is reported and redone by the next pass;
// the IPv4 EIP beside it is written regardless.
func TestAgentIPv6EIPWriteFailure(t *testing.T) {
	st := state6(t)
	fake := dataplane.NewFakeAgent()
	faults := dataplane.NewFaults()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFaultyAgent(fake, faults), newFakeLinks())
	r.Handle(st, 3, nil, true)
	put6(t, st, eip6("2001:db8:a::7", "az1-h2", "g1")) // leaves the host
	faults.FailNth("DeleteEIP", 1)
	r.Handle(st, 4, nil, false)
	if len(r.errs) == 0 {
		t.Fatal("the failed delete is not reported")
	}
	if _, ok := fake.EIPMap[a("2001:db8:a::7")]; !ok {
		t.Fatal("the delete that failed removed the entry")
	}
	r.Handle(st, 5, nil, false)
	if _, ok := fake.EIPMap[a("2001:db8:a::7")]; ok || len(r.errs) != 0 {
		t.Fatalf("not redone: %v %v", fake.EIPMap, r.errs)
	}
	// Back, its write failing once: redone by the next pass.
	put6(t, st, eip6("2001:db8:a::7", "az1-h1", "g1"))
	faults.FailNth("PutEIP", 1)
	r.Handle(st, 6, nil, false)
	if len(r.errs) == 0 {
		t.Fatal("the failed put is not reported")
	}
	r.Handle(st, 7, nil, false)
	if e, ok := fake.EIPMap[a("2001:db8:a::7")]; !ok || e.Private != a("2001:db8:11::1") || len(r.errs) != 0 {
		t.Fatalf("not redone: %+v %v", e, r.errs)
	}
	checkFamilies(t, fake)
}

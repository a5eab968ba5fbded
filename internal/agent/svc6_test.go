package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// web6 is an encap service with an IPv6 VIP in pop-a's IPv6 prefix:
// tcp:443 to az1-h1/g1 port 8443 (and az1-h2/g1), udp on every port to
// az1-h1/g2.
func web6() *model.Service {
	return &model.Service{Name: "web6", VIP: a("2001:db8:a::80"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "p"}, {Protocol: "udp", Pool: "d"}},
		Pools: []model.Pool{
			{Name: "p", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8443}, {Host: "az1-h2", Guest: "g1"}}},
			{Name: "d", Backends: []model.Backend{{Host: "az1-h1", Guest: "g2"}}},
		}}
}

// An IPv6 VIP's backends on this host are programmed with the guest's
// IPv4 address (what the edge names it by), its address6 and interface,
// in the VIP's set's edge group; the guest's IPv6 EIP is marked a service
// backend's (its replies look at agent_flows6), its IPv4 EIP is not. A
// backend guest without address6 is left out and reported until it has
// one; a service deleted takes its entries and the mark away.
func TestAgentIPv6VIP(t *testing.T) {
	st := state6(t)
	// g2 has no address6: past the model's check (it refuses such a
	// service), as a store written by an older or faulty controller.
	st.Set(web6())
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 3, nil, true)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "service web6: backend az1-h1/g2: guest g2 has no IPv6 address (address6) for IPv6 VIP 2001:db8:a::80") {
		t.Fatalf("errors %q, want g2's missing address6 reported", r.errs)
	}
	checkFamilies(t, fake)
	popA := r.groupSlot["pop-a"]
	if popA == 0 {
		t.Fatalf("pop-a has no group slot: %v", r.groupSlot)
	}
	g1 := dataplane.AgentService{VIP: a("2001:db8:a::80"), Guest: a("198.19.11.1"), Guest6: a("2001:db8:11::1"), Ifindex: 101,
		Proto: dataplane.ProtoTCP, VPort: 443, BPort: 8443, VSID: 5111, Group: popA}
	if got := services(fake); len(got) != 1 || got[0] != g1 {
		t.Fatalf("services %+v, want only %+v", got, g1)
	}
	if v6, v4 := fake.EIPMap[a("2001:db8:a::7")], fake.EIPMap[a("198.51.100.7")]; !v6.Service || v4.Service {
		t.Fatalf("IPv6 EIP %+v (want the service mark), IPv4 EIP %+v (want none)", v6, v4)
	}

	// g2 gets an IPv6 address: its backend is programmed, nothing is
	// reported any more.
	h1 := *st.Hosts["az1-h1"]
	h1.Guests = slices.Clone(h1.Guests)
	h1.Guests[1].Address6 = a("2001:db8:11::3")
	if _, err := st.Put(&h1); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 4, nil, false)
	if len(r.errs) != 0 {
		t.Fatalf("errors %q", r.errs)
	}
	g2 := dataplane.AgentService{VIP: a("2001:db8:a::80"), Guest: a("198.19.11.3"), Guest6: a("2001:db8:11::3"), Ifindex: 102,
		Proto: dataplane.ProtoUDP, VSID: 5112, Group: popA}
	if got := services(fake); len(got) != 2 || !slices.Contains(got, g1) || !slices.Contains(got, g2) {
		t.Fatalf("services %+v, want %+v and %+v", got, g1, g2)
	}

	// g1's address6 changes: its entry follows.
	h1.Guests = slices.Clone(h1.Guests)
	h1.Guests[0].Address6 = a("2001:db8:11::9")
	if _, err := st.Put(&h1); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 5, nil, false)
	moved := g1
	moved.Guest6 = a("2001:db8:11::9")
	if got := services(fake); len(got) != 2 || !slices.Contains(got, moved) || !slices.Contains(got, g2) {
		t.Fatalf("services %+v, want %+v and %+v", got, moved, g2)
	}

	// The service goes: its entries and the IPv6 EIP's mark go with it.
	st.Delete(model.KindService, "web6")
	r.Handle(st, 6, nil, false)
	if got := services(fake); len(got) != 0 {
		t.Fatalf("services left %+v", got)
	}
	if v6 := fake.EIPMap[a("2001:db8:a::7")]; v6.Service {
		t.Fatalf("IPv6 EIP %+v still marked", v6)
	}
}

// A data plane that refuses the IPv6 VIP's entry: reported, retried, the
// IPv4 tables unaffected.
func TestAgentIPv6VIPWriteFails(t *testing.T) {
	st := state6(t)
	// g2 has no address6: past the model's check (it refuses such a
	// service), as a store written by an older or faulty controller.
	st.Set(web6())
	f := dataplane.NewFaults()
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFaultyAgent(fake, f), newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	f.FailNth("PutService", 1)
	r.Handle(st, 3, nil, true)
	if len(services(fake)) != 0 || len(fake.EIPMap) != 2 {
		t.Fatalf("services %+v EIPs %v", services(fake), fake.EIPMap)
	}
	if !slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, "PutService: call 1") }) {
		t.Fatalf("errors %q, want the failed PutService", r.errs)
	}
	r.Handle(st, 4, nil, false)
	if got := services(fake); len(got) != 1 || got[0].VIP != a("2001:db8:a::80") {
		t.Fatalf("after the retry: %+v", got)
	}
}

func services(f *dataplane.FakeAgent) []dataplane.AgentService {
	got, _ := f.Services()
	slices.SortFunc(got, func(x, y dataplane.AgentService) int { return x.Guest.Compare(y.Guest) })
	return got
}

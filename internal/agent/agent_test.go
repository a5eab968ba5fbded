package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

// fakeLinks routes 198.19.H.x/31 pairs to interfaces gN.
type fakeLinks struct {
	attached map[string]bool
	resolved map[netip.Addr]bool
	missing  map[netip.Addr]bool
	groups   map[string][]netip.Addr // each group's last set (KeepResolved)
}

func newFakeLinks() *fakeLinks {
	return &fakeLinks{attached: map[string]bool{}, resolved: map[netip.Addr]bool{}, missing: map[netip.Addr]bool{}, groups: map[string][]netip.Addr{}}
}

func (f *fakeLinks) GuestInterface(x netip.Addr) (string, int, error) {
	if f.missing[x] {
		return "", 0, fmt.Errorf("no route to %v", x)
	}
	n := int(x.As4()[3]+1) / 2
	return fmt.Sprintf("g%d", n), 100 + n, nil
}
func (f *fakeLinks) AttachGuest(ifname string) error { f.attached[ifname] = true; return nil }
func (f *fakeLinks) DetachGuest(ifname string) error { delete(f.attached, ifname); return nil }
func (f *fakeLinks) KeepResolved(group string, as []netip.Addr) {
	f.groups[group] = append([]netip.Addr(nil), as...)
	for _, x := range as {
		f.resolved[x] = true
	}
}

func state(t *testing.T) *model.State {
	st := model.NewState()
	for _, o := range []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{
			{Name: "g1", Address: a("198.19.11.1"), VSID: 5111}, {Name: "g2", Address: a("198.19.11.3"), VSID: 5112}}},
		&model.Host{Name: "az1-h2", AZ: "az1", Underlay: a("198.18.12.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.12.1"), VSID: 5121}}},
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-b2", Underlay: a("198.18.0.5")}, {Name: "edge-b1", Underlay: a("198.18.0.3")}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: a("198.51.100.8"), Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestAgentReconcile(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	links := newFakeLinks()
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", LocalAllow: []LocalAllow{{Prefix: netip.MustParsePrefix("169.254.169.254/32"), Rule: dataplane.LocalRule{Proto: 6, Lo: 80, Hi: 80}}}, Log: quiet}, fake, links)
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 3, nil, true)
	if fake.Config.Underlay != a("198.18.11.1") {
		t.Fatalf("underlay %v", fake.Config.Underlay)
	}
	// Edges in a stable order: sets by name, edges by name.
	want := []netip.Addr{a("198.18.0.1"), a("198.18.0.3"), a("198.18.0.5")}
	if fmt.Sprint(fake.Config.Edges) != fmt.Sprint(want) {
		t.Fatalf("edges %v, want %v", fake.Config.Edges, want)
	}
	if len(fake.EIPMap) != 1 {
		t.Fatalf("EIPs %v, want only the one bound to this host", fake.EIPMap)
	}
	e := fake.EIPMap[a("198.51.100.7")]
	if e.Private != a("198.19.11.1") || e.VSID != 5111 || e.Ifindex != 101 || !links.attached["g1"] || !links.attached["g2"] {
		t.Fatalf("EIP %+v attached %v", e, links.attached)
	}
	if !links.resolved[a("198.19.11.1")] || !links.resolved[a("198.18.0.3")] {
		t.Fatalf("next hops not kept resolved: %v", links.resolved)
	}

	// Move the EIP to g2 on the same host: both guests stay attached.
	st.Put(&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g2"}})
	r.Handle(st, 4, nil, false)
	e2 := fake.EIPMap[a("198.51.100.7")]
	if e2.Private != a("198.19.11.3") || e2.StatsIdx != e.StatsIdx || e2.Ifindex != 102 {
		t.Fatalf("after move %+v", e2)
	}
	// A guest removed from the host is detached.
	h := *st.Hosts["az1-h1"]
	h.Guests = h.Guests[1:]
	if _, err := st.Put(&h); err != nil {
		t.Fatal(err)
	}
	r.Handle(st, 5, nil, false)
	if links.attached["g1"] || !links.attached["g2"] {
		t.Fatalf("attached %v after removing g1", links.attached)
	}

	// Drift to another host: the EIP leaves this agent.
	for _, e := range []*model.EIP{{Address: a("198.51.100.8")},
		{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}}} {
		if _, err := st.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	r.Handle(st, 6, nil, false)
	if len(fake.EIPMap) != 0 {
		t.Fatalf("left over: %v", fake.EIPMap)
	}
}

func TestAgentMissingGuestInterface(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	links := newFakeLinks()
	links.missing[a("198.19.11.1")] = true
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, links)
	r.Handle(st, 3, nil, true)
	if len(r.errs) == 0 || len(fake.EIPMap) != 0 {
		t.Fatalf("errs %v map %v", r.errs, fake.EIPMap)
	}
	delete(links.missing, a("198.19.11.1"))
	r.Handle(st, 4, nil, false)
	if len(fake.EIPMap) != 1 || len(r.errs) != 0 {
		t.Fatalf("did not recover: %v %v", fake.EIPMap, r.errs)
	}
}

// TestAgentKeepsEIPWhileInterfaceMissing: an EIP already programmed
// stays, with its counter slot, while its guest's interface is not found
// for a pass (a tap recreated, a failed route lookup); the miss is
// reported. The entry goes when the EIP itself goes.
func TestAgentKeepsEIPWhileInterfaceMissing(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	links := newFakeLinks()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, links)
	r.Handle(st, 3, nil, true)
	if len(fake.EIPMap) != 1 || len(r.errs) != 0 {
		t.Fatalf("not programmed: %v %v", fake.EIPMap, r.errs)
	}
	before := fake.EIPMap
	var eip netip.Addr
	for k := range before {
		eip = k
	}
	was := before[eip]
	links.missing[a("198.19.11.1")] = true
	r.Handle(st, 4, nil, false)
	if len(r.errs) == 0 {
		t.Error("the missing interface is not reported")
	}
	if got, ok := fake.EIPMap[eip]; !ok || got != was {
		t.Fatalf("a transient interface miss changed the live EIP %v: %+v (ok %v), was %+v", eip, got, ok, was)
	}
	delete(links.missing, a("198.19.11.1"))
	r.Handle(st, 5, nil, false)
	if got := fake.EIPMap[eip]; got != was || len(r.errs) != 0 {
		t.Fatalf("after the interface came back: %+v %v, want %+v", got, r.errs, was)
	}
	// The EIP leaves the state while its interface is missing: it goes.
	links.missing[a("198.19.11.1")] = true
	gone := st.Clone()
	if _, err := gone.Delete(model.KindEIP, eip.String()); err != nil {
		t.Fatal(err)
	}
	r.Handle(gone, 6, nil, false)
	if _, ok := fake.EIPMap[eip]; ok {
		t.Fatalf("an EIP that left the state is still programmed: %v", fake.EIPMap)
	}
}

func TestAgentUnknownHost(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	fake.EIPMap[a("198.51.100.7")] = dataplane.AgentEIP{EIP: a("198.51.100.7")}
	r, _ := NewReconciler(Config{NoRetry: true, Name: "nope", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	r.Handle(st, 3, nil, true)
	if len(r.errs) == 0 || len(fake.EIPMap) != 1 {
		t.Fatal("an agent that is not a known host must report and leave its maps alone")
	}
}

func TestAgentServices(t *testing.T) {
	st := state(t)
	// g1 of az1-h1 has EIP 198.51.100.7 and serves the VIP too; a fixed
	// backend port behind a range is fine now that replies go by flow.
	svc := &model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "udp", Pool: "dns"}, {Protocol: "tcp", Port: 9000, PortEnd: 9001, Pool: "web"}},
		Pools: []model.Pool{
			{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}, {Host: "az1-h2", Guest: "g1"}}},
			{Name: "dns", Backends: []model.Backend{{Host: "az1-h1", Guest: "g2"}}},
		}}
	nat := &model.Service{Name: "dmz", VIP: a("198.51.100.30"), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
		Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}}}}
	st.Set(svc)
	st.Set(nat)
	fake := dataplane.NewFakeAgent()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	r.Handle(st, 1, nil, true)
	// The VIP is in pop-a's prefix: its replies go to pop-a's group.
	popA := r.groupSlot["pop-a"]
	if popA == 0 {
		t.Fatalf("pop-a has no group slot: %v", r.groupSlot)
	}
	want := map[dataplane.AgentService]bool{
		{VIP: a("198.51.100.20"), Guest: a("198.19.11.1"), Proto: dataplane.ProtoTCP, VPort: 80, BPort: 8080, VSID: 5111, Group: popA}:   true,
		{VIP: a("198.51.100.20"), Guest: a("198.19.11.1"), Proto: dataplane.ProtoTCP, VPort: 9000, BPort: 8080, VSID: 5111, Group: popA}: true,
		{VIP: a("198.51.100.20"), Guest: a("198.19.11.1"), Proto: dataplane.ProtoTCP, VPort: 9001, BPort: 8080, VSID: 5111, Group: popA}: true,
		{VIP: a("198.51.100.20"), Guest: a("198.19.11.3"), Proto: dataplane.ProtoUDP, VPort: 0, BPort: 0, VSID: 5112, Group: popA}:       true,
	}
	if len(fake.Svc) != len(want) {
		t.Fatalf("services %v, want %v (only this host's encap backends)", fake.Svc, want)
	}
	for s := range want {
		if !fake.Svc[s] {
			t.Fatalf("missing %+v in %v", s, fake.Svc)
		}
	}
	if errs := r.Status(time.Now(), nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	// The EIP's guest serves the VIP: its replies look their flows up.
	if e := fake.EIPMap[a("198.51.100.7")]; !e.Service {
		t.Fatalf("EIP of a service backend guest: %+v, want Service set", e)
	}
	// The service goes: so do its entries, and the EIP's flag.
	st.Remove(model.KindService, "web")
	r.Handle(st, 2, nil, false)
	if len(fake.Svc) != 0 {
		t.Fatalf("left over %v", fake.Svc)
	}
	if e := fake.EIPMap[a("198.51.100.7")]; e.Service {
		t.Fatalf("EIP of a guest that serves nothing: %+v, want Service clear", e)
	}
}

// Only the checked ports of encap backends with a health check are
// reachable through the tunnel at their private addresses (issue 7
// review): not every guest of the host, not a pool without a check, not
// another host's backend, not a command check.
func TestAgentHealthGuests(t *testing.T) {
	st := state(t)
	h := *st.Hosts["az1-h1"]
	h.Guests = append(append([]model.Guest(nil), h.Guests...), model.Guest{Name: "g3", Address: a("198.19.11.5"), VSID: 5113},
		model.Guest{Name: "g4", Address: a("198.19.11.7"), VSID: 5114})
	if _, err := st.Put(&h); err != nil {
		t.Fatal(err)
	}
	svc := &model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "tcp", Port: 81, Pool: "web"},
			{Protocol: "udp", Port: 53, Pool: "dns"}, {Protocol: "tcp", Port: 443, Pool: "plain"}},
		Pools: []model.Pool{
			{Name: "web", Health: &model.HealthCheck{Type: model.CheckHTTP},
				Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}, {Host: "az1-h2", Guest: "g1"}}},
			{Name: "dns", Health: &model.HealthCheck{Type: model.CheckUDP, Port: 5353, Send: "x"},
				Backends: []model.Backend{{Host: "az1-h1", Guest: "g2"}}},
			{Name: "plain", Backends: []model.Backend{{Host: "az1-h1", Guest: "g3"}}},
		}}
	st.Set(svc)
	fake := dataplane.NewFakeAgent()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	r.Handle(st, 1, nil, true)
	want := []dataplane.HealthGuest{
		{Guest: a("198.19.11.1"), VSID: 5111, Proto: dataplane.ProtoTCP, Port: 8080},
		{Guest: a("198.19.11.3"), VSID: 5112, Proto: dataplane.ProtoUDP, Port: 5353},
	}
	if fmt.Sprint(fake.HealthGuests) != fmt.Sprint(want) {
		t.Fatalf("health guests %+v, want %+v", fake.HealthGuests, want)
	}
	// The checks go: nothing is reachable any more.
	svc2 := *svc
	svc2.Pools = []model.Pool{{Name: "web", Backends: svc.Pools[0].Backends}, {Name: "dns", Backends: svc.Pools[1].Backends}, svc.Pools[2]}
	st.Set(&svc2)
	r.Handle(st, 2, nil, false)
	if len(fake.HealthGuests) != 0 {
		t.Fatalf("health guests %+v after the checks went, want none", fake.HealthGuests)
	}
}

// An IPv6 VIP's checked backend is reachable through the tunnel at its
// IPv4 address (an edge without --health-source6 checks it there) and at
// its IPv6 one (agent_hc_guests6, with its interface), on the checked port
// only.
func TestAgentHealthGuests6(t *testing.T) {
	st := state(t)
	h := *st.Hosts["az1-h1"]
	h.Guests = append([]model.Guest(nil), h.Guests...)
	h.Guests[0].Address6 = a("2001:db8:11::1")
	if _, err := st.Put(&h); err != nil {
		t.Fatal(err)
	}
	st.Set(&model.Service{Name: "web6", VIP: a("2001:db8:e2::80"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools: []model.Pool{{Name: "web", Health: &model.HealthCheck{Type: model.CheckHTTP},
			Backends: []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 8080}}}}})
	fake := dataplane.NewFakeAgent()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, newFakeLinks())
	r.Handle(st, 1, nil, true)
	want := []dataplane.HealthGuest{
		{Guest: a("198.19.11.1"), VSID: 5111, Proto: dataplane.ProtoTCP, Port: 8080},
		{Guest: a("2001:db8:11::1"), VSID: 5111, Proto: dataplane.ProtoTCP, Port: 8080, Ifindex: 101},
	}
	if fmt.Sprint(fake.HealthGuests) != fmt.Sprint(want) {
		t.Fatalf("health guests %+v, want %+v", fake.HealthGuests, want)
	}
}

// TestReconcilerStopEndsRetries: after Stop no retry is pending or
// scheduled, so none writes to a data plane Run then closes.
func TestReconcilerStopEndsRetries(t *testing.T) {
	links := newFakeLinks()
	links.missing[a("198.19.11.1")] = true
	r, _ := NewReconciler(Config{Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), links)
	r.Handle(state(t), 3, nil, true)
	r.mu.Lock()
	pending := r.retry != nil
	r.mu.Unlock()
	if !pending {
		t.Fatal("a missing interface scheduled no retry")
	}
	r.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retry != nil {
		t.Fatal("a retry is still pending after Stop")
	}
	r.scheduleRetry(4)
	if r.retry != nil {
		t.Fatal("a retry was scheduled after Stop")
	}
}

// TestAgentLocalWriteFailureAttachesNothing: while the local table cannot
// be written (it may still hold older, wider rules), no guest is attached
// and no EIP programmed, as when the configuration cannot be written.
func TestAgentLocalWriteFailureAttachesNothing(t *testing.T) {
	fake := dataplane.NewFakeAgent()
	faults := dataplane.NewFaults()
	links := newFakeLinks()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFaultyAgent(fake, faults), links)
	faults.FailNth("SetLocalAllow", 1)
	r.Handle(state(t), 3, nil, true)
	if len(r.errs) == 0 || len(links.attached) != 0 || len(fake.EIPMap) != 0 {
		t.Fatalf("local table not written: errors %v, attached %v, EIPs %v", r.errs, links.attached, fake.EIPMap)
	}
	r.Handle(state(t), 4, nil, false)
	if len(r.errs) != 0 || !links.attached["g1"] || len(fake.EIPMap) != 1 {
		t.Fatalf("after the write succeeded: errors %v, attached %v, EIPs %v", r.errs, links.attached, fake.EIPMap)
	}
}

// TestAgentAdvance: a commit of the region that changed nothing of the
// host's moves the applied revision only while what is programmed is
// current and clean; a pass with errors keeps the revision it reached.
func TestAgentAdvance(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	links := newFakeLinks()
	r, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: quiet}, fake, links)
	var applied []int64
	r.OnApplied = func(rev int64) { applied = append(applied, rev) }
	r.Handle(st, 3, nil, true)
	r.Advance(4)
	if got := r.Status(time.Now(), nil).AppliedRevision; got != 4 {
		t.Fatalf("a clean agent at 3 advanced to %d, want 4", got)
	}
	r.Advance(4) // not newer: nothing
	links.missing[a("198.19.11.1")] = true
	r.Handle(st, 5, nil, false)
	r.Advance(6)
	if got := r.Status(time.Now(), nil).AppliedRevision; got != 4 {
		t.Errorf("an agent whose pass at 5 failed reports %d, want 4 (the last clean pass)", got)
	}
	delete(links.missing, a("198.19.11.1"))
	r.Handle(st, 7, nil, false)
	r.Advance(8)
	if !slices.Equal(applied, []int64{3, 4, 7, 8}) {
		t.Errorf("applied %v, want [3 4 7 8]", applied)
	}
}

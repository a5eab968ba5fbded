package agent

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// The agent's tables against maps that fail (after the load balancer's
// tests, internal/edge/lb_fault_test.go).

// tableGuests are the guests a random world's host may have (fakeLinks
// puts each on its own interface).
var tableGuests = []model.Guest{
	{Name: "g1", Address: netip.MustParseAddr("198.19.11.1"), VSID: 11},
	{Name: "g2", Address: netip.MustParseAddr("198.19.11.3"), VSID: 12},
	{Name: "g3", Address: netip.MustParseAddr("198.19.11.5"), VSID: 13},
	{Name: "g4", Address: netip.MustParseAddr("198.19.11.7"), VSID: 14},
}

// randomWant is a host's desired state: some of the guests, edge sets
// (some with every member drained: they fall back), EIPs bound to the
// guests and served by the sets, service backends and checked ports.
func randomWant(r *rand.Rand) HostWant {
	w := HostWant{Underlay: netip.MustParseAddr("198.18.11.1"), Sets: map[string][]model.EdgeNode{},
		VIPSets: map[netip.Addr]string{}, VIPCovering: map[netip.Addr]string{}, EIPs: map[netip.Addr]Want{}}
	for _, g := range tableGuests {
		if r.IntN(5) != 0 {
			w.Guests = append(w.Guests, g)
		}
	}
	sets := []string{""}
	for i, name := range []string{"hot", "pop-a", "pop-b", "quar"} {
		if r.IntN(5) < 3 {
			continue
		}
		var members []model.EdgeNode
		for j := range 4 {
			if r.IntN(2) == 0 || j == 3 && len(members) == 0 {
				members = append(members, model.EdgeNode{Name: fmt.Sprintf("%s-e%d", name, j),
					Underlay: netip.AddrFrom4([4]byte{198, 18, byte(i), byte(1 + j)}), Drained: r.IntN(4) == 0})
			}
		}
		w.Sets[name] = members
		sets = append(sets, name)
		for _, m := range members {
			w.Edges = append(w.Edges, m.Underlay)
		}
	}
	if len(w.Guests) == 0 {
		return w
	}
	pick := func() model.Guest { return w.Guests[r.IntN(len(w.Guests))] }
	backends := map[netip.Addr]bool{}
	type kernelKey struct {
		vip, guest netip.Addr
		proto      uint8
		vport      uint16
	}
	seen := map[kernelKey]bool{}
	for range r.IntN(5) {
		g := pick()
		s := dataplane.AgentService{VIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + r.IntN(3))}), Guest: g.Address,
			Proto: []uint8{dataplane.ProtoTCP, dataplane.ProtoUDP}[r.IntN(2)], VPort: []uint16{0, 80, 443}[r.IntN(3)],
			BPort: []uint16{0, 8080}[r.IntN(2)], VSID: g.VSID}
		if k := (kernelKey{s.VIP, s.Guest, s.Proto, s.VPort}); !seen[k] {
			seen[k] = true
			w.Services = append(w.Services, s)
			backends[g.Address] = true
			w.VIPSets[s.VIP], w.VIPCovering[s.VIP] = sets[r.IntN(len(sets))], sets[r.IntN(len(sets))]
		}
		if r.IntN(2) == 0 && !slices.ContainsFunc(w.Checked, func(c dataplane.HealthGuest) bool { return c.Guest == g.Address }) {
			w.Checked = append(w.Checked, dataplane.HealthGuest{Guest: g.Address, VSID: g.VSID, Proto: dataplane.ProtoTCP, Port: 8080})
		}
	}
	bound := map[netip.Addr]bool{} // a guest has one EIP (1:1 NAT)
	for range r.IntN(6) {
		g := pick()
		e := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + r.IntN(8))})
		if bound[g.Address] || w.EIPs[e].EIP.IsValid() {
			continue
		}
		bound[g.Address] = true
		w.EIPs[e] = Want{EIP: e, Private: g.Address, VSID: g.VSID, Guest: g.Name, Service: backends[g.Address],
			Set: sets[r.IntN(len(sets))], Covering: sets[r.IntN(len(sets))]}
	}
	return w
}

// handleWant programs w as Handle would a state that yields it.
func handleWant(r *Reconciler, w HostWant, rev int64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want, r.wantRev = &w, rev
	r.apply(rev)
	return slices.Clone(r.errs)
}

// agentTables is what an agent data plane holds, as the checks see it.
type agentTables struct {
	config   *dataplane.AgentConfig // nil: not readable (a kernel's)
	groups   map[uint16]dataplane.AgentGroup
	eips     map[netip.Addr]dataplane.AgentEIP
	services []dataplane.AgentService
	ifaddrs  []dataplane.IfAddr // nil with config
	checked  []dataplane.HealthGuest
}

func fakeTables(f *dataplane.FakeAgent) agentTables {
	gs, _ := f.Groups()
	es, _ := f.EIPs()
	ss, _ := f.Services()
	c := f.Config
	return agentTables{config: &c, groups: gs, eips: es, services: ss, ifaddrs: f.IfAddrs, checked: f.HealthGuests}
}

func kernelTables(t *testing.T, dp *dataplane.Agent) agentTables {
	gs, err := dp.Groups()
	if err != nil {
		t.Fatal(err)
	}
	es, err := dp.EIPs()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := dp.Services()
	if err != nil {
		t.Fatal(err)
	}
	return agentTables{groups: gs, eips: es, services: ss}
}

// checkTables checks that the maps hold exactly w: every set in a slot of
// its own with its live members, slot 0 with every set's, no other slot;
// each EIP with its guest, interface and the slot of the set that serves
// it (or the covering set's while it has no live member or does not
// announce it: GroupPlan.ReplySet), a counter slot
// of its own; the service backends; the configuration, the guests'
// addresses and checked ports.
func checkTables(got agentTables, w HostWant) error {
	live := PlanGroups(w.Sets, nil)
	slots := map[string]uint16{}
	for slot, g := range got.groups {
		if slot == 0 {
			continue
		}
		if _, ok := w.Sets[g.Set]; !ok {
			return fmt.Errorf("slot %d holds %+v: no such set", slot, g)
		}
		if _, dup := slots[g.Set]; dup {
			return fmt.Errorf("set %s holds two slots", g.Set)
		}
		slots[g.Set] = slot
		if !slices.Equal(g.Members, live.Sets[g.Set]) {
			return fmt.Errorf("set %s (slot %d): members %v, want %v", g.Set, slot, g.Members, live.Sets[g.Set])
		}
	}
	if len(slots) != len(w.Sets) {
		return fmt.Errorf("slots %v, want one for each of %d sets", slots, len(w.Sets))
	}
	if g := got.groups[0]; !slices.Equal(g.Members, live.All) {
		return fmt.Errorf("group 0: %v, want %v", g.Members, live.All)
	}
	groupOf := func(a netip.Addr, set, covering string) uint16 {
		reply, _ := live.ReplySet(a, set, covering)
		return slotOf(slots, reply, set)
	}
	ifindex := map[netip.Addr]uint32{}
	for _, g := range w.Guests {
		_, idx, _ := newFakeLinks().GuestInterface(g.Address)
		ifindex[g.Address] = uint32(idx)
	}
	if len(got.eips) != len(w.EIPs) {
		return fmt.Errorf("%d EIPs, want %d: %v", len(got.eips), len(w.EIPs), got.eips)
	}
	counters := map[uint32]netip.Addr{}
	for a, e := range w.EIPs {
		want := dataplane.AgentEIP{EIP: a, Private: e.Private, VSID: e.VSID, Ifindex: ifindex[e.Private], Service: e.Service,
			Group: groupOf(a, e.Set, e.Covering)}
		g, ok := got.eips[a]
		if !ok {
			return fmt.Errorf("EIP %v missing", a)
		}
		if other, dup := counters[g.StatsIdx]; dup {
			return fmt.Errorf("EIPs %v and %v share counter slot %d", a, other, g.StatsIdx)
		}
		counters[g.StatsIdx] = a
		want.StatsIdx = g.StatsIdx
		if g != want {
			return fmt.Errorf("EIP %v: %+v, want %+v", a, g, want)
		}
	}
	var svcs []string
	for _, s := range w.Services {
		s.Group = groupOf(s.VIP, w.VIPSets[s.VIP], w.VIPCovering[s.VIP])
		svcs = append(svcs, fmt.Sprintf("%+v", s))
	}
	var have []string
	for _, s := range got.services {
		have = append(have, fmt.Sprintf("%+v", s))
	}
	sort.Strings(svcs)
	sort.Strings(have)
	if !slices.Equal(svcs, have) {
		return fmt.Errorf("services %v, want %v", have, svcs)
	}
	if got.config == nil {
		return nil
	}
	if got.config.Underlay != w.Underlay || !slices.Equal(got.config.Edges, w.Edges) {
		return fmt.Errorf("config %+v, want underlay %v, edges %v", got.config, w.Underlay, w.Edges)
	}
	var ifaddrs []dataplane.IfAddr
	for _, g := range w.Guests {
		ifaddrs = append(ifaddrs, dataplane.IfAddr{Ifindex: ifindex[g.Address], Addr: g.Address})
	}
	if fmt.Sprint(got.ifaddrs) != fmt.Sprint(ifaddrs) {
		return fmt.Errorf("guest addresses %v, want %v", got.ifaddrs, ifaddrs)
	}
	if fmt.Sprint(got.checked) != fmt.Sprint(w.Checked) {
		return fmt.Errorf("checked ports %v, want %v", got.checked, w.Checked)
	}
	return nil
}

// checkNamedSlots: an EIP or a service only ever names a slot that holds
// a set (or slot 0), as packets see the maps between two writes.
func checkNamedSlots(f *dataplane.FakeAgent) error {
	gs, _ := f.Groups()
	es, _ := f.EIPs()
	for _, e := range es {
		if g, ok := gs[e.Group]; e.Group != 0 && (!ok || g.Set == "") {
			return fmt.Errorf("EIP %v names slot %d, which holds no set", e.EIP, e.Group)
		}
	}
	ss, _ := f.Services()
	for _, s := range ss {
		if g, ok := gs[s.Group]; s.Group != 0 && (!ok || g.Set == "") {
			return fmt.Errorf("service %v -> %v names slot %d, which holds no set", s.VIP, s.Guest, s.Group)
		}
	}
	return nil
}

// checkCounterSlots: every counter slot handed out is in use or free,
// once.
func checkCounterSlots(r *Reconciler) error {
	seen := map[uint32]bool{}
	for _, i := range r.free {
		if seen[i] {
			return fmt.Errorf("counter slot %d free twice", i)
		}
		seen[i] = true
	}
	for a, e := range r.programmed {
		if seen[e.StatsIdx] {
			return fmt.Errorf("EIP %v's counter slot %d is free or another EIP's", a, e.StatsIdx)
		}
		seen[e.StatsIdx] = true
	}
	if len(seen) != int(r.next) {
		return fmt.Errorf("%d counter slots in use or free, %d handed out", len(seen), r.next)
	}
	return nil
}

var tableCfg = Config{NoRetry: true, Name: "h1", Underlay: "ul0", Log: quiet,
	LocalAllow: []LocalAllow{{Prefix: netip.MustParsePrefix("169.254.169.254/32"), Rule: dataplane.LocalRule{Proto: 6, Lo: 80, Hi: 80}}}}

// TestAgentConvergesUnderFaults runs the reconciler through random
// desired states against maps that fail 15% of the writes (and sometimes
// a restart of the daemon in between). Between any two writes an EIP or
// a service names only a slot that holds a set; once a reconcile
// succeeds, the maps hold exactly the desired state and no counter slot
// is lost; with the faults off, a restarted agent converges too.
func TestAgentConvergesUnderFaults(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 3))
			fake := dataplane.NewFakeAgent()
			faults := dataplane.NewFaults()
			faults.FailRandomly(seed, 0.15)
			var bad error
			faults.After = func(op string) {
				if err := checkNamedSlots(fake); err != nil && bad == nil {
					bad = fmt.Errorf("after %s: %w", op, err)
				}
			}
			links := newFakeLinks()
			newRec := func() *Reconciler {
				r, err := NewReconciler(tableCfg, dataplane.NewFaultyAgent(fake, faults), links)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r := newRec()
			var w HostWant
			for step := range 12 {
				w = randomWant(rnd)
				var errs []string
				for try := 0; try < 200; try++ {
					if errs = handleWant(r, w, int64(step+1)); len(errs) == 0 {
						break
					}
					if rnd.IntN(5) == 0 { // the daemon restarts: a new reconciler adopts the maps
						r = newRec()
					}
				}
				if len(errs) != 0 {
					t.Fatalf("step %d: no convergence: %q", step, errs)
				}
				if bad != nil {
					t.Fatalf("step %d: %v", step, bad)
				}
				if err := checkTables(fakeTables(fake), w); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if err := checkCounterSlots(r); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			if faults.Injected == 0 {
				t.Fatal("no failure was injected: the test proves nothing")
			}
			faults.Off()
			r = newRec()
			if errs := handleWant(r, w, 100); len(errs) != 0 {
				t.Fatalf("faults off: %q", errs)
			}
			if err := checkTables(fakeTables(fake), w); err != nil {
				t.Fatalf("faults off: %v", err)
			}
		})
	}
}

// TestAgentConvergesOnKernelMaps is the same against the real agent maps
// (the failures injected before the write reaches them).
func TestAgentConvergesOnKernelMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the agent data plane")
	}
	dp, err := dataplane.LoadAgent(dataplane.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	faults := dataplane.NewFaults()
	links := newFakeLinks()
	newRec := func() *Reconciler {
		r, err := NewReconciler(tableCfg, dataplane.NewFaultyAgent(dp, faults), links)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newRec()
	for seed := range uint64(6) {
		rnd := rand.New(rand.NewPCG(seed, 4))
		faults.FailRandomly(seed, 0.15)
		for step := range 6 {
			w := randomWant(rnd)
			var errs []string
			for try := 0; try < 200; try++ {
				if errs = handleWant(r, w, int64(step+1)); len(errs) == 0 {
					break
				}
				if rnd.IntN(5) == 0 {
					r = newRec()
				}
			}
			if len(errs) != 0 {
				t.Fatalf("seed %d step %d: no convergence: %q", seed, step, errs)
			}
			if err := checkTables(kernelTables(t, dp), w); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if err := checkCounterSlots(r); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
	if faults.Injected == 0 {
		t.Fatal("no failure was injected: the test proves nothing")
	}
}

// TestAgentFailEachWrite fails, in turn, the nth call of every write (and
// of the services' read) the reconciler makes while it programs hosts,
// changes them and removes everything; each time the failed reconcile
// reports the error and the next one converges, without a counter slot
// lost.
func TestAgentFailEachWrite(t *testing.T) {
	world := func(seed uint64) HostWant {
		rnd := rand.New(rand.NewPCG(seed, 5))
		for {
			// A world that uses every table.
			if w := randomWant(rnd); len(w.EIPs) > 1 && len(w.Services) > 0 && len(w.Checked) > 0 && len(w.Sets) > 0 {
				return w
			}
		}
	}
	empty := HostWant{Underlay: netip.MustParseAddr("198.18.11.1")}
	steps := []HostWant{world(1), world(2), world(3), empty}
	ops := []string{"SetLocalAllow", "SetConfig", "SetGroup", "SetIfAddrs", "SetHealthGuests", "ResetEIPStats", "PutEIP", "DeleteEIP",
		"PutService", "DeleteService", "Services"}
	for _, op := range ops {
		for n := 1; n <= 4; n++ {
			fake := dataplane.NewFakeAgent()
			faults := dataplane.NewFaults()
			r, err := NewReconciler(tableCfg, dataplane.NewFaultyAgent(fake, faults), newFakeLinks())
			if err != nil {
				t.Fatal(err)
			}
			faults.FailNth(op, n)
			failed := false
			for i, w := range steps {
				if errs := handleWant(r, w, int64(i+1)); len(errs) != 0 {
					failed = true
					if errs := handleWant(r, w, int64(i+1)); len(errs) != 0 {
						t.Fatalf("%s #%d step %d: the retry failed: %q", op, n, i, errs)
					}
				}
				if err := checkTables(fakeTables(fake), w); err != nil {
					t.Fatalf("%s #%d step %d: %v", op, n, i, err)
				}
				if r.rev != int64(i+1) {
					t.Fatalf("%s #%d step %d: revision %d applied", op, n, i, r.rev)
				}
			}
			if faults.Injected > 0 != failed {
				t.Fatalf("%s #%d: %d failures injected, reported: %v", op, n, faults.Injected, failed)
			}
			if !failed && n == 1 {
				t.Errorf("%s was never called", op)
			}
			if err := checkCounterSlots(r); err != nil {
				t.Errorf("%s #%d: %v", op, n, err)
			}
			// The last step removed everything: only slot 0 is left.
			if gs, _ := fake.Groups(); len(gs) != 0 || len(fake.EIPMap) != 0 || len(fake.Svc) != 0 {
				t.Errorf("%s #%d: left after removing everything: groups %v, EIPs %v, services %v", op, n, gs, fake.EIPMap, fake.Svc)
			}
		}
	}
}

// TestAgentDiffOps: the writes the diff lists for the changes a host goes
// through. Nothing changed: nothing written.
func TestAgentDiffOps(t *testing.T) {
	g1, g2 := tableGuests[0], tableGuests[1]
	eip := netip.MustParseAddr("198.51.100.7")
	sets := func(names ...string) map[string][]model.EdgeNode {
		out := map[string][]model.EdgeNode{}
		for i, n := range names {
			out[n] = []model.EdgeNode{{Name: n + "-e1", Underlay: netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + i)})}}
		}
		return out
	}
	host := func(s map[string][]model.EdgeNode, bound *model.Guest, svc bool) HostWant {
		w := HostWant{Underlay: netip.MustParseAddr("198.18.11.1"), Guests: []model.Guest{g1, g2}, Sets: s, EIPs: map[netip.Addr]Want{}}
		for _, n := range sortedNames(s) {
			w.Edges = append(w.Edges, s[n][0].Underlay)
		}
		if bound != nil {
			w.EIPs[eip] = Want{EIP: eip, Private: bound.Address, VSID: bound.VSID, Guest: bound.Name, Set: "pop-a"}
		}
		if svc {
			w.Services = []dataplane.AgentService{{VIP: netip.MustParseAddr("203.0.113.1"), Guest: g2.Address, Proto: dataplane.ProtoTCP, VPort: 80, VSID: g2.VSID}}
			w.Checked = []dataplane.HealthGuest{{Guest: g2.Address, VSID: g2.VSID, Proto: dataplane.ProtoTCP, Port: 80}}
		}
		return w
	}
	fake := dataplane.NewFakeAgent()
	r, err := NewReconciler(tableCfg, fake, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		w    HostWant
		want string
	}{
		{"create", host(sets("pop-a", "pop-b"), &g1, false), "[SetLocalAllow SetConfig SetGroup SetGroup SetGroup SetIfAddrs SetHealthGuests PutEIP]"},
		{"unchanged", host(sets("pop-a", "pop-b"), &g1, false), "[]"},
		{"the EIP moves to another guest", host(sets("pop-a", "pop-b"), &g2, false), "[PutEIP]"},
		{"a service and its check come", host(sets("pop-a", "pop-b"), &g2, true), "[SetHealthGuests PutService]"},
		{"a set goes", host(sets("pop-a"), &g2, true), "[SetConfig SetGroup ClearGroup]"},
		{"the EIP and the service go", host(sets("pop-a"), nil, false), "[SetHealthGuests DeleteEIP DeleteService]"},
	} {
		r.mu.Lock()
		links, _ := r.attachGuests(c.w)
		p := r.plan(c.w, links)
		have, _ := fake.Services()
		ops := diffTables(&p, r.held(), have, true)
		var kinds []string
		for _, o := range ops {
			kinds = append(kinds, o.kind.String())
		}
		r.errs = nil
		r.applyOps(ops)
		errs := r.errs
		r.mu.Unlock()
		if got := fmt.Sprint(kinds); got != c.want || len(errs) != 0 || len(p.problems) != 0 {
			t.Errorf("%s: ops %s, want %s (errors %q, problems %v)", c.name, got, c.want, errs, p.problems)
		}
		if err := checkTables(fakeTables(fake), c.w); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestAgentPutEIPFailureFreesCounter: a new EIP whose write fails gives
// its counter slot back (it was lost before: the next try took another).
func TestAgentPutEIPFailureFreesCounter(t *testing.T) {
	w := HostWant{Underlay: netip.MustParseAddr("198.18.11.1"), Guests: tableGuests[:1], EIPs: map[netip.Addr]Want{}}
	e := netip.MustParseAddr("198.51.100.7")
	w.EIPs[e] = Want{EIP: e, Private: tableGuests[0].Address, VSID: tableGuests[0].VSID}
	fake := dataplane.NewFakeAgent()
	faults := dataplane.NewFaults()
	r, err := NewReconciler(tableCfg, dataplane.NewFaultyAgent(fake, faults), newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		faults.FailNth("PutEIP", 1)
		if errs := handleWant(r, w, 1); len(errs) != 1 {
			t.Fatalf("try %d: errors %q, want the injected one", i, errs)
		}
	}
	if errs := handleWant(r, w, 1); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := fake.EIPMap[e].StatsIdx; got != 0 || r.next != 1 {
		t.Fatalf("after 3 failed writes the EIP took counter slot %d (%d handed out), want 0 (1)", got, r.next)
	}
}

// TestAgentRetriesFailedWrite: through Handle, a failed write fails the
// reconcile (reported, revision not applied) and the reconciler's own
// retry converges with no change in the store.
func TestAgentRetriesFailedWrite(t *testing.T) {
	st := state(t)
	fake := dataplane.NewFakeAgent()
	faults := dataplane.NewFaults()
	r, err := NewReconciler(Config{Name: "az1-h1", Underlay: "ul0", Log: quiet}, dataplane.NewFaultyAgent(fake, faults), newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	faults.FailNth("PutEIP", 1)
	r.Handle(st, 1, nil, true)
	r.mu.Lock()
	errs, rev := slices.Clone(r.errs), r.rev
	r.mu.Unlock()
	if len(errs) != 1 || rev != 0 {
		t.Fatalf("failure not reported: errors %q, revision %d", errs, rev)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		errs, rev = slices.Clone(r.errs), r.rev
		r.mu.Unlock()
		es, _ := fake.EIPs()
		if _, ok := es[a("198.51.100.7")]; ok && rev == 1 && len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged within 10 s: revision %d, errors %q", rev, errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentEIPMaxOnKernelMaps: an agent loaded with --eip-max 2 programs
// two of three EIPs and reports the third (its counter slot or entry does
// not fit), nothing lost; with one of them gone, it converges on the two
// left.
func TestAgentEIPMaxOnKernelMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the agent data plane")
	}
	dp, err := dataplane.LoadAgent(dataplane.LoadOptions{AgentEIPMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	r, err := NewReconciler(tableCfg, dp, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	w := HostWant{Underlay: netip.MustParseAddr("198.18.11.1"), Sets: map[string][]model.EdgeNode{},
		VIPSets: map[netip.Addr]string{}, VIPCovering: map[netip.Addr]string{}, EIPs: map[netip.Addr]Want{}, Guests: tableGuests[:3]}
	for i, g := range tableGuests[:3] {
		e := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)})
		w.EIPs[e] = Want{EIP: e, Private: g.Address, VSID: g.VSID, Guest: g.Name}
	}
	errs := handleWant(r, w, 1)
	if len(errs) == 0 {
		t.Fatal("three EIPs programmed into maps of two, no error")
	}
	t.Logf("at capacity: %q", errs)
	es, err := dp.EIPs()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("%d EIPs programmed (errors %q), want 2", len(es), errs)
	}
	for e := range es {
		if _, ok := w.EIPs[e]; !ok {
			t.Fatalf("EIP %v programmed, not wanted", e)
		}
	}
	delete(w.EIPs, netip.AddrFrom4([4]byte{198, 51, 100, 1}))
	if errs := handleWant(r, w, 2); len(errs) != 0 {
		t.Fatalf("two EIPs in maps of two: %q", errs)
	}
	if err := checkTables(kernelTables(t, dp), w); err != nil {
		t.Fatal(err)
	}
	if err := checkCounterSlots(r); err != nil {
		t.Fatal(err)
	}
}

package edge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

// lbWorld is a sequence of desired states for the fault tests: services
// over two hosts, whose pools, backends, listeners, VIPs, health and
// table sizes change from step to step.
func lbWorld(r *rand.Rand) (*index, []model.Object) {
	x := newIndex()
	objs := []model.Object{
		&model.Host{Name: "h1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 1}, {Name: "g2", Address: a("198.19.11.2"), VSID: 1}}},
		&model.Host{Name: "h2", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 2}}},
	}
	sizes := []uint32{307, 311, 401} // primes of at least 100 x 3 backends
	for i := range 1 + r.IntN(4) {
		n := r.IntN(5)
		name := fmt.Sprintf("s%d", n)
		vip := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + n)}) // one service per VIP
		svc := &model.Service{Name: name, VIP: vip, Mode: model.ModeNAT, TableSize: sizes[r.IntN(len(sizes))]}
		if r.IntN(2) == 0 {
			svc.Mode = model.ModeEncap
		}
		h := &model.Health{Service: name, Down: map[string][]string{}}
		for p := range 1 + r.IntN(2) {
			pool := model.Pool{Name: fmt.Sprintf("p%d", p)}
			for b := range 1 + r.IntN(3) {
				be := model.Backend{Address: netip.AddrFrom4([4]byte{198, 19, 200, byte(1 + r.IntN(5))}), Port: uint16(8000 + b)}
				if svc.Mode == model.ModeEncap {
					g := []struct{ h, g string }{{"h1", "g1"}, {"h1", "g2"}, {"h2", "g1"}}[r.IntN(3)]
					be = model.Backend{Host: g.h, Guest: g.g, Port: uint16(8000 + b)}
				}
				if _, dup := pool.Backend(be.Key()); dup {
					continue
				}
				if r.IntN(4) == 0 {
					w := uint32(r.IntN(3))
					be.Weight = &w
				}
				pool.Backends = append(pool.Backends, be)
				if r.IntN(4) == 0 {
					h.Down[pool.Name] = append(h.Down[pool.Name], be.Key())
				}
			}
			svc.Pools = append(svc.Pools, pool)
		}
		svc.Listeners = append(svc.Listeners, model.Listener{Protocol: "tcp", Port: uint16(80 + i), Pool: "p0"})
		if r.IntN(2) == 0 {
			svc.Listeners = append(svc.Listeners, model.Listener{Protocol: "tcp", Port: uint16(1000 + 100*r.IntN(3)), PortEnd: uint16(1050 + 100*r.IntN(3)), Pool: svc.Pools[len(svc.Pools)-1].Name})
		}
		if r.IntN(3) == 0 {
			svc.Listeners = append(svc.Listeners, model.Listener{Protocol: "udp", Pool: "p0"})
		}
		objs = append(objs, svc, h)
	}
	for _, o := range objs {
		x.put(model.KindOf(o), o.Key(), o)
	}
	return x, objs
}

// checkPacketView checks what packets would see in the fake between two
// writes: a listener only names a filled table with its owner record; a
// table only names written backend slots of its own pool; a VIP marked
// during this sync has all the plan's listeners of it; a VIP about to go
// still has all the listeners it had.
func checkPacketView(f *dataplane.FakeLB, p *lbplan.Plan, poolOf map[uint64]uint64, vipsBefore map[netip.Addr]bool, before map[dataplane.Listener]dataplane.ListenerValue) error {
	for l, v := range f.ListenerM {
		if len(f.Tables[v.Table]) == 0 {
			return fmt.Errorf("listener %v names table %d, which is empty", l, v.Table)
		}
		if f.TableOwn[v.Table] == 0 {
			return fmt.Errorf("listener %v names table %d, which has no owner record", l, v.Table)
		}
	}
	for slot, entries := range f.Tables {
		for j, e := range entries {
			if e == noBackend {
				continue
			}
			b, ok := f.BackendM[e]
			if !ok || b.Owner == 0 {
				return fmt.Errorf("table %d entry %d names backend slot %d, which is not written", slot, j, e)
			}
			if pool, ok := poolOf[b.Owner]; ok && pool != f.TableOwn[slot] {
				return fmt.Errorf("table %d entry %d names backend slot %d of another pool", slot, j, e)
			}
		}
	}
	for v := range f.VIPSet {
		if !vipsBefore[v] {
			for l := range p.Listeners {
				if _, ok := f.ListenerM[l]; l.VIP == v && !ok {
					return fmt.Errorf("VIP %v marked before its listener %v", v, l)
				}
			}
		}
		if !p.VIPs[v] {
			for l := range before {
				if _, ok := f.ListenerM[l]; l.VIP == v && !ok {
					return fmt.Errorf("VIP %v still marked after its listener %v went", v, l)
				}
			}
		}
	}
	return nil
}

// checkConverged checks that the fake holds exactly plan p: its VIPs, its
// listeners, each naming a table whose every entry is the plan's backend
// for that entry (target, health flag, owner), and no other table.
func checkConverged(f *dataplane.FakeLB, p *lbplan.Plan) error {
	if len(f.VIPSet) != len(p.VIPs) {
		return fmt.Errorf("VIPs %v, want %v", f.VIPSet, p.VIPs)
	}
	for v := range p.VIPs {
		if !f.VIPSet[v] {
			return fmt.Errorf("VIP %v missing", v)
		}
	}
	if len(f.ListenerM) != len(p.Listeners) {
		return fmt.Errorf("%d listeners, want %d", len(f.ListenerM), len(p.Listeners))
	}
	slots := map[uint32]bool{}
	for l, id := range p.Listeners {
		v, ok := f.ListenerM[l]
		if !ok {
			return fmt.Errorf("listener %v missing", l)
		}
		pl := p.Pool(id)
		if f.TableOwn[v.Table] != owner(pl.ID) {
			return fmt.Errorf("listener %v: table %d is owned by %x, not pool %s", l, v.Table, f.TableOwn[v.Table], pl.ID)
		}
		got := f.Tables[v.Table]
		if len(got) != len(pl.Table.Entry) {
			return fmt.Errorf("pool %s: table of %d entries, want %d", pl.ID, len(got), len(pl.Table.Entry))
		}
		for j, e := range pl.Table.Entry {
			if e < 0 {
				if got[j] != noBackend {
					return fmt.Errorf("pool %s entry %d: backend slot %d, want none", pl.ID, j, got[j])
				}
				continue
			}
			want, b := pl.Backends[e], f.BackendM[got[j]]
			t := lbplan.Target{Addr: b.Addr, Guest: b.Guest, VSID: b.VSID, Port: b.Port, Mode: b.Mode, Down: b.Down}
			if t != want.Target || b.Owner != owner(want.ID) {
				return fmt.Errorf("pool %s entry %d: %+v, want %+v of %s", pl.ID, j, b, want.Target, want.ID)
			}
		}
		slots[v.Table] = true
	}
	owned := 0
	for _, o := range f.TableOwn {
		if o != 0 {
			owned++
		}
	}
	if len(f.Tables) != len(p.Pools) || owned != len(p.Pools) {
		return fmt.Errorf("%d tables and %d owner records, want %d pools", len(f.Tables), owned, len(p.Pools))
	}
	return nil
}

// TestLBConvergesUnderFaults runs the reconciler through random desired
// states against maps that fail writes at random (and sometimes a
// restart of the daemon in between). Between any two writes, packets see
// a consistent data plane (checkPacketView); once a sync succeeds, the
// maps hold exactly the plan (checkConverged). After Cilium's LB map
// reconciler tests.
func TestLBConvergesUnderFaults(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			fake := dataplane.NewFakeLB()
			faults := dataplane.NewFaults()
			faults.FailRandomly(seed, 0.08)
			s := newLBState(dataplane.NewFaultyLB(fake, faults), 7)
			poolOf := map[uint64]uint64{} // backend owner -> pool owner, over every plan
			var bad error
			for step := range 12 {
				x, _ := lbWorld(r)
				p := planOf(x, 7)
				if len(p.Problems) != 0 {
					t.Fatalf("step %d: the world has problems: %q", step, p.Problems)
				}
				for _, pl := range p.Pools {
					for _, b := range pl.Backends {
						poolOf[owner(b.ID)] = owner(pl.ID)
					}
				}
				vipsBefore := maps1(fake.VIPSet)
				before, _ := fake.Listeners()
				faults.After = func(op string) {
					if err := checkPacketView(fake, p, poolOf, vipsBefore, before); err != nil && bad == nil {
						bad = fmt.Errorf("step %d after %s: %w", step, op, err)
					}
				}
				var err error
				for try := 0; try < 100; try++ {
					if _, err = s.sync(x); err == nil {
						break
					}
					if !errors.Is(err, dataplane.ErrInjected) {
						t.Fatal(err)
					}
					if r.IntN(4) == 0 { // the daemon restarts: a new state adopts the maps
						s = newLBState(dataplane.NewFaultyLB(fake, faults), 7)
					}
				}
				if err != nil {
					t.Fatalf("step %d: no convergence: %v", step, err)
				}
				if bad != nil {
					t.Fatal(bad)
				}
				if err := checkConverged(fake, p); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			if faults.Injected == 0 {
				t.Fatal("no failure was injected: the test proves nothing")
			}
		})
	}
}

func maps1(m map[netip.Addr]bool) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestLBFailEachWrite fails, in turn, the nth call of every write the
// reconciler makes while it programs services, changes them and removes
// them; each time the failed sync returns the error and the next one
// converges, without a backend slot or a table slot lost.
func TestLBFailEachWrite(t *testing.T) {
	world := func(seed uint64) *index { x, _ := lbWorld(rand.New(rand.NewPCG(seed, 2))); return x }
	ops := []string{"ResetBackendCounters", "SetBackend", "SetTableOwner", "SetTable", "PutListener", "PutVIP", "DeleteVIP", "DeleteListener", "DeleteTable",
		"Listeners", "VIPs", "Backends", "TableOwners"}
	steps := []*index{world(1), world(2), world(3), newIndex()}
	for _, op := range ops {
		for n := 1; n <= 6; n++ { // the first calls of each op, in every step
			fake := dataplane.NewFakeLB()
			faults := dataplane.NewFaults()
			s := newLBState(dataplane.NewFaultyLB(fake, faults), 7)
			faults.FailNth(op, n)
			failed := false
			for i, x := range steps {
				if _, err := s.sync(x); err != nil {
					if !errors.Is(err, dataplane.ErrInjected) {
						t.Fatalf("%s #%d step %d: %v", op, n, i, err)
					}
					failed = true
					if _, err := s.sync(x); err != nil {
						t.Fatalf("%s #%d step %d: the retry failed: %v", op, n, i, err)
					}
				}
				if err := checkConverged(fake, planOf(x, 7)); err != nil {
					t.Fatalf("%s #%d step %d: %v", op, n, i, err)
				}
			}
			if !failed && n == 1 {
				t.Errorf("%s was never called", op)
			}
			// Every slot is accounted for: in use or free.
			if got := len(s.backends) + len(s.freeBackend); got != int(s.nextBackend) {
				t.Errorf("%s #%d: %d backend slots in use or free, %d handed out", op, n, got, s.nextBackend)
			}
			if got := len(s.tables) + len(s.freeTable); got != int(s.nextTable) {
				t.Errorf("%s #%d: %d table slots in use or free, %d handed out", op, n, got, s.nextTable)
			}
			// The last step removed everything: no table, owner record,
			// listener or VIP is left.
			if owned := slices.Collect(mapKeys(fake.TableOwn, true)); len(owned) != 0 || len(fake.Tables) != 0 || len(fake.ListenerM) != 0 || len(fake.VIPSet) != 0 {
				t.Errorf("%s #%d: left after removing every service: owners %v, %d tables, %d listeners, %d VIPs", op, n, owned, len(fake.Tables), len(fake.ListenerM), len(fake.VIPSet))
			}
		}
	}
}

func mapKeys(m map[uint32]uint64, nonZero bool) func(func(uint32) bool) {
	return func(yield func(uint32) bool) {
		for k, v := range m {
			if (!nonZero || v != 0) && !yield(k) {
				return
			}
		}
	}
}

// TestDiffOps: the writes diff lists, by table, for the changes a service
// goes through. Nothing changed: nothing written.
func TestDiffOps(t *testing.T) {
	svc := func(down bool, port uint16) []model.Object {
		h := &model.Health{Service: "web", Down: map[string][]string{}}
		if down {
			h.Down["p"] = []string{"198.19.200.2"}
		}
		return []model.Object{&model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeNAT, TableSize: 211,
			Listeners: []model.Listener{{Protocol: "tcp", Port: port, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}, {Address: a("198.19.200.2")}}}}}, h}
	}
	idx := func(objs []model.Object) *index {
		x := newIndex()
		for _, o := range objs {
			x.put(model.KindOf(o), o.Key(), o)
		}
		return x
	}
	fake := dataplane.NewFakeLB()
	s := newLBState(fake, 7)
	if err := s.adopt(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		x    *index
		want string
	}{
		{"create", idx(svc(false, 80)), "[ResetBackendCounters SetBackend ResetBackendCounters SetBackend SetTableOwner SetTable PutListener PutVIP PutNATBackend PutNATBackend]"},
		{"unchanged", idx(svc(false, 80)), "[]"},
		{"a backend fails", idx(svc(true, 80)), "[SetBackend SetTable]"},
		{"the listener moves", idx(svc(true, 81)), "[PutListener PutNATBackend PutNATBackend DeleteNATBackend DeleteNATBackend DeleteListener]"},
		{"removed", newIndex(), "[DeleteNATBackend DeleteNATBackend DeleteVIP DeleteListener DeleteTable ClearTableOwner FreeBackend FreeBackend]"},
	} {
		have, _ := fake.Listeners()
		vips, _ := fake.VIPs()
		p := planOf(c.x, 7)
		haveNAT, _ := fake.NATBackends()
		ops, problems := s.diff(p, have, vips, haveNAT)
		problems = append(problems, p.Problems.Strings()...)
		var kinds []string
		for _, op := range ops {
			kinds = append(kinds, op.kind.String())
		}
		if got := fmt.Sprint(kinds); got != c.want && !(got == "[]" && c.want == "[]") || len(problems) != 0 {
			t.Errorf("%s: ops %s, want %s (problems %q)", c.name, got, c.want, problems)
		}
		if err := s.apply(ops); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReconcilerRetriesFailedLBWrite: through the reconciler, a failed
// table write fails the commit (reported, revision not applied) and the
// reconciler's own retry converges to the plan with no change in the
// store.
func TestReconcilerRetriesFailedLBWrite(t *testing.T) {
	fake := dataplane.NewFakeLB()
	faults := dataplane.NewFaults()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, dataplane.NewFaultyLB(fake, faults))
	t.Cleanup(r.Stop)
	faults.FailNth("SetTable", 2)
	load(t, r, 1, svcRegion()...)
	r.mu.Lock()
	errs, rev := slices.Clone(r.errs), r.rev
	r.mu.Unlock()
	if len(errs) == 0 || rev != 0 {
		t.Fatalf("failure not reported (errs %v, rev %d)", errs, rev)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		errs, rev = slices.Clone(r.errs), r.rev
		var err error
		if rev == 1 {
			err = checkConverged(fake, planOf(r.idx, 7))
		}
		r.mu.Unlock()
		if rev == 1 && len(errs) == 0 && err == nil && fake.LB.NAT {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged within 10 s: rev %d errs %v: %v", rev, errs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlotsFreedInTheSameSync: every table slot is in use and all the
// services are replaced by others in one change. The plan fits, but the
// slots the new pools need are only freed by the sync that programs them:
// a second pass takes them, so nothing is left out.
func TestSlotsFreedInTheSameSync(t *testing.T) {
	world := func(prefix string) *index {
		x := newIndex()
		for i := range lbTablesMax / model.MaxPools {
			s := &model.Service{Name: fmt.Sprintf("%s%02d", prefix, i), VIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Mode: model.ModeNAT, TableSize: 101,
				Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p0"}}}
			for j := range model.MaxPools {
				s.Pools = append(s.Pools, model.Pool{Name: fmt.Sprintf("p%d", j), Backends: []model.Backend{{Address: a("198.19.200.1")}}})
			}
			x.put(model.KindService, s.Name, s)
		}
		return x
	}
	fake := dataplane.NewFakeLB()
	s := newLBState(fake, 7)
	for _, x := range []*index{world("a"), world("b")} {
		problems, err := s.sync(x)
		if err != nil || len(problems) != 0 {
			t.Fatalf("problems %q, err %v", problems, err)
		}
		if err := checkConverged(fake, planOf(x, 7)); err != nil {
			t.Fatal(err)
		}
	}
}

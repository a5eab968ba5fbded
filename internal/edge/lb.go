package edge

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

// noBackend fills table slots with no backend (every backend of the pool
// drained): the data plane drops those flows (drop_lb_no_backend).
const noBackend = ^uint32(0)

// Data-plane capacities (defined once in lbplan, held to the C ones).
const (
	lbBackendsMax = lbplan.BackendsMax
	lbTablesMax   = lbplan.TablesMax
)

// programmedTable is what a table slot holds.
type programmedTable struct {
	slot     uint32
	owned    bool // its owner record is written
	m        uint64
	checksum uint64
	backends int
	healthy  int
}

// programmedBackend is a backend slot.
type programmedBackend struct {
	idx   uint32
	reset bool // its counters were zeroed for this backend
	want  dataplane.LBBackend
}

// lbState programs the services in three steps:
//
//   - plan (lbplan.Build, pure): what the services want from the index,
//     the health verdicts and the seed; `azgate service lookup` and
//     `status` compute the same plan;
//   - diff (lbState.diff, no I/O): the writes that take the maps from what
//     this state records as programmed to the plan, in an order that keeps
//     every intermediate state consistent for packets (see diff); it
//     reserves slots for new backends and pools;
//   - apply (lbState.apply): the writes, each booked as done only once it
//     succeeded, so after a failure the next sync's diff redoes exactly
//     what is missing.
//
// It recomputes everything on every change of a service, a health verdict
// or a host (services are few; tables only go to the data plane when
// their checksum changes).
type lbState struct {
	maps dataplane.LBMaps
	seed uint32
	memo *lbplan.Tables // the current pools' tables, reused while unchanged

	tables   map[string]*programmedTable   // by pool ID "service/pool"
	backends map[string]*programmedBackend // by backend ID "service/pool/key"
	// slot allocators: never-used slots first, freed ones last, so a
	// backend slot (which old connections may still point at) is reused
	// as late as possible; its generation changes when it is.
	nextBackend uint32
	freeBackend []uint32
	gens        map[uint32]uint16
	nextTable   uint32
	freeTable   []uint32
	// listenersMax and backendsMax: the edge's lb_listeners and backend
	// capacities (--listener-max, --backend-max; 0: lbplan.ListenersMax,
	// BackendsMax), what the plan leaves room for and the backend slots
	// allocated below.
	listenersMax, backendsMax int
	nat                       bool            // some service is in nat mode
	natLeftOut                int             // nat backends left out of the reply fallback (ambiguous)
	targets                   []health.Target // backends to health-check
	// Slots a previous run of the daemon left, by owner hash: the first
	// sync takes them back (same slot, same generation), so connections
	// survive a restart; the rest are freed.
	adopted       bool
	oldBackends   map[uint64]uint32
	oldTables     map[uint64]uint32
	oldBackendVal map[uint32]dataplane.LBBackend
}

// owner hashes an identity ("service/pool[/key]") for the data plane's
// slot records (FNV-1a 64; never 0).
func owner(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

func newLBState(maps dataplane.LBMaps, seed uint32) *lbState {
	return &lbState{maps: maps, seed: seed, memo: lbplan.NewTables(), tables: map[string]*programmedTable{}, backends: map[string]*programmedBackend{},
		gens: map[uint32]uint16{}}
}

// adopt reads the slots a previous run left in the (pinned) maps.
func (s *lbState) adopt() error {
	bs, err := s.maps.Backends()
	if err != nil {
		return err
	}
	ts, err := s.maps.TableOwners()
	if err != nil {
		return err
	}
	s.oldBackends, s.oldTables, s.oldBackendVal = map[uint64]uint32{}, map[uint64]uint32{}, bs
	for idx, b := range bs {
		s.gens[idx] = b.Gen
		s.nextBackend = max(s.nextBackend, idx+1)
		// A backend removed and added again holds two slots (the first
		// one draining): the lower is taken back, the other freed.
		if o, dup := s.oldBackends[b.Owner]; dup {
			s.freeBackend = append(s.freeBackend, max(o, idx))
			idx = min(o, idx)
		}
		s.oldBackends[b.Owner] = idx
	}
	for slot, o := range ts {
		s.oldTables[o] = slot
		s.nextTable = max(s.nextTable, slot+1)
	}
	s.adopted = true
	return nil
}

// allocBackend reserves a slot for a new backend: the one a previous run
// left it (adopted, with its contents), else a never-used one, else the
// oldest freed one with a new generation.
func (s *lbState) allocBackend(o uint64) (uint32, dataplane.LBBackend, bool, error) {
	if idx, ok := s.oldBackends[o]; ok {
		delete(s.oldBackends, o)
		return idx, s.oldBackendVal[idx], true, nil
	}
	var idx uint32
	slots := uint32(lbBackendsMax)
	if s.backendsMax > 0 && s.backendsMax < lbBackendsMax {
		slots = uint32(s.backendsMax)
	}
	switch {
	case s.nextBackend < slots:
		idx = s.nextBackend
		s.nextBackend++
	case len(s.freeBackend) > 0:
		idx = s.freeBackend[0]
		s.freeBackend = s.freeBackend[1:]
	default:
		return 0, dataplane.LBBackend{}, false, fmt.Errorf("all %d backend slots are in use: %w", slots, errSlotsFull)
	}
	s.gens[idx]++
	return idx, dataplane.LBBackend{}, false, nil
}

// allocTable reserves a table slot: the one a previous run left the pool
// (adopted: its owner record is there), else a free one.
func (s *lbState) allocTable(o uint64) (uint32, bool, error) {
	if slot, ok := s.oldTables[o]; ok {
		delete(s.oldTables, o)
		return slot, true, nil
	}
	if n := len(s.freeTable); n > 0 {
		t := s.freeTable[n-1]
		s.freeTable = s.freeTable[:n-1]
		return t, false, nil
	}
	if s.nextTable >= lbTablesMax {
		return 0, false, fmt.Errorf("all %d table slots are in use: %w", lbTablesMax, errSlotsFull)
	}
	s.nextTable++
	return s.nextTable - 1, false, nil
}

var errSlotsFull = errors.New("the data plane is full")

// resolver places encap backends from the index.
type resolver struct{ x *index }

func (r resolver) Place(host, guest string) (lbplan.Placement, error) {
	u, g, ok := r.x.lookup(host, guest)
	if !ok {
		if _, whole := r.x.hosts[host]; whole {
			return lbplan.Placement{}, lbplan.ErrNoGuest
		}
		if _, copied := r.x.copied[host]; copied {
			return lbplan.Placement{}, lbplan.ErrNoGuest
		}
		return lbplan.Placement{}, lbplan.ErrNoHost
	}
	return lbplan.Placement{Underlay: u, Guest: netip.AddrFrom4(g.addr), VSID: g.vsid, Guest6: r.x.guest6Of(host, guest)}, nil
}

// planOf computes the index's plan at the compiled capacities (memo: the
// tables of the previous plan, or nil).
func planOf(x *index, seed uint32, memo ...*lbplan.Tables) *lbplan.Plan {
	s := &lbState{seed: seed}
	if len(memo) > 0 {
		s.memo = memo[0]
	}
	return s.plan(x)
}

// plan computes the index's plan for this edge: its seed, memo and
// listener capacity.
func (s *lbState) plan(x *index) *lbplan.Plan {
	in := lbplan.Input{Services: x.lbServices(), Health: x.health, Hosts: resolver{x}, Seed: s.seed, Tables: s.memo,
		ListenersMax: s.listenersMax, BackendsMax: s.backendsMax}
	return lbplan.Build(in)
}

// sync programs every service of the index. Problems with one service are
// returned together; the others are programmed regardless. An error (a
// map write failed) leaves the bookkeeping true to what was written: the
// next sync converges.
func (s *lbState) sync(x *index) ([]string, error) {
	if !s.adopted {
		if err := s.adopt(); err != nil {
			return nil, err
		}
	}
	p := s.plan(x)
	var problems []string
	for pass := 0; ; pass++ {
		have, err := s.maps.Listeners()
		if err != nil {
			return p.Problems.Strings(), err
		}
		haveVIPs, err := s.maps.VIPs()
		if err != nil {
			return p.Problems.Strings(), err
		}
		haveNAT, err := s.maps.NATBackends()
		if err != nil {
			return p.Problems.Strings(), err
		}
		ops, full := s.diff(p, have, haveVIPs, haveNAT)
		problems = append(p.Problems.Strings(), full...)
		if err := s.apply(ops); err != nil {
			return problems, err
		}
		// A pool that found no slot while others were being freed (the
		// plan fits, but the slots it needs were released by this very
		// pass) gets a second pass: the data plane is full, so reusing a
		// slot at once is the lesser evil.
		freed := slices.ContainsFunc(ops, func(op lbOp) bool { return op.kind == opFreeBackend || op.kind == opClearTableOwner })
		if len(full) == 0 || !freed || pass == 1 {
			break
		}
	}
	s.oldBackends, s.oldTables, s.oldBackendVal = nil, nil, nil // all released by now
	for _, pl := range p.Pools {
		if pt := s.tables[pl.ID]; pt != nil {
			pt.backends, pt.healthy = len(pl.Backends), pl.Healthy
		}
	}
	s.nat = p.NAT
	s.natLeftOut = p.NATLeftOut
	s.targets = s.targets[:0:0]
	for _, c := range p.Checks {
		t := health.Target{Service: c.Service, Pool: c.Pool, Backend: c.Backend, Addr: c.Addr, Check: c.Check}
		if c.Mode == model.ModeEncap {
			t.Tunnel = &health.Tunnel{Host: c.Underlay, VSID: c.VSID, Guest6: c.Addr6.Addr()} // through its host (hc.go)
		}
		s.targets = append(s.targets, t)
	}
	return problems, nil
}

// opKind is a step of a diff.
type opKind uint8

const (
	opResetCounters opKind = iota // zero a new backend slot's counters
	opSetBackend
	opSetTableOwner
	opSetTable
	opPutListener
	opPutVIP
	opPutNATBackend
	opDeleteNATBackend
	opDeleteVIP
	opDeleteListener
	opDeleteTable
	opClearTableOwner // books the table slot free
	opFreeBackend     // no write: books the backend slot free
)

var opNames = [...]string{"ResetBackendCounters", "SetBackend", "SetTableOwner", "SetTable", "PutListener", "PutVIP", "PutNATBackend",
	"DeleteNATBackend", "DeleteVIP",
	"DeleteListener", "DeleteTable", "ClearTableOwner", "FreeBackend"}

func (k opKind) String() string { return opNames[k] }

// lbOp is one write of a diff and what it books once it succeeded.
type lbOp struct {
	kind     opKind
	id       string // backend or pool ID ("" for a slot a previous run left)
	slot     uint32 // backend index or table slot
	owner    uint64
	sum      uint64 // a table's checksum
	backend  dataplane.LBBackend
	entries  []uint32
	listener dataplane.Listener
	value    dataplane.ListenerValue
	vip      netip.Addr
	nat      dataplane.NATBackend // a nat backend of the reply fallback
	natVIP   netip.AddrPort       // and its VIP and port
}

// diff lists the writes that take the maps to plan p, in this order:
//
//  1. per pool, its backend slots (counters zeroed, contents), then its
//     table's owner record and the table itself: a table only ever names
//     written backend slots;
//  2. listeners added or changed: a listener only ever names a filled
//     table (a pool keeps its table slot for life, and the table swaps
//     whole);
//  3. new VIPs, after all their listeners: a VIP is never marked before
//     its listeners are complete; then the reply path's stateless
//     fallback (nat backends of one VIP and port) added or changed, and
//     the ones gone or now ambiguous deleted (it only says what the
//     listeners already do, so its order matters little);
//  4. VIPs gone, then listeners gone (so still no VIP without its
//     listeners), then tables no listener names any more, and the slots
//     of a previous run nobody took back;
//  5. backend slots no table names any more are booked free (their
//     contents stay for the connections they hold: removal drains; the
//     slot is reused last, with a new generation).
//
// A pool that gets no slot (the data plane is full) leaves its whole
// service out (reported). diff does no I/O; it reserves the slots of new
// backends and pools in s, so a retry after a failed apply reuses them.
func (s *lbState) diff(p *lbplan.Plan, have map[dataplane.Listener]dataplane.ListenerValue, haveVIPs []netip.Addr,
	haveNAT map[dataplane.NATBackend]netip.AddrPort) ([]lbOp, []string) {
	var ops []lbOp
	var problems []string
	left := map[string]bool{} // services left out
	wantTables := map[string]bool{}
	wantBackends := map[string]bool{}
	for _, pl := range p.Pools {
		if left[pl.Service] {
			continue
		}
		pops, err := s.diffPool(pl, wantBackends)
		if err != nil {
			problems = append(problems, fmt.Sprintf("service %s pool %s: not programmed: %v", pl.Service, pl.Name, err))
			left[pl.Service] = true
			continue
		}
		wantTables[pl.ID] = true
		ops = append(ops, pops...)
	}
	want := map[dataplane.Listener]dataplane.ListenerValue{}
	for l, id := range p.Listeners {
		pl := p.Pool(id)
		if pl == nil || left[pl.Service] {
			continue
		}
		want[l] = dataplane.ListenerValue{Table: s.tables[id].slot}
	}
	wantVIPs := map[netip.Addr]bool{}
	for name, vip := range p.Services {
		if !left[name] {
			wantVIPs[vip] = true
		}
	}
	for _, l := range sortedListeners(want) {
		if cur, ok := have[l]; !ok || cur != want[l] {
			ops = append(ops, lbOp{kind: opPutListener, listener: l, value: want[l]})
		}
	}
	haveVIP := map[netip.Addr]bool{}
	for _, v := range haveVIPs {
		haveVIP[v] = true
	}
	for _, v := range sortedAddrs(wantVIPs) {
		if !haveVIP[v] {
			ops = append(ops, lbOp{kind: opPutVIP, vip: v})
		}
	}
	ops = append(ops, diffNAT(p, left, haveNAT)...)
	slices.SortFunc(haveVIPs, netip.Addr.Compare)
	for _, v := range haveVIPs {
		if !wantVIPs[v] {
			ops = append(ops, lbOp{kind: opDeleteVIP, vip: v})
		}
	}
	for _, l := range sortedListeners(have) {
		if _, ok := want[l]; !ok {
			ops = append(ops, lbOp{kind: opDeleteListener, listener: l})
		}
	}
	for _, id := range sortedKeys(s.tables) {
		if !wantTables[id] {
			slot := s.tables[id].slot
			ops = append(ops, lbOp{kind: opDeleteTable, slot: slot}, lbOp{kind: opClearTableOwner, id: id, slot: slot})
		}
	}
	for _, o := range sortedKeys(s.oldTables) {
		slot := s.oldTables[o]
		ops = append(ops, lbOp{kind: opDeleteTable, slot: slot}, lbOp{kind: opClearTableOwner, slot: slot, owner: o})
	}
	for _, o := range sortedKeys(s.oldBackends) {
		ops = append(ops, lbOp{kind: opFreeBackend, slot: s.oldBackends[o], owner: o})
	}
	for _, id := range sortedKeys(s.backends) {
		if !wantBackends[id] {
			ops = append(ops, lbOp{kind: opFreeBackend, id: id, slot: s.backends[id].idx})
		}
	}
	return ops, problems
}

// diffNAT lists the writes of the reply fallback: the plan's nat backends
// of services programmed (not left out) put where missing or different,
// the others deleted.
func diffNAT(p *lbplan.Plan, left map[string]bool, have map[dataplane.NATBackend]netip.AddrPort) []lbOp {
	skip := map[netip.Addr]bool{} // VIPs of services left out
	for name, vip := range p.Services {
		if left[name] {
			skip[vip] = true
		}
	}
	want := map[dataplane.NATBackend]netip.AddrPort{}
	for k, v := range p.NATBackends {
		if !skip[v.Addr()] {
			want[k] = v
		}
	}
	var ops []lbOp
	for _, k := range sortedNAT(want) {
		if cur, ok := have[k]; !ok || cur != want[k] {
			ops = append(ops, lbOp{kind: opPutNATBackend, nat: k, natVIP: want[k]})
		}
	}
	for _, k := range sortedNAT(have) {
		if _, ok := want[k]; !ok {
			ops = append(ops, lbOp{kind: opDeleteNATBackend, nat: k})
		}
	}
	return ops
}

func sortedNAT(m map[dataplane.NATBackend]netip.AddrPort) []dataplane.NATBackend {
	out := make([]dataplane.NATBackend, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b dataplane.NATBackend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// diffPool reserves a pool's slots and lists the writes of step 1.
func (s *lbState) diffPool(pl *lbplan.Pool, wantBackends map[string]bool) ([]lbOp, error) {
	var ops []lbOp
	idxOf := make([]uint32, len(pl.Backends))
	for i, b := range pl.Backends {
		pb := s.backends[b.ID]
		if pb == nil {
			idx, cur, adopted, err := s.allocBackend(owner(b.ID))
			if err != nil {
				return nil, fmt.Errorf("backend %s: %w", b.Spec.Key(), err)
			}
			pb = &programmedBackend{idx: idx, reset: adopted, want: cur}
			s.backends[b.ID] = pb
		}
		wantBackends[b.ID] = true
		t := b.Target
		want := dataplane.LBBackend{Addr: t.Addr, Guest: t.Guest, VSID: t.VSID, Port: t.Port, Gen: s.gens[pb.idx], Down: t.Down,
			Mode: t.Mode, Owner: owner(b.ID)}
		if !pb.reset {
			ops = append(ops, lbOp{kind: opResetCounters, id: b.ID, slot: pb.idx})
		}
		if want != pb.want {
			ops = append(ops, lbOp{kind: opSetBackend, id: b.ID, slot: pb.idx, backend: want})
		}
		idxOf[i] = pb.idx
	}
	pt := s.tables[pl.ID]
	if pt == nil {
		slot, adopted, err := s.allocTable(owner(pl.ID))
		if err != nil {
			return nil, err
		}
		pt = &programmedTable{slot: slot, owned: adopted}
		s.tables[pl.ID] = pt
	}
	if !pt.owned {
		ops = append(ops, lbOp{kind: opSetTableOwner, id: pl.ID, slot: pt.slot, owner: owner(pl.ID)})
	}
	if sum := pl.Checksum; sum != pt.checksum || pt.m != pl.M {
		entries := make([]uint32, len(pl.Table.Entry))
		for j, e := range pl.Table.Entry {
			if e < 0 {
				entries[j] = noBackend
			} else {
				entries[j] = idxOf[e]
			}
		}
		ops = append(ops, lbOp{kind: opSetTable, id: pl.ID, slot: pt.slot, sum: sum, entries: entries})
	}
	return ops, nil
}

// apply writes ops in order and books each one that succeeded; it stops
// at the first failure.
func (s *lbState) apply(ops []lbOp) error {
	for _, op := range ops {
		if err := s.write(op); err != nil {
			return fmt.Errorf("load balancer: %v: %w", op.kind, err)
		}
		s.book(op)
	}
	return nil
}

func (s *lbState) write(op lbOp) error {
	m := s.maps
	switch op.kind {
	case opResetCounters:
		return m.ResetBackendCounters(op.slot)
	case opSetBackend:
		return m.SetBackend(op.slot, op.backend)
	case opSetTableOwner:
		return m.SetTableOwner(op.slot, op.owner)
	case opSetTable:
		return m.SetTable(op.slot, op.entries)
	case opPutListener:
		return m.PutListener(op.listener, op.value)
	case opPutVIP:
		return m.PutVIP(op.vip)
	case opPutNATBackend:
		return m.PutNATBackend(op.nat, op.natVIP)
	case opDeleteNATBackend:
		return m.DeleteNATBackend(op.nat)
	case opDeleteVIP:
		return m.DeleteVIP(op.vip)
	case opDeleteListener:
		return m.DeleteListener(op.listener)
	case opDeleteTable:
		return m.DeleteTable(op.slot)
	case opClearTableOwner:
		return m.SetTableOwner(op.slot, 0)
	}
	return nil
}

// book records a successful write.
func (s *lbState) book(op lbOp) {
	switch op.kind {
	case opResetCounters:
		s.backends[op.id].reset = true
	case opSetBackend:
		s.backends[op.id].want = op.backend
	case opSetTableOwner:
		s.tables[op.id].owned = true
	case opSetTable:
		pt := s.tables[op.id]
		pt.checksum, pt.m = op.sum, uint64(len(op.entries))
	case opClearTableOwner:
		if op.id != "" {
			delete(s.tables, op.id)
		} else {
			delete(s.oldTables, op.owner)
		}
		s.freeTable = append(s.freeTable, op.slot)
	case opFreeBackend:
		if op.id != "" {
			delete(s.backends, op.id)
		} else {
			delete(s.oldBackends, op.owner)
		}
		s.freeBackend = append(s.freeBackend, op.slot)
	}
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func sortedListeners(m map[dataplane.Listener]dataplane.ListenerValue) []dataplane.Listener {
	out := make([]dataplane.Listener, 0, len(m))
	for l := range m {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b dataplane.Listener) int {
		return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Last, b.Last))
	})
	return out
}

// tableStatus describes the programmed tables for the node status.
func (s *lbState) tableStatus() map[string]model.TableStatus {
	out := map[string]model.TableStatus{}
	for tk, pt := range s.tables {
		if pt.m == 0 {
			continue // reserved by a failed sync, not written yet
		}
		out[tk] = model.TableStatus{Checksum: fmt.Sprintf("%016x", pt.checksum), Backends: pt.backends, Healthy: pt.healthy, M: pt.m}
	}
	return out
}

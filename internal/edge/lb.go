package edge

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"sort"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
)

// noBackend fills table slots with no backend (every backend of the pool
// drained): the data plane drops those flows (drop_lb_no_backend).
const noBackend = ^uint32(0)

// lbBackendsMax is the size of the data plane's backend array.
const lbBackendsMax = 65536

// lbTablesMax is the size of the data plane's table map.
const lbTablesMax = 4096

// Size of the single-port listener map (LB_LISTENERS_MAX in
// bpf/lib/consts.h): a service that would overflow it is left out and
// reported, the others are programmed.
const lbListenersMax = 1 << 18

// programmedTable is what a table slot holds.
type programmedTable struct {
	slot     uint32
	m        uint64
	checksum uint64
	backends int
	healthy  int
}

// programmedBackend is a backend slot.
type programmedBackend struct {
	idx  uint32
	want dataplane.LBBackend
}

// lbState programs the services: VIPs, listeners, Maglev tables (built
// with internal/maglev from the pools, failed backends repointed with
// Table.Fail from the controller's Health verdicts), backend slots, the
// nat-mode reverse translations. It recomputes everything from the index
// on every change of a service, a health verdict or a host (services are
// few; tables only go to the data plane when their checksum changes).
type lbState struct {
	maps dataplane.LBMaps
	seed uint32

	tables   map[string]*programmedTable   // "service/pool"
	backends map[string]*programmedBackend // "service/pool/key"
	// slot allocators: never-used slots first, freed ones last, so a
	// backend slot (which old connections may still point at) is reused
	// as late as possible; its generation changes when it is.
	nextBackend uint32
	freeBackend []uint32
	gens        map[uint32]uint16
	nextTable   uint32
	freeTable   []uint32
	nat         bool            // some service is in nat mode
	targets     []health.Target // backends to health-check
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
		s.oldBackends[b.Owner] = idx
		s.gens[idx] = b.Gen
		s.nextBackend = max(s.nextBackend, idx+1)
	}
	for slot, o := range ts {
		s.oldTables[o] = slot
		s.nextTable = max(s.nextTable, slot+1)
	}
	s.adopted = true
	return nil
}

// release frees the slots of the previous run nobody took back: their
// backends' connections drain; those tables are gone.
func (s *lbState) release() error {
	for _, idx := range s.oldBackends {
		s.freeBackend = append(s.freeBackend, idx)
	}
	for _, slot := range s.oldTables {
		if err := s.maps.DeleteTable(slot); err != nil {
			return err
		}
		if err := s.maps.SetTableOwner(slot, 0); err != nil {
			return err
		}
		s.freeTable = append(s.freeTable, slot)
	}
	s.oldBackends, s.oldTables, s.oldBackendVal = nil, nil, nil
	return nil
}

func newLBState(maps dataplane.LBMaps, seed uint32) *lbState {
	return &lbState{maps: maps, seed: seed, tables: map[string]*programmedTable{}, backends: map[string]*programmedBackend{},
		gens: map[uint32]uint16{}}
}

func (s *lbState) allocBackend(o uint64) (uint32, dataplane.LBBackend, error) {
	if idx, ok := s.oldBackends[o]; ok {
		delete(s.oldBackends, o)
		return idx, s.oldBackendVal[idx], nil
	}
	var idx uint32
	switch {
	case s.nextBackend < lbBackendsMax:
		idx = s.nextBackend
		s.nextBackend++
	case len(s.freeBackend) > 0:
		idx = s.freeBackend[0]
		s.freeBackend = s.freeBackend[1:]
	default:
		return 0, dataplane.LBBackend{}, fmt.Errorf("all %d backend slots are in use: %w", lbBackendsMax, errSlotsFull)
	}
	s.gens[idx]++
	return idx, dataplane.LBBackend{}, s.maps.ResetBackendCounters(idx)
}

func (s *lbState) allocTable(o uint64) (uint32, error) {
	if slot, ok := s.oldTables[o]; ok {
		delete(s.oldTables, o)
		return slot, nil
	}
	if n := len(s.freeTable); n > 0 {
		t := s.freeTable[n-1]
		s.freeTable = s.freeTable[:n-1]
		return t, nil
	}
	if s.nextTable >= lbTablesMax {
		return 0, fmt.Errorf("all %d table slots are in use: %w", lbTablesMax, errSlotsFull)
	}
	s.nextTable++
	return s.nextTable - 1, nil
}

var errSlotsFull = errors.New("the data plane is full")

var protoNum = map[string]uint8{"tcp": dataplane.ProtoTCP, "udp": dataplane.ProtoUDP}

// backendTarget resolves a backend to its data-plane form.
func backendTarget(x *index, svc *model.Service, b model.Backend) (dataplane.LBBackend, error) {
	if svc.Mode == model.ModeNAT {
		return dataplane.LBBackend{Addr: b.Address, Port: b.Port}, nil
	}
	h, ok := x.hosts[b.Host]
	if !ok {
		return dataplane.LBBackend{}, fmt.Errorf("service %s: backend %s: host %q does not exist", svc.Name, b.Key(), b.Host)
	}
	g, ok := h.guest[b.Guest]
	if !ok {
		return dataplane.LBBackend{}, fmt.Errorf("service %s: backend %s: host %s has no guest %q", svc.Name, b.Key(), b.Host, b.Guest)
	}
	return dataplane.LBBackend{Addr: h.underlay, Guest: netip.AddrFrom4(g.addr), VSID: g.vsid}, nil
}

// sync programs every service of the index. Problems with one service are
// returned together; the others are programmed regardless.
func (s *lbState) sync(x *index) (problems []string, err error) {
	if !s.adopted {
		if err := s.adopt(); err != nil {
			return nil, err
		}
		defer func() {
			if s.oldBackends != nil {
				if err := s.release(); err != nil {
					problems = append(problems, err.Error())
				}
			}
		}()
	}
	wantTables := map[string]bool{}
	wantBackends := map[string]bool{}
	wantListeners := map[dataplane.Listener]dataplane.ListenerValue{}
	wantVIPs := map[netip.Addr]bool{}
	nat := false
	var checks []health.Target

	names := make([]string, 0, len(x.services))
	for n := range x.services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		svc := x.services[name]
		health := x.health[name]
		if svc.Mode == model.ModeNAT {
			nat = true
		}
		m := uint64(svc.TableSize)
		if m == 0 {
			m = model.DefaultTableSize
		}
		poolSlot := map[string]*programmedTable{}
		for _, pool := range svc.Pools {
			tk := name + "/" + pool.Name
			var mb []maglev.Backend
			targets := map[string]dataplane.LBBackend{}
			for _, b := range pool.Backends {
				t, err := backendTarget(x, svc, b)
				if err != nil {
					problems = append(problems, err.Error())
					continue // an unresolvable backend gets no slots
				}
				targets[b.Key()] = t
				mb = append(mb, maglev.Backend{Key: b.Key(), Weight: b.W()})
			}
			tbl, err := maglev.Build(mb, m, s.seed)
			if err != nil {
				problems = append(problems, fmt.Sprintf("service %s pool %s: %v", name, pool.Name, err))
				continue
			}
			down := map[string]bool{}
			if health != nil {
				down = health.DownSet(pool.Name)
			}
			if len(down) > 0 {
				tbl = tbl.Fail(down)
			}
			// Backend slots, then the table in terms of them.
			idxOf := make([]uint32, len(tbl.Backends))
			healthy := 0
			full := false
			for i, b := range tbl.Backends {
				bk := tk + "/" + b.Key
				wantBackends[bk] = true
				pb, ok := s.backends[bk]
				if !ok {
					idx, cur, err := s.allocBackend(owner(bk))
					if errors.Is(err, errSlotsFull) {
						problems = append(problems, fmt.Sprintf("service %s pool %s: backend %s: %v", name, pool.Name, b.Key, err))
						full = true
						break
					}
					if err != nil {
						return problems, err
					}
					pb = &programmedBackend{idx: idx, want: cur}
					s.backends[bk] = pb
				}
				want := targets[b.Key]
				want.Gen = s.gens[pb.idx]
				want.Down = down[b.Key]
				want.Owner = owner(bk)
				want.Mode = dataplane.ModeEncap
				if svc.Mode == model.ModeNAT {
					want.Mode = dataplane.ModeNAT
				}
				if !want.Down && b.Weight > 0 {
					healthy++
				}
				if want != pb.want {
					if err := s.maps.SetBackend(pb.idx, want); err != nil {
						return problems, err
					}
					pb.want = want
				}
				idxOf[i] = pb.idx
			}
			if full {
				continue // the pool gets no table: its listeners are left out
			}
			pt := s.tables[tk]
			if pt == nil {
				slot, err := s.allocTable(owner(tk))
				if errors.Is(err, errSlotsFull) {
					problems = append(problems, fmt.Sprintf("service %s pool %s: %v", name, pool.Name, err))
					continue
				}
				if err != nil {
					return problems, err
				}
				if err := s.maps.SetTableOwner(slot, owner(tk)); err != nil {
					return problems, err
				}
				pt = &programmedTable{slot: slot}
				s.tables[tk] = pt
			}
			sum := tbl.Checksum()
			if sum != pt.checksum || pt.m != m {
				entries := make([]uint32, len(tbl.Entry))
				for j, e := range tbl.Entry {
					if e < 0 {
						entries[j] = noBackend
					} else {
						entries[j] = idxOf[e]
					}
				}
				if err := s.maps.SetTable(pt.slot, entries); err != nil {
					return problems, err
				}
				pt.checksum, pt.m = sum, m
			}
			pt.backends, pt.healthy = len(tbl.Backends), healthy
			wantTables[tk] = true
			poolSlot[pool.Name] = pt
			if pool.Health != nil {
				ts, err := checkTargets(x, svc, pool)
				if err != nil {
					problems = append(problems, err.Error())
				}
				checks = append(checks, ts...)
			}
		}
		svcListeners := map[dataplane.Listener]dataplane.ListenerValue{}
		for _, l := range svc.Listeners {
			pt := poolSlot[l.Pool]
			if pt == nil {
				continue // its pool failed to build: reported above
			}
			proto := protoNum[l.Protocol]
			// One entry per listener: a range is looked up as a range.
			dl := dataplane.Listener{VIP: svc.VIP, Proto: proto, Port: l.Port}
			if l.Last() > l.Port {
				dl.Last = l.Last()
			}
			svcListeners[dl] = dataplane.ListenerValue{Table: pt.slot}
		}
		if n := len(wantListeners) + len(svcListeners); n > lbListenersMax {
			problems = append(problems, fmt.Sprintf("service %s: not programmed: its %d listener entries would take the edge to %d, the data plane holds %d",
				name, len(svcListeners), n, lbListenersMax))
			continue
		}
		if vp, n := rangesOver(wantListeners, svcListeners); n > 0 {
			problems = append(problems, fmt.Sprintf("service %s: not programmed: %s would have %d port ranges, the data plane holds %d per VIP and protocol",
				name, vp, n, dataplane.LBRangesMax))
			continue
		}
		maps.Copy(wantListeners, svcListeners)
		wantVIPs[svc.VIP] = true
	}

	// Listeners, VIPs and reverse translations: add and change first, then
	// remove what is gone.
	have, err := s.maps.Listeners()
	if err != nil {
		return problems, err
	}
	for l, v := range wantListeners {
		if cur, ok := have[l]; !ok || cur != v {
			if err := s.maps.PutListener(l, v); err != nil {
				return problems, err
			}
		}
	}
	haveVIPs, err := s.maps.VIPs()
	if err != nil {
		return problems, err
	}
	for v := range wantVIPs {
		if err := s.maps.PutVIP(v); err != nil {
			return problems, err
		}
	}
	for l := range have {
		if _, ok := wantListeners[l]; !ok {
			if err := s.maps.DeleteListener(l); err != nil {
				return problems, err
			}
		}
	}
	for _, v := range haveVIPs {
		if !wantVIPs[v] {
			if err := s.maps.DeleteVIP(v); err != nil {
				return problems, err
			}
		}
	}
	for tk, pt := range s.tables {
		if !wantTables[tk] {
			if err := s.maps.DeleteTable(pt.slot); err != nil {
				return problems, err
			}
			if err := s.maps.SetTableOwner(pt.slot, 0); err != nil {
				return problems, err
			}
			s.freeTable = append(s.freeTable, pt.slot)
			delete(s.tables, tk)
		}
	}
	// A removed backend keeps its slot contents: connections it already
	// had keep reaching it (planned removal drains); the slot is reused
	// last, with a new generation that makes those entries stale.
	for bk, pb := range s.backends {
		if !wantBackends[bk] {
			s.freeBackend = append(s.freeBackend, pb.idx)
			delete(s.backends, bk)
		}
	}
	s.nat = nat
	s.targets = checks
	return problems, nil
}

// checkTargets lists the health-check targets of a pool: the backend's
// address (nat) or its guest's, reached through its host (encap), on the
// check's port, else the
// backend's, else the port of the first single-port or range listener of
// the pool.
func checkTargets(x *index, svc *model.Service, pool model.Pool) ([]health.Target, error) {
	var lport uint16
	for _, l := range svc.Listeners {
		if l.Pool == pool.Name && !l.AnyPort() {
			lport = l.Port
			break
		}
	}
	var out []health.Target
	for _, b := range pool.Backends {
		port := pool.Health.Port
		if port == 0 {
			port = b.Port
		}
		if port == 0 {
			port = lport
		}
		if port == 0 {
			return out, fmt.Errorf("service %s pool %s: the health check needs a port (the pool only has any-port listeners)", svc.Name, pool.Name)
		}
		addr := b.Address
		var tun *health.Tunnel
		if svc.Mode == model.ModeEncap {
			t, err := backendTarget(x, svc, b)
			if err != nil {
				continue // reported by sync
			}
			addr = t.Guest
			tun = &health.Tunnel{Host: t.Addr, VSID: t.VSID} // through its host (hc.go)
		}
		out = append(out, health.Target{Service: svc.Name, Pool: pool.Name, Backend: b.Key(),
			Addr: netip.AddrPortFrom(addr, port), Check: *pool.Health, Tunnel: tun})
	}
	return out, nil
}

// rangesOver finds a (VIP, protocol) that the listeners of have and add
// together give more port ranges than the data plane holds: it and the
// count, or n = 0.
func rangesOver(have, add map[dataplane.Listener]dataplane.ListenerValue) (string, int) {
	type vp struct {
		vip   netip.Addr
		proto uint8
	}
	count := map[vp]int{}
	for _, m := range []map[dataplane.Listener]dataplane.ListenerValue{have, add} {
		for l := range m {
			if l.IsRange() {
				count[vp{l.VIP, l.Proto}]++
			}
		}
	}
	for l := range add {
		if n := count[vp{l.VIP, l.Proto}]; l.IsRange() && n > dataplane.LBRangesMax {
			return fmt.Sprintf("%v protocol %d", l.VIP, l.Proto), n
		}
	}
	return "", 0
}

// tableStatus describes the programmed tables for the node status.
func (s *lbState) tableStatus() map[string]model.TableStatus {
	out := map[string]model.TableStatus{}
	for tk, pt := range s.tables {
		out[tk] = model.TableStatus{Checksum: fmt.Sprintf("%016x", pt.checksum), Backends: pt.backends, Healthy: pt.healthy, M: pt.m}
	}
	return out
}

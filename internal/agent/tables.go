package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// The agent programs its maps in three steps, like the edge's load
// balancer (internal/edge/lb.go):
//
//   - plan (planTables, pure): what the maps should hold, from the host's
//     desired state, the guests' interfaces, the live members of the edge
//     sets and each set's group slot;
//   - diff (diffTables, pure): the writes that take the maps from what
//     they hold (as booked in a heldTables, and the services as read
//     back) to the plan, in an order packets can live with: the local
//     rules and the configuration first, then the groups (a new set's
//     slot is filled before an EIP names it), EIP deletes before puts (an
//     EIP leaving a guest another EIP now takes must not remove the
//     newcomer's entry), service deletes before puts, and the slots of
//     sets gone last, once nothing names them;
//   - apply (Reconciler.applyOps): the writes through the maps'
//     interfaces, each booked only once it succeeded, so after a failure
//     the next diff redoes exactly what is missing. A counter slot taken
//     for an EIP whose write failed is freed again; an EIP or service
//     never names a group slot whose write failed.

// tablePlan is what the agent's maps should hold.
type tablePlan struct {
	config dataplane.AgentConfig
	local  map[netip.Prefix][]dataplane.LocalRule
	// groups: every set's slot and slot 0 (every set's live members).
	groups map[uint16]dataplane.AgentGroup
	// stale: the slots of sets that are gone, to be emptied.
	stale   map[string]uint16
	ifaddrs []dataplane.IfAddr
	checked []dataplane.HealthGuest
	// eips: the EIPs of guests whose interface is known (StatsIdx is
	// given by the diff: the slot the EIP holds, or a new one).
	eips map[netip.Addr]dataplane.AgentEIP
	// keep: EIPs still wanted whose guest interface is not found in this
	// pass (a tap being recreated, a route lookup that failed): an entry
	// already programmed for the same guest stays as it is, so a transient
	// lookup failure neither drops a live EIP nor resets its counters.
	keep     map[netip.Addr]dataplane.AgentEIP
	services map[svcID]dataplane.AgentService
	// waiting: the EIPs and VIPs whose replies stay on the covering
	// prefix set's group until the set serving them (the value)
	// announces them (GroupPlan.ReplySet).
	waiting map[netip.Addr]string
	// problems: what the plan leaves out, and why (reported; the slots
	// of sets gone are only emptied once there are none).
	problems []error
}

// svcID is what tells service entries apart in the reconciler (the data
// plane's key, and the backend port).
type svcID struct {
	vip, guest   netip.Addr
	proto        uint8
	vport, bport uint16
}

func idOf(s dataplane.AgentService) svcID { return svcID{s.VIP, s.Guest, s.Proto, s.VPort, s.BPort} }

// guestLink is a guest's interface.
type guestLink struct {
	ifname  string
	ifindex int
}

// planInput is everything the plan is made from.
type planInput struct {
	want  HostWant
	cfg   Config
	links map[netip.Addr]guestLink // guests whose interface is found (and attached), by IPv4 and IPv6 address
	// head: only the configuration and the local rules (what reconcile
	// writes first), not the groups or the EIPs' and services' tables.
	head  bool
	live  GroupPlan         // PlanGroups
	slots map[string]uint16 // each set's slot (assignSlots), sets gone included
	// now: the drains of want whose Until is not after now are left out
	// (removed, as an unbind would).
	now time.Time
}

// planTables computes what the maps should hold.
func planTables(in planInput) tablePlan {
	w := in.want
	eips := len(w.EIPs) + len(w.Drains)
	if in.head {
		eips = 0 // a head plan holds no EIP
	}
	p := tablePlan{groups: map[uint16]dataplane.AgentGroup{}, stale: map[string]uint16{},
		eips: make(map[netip.Addr]dataplane.AgentEIP, eips), keep: map[netip.Addr]dataplane.AgentEIP{}, services: map[svcID]dataplane.AgentService{},
		waiting: map[netip.Addr]string{}}
	local, err := PlanLocal(in.cfg.LocalAllow)
	if err == nil {
		err = CheckLocalAllow(in.cfg.LocalAllow, w)
	}
	if err != nil {
		p.problems = append(p.problems, err) // a refused setting: guests reach nothing of the host
		local = nil
	}
	if local == nil {
		local = map[netip.Prefix][]dataplane.LocalRule{}
	}
	p.local = local
	// The source of ICMP errors to IPv4 guests: the IPv4 underlay
	// address; a host of the IPv6 underlay has none (its IPv4 guests'
	// packets too big for the tunnel are dropped, drop_too_big).
	icmpSrc := w.Underlay
	if !icmpSrc.Is4() {
		icmpSrc = netip.Addr{}
	}
	// Of ICMPv6 errors to IPv6 guests (packet too big for the tunnel):
	// --icmp-source6, else the IPv6 underlay address; a host of the IPv4
	// underlay without --icmp-source6 sends none (drop_too_big).
	icmpSrc6 := in.cfg.ICMPSource6
	if !icmpSrc6.IsValid() && w.Underlay.Is6() {
		icmpSrc6 = w.Underlay
	}
	p.config = dataplane.AgentConfig{Underlay: w.Underlay, ICMPSource: icmpSrc, ICMPSource6: icmpSrc6, HashSeed: in.cfg.HashSeed,
		Edges: w.Edges, ICMPRate: in.cfg.ICMPRate, ICMPBurst: in.cfg.ICMPBurst, GatewayMAC: dataplane.GatewayMAC}
	if in.head {
		return p
	}

	for _, name := range sortedNames(w.Sets) {
		slot := in.slots[name]
		if slot == 0 {
			p.problems = append(p.problems, fmt.Errorf("edge set %s: no edge group left (the data plane holds %d): its addresses' replies go to group 0", name, dataplane.AgentGroupMax-1))
			continue
		}
		p.groups[slot] = dataplane.AgentGroup{Set: name, Members: in.live.Sets[name]}
	}
	p.groups[0] = dataplane.AgentGroup{Members: in.live.All}
	for name, slot := range in.slots {
		if _, ok := w.Sets[name]; !ok {
			p.stale[name] = slot
		}
	}
	groupOf := func(a netip.Addr, set, covering string) uint16 {
		reply, waiting := in.live.ReplySet(a, set, covering)
		if waiting {
			p.waiting[a] = set
		}
		return slotOf(in.slots, reply, set)
	}

	for addr, gl := range in.links {
		if !addr.Is4() {
			continue // agent_ifaddrs is IPv4's (the IPv6 guest path does not consult it)
		}
		p.ifaddrs = append(p.ifaddrs, dataplane.IfAddr{Ifindex: uint32(gl.ifindex), Addr: addr})
	}
	sort.Slice(p.ifaddrs, func(i, j int) bool { return p.ifaddrs[i].Addr.Less(p.ifaddrs[j].Addr) })
	// The checked ports of the encap backends among the guests: what an
	// edge's health check may reach through the tunnel, and nothing else
	// (bpf/lib/agenthc.h).
	for _, c := range w.Checked {
		if gl, ok := in.links[c.Guest]; ok {
			if c.Guest.Is6() {
				// Its answers must come from its interface (the flow's).
				c.Ifindex = uint32(gl.ifindex)
			}
			p.checked = append(p.checked, c)
		}
	}
	addEIP := func(a netip.Addr, e Want) {
		gl, ok := in.links[e.Private]
		if !ok {
			// Its guest's interface is not found: reported, and an entry
			// already programmed for this guest is kept (diffTables).
			p.keep[a] = dataplane.AgentEIP{EIP: a, Private: e.Private, VSID: e.VSID}
			return
		}
		p.eips[a] = dataplane.AgentEIP{EIP: a, Private: e.Private, VSID: e.VSID, Ifindex: uint32(gl.ifindex), Service: e.Service,
			Group: groupOf(a, e.Set, e.Covering)}
	}
	for a, e := range w.EIPs {
		addEIP(a, e)
	}
	// A drain is programmed as the binding it was (the same entry: an EIP
	// that was bound here keeps its counter slot) while it is active.
	for a, e := range w.Drains {
		if _, live := w.EIPs[a]; live || !in.now.Before(e.Until) {
			continue
		}
		addEIP(a, e)
	}
	for _, pr := range w.Problems {
		p.problems = append(p.problems, fmt.Errorf("%s", pr))
	}
	for _, s := range w.Services {
		gl, ok := in.links[s.Guest]
		if !ok {
			continue // reported
		}
		if s.VIP.Is6() {
			// The guest's interface: its flows' replies must come from it.
			s.Ifindex = uint32(gl.ifindex)
		}
		s.Group = groupOf(s.VIP, w.VIPSets[s.VIP], w.VIPCovering[s.VIP])
		p.services[idOf(s)] = s
	}
	return p
}

// assignSlots gives every set a group slot: the one it holds, else the
// lowest one no set holds. The slots of sets gone are kept (until their
// group is emptied: diffTables). A set that finds no slot is left out
// (planTables reports it).
func assignSlots(sets []string, cur map[string]uint16) map[string]uint16 {
	out := make(map[string]uint16, len(cur)+len(sets))
	used := map[uint16]bool{}
	for s, slot := range cur {
		out[s] = slot
		used[slot] = true
	}
	next := uint16(1)
	for _, s := range sets {
		if _, ok := out[s]; ok {
			continue
		}
		for next < dataplane.AgentGroupMax && used[next] {
			next++
		}
		if next >= dataplane.AgentGroupMax {
			continue
		}
		out[s], used[next] = next, true
	}
	return out
}

// slotOf is the slot of reply, the set whose group gets an address's
// replies (GroupPlan.ReplySet), else of set, the one serving it (0: no
// set, or the set has no slot).
func slotOf(slots map[string]uint16, reply, set string) uint16 {
	if slot, ok := slots[reply]; ok && reply != "" {
		return slot
	}
	if set == "" {
		return 0
	}
	return slots[set]
}

// opKind is one kind of write.
type opKind uint8

const (
	opLocal         opKind = iota // SetLocalAllow (the whole table)
	opConfig                      // SetConfig
	opGroup                       // SetGroup of a set's slot or slot 0
	opIfAddrs                     // SetIfAddrs (the whole table)
	opChecked                     // SetHealthGuests (the whole table)
	opDeleteEIP                   // DeleteEIP
	opPutEIP                      // PutEIP (a new EIP takes a counter slot first)
	opDeleteService               // DeleteService
	opPutService                  // PutService
	opClearGroup                  // SetGroup with an empty group: a set gone
)

var opNames = [...]string{"SetLocalAllow", "SetConfig", "SetGroup", "SetIfAddrs", "SetHealthGuests", "DeleteEIP", "PutEIP",
	"DeleteService", "PutService", "ClearGroup"}

func (k opKind) String() string { return opNames[k] }

// op is one write.
type op struct {
	kind  opKind
	key   string // whole-table writes: what they write, as booked
	slot  uint16
	set   string // opClearGroup: the set gone
	group dataplane.AgentGroup
	eip   dataplane.AgentEIP
	alloc bool // opPutEIP: a new EIP, which takes a counter slot
	svc   dataplane.AgentService
	plan  *tablePlan // whole-table writes write from it
}

// heldTables is what the reconciler booked as written.
type heldTables struct {
	whole      map[opKind]string // the whole tables' contents as last written (absent: unknown)
	groups     map[uint16]dataplane.AgentGroup
	programmed map[netip.Addr]dataplane.AgentEIP
	dirty      map[netip.Addr]bool // EIPs whose last write failed: written again
}

// wholeKey is how a whole table's content is compared.
func wholeKey(v any) string { return fmt.Sprint(v) }

// appendWhole appends to ops the write of whole table k (v, from p) if
// it differs from what held booked.
func appendWhole(ops []op, p *tablePlan, held heldTables, k opKind, v any) []op {
	if key, cur := wholeKey(v), held.whole; !hasKey(cur, k) || cur[k] != key {
		ops = append(ops, op{kind: k, key: key, plan: p})
	}
	return ops
}

// diffTables lists the writes from held (and the services read back,
// nil: unknown, none written) to p.
func diffTables(p *tablePlan, held heldTables, have []dataplane.AgentService, haveKnown bool) []op {
	// Room for the puts of the EIPs not programmed yet (all of them on a
	// first load: the slice no longer grows step by step) and a few more.
	ops := make([]op, 0, max(len(p.eips)-len(held.programmed), 0)+8)
	whole := func(k opKind, v any) { ops = appendWhole(ops, p, held, k, v) }
	whole(opLocal, p.local)
	whole(opConfig, p.config)
	slots := make([]uint16, 0, len(p.groups))
	for s := range p.groups {
		slots = append(slots, s)
	}
	// Sets' slots first (in slot order), slot 0 last.
	sort.Slice(slots, func(i, j int) bool { return slots[i] != 0 && (slots[j] == 0 || slots[i] < slots[j]) })
	for _, s := range slots {
		g := p.groups[s]
		if cur, ok := held.groups[s]; ok && cur.Set == g.Set && slices.Equal(cur.Members, g.Members) {
			continue
		}
		ops = append(ops, op{kind: opGroup, slot: s, group: g})
	}
	whole(opIfAddrs, p.ifaddrs)
	whole(opChecked, p.checked)
	for _, a := range sortedAddrs(held.programmed) {
		if _, ok := p.eips[a]; !ok && !p.keeps(held.programmed[a]) {
			ops = append(ops, op{kind: opDeleteEIP, eip: held.programmed[a]})
		}
	}
	for _, a := range sortedAddrs(p.eips) {
		next := p.eips[a]
		cur, had := held.programmed[a]
		next.StatsIdx = cur.StatsIdx
		if had && cur == next && !held.dirty[a] {
			continue
		}
		ops = append(ops, op{kind: opPutEIP, eip: next, alloc: !had})
	}
	if haveKnown {
		wanted := maps.Clone(p.services)
		for _, s := range have {
			id := idOf(s)
			if w, ok := wanted[id]; ok {
				if w == s {
					delete(wanted, id)
				}
				continue
			}
			ops = append(ops, op{kind: opDeleteService, svc: s})
		}
		for _, id := range sortedSvcs(wanted) {
			ops = append(ops, op{kind: opPutService, svc: wanted[id]})
		}
	}
	for _, name := range sortedNames(p.stale) {
		ops = append(ops, op{kind: opClearGroup, slot: p.stale[name], set: name})
	}
	return ops
}

// keeps reports whether the programmed entry cur stays although the plan
// has no entry for it: its EIP is still wanted for the same guest, whose
// interface was not found in this pass, and the group slot it names is
// still planned (never one of a set that is gone).
func (p *tablePlan) keeps(cur dataplane.AgentEIP) bool {
	k, ok := p.keep[cur.EIP]
	if !ok || k.Private != cur.Private || k.VSID != cur.VSID {
		return false
	}
	_, planned := p.groups[cur.Group]
	return planned
}

func hasKey[K comparable, V any](m map[K]V, k K) bool { _, ok := m[k]; return ok }

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

func sortedSvcs(m map[svcID]dataplane.AgentService) []svcID {
	out := make([]svcID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if c := a.vip.Compare(b.vip); c != 0 {
			return c < 0
		}
		if c := a.guest.Compare(b.guest); c != 0 {
			return c < 0
		}
		if a.proto != b.proto {
			return a.proto < b.proto
		}
		if a.vport != b.vport {
			return a.vport < b.vport
		}
		return a.bport < b.bport
	})
	return out
}

// applyOps makes the writes and books those that succeeded; a failure is
// reported and the rest goes on, except that nothing follows a failed
// configuration write and the slots of sets gone are emptied only when
// nothing failed (an EIP or service may still name them).
func (r *Reconciler) applyOps(ops []op) {
	if len(r.programmed) == 0 {
		// A first load programs every EIP: the map is made for them at
		// once, not grown (and rehashed) step by step.
		n := 0
		for _, o := range ops {
			if o.kind == opPutEIP {
				n++
			}
		}
		if n > 0 {
			r.programmed = make(map[netip.Addr]dataplane.AgentEIP, n)
		}
	}
	for _, o := range ops {
		if o.kind == opClearGroup && len(r.errs) > 0 {
			return
		}
		if err := r.write(o); err != nil {
			r.fail(err)
			if o.kind == opConfig {
				return
			}
		}
	}
}

// write makes one write and books it.
func (r *Reconciler) write(o op) error {
	switch o.kind {
	case opLocal, opConfig, opIfAddrs, opChecked:
		delete(r.whole, o.kind) // unknown until the write succeeds
		var err error
		switch o.kind {
		case opLocal:
			if err = r.maps.SetLocalAllow(o.plan.local); err != nil {
				err = fmt.Errorf("local prefixes: %w", err)
			}
		case opConfig:
			if err = r.maps.SetConfig(o.plan.config); err == nil {
				r.links.KeepResolved("edges", o.plan.config.Edges)
				r.log.Info("agent configured", "underlay", o.plan.config.Underlay, "edges", o.plan.config.Edges)
				if o.plan.config.Underlay.Is6() {
					// The IPv6 underlay's outer lookups need IPv6
					// forwarding on the underlay and guest interfaces.
					if off := dataplane.Forwarding6Off(append([]string{r.cfg.Underlay}, sortedKeys(r.guestIfs)...)); len(off) > 0 {
						r.log.Warn(dataplane.Forwarding6Hint(off))
					}
				}
			}
		case opIfAddrs:
			err = r.maps.SetIfAddrs(o.plan.ifaddrs)
		case opChecked:
			if hg, ok := r.maps.(dataplane.HealthGuests); ok { // a data plane without has nothing to write
				err = hg.SetHealthGuests(o.plan.checked)
			}
		}
		if err != nil {
			return err
		}
		r.whole[o.kind] = o.key
	case opGroup, opClearGroup:
		delete(r.groups, o.slot) // unknown until the write succeeds
		if err := r.maps.SetGroup(o.slot, o.group); err != nil {
			return err
		}
		if o.kind == opClearGroup {
			delete(r.groupSlot, o.set)
			return nil
		}
		r.groups[o.slot] = o.group
		r.log.Info("edge group written", "slot", o.slot, "set", o.group.Set, "members", o.group.Members)
	case opDeleteEIP:
		if err := r.maps.DeleteEIP(o.eip.EIP); err != nil {
			return err
		}
		r.free = append(r.free, o.eip.StatsIdx)
		delete(r.programmed, o.eip.EIP)
		delete(r.dirty, o.eip.EIP)
	case opPutEIP:
		e := o.eip
		if err := r.groupWritten(e.Group); err != nil {
			return fmt.Errorf("EIP %v: %w", e.EIP, err)
		}
		if o.alloc {
			idx, err := r.alloc()
			if err != nil {
				return fmt.Errorf("EIP %v: counter slot: %w", e.EIP, err)
			}
			e.StatsIdx = idx
		}
		if err := r.maps.PutEIP(e); err != nil {
			if o.alloc {
				r.free = append(r.free, e.StatsIdx) // not leaked: the EIP takes one again next time
			} else {
				r.dirty[e.EIP] = true // what its entries hold is not known
			}
			return err
		}
		r.programmed[e.EIP] = e
		delete(r.dirty, e.EIP)
	case opDeleteService:
		return r.maps.DeleteService(o.svc)
	case opPutService:
		if err := r.groupWritten(o.svc.Group); err != nil {
			return fmt.Errorf("service %v -> %v: %w", o.svc.VIP, o.svc.Guest, err)
		}
		return r.maps.PutService(o.svc)
	}
	return nil
}

// groupWritten refuses to name a set's slot whose group is not booked as
// written: the entry would send replies to an empty slot (or another
// set's). It waits for the next try, the entry it replaces staying.
func (r *Reconciler) groupWritten(slot uint16) error {
	if _, ok := r.groups[slot]; !ok {
		return fmt.Errorf("edge group %d not written yet", slot)
	}
	return nil
}

// alloc takes a counter slot for a new EIP and zeroes it (a slot that
// cannot be zeroed goes back to the free ones).
func (r *Reconciler) alloc() (uint32, error) {
	var idx uint32
	if n := len(r.free); n > 0 {
		idx, r.free = r.free[n-1], r.free[:n-1]
	} else {
		idx = r.next
		r.next++
	}
	if err := r.maps.ResetEIPStats(idx); err != nil {
		r.free = append(r.free, idx)
		return 0, err
	}
	return idx, nil
}

// held is what the reconciler booked (for diffTables).
func (r *Reconciler) held() heldTables {
	return heldTables{whole: r.whole, groups: r.groups, programmed: r.programmed, dirty: r.dirty}
}

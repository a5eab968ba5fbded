// Package placement says which scopes of the partitioned store hold a copy
// of each object (store/scope.go): the edge set scopes "set/NAME" whose
// edges carry it and the host scopes "host/NAME" whose agent needs it. It
// is pure: the controller computes the copies a write adds and removes
// (Take before and after, then Diff), the migration and the tests the
// copies of a whole state (All).
//
// What goes where (docs/scale.md "Scopes"):
//   - an EIP: every set among setplan's Carriers of its address, and the
//     host it is bound to and, while it drains there after a move
//     (EIP.Previous), the host it was bound to;
//   - a service: the Carriers of its VIP, and every host with a backend;
//   - a service's Health: the Carriers of its service's VIP;
//   - a host: its own scope only;
//   - a guest of a host, as a model.GuestCopy (the host's underlay and the
//     guest, ~150 bytes, derived from the host; no object of the State):
//     every set carrying an EIP bound to it or a service with a backend on
//     it. A set's edges route with these, so a set's share holds the
//     guests it routes to, not whole hosts with every guest they run (a
//     host of 1,000 guests is ~52 kB; an edge of a 100,000-EIP set held
//     48 MB of hosts before, for 100,000 guests it needed).
//   - every other kind is read whole by the nodes that need it
//     (EdgeKinds, AgentKinds) and has no copies.
//
// Carriers are computed per address from the sets and that address's own
// pull-out and quarantine, so the scopes of one object cost O(sets) (a
// guest's O(its services)), never O(region).
//
// A write of the controller (the changed objects, in one commit):
//
//	before, err := placement.Take(st, changed)
//	// apply the change to st
//	after, err := placement.Take(st, changed, before)
//	ops := placement.Diff(before, after, changed)
//
// ops are the puts of copies, then (from the first op with a nil Value)
// the deletes: the commit writes the puts, then the primary ops, then the
// deletes. The state after the commit then has exactly the copies AllOps
// lists for it.
package placement

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// Ref names an object.
type Ref struct{ Kind, Key string }

// SetScope is the scope of an edge set's edges.
func SetScope(set string) string { return "set/" + set }

// HostScope is the scope of a host's agent.
func HostScope(host string) string { return "host/" + host }

// Scoped are the kinds that have copies in scopes.
var Scoped = []string{model.KindHost, model.KindEIP, model.KindService, model.KindHealth, model.KindGuestCopy}

// EdgeKinds are the kinds an edge reads whole; AgentKinds an agent's.
var (
	EdgeKinds  = []string{model.KindAZ, model.KindEdgeSet, model.KindQuarantine, model.KindFirewallRule, model.KindBandwidthPackage}
	AgentKinds = []string{model.KindAZ, model.KindEdgeSet, model.KindQuarantine, model.KindBandwidthPackage}
)

// EdgeScope is what an edge of set follows ("": an edge in no set).
func EdgeScope(set string) store.Scope {
	sc := store.Scope{Kinds: EdgeKinds}
	if set != "" {
		sc.Name = SetScope(set)
	}
	return sc
}

// AgentScope is what the agent of host follows.
func AgentScope(host string) store.Scope {
	return store.Scope{Name: HostScope(host), Kinds: AgentKinds}
}

// Snapshot holds the scopes (sorted) and the encoded values of objects in
// one state; an object absent from the state, or in none of its scopes,
// has neither. A snapshot of Take holds the objects it was taken for
// only (and knows which: Diff refuses to compare an object one snapshot
// holds with one the other was not taken for); one of All holds every
// object. The slices are shared: read them, never change them.
type Snapshot struct {
	Scopes map[Ref][]string
	Values map[Ref][]byte

	// refs are the objects a Take computed (absent or not); nil: every
	// object of the state (All, or a snapshot built by hand).
	refs map[Ref]bool
}

// holds says whether the snapshot knows r's scopes (none if absent).
func (s Snapshot) holds(r Ref) bool { return s.refs == nil || s.refs[r] }

// Refs lists, sorted, the objects the snapshot was taken for (nil for a
// snapshot of the whole state).
func (s Snapshot) Refs() []Ref {
	if s.refs == nil {
		return nil
	}
	out := make([]Ref, 0, len(s.refs))
	for r := range s.refs {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRef)
	return out
}

func compareRef(a, b Ref) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// placer computes scopes in one state, caching the scope names (All
// computes millions of them from a few sets and hosts).
type placer struct {
	st    *model.State
	sets  map[string]string // set name -> SetScope
	hosts map[string]string // host name -> HostScope
	// shared interns the scope lists of EIPs: most share one of a few.
	shared map[eipScopes][]string
}

type eipScopes struct {
	carriers [3]string
	host     string
	previous string // the host of e.Previous: its agent drains the EIP
}

func newPlacer(st *model.State) *placer {
	return &placer{st: st, sets: map[string]string{}, hosts: map[string]string{}}
}

func (p *placer) setScope(name string) string {
	s, ok := p.sets[name]
	if !ok {
		s = SetScope(name)
		p.sets[name] = s
	}
	return s
}

func (p *placer) hostScope(name string) string {
	s, ok := p.hosts[name]
	if !ok {
		s = HostScope(name)
		p.hosts[name] = s
	}
	return s
}

// carriers returns setplan's Carriers of address a (key: its string, e:
// the EIP at a if the caller has it), computed from the
// sets and what concerns a alone (O(sets), not O(region)): its pull-out
// (the EIP's or the service's set, the service's winning as in
// setplan.FromState) and its quarantine.
func (p *placer) carriers(a netip.Addr, key string, e *model.EIP) [3]string {
	in := setplan.Input{Sets: p.st.EdgeSets}
	pulled := ""
	if e == nil {
		e = p.st.EIPs[key]
	}
	if e != nil && e.Set != "" {
		pulled = e.Set
	}
	if name, ok := p.st.ServiceOfVIP(a); ok {
		if v, ok := p.st.Services[name]; ok && v.Set != "" {
			pulled = v.Set
		}
	}
	if pulled != "" {
		in.PulledOut = map[netip.Addr]string{a: pulled}
	}
	if _, ok := p.st.Quarantines[key]; ok {
		in.Quarantined = map[netip.Addr]bool{a: true}
	}
	return in.Carriers(a)
}

// appendSets appends the set scopes of carriers c.
func (p *placer) appendSets(out []string, c [3]string) []string {
	for _, s := range c {
		if s != "" {
			out = append(out, p.setScope(s))
		}
	}
	return out
}

// eip returns the scopes of e (sorted, deduplicated).
func (p *placer) eip(key string, e *model.EIP) []string {
	k := eipScopes{carriers: p.carriers(e.Address, key, e)}
	if e.Binding != nil {
		k.host = e.Binding.Host
	}
	if e.Previous != nil && e.Previous.Host != k.host {
		k.previous = e.Previous.Host
	}
	if p.shared != nil {
		if s, ok := p.shared[k]; ok {
			return s
		}
	}
	out := p.appendSets(make([]string, 0, 4), k.carriers)
	if k.host != "" {
		out = append(out, p.hostScope(k.host))
	}
	if k.previous != "" {
		out = append(out, p.hostScope(k.previous))
	}
	out = sortScopes(out)
	if p.shared != nil {
		p.shared[k] = out
	}
	return out
}

// serviceSets returns the set scopes of v (sorted, deduplicated).
func (p *placer) serviceSets(v *model.Service) []string {
	return sortScopes(p.appendSets(nil, p.carriers(v.VIP, v.VIP.String(), nil)))
}

// service returns the scopes of v: its sets and its backends' hosts.
func (p *placer) service(v *model.Service) []string {
	out := p.serviceSets(v)
	for _, pool := range v.Pools {
		for _, b := range pool.Backends {
			if b.Host != "" {
				out = append(out, p.hostScope(b.Host))
			}
		}
	}
	return sortScopes(out)
}

// guest returns the scopes of the copy of host h's guest g: the sets of
// the EIPs bound to it (an IPv4 and an IPv6 one at most, each with its
// own sets) and of the services it backs; eipSets and svcSets give the
// set scopes of an EIP and of a service by key.
func (p *placer) guest(h, g string, eipSets, svcSets func(string) []string) []string {
	var out []string
	v4, v6 := p.st.BoundEIPs(h, g)
	for _, key := range [2]string{v4, v6} {
		if key != "" {
			out = append(out, eipSets(key)...)
		}
	}
	for _, svc := range p.st.BackendOf(h, g) {
		out = append(out, svcSets(svc)...)
	}
	return sortScopes(out)
}

// guestOf finds the host and the guest a guest copy's key names.
func guestOf(st *model.State, key string) (*model.Host, model.Guest, bool) {
	hn, gn, ok := model.SplitGuestCopyKey(key)
	if !ok {
		return nil, model.Guest{}, false
	}
	h, ok := st.Hosts[hn]
	if !ok {
		return nil, model.Guest{}, false
	}
	g, ok := h.Guest(gn)
	return h, g, ok
}

// object returns the value copied for r: the object, or for a guest copy
// the copy derived from its host.
func object(st *model.State, r Ref) (model.Object, bool) {
	if r.Kind == model.KindGuestCopy {
		h, g, ok := guestOf(st, r.Key)
		if !ok {
			return nil, false
		}
		return model.NewGuestCopy(h, g), true
	}
	return st.Get(r.Kind, r.Key)
}

// eipSetsOf and serviceSetsOf compute an object's set scopes afresh.
func (p *placer) eipSetsOf(key string) []string {
	e, ok := p.st.EIPs[key]
	if !ok {
		return nil
	}
	return sortScopes(p.appendSets(nil, p.carriers(e.Address, key, e)))
}

func (p *placer) serviceSetsOf(name string) []string {
	v, ok := p.st.Services[name]
	if !ok {
		return nil
	}
	return p.serviceSets(v)
}

// of returns the scopes of r.
func (p *placer) of(r Ref) []string {
	st := p.st
	switch r.Kind {
	case model.KindEIP:
		if e, ok := st.EIPs[r.Key]; ok {
			return p.eip(r.Key, e)
		}
	case model.KindService:
		if v, ok := st.Services[r.Key]; ok {
			return p.service(v)
		}
	case model.KindHealth:
		if _, ok := st.Health[r.Key]; ok {
			return p.serviceSetsOf(r.Key)
		}
	case model.KindHost:
		if _, ok := st.Hosts[r.Key]; ok {
			return []string{p.hostScope(r.Key)}
		}
	case model.KindGuestCopy:
		if h, g, ok := guestOf(st, r.Key); ok {
			return p.guest(h.Name, g.Name, p.eipSetsOf, p.serviceSetsOf)
		}
	}
	return nil
}

// sortScopes sorts and deduplicates scopes in place (nil if empty).
func sortScopes(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// Of returns the scopes holding a copy of r in st, sorted (nil: r is
// absent, in no scope, or of a kind without copies). It costs O(sets) for
// an EIP, a service or a health, O(the guest's services) for a guest copy
// (and a search of its host's guests): never O(region).
func Of(st *model.State, r Ref) []string {
	return newPlacer(st).of(r)
}

// Affected returns changed and every object whose scopes a change of
// those may change, in st, deduplicated and sorted: the copy of the guest
// an EIP is bound to; the copies of a service's backends' guests, its
// health and the EIP at its VIP; a quarantined address's EIP or service
// (and theirs); the copies of a host's guests; every scoped object for an
// edge set. The controller takes it in the state before a
// change and in the one after (Take), so an object related to a changed
// one on either side is recomputed.
func Affected(st *model.State, changed []Ref) []Ref {
	set := map[Ref]bool{}
	add := func(r Ref) { set[r] = true }
	var eip, service func(key string)
	eip = func(key string) {
		add(Ref{model.KindEIP, key})
		e, ok := st.EIPs[key]
		if !ok {
			return
		}
		if e.Binding != nil {
			add(Ref{model.KindGuestCopy, model.GuestCopyKey(e.Binding.Host, e.Binding.Guest)})
		}
		// Never both in a valid state; the scopes of either follow the
		// other's pull-out if they were.
		if name, ok := st.ServiceOfVIP(e.Address); ok && !set[Ref{model.KindService, name}] {
			service(name)
		}
	}
	service = func(name string) {
		add(Ref{model.KindService, name})
		add(Ref{model.KindHealth, name})
		v, ok := st.Services[name]
		if !ok {
			return
		}
		for _, pool := range v.Pools {
			for _, b := range pool.Backends {
				if b.Host != "" && b.Guest != "" {
					add(Ref{model.KindGuestCopy, model.GuestCopyKey(b.Host, b.Guest)})
				}
			}
		}
		if key := v.VIP.String(); !set[Ref{model.KindEIP, key}] {
			if _, ok := st.EIPs[key]; ok {
				eip(key)
			}
		}
	}
	whole := false
	for _, r := range changed {
		add(r)
		switch r.Kind {
		case model.KindEIP:
			eip(r.Key)
		case model.KindService:
			service(r.Key)
		case model.KindQuarantine:
			if _, ok := st.EIPs[r.Key]; ok {
				eip(r.Key)
			}
			if a, err := netip.ParseAddr(r.Key); err == nil {
				if name, ok := st.ServiceOfVIP(a); ok {
					service(name)
				}
			}
		case model.KindHost:
			// Its guests' copies: their value (the underlay, a
			// guest's address or VSID) or their presence.
			if h, ok := st.Hosts[r.Key]; ok {
				for _, g := range h.Guests {
					add(Ref{model.KindGuestCopy, model.GuestCopyKey(h.Name, g.Name)})
				}
			}
		case model.KindEdgeSet:
			// Which sets carry what: every scoped object (set changes
			// are rare).
			whole = true
		}
		// Health: itself only. AZs, firewall rules, bandwidth
		// packages, DNS zones and GSLB records change no object's
		// scopes.
	}
	if whole {
		for key := range st.EIPs {
			add(Ref{model.KindEIP, key})
		}
		for name := range st.Services {
			add(Ref{model.KindService, name})
		}
		for name := range st.Health {
			add(Ref{model.KindHealth, name})
		}
		for name, h := range st.Hosts {
			// A host's own scope does not depend on the sets.
			for _, g := range h.Guests {
				add(Ref{model.KindGuestCopy, model.GuestCopyKey(name, g.Name)})
			}
		}
	}
	out := make([]Ref, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRef)
	return out
}

// Take returns the scopes and values of the objects Affected by changed
// in st, and of those also was taken for. The controller takes the state
// before a change, applies it, and takes the state after it passing the
// first snapshot as also, so both hold the same objects (the guest an EIP
// was unbound from is related to it in the state before only); Diff then
// gives the copies to write.
func Take(st *model.State, changed []Ref, also ...Snapshot) (Snapshot, error) {
	refs := Affected(st, changed)
	for _, a := range also {
		if a.refs == nil {
			for r := range a.Scopes {
				refs = append(refs, r)
			}
			continue
		}
		for r := range a.refs {
			refs = append(refs, r)
		}
	}
	return take(st, refs, changed)
}

// Related is a snapshot of the objects Affected by changed in st, without
// their scopes, to pass to Take as also. The controller takes it in the
// state after a change, so that its Take of the state before holds them
// too: an object only the snapshot after a change holds (the guest an EIP
// is bound to by the change) is put in every one of its scopes by Diff,
// which rewrote a 1,000-guest host into every set holding it on every
// rebind (52 kB to every edge of the region) when sets held whole hosts.
func Related(st *model.State, changed []Ref) Snapshot {
	refs := Affected(st, changed)
	snap := Snapshot{refs: make(map[Ref]bool, len(refs))}
	for _, r := range refs {
		snap.refs[r] = true
	}
	return snap
}

// take computes the snapshot of refs; values are encoded for the objects
// in a scope and those in changed.
func take(st *model.State, refs, changed []Ref) (Snapshot, error) {
	ch := refSet(changed)
	p := newPlacer(st)
	p.shared = map[eipScopes][]string{}
	snap := Snapshot{Scopes: map[Ref][]string{}, Values: map[Ref][]byte{}, refs: make(map[Ref]bool, len(refs))}
	for _, r := range refs {
		if snap.refs[r] {
			continue
		}
		snap.refs[r] = true
		sc := p.of(r)
		if len(sc) > 0 {
			snap.Scopes[r] = sc
		}
		if len(sc) == 0 && !ch[r] {
			continue
		}
		o, ok := object(st, r)
		if !ok {
			continue
		}
		b, err := store.Encode(o)
		if err != nil {
			return Snapshot{}, fmt.Errorf("placement: encoding %s %s: %w", r.Kind, r.Key, err)
		}
		snap.Values[r] = b
	}
	return snap, nil
}

func refSet(rs []Ref) map[Ref]bool {
	m := make(map[Ref]bool, len(rs))
	for _, r := range rs {
		m[r] = true
	}
	return m
}

// Diff returns the copy ops (Op.Scope set) that turn the copies of before
// into those of after: a put in every scope an object enters, and in every
// scope of an object whose value changed (in changed, or encoded
// differently); a delete (Value nil) in every scope it leaves. The puts
// come first, then the deletes, each sorted by scope, kind and key: the
// caller puts the primary ops between them, so a commit split into several
// transactions never leaves an object in no scope (a prefix moving from
// set A to B gets B's copies before it loses A's).
//
// after must hold every object before holds (Take the after state with
// the before snapshot as also); Diff panics on an object only before
// holds, as it cannot know its copies after the change. An object only
// after holds (the guest an EIP was bound to by the change) was related to no
// changed object before it, so its scopes then were a subset of its scopes
// now, and it is put in all of them.
func Diff(before, after Snapshot, changed []Ref) []store.Op {
	ch := refSet(changed)
	refs := map[Ref]bool{}
	for r := range before.Scopes {
		refs[r] = true
	}
	for r := range after.Scopes {
		refs[r] = true
	}
	var puts, dels []store.Op
	for r := range refs {
		if !after.holds(r) {
			panic(fmt.Sprintf("placement.Diff: %s %s is in the snapshot before the change only: take the state after it with the one before as also", r.Kind, r.Key))
		}
		was, now := before.Scopes[r], after.Scopes[r]
		changedValue := ch[r] || !before.holds(r) || !bytes.Equal(before.Values[r], after.Values[r])
		for _, s := range now {
			if changedValue || !slices.Contains(was, s) {
				puts = append(puts, store.Op{Scope: s, Kind: r.Kind, Key: r.Key, Value: after.Values[r]})
			}
		}
		for _, s := range was {
			if !slices.Contains(now, s) {
				dels = append(dels, store.Op{Scope: s, Kind: r.Kind, Key: r.Key})
			}
		}
	}
	sortOps(puts)
	sortOps(dels)
	return append(puts, dels...)
}

func sortOps(ops []store.Op) {
	slices.SortFunc(ops, func(a, b store.Op) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Key, b.Key))
	})
}

// All returns the scopes and values of every object of st in a scope: what
// a migration writes, and what the copies of a state written straight into
// the store are.
func All(st *model.State) (Snapshot, error) {
	n := st.Len(model.KindEIP) + st.Len(model.KindService) + st.Len(model.KindHealth) + st.Len(model.KindHost)
	n += st.Len(model.KindEIP) // the guests bound (their copies; fewer when a guest holds two)
	snap := Snapshot{Scopes: make(map[Ref][]string, n), Values: make(map[Ref][]byte, n)}
	err := each(st, func(r Ref, sc []string, b []byte) {
		snap.Scopes[r], snap.Values[r] = sc, b
	})
	if err != nil {
		return Snapshot{}, err
	}
	return snap, nil
}

// AllOps returns a put for every copy of st (All), sorted by scope, kind
// and key.
func AllOps(st *model.State) ([]store.Op, error) {
	ops := make([]store.Op, 0, 2*st.Len(model.KindEIP)+st.Len(model.KindHost))
	err := each(st, func(r Ref, sc []string, b []byte) {
		for _, s := range sc {
			ops = append(ops, store.Op{Scope: s, Kind: r.Kind, Key: r.Key, Value: b})
		}
	})
	if err != nil {
		return nil, err
	}
	sortOps(ops)
	return ops, nil
}

// each calls f with the scopes and the value of every object of st in a
// scope. It computes each address's carriers from its own pull-out and
// quarantine (never setplan.FromState per object) and shares the scope
// lists: a million EIPs have a few distinct ones.
func each(st *model.State, f func(r Ref, sc []string, value []byte)) error {
	p := newPlacer(st)
	p.shared = map[eipScopes][]string{}
	sets := map[[3]string][]string{}
	eipSets := func(key string) []string {
		e, ok := st.EIPs[key]
		if !ok {
			return nil
		}
		c := p.carriers(e.Address, key, e)
		s, ok := sets[c]
		if !ok {
			s = sortScopes(p.appendSets(nil, c))
			sets[c] = s
		}
		return s
	}
	svcSets := map[string][]string{}
	serviceSets := func(name string) []string {
		s, ok := svcSets[name]
		if !ok {
			s = p.serviceSetsOf(name)
			svcSets[name] = s
		}
		return s
	}
	emit := func(r Ref, sc []string, o model.Object) error {
		if len(sc) == 0 {
			return nil
		}
		b, err := store.Encode(o)
		if err != nil {
			return fmt.Errorf("placement: encoding %s %s: %w", r.Kind, r.Key, err)
		}
		f(r, sc, b)
		return nil
	}
	for key, e := range st.EIPs {
		if err := emit(Ref{model.KindEIP, key}, p.eip(key, e), e); err != nil {
			return err
		}
	}
	for name, v := range st.Services {
		if err := emit(Ref{model.KindService, name}, p.service(v), v); err != nil {
			return err
		}
	}
	for name, h := range st.Health {
		if err := emit(Ref{model.KindHealth, name}, serviceSets(name), h); err != nil {
			return err
		}
	}
	for name, h := range st.Hosts {
		if err := emit(Ref{model.KindHost, name}, []string{p.hostScope(name)}, h); err != nil {
			return err
		}
		for _, g := range h.Guests {
			sc := p.guest(name, g.Name, eipSets, serviceSets)
			if err := emit(Ref{model.KindGuestCopy, model.GuestCopyKey(name, g.Name)}, sc, model.NewGuestCopy(h, g)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Package agent is the host-agent role: it follows the desired state and
// programs the agent data plane for the EIPs bound to guests on its host
// (decapsulation and 1:1 NAT to the guest, encapsulation of the guest's
// replies to the edges). Like the edge, it can restart without the data
// plane missing a packet.
package agent

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// Want is one EIP the host must serve.
type Want struct {
	EIP netip.Addr
	// Private is the guest's address the EIP is translated to, of the
	// EIP's family: the guest's Address for an IPv4 EIP, its Address6 for
	// an IPv6 one (NAT66).
	Private netip.Addr
	VSID    uint32
	Guest   string
	// Service: the guest is an encap-mode service backend too (its
	// replies are then looked up in the agent's flow table first).
	Service bool
	// Set is the edge set that serves the EIP (setplan.Serving; "": none,
	// its replies go to group 0, every set's live edges).
	Set string
	// Covering is the prefix set whose prefix covers the EIP: where
	// upstream sends its traffic while no member of a dedicated or
	// quarantine Set announces its /32 (not yet, or not any more), and
	// where its replies go meanwhile (GroupPlan.ReplySet).
	Covering string
	// Until: a drain's end (HostWant.Drains: EIP.Previous.Until); zero
	// for a live binding.
	Until time.Time
}

// HostWant is everything an agent must program for its host.
type HostWant struct {
	// Underlay is the host's underlay address, IPv4 or IPv6: a host of
	// the IPv6 underlay reaches its edges over IPv6, at their underlay6.
	Underlay netip.Addr
	Edges    []netip.Addr // every edge of every set (the address the host reaches it at), in a stable order
	// Sets: every edge set's members in name order, from which the edge
	// groups are made (Groups, with the announcements); each member's
	// Underlay is the address the host reaches it at (its underlay6 for
	// a host of the IPv6 underlay).
	Sets map[string][]model.EdgeNode
	// VIPSets: the edge set that serves each VIP of Services ("": none);
	// VIPCovering: the prefix set that covers it (see Want.Covering).
	VIPSets     map[netip.Addr]string
	VIPCovering map[netip.Addr]string
	Guests      []model.Guest
	EIPs        map[netip.Addr]Want // EIPs bound to guests of this host
	// Drains are the EIPs a bind moved from a guest of this host to
	// another host (EIP.Previous names this host): translated to that
	// guest as if still bound there while the connections open at the
	// move drain, until Want.Until (the plan leaves out those whose
	// Until has passed; the reconciler re-plans then by itself). None
	// shares a guest and family with an EIP of EIPs (a live binding
	// wins) or with another drain (the latest move wins).
	Drains map[netip.Addr]Want
	// DrainsSkipped says why each drain left out was (logged once).
	DrainsSkipped []string
	// Services are the encap-mode service backends among the guests.
	Services []dataplane.AgentService
	// Checked are the ports the edges health-check encap-mode backends
	// among the guests on, through the tunnel: the only way to a guest's
	// private address from an edge (bpf/lib/agenthc.h).
	Checked  []dataplane.HealthGuest
	Problems []string
}

// Desired computes what the agent of host must program.
func Desired(st *model.State, host string) (HostWant, error) {
	h, ok := st.Hosts[host]
	if !ok {
		return HostWant{}, fmt.Errorf("host %q does not exist: create it (azgate host create %s --az AZ --underlay ADDR)", host, host)
	}
	var sets []string
	for name := range st.EdgeSets {
		sets = append(sets, name)
	}
	sort.Strings(sets)
	// An EIP is bound to one guest and a guest holds one EIP of each
	// family (the controller's check; few guests hold an IPv6 one): the
	// host's guests bound the EIPs it holds, so a full load does not
	// grow the map step by step (its rehashes were most of what Desired
	// allocated).
	w := HostWant{Underlay: h.Underlay, Guests: h.Guests, EIPs: make(map[netip.Addr]Want, min(len(h.Guests), len(st.EIPs))),
		Sets: map[string][]model.EdgeNode{}, VIPSets: map[netip.Addr]string{}, VIPCovering: map[netip.Addr]string{}}
	for _, name := range sets {
		es := append([]model.EdgeNode(nil), st.EdgeSets[name].Edges...)
		sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
		if h.Underlay.Is6() {
			// A host of the IPv6 underlay reaches its edges at their
			// underlay6: the copies' Underlay is the address the host
			// uses. The model requires one of every edge then; an edge
			// written past that check is left out, reported.
			kept := es[:0]
			for _, e := range es {
				if !e.Underlay6.IsValid() {
					w.Problems = append(w.Problems, fmt.Sprintf("edge %s/%s has no underlay6: this host of the IPv6 underlay cannot reach it", name, e.Name))
					continue
				}
				e.Underlay = e.Underlay6
				kept = append(kept, e)
			}
			es = kept
		}
		for _, e := range es {
			w.Edges = append(w.Edges, e.Underlay)
		}
		w.Sets[name] = es
	}
	plan := setplan.FromState(st)
	prefixes := setplan.Input{Sets: st.EdgeSets} // without pull-outs and quarantines
	var drains []*model.EIP
	for _, e := range st.EIPs {
		if e.Binding == nil || e.Binding.Host != host {
			// In this host's scope but bound elsewhere: drained here if
			// its previous binding names this host (an EIP unbound
			// since is not: the controller never leaves it so), else
			// not programmed.
			if e.Binding != nil && e.Previous != nil && e.Previous.Host == host {
				drains = append(drains, e)
			}
			continue
		}
		g, ok := h.Guest(e.Binding.Guest)
		if !ok {
			continue
		}
		private := g.Address
		if e.Address.Is6() {
			// NAT66 to the guest's IPv6 address (the model requires one
			// to bind an IPv6 EIP; a host written past that check loses
			// the EIP, reported).
			if private = g.Address6; !private.IsValid() {
				w.Problems = append(w.Problems, fmt.Sprintf("EIP %v: guest %s has no IPv6 address (address6) to translate it to", e.Address, g.Name))
				continue
			}
		}
		set, _, _ := plan.Serving(e.Address)
		covering, _, _ := prefixes.Serving(e.Address)
		w.EIPs[e.Address] = Want{EIP: e.Address, Private: private, VSID: g.VSID, Guest: g.Name, Set: set, Covering: covering}
	}
	w.planDrains(h, drains, plan, prefixes)
	// A backend is checked once per pool, whatever its listeners.
	type checkKey struct{ svc, pool, backend string }
	seen := map[checkKey]bool{}
	for _, name := range sortedNames(st.Services) {
		svc := st.Services[name]
		if svc.Mode != model.ModeEncap {
			continue
		}
		for _, l := range svc.Listeners {
			pool, _ := svc.Pool(l.Pool)
			if pool == nil {
				continue
			}
			proto := uint8(dataplane.ProtoTCP)
			if l.Protocol == "udp" {
				proto = dataplane.ProtoUDP
			}
			for _, b := range pool.Backends {
				if b.Host != host {
					continue
				}
				g, ok := h.Guest(b.Guest)
				if !ok {
					w.Problems = append(w.Problems, fmt.Sprintf("service %s: backend %s: no guest %q on this host", name, b.Key(), b.Guest))
					continue
				}
				if svc.VIP.Is6() && !g.Address6.IsValid() {
					// The model requires one behind an IPv6 VIP: a store
					// written past that check loses the backend here,
					// reported (the edge still names the guest: its
					// packets are dropped, drop_unknown).
					w.Problems = append(w.Problems, fmt.Sprintf("service %s: backend %s: guest %s has no IPv6 address (address6) for IPv6 VIP %v",
						name, b.Key(), g.Name, svc.VIP))
					continue
				}
				if pool.Health != nil && !seen[checkKey{name, pool.Name, b.Key()}] {
					seen[checkKey{name, pool.Name, b.Key()}] = true
					port, proto := lbplan.CheckPort(svc, pool, b), lbplan.CheckProto(pool.Health)
					if port != 0 && proto != 0 {
						w.Checked = append(w.Checked, dataplane.HealthGuest{Guest: g.Address, VSID: g.VSID, Proto: proto, Port: port})
						if svc.VIP.Is6() {
							// An edge with an IPv6 health-check address
							// checks an IPv6 VIP's backend at its IPv6
							// address (agent_hc_guests6), one without at
							// its IPv4 one.
							w.Checked = append(w.Checked, dataplane.HealthGuest{Guest: g.Address6, VSID: g.VSID, Proto: proto, Port: port})
						}
					}
				}
				ports := []uint16{0}
				if !l.AnyPort() {
					ports = ports[:0]
					for p := int(l.Port); p <= int(l.Last()); p++ {
						ports = append(ports, uint16(p))
					}
				}
				if _, ok := w.VIPSets[svc.VIP]; !ok {
					w.VIPSets[svc.VIP], _, _ = plan.Serving(svc.VIP)
					w.VIPCovering[svc.VIP], _, _ = prefixes.Serving(svc.VIP)
				}
				// An IPv6 VIP's backend is named by its IPv4 address (the
				// edge's inner MAC) and translated to its address6.
				var guest6 netip.Addr
				if svc.VIP.Is6() {
					guest6 = g.Address6
				}
				for _, p := range ports {
					w.Services = append(w.Services, dataplane.AgentService{VIP: svc.VIP, Guest: g.Address, Proto: proto,
						VPort: p, BPort: b.Port, VSID: g.VSID, Guest6: guest6})
				}
			}
		}
	}
	// A guest's replies are translated by their flow entries, so the
	// same port may serve its EIP and any number of VIPs; the EIP's entry
	// says whether the flow table of its family needs a look (an IPv4
	// EIP's guest behind an IPv4 VIP, an IPv6 EIP's, keyed by address6,
	// behind an IPv6 VIP).
	backends := map[netip.Addr]bool{}
	for _, s := range w.Services {
		if s.VIP.Is6() {
			backends[s.Guest6] = true
		} else {
			backends[s.Guest] = true
		}
	}
	for _, m := range []map[netip.Addr]Want{w.EIPs, w.Drains} {
		for a, e := range m {
			if backends[e.Private] {
				e.Service = true
				m[a] = e
			}
		}
	}
	return w, nil
}

// planDrains fills w.Drains from the EIPs whose previous binding names
// this host (h), w.EIPs being complete: each is translated to its
// previous guest, unless that guest is gone or not the one the EIP left
// (another VSID than Previous.VSID), lacks the address of the EIP's
// family, holds a live EIP of that family (the live binding
// wins), or another drain of that family moved later (the latest move
// wins: its Until is the latest; the lower address on a tie). Whether a
// drain is still active is the plan's question (planTables), as time
// passes with no change of the state.
func (w *HostWant) planDrains(h *model.Host, drains []*model.EIP, plan, prefixes setplan.Input) {
	if len(drains) == 0 {
		return
	}
	w.Drains = make(map[netip.Addr]Want, len(drains))
	type slot struct {
		guest string
		v6    bool
	}
	live := make(map[slot]netip.Addr, len(w.EIPs))
	for a, e := range w.EIPs {
		live[slot{e.Guest, a.Is6()}] = a
	}
	// The latest move first, so that it takes its guest's family.
	sort.Slice(drains, func(i, j int) bool {
		ui, uj := drains[i].Previous.Until, drains[j].Previous.Until
		if !ui.Equal(uj) {
			return ui.After(uj)
		}
		return drains[i].Address.Less(drains[j].Address)
	})
	taken := make(map[slot]netip.Addr, len(drains))
	for _, e := range drains {
		p := e.Previous
		g, ok := h.Guest(p.Guest)
		if !ok {
			w.DrainsSkipped = append(w.DrainsSkipped, fmt.Sprintf("EIP %v: not drained: its previous guest %s is not on this host", e.Address, p.Guest))
			continue
		}
		if g.VSID != p.VSID {
			// Not the guest the EIP left (re-created since, maybe for
			// another tenant): the edges' packets carry the old VSID.
			w.DrainsSkipped = append(w.DrainsSkipped, fmt.Sprintf("EIP %v: not drained: its previous guest %s has VSID %d now, %d at the move", e.Address, g.Name, g.VSID, p.VSID))
			continue
		}
		private, v6 := g.Address, e.Address.Is6()
		if v6 {
			if private = g.Address6; !private.IsValid() {
				w.DrainsSkipped = append(w.DrainsSkipped, fmt.Sprintf("EIP %v: not drained: its previous guest %s has no IPv6 address (address6)", e.Address, g.Name))
				continue
			}
		}
		k := slot{g.Name, v6}
		if other, ok := live[k]; ok {
			w.DrainsSkipped = append(w.DrainsSkipped, fmt.Sprintf("EIP %v: not drained on guest %s: the guest holds EIP %v (a live binding wins)", e.Address, g.Name, other))
			continue
		}
		if other, ok := taken[k]; ok {
			w.DrainsSkipped = append(w.DrainsSkipped, fmt.Sprintf("EIP %v: not drained on guest %s: EIP %v moved from it later and drains there", e.Address, g.Name, other))
			continue
		}
		taken[k] = e.Address
		set, _, _ := plan.Serving(e.Address)
		covering, _, _ := prefixes.Serving(e.Address)
		w.Drains[e.Address] = Want{EIP: e.Address, Private: private, VSID: g.VSID, Guest: g.Name, Set: set, Covering: covering, Until: p.Until}
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Links is what the reconciler needs from the host's network stack.
type Links interface {
	// GuestInterface finds the interface a guest address is routed through.
	GuestInterface(addr netip.Addr) (ifname string, ifindex int, err error)
	AttachGuest(ifname string) error
	DetachGuest(ifname string) error
	// KeepResolved keeps next hops toward the group's addresses resolved
	// (the set replaces the group's previous one).
	KeepResolved(group string, addrs []netip.Addr)
}

// Reconciler keeps AgentMaps equal to the desired state (tables.go).
type Reconciler struct {
	cfg   Config
	maps  dataplane.AgentMaps
	links Links
	log   *slog.Logger

	mu         sync.Mutex
	programmed map[netip.Addr]dataplane.AgentEIP
	dirty      map[netip.Addr]bool // EIPs whose last write failed
	whole      map[opKind]string   // the whole tables as last written (tables.go)
	guestIfs   map[string]bool     // guest interfaces the program is attached to
	want       *HostWant           // the last desired state (retried after failures)
	stateErr   string              // why the newest state gave no desired state (r.want is older); "" when it did
	wantRev    int64               // its revision
	retry      *time.Timer         // pending retry
	stopped    bool                // Stop was called: no more retries
	backoff    time.Duration
	free       []uint32 // counter slots
	next       uint32
	rev        int64
	errs       []string
	OnApplied  func(rev int64)

	// Edge groups (groups.go): the announcements last read, the slot of
	// each set, what each slot holds, the sets that fell back to members
	// that are not live and how many times one did.
	ann         setplan.Announcing
	badAnnounce uint64 // malformed announce keys read
	groupSlot   map[string]uint16
	groups      map[uint16]dataplane.AgentGroup
	fallback    map[string]bool
	fallbacks   uint64
	waiting     map[netip.Addr]string // addresses waiting for their set's announcement (GroupPlan.ReplySet)

	bw *bwState // shared bandwidth (bandwidth.go); nil: off

	// Drains (HostWant.Drains): the clock (Config.Now), the timer that
	// re-plans at the earliest end of an active drain (drainAt), its
	// generation (a callback of a timer replaced since does nothing),
	// how timers are made (tests record them), and the drains and
	// skipped drains already logged.
	now        func() time.Time
	afterFunc  func(time.Duration, func()) stopper
	drainTimer stopper
	drainAt    time.Time
	drainGen   uint64
	drainNoted map[string]bool
}

// stopper is a pending timer.
type stopper interface{ Stop() bool }

// NewReconciler adopts what the maps already hold.
func NewReconciler(cfg Config, maps dataplane.AgentMaps, links Links) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cur, err := maps.EIPs()
	if err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, maps: maps, links: links, log: cfg.Log, programmed: cur, dirty: map[netip.Addr]bool{},
		whole: map[opKind]string{}, guestIfs: map[string]bool{},
		groupSlot: map[string]uint16{}, groups: map[uint16]dataplane.AgentGroup{}, fallback: map[string]bool{},
		waiting: map[netip.Addr]string{}, now: cfg.Now, drainNoted: map[string]bool{},
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }}
	if r.now == nil {
		r.now = time.Now
	}
	// The groups a previous run left: each set keeps its slot, so the
	// EIPs' and flows' entries stay right meanwhile.
	gs, err := maps.Groups()
	if err != nil {
		return nil, err
	}
	for slot, g := range gs {
		if slot != 0 && g.Set == "" {
			continue
		}
		if slot != 0 {
			r.groupSlot[g.Set] = slot
		}
		g.Gen = 0
		r.groups[slot] = g
	}
	used := map[uint32]bool{}
	for _, e := range cur {
		used[e.StatsIdx] = true
		if e.StatsIdx >= r.next {
			r.next = e.StatsIdx + 1
		}
	}
	for i := uint32(0); i < r.next; i++ {
		if !used[i] {
			r.free = append(r.free, i)
		}
	}
	// agent_local keeps what the previous run wrote (checked against
	// its desired state) until the first reconcile checks this
	// configuration (planTables).
	if _, err := PlanLocal(cfg.LocalAllow); err != nil {
		return nil, err
	}
	return r, nil
}

// adoptAttached takes the guest interfaces a previous run attached: they
// stay attached until the first reconcile decides.
func (r *Reconciler) adoptAttached(ifnames []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ifname := range ifnames {
		if ifname != r.cfg.Underlay {
			r.guestIfs[ifname] = true
		}
	}
}

// Handle is a store.Handler. Every change recomputes the host's (small)
// desired state in full.
func (r *Reconciler) Handle(st *model.State, rev int64, _ []store.Event, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want, err := Desired(st, r.cfg.Name)
	if err != nil {
		r.stateErr = err.Error()
		r.errs = nil
		r.fail(err)
		// The data plane keeps what it holds, and so do the bandwidth
		// limits: an empty view would remove them and leave the EIPs
		// still forwarded here unlimited.
		return
	}
	r.want, r.wantRev, r.backoff, r.stateErr = &want, rev, 0, ""
	r.noteDrains(want)
	r.apply(rev)
	r.updateBandwidth(st, want)
}

// Advance records that the region's revision rev changed nothing of this
// host's (store.FollowScope commits every revision of the region, most
// with no change of the host's share): if what is programmed is the
// current want, applied without error and with no retry pending, it is
// current at rev too. Otherwise the revision stays where it is: the
// retry, or the next change, moves it.
func (r *Reconciler) Advance(rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want == nil || rev <= r.rev || r.rev != r.wantRev || r.retry != nil || len(r.errs) > 0 || r.stateErr != "" {
		return
	}
	r.rev, r.wantRev = rev, rev
	if r.OnApplied != nil {
		r.OnApplied(rev)
	}
}

// apply programs r.want; a failure schedules another try (a guest's
// interface may appear later, a write may succeed next time) with backoff.
func (r *Reconciler) apply(rev int64) {
	kept := r.resetErrs()
	r.reconcile(*r.want)
	if len(r.errs) > kept {
		r.scheduleRetry(rev)
		return
	}
	r.rev = rev
	if r.OnApplied != nil {
		r.OnApplied(rev)
	}
}

// reconcile takes the maps and the guests' interfaces to want: the local
// rules and the configuration first (nothing else while the
// configuration cannot be written), then the guests' interfaces, then
// the rest of the tables (tables.go); interfaces no guest uses any more
// are detached last.
func (r *Reconciler) reconcile(want HostWant) {
	defer r.armDrain(want)
	// The local rules and the configuration only (planned and compared
	// without the EIPs' and services' tables: a whole plan and diff of
	// them here was a full load's second copy of every EIP, for nothing).
	base := r.planHead(want)
	held := r.held()
	first := appendWhole(nil, &base, held, opLocal, base.local)
	r.applyOps(appendWhole(first, &base, held, opConfig, base.config))
	// Nothing else is written, and no guest attached, until both are: a
	// guest attached under a local table that failed to change (say, to
	// the empty table of a refused overlap) would keep the old rules.
	if !hasKey(r.whole, opConfig) || !hasKey(r.whole, opLocal) {
		for _, err := range base.problems {
			r.fail(err)
		}
		return
	}
	links, used := r.attachGuests(want)
	p := r.plan(want, links)
	r.noteWaiting(p.waiting)
	for _, err := range p.problems {
		r.fail(err)
	}
	have, err := r.maps.Services()
	if err != nil {
		r.fail(err)
	}
	r.applyOps(diffTables(&p, r.held(), have, err == nil))
	r.detachUnused(used)
}

// plan computes what the maps should hold for want with the guests'
// interfaces (tables.go), giving each new edge set a group slot.
func (r *Reconciler) plan(want HostWant, links map[netip.Addr]guestLink) tablePlan {
	return r.planOf(planInput{want: want, links: links})
}

// planHead is plan's configuration and local rules only
// (planInput.head): what reconcile writes first.
func (r *Reconciler) planHead(want HostWant) tablePlan {
	return r.planOf(planInput{want: want, head: true})
}

func (r *Reconciler) planOf(in planInput) tablePlan {
	in.live = PlanGroups(in.want.Sets, r.ann)
	r.noteFallbacks(in.live)
	r.groupSlot = assignSlots(sortedNames(in.want.Sets), r.groupSlot)
	in.cfg, in.slots, in.now = r.cfg, r.groupSlot, r.now()
	return planTables(in)
}

// attachGuests finds the interface of every guest of the host (bound or
// not: binding an EIP later then only writes maps) and attaches the
// guest program to it. A guest whose interface cannot be found yet is
// reported and retried. The interface is found through the guest's IPv4
// address; its IPv6 address (Guest.Address6), if any, is on the same
// interface and maps to the same link (what an IPv6 EIP's entry names).
func (r *Reconciler) attachGuests(want HostWant) (map[netip.Addr]guestLink, map[string]bool) {
	// Sized for every guest (what they hold on a full load: grown step
	// by step they allocated twice that).
	links := make(map[netip.Addr]guestLink, len(want.Guests))
	used := make(map[string]bool, len(want.Guests))
	resolve := make([]netip.Addr, 0, 2*len(want.Guests))
	for _, g := range want.Guests {
		ifname, ifindex, err := r.links.GuestInterface(g.Address)
		if err != nil {
			r.fail(fmt.Errorf("guest %s (%v): %w", g.Name, g.Address, err))
			continue
		}
		if !r.guestIfs[ifname] {
			if err := r.links.AttachGuest(ifname); err != nil {
				r.fail(fmt.Errorf("guest %s: attach to %s: %w", g.Name, ifname, err))
				continue
			}
			r.guestIfs[ifname] = true
		}
		used[ifname] = true
		links[g.Address] = guestLink{ifname, ifindex}
		resolve = append(resolve, g.Address)
		if g.Address6.IsValid() {
			links[g.Address6] = guestLink{ifname, ifindex}
			// The guest's IPv6 neighbour too: an IPv6 EIP's inbound
			// packets leave through bpf_fib_lookup toward it, which only
			// reads the neighbour table.
			resolve = append(resolve, g.Address6)
		}
	}
	r.links.KeepResolved("guests", resolve)
	return links, used
}

// detachUnused detaches the guest program from the interfaces no guest
// uses.
func (r *Reconciler) detachUnused(used map[string]bool) {
	for _, ifname := range sortedKeys(r.guestIfs) {
		if used[ifname] {
			continue
		}
		if err := r.links.DetachGuest(ifname); err != nil {
			r.fail(fmt.Errorf("detach from %s: %w", ifname, err))
			continue
		}
		delete(r.guestIfs, ifname)
	}
}

func (r *Reconciler) scheduleRetry(rev int64) {
	if r.retry != nil || r.cfg.NoRetry || r.stopped {
		return
	}
	r.backoff = min(max(2*r.backoff, 500*time.Millisecond), 30*time.Second)
	want := r.want
	r.retry = time.AfterFunc(r.backoff, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.retry = nil
		if r.want == want && !r.stopped { // nothing newer came in meanwhile
			r.apply(rev)
		}
	})
}

// Stop ends the retries: a pending one does not run, none is scheduled.
// The maps are written no more once Stop and the store's follower (the
// only other caller) have returned.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	if r.drainTimer != nil {
		r.drainTimer.Stop()
		r.drainTimer = nil
	}
}

// nextDrainEnd is the earliest Until among want's drains still active at
// now (false: none is): when the plan changes with no change of the state.
func nextDrainEnd(want HostWant, now time.Time) (time.Time, bool) {
	var at time.Time
	for _, d := range want.Drains {
		if now.Before(d.Until) && (at.IsZero() || d.Until.Before(at)) {
			at = d.Until
		}
	}
	return at, !at.IsZero()
}

// armDrain sets the drain timer (reconcile, under r.mu) to re-plan at the
// earliest end of want's active drains: the controller's write that
// clears EIP.Previous may come late or never. A timer for another time
// is replaced; none is left when no drain is active.
func (r *Reconciler) armDrain(want HostWant) {
	now := r.now()
	at, ok := nextDrainEnd(want, now)
	if r.drainTimer != nil && ok && at.Equal(r.drainAt) {
		return
	}
	if r.drainTimer != nil {
		r.drainTimer.Stop()
		r.drainTimer = nil
	}
	r.drainGen++
	if !ok || r.stopped {
		return
	}
	gen := r.drainGen
	r.drainAt = at
	r.drainTimer = r.afterFunc(at.Sub(now), func() { r.drainEnded(gen) })
}

// drainEnded is the drain timer's: the current want planned again, at
// the time now (the drains ended leave the maps, as an unbind would).
func (r *Reconciler) drainEnded(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.drainGen || r.stopped || r.want == nil {
		return // replaced or stopped meanwhile
	}
	r.drainTimer = nil
	kept := r.resetErrs()
	r.reconcile(*r.want)
	if len(r.errs) > kept {
		r.scheduleRetry(r.wantRev)
	}
}

// noteDrains logs each active drain of want and each drain left out once
// (the same again only after it went away).
func (r *Reconciler) noteDrains(want HostWant) {
	seen := make(map[string]bool, len(want.Drains)+len(want.DrainsSkipped))
	now := r.now()
	for _, a := range sortedAddrs(want.Drains) {
		d := want.Drains[a]
		if !now.Before(d.Until) {
			continue // ended already (the clearing write not read yet)
		}
		k := fmt.Sprintf("drain %v %s %v", a, d.Guest, d.Until)
		seen[k] = true
		if !r.drainNoted[k] {
			r.log.Info("EIP moved to another host: drained on its previous guest here", "eip", a, "guest", d.Guest, "until", d.Until)
		}
	}
	for _, why := range want.DrainsSkipped {
		seen[why] = true
		if !r.drainNoted[why] {
			r.log.Info(why)
		}
	}
	r.drainNoted = seen
}

// resetErrs starts a pass's errors: a desired state that could not be
// computed stays reported (the maps follow an older one) until a newer
// state gives one, whatever retries or announcement changes run meanwhile.
// It returns how many errors it kept.
func (r *Reconciler) resetErrs() int {
	r.errs = nil
	if r.stateErr != "" {
		r.errs = append(r.errs, r.stateErr)
	}
	return len(r.errs)
}

func (r *Reconciler) fail(err error) {
	r.errs = append(r.errs, err.Error())
	r.log.Error("reconcile failed; the data plane keeps its previous state", "err", err)
}

// Status builds the node status.
func (r *Reconciler) Status(started time.Time, ifaces []string) model.NodeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := append([]string{r.cfg.Underlay}, sortedKeys(r.guestIfs)...)
	s := model.NodeStatus{Role: "agent", Name: r.cfg.Name, Version: r.cfg.Version, Started: started, Updated: time.Now().UTC(),
		AppliedRevision: r.rev, Interfaces: all, Routes: len(r.programmed), Errors: r.errs, EIPs: map[string]model.EIPCounters{}}
	if r.want != nil {
		now := r.now()
		for _, d := range r.want.Drains {
			if now.Before(d.Until) {
				s.Draining++
			}
		}
	}
	if c, err := r.maps.Stats(); err == nil {
		s.Counters = map[string]model.Count{}
		for k, v := range c {
			s.Counters[k] = model.Count(v)
		}
	}
	for a, e := range r.programmed {
		if c, err := r.maps.EIPStats(e.StatsIdx); err == nil {
			s.EIPs[a.String()] = model.EIPCounters(c)
		}
	}
	return s
}

// Programmed returns a copy of what the maps hold.
func (r *Reconciler) Programmed() map[netip.Addr]dataplane.AgentEIP {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.programmed)
}

// ProgrammedCount is how many EIPs the maps hold (len(Programmed())
// without the copy).
func (r *Reconciler) ProgrammedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.programmed)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

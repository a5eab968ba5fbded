// Package agent is the host-agent role: it follows the desired state and
// programs the agent data plane for the EIPs bound to guests on its host
// (decapsulation and 1:1 NAT to the guest, encapsulation of the guest's
// replies to the edges). Like the edge, it can restart without the data
// plane missing a packet.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nexthop"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// Want is one EIP the host must serve.
type Want struct {
	EIP     netip.Addr
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
	// upstream sends its traffic when no member of a dedicated or
	// quarantine Set announces its /32 any more.
	Covering string
}

// HostWant is everything an agent must program for its host.
type HostWant struct {
	Underlay netip.Addr
	Edges    []netip.Addr // every edge of every set, in a stable order
	// Sets: every edge set's members in name order, from which the edge
	// groups are made (Groups, with the announcements).
	Sets map[string][]model.EdgeNode
	// VIPSets: the edge set that serves each VIP of Services ("": none);
	// VIPCovering: the prefix set that covers it (see Want.Covering).
	VIPSets     map[netip.Addr]string
	VIPCovering map[netip.Addr]string
	Guests      []model.Guest
	EIPs        map[netip.Addr]Want // EIPs bound to guests of this host
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
	w := HostWant{Underlay: h.Underlay, Guests: h.Guests, EIPs: map[netip.Addr]Want{},
		Sets: map[string][]model.EdgeNode{}, VIPSets: map[netip.Addr]string{}, VIPCovering: map[netip.Addr]string{}}
	for _, name := range sets {
		es := append([]model.EdgeNode(nil), st.EdgeSets[name].Edges...)
		sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
		for _, e := range es {
			w.Edges = append(w.Edges, e.Underlay)
		}
		w.Sets[name] = es
	}
	plan := setplan.FromState(st)
	prefixes := setplan.Input{Sets: st.EdgeSets} // without pull-outs and quarantines
	for _, e := range st.EIPs {
		if e.Binding == nil || e.Binding.Host != host {
			continue
		}
		g, ok := h.Guest(e.Binding.Guest)
		if !ok {
			continue
		}
		set, _, _ := plan.Serving(e.Address)
		covering, _, _ := prefixes.Serving(e.Address)
		w.EIPs[e.Address] = Want{EIP: e.Address, Private: g.Address, VSID: g.VSID, Guest: g.Name, Set: set, Covering: covering}
	}
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
				if pool.Health != nil && !seen[checkKey{name, pool.Name, b.Key()}] {
					seen[checkKey{name, pool.Name, b.Key()}] = true
					port, proto := lbplan.CheckPort(svc, pool, b), lbplan.CheckProto(pool.Health)
					if port != 0 && proto != 0 {
						w.Checked = append(w.Checked, dataplane.HealthGuest{Guest: g.Address, VSID: g.VSID, Proto: proto, Port: port})
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
				for _, p := range ports {
					w.Services = append(w.Services, dataplane.AgentService{VIP: svc.VIP, Guest: g.Address, Proto: proto,
						VPort: p, BPort: b.Port, VSID: g.VSID})
				}
			}
		}
	}
	// A guest's replies are translated by their flow entries, so the
	// same port may serve its EIP and any number of VIPs; the EIP's entry
	// says whether the flow table needs a look.
	backends := map[netip.Addr]bool{}
	for _, s := range w.Services {
		backends[s.Guest] = true
	}
	for a, e := range w.EIPs {
		if backends[e.Private] {
			e.Service = true
			w.EIPs[a] = e
		}
	}
	return w, nil
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

// Config of an agent.
type Config struct {
	Name string // host name
	// MetricsToken, if set, is required on the metrics listener.
	MetricsToken string
	Underlay     string // underlay interface
	// LocalAllow: what guests may send to their host's kernel
	// (--local-allow, local.go); nil: nothing.
	LocalAllow     []LocalAllow
	HashSeed       uint32
	ICMPRate       uint32
	ICMPBurst      uint32
	StatusInterval time.Duration
	Version        string
	Log            *slog.Logger
	NoRetry        bool // tests: no background retries
	// Bandwidth: shared bandwidth reporting and enforcement (bandwidth.go).
	Bandwidth BandwidthConfig
}

// Reconciler keeps AgentMaps equal to the desired state.
type Reconciler struct {
	cfg   Config
	maps  dataplane.AgentMaps
	links Links
	log   *slog.Logger

	mu         sync.Mutex
	programmed map[netip.Addr]dataplane.AgentEIP
	guestIfs   map[string]bool // guest interfaces the program is attached to
	want       *HostWant       // the last desired state (retried after failures)
	retry      *time.Timer     // pending retry
	backoff    time.Duration
	free       []uint32
	next       uint32
	rev        int64
	errs       []string
	cfgKey     string
	localKey   *string // agent_local as last written (syncLocal)
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

	bw *bwState // shared bandwidth (bandwidth.go); nil: off
}

// NewReconciler adopts what the maps already hold.
func NewReconciler(cfg Config, maps dataplane.AgentMaps, links Links) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cur, err := maps.EIPs()
	if err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, maps: maps, links: links, log: cfg.Log, programmed: cur, guestIfs: map[string]bool{},
		groupSlot: map[string]uint16{}, groups: map[uint16]dataplane.AgentGroup{}, fallback: map[string]bool{}}
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
	// configuration (syncLocal).
	if _, err := PlanLocal(cfg.LocalAllow); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reconciler) alloc() (uint32, error) {
	if n := len(r.free); n > 0 {
		idx := r.free[n-1]
		r.free = r.free[:n-1]
		return idx, r.maps.ResetEIPStats(idx)
	}
	idx := r.next
	r.next++
	return idx, r.maps.ResetEIPStats(idx)
}

// Handle is a store.Handler. Every change recomputes the host's (small)
// desired state in full.
func (r *Reconciler) Handle(st *model.State, rev int64, _ []store.Event, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want, err := Desired(st, r.cfg.Name)
	if err != nil {
		r.errs = nil
		r.fail(err)
		// The data plane keeps what it holds, and so do the bandwidth
		// limits: an empty view would remove them and leave the EIPs
		// still forwarded here unlimited.
		return
	}
	r.want, r.backoff = &want, 0
	r.apply(rev)
	r.updateBandwidth(st, want)
}

// apply programs r.want; a failure schedules another try (a guest's
// interface may appear later, a write may succeed next time) with backoff.
func (r *Reconciler) apply(rev int64) {
	r.errs = nil
	r.syncLocal(*r.want)
	if err := r.configure(r.want.Underlay, r.want.Edges); err != nil {
		r.fail(err)
	} else {
		// Groups first (a new set's slot exists before an EIP names
		// it), the slots of sets gone last.
		r.syncGroups(*r.want, r.fail)
		r.sync(*r.want)
		if len(r.errs) == 0 {
			r.clearStaleGroups(*r.want)
		}
	}
	if len(r.errs) > 0 {
		r.scheduleRetry(rev)
		return
	}
	r.rev = rev
	if r.OnApplied != nil {
		r.OnApplied(rev)
	}
}

func (r *Reconciler) scheduleRetry(rev int64) {
	if r.retry != nil || r.cfg.NoRetry {
		return
	}
	r.backoff = min(max(2*r.backoff, 500*time.Millisecond), 30*time.Second)
	want := r.want
	r.retry = time.AfterFunc(r.backoff, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.retry = nil
		if r.want == want { // nothing newer came in meanwhile
			r.apply(rev)
		}
	})
}

func (r *Reconciler) fail(err error) {
	r.errs = append(r.errs, err.Error())
	r.log.Error("reconcile failed; the data plane keeps its previous state", "err", err)
}

func (r *Reconciler) configure(underlay netip.Addr, edges []netip.Addr) error {
	key := fmt.Sprint(underlay, edges)
	if key == r.cfgKey {
		return nil
	}
	if err := r.maps.SetConfig(dataplane.AgentConfig{Underlay: underlay, ICMPSource: underlay, HashSeed: r.cfg.HashSeed,
		Edges: edges, ICMPRate: r.cfg.ICMPRate, ICMPBurst: r.cfg.ICMPBurst, GatewayMAC: dataplane.GatewayMAC}); err != nil {
		return err
	}
	r.links.KeepResolved("edges", edges)
	r.log.Info("agent configured", "underlay", underlay, "edges", edges)
	r.cfgKey = key
	return nil
}

type guestLink struct {
	ifname  string
	ifindex int
}

// sync attaches the guest program to the interface of every guest of the
// host (bound or not: binding an EIP later then only writes maps) and
// programs the EIPs. A guest whose interface cannot be found yet is
// reported and retried on the next change.
func (r *Reconciler) sync(want HostWant) {
	links := map[netip.Addr]guestLink{}
	used := map[string]bool{}
	var resolve []netip.Addr
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
	}
	r.links.KeepResolved("guests", resolve)
	var ifaddrs []dataplane.IfAddr
	for addr, gl := range links {
		ifaddrs = append(ifaddrs, dataplane.IfAddr{Ifindex: uint32(gl.ifindex), Addr: addr})
	}
	if err := r.maps.SetIfAddrs(ifaddrs); err != nil {
		r.fail(err)
	}
	// The checked ports of the encap backends among the guests: what an
	// edge's health check may reach through the tunnel, and nothing else
	// (bpf/lib/agenthc.h).
	if hg, ok := r.maps.(dataplane.HealthGuests); ok {
		var checked []dataplane.HealthGuest
		for _, c := range want.Checked {
			if _, ok := links[c.Guest]; ok {
				checked = append(checked, c)
			}
		}
		if err := hg.SetHealthGuests(checked); err != nil {
			r.fail(err)
		}
	}
	// Deletes first: an EIP leaving a guest another EIP now takes must not
	// remove the newcomer's entry.
	for a, cur := range r.programmed {
		if _, ok := want.EIPs[a]; ok {
			continue
		}
		if err := r.maps.DeleteEIP(a); err != nil {
			r.fail(err)
			continue
		}
		r.free = append(r.free, cur.StatsIdx)
		delete(r.programmed, a)
	}
	for a, w := range want.EIPs {
		gl, ok := links[w.Private]
		if !ok {
			continue // reported above
		}
		cur, had := r.programmed[a]
		next := dataplane.AgentEIP{EIP: a, Private: w.Private, VSID: w.VSID, StatsIdx: cur.StatsIdx, Ifindex: uint32(gl.ifindex), Service: w.Service,
			Group: r.groupOf(w.Set, w.Covering)}
		if had && cur == next {
			continue
		}
		if !had {
			idx, err := r.alloc()
			if err != nil {
				r.fail(err)
				continue
			}
			next.StatsIdx = idx
		}
		if err := r.maps.PutEIP(next); err != nil {
			r.fail(err)
			continue
		}
		r.programmed[a] = next
	}
	r.syncServices(want, links)
	for ifname := range r.guestIfs {
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

// syncServices programs the service backends among the guests.
func (r *Reconciler) syncServices(want HostWant, links map[netip.Addr]guestLink) {
	for _, p := range want.Problems {
		r.fail(fmt.Errorf("%s", p))
	}
	type key struct {
		vip, guest   netip.Addr
		proto        uint8
		vport, bport uint16
	}
	wanted := map[key]dataplane.AgentService{}
	for _, s := range want.Services {
		if _, ok := links[s.Guest]; !ok {
			continue // its guest's interface is not found: reported
		}
		s.Group = r.groupOf(want.VIPSets[s.VIP], want.VIPCovering[s.VIP])
		wanted[key{s.VIP, s.Guest, s.Proto, s.VPort, s.BPort}] = s
	}
	have, err := r.maps.Services()
	if err != nil {
		r.fail(err)
		return
	}
	for _, s := range have {
		k := key{s.VIP, s.Guest, s.Proto, s.VPort, s.BPort}
		if w, ok := wanted[k]; ok && w == s {
			delete(wanted, k)
			continue
		}
		if _, ok := wanted[k]; !ok {
			if err := r.maps.DeleteService(s); err != nil {
				r.fail(err)
			}
		}
	}
	for _, s := range wanted {
		if err := r.maps.PutService(s); err != nil {
			r.fail(err)
		}
	}
}

// Status builds the node status.
func (r *Reconciler) Status(started time.Time, ifaces []string) model.NodeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := append([]string{r.cfg.Underlay}, sortedKeys(r.guestIfs)...)
	s := model.NodeStatus{Role: "agent", Name: r.cfg.Name, Version: r.cfg.Version, Started: started, Updated: time.Now().UTC(),
		AppliedRevision: r.rev, Interfaces: all, Routes: len(r.programmed), Errors: r.errs, EIPs: map[string]model.EIPCounters{}}
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
	out := map[netip.Addr]dataplane.AgentEIP{}
	for a, e := range r.programmed {
		out[a] = e
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kernelLinks implements Links with netlink and the loaded data plane.
type kernelLinks struct {
	dp *dataplane.Agent
	nb *nexthop.Resolver
}

func (k *kernelLinks) GuestInterface(a netip.Addr) (string, int, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return "", 0, err
	}
	defer h.Close()
	idx, _, err := nexthop.RouteGet(h, a)
	if err != nil {
		return "", 0, err
	}
	l, err := h.LinkByIndex(idx)
	if err != nil {
		return "", 0, err
	}
	return l.Attrs().Name, idx, nil
}

func (k *kernelLinks) AttachGuest(ifname string) error { return k.dp.AttachGuest(ifname) }
func (k *kernelLinks) DetachGuest(ifname string) error { return k.dp.Detach(ifname) }

func (k *kernelLinks) KeepResolved(group string, addrs []netip.Addr) { k.nb.Keep(group, addrs) }

// Run loads (or re-adopts) the agent data plane and follows the store.
func Run(ctx context.Context, cfg Config, st store.Node, load dataplane.LoadOptions, metricsListen string) error {
	// Every goroutine started below ends with this context: an error
	// after one started must end it too, or Run waits for it forever
	// (issue 17.4).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Underlay == "" {
		return fmt.Errorf("agent: no underlay interface (--underlay-if)")
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 2 * time.Second
	}
	dp, err := dataplane.LoadAgent(load)
	if err != nil {
		return err
	}
	defer dp.Close()
	dp.Upgrade().Log(cfg.Log) // maps migrated or not trusted (docs/upgrades.md)
	if err := dp.AttachUnderlay(cfg.Underlay); err != nil {
		return err
	}
	nb := nexthop.NewResolver(cfg.Log)
	defer nb.Stop()
	if err := nexthop.WatchRouting(ctx, cfg.Log, func() {
		if err := dp.InvalidateNextHops(); err != nil {
			cfg.Log.Warn("cannot invalidate cached next hops", "err", err)
		}
		nb.Refresh(time.Second)
	}); err != nil {
		return err
	}
	links := &kernelLinks{dp: dp, nb: nb}
	rec, err := NewReconciler(cfg, dp, links)
	if err != nil {
		return err
	}
	// Interfaces attached by a previous run stay attached until the first
	// reconcile decides.
	for _, ifname := range dp.Attached() {
		if ifname != cfg.Underlay {
			rec.guestIfs[ifname] = true
		}
	}
	cfg.Log.Info("agent data plane attached", "underlay", cfg.Underlay, "eips_kept", len(rec.Programmed()), "pins", load.PinDir)
	var bw *bwenforce.Host
	if cfg.Bandwidth.Store != nil {
		if bw, err = rec.EnableBandwidth(cfg.Bandwidth, dp, cfg.Log.With("part", "bandwidth")); err != nil {
			return err
		}
		bwDone := make(chan struct{})
		go func() {
			defer close(bwDone)
			bw.Run(ctx)
		}()
		defer func() { cancel(); <-bwDone }() // before the data plane and the store close
	} else {
		bwenforce.ClearLimits(dp, cfg.Log)
	}
	started := time.Now().UTC()
	status := func() model.NodeStatus {
		ns := rec.Status(started, nil)
		store.ReportInvalid(&ns, st.Invalid) // objects the store's Follow refused
		if bw != nil {
			var errs []string
			ns.Bandwidth, errs = bw.NodeStatus()
			ns.Errors = append(ns.Errors, errs...)
		}
		return ns
	}
	// The edges' announcements decide which members of each set are live
	// (groups.go): read them before the first reconcile, so a restart
	// does not shrink and regrow the groups.
	first := make(chan struct{})
	var once sync.Once
	go WatchAnnouncements(ctx, st, rec, cfg.Log, func() { once.Do(func() { close(first) }) })
	select {
	case <-first:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
		cfg.Log.Warn("announcements not read yet: sets with BGP use all their members until they are")
	}
	go store.PublishStatus(ctx, st, "agent", cfg.Name, cfg.StatusInterval, status, cfg.Log)
	if metricsListen != "" {
		go nodemetrics.Serve(ctx, metricsListen, "agent", cfg.MetricsToken, status, cfg.Log)
	}
	var ready sync.Once // attached, and the first full state applied
	return st.Follow(ctx, func(s *model.State, rev int64, evs []store.Event, full bool) {
		rec.Handle(s, rev, evs, full)
		ready.Do(func() { sdnotify.Tell(cfg.Log, sdnotify.Ready) })
	})
}

// Package lbplan computes what an edge programs for the load-balanced
// services: per pool its Maglev table (with the down backends failed) and
// the backends' data-plane targets, the listeners (single ports, port
// ranges, any-port) and the tables they point at, the VIPs, the health
// check targets, and the problems (a backend that does not resolve, a
// service left out for capacity).
//
// Build is a pure function of the stored objects, the health verdicts and
// the hash seed: the edge daemon diff-applies its result through the data
// plane's maps (internal/edge), and `azgate service lookup` and `service
// status` call the same function to say what every edge should hold. It
// depends on model, maglev and flowhash only (no kernel, no store), after
// Cilium's pkg/loadbalancer split of desired state from its maps.
package lbplan

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
)

// Data-plane capacities of the load balancer, defined once here and held
// to bpf/lib/consts.h by internal/dataplane's TestCapacitiesMatchC.
const (
	// BackendsMax is the size of the backend array (LB_BACKENDS_MAX).
	BackendsMax = 65536
	// TablesMax is the number of Maglev table slots (LB_TABLES_MAX).
	TablesMax = 4096
	// ListenersMax is the size of the single-port listener map
	// (LB_LISTENERS_MAX): a service that would overflow it is left out and
	// reported, the others are programmed.
	ListenersMax = 1 << 18
	// Listeners6Max is the size of the IPv6 VIPs' single-port listener
	// map (LB_LISTENERS6_MAX; lb_listeners6, beside lb_listeners): IPv6
	// VIPs' entries count against it (and --listener-max), IPv4 VIPs'
	// against ListenersMax.
	Listeners6Max = 1 << 16
	// RangesMax is how many port ranges one (VIP, protocol) may have
	// (LB_RANGES_MAX); model.MaxRanges bounds one service the same way.
	RangesMax = model.MaxRanges
	// RangeSetsMax is the number of (VIP, protocol) range sets
	// (LB_RANGE_SETS_MAX).
	RangeSetsMax = 65536
)

// Load-balancer modes (LB_MODE_* in bpf/lib/consts.h).
const (
	ModeEncap = 1
	ModeNAT   = 2
)

// IP protocol numbers of the listener protocols.
var protoNum = map[string]uint8{model.ProtoTCP: 6, model.ProtoUDP: 17}

// ProtoNum is the IP protocol number of a listener protocol (0 if none).
func ProtoNum(proto string) uint8 { return protoNum[proto] }

// Listener is a listener key: VIP, protocol, port (0: any port) and, for
// a range, its last port (0 for one port). internal/dataplane uses the
// same type for its listener maps.
type Listener struct {
	VIP   netip.Addr
	Proto uint8
	Port  uint16
	Last  uint16
}

// IsRange reports whether l is a range of several ports.
func (l Listener) IsRange() bool { return l.Port != 0 && l.Last > l.Port }

// Covers reports whether a flow to port matches l as the data plane
// matches it (any-port covers every port).
func (l Listener) Covers(port uint16) bool {
	switch {
	case l.Port == 0:
		return true
	case l.IsRange():
		return port >= l.Port && port <= l.Last
	}
	return port == l.Port
}

// Target is where a backend's flows go, as the data plane's backend slot
// holds it (without the slot's generation and owner, which the edge
// allocates).
type Target struct {
	Addr  netip.Addr // nat: the backend; encap: its host's underlay address
	Guest netip.Addr // encap: the guest's private address
	VSID  uint32
	Port  uint16 // nat: backend port (0: the listener's)
	Mode  uint8  // ModeEncap or ModeNAT
	Down  bool   // failed its health checks
}

// Backend is a backend of a pool's table.
type Backend struct {
	ID     string // "service/pool/key": the slot's identity on the edge
	Spec   model.Backend
	Weight uint32
	Target Target
}

// Pool is a pool's table and its backends.
type Pool struct {
	ID      string // "service/pool": the table slot's identity
	Service string
	Name    string
	M       uint64
	// Built is the table before failures, Table after the down backends
	// were failed (Table.Fail): the one the data plane holds; Checksum is
	// Table's.
	Built, Table *maglev.Table
	Checksum     uint64
	// Backends in the order of Table.Backends (Table.Entry indexes them).
	Backends []Backend
	Healthy  int // backends neither down nor drained
}

// Check is a backend to health-check.
type Check struct {
	Service, Pool, Backend string // Backend: model.Backend.Key()
	Mode                   string // model.ModeEncap or model.ModeNAT
	// Addr is the backend's address (nat) or its guest's (encap), on the
	// check's port, else the backend's, else the first single-port or
	// range listener's of the pool.
	Addr netip.AddrPort
	// Underlay and VSID: the guest's host and virtual subnet (encap).
	Underlay netip.Addr
	VSID     uint32
	// Addr6: an IPv6 VIP's encap backend, its guest's IPv6 address on
	// the same port (the edge checks it there from its IPv6 health-check
	// address, else at Addr).
	Addr6 netip.AddrPort
	Check model.HealthCheck
}

// Plan is what an edge programs for the services.
type Plan struct {
	Seed uint32
	// Pools of the programmed services, sorted by ID.
	Pools []*Pool
	// Listeners: the pool ID each listener's flows go to.
	Listeners map[Listener]string
	VIPs      map[netip.Addr]bool
	// Services programmed (not left out), by name, and their VIPs.
	Services map[string]netip.Addr
	NAT      bool // some programmed service is in nat mode
	// NATBackends: the reply path's stateless fallback (natBackends),
	// nat backends of exactly one VIP and port; NATLeftOut counts those
	// left out as ambiguous (or over capacity).
	NATBackends map[NATBackend]netip.AddrPort
	NATLeftOut  int
	Checks      []Check
	// Problems: backends left out, services left out, checks without a
	// port. They are reported in the edge's status (Problems.Strings); the
	// rest is programmed.
	Problems Problems
}

// Pool finds a pool by ID.
func (p *Plan) Pool(id string) *Pool {
	i := sort.Search(len(p.Pools), func(i int) bool { return p.Pools[i].ID >= id })
	if i < len(p.Pools) && p.Pools[i].ID == id {
		return p.Pools[i]
	}
	return nil
}

// Placement is where an encap backend's guest lives.
type Placement struct {
	Underlay netip.Addr // the host's underlay address
	Guest    netip.Addr // the guest's private address
	VSID     uint32
	// Guest6 is the guest's IPv6 address (its address6), if it has one:
	// an IPv6 VIP's health checks reach the backend there.
	Guest6 netip.Addr
}

// Resolver places encap backends (host/guest names) on the underlay.
type Resolver interface {
	// Place returns the guest's placement, or ErrNoHost / ErrNoGuest.
	Place(host, guest string) (Placement, error)
}

var (
	ErrNoHost  = errors.New("host does not exist")
	ErrNoGuest = errors.New("guest does not exist")
)

// Hosts is a Resolver over model hosts (the CLI's; the edge daemon has its
// own compact index).
type Hosts map[string]*model.Host

// NewHosts indexes hosts by name.
func NewHosts(hs []model.Host) Hosts {
	out := Hosts{}
	for i := range hs {
		out[hs[i].Name] = &hs[i]
	}
	return out
}

func (h Hosts) Place(host, guest string) (Placement, error) {
	x, ok := h[host]
	if !ok {
		return Placement{}, ErrNoHost
	}
	for _, g := range x.Guests {
		if g.Name == guest && g.Address.Is4() {
			return Placement{Underlay: x.Underlay, Guest: g.Address, VSID: g.VSID, Guest6: g.Address6}, nil
		}
	}
	return Placement{}, ErrNoGuest
}

// Input is what a plan is built from.
type Input struct {
	Services map[string]*model.Service
	Health   map[string]*model.Health // by service name; absent: all up
	Hosts    Resolver
	Seed     uint32 // the cluster's flow hash seed (also seeds Maglev)
	// Tables, if set, memoizes the pools' tables across builds: a pool
	// whose backends, weights, M, seed and down set are unchanged reuses
	// its tables instead of rebuilding them (a table of M = 65537 costs a
	// few ms; an edge replans every pool on every change).
	Tables *Tables
	// ListenersMax is the edge's single-port listener capacity (its
	// --listener-max); 0, or more than ListenersMax: ListenersMax.
	ListenersMax int
	// BackendsMax is the edge's backend capacity (its --backend-max:
	// backend slots, nat reply fallback entries); 0, or more than
	// BackendsMax: BackendsMax.
	BackendsMax int
}

// capped is v, or ceiling when v is 0 or above it.
func capped(v, ceiling int) int {
	if v <= 0 || v > ceiling {
		return ceiling
	}
	return v
}

// Tables memoizes Maglev tables by everything they are built from. Build
// keeps the entries the plan used and drops the rest, so it holds the
// current pools' tables only. Tables are never modified once built.
type Tables struct {
	mu        sync.Mutex
	cur, next map[string]tables
}

type tables struct {
	built, failed *maglev.Table
	sum           uint64
}

// NewTables returns an empty memo.
func NewTables() *Tables { return &Tables{cur: map[string]tables{}} }

// get returns the tables of a pool, building them on a miss.
func (c *Tables) get(bs []maglev.Backend, m uint64, seed uint32, down map[string]bool) (tables, error) {
	build := func() (tables, error) {
		built, err := maglev.Build(bs, m, seed)
		if err != nil {
			return tables{}, err
		}
		t := tables{built: built, failed: built}
		if len(down) > 0 {
			t.failed = built.Fail(down)
		}
		t.sum = t.failed.Checksum()
		return t, nil
	}
	if c == nil {
		return build()
	}
	var k strings.Builder
	fmt.Fprintf(&k, "%d/%d", m, seed)
	for _, b := range bs {
		fmt.Fprintf(&k, "|%q:%d:%t", b.Key, b.Weight, down[b.Key])
	}
	key := k.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.cur[key]
	if !ok {
		var err error
		if t, err = build(); err != nil {
			return t, err
		}
	}
	if c.next == nil {
		c.next = map[string]tables{}
	}
	c.next[key] = t
	return t, nil
}

// sweep keeps what the last build used.
func (c *Tables) sweep() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.next = c.next, nil
	if c.cur == nil {
		c.cur = map[string]tables{}
	}
}

// Build computes the plan. Services are taken in name order; one that
// would take the edge over a capacity (listener entries, port ranges per
// VIP and protocol, table or backend slots) is left out whole and
// reported, so what an edge holds does not depend on the order of
// events, and every edge leaves out the same services.
func Build(in Input) *Plan {
	p := &Plan{Seed: in.Seed, Listeners: map[Listener]string{}, VIPs: map[netip.Addr]bool{}, Services: map[string]netip.Addr{}}
	names := make([]string, 0, len(in.Services))
	for n := range in.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	exact, exact6 := 0, 0 // single-port listener entries, IPv4 and IPv6 VIPs' (maps of their own)
	listenersMax, backendsMax := capped(in.ListenersMax, ListenersMax), capped(in.BackendsMax, BackendsMax)
	listeners6Max := min(listenersMax, Listeners6Max)
	backends := 0
	for _, name := range names {
		svc := in.Services[name]
		pools, listeners, problems := buildService(svc, in.Health[name], in.Hosts, in.Seed, in.Tables)
		p.Problems = append(p.Problems, problems...)
		n := 0
		for l := range listeners {
			if !l.IsRange() && l.Port != 0 {
				n++
			}
		}
		if svc.VIP.Is6() {
			if exact6+n > listeners6Max {
				p.Problems = append(p.Problems, Problem{Kind: ProblemCapacity, Service: name,
					Detail: fmt.Sprintf("its %d listener entries would take the edge to %d of an IPv6 VIP, the data plane holds %d", n, exact6+n, listeners6Max)})
				continue
			}
		} else if exact+n > listenersMax {
			p.Problems = append(p.Problems, Problem{Kind: ProblemCapacity, Service: name,
				Detail: fmt.Sprintf("its %d listener entries would take the edge to %d, the data plane holds %d", n, exact+n, listenersMax)})
			continue
		}
		if vp, k := rangesOver(p.Listeners, listeners); k > 0 {
			p.Problems = append(p.Problems, Problem{Kind: ProblemCapacity, Service: name,
				Detail: fmt.Sprintf("%s would have %d port ranges, the data plane holds %d per VIP and protocol", vp, k, RangesMax)})
			continue
		}
		nb := 0
		for _, pl := range pools {
			nb += len(pl.Backends)
		}
		if len(p.Pools)+len(pools) > TablesMax {
			p.Problems = append(p.Problems, Problem{Kind: ProblemCapacity, Service: name,
				Detail: fmt.Sprintf("its %d pools would take the edge to %d tables, the data plane holds %d", len(pools), len(p.Pools)+len(pools), TablesMax)})
			continue
		}
		if backends+nb > backendsMax {
			p.Problems = append(p.Problems, Problem{Kind: ProblemCapacity, Service: name,
				Detail: fmt.Sprintf("its %d backends would take the edge to %d backend slots, the data plane holds %d", nb, backends+nb, backendsMax)})
			continue
		}
		if svc.VIP.Is6() {
			exact6 += n
		} else {
			exact += n
		}
		backends += nb
		for l, id := range listeners {
			p.Listeners[l] = id
		}
		p.Pools = append(p.Pools, pools...)
		p.Services[name] = svc.VIP
		p.VIPs[svc.VIP] = true
		if svc.Mode == model.ModeNAT {
			p.NAT = true
		}
		for _, pl := range pools {
			ch, err := checks(svc, pl, in.Hosts)
			if err != nil {
				p.Problems = append(p.Problems, Problem{Kind: ProblemCheck, Service: name, Pool: pl.Name, Detail: err.Error()})
			}
			p.Checks = append(p.Checks, ch...)
		}
	}
	sort.Slice(p.Pools, func(i, j int) bool { return p.Pools[i].ID < p.Pools[j].ID })
	p.NATBackends, p.NATLeftOut = natBackends(p, capped(in.BackendsMax, NATBackendsMax))
	in.Tables.sweep()
	return p
}

// buildService builds a service's pools and listeners. A pool that cannot
// be built (all its backends unresolvable is not such a case: it gets an
// empty table) is reported and its listeners left out.
func buildService(svc *model.Service, h *model.Health, hosts Resolver, seed uint32, memo *Tables) ([]*Pool, map[Listener]string, Problems) {
	var problems Problems
	m := uint64(svc.TableSize)
	if m == 0 {
		m = model.DefaultTableSize
	}
	mode := uint8(ModeEncap)
	if svc.Mode == model.ModeNAT {
		mode = ModeNAT
	}
	built := map[string]*Pool{}
	var pools []*Pool
	for _, pool := range svc.Pools {
		pl := &Pool{ID: svc.Name + "/" + pool.Name, Service: svc.Name, Name: pool.Name, M: m}
		var mb []maglev.Backend
		targets := map[string]Backend{}
		for _, b := range pool.Backends {
			t, err := target(hosts, svc, b)
			if err != nil {
				problems = append(problems, Problem{Kind: ProblemBackend, Service: svc.Name, Pool: pool.Name, Backend: b.Key(), Detail: err.Error()})
				continue // an unresolvable backend gets no slots
			}
			t.Mode = mode
			targets[b.Key()] = Backend{ID: pl.ID + "/" + b.Key(), Spec: b, Weight: b.W(), Target: t}
			mb = append(mb, maglev.Backend{Key: b.Key(), Weight: b.W()})
		}
		down := map[string]bool{}
		if h != nil {
			down = h.DownSet(pool.Name)
		}
		tbl, err := memo.get(mb, m, seed, down)
		if err != nil {
			problems = append(problems, Problem{Kind: ProblemTable, Service: svc.Name, Pool: pool.Name, Detail: err.Error()})
			continue
		}
		pl.Built, pl.Table, pl.Checksum = tbl.built, tbl.failed, tbl.sum
		for _, b := range pl.Table.Backends {
			be := targets[b.Key]
			be.Target.Down = down[b.Key]
			if !be.Target.Down && b.Weight > 0 {
				pl.Healthy++
			}
			pl.Backends = append(pl.Backends, be)
		}
		built[pool.Name] = pl
		pools = append(pools, pl)
	}
	listeners := map[Listener]string{}
	for _, l := range svc.Listeners {
		pl := built[l.Pool]
		if pl == nil {
			continue // its pool failed to build: reported above
		}
		// One entry per listener: a range is looked up as a range.
		dl := Listener{VIP: svc.VIP, Proto: protoNum[l.Protocol], Port: l.Port}
		if l.Last() > l.Port {
			dl.Last = l.Last()
		}
		listeners[dl] = pl.ID
	}
	return pools, listeners, problems
}

// target resolves a backend to its data-plane form; an error says what is
// wrong with the backend (Problem adds the service and backend).
func target(hosts Resolver, svc *model.Service, b model.Backend) (Target, error) {
	if svc.Mode == model.ModeNAT {
		return Target{Addr: b.Address, Port: b.Port}, nil
	}
	if hosts == nil {
		return Target{}, errors.New("no hosts to place it on")
	}
	pl, err := hosts.Place(b.Host, b.Guest)
	switch {
	case errors.Is(err, ErrNoHost):
		return Target{}, fmt.Errorf("host %q does not exist", b.Host)
	case errors.Is(err, ErrNoGuest):
		return Target{}, fmt.Errorf("host %s has no guest %q", b.Host, b.Guest)
	case err != nil:
		return Target{}, err
	}
	return Target{Addr: pl.Underlay, Guest: pl.Guest, VSID: pl.VSID}, nil
}

// CheckPort is the port the edges check backend b of pool on (the check's
// port, else the backend's, else the first fixed-port listener's of the
// pool; 0: none). The agent uses it too: an encap backend is reachable
// through the tunnel on its checked ports only (bpf/lib/agenthc.h).
func CheckPort(svc *model.Service, pool *model.Pool, b model.Backend) uint16 {
	if pool.Health == nil {
		return 0
	}
	if pool.Health.Port != 0 {
		return pool.Health.Port
	}
	if b.Port != 0 {
		return b.Port
	}
	for _, l := range svc.Listeners {
		if l.Pool == pool.Name && !l.AnyPort() {
			return l.Port
		}
	}
	return 0
}

// CheckProto is the IP protocol of a check through the tunnel: 17 for a
// udp check, 6 for tcp, http and https, 0 for a command (which runs on the
// edge and never reaches an encap backend).
func CheckProto(h *model.HealthCheck) uint8 {
	switch h.Type {
	case model.CheckUDP:
		return 17
	case model.CheckTCP, model.CheckHTTP, model.CheckHTTPS:
		return 6
	}
	return 0
}

// checks lists the health-check targets of a pool with a check (hosts:
// an IPv6 VIP's encap backends' IPv6 addresses).
func checks(svc *model.Service, pl *Pool, hosts Resolver) ([]Check, error) {
	pool, _ := svc.Pool(pl.Name)
	if pool == nil || pool.Health == nil {
		return nil, nil
	}
	resolved := map[string]Target{}
	for _, b := range pl.Backends {
		resolved[b.Spec.Key()] = b.Target
	}
	var out []Check
	for _, b := range pool.Backends {
		port := CheckPort(svc, pool, b)
		if port == 0 {
			return out, errors.New("the health check needs a port (the pool only has any-port listeners)")
		}
		c := Check{Service: svc.Name, Pool: pool.Name, Backend: b.Key(), Mode: svc.Mode, Check: *pool.Health}
		if svc.Mode == model.ModeEncap {
			t, ok := resolved[b.Key()]
			if !ok {
				continue // unresolvable: reported by buildService
			}
			c.Addr, c.Underlay, c.VSID = netip.AddrPortFrom(t.Guest, port), t.Addr, t.VSID
			if svc.VIP.Is6() && hosts != nil {
				if pl, err := hosts.Place(b.Host, b.Guest); err == nil && pl.Guest6.Is6() {
					c.Addr6 = netip.AddrPortFrom(pl.Guest6, port)
				}
			}
		} else {
			c.Addr = netip.AddrPortFrom(b.Address, port)
		}
		out = append(out, c)
	}
	return out, nil
}

// rangesOver finds a (VIP, protocol) that the listeners of have and add
// together give more port ranges than the data plane holds: it and the
// count, or n = 0.
func rangesOver(have, add map[Listener]string) (string, int) {
	type vp struct {
		vip   netip.Addr
		proto uint8
	}
	count := map[vp]int{}
	for _, m := range []map[Listener]string{have, add} {
		for l := range m {
			if l.IsRange() {
				count[vp{l.VIP, l.Proto}]++
			}
		}
	}
	for l := range add {
		if n := count[vp{l.VIP, l.Proto}]; l.IsRange() && n > RangesMax {
			return fmt.Sprintf("%v protocol %d", l.VIP, l.Proto), n
		}
	}
	return "", 0
}

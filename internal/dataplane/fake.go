package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/azgate/azgate/internal/fwplan"
)

// FakeEdge is an in-memory EdgeMaps for testing reconcilers without a
// kernel.
type FakeEdge struct {
	mu       sync.Mutex
	Config   EdgeConfig
	RouteMap map[netip.Addr]Route
	Counters map[uint32]Counters
	Capacity int // 0: unlimited
	// SpoofOwn and SpoofUnderlay are the last SetSpoofPrefixes.
	SpoofOwn, SpoofUnderlay []netip.Prefix
	// LimitMap holds the rate limits (LimitMaps), normalised.
	LimitMap map[netip.Addr]Limits
	// FW holds the firewall maps (firewall.go).
	FW FakeFirewall
	// Ul6Keep is the last ForgetUl6Hosts' keep; Ul6Forgets counts the
	// calls.
	Ul6Keep    func(netip.Addr) bool
	Ul6Forgets int
}

// PutLimits records an address's limits (a zero Limits deletes them).
func (f *FakeEdge) PutLimits(a netip.Addr, l Limits) error {
	if l.IsZero() {
		return f.DeleteLimits(a)
	}
	if !a.Is4() && !plain6(a) {
		return fmt.Errorf("limits of %v: not an IPv4 or IPv6 address", a)
	}
	if _, err := limitsTo(l); err != nil {
		return fmt.Errorf("limits of %v: %w", a, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.LimitMap == nil {
		f.LimitMap = map[netip.Addr]Limits{}
	}
	f.LimitMap[a] = l.Normal()
	return nil
}

// DeleteLimits removes an address's limits.
func (f *FakeEdge) DeleteLimits(a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.LimitMap, a)
	return nil
}

// Limits lists the recorded limits.
func (f *FakeEdge) Limits() (map[netip.Addr]Limits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[netip.Addr]Limits, len(f.LimitMap))
	for a, l := range f.LimitMap {
		out[a] = l
	}
	return out, nil
}

var _ LimitMaps = (*FakeEdge)(nil)

// ApplyFirewall applies a firewall diff to FW.
func (f *FakeEdge) ApplyFirewall(d fwplan.Diff) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.FW.ApplyFirewall(d)
}

// FirewallStats reads FW's counters.
func (f *FakeEdge) FirewallStats(idx uint32) (Count, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.FW.FirewallStats(idx)
}

var _ FirewallMaps = (*FakeEdge)(nil)

// SetSpoofPrefixes records the anti-spoofing prefixes.
func (f *FakeEdge) SetSpoofPrefixes(own, underlay []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.SpoofOwn, f.SpoofUnderlay = slices.Clone(own), slices.Clone(underlay)
	return nil
}

// ForgetUl6Hosts records keep (the fake names no host: Ul6Keep is for
// tests to ask).
func (f *FakeEdge) ForgetUl6Hosts(keep func(netip.Addr) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ul6Keep = keep
	f.Ul6Forgets++
	return nil
}

var _ EdgeMaps = (*FakeEdge)(nil)
var _ Ul6HostMaps = (*FakeEdge)(nil)

// NewFakeEdge returns an empty fake.
func NewFakeEdge() *FakeEdge {
	return &FakeEdge{RouteMap: map[netip.Addr]Route{}, Counters: map[uint32]Counters{}}
}

func (f *FakeEdge) SetConfig(c EdgeConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Config = c
	return nil
}

func (f *FakeEdge) PutRoutes(rs map[netip.Addr]Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, r := range rs {
		if _, ok := f.RouteMap[a]; !ok && f.Capacity > 0 && len(f.RouteMap) >= f.Capacity {
			return fmt.Errorf("route map full (%d)", f.Capacity)
		}
		// A previous binding as the real map takes it (routeTo).
		if r.Host.Is6() && !validUl6(r.Host) || r.Host.Is4() && isUl6Name(ip4word(r.Host)) {
			return fmt.Errorf("route for %v: host %v refused", a, r.Host)
		}
		if r.Drifts() && (!r.PrevHost.Is4() && !validUl6(r.PrevHost) || r.PrevVSID > 0xFFFFFF) || !r.Drifts() && (r.PrevVSID != 0 || r.PrevAll) {
			return fmt.Errorf("route for %v: previous binding %v VSID %d refused", a, r.PrevHost, r.PrevVSID)
		}
		f.RouteMap[a] = r
	}
	return nil
}

func (f *FakeEdge) DeleteRoutes(as []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range as {
		delete(f.RouteMap, a)
	}
	return nil
}

func (f *FakeEdge) RangeRoutes(fn func(netip.Addr, Route) bool) error {
	for a, r := range f.Routes() {
		if !fn(a, r) {
			break
		}
	}
	return nil
}

func (f *FakeEdge) Route(a netip.Addr) (Route, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.RouteMap[a]
	return r, ok, nil
}

// RouteCount is how many routes the fake holds (without Routes' copy).
func (f *FakeEdge) RouteCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.RouteMap)
}

// Routes returns a copy of the routes.
func (f *FakeEdge) Routes() map[netip.Addr]Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[netip.Addr]Route, len(f.RouteMap))
	for a, r := range f.RouteMap {
		out[a] = r
	}
	return out
}

func (f *FakeEdge) ResetEIPStats(idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.Counters, idx)
	return nil
}

func (f *FakeEdge) EIPStats(idx uint32) (Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Counters[idx], nil
}

// ReadEIPStats reads slots 0..len(out)-1.
func (f *FakeEdge) ReadEIPStats(out []Counters) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range out {
		out[i] = f.Counters[uint32(i)]
	}
	return nil
}

func (f *FakeEdge) Stats() (map[string]Count, error) { return map[string]Count{}, nil }

// ErrInjected is the error Faulty maps return.
var ErrInjected = errors.New("injected data-plane failure")

// FaultyEdge wraps an EdgeMaps and fails writes while Fail is set.
type FaultyEdge struct {
	EdgeMaps
	mu   sync.Mutex
	fail bool
}

// SetFail turns failures on or off.
func (f *FaultyEdge) SetFail(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

func (f *FaultyEdge) failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail
}

func (f *FaultyEdge) PutRoutes(rs map[netip.Addr]Route) error {
	if f.failing() {
		return ErrInjected
	}
	return f.EdgeMaps.PutRoutes(rs)
}

func (f *FaultyEdge) DeleteRoutes(as []netip.Addr) error {
	if f.failing() {
		return ErrInjected
	}
	return f.EdgeMaps.DeleteRoutes(as)
}

// FakeAgent is an in-memory AgentMaps.
type FakeAgent struct {
	mu       sync.Mutex
	Svc      map[AgentService]bool
	IfAddrs  []IfAddr
	Config   AgentConfig
	Local    map[netip.Prefix][]LocalRule
	EIPMap   map[netip.Addr]AgentEIP
	Counters map[uint32]Counters
	// HealthGuests: the last SetHealthGuests.
	HealthGuests []HealthGuest
	// GroupMap: the edge groups in use; OnGroup is called after each
	// SetGroup (tests time it).
	GroupMap map[uint16]AgentGroup
	OnGroup  func(idx uint16, g AgentGroup)
}

// SetGroup writes a group slot, its generation as the data plane's.
func (f *FakeAgent) SetGroup(idx uint16, g AgentGroup) error {
	if err := checkAgentGroup(idx, g); err != nil {
		return err
	}
	f.mu.Lock()
	if f.GroupMap == nil {
		f.GroupMap = map[uint16]AgentGroup{}
	}
	g.Members = slices.Clone(g.Members)
	g.Gen = GroupGen(f.GroupMap[idx], g)
	if g.Set == "" && len(g.Members) == 0 {
		// An empty slot keeps its generation for the next set.
		f.GroupMap[idx] = AgentGroup{Gen: g.Gen}
	} else {
		f.GroupMap[idx] = g
	}
	on := f.OnGroup
	f.mu.Unlock()
	if on != nil {
		on(idx, g)
	}
	return nil
}

// Groups returns the slots in use.
func (f *FakeAgent) Groups() (map[uint16]AgentGroup, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[uint16]AgentGroup{}
	for i, g := range f.GroupMap {
		if g.Set != "" || len(g.Members) > 0 {
			out[i] = g
		}
	}
	return out, nil
}

var _ AgentMaps = (*FakeAgent)(nil)
var _ HealthGuests = (*FakeAgent)(nil)

// SetHealthGuests records the checked ports, refusing what the agent
// refuses.
func (f *FakeAgent) SetHealthGuests(g []HealthGuest) error {
	for _, x := range g {
		if err := checkHealthGuest(x); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.HealthGuests = append([]HealthGuest(nil), g...)
	return nil
}

// NewFakeAgent returns an empty fake.
func NewFakeAgent() *FakeAgent {
	return &FakeAgent{EIPMap: map[netip.Addr]AgentEIP{}, Counters: map[uint32]Counters{}, Svc: map[AgentService]bool{}}
}

func (f *FakeAgent) SetConfig(c AgentConfig) error {
	if err := checkAgentConfig(c); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Config = c
	return nil
}

func (f *FakeAgent) SetLocalAllow(p map[netip.Prefix][]LocalRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Local = p
	return nil
}

func (f *FakeAgent) PutEIP(e AgentEIP) error {
	if err := checkAgentEIP(e); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.EIPMap[e.EIP] = e
	return nil
}

func (f *FakeAgent) DeleteEIP(a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.EIPMap, a)
	return nil
}

func (f *FakeAgent) EIPs() (map[netip.Addr]AgentEIP, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[netip.Addr]AgentEIP{}
	for a, e := range f.EIPMap {
		out[a] = e
	}
	return out, nil
}

func (f *FakeAgent) ResetEIPStats(idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.Counters, idx)
	return nil
}

func (f *FakeAgent) EIPStats(idx uint32) (Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Counters[idx], nil
}

func (f *FakeAgent) Stats() (map[string]Count, error) { return map[string]Count{}, nil }

// PutService adds or replaces the entry of the data plane's key (VIP,
// guest, protocol, port), as agent_svc and agent_svc6 do, and refuses
// what the real one refuses (checkAgentService).
func (f *FakeAgent) PutService(s AgentService) error {
	if err := checkAgentService(s); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteService(s)
	f.Svc[s] = true
	return nil
}

func (f *FakeAgent) DeleteService(s AgentService) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteService(s)
	return nil
}

func (f *FakeAgent) deleteService(s AgentService) {
	for o := range f.Svc {
		if o.VIP == s.VIP && o.Guest == s.Guest && o.Proto == s.Proto && o.VPort == s.VPort {
			delete(f.Svc, o)
		}
	}
}

func (f *FakeAgent) Services() ([]AgentService, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []AgentService
	for s := range f.Svc {
		out = append(out, s)
	}
	return out, nil
}

// FakeLB is an in-memory LBMaps (with FakeEdge's EdgeMaps), one fake per
// map.
type FakeLB struct {
	*FakeEdge
	*FakeVIPs
	*FakeListeners
	*FakeTables
	*FakeBackends
	*FakeNATBackends
	*FakeLBConfig
}

var _ LBMaps = (*FakeLB)(nil)

// NewFakeLB returns an empty fake with load balancing.
func NewFakeLB() *FakeLB {
	return &FakeLB{FakeEdge: NewFakeEdge(), FakeVIPs: &FakeVIPs{VIPSet: map[netip.Addr]bool{}},
		FakeListeners: &FakeListeners{ListenerM: map[Listener]ListenerValue{}},
		FakeTables:    &FakeTables{Tables: map[uint32][]uint32{}, TableOwn: map[uint32]uint64{}},
		FakeBackends:  &FakeBackends{BackendM: map[uint32]LBBackend{}}, FakeLBConfig: &FakeLBConfig{ARP: map[int]string{}},
		FakeNATBackends: &FakeNATBackends{NATM: map[NATBackend]netip.AddrPort{}}}
}

// FakeNATBackends is an in-memory NATBackendMap.
type FakeNATBackends struct {
	nmu  sync.Mutex
	NATM map[NATBackend]netip.AddrPort
}

// PutNATBackend refuses what the real map refuses: a protocol neither TCP
// nor UDP, a VIP of another family than the backend's.
func (f *FakeNATBackends) PutNATBackend(b NATBackend, vip netip.AddrPort) error {
	if b.Proto != ProtoTCP && b.Proto != ProtoUDP {
		return fmt.Errorf("nat backend %v port %d: protocol %d is neither TCP nor UDP", b.Addr, b.Port, b.Proto)
	}
	if natFamily(b.Addr, vip.Addr()) == 0 {
		return fmt.Errorf("nat backend %v port %d: VIP %v is not of the backend's family", b.Addr, b.Port, vip)
	}
	f.nmu.Lock()
	defer f.nmu.Unlock()
	f.NATM[b] = vip
	return nil
}
func (f *FakeNATBackends) DeleteNATBackend(b NATBackend) error {
	f.nmu.Lock()
	defer f.nmu.Unlock()
	delete(f.NATM, b)
	return nil
}
func (f *FakeNATBackends) NATBackends() (map[NATBackend]netip.AddrPort, error) {
	f.nmu.Lock()
	defer f.nmu.Unlock()
	out := make(map[NATBackend]netip.AddrPort, len(f.NATM))
	for k, v := range f.NATM {
		out[k] = v
	}
	return out, nil
}

// FakeVIPs is an in-memory VIPMap.
type FakeVIPs struct {
	vmu    sync.Mutex
	VIPSet map[netip.Addr]bool
}

// PutVIP refuses what the real one refuses (vipKeyOf): a VIP is IPv4 or a
// plain IPv6 address.
func (f *FakeVIPs) PutVIP(a netip.Addr) error {
	if _, err := vipKeyOf(a); err != nil {
		return fmt.Errorf("VIP: %w", err)
	}
	f.vmu.Lock()
	defer f.vmu.Unlock()
	f.VIPSet[a] = true
	return nil
}
func (f *FakeVIPs) DeleteVIP(a netip.Addr) error {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	delete(f.VIPSet, a)
	return nil
}
func (f *FakeVIPs) VIPs() ([]netip.Addr, error) {
	f.vmu.Lock()
	defer f.vmu.Unlock()
	var out []netip.Addr
	for a := range f.VIPSet {
		out = append(out, a)
	}
	return out, nil
}

// FakeListeners is an in-memory ListenerMap.
type FakeListeners struct {
	lmu       sync.Mutex
	ListenerM map[Listener]ListenerValue
}

// PutListener refuses what the real one refuses (lmapsOf): a listener of
// an IPv4 or a plain IPv6 VIP.
func (f *FakeListeners) PutListener(l Listener, v ListenerValue) error {
	if !l.VIP.Is4() && !plain6(l.VIP) {
		return fmt.Errorf("listener %v: a VIP is an IPv4 or a global IPv6 address", l.VIP)
	}
	f.lmu.Lock()
	defer f.lmu.Unlock()
	f.ListenerM[l] = v
	return nil
}
func (f *FakeListeners) DeleteListener(l Listener) error {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	delete(f.ListenerM, l)
	return nil
}
func (f *FakeListeners) Listeners() (map[Listener]ListenerValue, error) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	out := map[Listener]ListenerValue{}
	for k, v := range f.ListenerM {
		out[k] = v
	}
	return out, nil
}

// FakeTables is an in-memory TableMap.
type FakeTables struct {
	tmu      sync.Mutex
	Tables   map[uint32][]uint32
	TableOwn map[uint32]uint64
}

func (f *FakeTables) SetTable(slot uint32, entries []uint32) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if len(entries) == 0 {
		delete(f.Tables, slot)
		return nil
	}
	f.Tables[slot] = append([]uint32(nil), entries...)
	return nil
}
func (f *FakeTables) DeleteTable(slot uint32) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	delete(f.Tables, slot)
	return nil
}
func (f *FakeTables) SetTableOwner(slot uint32, owner uint64) error {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.TableOwn[slot] = owner
	return nil
}
func (f *FakeTables) TableOwners() (map[uint32]uint64, error) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	out := map[uint32]uint64{}
	for k, v := range f.TableOwn {
		if v != 0 {
			out[k] = v
		}
	}
	return out, nil
}

// FakeBackends is an in-memory BackendMap.
type FakeBackends struct {
	bmu      sync.Mutex
	BackendM map[uint32]LBBackend
	// BackendC are the slots' counters (BackendCounters; absent: 0).
	BackendC map[uint32]LBCounters
}

func (f *FakeBackends) SetBackend(idx uint32, b LBBackend) error {
	// An encap backend's host as the real map takes it (Edge.hostWord).
	if b.Mode == ModeEncap && (b.Addr.Is6() && !validUl6(b.Addr) || b.Addr.Is4() && isUl6Name(ip4word(b.Addr))) {
		return fmt.Errorf("backend %d: host %v refused", idx, b.Addr)
	}
	f.bmu.Lock()
	defer f.bmu.Unlock()
	f.BackendM[idx] = b
	return nil
}
func (f *FakeBackends) Backend(idx uint32) (LBBackend, error) {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	return f.BackendM[idx], nil
}
func (f *FakeBackends) Backends() (map[uint32]LBBackend, error) {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	out := map[uint32]LBBackend{}
	for k, v := range f.BackendM {
		if v.Owner != 0 {
			out[k] = v
		}
	}
	return out, nil
}
func (f *FakeBackends) BackendCounters(idx uint32) (LBCounters, error) {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	return f.BackendC[idx], nil
}
func (f *FakeBackends) ResetBackendCounters(uint32) error { return nil }

// FakeLBConfig is an in-memory LBConfigMap.
type FakeLBConfig struct {
	cmu sync.Mutex
	LB  LBConfig
	ARP map[int]string
}

func (f *FakeLBConfig) SetLBConfig(c LBConfig) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	f.LB = c
	return nil
}
func (f *FakeLBConfig) SetARP(ifindex int, mac net.HardwareAddr) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	f.ARP[ifindex] = mac.String()
	return nil
}

func (f *FakeAgent) SetIfAddrs(a []IfAddr) error {
	if err := checkIfAddrs(a); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.IfAddrs = append([]IfAddr(nil), a...)
	return nil
}

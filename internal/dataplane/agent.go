package dataplane

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Agent is a loaded host-agent data plane: xdp_agent_underlay on the
// underlay interface, xdp_agent_guest on guest interfaces, shared maps.
type Agent struct {
	objs    agentObjects
	pinDir  string
	links   map[string]link.Link
	cfgMu   sync.Mutex // the config entry is read, modified and written
	upgrade UpgradeReport
	ul6Once sync.Once
	ul6     ul6Names // the IPv6 underlay edges' names (ul6.go; names())
}

// names is the agent's ul6Names over its ul6_hosts: the edges it reaches
// over an IPv6 underlay, named in agent_edge_set, agent_groups and the
// flows' edge as the edge names its IPv6 hosts.
func (a *Agent) names() *ul6Names {
	a.ul6Once.Do(func() { a.ul6.m, a.ul6.peer = a.objs.Ul6Hosts, "edge" })
	return &a.ul6
}

// edgeKey is agent_edge_set's key of edge e: its IPv4 underlay address,
// or an IPv6 one's name (ul6_hosts).
func (a *Agent) edgeKey(e netip.Addr) (edgeEipKey, error) {
	w, err := a.names().word(e)
	if err != nil {
		return edgeEipKey{}, err
	}
	var k edgeEipKey
	k.Addr.A[0], k.Family = w, 2
	return k, nil
}

var _ AgentMaps = (*Agent)(nil)

// LoadAgent loads the agent programs and maps (reusing pinned ones, or
// migrating them when this version's layout differs: upgrade.go).
func LoadAgent(o LoadOptions) (*Agent, error) {
	spec, err := loadAgent()
	if err != nil {
		return nil, err
	}
	return loadAgentSpec(spec, o)
}

// agentEIPSized are the agent maps LoadOptions.AgentEIPMax sizes: an entry
// per EIP of the host's guests (and per guest with one), their counters
// and bandwidth buckets (indexed by the EIP's stats_idx, below
// AgentEIPMax) and their bandwidth limits.
var agentEIPSized = []string{agentMapAgentEips, agentMapAgentGuests, agentMapEipStats, agentMapEipBwSlots, agentMapEipBw}

// agentCapacities applies o's capacity overrides to spec (an earlier
// release's object may lack some maps).
func agentCapacities(spec *ebpf.CollectionSpec, o LoadOptions) {
	size := func(n string, v uint32) {
		if m := spec.Maps[n]; m != nil && v > 0 {
			m.MaxEntries = v
		}
	}
	size(agentMapAgentFlows, o.AgentFlowMax)
	// The IPv6 flow table: a quarter of the IPv4 one's (AGENT_FLOW6_MAX
	// against AGENT_FLOW_MAX), its entries twice the size.
	if o.AgentFlowMax > 0 {
		size(agentMapAgentFlows6, max(o.AgentFlowMax/4, 1))
	}
	for _, n := range agentEIPSized {
		size(n, o.AgentEIPMax)
	}
}

// loadAgentSpec loads an agent object (this version's, or an earlier
// release's in the upgrade test) with o.
func loadAgentSpec(spec *ebpf.CollectionSpec, o LoadOptions) (*Agent, error) {
	agentCapacities(spec, o)
	if err := setBwClock(spec); err != nil {
		return nil, loadErr("agent", err)
	}
	up, opts, err := beginLoad(spec, o)
	if err != nil {
		return nil, loadErr("agent", err)
	}
	a := &Agent{pinDir: o.PinDir, links: map[string]link.Link{}}
	if err := loadInto(spec, opts, &a.objs); err != nil {
		up.close()
		return nil, loadErr("agent", err)
	}
	if a.upgrade, err = up.finish(progsOf(&a.objs)); err != nil {
		a.objs.Close()
		return nil, fmt.Errorf("upgrade agent data plane in %s: %w", o.PinDir, err)
	}
	return a, nil
}

// Upgrade reports what the load did with the pinned maps.
func (a *Agent) Upgrade() UpgradeReport { return a.upgrade }

// UnderlayProgram decapsulates NVGRE from edges.
func (a *Agent) UnderlayProgram() *ebpf.Program { return a.objs.XdpAgentUnderlay }

// GuestProgram encapsulates guests' replies.
func (a *Agent) GuestProgram() *ebpf.Program { return a.objs.XdpAgentGuest }

// AttachUnderlay attaches the decapsulating program to the underlay interface.
func (a *Agent) AttachUnderlay(ifname string) error {
	return a.attach(a.objs.XdpAgentUnderlay, ifname)
}

// AttachGuest attaches the encapsulating program to a guest interface.
func (a *Agent) AttachGuest(ifname string) error {
	return a.attach(a.objs.XdpAgentGuest, ifname)
}

func (a *Agent) attach(p *ebpf.Program, ifname string) error {
	l, err := attachXDP(p, ifname, a.pinDir)
	if l != nil {
		a.links[ifname] = l
	}
	return err
}

// Detach removes the program from an interface.
func (a *Agent) Detach(ifname string) error {
	if l, ok := a.links[ifname]; ok {
		delete(a.links, ifname)
		return l.Close()
	}
	if a.pinDir == "" {
		return nil
	}
	return detachXDP(ifname, a.pinDir)
}

// Attached lists the interfaces holding a pinned agent link.
func (a *Agent) Attached() []string { return attachedLinks(a.pinDir) }

// Close releases the daemon's handles; pinned links and maps stay.
func (a *Agent) Close() error {
	for _, l := range a.links {
		l.Close()
	}
	return a.objs.Close()
}

// checkEdgeAddr says what is wrong with an edge's underlay address as the
// agent names it ("" if nothing): an IPv4 address outside 0.0.0.0/8 (the
// names), or an IPv6 one an underlay takes (validUl6).
func checkEdgeAddr(e netip.Addr) string {
	switch {
	case e.Is4():
		if w := ip4word(e); w == 0 || isUl6Name(w) {
			return "0.0.0.0/8 is no edge's address"
		}
		return ""
	case validUl6(e):
		return ""
	}
	return "not an IPv4 or global unicast IPv6 address"
}

// checkAgentConfig is what SetConfig refuses before it writes anything
// (the fake agent refuses the same): an IPv6 underlay address that is no
// global unicast one, an edge address checkEdgeAddr refuses.
func checkAgentConfig(c AgentConfig) error {
	if c.Underlay.IsValid() && !c.Underlay.Is4() && !validUl6(c.Underlay) {
		return fmt.Errorf("underlay %v: not a global unicast IPv6 address", c.Underlay)
	}
	if c.ICMPSource6.IsValid() && !validUl6(c.ICMPSource6) {
		return fmt.Errorf("ICMPv6 source %v: not a global unicast IPv6 address", c.ICMPSource6)
	}
	for _, e := range c.Edges {
		if why := checkEdgeAddr(e); why != "" {
			return fmt.Errorf("edge %v: %s", e, why)
		}
	}
	return nil
}

// checkAgentGroup is what SetGroup refuses before it writes anything
// (the fake agent refuses the same).
func checkAgentGroup(idx uint16, g AgentGroup) error {
	if len(g.Members) > MaxGroupMembers {
		return fmt.Errorf("edge group %d (set %q): %d members, at most %d", idx, g.Set, len(g.Members), MaxGroupMembers)
	}
	for _, m := range g.Members {
		if why := checkEdgeAddr(m); why != "" {
			return fmt.Errorf("edge group %d (set %q): member %v: %s", idx, g.Set, m, why)
		}
	}
	return nil
}

// SetConfig writes the configuration and the set of edges NVGRE is
// accepted from (every edge of every set).
func (a *Agent) SetConfig(c AgentConfig) error {
	if err := checkAgentConfig(c); err != nil {
		return err
	}
	if len(c.Edges) > int(a.objs.AgentEdgeSet.MaxEntries()) {
		return fmt.Errorf("%d edges: the agent data plane holds at most %d", len(c.Edges), a.objs.AgentEdgeSet.MaxEntries())
	}
	var v agentAgentConfig
	switch {
	case c.Underlay.Is4():
		u, _, err := addrTo(c.Underlay)
		if err != nil {
			return err
		}
		v.Underlay = agentIpAddr(u)
	case c.Underlay.IsValid():
		// An IPv6 underlay: NVGRE over IPv6 taken to it, the outer
		// source toward the edges (named in ul6_hosts).
		if !validUl6(c.Underlay) {
			return fmt.Errorf("underlay %v: not a global unicast IPv6 address", c.Underlay)
		}
		if a.objs.Ul6Hosts == nil {
			return fmt.Errorf("underlay %v: this agent program has no IPv6 underlay", c.Underlay)
		}
		u, _, _ := addrTo(c.Underlay)
		v.Underlay6 = agentIpAddr(u)
	}
	if c.ICMPSource.IsValid() {
		s, _, err := addrTo(c.ICMPSource)
		if err != nil {
			return err
		}
		v.IcmpSrc = agentIpAddr(s)
	}
	if c.ICMPSource6.IsValid() {
		s, _, _ := addrTo(c.ICMPSource6)
		v.IcmpSrc6 = agentIpAddr(s)
	}
	v.HashSeed = c.HashSeed
	// Unread by this program (icmp_kinds holds the budgets, and
	// icmpBudgets bounds the rate), still written: the previous release's
	// program (testdata/prev) reads them from the same pinned map.
	v.IcmpRate = c.ICMPRate
	v.IcmpBurst = c.ICMPBurst
	v.GwMac = macTo(c.GatewayMAC)
	budgets, err := icmpBudgets(nil, c.ICMPRate, c.ICMPBurst)
	if err != nil {
		return err
	}
	if err := writeICMPBudgets(a.objs.IcmpKinds, budgets); err != nil {
		return err
	}

	// New edges are accepted before the config is published, gone ones
	// refused after.
	want := map[edgeEipKey]bool{}
	want6 := map[netip.Addr]bool{}
	for _, e := range c.Edges {
		k, err := a.edgeKey(e)
		if err != nil {
			return fmt.Errorf("edge %v: %w", e, err)
		}
		want[k] = true
		want6[e] = true
		if err := a.objs.AgentEdgeSet.Update(akey(k), uint32(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write edge set: %w", err)
		}
	}
	var old agentAgentConfig
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	if err := a.readCfg(&old); err == nil {
		v.NhGen = old.NhGen + 1
	}
	if err := a.writeCfg(&v); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	if err := deleteStale[agentEipKey, uint32](a.objs.AgentEdgeSet, func(k agentEipKey) bool { return want[ekey(k)] }); err != nil {
		return err
	}
	// The names of edges gone from every set are collected (after the
	// edge set refuses them).
	return a.names().forget(func(e netip.Addr) bool { return want6[e] })
}

// readCfg and writeCfg read and write agent_cfg's entry, of an earlier
// release's program too (the upgrade tests' and the bench's baseline
// objects): its entry ends before icmp_src6, or before underlay6, which
// it then has none of.
func (a *Agent) readCfg(v *agentAgentConfig) error {
	size := int(a.objs.AgentCfg.ValueSize())
	if size == binary.Size(v) {
		return a.objs.AgentCfg.Lookup(uint32(0), v)
	}
	b := make([]byte, binary.Size(v))
	if size > len(b) {
		return fmt.Errorf("agent_cfg: a value of %d bytes, more than this version's %d", size, len(b))
	}
	if err := a.objs.AgentCfg.Lookup(uint32(0), b[:size]); err != nil {
		return err
	}
	return binary.Read(bytes.NewReader(b), binary.LittleEndian, v)
}

func (a *Agent) writeCfg(v *agentAgentConfig) error {
	size := int(a.objs.AgentCfg.ValueSize())
	if size == binary.Size(v) {
		return a.objs.AgentCfg.Update(uint32(0), v, ebpf.UpdateAny)
	}
	if v.Underlay6 != (agentIpAddr{}) && size < int(unsafe.Offsetof(v.Underlay6))+binary.Size(v.Underlay6) {
		return fmt.Errorf("this agent program has no IPv6 underlay")
	}
	// (An earlier program's entry without icmp_src6 is written without
	// it: that program sends no ICMPv6 packet too big.)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
		return err
	}
	if size > buf.Len() {
		return fmt.Errorf("agent_cfg: a value of %d bytes, more than this version's %d", size, buf.Len())
	}
	return a.objs.AgentCfg.Update(uint32(0), buf.Bytes()[:size], ebpf.UpdateAny)
}

// Ul6Edges lists the names the agent gave the edges of its IPv6 underlay
// (index -> address), for tests and diagnostics.
func (a *Agent) Ul6Edges() (map[uint32]netip.Addr, error) { return a.names().list() }

// GroupGen is the generation a group slot takes when g replaces old: the
// same while every member of old stays and the set is the same (a flow
// keeps its edge), the next one when a member leaves or the slot changes
// set (flows of the slot are spread again by flow hash).
func GroupGen(old, g AgentGroup) uint16 {
	if old.Set != g.Set {
		return old.Gen + 1
	}
	for _, m := range old.Members {
		if !slices.Contains(g.Members, m) {
			return old.Gen + 1
		}
	}
	return old.Gen
}

// SetGroup writes slot idx of agent_groups: the live members of one edge
// set (an empty AgentGroup clears the slot). The generation is bumped
// when a member leaves (GroupGen). The value is written whole; a packet
// reading it meanwhile may see the old members with the new count, at
// worst one reply to a member that just left (or a zero address: counted
// in drop_no_edge).
func (a *Agent) SetGroup(idx uint16, g AgentGroup) error {
	if uint32(idx) >= a.objs.AgentGroups.MaxEntries() {
		return fmt.Errorf("edge group %d (set %q): the agent data plane holds %d groups", idx, g.Set, a.objs.AgentGroups.MaxEntries())
	}
	if err := checkAgentGroup(idx, g); err != nil {
		return err
	}
	var v agentAgentGroup
	if len(g.Set) >= len(v.Set) {
		return fmt.Errorf("edge group %d: set name %q longer than %d bytes", idx, g.Set, len(v.Set)-1)
	}
	for i, m := range g.Members {
		// An IPv6 underlay address by its name (ul6_hosts).
		w, err := a.names().word(m)
		if err != nil {
			return fmt.Errorf("edge group %d (set %q): member %v: %w", idx, g.Set, m, err)
		}
		v.Edges[i] = w
	}
	v.N = uint32(len(g.Members))
	copy(v.Set[:], g.Set)
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	var old agentAgentGroup
	if err := a.objs.AgentGroups.Lookup(uint32(idx), &old); err != nil {
		return fmt.Errorf("read edge group %d: %w", idx, err)
	}
	v.Gen = GroupGen(a.groupFrom(&old), g)
	if err := a.objs.AgentGroups.Update(uint32(idx), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write edge group %d (set %q): %w", idx, g.Set, err)
	}
	return nil
}

func (a *Agent) groupFrom(v *agentAgentGroup) AgentGroup {
	g := AgentGroup{Gen: v.Gen}
	if i := bytes.IndexByte(v.Set[:], 0); i >= 0 {
		g.Set = string(v.Set[:i])
	} else {
		g.Set = string(v.Set[:])
	}
	for i := uint32(0); i < v.N && i < MaxGroupMembers; i++ {
		g.Members = append(g.Members, a.names().addr(v.Edges[i]))
	}
	return g
}

// Groups reads back the slots of agent_groups in use (a set name or
// members).
func (a *Agent) Groups() (map[uint16]AgentGroup, error) {
	out := map[uint16]AgentGroup{}
	var k uint32
	var v agentAgentGroup
	it := a.objs.AgentGroups.Iterate()
	for it.Next(&k, &v) {
		if g := a.groupFrom(&v); g.Set != "" || len(g.Members) > 0 {
			out[uint16(k)] = g
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read edge groups: %w", err)
	}
	return out, nil
}

// InvalidateNextHops makes the programs ask the FIB again for every next
// hop (call it when routes, neighbours or links change).
func (a *Agent) InvalidateNextHops() error {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	var v agentAgentConfig
	if err := a.readCfg(&v); err != nil {
		return err
	}
	v.NhGen++
	return a.writeCfg(&v)
}

// SetLocalAllow replaces agent_local: each prefix with its rules (what
// is not in a rule of the longest prefix covering a destination is
// dropped; a prefix with no rules drops everything to it).
func (a *Agent) SetLocalAllow(allow map[netip.Prefix][]LocalRule) error {
	want := map[agentLpm4Key]bool{}
	for p, rules := range allow {
		if !p.Addr().Is4() {
			return fmt.Errorf("local prefix %v: only IPv4 is supported", p)
		}
		if len(rules) > MaxLocalRules {
			return fmt.Errorf("local prefix %v: %d rules, at most %d (those of shorter prefixes covering it count)", p, len(rules), MaxLocalRules)
		}
		var v agentLocalAllow
		v.N = uint32(len(rules))
		for i, r := range rules {
			if r.Lo > r.Hi {
				return fmt.Errorf("local prefix %v: port range %d-%d is empty", p, r.Lo, r.Hi)
			}
			v.R[i].Proto, v.R[i].Lo, v.R[i].Hi = r.Proto, r.Lo, r.Hi
		}
		b := p.Masked().Addr().As4()
		k := agentLpm4Key{Prefixlen: uint32(p.Bits()), Addr: binary.LittleEndian.Uint32(b[:])}
		want[k] = true
		if err := a.objs.AgentLocal.Update(k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write local prefix %v: %w", p, err)
		}
	}
	return deleteStale[agentLpm4Key, agentLocalAllow](a.objs.AgentLocal, func(k agentLpm4Key) bool { return want[k] })
}

// agentKeyOf is keyOf for the agent's EIP and guest maps, which take
// both families: an IPv6 EIP is translated 1:1 to its guest's private
// IPv6 address (NAT66, bpf/agent.c).
func agentKeyOf(a netip.Addr) (edgeEipKey, error) {
	ip, fam, err := addrTo(a)
	if err != nil {
		return edgeEipKey{}, err
	}
	return edgeEipKey{Addr: ip, Family: fam}, nil
}

// agentAddrOK says what is wrong with an EIP's or a guest's address of
// the agent ("" if nothing): an IPv6 one must be a unicast address a
// router forwards (not ::, ::1, multicast, link-local, IPv4-mapped, nor
// zoned).
func agentAddrOK(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "no address"
	case a.Is4():
		return ""
	case a.Zone() != "":
		return "zoned"
	case a.Is4In6():
		return "IPv4-mapped"
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast(), a.IsLinkLocalUnicast():
		return "not a routed unicast address"
	}
	return ""
}

// PutEIP adds or replaces an EIP hosted here (both directions). EIP and
// Private are of one family: IPv4, or IPv6 (NAT66). Service: the guest
// serves a VIP of the EIP's family too (its replies are looked up in
// agent_flows, agent_flows6 for an IPv6 EIP, before the EIP).
// checkAgentEIP is what PutEIP refuses before it writes anything; the
// fake agent refuses the same, so a reconciler test on the fake meets
// the real program's errors.
func checkAgentEIP(e AgentEIP) error {
	if why := agentAddrOK(e.EIP); why != "" {
		return fmt.Errorf("EIP %v: %s", e.EIP, why)
	}
	if why := agentAddrOK(e.Private); why != "" {
		return fmt.Errorf("EIP %v: private address %v: %s", e.EIP, e.Private, why)
	}
	if e.EIP.Is4() != e.Private.Is4() {
		return fmt.Errorf("EIP %v: private address %v is of the other family (the agent translates IPv4 to IPv4, IPv6 to IPv6)", e.EIP, e.Private)
	}
	if e.VSID > 0xFFFFFF {
		return fmt.Errorf("EIP %v: VSID %d does not fit 24 bits", e.EIP, e.VSID)
	}
	return nil
}

// checkIfAddrs refuses, before any write, a guest address agent_ifaddrs
// cannot hold: its key is an IPv4 address (an IPv6 one was once written
// as 0.0.0.0).
func checkIfAddrs(want []IfAddr) error {
	for _, w := range want {
		if !w.Addr.Is4() {
			return fmt.Errorf("guest address %v on ifindex %d: agent_ifaddrs holds IPv4 addresses only", w.Addr, w.Ifindex)
		}
	}
	return nil
}

func (a *Agent) PutEIP(e AgentEIP) error {
	if err := checkAgentEIP(e); err != nil {
		return err
	}
	ek, err := agentKeyOf(e.EIP)
	if err != nil {
		return err
	}
	pk, err := agentKeyOf(e.Private)
	if err != nil {
		return fmt.Errorf("private address: %w", err)
	}
	// If the EIP moved to another guest, drop the old guest's entry,
	// unless it already belongs to another EIP.
	var old agentAgentEip
	if err := a.objs.AgentEips.Lookup(akey(ek), &old); err == nil {
		if oldPriv := addrFrom(edgeIpAddr(old.PrivateAddr), old.Family); oldPriv != e.Private {
			a.deleteGuestOf(oldPriv, ek)
		}
	}
	var flags uint8
	if e.Service {
		flags = agentFSvc
	}
	gflags := flags
	if has, err := a.placeBandwidth(e.EIP, e.StatsIdx); err != nil {
		return err
	} else if has {
		gflags |= agentFBw
	}
	if e.Group == AgentGroupPin {
		return fmt.Errorf("EIP %v: edge group %d is reserved", e.EIP, e.Group)
	}
	g := agentAgentGuest{Eip: agentIpAddr(ek.Addr), Vsid: e.VSID, StatsIdx: e.StatsIdx, Ifindex: e.Ifindex, Family: ek.Family, Flags: gflags, Group: e.Group}
	var prev agentAgentGuest
	hadPrev := a.objs.AgentGuests.Lookup(akey(pk), &prev) == nil
	if err := a.objs.AgentGuests.Update(akey(pk), &g, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write guest %v: %w", e.Private, err)
	}
	v := agentAgentEip{PrivateAddr: agentIpAddr(pk.Addr), Vsid: e.VSID, StatsIdx: e.StatsIdx, Family: pk.Family, Flags: flags, Group: e.Group}
	if err := a.objs.AgentEips.Update(akey(ek), &v, ebpf.UpdateAny); err != nil {
		// The guest entry goes back to what it was: left written, it
		// would name an EIP (and a counter slot) that EIPs never lists,
		// so no reconciler would ever delete it.
		if hadPrev {
			a.objs.AgentGuests.Update(akey(pk), &prev, ebpf.UpdateAny)
		} else {
			a.objs.AgentGuests.Delete(akey(pk))
		}
		return fmt.Errorf("write EIP %v: %w", e.EIP, err)
	}
	return nil
}

// DeleteEIP removes an EIP and its guest entry.
func (a *Agent) DeleteEIP(eip netip.Addr) error {
	ek, err := agentKeyOf(eip)
	if err != nil {
		return err
	}
	var old agentAgentEip
	if err := a.objs.AgentEips.Lookup(akey(ek), &old); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	if err := a.objs.AgentEips.Delete(akey(ek)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete EIP %v: %w", eip, err)
	}
	return a.deleteGuestOf(addrFrom(edgeIpAddr(old.PrivateAddr), old.Family), ek)
}

// deleteGuestOf removes a guest's entry if it still names eip (another EIP
// may have been bound to the guest since).
func (a *Agent) deleteGuestOf(priv netip.Addr, eip edgeEipKey) error {
	pk, err := agentKeyOf(priv)
	if err != nil {
		return err
	}
	var g agentAgentGuest
	if err := a.objs.AgentGuests.Lookup(akey(pk), &g); err != nil || g.Eip != agentIpAddr(eip.Addr) {
		return nil
	}
	if err := a.objs.AgentGuests.Delete(akey(pk)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete guest %v: %w", priv, err)
	}
	return nil
}

// IfAddr is an address a guest interface may send from.
type IfAddr struct {
	Ifindex uint32
	Addr    netip.Addr
}

// SetIfAddrs replaces the addresses guest interfaces may send from.
func (a *Agent) SetIfAddrs(want []IfAddr) error {
	if err := checkIfAddrs(want); err != nil {
		return err
	}
	keep := map[agentIfAddr]bool{}
	for _, w := range want {
		k := agentIfAddr{Ifindex: w.Ifindex, Addr: ip4word(w.Addr)}
		keep[k] = true
		if err := a.objs.AgentIfaddrs.Update(&k, uint32(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("guest address %v on ifindex %d: %w", w.Addr, w.Ifindex, err)
		}
	}
	return deleteStale[agentIfAddr, uint32](a.objs.AgentIfaddrs, func(k agentIfAddr) bool { return keep[k] })
}

// EIPs lists the EIPs programmed, joined with their guest entries.
func (a *Agent) EIPs() (map[netip.Addr]AgentEIP, error) {
	out := map[netip.Addr]AgentEIP{}
	var k agentEipKey
	var v agentAgentEip
	it := a.objs.AgentEips.Iterate()
	for it.Next(&k, &v) {
		e := AgentEIP{
			EIP:      addrFrom(edgeIpAddr(k.Addr), k.Family),
			Private:  addrFrom(edgeIpAddr(v.PrivateAddr), v.Family),
			VSID:     v.Vsid,
			StatsIdx: v.StatsIdx,
			Service:  v.Flags&agentFSvc != 0,
			Group:    v.Group,
		}
		pk, _ := agentKeyOf(e.Private)
		var g agentAgentGuest
		if err := a.objs.AgentGuests.Lookup(akey(pk), &g); err == nil {
			e.Ifindex = g.Ifindex
		}
		out[e.EIP] = e
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list agent EIPs: %w", err)
	}
	return out, nil
}

func (a *Agent) ResetEIPStats(idx uint32) error { return resetEIPStats(a.objs.EipStats, idx) }

func (a *Agent) EIPStats(idx uint32) (Counters, error) { return readEIPStats(a.objs.EipStats, idx) }

func (a *Agent) Stats() (map[string]Count, error) { return readStats(a.objs.Stats) }

func akey(k edgeEipKey) agentEipKey {
	return agentEipKey{Addr: agentIpAddr(k.Addr), Family: k.Family}
}

func ekey(k agentEipKey) edgeEipKey {
	return edgeEipKey{Addr: edgeIpAddr(k.Addr), Family: k.Family}
}

// agentFSvc is AGENT_F_SVC (bpf/lib/consts.h): the guest of an EIP is an
// encap-mode service backend too, so its replies are looked up in
// agent_flows before they fall back to the EIP.
const agentFSvc = 0x1

// AgentService is a service backend guest on this host: traffic for VIP
// (protocol, port; 0 any) that the edge sends to guest is translated to
// the guest's backend port. Its replies need no entry: each flow is
// recorded in agent_flows as it comes in and translated back by it.
//
// An IPv6 VIP (encap mode) goes to agent_svc6: Guest is still the
// guest's IPv4 address (the edge names the backend by it, in the inner
// destination MAC), and the packet is translated to Guest6, the guest's
// IPv6 address (its address6), its flows recorded in agent_flows6; the
// replies must come from Ifindex, the guest's interface.
type AgentService struct {
	VIP   netip.Addr
	Guest netip.Addr
	Proto uint8
	VPort uint16 // 0: any port
	BPort uint16 // 0: keep the port
	VSID  uint32
	// Group is the agent_groups slot of the edge set that serves the
	// VIP: the flows' replies go to that set's live members.
	Group uint16
	// An IPv6 VIP's only (zero for an IPv4 VIP): the guest's IPv6
	// address and its host-side interface.
	Guest6  netip.Addr
	Ifindex uint32
}

// checkAgentService is what PutService refuses before it writes
// anything (the fake agent refuses the same).
func checkAgentService(s AgentService) error {
	name := fmt.Sprintf("service %v -> %v", s.VIP, s.Guest)
	if !s.Guest.Is4() {
		return fmt.Errorf("%s: the guest must be named by its IPv4 address", name)
	}
	if s.Group == AgentGroupPin {
		return fmt.Errorf("%s: edge group %d is reserved", name, s.Group)
	}
	if s.VSID > 0xFFFFFF {
		return fmt.Errorf("%s: VSID %d does not fit 24 bits", name, s.VSID)
	}
	switch {
	case s.VIP.Is4():
		if s.Guest6.IsValid() || s.Ifindex != 0 {
			return fmt.Errorf("%s: an IPv4 VIP takes no guest IPv6 address nor interface", name)
		}
	case plain6(s.VIP):
		if why := agentAddrOK(s.VIP); why != "" {
			return fmt.Errorf("%s: VIP: %s", name, why)
		}
		if !s.Guest6.Is6() {
			return fmt.Errorf("%s: an IPv6 VIP needs the guest's IPv6 address (address6)", name)
		}
		if why := agentAddrOK(s.Guest6); why != "" || !plain6(s.Guest6) {
			return fmt.Errorf("%s: guest IPv6 address %v: %s", name, s.Guest6, cmp.Or(why, "IPv4-mapped"))
		}
		if s.Ifindex == 0 {
			return fmt.Errorf("%s: an IPv6 VIP needs the guest's interface (its replies' anti-spoofing)", name)
		}
	default:
		return fmt.Errorf("%s: VIP: not an IPv4 or IPv6 address", name)
	}
	return nil
}

func svcKey(s AgentService) agentSvcKey {
	return agentSvcKey{Vip: ip4word(s.VIP), Guest: ip4word(s.Guest), Vport: be16(s.VPort), Proto: s.Proto}
}

func svc6Key(s AgentService) agentSvc6Key {
	v, _, _ := addrTo(s.VIP)
	return agentSvc6Key{Vip: agentIpAddr(v), Guest: ip4word(s.Guest), Vport: be16(s.VPort), Proto: s.Proto}
}

// PutService programs a service backend guest.
func (a *Agent) PutService(s AgentService) error {
	if err := checkAgentService(s); err != nil {
		return err
	}
	if s.VIP.Is6() {
		k := svc6Key(s)
		g6, _, _ := addrTo(s.Guest6)
		v := agentSvc6Entry{Guest6: agentIpAddr(g6), Bport: be16(s.BPort), Group: s.Group, Vsid: s.VSID, Ifindex: s.Ifindex}
		if err := a.objs.AgentSvc6.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("service %v port %d -> %v: %w", s.VIP, s.VPort, s.Guest, err)
		}
		return nil
	}
	k := svcKey(s)
	if err := a.objs.AgentSvc.Update(&k, &agentSvcEntry{Bport: be16(s.BPort), Vsid: s.VSID, Group: s.Group}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("service %v:%d -> %v: %w", s.VIP, s.VPort, s.Guest, err)
	}
	return nil
}

// DeleteService removes a service backend guest. Its flows' entries stay
// until the LRU evicts them: their replies still leave from the VIP.
func (a *Agent) DeleteService(s AgentService) error {
	var err error
	if s.VIP.Is6() {
		k := svc6Key(s)
		err = a.objs.AgentSvc6.Delete(&k)
	} else {
		k := svcKey(s)
		err = a.objs.AgentSvc.Delete(&k)
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete service %v port %d -> %v: %w", s.VIP, s.VPort, s.Guest, err)
	}
	return nil
}

// Services lists the programmed service backends, IPv4 VIPs' and IPv6
// VIPs'.
func (a *Agent) Services() ([]AgentService, error) {
	var out []AgentService
	var k agentSvcKey
	var v agentSvcEntry
	it := a.objs.AgentSvc.Iterate()
	for it.Next(&k, &v) {
		out = append(out, AgentService{VIP: wordIP4(k.Vip), Guest: wordIP4(k.Guest), Proto: k.Proto, VPort: be16(k.Vport), BPort: be16(v.Bport), VSID: v.Vsid, Group: v.Group})
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	var k6 agentSvc6Key
	var v6 agentSvc6Entry
	it6 := a.objs.AgentSvc6.Iterate()
	for it6.Next(&k6, &v6) {
		out = append(out, AgentService{VIP: addrFrom(edgeIpAddr(k6.Vip), 10), Guest: wordIP4(k6.Guest), Proto: k6.Proto, VPort: be16(k6.Vport),
			BPort: be16(v6.Bport), VSID: v6.Vsid, Group: v6.Group, Guest6: addrFrom(edgeIpAddr(v6.Guest6), 10), Ifindex: v6.Ifindex})
	}
	return out, it6.Err()
}

// AgentFlow is one entry of the agent's flow table: a flow that came in
// through Public (a VIP and port, or an EIP) to Guest, as its replies
// carry it.
type AgentFlow struct {
	Guest, Remote netip.AddrPort
	Proto         uint8
	Public        netip.AddrPort
	Edge          netip.Addr // underlay address of the edge it came from
	VSID          uint32
	Ifindex       uint32
	Group         uint16 // the edge group of Public (AgentGroupPin: a health check)
	Gen           uint16 // the group's generation when Edge was learnt
}

// Flows lists up to max entries of the flow tables (0: all), IPv4
// flows' (agent_flows) then IPv6 flows' (agent_flows6), for status and
// tests.
func (a *Agent) Flows(max int) ([]AgentFlow, error) {
	var out []AgentFlow
	full := func() bool { return max > 0 && len(out) >= max }
	var k agentAgentFlowKey
	var v agentAgentFlow
	it := a.objs.AgentFlows.Iterate()
	for !full() && it.Next(&k, &v) {
		out = append(out, AgentFlow{
			Guest:  netip.AddrPortFrom(wordIP4(k.Guest), be16(k.Gport)),
			Remote: netip.AddrPortFrom(wordIP4(k.Remote), be16(k.Rport)),
			Proto:  k.Proto,
			Public: netip.AddrPortFrom(wordIP4(v.Pub), be16(v.Pport)),
			Edge:   a.names().addr(v.Edge), VSID: v.Vsid, Ifindex: v.Ifindex, Group: v.Group, Gen: v.Gen,
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list agent flows: %w", err)
	}
	var k6 agentAgentFlow6Key
	var v6 agentAgentFlow6
	it6 := a.objs.AgentFlows6.Iterate()
	for !full() && it6.Next(&k6, &v6) {
		out = append(out, AgentFlow{
			Guest:  netip.AddrPortFrom(addrFrom(edgeIpAddr(k6.Guest), 10), be16(k6.Gport)),
			Remote: netip.AddrPortFrom(addrFrom(edgeIpAddr(k6.Remote), 10), be16(k6.Rport)),
			Proto:  k6.Proto,
			Public: netip.AddrPortFrom(addrFrom(edgeIpAddr(v6.Pub), 10), be16(v6.Pport)),
			Edge:   a.names().addr(v6.Edge), VSID: v6.Vsid, Ifindex: v6.Ifindex, Group: v6.Group, Gen: v6.Gen,
		})
	}
	if err := it6.Err(); err != nil {
		return nil, fmt.Errorf("list agent IPv6 flows: %w", err)
	}
	return out, nil
}

// FlowCapacity is the size of the IPv4 flow table (agent_flows).
func (a *Agent) FlowCapacity() uint32 { return a.objs.AgentFlows.MaxEntries() }

// Flow6Capacity is the size of the IPv6 flow table (agent_flows6).
func (a *Agent) Flow6Capacity() uint32 { return a.objs.AgentFlows6.MaxEntries() }

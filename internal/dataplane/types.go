// Package dataplane loads azgate's XDP programs, attaches them and reads and
// writes their maps. The maps are pinned under a per-node directory in
// bpffs and the programs attached through pinned bpf_links, so a daemon can
// exit and come back without the data plane missing a packet.
//
// Reconcilers program the data plane through the EdgeMaps and AgentMaps
// interfaces; Fake implementations let them be tested without a kernel.
package dataplane

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Stat names, in the order of enum azg_stat in bpf/lib/structs.h.
var statNames = [...]string{
	"pass_non_ip",
	"pass_ipv6",
	"pass_not_ours",
	"encap_tx",
	"decap_tx",
	"decap_pass",
	"icmp_ttl_tx",
	"icmp_frag_tx",
	"drop_eth_trunc",
	"drop_ip_trunc",
	"drop_ip_bad",
	"drop_ip_csum",
	"drop_ip_martian",
	"drop_l4_trunc",
	"drop_gre_bad",
	"drop_inner_bad",
	"drop_spoof",
	"drop_unknown",
	"drop_ttl",
	"drop_too_big",
	"drop_fib",
	"drop_no_neigh",
	"drop_headroom",
	"drop_icmp_limit",
	"drop_no_edge",
	"drop_bad_dst",
	"lb_encap_tx",
	"lb_nat_tx",
	"lb_reply_tx",
	"lb_icmp_tx",
	"arp_reply",
	"drop_lb_no_backend",
	"drop_lb_no_port",
	"lb_nat_pass",
	"drop_no_eip",
	"flow_new",
	"drop_spoof_own",
	"drop_spoof_underlay",
	"drop_spoof_bogon",
	"drop_rl_source",
	"drop_rl_syn",
	"drop_fw_deny",
	"drop_fw_private",
	"pass_hc_reply",
	"drop_bw",
	"pass_local",
	"drop_local",
	"drop_ip6_ext_limit",
	"drop_ip6_ext_bad",
	"drop_ip6_rh0",
	"drop_ip6_tiny_frag",
	"drop_ip6_martian",
	"drop_ip6_off_link",
	"drop_ip6_udp_csum0",
	"drift_prev_tx",
	"drift_flow_new",
	"drift_flow_fail",
	"ndp_reply",
	"drop_ndp_hop_limit",
	"drop_ndp_short",
	"drop_ndp_csum",
	"drop_ndp_target",
	"drop_ndp_bad",
}

// MaxICMPRate bounds the configurable ICMP error rate (per second per
// CPU); the token bucket's arithmetic is exact up to far beyond it.
const MaxICMPRate = 1_000_000

// StatNames lists every per-reason counter in index order.
func StatNames() []string { return append([]string(nil), statNames[:]...) }

// StatIndex returns the index of a named counter.
func StatIndex(name string) (int, bool) {
	for i, n := range statNames {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// Count is a packet and byte count.
type Count struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Counters are one EIP's packets and bytes in each direction
// (rx: Internet to guest, tx: guest to Internet), summed over CPUs.
type Counters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	// RxSyns: TCP SYNs without ACK among RxPackets (the edge counts them
	// for DDoS detection; the agent leaves them at 0).
	RxSyns uint64 `json:"rx_syns,omitempty"`
}

// Route is where the edge sends an EIP's traffic.
type Route struct {
	Host     netip.Addr // underlay address of the AZ host
	VSID     uint32
	StatsIdx uint32
	// PrevHost and PrevVSID: the binding a drifting EIP moved from
	// (make-before-break, docs/dataplane.md "EIP drift"), or the zero
	// Addr and 0. With PrevHost set (IPv4, as Host), the route is
	// flagged ROUTE_F_DRIFT: new TCP flows (and UDP, ICMP...) go to Host,
	// the TCP flows open at the move to PrevHost, and both hosts may
	// send the EIP's packets.
	PrevHost netip.Addr
	PrevVSID uint32
	// PrevAll (with PrevHost): every packet from the Internet goes to
	// PrevHost, replies are taken from both hosts (the make-before-break
	// delay: Host's agent may not hold the EIP yet, while another edge may
	// already send it new flows; PREV_F_ALL).
	PrevAll bool
}

// Drifts says whether r carries a previous binding (ROUTE_F_DRIFT).
func (r Route) Drifts() bool { return r.PrevHost.IsValid() }

// EdgeConfig is the edge program's configuration.
type EdgeConfig struct {
	Underlay   netip.Addr // decap destination, encap source
	ICMPSource netip.Addr // source of ICMP errors sent to the Internet
	// ICMPSource6 is the source of ICMPv6 errors (time exceeded, packet
	// too big) sent to the Internet about packets to IPv6 EIPs: a global
	// unicast IPv6 address of the edge. Unset, none are sent (the packets
	// are dropped under drop_ttl and drop_too_big).
	ICMPSource6 netip.Addr
	// Underlay6 is the edge's IPv6 underlay address: the outer source of
	// the NVGRE it sends to hosts with an IPv6 underlay address, and the
	// destination of the NVGRE over IPv6 it takes from them. Unset, a
	// route or backend on such a host is refused by nothing here, but
	// its packets are dropped (drop_fib).
	Underlay6 netip.Addr
	HashSeed  uint32
	ICMPRate  uint32 // errors per second per CPU; 0 sends none
	ICMPBurst uint32
	// ICMPBudgets: kinds with a budget of their own; the others get
	// ICMPRate and ICMPBurst (each kind its own bucket all the same).
	ICMPBudgets      map[ICMPKind]ICMPBudget
	ICMPTimeExceeded bool // answer expired TTLs (otherwise count and drop)
	// UnderlayIfindex is the underlay interface: NVGRE is only accepted
	// from it and decapsulated packets never leave through it (0: any).
	UnderlayIfindex uint32
	GatewayMAC      net.HardwareAddr
}

// AgentEIP is an EIP hosted on an agent's host.
type AgentEIP struct {
	EIP      netip.Addr
	Private  netip.Addr // guest address
	VSID     uint32
	StatsIdx uint32
	Ifindex  uint32 // host-side interface of the guest; 0 skips the check
	// Service: the guest is an encap-mode service backend too, so its
	// replies are looked up in the flow table before they fall back to
	// the EIP (a guest without is spared the lookup).
	Service bool
	// Group is the agent_groups slot of the edge set that serves the EIP:
	// its guest's replies go to that set's live members.
	Group uint16
}

// AgentGroup is the live members of one edge set as an agent holds them
// (agent_groups): the replies of the addresses the set serves are spread
// over Members by flow hash; a flow goes back to the member it came from
// while Gen has not changed since.
type AgentGroup struct {
	Set     string       // the edge set ("" in slot 0: every set's edges)
	Members []netip.Addr // underlay addresses, at most MaxGroupMembers
	// Gen is the slot's generation (read back; SetGroup bumps it when a
	// member leaves or the slot changes set).
	Gen uint16
}

// MaxGroupMembers is EDGE_SET_MAX (bpf/lib/consts.h): the members one
// group holds, model.MaxSetEdges.
const MaxGroupMembers = 32

// AgentGroupMax is AGENT_GROUP_MAX: the slots of agent_groups (slot 0
// and one per edge set).
const AgentGroupMax = 256

// AgentGroupPin is AGENT_GROUP_PIN: a flow whose group it is goes back to
// its own edge whatever happens to the sets (an edge's health check).
const AgentGroupPin = 0xffff

// AgentConfig is the agent programs' configuration.
type AgentConfig struct {
	Underlay   netip.Addr
	ICMPSource netip.Addr
	// ICMPSource6: the source of the ICMPv6 errors sent to IPv6 guests
	// (packet too big for the tunnel); not valid: none are sent, such
	// packets are drop_too_big. A global unicast IPv6 address.
	ICMPSource6 netip.Addr
	HashSeed    uint32
	// Edges: every edge of every set, live or not; NVGRE is only
	// accepted from them. Where replies go is the groups' business
	// (SetGroup).
	Edges      []netip.Addr
	ICMPRate   uint32
	ICMPBurst  uint32
	GatewayMAC net.HardwareAddr
}

// EdgeMaps is what the edge reconciler needs from a data plane.
type EdgeMaps interface {
	SetConfig(EdgeConfig) error
	// PutRoutes adds or replaces routes.
	PutRoutes(map[netip.Addr]Route) error
	DeleteRoutes([]netip.Addr) error
	// RangeRoutes calls f for every programmed route until f returns
	// false (millions of routes: no map of them all is built).
	RangeRoutes(f func(netip.Addr, Route) bool) error
	// Route reads one route.
	Route(netip.Addr) (Route, bool, error)
	// ResetEIPStats zeroes a counter slot before it is reused.
	ResetEIPStats(idx uint32) error
	EIPStats(idx uint32) (Counters, error)
	Stats() (map[string]Count, error)
}

// EIPStatsReader reads many counter slots at once: out[i] gets slot i's
// counters (the Edge and the FakeEdge implement it).
type EIPStatsReader interface {
	ReadEIPStats(out []Counters) error
}

// SpoofMaps is the edge's ingress anti-spoofing table (the Edge and the
// FakeEdge implement it): the source prefixes dropped from the Internet
// side, own (sets, EIPs, VIPs) and underlay.
type SpoofMaps interface {
	SetSpoofPrefixes(own, underlay []netip.Prefix) error
}

// Ul6HostMaps is the edge's table of the IPv6 underlay's host names
// (ul6_hosts; the Edge and the FakeEdge implement it).
type Ul6HostMaps interface {
	// ForgetUl6Hosts collects the names of the IPv6 hosts keep refuses
	// (ul6.go forget): nothing the edge programs may still name them.
	ForgetUl6Hosts(keep func(netip.Addr) bool) error
}

// LocalRule is one rule of a local prefix: what a guest may send to it,
// through its host's kernel. Proto 0 is any protocol (every port); ports
// Lo..Hi are TCP's or UDP's destination port, 0..0 for another protocol.
type LocalRule struct {
	Proto  uint8
	Lo, Hi uint16
}

// MaxLocalRules is the number of rules one local prefix holds
// (LOCAL_RULES_MAX in bpf/lib/consts.h).
const MaxLocalRules = 8

// The agent's maps, one small interface per table (like the load
// balancer's, lb.go), each implemented by the Agent, the FakeAgent and a
// fault-injecting wrapper (FaultyAgent): the agent's reconciler is tested
// against a failure of any one write without a kernel.

// AgentConfigMap holds the agent programs' configuration (agent_cfg,
// icmp_kinds) and the edges NVGRE is accepted from (agent_edge_set).
type AgentConfigMap interface {
	SetConfig(AgentConfig) error
}

// AgentGroupMap holds the edge groups (agent_groups).
type AgentGroupMap interface {
	// SetGroup writes slot idx of agent_groups (an empty group clears
	// it); Groups reads back the slots in use (a set name or members).
	SetGroup(idx uint16, g AgentGroup) error
	Groups() (map[uint16]AgentGroup, error)
}

// AgentLocalMap holds what guests may send to their host's kernel
// (agent_local).
type AgentLocalMap interface {
	// SetLocalAllow replaces agent_local: the prefixes a guest's packet
	// never goes to the edge for, each with the rules of what reaches the
	// host's kernel (the rules of shorter prefixes covering it merged in:
	// agent.PlanLocal).
	SetLocalAllow(map[netip.Prefix][]LocalRule) error
}

// AgentGuestMap holds the addresses guest interfaces may send from
// (agent_ifaddrs).
type AgentGuestMap interface {
	SetIfAddrs([]IfAddr) error
}

// AgentEIPMap holds the EIPs hosted here (agent_eips and agent_guests,
// both directions) and their counter slots (eip_stats).
type AgentEIPMap interface {
	PutEIP(AgentEIP) error
	DeleteEIP(eip netip.Addr) error
	EIPs() (map[netip.Addr]AgentEIP, error)
	// ResetEIPStats zeroes a counter slot before it is used.
	ResetEIPStats(idx uint32) error
	EIPStats(idx uint32) (Counters, error)
}

// AgentServiceMap holds the encap-mode service backends among the guests
// (agent_svc).
type AgentServiceMap interface {
	PutService(AgentService) error
	DeleteService(AgentService) error
	Services() ([]AgentService, error)
}

// AgentMaps is what the agent reconciler needs from a data plane.
type AgentMaps interface {
	AgentConfigMap
	AgentGroupMap
	AgentLocalMap
	AgentGuestMap
	AgentEIPMap
	AgentServiceMap
	Stats() (map[string]Count, error)
}

// plain6 reports whether a is an IPv6 address the IPv6 maps key (an
// IPv6 EIP, firewall source or limited address): neither IPv4-mapped
// (that is an IPv4 address, keyed by the IPv4 maps) nor zoned.
func plain6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() && a.Zone() == "" }

func addrTo(a netip.Addr) (edgeIpAddr, uint8, error) {
	var out edgeIpAddr
	switch {
	case a.Is4():
		b := a.As4()
		out.A[0] = binary.LittleEndian.Uint32(b[:])
		return out, 2, nil
	case a.Is6():
		b := a.As16()
		for i := range 4 {
			out.A[i] = binary.LittleEndian.Uint32(b[i*4:])
		}
		return out, 10, nil
	}
	return out, 0, fmt.Errorf("invalid address %v", a)
}

func addrFrom(x edgeIpAddr, family uint8) netip.Addr {
	if family == 10 {
		var b [16]byte
		for i := range 4 {
			binary.LittleEndian.PutUint32(b[i*4:], x.A[i])
		}
		return netip.AddrFrom16(b)
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], x.A[0])
	return netip.AddrFrom4(b)
}

func keyOf(a netip.Addr) (edgeEipKey, error) {
	ip, fam, err := addrTo(a)
	if err != nil {
		return edgeEipKey{}, err
	}
	if fam != 2 {
		return edgeEipKey{}, fmt.Errorf("%v: only IPv4 EIPs are supported by this data plane", a)
	}
	return edgeEipKey{Addr: ip, Family: fam}, nil
}

func macTo(m net.HardwareAddr) (out [6]uint8) {
	copy(out[:], m)
	return out
}

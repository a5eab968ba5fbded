// Package lab builds a whole azgate region on one Linux machine out of
// network namespaces and veth pairs, runs every role in it against the
// embedded store, and drives scenarios (EIP drift between AZs, ECMP across
// an edge set, pull-out, quarantine, edge failover).
//
//	                     inet            Internet client, 203.0.113.10, 2001:db8:203::10
//	                      |     atk      attacker, 192.0.2.66, 2001:db8:192::66 (DDoS test)
//	                      |    /
//	                     rtr             upstream router: BIRD 2, one eBGP session
//	     _________________|___________   per edge, ECMP (merge paths, L4 hash)
//	    /       /      \       \   \   //	edge-a1 edge-a2 edge-b1 edge-b2 edge-d1 edge-q1   XDP edges: ext0 (Internet
//	\___ POP a ___/ \___ POP b ___/  dedicated quarantine  side), ul0 (underlay)
//	 \______ set prefix-ab ______/   set        set
//	    \       \      /       /   /   /
//	                     fab             underlay router, 198.18.0.0/16
//	    /   /  |  \   \   \    //	az1-h1 az1-h2 ... az3-h2   hosts running the agent (XDP on ul0 and
//	   |  \                    guest links)
//	  g1   g2                guests, 198.19.0.0/16 and 2001:db8:f0::/48 private addresses
//
//	rtr, edge-a1..b2 (dmz0), dmz1..3: the DMZ segment (a bridge in dmzsw),
//	where the prefix set's ARP owner answers for the nat VIPs and the
//	servers' gateway
//
// Guests are reachable only through the tunnels: the underlay routes no
// guest address, and az2-h1's guests have az1-h1's private addresses
// (another tenant with the same address plan), told apart by their hosts
// and VSIDs, as tenants' overlapping addresses are in a real cloud.
//
// The Internet side (inet, atk, rtr, the edges' ext0) is dual-stack: IPv6
// addresses from 2001:db8::/32 (RFC 3849) beside the IPv4 ones, and the
// prefix set owns EIPPrefix6 beside EIPPrefix, announced over MP-BGP on
// the same sessions. The guests are dual-stack too (GuestAddr6, their
// address6): an IPv6 EIP from EIPPrefix6 is encapsulated to its guest's
// host over the IPv4 underlay and translated there (NAT66). The DMZ is
// dual-stack (DMZNet6: IPv6 nat VIPs, NATPinned6); the underlay is IPv4
// only; IPv6 traffic to the set's prefix that no
// IPv6 EIP takes ends at the edges' kernel discard routes.
//
// Everything is sealed: no link to the machine's interfaces, no default
// route out; addresses come from RFC 5737, RFC 2544 and RFC 3849 ranges.
package lab

import (
	"fmt"
	"net/netip"
)

// Node is one namespace of the lab.
type Node struct {
	Name      string            `json:"name"`
	Netns     string            `json:"netns"`
	Role      string            `json:"role"` // internet, router, edge, underlay, host, guest
	AZ        string            `json:"az,omitempty"`
	Host      string            `json:"host,omitempty"` // for guests
	POP       string            `json:"pop,omitempty"`  // for edges
	Set       string            `json:"set,omitempty"`  // for edges: their edge set
	Addresses map[string]string `json:"addresses"`      // interface -> CIDR
	// Addresses6 are the interfaces' IPv6 addresses (the Internet side's
	// nodes, the hosts' guest links and the guests), interface -> CIDR.
	Addresses6 map[string]string `json:"addresses6,omitempty"`
	Process    *Proc             `json:"process,omitempty"`
}

// Proc is a role or service process the lab started.
type Proc struct {
	Cmd string `json:"cmd"`
	PID int    `json:"pid"`
	Log string `json:"log"`
}

// link is a veth pair between two nodes.
type link struct {
	a, b       string // node names
	aDev, bDev string
	aAddr      string // CIDR or ""
	bAddr      string
	mtu        int
}

type route struct {
	node, dst, gw, dev string
}

// addr6 is an IPv6 address on a node's interface.
type addr6 struct {
	node, dev, cidr string
}

// Topology is the lab's namespaces, links and routes.
type Topology struct {
	Prefix string
	// Underlay is the underlay's family (UnderlayIPv4, UnderlayIPv6 or
	// UnderlayMixed; lab up --underlay).
	Underlay string
	Nodes    []*Node
	links    []link
	addrs6   []addr6
	routes   []route // IPv4 and IPv6
}

// Fixed lab addresses.
const (
	ClientNet    = "203.0.113.0/24"
	DMZServers   = 3
	ClientAddr   = "203.0.113.10"
	EIPPrefix    = "198.51.100.0/24"
	EdgeUnderlay = "198.18.0.1"
	// AttackerNode floods from AttackerAddr (TEST-NET-1, RFC 5737) through
	// rtr, Internet side like inet (Lab.Flood).
	AttackerNode    = "atk"
	AttackerNet     = "192.0.2.0/24"
	AttackerAddr    = "192.0.2.66"
	AttackerGateway = "192.0.2.1"
	GuestMTU        = 1500 - 42 // so a guest's packets fit the 1500-byte underlay after NVGRE
)

// The Internet side's IPv6 addresses (docs/lab.md, "IPv6"): from
// 2001:db8::/32 only. The client's link 2001:db8:203::/64, the attacker's
// 2001:db8:192::/64 (rtr ::1 on both), the k-th edge's link to rtr
// 2001:db8:100:k::/64 (rtr ::1, the edge ::2, its nextHop6), and the n-th
// prefix set's IPv6 prefix 2001:db8:eN::/48: the lab has one prefix set,
// prefix-ab, with 2001:db8:e1::/48.
const (
	ClientNet6       = "2001:db8:203::/64"
	ClientAddr6      = "2001:db8:203::10"
	ClientGateway6   = "2001:db8:203::1"
	AttackerNet6     = "2001:db8:192::/64"
	AttackerAddr6    = "2001:db8:192::66"
	AttackerGateway6 = "2001:db8:192::1"
	EIPPrefix6       = "2001:db8:e1::/48"
)

// EIPs6 are the lab's IPv6 EIPs (from EIPPrefix6), created unbound
// beside the IPv4 ones (198.51.100.7-9); bound, one translates to its
// guest's GuestAddr6.
var EIPs6 = []string{"2001:db8:e1::7", "2001:db8:e1::8"}

// SetPrefixes are the prefixes of the lab's prefix set, IPv4 and IPv6:
// the routes rtr learns from it.
func SetPrefixes() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix(EIPPrefix), netip.MustParsePrefix(EIPPrefix6)}
}

// EdgeHealth is edge-a1's health-check address (edge --health-source): its
// checks of encap-mode backends leave from it through the tunnel.
const EdgeHealth = "198.18.255.1"

// EdgeHealth6 is edge-a1's IPv6 health-check address (edge
// --health-source6): its checks of the backends of IPv6 encap VIPs leave
// from it through the tunnel to the guests' IPv6 addresses.
const EdgeHealth6 = "2001:db8:ffff::1"

// The lab's edge sets.
const (
	// PrefixSet announces EIPPrefix from both POPs: one set spanning POP
	// a and POP b, so losing a POP shrinks the ECMP group instead of
	// taking the prefix away (docs/lab.md, "Edge sets").
	PrefixSet = "prefix-ab"
	// DedicatedSet takes the /32 of EIPs and VIPs pulled out into it.
	DedicatedSet = "dedicated"
	// QuarantineSet is the region's quarantine set.
	QuarantineSet = "quarantine"
)

// BGP of the lab: private ASNs (RFC 6996), the router's and one per set,
// and timers short enough that a killed edge leaves the ECMP group within
// a few seconds.
const (
	RouterASN    = 64512
	HoldTime     = 3 // seconds
	Keepalive    = 1
	MD5Password  = "azgate-lab-md5" // on the sessions of POP b's edges
	prefixSetASN = 65001
	dedicatedASN = 65002
	quarASN      = 65003
)

// NATPinned are the lab's nat VIPs (the demo's, the tests'): rtr routes
// them onto the DMZ segment, where the prefix set's ARP owner answers for
// them, instead of spreading them by ECMP (docs/lab.md, "The DMZ").
const NATPinned = "198.51.100.30/31"

// NATPinned6 are the lab's IPv6 nat VIPs (from EIPPrefix6), pinned onto
// the DMZ segment as NATPinned are: the prefix set's NDP owner answers
// for them there.
const NATPinned6 = "2001:db8:e1::30/127"

// The DMZ segment, 198.19.200.0/24: servers .1, .3, .5 (DMZAddr), the
// prefix set's members .101 and up (dmz0), fab .252, the router .253, and the
// servers' gateway .254, answered by the set's ARP owner (edge
// --arp-gateway).
const (
	DMZGateway = "198.19.200.254"
	RouterDMZ  = "198.19.200.253"
	FabDMZ     = "198.19.200.252"
)

func edgeDMZ(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 200, byte(101 + k)}) }

// The DMZ segment is dual-stack: 2001:db8:200::/64 (RFC 3849), servers
// ::1, ::3, ::5 (DMZAddr6), the prefix set's members ::1:0 and up
// (dmz0), the router ::fd (a /128, as its IPv4 /32) and the servers'
// IPv6 gateway ::fe, answered by the set's NDP owner (edge
// --arp-gateway6). fab has no IPv6 leg there: the underlay is IPv4, so
// only the prefix set's members (on the segment) reach the servers over
// IPv6.
const (
	DMZNet6     = "2001:db8:200::/64"
	DMZGateway6 = "2001:db8:200::fe"
	RouterDMZ6  = "2001:db8:200::fd"
)

// DMZAddr6 is the IPv6 address of DMZ server i (1-based).
func DMZAddr6(i int) netip.Addr { return dmz6(0, byte(2*i-1)) }

func edgeDMZ6(k int) netip.Addr { return dmz6(1, byte(k)) }

func dmz6(hi, lo byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x02, 0x00, 13: hi, 15: lo})
}

// SyncPort is the port of the edges' connection sync (--sync-listen), on
// their underlay addresses: the members of a set copy each other's
// connection entries, and a returning member announces only once it holds
// a full copy.
const SyncPort = 7946

// EdgeSpec is one edge of the lab.
type EdgeSpec struct {
	Name string
	POP  string // "a", "b"; "" for the dedicated and quarantine edges
	Set  string
	// MD5: the edge's BGP session is signed with MD5Password.
	MD5 bool
}

// Edges are the lab's edges, in the order their addresses are numbered:
// two POPs of two edges in the prefix set, the dedicated set's edge and
// the quarantine set's edge.
var Edges = []EdgeSpec{
	{Name: "edge-a1", POP: "a", Set: PrefixSet},
	{Name: "edge-a2", POP: "a", Set: PrefixSet},
	{Name: "edge-b1", POP: "b", Set: PrefixSet, MD5: true},
	{Name: "edge-b2", POP: "b", Set: PrefixSet, MD5: true},
	{Name: "edge-d1", Set: DedicatedSet},
	{Name: "edge-q1", Set: QuarantineSet},
}

// EdgesOf lists the names of a set's edges.
func EdgesOf(set string) []string {
	var out []string
	for _, e := range Edges {
		if e.Set == set {
			out = append(out, e.Name)
		}
	}
	return out
}

func edgeIndex(name string) int {
	for i, e := range Edges {
		if e.Name == name {
			return i
		}
	}
	return -1
}

// Addresses of the k-th edge (0-based, Edges order): its underlay link
// 198.18.0.2k/31 to fab (the edge has .2k+1), its Internet-side link
// 198.18.100.2k/31 to rtr (the edge has .2k+1), its health-check source
// 198.18.255.k+1. edge-a1 keeps the addresses the one-edge lab had.
func edgeUnderlay(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(2*k + 1)}) }
func edgeExt(k int) netip.Addr      { return netip.AddrFrom4([4]byte{198, 18, 100, byte(2*k + 1)}) }
func rtrSide(k int) netip.Addr      { return netip.AddrFrom4([4]byte{198, 18, 100, byte(2 * k)}) }
func edgeHealth(k int) netip.Addr   { return netip.AddrFrom4([4]byte{198, 18, 255, byte(k + 1)}) }

// edgeHealth6 is the k-th edge's IPv6 health-check address (edge
// --health-source6): 2001:db8:ffff::k+1 (edge-a1's EdgeHealth6).
func edgeHealth6(k int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 15: byte(k + 1)})
}

// IPv6 addresses of the k-th edge's Internet-side link: rtr ::1, the edge
// ::2 in 2001:db8:100:k::/64.
func edgeExt6(k int) netip.Addr { return link6(k, 2) }
func rtrSide6(k int) netip.Addr { return link6(k, 1) }

func link6(k, host int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x01, 0x00, byte(k >> 8), byte(k), 15: byte(host)})
}

// EdgeExt6Of is an edge's Internet-side IPv6 address: its nextHop6.
func EdgeExt6Of(name string) netip.Addr { return edgeExt6(edgeIndex(name)) }

// RouterSide6Of is the router's IPv6 address on its link to an edge.
func RouterSide6Of(name string) netip.Addr { return rtrSide6(edgeIndex(name)) }

// EdgeUnderlayOf is an edge's underlay address.
func EdgeUnderlayOf(name string) netip.Addr { return edgeUnderlay(edgeIndex(name)) }

// EdgeExtOf is an edge's Internet-side address: the next hop it announces.
func EdgeExtOf(name string) netip.Addr { return edgeExt(edgeIndex(name)) }

// RouterSideOf is the router's address on its link to an edge: the edge's
// BGP peer.
func RouterSideOf(name string) netip.Addr { return rtrSide(edgeIndex(name)) }

// The lab's underlay families (lab up --underlay): IPv4 (the default),
// IPv6 (every host's underlay is IPv6; the edges keep their IPv4 underlay
// address for BGP and the control plane and add an IPv6 one, their
// underlay6), or mixed (the hosts of even AZs on IPv6, the others on
// IPv4: an EIP moving from az1 to az2 changes its tunnel's outer family).
const (
	UnderlayIPv4  = "ipv4"
	UnderlayIPv6  = "ipv6"
	UnderlayMixed = "mixed"
)

// Underlay6MTU is the MTU of an IPv6 underlay link: 20 bytes more than
// the IPv4 underlay's 1500, the IPv6 outer header's extra length, so a
// guest's GuestMTU packets fit the tunnel over either family.
const Underlay6MTU = 1500 + 20

// ValidUnderlay checks a --underlay value.
func ValidUnderlay(u string) error {
	switch u {
	case UnderlayIPv4, UnderlayIPv6, UnderlayMixed:
		return nil
	}
	return fmt.Errorf("--underlay %q: want %s, %s or %s", u, UnderlayIPv4, UnderlayIPv6, UnderlayMixed)
}

// HostOnIPv6 says whether the i-th host of an AZ has an IPv6 underlay in
// a lab of underlay u.
func HostOnIPv6(u string, az, i int) bool {
	return u == UnderlayIPv6 || (u == UnderlayMixed && az%2 == 0)
}

// HostUnderlay6 is a host's IPv6 underlay address, 2001:db8:18:NN::2 in
// its link's /64 to fab (::1), NN the host's net in decimal digits (az1-h1:
// 2001:db8:18:11::2).
func HostUnderlay6(az, i int) netip.Addr { return underlay6(0, hostNet(az, i), 2) }

func hostFab6(az, i int) netip.Addr { return underlay6(0, hostNet(az, i), 1) }

// edgeUnderlay6 is the k-th edge's IPv6 underlay address,
// 2001:db8:18:1KK::2 in its link's /64 to fab (::1).
func edgeUnderlay6(k int) netip.Addr { return underlay6(1, k, 2) }

func edgeFab6(k int) netip.Addr { return underlay6(1, k, 1) }

func underlay6(hi, n, host int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x18, byte(hi), byte(n/10<<4 | n%10), 15: byte(host)})
}

// Underlay6Net holds the lab's IPv6 underlay addresses.
const Underlay6Net = "2001:db8:18::/48"

// EdgeUnderlay6Of is an edge's IPv6 underlay address (its underlay6 in a
// lab whose underlay is not IPv4).
func EdgeUnderlay6Of(name string) netip.Addr { return edgeUnderlay6(edgeIndex(name)) }

// HostUnderlayIn is a host's underlay address in a lab of underlay u.
func HostUnderlayIn(u string, az, i int) netip.Addr {
	if HostOnIPv6(u, az, i) {
		return HostUnderlay6(az, i)
	}
	return HostUnderlay(az, i)
}

// HostName names the i-th host (1-based) of an AZ.
func HostName(az, i int) string { return fmt.Sprintf("az%d-h%d", az, i) }

// hostNet is the second octet group of a host: 10*az + i.
func hostNet(az, i int) int { return 10*az + i }

// HostUnderlay is a host's underlay address.
func HostUnderlay(az, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(hostNet(az, i)), 1})
}

// guestNet is the third octet of a host's guests' private addresses: the
// host's own, but az2-h1 reuses az1-h1's (SharedGuestHosts).
func guestNet(az, i int) int {
	if az == 2 && i == 1 {
		return hostNet(1, 1)
	}
	return hostNet(az, i)
}

// SharedGuestHosts are two hosts in different AZs whose guests have the
// same private addresses (az1-h1/g1 and az2-h1/g1 are both 198.19.11.1).
var SharedGuestHosts = [2]string{"az1-h1", "az2-h1"}

// GuestAddr is the private address of guest g (1-based) on a host.
func GuestAddr(az, i, g int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, byte(guestNet(az, i)), byte(2*g - 1)})
}

// GuestAddr6 is the private IPv6 address (address6) of guest g (1-based)
// on a host: 2001:db8:f0:NNGG::2 in the guest link's /64, NN the host's
// guest net (guestNet, written in decimal digits: az1-h1's 11) and GG the
// guest's number (hex), so az1-h1/g1 is 2001:db8:f0:1101::2; az2-h1's
// guests reuse az1-h1's, as their IPv4 addresses do (SharedGuestHosts).
func GuestAddr6(az, i, g int) netip.Addr { return guest6(az, i, g, 2) }

// GuestGateway6 is the host's address on guest g's link, ::1 in the
// guest's /64: the guest's IPv6 default gateway.
func GuestGateway6(az, i, g int) netip.Addr { return guest6(az, i, g, 1) }

func guest6(az, i, g, host int) netip.Addr {
	n := guestNet(az, i)
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0xf0, byte(n/10<<4 | n%10), byte(g), 15: byte(host)})
}

// DMZAddr is the address of DMZ server i (1-based).
func DMZAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 200, byte(2*i - 1)}) }

// GuestVSID is the virtual subnet of a guest.
func GuestVSID(az, i, g int) uint32 { return uint32(5000 + 100*az + 10*i + g) }

// Build returns the topology for azs AZs of hostsPerAZ hosts with
// guestsPerHost guests each.
func Build(prefix string, azs, hostsPerAZ, guestsPerHost int) *Topology {
	return BuildUnderlay(prefix, azs, hostsPerAZ, guestsPerHost, UnderlayIPv4)
}

// BuildUnderlay is Build with an underlay family (UnderlayIPv4, UnderlayIPv6
// or UnderlayMixed).
func BuildUnderlay(prefix string, azs, hostsPerAZ, guestsPerHost int, underlay string) *Topology {
	t := &Topology{Prefix: prefix, Underlay: underlay}
	v6 := underlay != UnderlayIPv4
	add := func(name, role, az, host string) {
		t.Nodes = append(t.Nodes, &Node{Name: name, Netns: prefix + name, Role: role, AZ: az, Host: host, Addresses: map[string]string{}})
	}
	add("inet", "internet", "", "")
	add("rtr", "router", "", "")
	for _, e := range Edges {
		add(e.Name, "edge", "", "")
		t.Node(e.Name).POP, t.Node(e.Name).Set = e.POP, e.Set
	}
	add("fab", "underlay", "", "")
	t.link("inet", "eth0", ClientAddr+"/24", "rtr", "inet0", "203.0.113.1/24", 1500)
	t.routes = append(t.routes, route{"inet", "default", "203.0.113.1", "eth0"})
	t.addr6("inet", "eth0", ClientAddr6+"/64")
	t.addr6("rtr", "inet0", ClientGateway6+"/64")
	t.routes = append(t.routes, route{"inet", "::/0", ClientGateway6, "eth0"})
	// The attacker: another Internet-side network, so a flood from it is
	// told apart from the legitimate client's traffic (the DDoS test).
	add(AttackerNode, "internet", "", "")
	t.link(AttackerNode, "eth0", AttackerAddr+"/24", "rtr", "atk0", AttackerGateway+"/24", 1500)
	t.routes = append(t.routes, route{AttackerNode, "default", AttackerGateway, "eth0"})
	t.addr6(AttackerNode, "eth0", AttackerAddr6+"/64")
	t.addr6("rtr", "atk0", AttackerGateway6+"/64")
	t.routes = append(t.routes, route{AttackerNode, "::/0", AttackerGateway6, "eth0"})
	for k, e := range Edges {
		// Devices on rtr and fab are named after the edge.
		t.link("rtr", e.Name, rtrSide(k).String()+"/31", e.Name, "ext0", edgeExt(k).String()+"/31", 1500)
		t.link(e.Name, "ul0", edgeUnderlay(k).String()+"/31", "fab", e.Name, edgeUnderlay(k).Prev().String()+"/31", 1500)
		t.addr6("rtr", e.Name, rtrSide6(k).String()+"/64")
		t.addr6(e.Name, "ext0", edgeExt6(k).String()+"/64")
		t.routes = append(t.routes,
			route{e.Name, "default", rtrSide(k).String(), "ext0"},
			route{e.Name, "::/0", rtrSide6(k).String(), "ext0"},
			route{e.Name, "198.18.0.0/15", edgeUnderlay(k).Prev().String(), "ul0"},
		)
		if v6 {
			// The edges are dual-stack on the underlay: IPv4 for BGP, the
			// connection sync and the IPv4 hosts, IPv6 for the IPv6 hosts.
			t.addr6(e.Name, "ul0", edgeUnderlay6(k).String()+"/64")
			t.addr6("fab", e.Name, edgeFab6(k).String()+"/64")
			t.routes = append(t.routes, route{e.Name, Underlay6Net, edgeFab6(k).String(), "ul0"})
			t.links[len(t.links)-1].mtu = Underlay6MTU
		}
	}
	// The DMZ: a shared segment (a bridge in dmzsw) with the router, the
	// prefix set's members (dmz0) and plain servers for nat-mode
	// services. One member, the ARP owner, answers ARP there for the
	// set's VIPs and for DMZGateway, the servers' default gateway: the
	// router reaches the nat VIPs through it and the servers' replies
	// come back to it; its peers hold its connections (sync) and one of
	// them takes over when it fails (docs/lab.md, "The DMZ").
	//
	// rtr's address there is a /32: it has no route to the segment, only
	// to the nat VIPs on it (resolved by the ARP owner), so the Internet
	// reaches the servers' private addresses not at all, and the VIPs
	// only through an edge's firewall, anti-spoofing and limits
	// (TestDMZOnlyThroughEdges; docs/services.md, "Routing a nat
	// deployment must guarantee").
	add("dmzsw", "switch", "", "")
	t.link("rtr", "dmz", RouterDMZ+"/32", "dmzsw", "rtr", "", 1500)
	t.routes = append(t.routes, route{"rtr", NATPinned, "", "dmz"})
	t.addr6("rtr", "dmz", RouterDMZ6+"/128")
	t.routes = append(t.routes, route{"rtr", NATPinned6, "", "dmz"})
	// fab has a leg on the segment too: edges off it (the dedicated and
	// quarantine sets') reach the DMZ servers through the underlay, for
	// health checks and for a nat VIP pulled out to them.
	t.link("fab", "dmz", FabDMZ+"/24", "dmzsw", "fab", "", 1500)
	for k, e := range Edges {
		if e.Set == PrefixSet {
			t.link(e.Name, "dmz0", edgeDMZ(k).String()+"/24", "dmzsw", e.Name, "", 1500)
			t.addr6(e.Name, "dmz0", edgeDMZ6(k).String()+"/64")
		}
	}
	for i := 1; i <= DMZServers; i++ {
		name := fmt.Sprintf("dmz%d", i)
		add(name, "server", "", "")
		t.link("dmzsw", name, "", name, "eth0", DMZAddr(i).String()+"/24", 1500)
		t.routes = append(t.routes, route{name, "default", DMZGateway, "eth0"},
			route{name, "198.18.0.0/15", FabDMZ, "eth0"})
		t.addr6(name, "eth0", DMZAddr6(i).String()+"/64")
		t.routes = append(t.routes, route{name, "::/0", DMZGateway6, "eth0"})
	}
	for az := 1; az <= azs; az++ {
		for i := 1; i <= hostsPerAZ; i++ {
			h := HostName(az, i)
			n := hostNet(az, i)
			add(h, "host", fmt.Sprintf("az%d", az), "")
			// No route to the guests on the underlay: they are reached
			// through the tunnels only (health checks too).
			if HostOnIPv6(underlay, az, i) {
				// An IPv6-underlay host has no IPv4 address there: nothing
				// of its tunnels can fall back to IPv4.
				t.link("fab", h, "", h, "ul0", "", Underlay6MTU)
				t.addr6("fab", h, hostFab6(az, i).String()+"/64")
				t.addr6(h, "ul0", HostUnderlay6(az, i).String()+"/64")
				t.routes = append(t.routes, route{h, "::/0", hostFab6(az, i).String(), "ul0"})
			} else {
				t.link("fab", h, fmt.Sprintf("198.18.%d.0/31", n), h, "ul0", fmt.Sprintf("198.18.%d.1/31", n), 1500)
				t.routes = append(t.routes, route{h, "default", fmt.Sprintf("198.18.%d.0", n), "ul0"})
			}
			for g := 1; g <= guestsPerHost; g++ {
				gn := fmt.Sprintf("%s-g%d", h, g)
				add(gn, "guest", fmt.Sprintf("az%d", az), h)
				gw := fmt.Sprintf("198.19.%d.%d", guestNet(az, i), 2*g-2)
				t.link(h, fmt.Sprintf("g%d", g), gw+"/31", gn, "eth0", GuestAddr(az, i, g).String()+"/31", GuestMTU)
				t.routes = append(t.routes, route{gn, "default", gw, "eth0"})
				// Dual-stack guests: a /64 per guest link, the host ::1
				// (the guest's IPv6 gateway), the guest ::2 (its
				// address6, what an IPv6 EIP translates to).
				gw6 := GuestGateway6(az, i, g)
				t.addr6(h, fmt.Sprintf("g%d", g), gw6.String()+"/64")
				t.addr6(gn, "eth0", GuestAddr6(az, i, g).String()+"/64")
				t.routes = append(t.routes, route{gn, "::/0", gw6.String(), "eth0"})
			}
		}
	}
	return t
}

func (t *Topology) link(a, aDev, aAddr, b, bDev, bAddr string, mtu int) {
	t.links = append(t.links, link{a: a, b: b, aDev: aDev, bDev: bDev, aAddr: aAddr, bAddr: bAddr, mtu: mtu})
	if aAddr != "" {
		t.Node(a).Addresses[aDev] = aAddr
	}
	if bAddr != "" {
		t.Node(b).Addresses[bDev] = bAddr
	}
}

// addr6 puts an IPv6 address (CIDR) on a node's interface; the link must
// exist.
func (t *Topology) addr6(node, dev, cidr string) {
	t.addrs6 = append(t.addrs6, addr6{node, dev, cidr})
	n := t.Node(node)
	if n.Addresses6 == nil {
		n.Addresses6 = map[string]string{}
	}
	n.Addresses6[dev] = cidr
}

// Node returns a node by name.
func (t *Topology) Node(name string) *Node {
	for _, n := range t.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NodesByRole lists the nodes of a role.
func (t *Topology) NodesByRole(role string) []*Node {
	var out []*Node
	for _, n := range t.Nodes {
		if n.Role == role {
			out = append(out, n)
		}
	}
	return out
}

// Package lab builds a whole azgate region on one Linux machine out of
// network namespaces and veth pairs, runs every role in it against the
// embedded store, and drives scenarios (EIP drift between AZs).
//
//	         inet            Internet client, 203.0.113.10
//	           |
//	          rtr            upstream router (static route to the EIP prefix)
//	           |
//	        edge-a1          XDP edge: ext0 (Internet side), ul0 (underlay)
//	           |
//	          fab            underlay router, 198.18.0.0/16
//	    /   /  |  \   \   \
//	az1-h1 az1-h2 ... az3-h2 hosts running the agent (XDP on ul0 and guest links)
//	   |  \
//	  g1   g2                guests, 198.19.0.0/16 private addresses
//
// Guests are reachable only through the tunnels: the underlay routes no
// guest address, and az2-h1's guests have az1-h1's private addresses
// (another tenant with the same address plan), told apart by their hosts
// and VSIDs, as tenants' overlapping addresses are in a real cloud.
//
// Everything is sealed: no link to the machine's interfaces, no default
// route out; addresses come from RFC 5737 and RFC 2544 ranges.
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
	Addresses map[string]string `json:"addresses"`      // interface -> CIDR
	Process   *Proc             `json:"process,omitempty"`
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

// Topology is the lab's namespaces, links and routes.
type Topology struct {
	Prefix string
	Nodes  []*Node
	links  []link
	routes []route
}

// Fixed lab addresses.
const (
	ClientNet    = "203.0.113.0/24"
	DMZServers   = 3
	ClientAddr   = "203.0.113.10"
	EIPPrefix    = "198.51.100.0/24"
	EdgeUnderlay = "198.18.0.1"
	GuestMTU     = 1500 - 42 // so a guest's packets fit the 1500-byte underlay after NVGRE
)

// EdgeHealth is edge-a1's health-check address (edge --health-source): its
// checks of encap-mode backends leave from it through the tunnel.
const EdgeHealth = "198.18.255.1"

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

// DMZAddr is the address of DMZ server i (1-based).
func DMZAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 200, byte(2*i - 1)}) }

// GuestVSID is the virtual subnet of a guest.
func GuestVSID(az, i, g int) uint32 { return uint32(5000 + 100*az + 10*i + g) }

// Build returns the topology for azs AZs of hostsPerAZ hosts with
// guestsPerHost guests each.
func Build(prefix string, azs, hostsPerAZ, guestsPerHost int) *Topology {
	t := &Topology{Prefix: prefix}
	add := func(name, role, az, host string) {
		t.Nodes = append(t.Nodes, &Node{Name: name, Netns: prefix + name, Role: role, AZ: az, Host: host, Addresses: map[string]string{}})
	}
	add("inet", "internet", "", "")
	add("rtr", "router", "", "")
	add("edge-a1", "edge", "", "")
	add("fab", "underlay", "", "")
	t.link("inet", "eth0", ClientAddr+"/24", "rtr", "inet0", "203.0.113.1/24", 1500)
	t.link("rtr", "edge-a1", "198.18.100.0/31", "edge-a1", "ext0", "198.18.100.1/31", 1500)
	t.link("edge-a1", "ul0", EdgeUnderlay+"/31", "fab", "edge-a1", "198.18.0.0/31", 1500)
	t.routes = append(t.routes,
		route{"inet", "default", "203.0.113.1", "eth0"},
		route{"rtr", EIPPrefix, "198.18.100.1", "edge-a1"},
		route{"edge-a1", "default", "198.18.100.0", "ext0"},
		route{"edge-a1", "198.18.0.0/15", "198.18.0.0", "ul0"},
		// Replies of the DMZ servers (nat-mode backends) go back through
		// the edge, which translates them back to the VIP.
		route{"fab", ClientNet, EdgeUnderlay, "edge-a1"},
	)
	// DMZ servers: plain servers on the underlay router, no agent, for
	// nat-mode services.
	for i := 1; i <= DMZServers; i++ {
		name := fmt.Sprintf("dmz%d", i)
		add(name, "server", "", "")
		t.link("fab", name, fmt.Sprintf("198.19.200.%d/31", 2*i-2), name, "eth0", DMZAddr(i).String()+"/31", 1500)
		t.routes = append(t.routes, route{name, "default", fmt.Sprintf("198.19.200.%d", 2*i-2), "eth0"})
	}
	for az := 1; az <= azs; az++ {
		for i := 1; i <= hostsPerAZ; i++ {
			h := HostName(az, i)
			n := hostNet(az, i)
			add(h, "host", fmt.Sprintf("az%d", az), "")
			t.link("fab", h, fmt.Sprintf("198.18.%d.0/31", n), h, "ul0", fmt.Sprintf("198.18.%d.1/31", n), 1500)
			// No route to the guests on the underlay: they are reached
			// through the tunnels only (health checks too).
			t.routes = append(t.routes, route{h, "default", fmt.Sprintf("198.18.%d.0", n), "ul0"})
			for g := 1; g <= guestsPerHost; g++ {
				gn := fmt.Sprintf("%s-g%d", h, g)
				add(gn, "guest", fmt.Sprintf("az%d", az), h)
				gw := fmt.Sprintf("198.19.%d.%d", guestNet(az, i), 2*g-2)
				t.link(h, fmt.Sprintf("g%d", g), gw+"/31", gn, "eth0", GuestAddr(az, i, g).String()+"/31", GuestMTU)
				t.routes = append(t.routes, route{gn, "default", gw, "eth0"})
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

// Package netlab builds small networks out of network namespaces and veth
// pairs through netlink: the lab, the data-plane test bed and the benchmarks
// share it. It is lab plumbing only: production code (the daemons' next-hop
// resolver and routing watcher) lives in internal/nexthop, and TestLayers
// keeps production packages from importing netlab.
package netlab

import (
	"errors"
	"fmt"
	"net"
	"os/exec"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netns"
)

// Node is a network namespace with a netlink handle inside it.
type Node struct {
	Name string
	h    *netlink.Handle
	fd   vnetns.NsHandle
}

// NewNode creates the named namespace and opens it.
func NewNode(name string) (*Node, error) {
	if err := netns.Create(name); err != nil {
		return nil, err
	}
	n, err := OpenNode(name)
	if err != nil {
		netns.Delete(name)
		return nil, err
	}
	return n, nil
}

// OpenNode opens an existing namespace.
func OpenNode(name string) (*Node, error) {
	fd, err := vnetns.GetFromPath(netns.Path(name))
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(fd)
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("netns %s: netlink: %w", name, err)
	}
	return &Node{Name: name, h: h, fd: fd}, nil
}

// Close releases the handle; the namespace stays.
func (n *Node) Close() {
	if n.h != nil {
		n.h.Close()
		n.h = nil
	}
	if n.fd.IsOpen() {
		n.fd.Close()
	}
}

// Delete closes the node and removes its namespace (its links go with it).
func (n *Node) Delete() error {
	n.Close()
	return netns.Delete(n.Name)
}

// Handle is the node's netlink handle.
func (n *Node) Handle() *netlink.Handle { return n.h }

// Do runs fn on a thread inside the node's namespace.
func (n *Node) Do(fn func() error) error { return netns.Do(n.Name, fn) }

// Cmd runs a program inside the node's namespace.
func (n *Node) Cmd(argv ...string) *exec.Cmd { return netns.Command(n.Name, argv...) }

// Sysctl sets a sysctl inside the node.
func (n *Node) Sysctl(key, value string) error { return netns.Sysctl(n.Name, key, value) }

// IPv6 readies a node's IPv6 before its interfaces are made: no
// duplicate address detection (addresses usable at once), no router
// advertisements taken, addresses kept when an interface goes down (as
// IPv4's are: a link taken down and up again gets its routes back, not
// its addresses), and with forward IPv6 forwarding on every interface.
func (n *Node) IPv6(forward bool) error {
	for _, k := range []string{"all", "default"} {
		for _, kv := range [][2]string{{"accept_dad", "0"}, {"accept_ra", "0"}, {"keep_addr_on_down", "1"}} {
			if err := n.Sysctl("net.ipv6.conf."+k+"."+kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	if forward {
		return n.Sysctl("net.ipv6.conf.all.forwarding", "1")
	}
	return nil
}

// Forwarding turns IPv4 forwarding on for every interface of the node.
func (n *Node) Forwarding() error {
	for _, k := range []string{"net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv4.conf.default.forwarding",
		"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"} {
		v := "1"
		if k[len(k)-9:] == "rp_filter" {
			v = "0"
		}
		if err := n.Sysctl(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) link(dev string) (netlink.Link, error) {
	l, err := n.h.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("%s: link %s: %w", n.Name, dev, err)
	}
	return l, nil
}

// SetLinks sets the node's devices administratively up or down, looking
// every device up first and then flipping them back to back over the
// node's netlink handle: microseconds apart, as when a machine loses
// power, not one process spawn apart (tens of milliseconds on a loaded
// machine).
func (n *Node) SetLinks(up bool, devs ...string) error {
	links := make([]netlink.Link, 0, len(devs))
	for _, dev := range devs {
		l, err := n.link(dev)
		if err != nil {
			return err
		}
		links = append(links, l)
	}
	for i, l := range links {
		set := n.h.LinkSetDown
		if up {
			set = n.h.LinkSetUp
		}
		if err := set(l); err != nil {
			return fmt.Errorf("%s: set link %s up=%v: %w", n.Name, devs[i], up, err)
		}
	}
	return nil
}

// Ifindex returns an interface's index inside the node.
func (n *Node) Ifindex(dev string) (int, error) {
	l, err := n.link(dev)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// MAC returns an interface's hardware address.
func (n *Node) MAC(dev string) (net.HardwareAddr, error) {
	l, err := n.link(dev)
	if err != nil {
		return nil, err
	}
	return l.Attrs().HardwareAddr, nil
}

// End is one side of a veth pair.
type End struct {
	Node *Node
	Dev  string
	MAC  string // empty: kernel-chosen
}

// Veth creates a veth pair between two nodes with the given MTU (0: 1500)
// and brings both ends up.
func Veth(a, b End, mtu int) error {
	if mtu == 0 {
		mtu = 1500
	}
	la := netlink.NewLinkAttrs()
	la.Name = a.Dev
	la.MTU = mtu
	la.Namespace = netlink.NsFd(a.Node.fd)
	if a.MAC != "" {
		m, err := net.ParseMAC(a.MAC)
		if err != nil {
			return err
		}
		la.HardwareAddr = m
	}
	v := &netlink.Veth{LinkAttrs: la, PeerName: b.Dev, PeerNamespace: netlink.NsFd(b.Node.fd)}
	if b.MAC != "" {
		m, err := net.ParseMAC(b.MAC)
		if err != nil {
			return err
		}
		v.PeerHardwareAddr = m
	}
	// Create from side a (the peer is created straight in b's namespace).
	if err := a.Node.h.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s/%s - %s/%s: %w", a.Node.Name, a.Dev, b.Node.Name, b.Dev, err)
	}
	for _, e := range []End{a, b} {
		l, err := e.Node.link(e.Dev)
		if err != nil {
			return err
		}
		if err := e.Node.h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("%s/%s mtu: %w", e.Node.Name, e.Dev, err)
		}
		if err := e.Node.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("%s/%s up: %w", e.Node.Name, e.Dev, err)
		}
	}
	return nil
}

// XDPReady readies one end of a veth pair for XDP on either side, as a
// real NIC behaves: XDP_TX and XDP_REDIRECT into a veth only deliver when
// the peer runs NAPI, which GRO on (or an XDP program) turns on; TX
// checksum offload off, because a veth never computes offloaded
// checksums: without it a kernel's TCP segment crosses with a partial
// checksum, which XDP then forwards (and translates) as if it were final,
// as a real NIC's wire would never show it. It runs ethtool.
func (n *Node) XDPReady(dev string) error {
	if out, err := n.Cmd("ethtool", "-K", dev, "gro", "on", "tx", "off").CombinedOutput(); err != nil {
		return fmt.Errorf("%s/%s: ethtool -K gro on tx off: %v: %s", n.Name, dev, err, out)
	}
	return nil
}

// Addr adds an address (CIDR notation) to an interface; an IPv6 one
// without duplicate address detection (nodad), so it is usable at once
// rather than tentative for a second.
func (n *Node) Addr(dev, cidr string) error {
	l, err := n.link(dev)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return fmt.Errorf("%s: address %q: %w", n.Name, cidr, err)
	}
	if a.IP.To4() == nil {
		a.Flags |= unix.IFA_F_NODAD
	}
	if err := n.h.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s/%s: add %s: %w", n.Name, dev, cidr, err)
	}
	return nil
}

// Route adds a route to dst ("default" or a prefix) via gw (empty for an
// on-link route through dev).
func (n *Node) Route(dst, gw, dev string) error {
	r := &netlink.Route{}
	if dst == "default" {
		dst = "0.0.0.0/0"
	}
	_, ipn, err := net.ParseCIDR(dst)
	if err != nil {
		return fmt.Errorf("%s: route %q: %w", n.Name, dst, err)
	}
	r.Dst = ipn
	if gw != "" {
		r.Gw = net.ParseIP(gw)
		if r.Gw == nil {
			return fmt.Errorf("%s: gateway %q is not an address", n.Name, gw)
		}
	} else {
		r.Scope = netlink.SCOPE_LINK // on-link: the destination is on dev's segment
	}
	if dev != "" {
		l, err := n.link(dev)
		if err != nil {
			return err
		}
		r.LinkIndex = l.Attrs().Index
	}
	if err := n.h.RouteReplace(r); err != nil {
		return fmt.Errorf("%s: route %s via %s: %w", n.Name, dst, gw, err)
	}
	return nil
}

// Blackhole adds a blackhole route.
func (n *Node) Blackhole(dst string) error {
	_, ipn, err := net.ParseCIDR(dst)
	if err != nil {
		return err
	}
	return n.h.RouteReplace(&netlink.Route{Dst: ipn, Type: unix.RTN_BLACKHOLE})
}

// Neigh installs a permanent neighbour entry (IPv4 or IPv6).
func (n *Node) Neigh(dev, ip, mac string) error {
	l, err := n.link(dev)
	if err != nil {
		return err
	}
	m, err := net.ParseMAC(mac)
	if err != nil {
		return err
	}
	a := net.ParseIP(ip)
	if a == nil {
		return fmt.Errorf("%s: neighbour %q is not an address", n.Name, ip)
	}
	family := unix.AF_INET
	if a.To4() == nil {
		family = unix.AF_INET6
	}
	return n.h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: family, State: netlink.NUD_PERMANENT,
		IP: a, HardwareAddr: m})
}

package nexthop

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteGet resolves a destination: egress interface index and next hop
// (the gateway, or dst itself when on-link). A zoned address (an IPv6
// link-local gateway, "fe80::1%eth0" or "fe80::1%3") is on-link on its
// zone's interface: a route lookup of a link-local address alone would
// pick any interface's fe80::/64.
func RouteGet(h *netlink.Handle, dst netip.Addr) (ifindex int, nexthop netip.Addr, err error) {
	if z := dst.Zone(); z != "" {
		if i, err := strconv.Atoi(z); err == nil && i > 0 {
			return i, dst.WithZone(""), nil
		}
		l, err := h.LinkByName(z)
		if err != nil {
			return 0, netip.Addr{}, fmt.Errorf("route to %v: interface %q: %w", dst, z, err)
		}
		return l.Attrs().Index, dst.WithZone(""), nil
	}
	rs, err := h.RouteGet(dst.AsSlice())
	if err != nil {
		return 0, netip.Addr{}, fmt.Errorf("route to %v: %w", dst, err)
	}
	if len(rs) == 0 {
		return 0, netip.Addr{}, fmt.Errorf("no route to %v", dst)
	}
	nh := dst
	if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok && rs[0].Gw != nil {
		nh = gw.Unmap()
	}
	return rs[0].LinkIndex, nh, nil
}

// setManagedNeigh asks the kernel to keep a neighbour entry resolved
// (NTF_EXT_MANAGED, Linux 5.16+), so XDP's bpf_fib_lookup always finds the
// next hop's MAC without the kernel ever seeing a packet to it.
func setManagedNeigh(h *netlink.Handle, ifindex int, ip netip.Addr) error {
	fam := unix.AF_INET
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	err := h.NeighSet(&netlink.Neigh{LinkIndex: ifindex, Family: fam, IP: ip.AsSlice(),
		Flags: netlink.NTF_USE, FlagsExt: netlink.NTF_EXT_MANAGED, State: netlink.NUD_NONE})
	if err != nil {
		return fmt.Errorf("managed neighbour %v on ifindex %d: %w", ip, ifindex, err)
	}
	return nil
}

package edge

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/store"
)

// Store is what the edge needs of the store: to follow the region (or
// its set's share of it, FollowShare) and publish leased keys, and to
// elect its set's ARP owner.
type Store interface {
	store.Node
	store.Elector
}

// Run loads (or re-adopts) the edge data plane, attaches it to the
// interfaces and follows the store until ctx ends. On return the program
// stays attached and keeps forwarding with the last state (but answers
// ARP no more: another member of the set takes that over).
//
// Run is wiring: the configuration is completed and checked before
// anything starts, then each concern is a component (components.go),
// started in order and stopped in reverse; a start-up error stops what
// started and is returned.
func Run(ctx context.Context, cfg Config, st Store, load dataplane.LoadOptions, metricsListen string) error {
	cfg = cfg.withDefaults()
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.EIPMax != 0 {
		load.EIPMax = cfg.EIPMax
	}
	if cfg.ConnMax != 0 {
		load.ConnMax = cfg.ConnMax
	}
	if cfg.ConnMax6 != 0 {
		load.ConnMax6 = cfg.ConnMax6
	}
	if cfg.DriftFlows != 0 {
		load.DriftFlows = cfg.DriftFlows
	}
	if cfg.ListenerMax != 0 {
		load.ListenerMax = cfg.ListenerMax
	}
	if cfg.BackendMax != 0 {
		load.BackendMax = cfg.BackendMax
	}
	p := &plane{cfg: &cfg, load: load}
	hc := &healthChecks{p: p, st: st}
	arp := &arpPart{p: p, st: st}
	rt := &routing{p: p, arp: arp}
	sy := &syncPart{p: p}
	bg := &bgpPart{p: p, st: st, sync: sy, routing: rt}
	rates := &rateReports{p: p, st: st, meter: newRateMeter(cfg.Rates)}
	bw := &bandwidthPart{p: p, st: st, meter: rates.meter}
	r := &runner{log: cfg.Log}
	err := r.Start(ctx,
		p,                 // the data plane and its reconciler
		hc,                // backend health checks (before attaching: the health address)
		arp,               // the ARP owner
		&attachment{p: p}, // XDP on every --attach interface
		rt,                // next hops follow the kernel's routes
		sy,                // connection sync
		bg,                // BGP announcements
		&afterApply{p: p, bgp: bg, routing: rt, arp: arp},
		bw,    // shared bandwidth
		rates, // DDoS rate reports
		&statusPart{p: p, st: st, listen: metricsListen, hc: hc, arp: arp, sync: sy, bgp: bg, bw: bw},
	)
	if err != nil {
		return err
	}
	defer r.Stop()
	if cfg.FollowShare {
		return FollowShare(ctx, st, cfg.Name, p.rec, cfg.Log)
	}
	return st.FollowSink(ctx, p.rec) // the whole region (Config.FollowShare)
}

// ifindexOf finds the interface that holds an address.
func ifindexOf(a netip.Addr) (uint32, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return uint32(ifc.Index), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no interface holds %v: configure it on the underlay interface", a)
}

func firstIPv4(ifname string) (netip.Addr, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IPv4 address", ifname)
}

// defaultGateways are the next hops of the default routes, IPv4 and IPv6
// (every path of a multipath one): the edge sends most of its traffic
// there (IPv6 guests' too, edge.c edge_pull_failed), so they stay resolved as well. A
// link-local IPv6 gateway (fe80::/10, the usual one) is zoned with its
// interface's index: nexthop.RouteGet takes it as on-link there.
func defaultGateways() []netip.Addr {
	rs, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	add := func(ip net.IP, ifindex int) {
		gw, ok := netip.AddrFromSlice(ip)
		if !ok || ip == nil {
			return
		}
		gw = gw.Unmap()
		if gw.Is6() && gw.IsLinkLocalUnicast() && ifindex > 0 {
			gw = gw.WithZone(strconv.Itoa(ifindex))
		}
		out = append(out, gw)
	}
	for _, r := range rs {
		if r.Dst != nil && !(r.Dst.IP.IsUnspecified() && isDefault(r.Dst)) {
			continue
		}
		add(r.Gw, r.LinkIndex)
		for _, p := range r.MultiPath {
			add(p.Gw, p.LinkIndex)
		}
	}
	return out
}

// isDefault tells a default route's destination (0.0.0.0/0, ::/0).
func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// rtprotAzgate marks the routes the edge installs (iproute2 shows it as
// "proto 169").
const rtprotAzgate = 169

// ensureDiscard makes the kernel answer traffic to addresses of the set's
// prefixes that are not bound EIPs with ICMP unreachable, instead of
// sending it back along the default route (a loop with the upstream
// router that announces the prefix to us): the aggregate discard route
// every router announcing an aggregate installs.
func ensureDiscard(prefixes []netip.Prefix) error {
	h, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	want := map[string]bool{}
	for _, p := range prefixes {
		want[p.String()] = true
		_, ipn, _ := net.ParseCIDR(p.String())
		r := &netlink.Route{Dst: ipn, Type: unix.RTN_UNREACHABLE, Protocol: rtprotAzgate}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("unreachable %v: %w", p, err)
		}
	}
	// Both families: a set's IPv6 prefixes get their discard route too
	// (IPv6 goes to the kernel until the edge has an IPv6 data path).
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(family, &netlink.Route{Protocol: rtprotAzgate}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Dst != nil && !want[r.Dst.String()] {
				h.RouteDel(&r)
			}
		}
	}
	return nil
}

// measureHZ reads the kernel's CONFIG_HZ off bpf_jiffies64.
func measureHZ() (uint32, error) {
	b, err := dataplane.LoadBench()
	if err != nil {
		return 0, err
	}
	defer b.Close()
	return b.MeasureHZ()
}

// selfCheck is the data plane's check before the edge announces: the
// edge program is attached to every --attach interface (the one this
// daemon loaded, by program ID) and the maps answer.
func selfCheck(dp *dataplane.Edge, ifaces []string) func() error {
	var id uint32
	if info, err := dp.Program().Info(); err == nil {
		if v, ok := info.ID(); ok {
			id = uint32(v)
		}
	}
	return func() error {
		for _, n := range ifaces {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return fmt.Errorf("interface %s: %w", n, err)
			}
			x := l.Attrs().Xdp
			if x == nil || !x.Attached || id != 0 && x.ProgId != id {
				return fmt.Errorf("interface %s: the edge program is not attached", n)
			}
			// A link without carrier (cable out, peer down) forwards
			// nothing: withdraw at once rather than after the routers'
			// hold timer, and drop the announce key so the agents stop
			// sending replies this way.
			if l.Attrs().RawFlags&unix.IFF_UP == 0 || l.Attrs().RawFlags&unix.IFF_RUNNING == 0 {
				return fmt.Errorf("interface %s: link down (no carrier)", n)
			}
		}
		if _, err := dp.Stats(); err != nil {
			return fmt.Errorf("maps unreadable: %w", err)
		}
		return nil
	}
}

// maxLimitDrops bounds the addresses the status lists in limit_drops, as
// the per-EIP and firewall-rule sections are bounded.
const maxLimitDrops = 4096

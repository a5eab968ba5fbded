// Package nexthop keeps the data plane's next hops resolved: the Resolver
// holds managed neighbour entries for the next hops toward sets of
// addresses (bpf_fib_lookup only reads the neighbour table), RouteGet asks
// the kernel for a destination's egress and next hop, and WatchRouting
// tells the daemons when routing, neighbours or links changed.
package nexthop

import (
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Resolver keeps the next hops toward sets of addresses resolved, as
// managed neighbour entries: bpf_fib_lookup only reads the neighbour
// table, and with XDP forwarding everything the kernel would otherwise
// never see a packet that makes it resolve them. Each group (the agent's
// edges, its guests; the edge's hosts) is a set the caller replaces;
// Refresh re-checks every group after routing changed (a host reached
// through another next hop, a neighbour entry flushed).
//
// Locking: mu only guards the groups and the refresh timer, never
// netlink work. A full pass (Keep, a refresh: netlink work proportional
// to the addresses) runs under ensureMu alone, so passes do not overlap;
// Add takes neither while it talks to the kernel, so a caller adding a
// few addresses (the edge, under its reconciler's lock, before a commit
// routes to a new host) never waits for a full pass. The resolver keeps
// no cache of the kernel's neighbours: passes and Add only ever add
// managed entries, so running them side by side can cost a duplicate
// request, never lose or undo an entry.
type Resolver struct {
	log      *slog.Logger
	mu       sync.Mutex
	groups   map[string][]netip.Addr
	timer    *time.Timer
	ensureMu sync.Mutex
}

type hop struct {
	ifindex int
	nh      netip.Addr
}

// ensureHook, if set (tests), is called at the start of every full pass,
// under ensureMu.
var ensureHook func()

// NewResolver returns an empty Resolver.
func NewResolver(log *slog.Logger) *Resolver {
	return &Resolver{log: log, groups: map[string][]netip.Addr{}}
}

// Keep makes addrs the group's set and resolves their next hops now.
func (r *Resolver) Keep(group string, addrs []netip.Addr) {
	addrs = slices.Clone(addrs)
	r.mu.Lock()
	r.groups[group] = addrs
	r.mu.Unlock()
	r.ensure(addrs)
}

// Add adds addrs to the group's set and resolves the next hops of those no
// group held yet now: a caller about to send to new addresses starts
// their resolution without waiting to replace the whole set (Keep), nor
// for a pass in progress. Its netlink work is per new address: a route
// lookup, the next hop's neighbour entry read, and a request to manage
// it unless it is managed (or permanent) already. An address another
// caller is adding at the same time may still be under way when Add
// returns.
func (r *Resolver) Add(group string, addrs []netip.Addr) {
	r.mu.Lock()
	have := map[netip.Addr]bool{}
	for _, g := range r.groups {
		for _, a := range g {
			have[a] = true
		}
	}
	var fresh []netip.Addr
	for _, a := range addrs {
		if !have[a] {
			have[a] = true
			fresh = append(fresh, a)
		}
	}
	r.groups[group] = append(r.groups[group], fresh...)
	r.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	// The neighbours are not listed (a pass does that, per interface),
	// nor the multipath routes: each new address's next hop is read alone.
	h, err := netlink.NewHandle()
	if err != nil {
		r.log.Warn("netlink", "err", err)
		return
	}
	defer h.Close()
	sock, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		r.log.Warn("netlink", "err", err)
		return
	}
	defer sock.Close()
	done := map[hop]bool{}
	for _, a := range fresh {
		ifindex, nh, err := RouteGet(h, a)
		if err != nil {
			r.log.Warn("no route to a next hop to keep resolved", "to", a, "err", err)
			continue
		}
		x := hop{ifindex, nh}
		if done[x] {
			continue
		}
		done[x] = true
		if keptNeigh(sock, ifindex, nh) {
			continue
		}
		if err := setManagedNeigh(h, ifindex, nh); err != nil {
			r.log.Warn("cannot keep next hop resolved", "next_hop", nh, "err", err)
		}
	}
}

// Refresh re-checks every group within delay (calls in between coalesce).
func (r *Resolver) Refresh(delay time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		return
	}
	r.timer = time.AfterFunc(delay, func() {
		r.mu.Lock()
		r.timer = nil
		var all []netip.Addr
		for _, g := range r.groups {
			all = append(all, g...)
		}
		r.mu.Unlock()
		r.ensure(all)
	})
}

// Stop cancels a pending refresh.
func (r *Resolver) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// ensure resolves the next hop of every address: one route lookup each
// and one neighbour listing per interface. It holds ensureMu, not mu.
func (r *Resolver) ensure(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	r.ensureMu.Lock()
	defer r.ensureMu.Unlock()
	if ensureHook != nil {
		ensureHook()
	}
	h, err := netlink.NewHandle()
	if err != nil {
		r.log.Warn("netlink", "err", err)
		return
	}
	defer h.Close()
	kept := map[famIf]map[netip.Addr]bool{} // (family, ifindex) -> next hops managed or permanent
	var hops []hop
	for _, a := range addrs {
		ifindex, nh, err := RouteGet(h, a)
		if err != nil {
			r.log.Warn("no route to a next hop to keep resolved", "to", a, "err", err)
			continue
		}
		hops = append(hops, hop{ifindex, nh})
	}
	// Multipath routes: the route lookup above names the one next hop the
	// kernel picks for the address alone, but flows to it spread over
	// every next hop of the route (bpf_fib_lookup too, by flow): keep
	// them all resolved.
	for _, nh := range multipathHops(h, addrs) {
		hops = append(hops, hop{nh.LinkIndex, nh.gw})
	}
	for _, x := range hops {
		ifindex, nh := x.ifindex, x.nh
		k := famIf{nh.Is6(), ifindex}
		have, ok := kept[k]
		if !ok {
			have = managedNeighs(h, ifindex, nh.Is6())
			kept[k] = have
		}
		if have[nh] {
			continue
		}
		if err := setManagedNeigh(h, ifindex, nh); err != nil {
			r.log.Warn("cannot keep next hop resolved", "next_hop", nh, "err", err)
			continue
		}
		have[nh] = true
	}
}

// famIf is an interface's neighbour table of one family.
type famIf struct {
	v6      bool
	ifindex int
}

type pathHop struct {
	LinkIndex int
	gw        netip.Addr
}

// multipathHops lists the next hops of every multipath route (IPv4 or
// IPv6) holding one of addrs (a more specific route may still win for an
// address: then a next hop is kept resolved for nothing, which costs a
// neighbour entry). The routes of a family are listed only when addrs
// hold an address of it.
func multipathHops(h *netlink.Handle, addrs []netip.Addr) []pathHop {
	var out []pathHop
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		v6 := fam == netlink.FAMILY_V6
		if !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap().Is6() == v6 }) {
			continue
		}
		out = append(out, multipathHopsOf(h, fam, addrs)...)
	}
	return out
}

func multipathHopsOf(h *netlink.Handle, fam int, addrs []netip.Addr) []pathHop {
	rs, err := h.RouteList(nil, fam)
	if err != nil {
		return nil
	}
	var out []pathHop
	for _, r := range rs {
		if len(r.MultiPath) == 0 {
			continue
		}
		pfx := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if fam == netlink.FAMILY_V6 {
			pfx = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		if r.Dst != nil {
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			if !ok {
				continue
			}
			pfx = netip.PrefixFrom(a.Unmap(), ones)
		}
		if !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return pfx.Contains(a.WithZone("")) }) {
			continue
		}
		for _, p := range r.MultiPath {
			if gw, ok := netip.AddrFromSlice(p.Gw); ok && p.Gw != nil {
				out = append(out, pathHop{p.LinkIndex, gw.Unmap()})
			}
		}
	}
	return out
}

// managedNeighs lists the kept (managed or permanent) neighbour entries
// of one family on ifindex.
func managedNeighs(h *netlink.Handle, ifindex int, v6 bool) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	fam := unix.AF_INET
	if v6 {
		fam = unix.AF_INET6
	}
	cur, err := h.NeighList(ifindex, fam)
	if err != nil {
		return out
	}
	for _, n := range cur {
		if a, ok := netip.AddrFromSlice(n.IP); ok && kept(n) {
			out[a.Unmap()] = true
		}
	}
	return out
}

// kept tells a neighbour entry the resolver leaves alone: managed
// already, or permanent (asking the kernel to manage a permanent entry
// would make it a resolving one).
func kept(n netlink.Neigh) bool {
	return n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 || n.State&netlink.NUD_PERMANENT != 0
}

// keptNeigh reads the one neighbour entry of ip on ifindex
// (RTM_GETNEIGH, Linux 4.20+) and tells whether it is kept (managed or
// permanent); an entry missing or unreadable is not.
func keptNeigh(sock *nl.NetlinkSocket, ifindex int, ip netip.Addr) bool {
	fam, dst := unix.AF_INET, nl.NewRtAttr(unix.NDA_DST, ip.AsSlice())
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	req.AddData(&netlink.Ndmsg{Family: uint8(fam), Index: uint32(ifindex)})
	req.AddData(dst)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	if err != nil || len(msgs) == 0 {
		return false
	}
	n, err := netlink.NeighDeserialize(msgs[0])
	return err == nil && kept(*n)
}

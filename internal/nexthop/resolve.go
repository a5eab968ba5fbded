// Package nexthop keeps the data plane's next hops resolved: the Resolver
// holds managed neighbour entries for the next hops toward sets of
// addresses (bpf_fib_lookup only reads the neighbour table), RouteGet asks
// the kernel for a destination's egress and next hop, and WatchRouting
// tells the daemons when routing, neighbours or links changed.
package nexthop

import (
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Resolver keeps the next hops toward sets of addresses resolved, as
// managed neighbour entries: bpf_fib_lookup only reads the neighbour
// table, and with XDP forwarding everything the kernel would otherwise
// never see a packet that makes it resolve them. Each group (the agent's
// edges, its guests; the edge's hosts) is a set the caller replaces;
// Refresh re-checks every group after routing changed (a host reached
// through another next hop, a neighbour entry flushed).
type Resolver struct {
	log    *slog.Logger
	mu     sync.Mutex
	groups map[string][]netip.Addr
	timer  *time.Timer
	// hops are the next hops known managed (or permanent), as of the
	// last listing of their interface's neighbours and the entries made
	// since: Add looks a new address's next hop up here instead of
	// listing the neighbours again.
	hops map[hop]bool
}

type hop struct {
	ifindex int
	nh      netip.Addr
}

// NewResolver returns an empty Resolver.
func NewResolver(log *slog.Logger) *Resolver {
	return &Resolver{log: log, groups: map[string][]netip.Addr{}, hops: map[hop]bool{}}
}

// Keep makes addrs the group's set and resolves their next hops now.
func (r *Resolver) Keep(group string, addrs []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[group] = slices.Clone(addrs)
	r.ensure(addrs)
}

// Add adds addrs to the group's set and resolves the next hops of those no
// group held yet now: a caller about to send to new addresses starts
// their resolution without waiting to replace the whole set (Keep).
func (r *Resolver) Add(group string, addrs []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
	if len(fresh) == 0 {
		return
	}
	// One route lookup each; a neighbour entry only for a next hop not
	// known managed (the neighbours are not listed again, nor the
	// multipath routes: Keep and Refresh do that).
	h, err := netlink.NewHandle()
	if err != nil {
		r.log.Warn("netlink", "err", err)
		return
	}
	defer h.Close()
	for _, a := range fresh {
		ifindex, nh, err := RouteGet(h, a)
		if err != nil {
			r.log.Warn("no route to a next hop to keep resolved", "to", a, "err", err)
			continue
		}
		if r.hops[hop{ifindex, nh}] {
			continue
		}
		if err := setManagedNeigh(h, ifindex, nh); err != nil {
			r.log.Warn("cannot keep next hop resolved", "next_hop", nh, "err", err)
			continue
		}
		r.hops[hop{ifindex, nh}] = true
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
		defer r.mu.Unlock()
		r.timer = nil
		var all []netip.Addr
		for _, g := range r.groups {
			all = append(all, g...)
		}
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
// and one neighbour listing per interface.
func (r *Resolver) ensure(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	h, err := netlink.NewHandle()
	if err != nil {
		r.log.Warn("netlink", "err", err)
		return
	}
	defer h.Close()
	kept := map[int]map[netip.Addr]bool{} // ifindex -> next hops managed or permanent
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
		have, ok := kept[ifindex]
		if !ok {
			have = managedNeighs(h, ifindex)
			kept[ifindex] = have
			maps.DeleteFunc(r.hops, func(k hop, _ bool) bool { return k.ifindex == ifindex })
			for a := range have {
				r.hops[hop{ifindex, a}] = true
			}
		}
		if have[nh] {
			continue
		}
		if err := setManagedNeigh(h, ifindex, nh); err != nil {
			r.log.Warn("cannot keep next hop resolved", "next_hop", nh, "err", err)
			continue
		}
		have[nh] = true
		r.hops[hop{ifindex, nh}] = true
	}
}

type pathHop struct {
	LinkIndex int
	gw        netip.Addr
}

// multipathHops lists the next hops of every IPv4 multipath route holding
// one of addrs (a more specific route may still win for an address: then
// a next hop is kept resolved for nothing, which costs an ARP entry).
func multipathHops(h *netlink.Handle, addrs []netip.Addr) []pathHop {
	rs, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	var out []pathHop
	for _, r := range rs {
		if len(r.MultiPath) == 0 {
			continue
		}
		pfx := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if r.Dst != nil {
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			if !ok {
				continue
			}
			pfx = netip.PrefixFrom(a.Unmap(), ones)
		}
		if !slices.ContainsFunc(addrs, pfx.Contains) {
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

func managedNeighs(h *netlink.Handle, ifindex int) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	cur, err := h.NeighList(ifindex, unix.AF_INET)
	if err != nil {
		return out
	}
	for _, n := range cur {
		if a, ok := netip.AddrFromSlice(n.IP); ok && (n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 || n.State&netlink.NUD_PERMANENT != 0) {
			out[a.Unmap()] = true
		}
	}
	return out
}

package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
)

// Health checks that travel the tunnel (issue 7, section 4; bpf/lib/hc.h,
// docs/services.md "Health checks"). An encap-mode backend's guest is
// checked through NVGRE to its host, as its clients reach it:
//
//   - the checker's socket is bound to the edge's health-check address
//     (--health-source) and marked (SO_MARK) with its backend's mark;
//   - the rule "from HC lookup HCTable" routes everything from that address
//     to the health-check device (a veth, HCDevice, ARP off: the kernel
//     needs no neighbour), whose TCX egress program encapsulates by the
//     mark (hc_marks) and redirects out of the underlay interface;
//     anything from HC without a known mark (a kernel RST) is dropped there;
//   - the answer, in NVGRE to the edge, is passed up by xdp_edge on the
//     underlay interface to HC, where the socket takes it.
const (
	// HCDevice is the health-check device; its veth peer (HCDevice's
	// name with 1) only keeps it up and receives nothing.
	HCDevice = "azghc0"
	hcPeer   = "azghc1"
	// HCTable is the routing table of the health-check address.
	HCTable = 2599
	// hcRulePref orders the rule before the main table's (32766).
	hcRulePref = 1000
	// hcMarkBase is the first mark (a mark is per backend; only the tc
	// program reads it, the rule matches the source address).
	hcMarkBase = 0xa2700000
	hcMarkMax  = 0xfffff
)

// setupHealthDevice creates (or adopts) the health-check device, puts the
// health-check addresses on it (src IPv4, src6 IPv6; an invalid one is
// not set up) and routes each address's traffic to it; the device's MTU
// leaves room for NVGRE on the smallest of ifaces (the interfaces the edge
// is attached to). The reverse-path filter is left alone here: only the
// underlay interface's is loosened, once the edge knows it
// (underlayRPFilter).
func setupHealthDevice(src, src6 netip.Addr, ifaces []string, log *slog.Logger) error {
	mtu := 1500
	for _, name := range ifaces {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("health-check device: interface %s: %w", name, err)
		}
		mtu = min(mtu, l.Attrs().MTU)
	}
	mtu -= 42 // NVGRE
	if src6.IsValid() {
		mtu -= 20 // NVGRE over the IPv6 underlay (62 bytes), to a host of it
	}
	dev, err := netlink.LinkByName(HCDevice)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("health-check device %s: %w", HCDevice, err)
		}
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: HCDevice, MTU: mtu}, PeerName: hcPeer}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("create the health-check device %s: %w", HCDevice, err)
		}
		if dev, err = netlink.LinkByName(HCDevice); err != nil {
			return err
		}
	}
	for _, name := range []string{HCDevice, hcPeer} {
		// No router solicitations or DAD out of a device that only
		// carries checks (the tc program would count them as drops).
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0o644)
	}
	if src6.IsValid() {
		// IPv6 on the device for HC6 alone: no link-local address, no
		// router solicitations, no DAD (the address is added nodad;
		// NOARP covers neighbour discovery, as ARP for IPv4).
		for _, kv := range [][2]string{{"addr_gen_mode", "1"}, {"router_solicitations", "0"}, {"accept_dad", "0"},
			{"accept_ra", "0"}, {"disable_ipv6", "0"}} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+HCDevice+"/"+kv[0], []byte(kv[1]), 0o644); err != nil {
				return fmt.Errorf("health-check device %s: IPv6 %s: %w", HCDevice, kv[0], err)
			}
		}
	}
	if err := netlink.LinkSetMTU(dev, mtu); err != nil {
		return fmt.Errorf("health-check device %s: MTU %d: %w", HCDevice, mtu, err)
	}
	if err := netlink.LinkSetARPOff(dev); err != nil {
		return fmt.Errorf("health-check device %s: arp off: %w", HCDevice, err)
	}
	if peer, err := netlink.LinkByName(hcPeer); err == nil {
		if err := netlink.LinkSetUp(peer); err != nil {
			return fmt.Errorf("health-check device %s: %w", hcPeer, err)
		}
	}
	if err := netlink.LinkSetUp(dev); err != nil {
		return fmt.Errorf("health-check device %s: %w", HCDevice, err)
	}
	if src.IsValid() {
		if err := hcRoute(dev, src, unix.AF_INET, 32, "0.0.0.0/0"); err != nil {
			return err
		}
	} else if err := hcRules(unix.AF_INET, netip.Addr{}, 0); err != nil {
		return err
	}
	if src6.IsValid() {
		return hcRoute(dev, src6, unix.AF_INET6, 128, "::/0")
	}
	return hcRules(unix.AF_INET6, netip.Addr{}, 0)
}

// hcRoute puts the health-check address src (of family, bits its host
// prefix) on dev, routes everything from it there (all: the family's
// default, in HCTable) and keeps the rule "from src lookup HCTable"
// (hcRules). An IPv6 address is added without DAD.
func hcRoute(dev netlink.Link, src netip.Addr, family, bits int, all string) error {
	a := &netlink.Addr{IPNet: &net.IPNet{IP: src.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if family == unix.AF_INET6 {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrReplace(dev, a); err != nil {
		return fmt.Errorf("health-check address %v on %s: %w", src, HCDevice, err)
	}
	_, dst, _ := net.ParseCIDR(all)
	r := &netlink.Route{LinkIndex: dev.Attrs().Index, Dst: dst, Table: HCTable, Scope: netlink.SCOPE_LINK, Src: src.AsSlice()}
	if family == unix.AF_INET6 {
		r.Scope = netlink.SCOPE_UNIVERSE
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("health-check route (table %d via %s, %v): %w", HCTable, HCDevice, src, err)
	}
	return hcRules(family, src, bits)
}

// hcRules keeps one rule of family in HCTable: "from src lookup HCTable"
// (the invalid src: none), removing any other (another health-check
// address's).
func hcRules(family int, src netip.Addr, bits int) error {
	rules, err := netlink.RuleList(family)
	if err != nil {
		return fmt.Errorf("list routing rules: %w", err)
	}
	have := false
	for _, ru := range rules {
		if ru.Table != HCTable {
			continue
		}
		if src.IsValid() && ru.Src != nil && ru.Src.IP.Equal(src.AsSlice()) && ru.Priority == hcRulePref {
			have = true
			continue
		}
		rr := ru
		netlink.RuleDel(&rr) // another health-check address's
	}
	if have || !src.IsValid() {
		return nil
	}
	ru := netlink.NewRule()
	ru.Family = family
	ru.Src = &net.IPNet{IP: src.AsSlice(), Mask: net.CIDRMask(bits, bits)}
	ru.Table = HCTable
	ru.Priority = hcRulePref
	if err := netlink.RuleAdd(ru); err != nil {
		return fmt.Errorf("health-check rule (from %v lookup %d): %w", src, HCTable, err)
	}
	return nil
}

// underlayRPFilter returns the Reconciler's OnUnderlay hook for tunnel
// health checks: it makes the underlay interface's strict reverse-path
// filter loose, since the answers arrive there (decapsulated by the XDP
// program) from a guest address the edge routes elsewhere, or nowhere but
// its default route. Only that interface: on the others (the Internet
// side) strict rp_filter is the only source check of the packets the XDP
// program passes to the kernel. When the underlay moves to another
// interface, the one it leaves gets its strict filter back.
func underlayRPFilter(log *slog.Logger) func(ifindex uint32) error {
	var loosened string // the interface made loose, if any
	return func(ifindex uint32) error {
		l, err := netlink.LinkByIndex(int(ifindex))
		if err != nil {
			return fmt.Errorf("health checks: underlay interface %d: %w", ifindex, err)
		}
		name := l.Attrs().Name
		if name == loosened {
			return nil
		}
		if loosened != "" {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+loosened+"/rp_filter", []byte("1"), 0o644); err != nil {
				log.Warn("could not make the reverse-path filter strict again on the former underlay interface", "interface", loosened, "err", err)
			}
			loosened = ""
		}
		changed, err := looseRPFilter(name, log)
		if err != nil {
			return err
		}
		if changed {
			loosened = name
		}
		return nil
	}
}

// looseRPFilter makes a strict reverse-path filter on an interface loose
// (the kernel applies the larger of "all" and the interface's value).
func looseRPFilter(ifname string, log *slog.Logger) (changed bool, err error) {
	read := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + name + "/rp_filter")
		if err != nil {
			return 0
		}
		v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return v
	}
	if max(read("all"), read(ifname)) != 1 {
		return false, nil
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+ifname+"/rp_filter", []byte("2"), 0o644); err != nil {
		return false, fmt.Errorf("health checks: loose rp_filter on %s: %w", ifname, err)
	}
	log.Info("reverse-path filter made loose on the underlay interface for health-check answers", "interface", ifname)
	return true, nil
}

// hcTunnel gives each encap-mode backend checked through the tunnel a mark
// and keeps the data plane's marks and peers equal to the targets.
type hcTunnel struct {
	maps dataplane.HealthMaps // nil: tunnel checks off
	src  netip.Addr
	src6 netip.Addr // the IPv6 health-check address (invalid: none)
	log  *slog.Logger

	mu    sync.Mutex
	marks map[dataplane.HealthTarget]uint32
	next  uint32
}

func newHCTunnel(maps dataplane.HealthMaps, src, src6 netip.Addr, log *slog.Logger) *hcTunnel {
	return &hcTunnel{maps: maps, src: src, src6: src6, log: log, marks: map[dataplane.HealthTarget]uint32{}}
}

// assign fills in the tunnel of each encap-mode target (its mark and the
// health-check address) and programs the marks. An IPv6 VIP's backend
// (Tunnel.Guest6 set) is checked at its guest's IPv6 address from the
// IPv6 health-check address when the edge has one, else at its IPv4
// address as any other. Without a health-check address the targets are
// probed directly, as before tunnel checks (the guest's private address
// must then be routed to the edge, which real clouds do not do).
func (h *hcTunnel) assign(ts []health.Target) []health.Target {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]health.Target, 0, len(ts))
	want := map[uint32]dataplane.HealthTarget{}
	used := map[dataplane.HealthTarget]bool{}
	for _, t := range ts {
		if t.Tunnel == nil {
			out = append(out, t)
			continue
		}
		src := h.src
		if g6 := t.Tunnel.Guest6; g6.Is6() && h.src6.IsValid() {
			src = h.src6
			t.Addr = netip.AddrPortFrom(g6, t.Addr.Port())
		}
		if h.maps == nil || !src.IsValid() {
			t.Tunnel = nil
			out = append(out, t)
			continue
		}
		ht := dataplane.HealthTarget{Host: t.Tunnel.Host, Guest: t.Addr.Addr(), VSID: t.Tunnel.VSID}
		m, ok := h.marks[ht]
		if !ok {
			m = h.alloc()
			if m == 0 {
				h.log.Warn("no health-check mark left: backend not checked", "service", t.Service, "backend", t.Backend)
				continue
			}
			h.marks[ht] = m
		}
		used[ht] = true
		want[m] = ht
		tu := *t.Tunnel
		tu.Mark, tu.Source = m, src
		t.Tunnel = &tu
		out = append(out, t)
	}
	for ht := range h.marks {
		if !used[ht] {
			delete(h.marks, ht)
		}
	}
	if h.maps != nil && (h.src.IsValid() || h.src6.IsValid()) {
		if err := h.maps.SetHealthTargets(want); err != nil {
			h.log.Warn("health-check marks not programmed", "err", err)
		}
	}
	return out
}

// alloc returns a mark no backend holds, 0 when all are taken.
func (h *hcTunnel) alloc() uint32 {
	taken := map[uint32]bool{}
	for _, m := range h.marks {
		taken[m] = true
	}
	for range hcMarkMax {
		h.next = h.next%hcMarkMax + 1
		if m := hcMarkBase | h.next; !taken[m] {
			return m
		}
	}
	return 0
}

var hcWarned sync.Map

// warnHealthSource says (once per prefix) when the health-check address
// lies in a prefix the edge set announces: an address the Internet can
// send to, which should be a tenant's EIP, not the edge's own.
func warnHealthSource(log *slog.Logger, src netip.Addr, prefixes []netip.Prefix) {
	if !src.IsValid() {
		return
	}
	for _, p := range prefixes {
		if p.Contains(src) {
			if _, seen := hcWarned.LoadOrStore(p, true); !seen {
				log.Warn("the health-check address lies in a prefix of the edge set: use one no client reaches (e.g. from 198.18.0.0/15)",
					"health_source", src, "prefix", p)
			}
		}
	}
}

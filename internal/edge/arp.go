package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// ARPConfig is the edge's ARP answering on segments it shares with
// clients or servers (the DMZ case, issue 8 part 6).
type ARPConfig struct {
	// Ifaces are the interfaces it answers ARP on (--arp-iface); each
	// must be an --attach interface (the XDP program answers). None: the
	// edge answers no ARP and takes no part in the election.
	Ifaces []string
	// Scope names the ownership (--arp-scope): by default the edge set,
	// so one member of each set answers. Members of several sets on one
	// segment must share a scope, or each set's owner would answer for
	// every VIP there.
	Scope string
	// Gateway, if valid, is answered beside the VIPs (--arp-gateway): the
	// default gateway of nat-mode servers on the segment, so that their
	// replies go through the member that owns the segment.
	Gateway netip.Addr
	// Gateway6, if valid, is the IPv6 default gateway of nat-mode
	// servers on the segment (--arp-gateway6; global or link-local),
	// whose neighbor solicitations the owner answers beside the IPv6
	// VIPs', as a router (bpf/lib/ndp.h).
	Gateway6 netip.Addr
	// TTL and Margin of the ownership claim (0: store.DefaultOwnerTTL and
	// store.DefaultOwnerMargin).
	TTL, Margin time.Duration
}

// AnnounceInterval separates a new owner's two gratuitous ARPs of each
// address.
var AnnounceInterval = 2 * time.Second

// arpOwner makes the data plane answer ARP for the set's VIPs (and the
// gateway), and IPv6 neighbor solicitations for its IPv6 VIPs (and the
// gateway6), on the ARP interfaces only while this edge owns its set's
// ARP scope in the store (store.Claim): with several members of a set on
// one segment, exactly one answers, for both families (one election, one
// deadline). The data plane enforces the claim's
// deadline itself (dataplane.ARPMap.SetARPOwner), so an owner whose
// daemon dies or freezes stops answering before another member can take
// over. A new owner announces every address with a gratuitous ARP (an
// IPv6 one with an unsolicited neighbor advertisement) so the segment's
// caches move at once. There is no preemption: a returning
// member waits until the owner gives up or fails. A drained member, or
// one no longer in a set, gives ownership up.
type arpOwner struct {
	cfg    ARPConfig
	name   string
	dp     dataplane.ARPMap
	el     store.Elector
	ifaces []*net.Interface
	log    *slog.Logger
	// send announces ip on ifc: a gratuitous ARP, or for IPv6 an
	// unsolicited neighbor advertisement (tests capture it).
	send func(ifc *net.Interface, ip netip.Addr) error

	mu        sync.Mutex
	scope     string       // wanted: the set to own ARP for ("": none)
	linkDown  bool         // an ARP interface has no carrier (watchCarrier)
	vips      []netip.Addr // the VIPs to answer for
	changed   chan struct{}
	carrier   chan struct{} // a link changed: check the carrier now (linkChanged)
	active    bool          // answering: the data plane holds the claim's deadline
	announced map[netip.Addr]bool
	status    model.ARPStatus
}

func newARPOwner(dp dataplane.ARPMap, el store.Elector, name string, cfg ARPConfig, attached []string, log *slog.Logger) (*arpOwner, error) {
	a := &arpOwner{cfg: cfg, name: name, dp: dp, el: el, log: log, changed: make(chan struct{}, 1),
		carrier: make(chan struct{}, 1), announced: map[netip.Addr]bool{}}
	a.send = a.announceOn
	if err := cfg.checkGateways(); err != nil {
		return nil, err
	}
	o, err := store.ClaimOptions{TTL: cfg.TTL, Margin: cfg.Margin}.Check()
	if err != nil {
		return nil, fmt.Errorf("--arp-lease-ttl, --arp-lease-margin: %w", err)
	}
	a.cfg.TTL, a.cfg.Margin = o.TTL, o.Margin
	// Whatever a previous run left, this one answers nothing until it
	// holds the claim.
	if err := dp.SetARPOwner(time.Time{}); err != nil {
		return nil, fmt.Errorf("arp: %w", err)
	}
	var extra []netip.Addr
	if cfg.Gateway.IsValid() {
		extra = append(extra, cfg.Gateway)
	}
	if cfg.Gateway6.IsValid() {
		extra = append(extra, cfg.Gateway6)
	}
	if err := dp.SetARPAddrs(extra); err != nil {
		return nil, fmt.Errorf("--arp-gateway, --arp-gateway6: %w", err)
	}
	stale, err := dp.ARPIfaces()
	if err != nil {
		return nil, fmt.Errorf("arp: %w", err)
	}
	for _, n := range cfg.Ifaces {
		if !slices.Contains(attached, n) {
			return nil, fmt.Errorf("--arp-iface %s: not an --attach interface (the XDP program answers ARP)", n)
		}
		ifc, err := net.InterfaceByName(n)
		if err != nil {
			return nil, fmt.Errorf("--arp-iface %s: %w", n, err)
		}
		if err := dp.SetARP(ifc.Index, ifc.HardwareAddr); err != nil {
			return nil, fmt.Errorf("--arp-iface %s: %w", n, err)
		}
		delete(stale, ifc.Index)
		a.ifaces = append(a.ifaces, ifc)
		a.status.Interfaces = append(a.status.Interfaces, n)
	}
	for ifindex := range stale { // configured by a previous run, no longer
		if err := dp.SetARP(ifindex, nil); err != nil {
			return nil, fmt.Errorf("arp: interface %d: %w", ifindex, err)
		}
	}
	a.status.Since = time.Now().UTC()
	a.status.IPv6 = a.ipv6Answered(nil)
	return a, nil
}

// checkGateways checks --arp-gateway (IPv4) and --arp-gateway6 (unicast
// IPv6, global or link-local): each needs --arp-iface.
func (c ARPConfig) checkGateways() error {
	if c.Gateway.IsValid() && !c.Gateway.Is4() {
		return fmt.Errorf("--arp-gateway %v: not an IPv4 address (an IPv6 gateway is --arp-gateway6)", c.Gateway)
	}
	if c.Gateway.IsValid() && len(c.Ifaces) == 0 {
		return errors.New("--arp-gateway needs --arp-iface")
	}
	if g := c.Gateway6; g.IsValid() {
		if !g.Is6() || g.Is4In6() || dataplane.CheckARPAddrs([]netip.Addr{g}) != nil {
			return fmt.Errorf("--arp-gateway6 %v: not a unicast IPv6 address", g)
		}
		if len(c.Ifaces) == 0 {
			return errors.New("--arp-gateway6 needs --arp-iface")
		}
	}
	return nil
}

// ipv6Answered lists the IPv6 addresses answered while the owner: the
// IPv6 VIPs among vips, and the gateway6.
func (a *arpOwner) ipv6Answered(vips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, v := range vips {
		if v.Is6() {
			out = append(out, v)
		}
	}
	if a.cfg.Gateway6.IsValid() {
		out = append(out, a.cfg.Gateway6)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// update hands over the edge's scope ("": not a member, or drained) and
// its VIPs after a commit.
func (a *arpOwner) update(scope string, vips []netip.Addr) {
	if len(a.ifaces) == 0 {
		return
	}
	a.mu.Lock()
	a.scope, a.vips = scope, vips
	a.status.IPv6 = a.ipv6Answered(vips)
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// Status is the ownership state for the node status (nil without ARP
// interfaces).
func (a *arpOwner) Status() *model.ARPStatus {
	if len(a.ifaces) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.status
	s.Interfaces = slices.Clone(s.Interfaces)
	s.IPv6 = slices.Clone(s.IPv6)
	return &s
}

func (a *arpOwner) wanted() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.linkDown {
		return "" // it cannot answer on a dead link: let a standby take over
	}
	return a.scope
}

// CarrierPoll is how often the ARP interfaces' carrier is checked when
// no link event says so sooner (linkChanged).
const CarrierPoll = 100 * time.Millisecond

// linkChanged asks for a carrier check now: the daemon calls it on every
// routing or link event (nexthop.WatchRouting), so a dead link hands the scope over
// within milliseconds instead of up to a CarrierPoll later (a CI run lost
// 100 ms of a nat VIP's traffic to the poll alone).
func (a *arpOwner) linkChanged() {
	select {
	case a.carrier <- struct{}{}:
	default:
	}
}

// watchCarrier gives the scope up while an ARP interface has no carrier
// (and campaigns again when every one has it back).
func (a *arpOwner) watchCarrier(ctx context.Context) {
	t := time.NewTicker(CarrierPoll)
	defer t.Stop()
	for {
		down := false
		for _, ifc := range a.ifaces {
			// Only a positively seen dead link counts: a failed lookup
			// (this goroutine in another namespace, in tests) is no news.
			cur, err := net.InterfaceByIndex(ifc.Index)
			if err == nil && cur.Name == ifc.Name && (cur.Flags&net.FlagUp == 0 || cur.Flags&net.FlagRunning == 0) {
				down = true
			}
		}
		a.mu.Lock()
		changed := down != a.linkDown
		a.linkDown = down
		a.mu.Unlock()
		if changed {
			a.log.Warn("ARP interface carrier changed", "down", down)
			select {
			case a.changed <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.carrier:
		}
	}
}

func (a *arpOwner) setStatus(scope string, owner bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status.Scope != scope || a.status.Owner != owner {
		a.status.Since = time.Now().UTC()
	}
	a.status.Scope, a.status.Owner = scope, owner
}

// run campaigns for the wanted scope and answers while it holds it,
// until ctx ends; then it stops answering and gives the scope up.
func (a *arpOwner) run(ctx context.Context) {
	if len(a.ifaces) == 0 {
		return
	}
	opts := store.ClaimOptions{TTL: a.cfg.TTL, Margin: a.cfg.Margin, OnRenew: a.renewed}
	go a.watchCarrier(ctx)
	for ctx.Err() == nil {
		scope := a.wanted()
		a.setStatus(scope, false)
		if scope == "" {
			select {
			case <-ctx.Done():
			case <-a.changed:
			}
			continue
		}
		cl, stopCampaign, err := a.campaign(ctx, scope, opts)
		if err != nil {
			a.log.Warn("ARP owner campaign failed", "scope", scope, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if cl != nil {
			a.hold(ctx, scope, cl)
		}
		stopCampaign()
	}
}

// campaign waits until this edge holds scope (a claim, and the function
// that ends the claim's context after it is released), or the wanted
// scope changes or ctx ends (no claim).
func (a *arpOwner) campaign(ctx context.Context, scope string, opts store.ClaimOptions) (*store.Claim, func(), error) {
	type result struct {
		cl  *store.Claim
		err error
	}
	cctx, cancel := context.WithCancel(ctx) // the claim lives in it
	won := make(chan result, 1)
	go func() {
		cl, err := a.el.Campaign(cctx, store.OwnerKey("arp", scope), a.name, opts)
		won <- result{cl, err}
	}()
	for {
		select {
		case r := <-won:
			if r.err != nil && ctx.Err() == nil {
				cancel()
				return nil, nil, r.err
			}
			return r.cl, cancel, nil
		case <-ctx.Done():
		case <-a.changed:
			if a.wanted() == scope {
				continue // the VIPs changed
			}
		}
		cancel()
		if r := <-won; r.cl != nil {
			a.release(r.cl) // won as it gave up
		}
		return nil, cancel, nil
	}
}

// hold answers for scope while cl holds, and until the scope changes or
// ctx ends.
func (a *arpOwner) hold(ctx context.Context, scope string, cl *store.Claim) {
	if err := a.take(cl); err != nil {
		a.log.Error("cannot answer ARP as the set's owner; giving ownership up", "scope", scope, "err", err)
		a.stop(scope)
		a.release(cl)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return
	}
	a.setStatus(scope, true)
	a.log.Info("ARP owner: answering for the set's VIPs", "scope", scope, "deadline", cl.Deadline().Format(time.StampMilli))
	a.announce()
	// Announce once more, as RFC 5227 section 2.3 does (ANNOUNCE_NUM 2,
	// ANNOUNCE_INTERVAL 2 s): one lost broadcast leaves no cache behind.
	again := time.NewTimer(AnnounceInterval)
	defer again.Stop()
	for {
		select {
		case <-again.C:
			a.mu.Lock()
			clear(a.announced)
			a.mu.Unlock()
			a.announce()
		case <-ctx.Done():
			a.stop(scope)
			a.release(cl)
			return
		case <-cl.Done():
			a.stop(scope)
			if ctx.Err() != nil {
				a.release(cl) // the claim ended with ctx: revoke it all the same
				return
			}
			a.log.Warn("ARP owner: lost the set's ARP ownership; stopped answering", "scope", scope, "err", cl.Err())
			return
		case <-a.changed:
			if now := a.wanted(); now != scope {
				a.stop(now)
				a.release(cl)
				a.log.Info("ARP owner: gave ownership up", "scope", scope, "now", a.wanted())
				return
			}
			a.announce() // new VIPs
		}
	}
}

// take makes the data plane answer until the claim's deadline.
func (a *arpOwner) take(cl *store.Claim) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := cl.Err(); err != nil {
		return err // ended as it was won (its key deleted, say)
	}
	if err := a.dp.SetARPOwner(cl.Deadline()); err != nil {
		return err
	}
	a.active = true
	clear(a.announced)
	return nil
}

// renewed moves the data plane's deadline forward after a renewal (the
// claim's OnRenew). It writes only while answering: after stop, a late
// renewal must not turn answering back on.
func (a *arpOwner) renewed(deadline time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.active {
		return
	}
	if err := a.dp.SetARPOwner(deadline); err != nil {
		a.log.Warn("ARP owner: cannot move the data plane's deadline forward; it stops answering at the previous one", "err", err)
	}
}

// stop makes the data plane stop answering, and the status say so (for
// scope, the one now wanted). A failed write is logged: the data plane
// stops at the deadline it holds all the same.
func (a *arpOwner) stop(scope string) {
	a.mu.Lock()
	a.active = false
	if err := a.dp.SetARPOwner(time.Time{}); err != nil {
		a.log.Error("ARP owner: cannot stop answering now; the data plane stops at its deadline", "err", err)
	}
	a.mu.Unlock()
	a.setStatus(scope, false)
}

func (a *arpOwner) release(cl *store.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cl.Release(ctx); err != nil {
		a.log.Warn("ARP owner: cannot revoke the claim's lease; it lapses", "err", err)
	}
}

// announce sends a gratuitous ARP (IPv4) or an unsolicited neighbor
// advertisement (IPv6) for each address not announced since this edge
// became the owner: every VIP, the gateway and the gateway6.
func (a *arpOwner) announce() {
	a.mu.Lock()
	addrs := slices.Clone(a.vips)
	if a.cfg.Gateway.IsValid() {
		addrs = append(addrs, a.cfg.Gateway)
	}
	if a.cfg.Gateway6.IsValid() {
		addrs = append(addrs, a.cfg.Gateway6)
	}
	var todo []netip.Addr
	want := map[netip.Addr]bool{}
	for _, v := range addrs {
		want[v] = true
		if a.announced[v] || !a.active {
			continue
		}
		todo = append(todo, v)
		a.announced[v] = true
	}
	for v := range a.announced {
		if !want[v] {
			delete(a.announced, v)
		}
	}
	a.mu.Unlock()
	for _, v := range todo {
		for _, ifc := range a.ifaces {
			if err := a.send(ifc, v); err != nil {
				a.log.Warn("announcement failed (gratuitous ARP, unsolicited NA)", "addr", v, "iface", ifc.Name, "err", err)
			} else {
				a.log.Debug("announcement sent (gratuitous ARP, unsolicited NA)", "addr", v, "iface", ifc.Name)
			}
		}
	}
}

// announceOn is the real send: a gratuitous ARP for an IPv4 address, an
// unsolicited neighbor advertisement for an IPv6 one (as a router for the
// gateway6).
func (a *arpOwner) announceOn(ifc *net.Interface, ip netip.Addr) error {
	if ip.Is4() {
		return gratuitousARP(ifc, ip)
	}
	return sendFrame(ifc, unix.ETH_P_IPV6, unsolicitedNA(ifc.HardwareAddr, ip, ip == a.cfg.Gateway6))
}

// unsolicitedNA is the neighbor advertisement a new owner sends for ip
// (RFC 4861 7.2.6): from mac and ip to all-nodes ff02::1 (MAC
// 33:33:00:00:00:01), hop limit 255, Solicited clear, Override set (the
// caches that hold another member's MAC take ours), Router set for a
// gateway (a host that saw it clear would drop the address from its
// default routers, 7.2.5), a target link-layer address option with mac.
// Sent twice, AnnounceInterval apart, like the gratuitous ARPs.
func unsolicitedNA(mac net.HardwareAddr, ip netip.Addr, router bool) []byte {
	f := make([]byte, 14+40+32)
	copy(f[0:6], []byte{0x33, 0x33, 0, 0, 0, 1})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IPV6)
	ip6 := f[14:]
	ip6[0] = 0x60
	binary.BigEndian.PutUint16(ip6[4:], 32)
	ip6[6], ip6[7] = unix.IPPROTO_ICMPV6, 255
	src, dst := ip.As16(), netip.IPv6LinkLocalAllNodes().As16()
	copy(ip6[8:24], src[:])
	copy(ip6[24:40], dst[:])
	na := ip6[40:]
	na[0] = 136  // neighbor advertisement
	na[4] = 0x20 // Override
	if router {
		na[4] |= 0x80
	}
	copy(na[8:24], src[:])
	na[24], na[25] = 2, 1 // target link-layer address, 8 bytes
	copy(na[26:32], mac)
	var sum uint32
	for i := 8; i < 40; i += 2 { // the pseudo-header: addresses, length, next header
		sum += uint32(binary.BigEndian.Uint16(ip6[i:]))
	}
	sum += 32 + unix.IPPROTO_ICMPV6
	for i := 0; i < len(na); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(na[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(na[2:], ^uint16(sum))
	return f
}

// sendFrame sends the Ethernet frame f (of ethertype proto) on ifc.
func sendFrame(ifc *net.Interface, proto uint16, f []byte) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(proto)))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifc.Index, Halen: 6}
	copy(sa.Addr[:], f[0:6])
	return unix.Sendto(fd, f, 0, sa)
}

// gratuitousARP broadcasts an ARP reply for ip from the interface's MAC
// (RFC 5227 section 3 announcement form).
func gratuitousARP(ifc *net.Interface, ip netip.Addr) error {
	frame := make([]byte, 42)
	copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:12], ifc.HardwareAddr)
	binary.BigEndian.PutUint16(frame[12:], unix.ETH_P_ARP)
	a := frame[14:]
	binary.BigEndian.PutUint16(a[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 2) // reply
	copy(a[8:14], ifc.HardwareAddr)
	b := ip.As4()
	copy(a[14:18], b[:])
	copy(a[18:24], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(a[24:28], b[:])
	return sendFrame(ifc, unix.ETH_P_ARP, frame)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

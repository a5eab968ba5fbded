package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nexthop"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/store"
)

// Store is what the edge needs of the store: to follow it and publish
// leased keys, and to elect its set's ARP owner.
type Store interface {
	store.Node
	store.Elector
}

// Run loads (or re-adopts) the edge data plane, attaches it to the
// interfaces and follows the store until ctx ends. On return the program
// stays attached and keeps forwarding with the last state (but answers
// ARP no more: another member of the set takes that over).
func Run(ctx context.Context, cfg Config, st Store, load dataplane.LoadOptions, metricsListen string) error {
	// Every goroutine started below ends with this context; a start-up
	// error after one of them started must end them too, or Run would
	// wait for them forever (issue 17.4: an attach that failed after the
	// ARP owner started hung the edge with nothing logged).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := cfg.Log
	if log == nil {
		log = slog.Default()
		cfg.Log = log
	}
	if len(cfg.Interfaces) == 0 {
		return errors.New("edge: no interfaces to attach to (--attach)")
	}
	if !cfg.ICMPSource.IsValid() {
		a, err := firstIPv4(cfg.Interfaces[0])
		if err != nil {
			return fmt.Errorf("edge: ICMP source: %w (set --icmp-source)", err)
		}
		cfg.ICMPSource = a
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 2 * time.Second
	}
	if cfg.IfindexOf == nil {
		cfg.IfindexOf = ifindexOf
	}
	if cfg.LB.HZ == 0 {
		hz, err := measureHZ()
		if err != nil {
			return fmt.Errorf("edge: measure HZ: %w", err)
		}
		cfg.LB.HZ = hz
	}
	dp, err := dataplane.LoadEdge(load)
	if err != nil {
		return err
	}
	defer dp.Close()
	dp.Upgrade().Log(log) // maps migrated or not trusted (docs/upgrades.md)
	rec := NewReconciler(cfg, dp)
	defer rec.Stop()
	pub := &health.StorePublisher{Ctx: ctx, Store: st, Edge: cfg.Name, Log: log}
	defer pub.Close() // revokes the reports' lease while st is still open
	hm := health.NewManager(ctx, pub, log)
	hm.SetCommands(cfg.HealthCommands)
	hm.SetCommandConcurrency(cfg.HealthCommandConcurrency)
	// The health-check address goes into the programs before they are
	// attached (a restarted edge's new programs start with none).
	if err := dp.SetHealthAddress(cfg.HealthSource); err != nil {
		return err
	}
	if cfg.HealthSource.IsValid() {
		if err := setupHealthDevice(cfg.HealthSource, cfg.Interfaces, log); err != nil {
			return err
		}
		if err := dp.AttachHealth(HCDevice); err != nil {
			return err
		}
		rec.OnUnderlay = underlayRPFilter(log)
		log.Info("encap-mode health checks travel the tunnel", "source", cfg.HealthSource, "device", HCDevice)
	} else {
		log.Warn("no --health-source: encap-mode backends are probed directly at their private addresses, not through the tunnel")
	}
	hct := newHCTunnel(dp, cfg.HealthSource, log)
	rec.OnTargets = func(ts []health.Target) { hm.Update(hct.assign(ts)) }
	arp, err := newARPOwner(dp, st, cfg.Name, cfg.ARP, cfg.Interfaces, log)
	if err != nil {
		return err
	}
	arpDone := make(chan struct{})
	go func() {
		defer close(arpDone)
		arp.run(ctx)
	}()
	defer func() { cancel(); <-arpDone }() // it stops answering and gives its scope up first
	for _, ifname := range cfg.Interfaces {
		if err := dp.Attach(ifname); err != nil {
			return err
		}
	}
	log.Info("edge data plane attached", "interfaces", cfg.Interfaces, "pins", load.PinDir)

	// Cached next hops must follow the kernel's routes and neighbours, and
	// the hosts' next hops stay resolved whichever way routing goes.
	nb := nexthop.NewResolver(log)
	defer nb.Stop()
	// A link change (carrier lost) is also a reason to look at the
	// announcer's conditions and the ARP interfaces' carrier at once
	// rather than at their next 100 ms tick.
	var kickAnnouncer atomic.Pointer[func()]
	if err := nexthop.WatchRouting(ctx, log, func() {
		if err := dp.InvalidateNextHops(); err != nil {
			log.Warn("cannot invalidate cached next hops", "err", err)
		}
		nb.Refresh(time.Second)
		arp.linkChanged()
		if k := kickAnnouncer.Load(); k != nil {
			(*k)()
		}
	}); err != nil {
		return err
	}
	// Connection sync (sync.go) stops before the data plane is closed.
	var syncer atomic.Pointer[connsync.Syncer]
	var syncErr atomic.Pointer[string]
	if cfg.Sync.Port != 0 {
		sctx, scancel := context.WithCancel(ctx)
		var swg sync.WaitGroup
		swg.Add(1)
		go func() {
			defer swg.Done()
			if err := runSync(sctx, cfg, rec, dp, func(s *connsync.Syncer) { syncer.Store(s) }); err != nil {
				msg := err.Error()
				syncErr.Store(&msg)
				log.Error("connection sync failed", "err", err)
			}
		}()
		defer func() { scancel(); swg.Wait() }()
	}
	ready := func() (bool, string) {
		if cfg.Sync.Port == 0 {
			return true, "connection sync is off"
		}
		if s := syncer.Load(); s != nil {
			return s.Ready(), s.Reason()
		}
		if e := syncErr.Load(); e != nil {
			return false, *e
		}
		return false, "connection sync is starting"
	}

	// BGP: announce the set's routes while the edge is well (announce.go).
	spk := bgp.New(log.With("component", "bgp"))
	ann := NewAnnouncer(AnnounceConfig{Name: cfg.Name, StoreGrace: cfg.StoreGrace, Settle: cfg.AnnounceSettle, Log: log},
		spk, st, rec.AnnouncePlan, selfCheck(dp, cfg.Interfaces))
	for _, c := range cfg.Conditions {
		ann.AddCondition(c.Name, c.OK)
	}
	// A member never takes traffic with a table it knows is incomplete:
	// with connection sync on, it announces only once it holds a full
	// copy from a live member (or is the first of its set).
	if cfg.Sync.Port != 0 {
		ann.AddCondition("sync", func() bool { ok, _ := ready(); return ok })
	}
	kick := ann.Kick
	kickAnnouncer.Store(&kick)
	ann.Start(ctx)
	defer func() {
		// SIGTERM (ctx ended): withdraw, wait until every peer was sent
		// the withdrawal, delete the announce key; XDP stays attached.
		// A start-up error takes the same way out.
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := ann.Shutdown(sctx); err != nil {
			log.Warn("withdrawal on shutdown incomplete", "err", err)
		} else {
			log.Info("routes withdrawn")
		}
	}()

	applied := make(chan struct{}, 1)
	rec.OnApplied = func(int64) {
		select {
		case applied <- struct{}{}:
		default:
		}
	}
	go func() {
		ready := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-applied:
				if !ready { // attached, and the first full load applied
					ready = true
					sdnotify.Tell(log, sdnotify.Ready)
				}
				ann.Kick()
				nb.Keep("hosts", append(rec.Hosts(), defaultGateways()...))
				warnHealthSource(log, cfg.HealthSource, rec.Prefixes())
				arp.update(rec.ARPScope(), rec.VIPs())
				if err := ensureDiscard(rec.Prefixes()); err != nil {
					log.Warn("cannot install discard routes for the set's prefixes", "err", err)
				}
			}
		}
	}()

	// Shared bandwidth (bandwidth.go) reads the counters the rate
	// reports read, through one meter.
	meter := newRateMeter(cfg.Rates)
	var bw *bwenforce.Host
	if cfg.Bandwidth.Store != nil {
		blog := log.With("part", "bandwidth")
		if bw, err = rec.EnableBandwidth(cfg.Bandwidth, meter, dp, blog); err != nil {
			return err
		}
		go watchBandwidthAnnouncements(ctx, st, rec, blog)
		bwDone := make(chan struct{})
		go func() {
			defer close(bwDone)
			bw.Run(ctx)
		}()
		defer func() { cancel(); <-bwDone }() // before the data plane and the store close
	} else {
		bwenforce.ClearLimits(dp, log)
	}
	started := time.Now().UTC()
	status := func() model.NodeStatus {
		ns := rec.Status(started, cfg.Interfaces)
		if bw != nil {
			var errs []string
			ns.Bandwidth, errs = bw.NodeStatus()
			ns.Errors = append(ns.Errors, errs...)
		}
		// The names only (never the paths): the controller refuses a
		// service naming a command that a live edge does not list.
		ns.HealthCommands = cfg.HealthCommands.Names()
		ns.Errors = append(ns.Errors, hm.Problems()...)
		ns.BGP = ann.Status(ctx)
		ns.ARP = arp.Status()
		if cfg.Sync.Port != 0 {
			if s := syncer.Load(); s != nil {
				syncStatus(s, &ns)
				if lost, err := dp.ConnEventsLost(); err == nil && ns.Counters != nil {
					ns.Counters["sync_drop_ring_full"] = model.Count{Packets: lost}
				}
			} else {
				_, why := ready()
				ns.Sync = &model.SyncStatus{Reason: why}
			}
		}
		// What each address's rate limits dropped (an address with
		// limits is listed, 0 or not), at most maxLimitDrops addresses:
		// the status is published every interval, and the limits table
		// holds 65,536.
		for _, a := range rec.LimitedAddrs() {
			if len(ns.LimitDrops) >= maxLimitDrops {
				ns.Errors = append(ns.Errors, fmt.Sprintf("limit_drops lists the first %d addresses with limits only", maxLimitDrops))
				break
			}
			if c, ok, err := dp.LimitCounters(a); err == nil && ok {
				if ns.LimitDrops == nil {
					ns.LimitDrops = map[string]model.LimitDrops{}
				}
				ns.LimitDrops[a.String()] = model.LimitDrops{Source: c.DroppedSource, SYN: c.DroppedSYN}
			}
		}
		// The tunnel health checks' counters (hc_*) beside the others.
		if hs, err := dp.HealthStats(); err == nil && ns.Counters != nil {
			for k, v := range hs {
				ns.Counters[k] = model.Count(v)
			}
		}
		return ns
	}
	go store.PublishStatus(ctx, st, "edge", cfg.Name, cfg.StatusInterval, status, log)
	ratesDone := make(chan struct{})
	go func() {
		defer close(ratesDone)
		runRateReports(ctx, meter, cfg.Name, dp, st, log.With("part", "rates"))
	}()
	defer func() { cancel(); <-ratesDone }() // its lease is revoked while st is open
	if metricsListen != "" {
		go nodemetrics.Serve(ctx, metricsListen, "edge", cfg.MetricsToken, status, log)
	}
	return st.FollowSink(ctx, rec)
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

// defaultGateways are the next hops of the default routes: the edge sends
// most of its traffic there, so they stay resolved as well.
func defaultGateways() []netip.Addr {
	rs, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, r := range rs {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw != nil {
			if gw, ok := netip.AddrFromSlice(r.Gw); ok {
				out = append(out, gw.Unmap())
			}
		}
	}
	return out
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
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: rtprotAzgate}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Dst != nil && !want[r.Dst.String()] {
			h.RouteDel(&r)
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

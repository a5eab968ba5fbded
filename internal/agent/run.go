package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/bwenforce"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/monitor"
	"github.com/azgate/azgate/internal/nexthop"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/store"
)

// Run loads (or re-adopts) the agent data plane and follows the host's
// share of the store. A start-up error is logged with its cause and
// returned, once everything started before it has stopped (issue 17.4).
func Run(ctx context.Context, cfg Config, st store.Node, load dataplane.LoadOptions) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	// Every goroutine started below ends with this context and is waited
	// for, then what was opened is closed, in reverse order.
	ctx, cancel := context.WithCancel(ctx)
	var s stack
	defer func() { cancel(); s.stop() }()
	fail := func(step string, err error) error {
		cfg.Log.Error("agent start failed; stopping what started", "step", step, "err", err)
		return fmt.Errorf("agent: %s: %w", step, err)
	}
	if cfg.EIPMax != 0 {
		load.AgentEIPMax = cfg.EIPMax // as edge.Run does: the Config is what sizes the maps
	}
	if off := dataplane.ForwardingOff([]string{cfg.Underlay}); len(off) > 0 {
		cfg.Log.Warn(dataplane.ForwardingHint(off))
	}
	dp, err := openDataPlane(cfg, load, &s)
	if err != nil {
		return fail("data plane", err)
	}
	nb, err := startRouting(ctx, cfg.Log, dp, &s)
	if err != nil {
		return fail("routing watch", err)
	}
	rec, err := NewReconciler(cfg, dp, &kernelLinks{dp: dp, nb: nb})
	if err != nil {
		return fail("adopt the maps", err)
	}
	s.push(rec.Stop) // before the data plane closes: no retry writes to it after
	rec.adoptAttached(dp.Attached())
	cfg.Log.Info("agent data plane attached", "underlay", cfg.Underlay, "eips_kept", rec.ProgrammedCount(), "pins", load.PinDir)
	bw, err := startBandwidth(ctx, cfg, rec, dp, &s)
	if err != nil {
		return fail("bandwidth", err)
	}
	if err := startAnnouncements(ctx, cfg.Log, st, rec, &s); err != nil {
		return err // ctx ended: not a failure of the agent's
	}
	startReporter(ctx, cfg, st, rec, dp, bw, &s)
	return follow(ctx, cfg.Log, st, cfg.Name, rec)
}

// stack is what Run started, stopped in reverse order.
type stack struct{ stops []func() }

func (s *stack) push(stop func()) { s.stops = append(s.stops, stop) }

// goRun runs f in a goroutine that stop waits for (f ends with its
// context).
func (s *stack) goRun(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	s.push(func() { <-done })
}

func (s *stack) stop() {
	for _, stop := range slices.Backward(s.stops) {
		stop()
	}
}

// openDataPlane loads (or re-adopts) the agent data plane and attaches it
// to the underlay interface.
func openDataPlane(cfg Config, load dataplane.LoadOptions, s *stack) (*dataplane.Agent, error) {
	dp, err := dataplane.LoadAgent(load)
	if err != nil {
		return nil, err
	}
	s.push(func() { dp.Close() })
	dp.Upgrade().Log(cfg.Log) // maps migrated or not trusted (docs/upgrades.md)
	if err := dp.SetMonitor(cfg.Monitor); err != nil {
		return nil, err
	}
	cfg.MonitorSwitch.Attach(dp)
	if err := dp.AttachUnderlay(cfg.Underlay); err != nil {
		return nil, err
	}
	return dp, nil
}

// startRouting keeps next hops resolved and makes the programs ask the FIB
// again whenever routes, neighbours or links change.
func startRouting(ctx context.Context, log *slog.Logger, dp *dataplane.Agent, s *stack) (*nexthop.Resolver, error) {
	nb := nexthop.NewResolver(log)
	s.push(nb.Stop)
	done, err := nexthop.WatchRouting(ctx, log, func() {
		if err := dp.InvalidateNextHops(); err != nil {
			log.Warn("cannot invalidate cached next hops", "err", err)
		}
		nb.Refresh(time.Second)
	})
	if err != nil {
		return nb, err
	}
	// Stopped after the context ends: the callback runs no more before
	// the resolver stops and the data plane closes.
	s.push(func() { <-done })
	return nb, nil
}

// startBandwidth starts the host's shared bandwidth (nil when off: the
// limits a previous run left are removed).
func startBandwidth(ctx context.Context, cfg Config, rec *Reconciler, dp *dataplane.Agent, s *stack) (*bwenforce.Host, error) {
	if cfg.Bandwidth.Store == nil {
		bwenforce.ClearLimits(dp, cfg.Log)
		return nil, nil
	}
	bw, err := rec.EnableBandwidth(cfg.Bandwidth, dp, cfg.Log.With("part", "bandwidth"))
	if err != nil {
		return nil, err
	}
	s.goRun(func() { bw.Run(ctx) })
	return bw, nil
}

// startAnnouncements follows the edges' announcements, which decide which
// members of each set are live (groups.go), and waits for the first read
// (at most 5 s), so a restart does not shrink and regrow the groups.
func startAnnouncements(ctx context.Context, log *slog.Logger, st store.Node, rec *Reconciler, s *stack) error {
	first := make(chan struct{})
	var once sync.Once
	s.goRun(func() { WatchAnnouncements(ctx, st, rec, log, func() { once.Do(func() { close(first) }) }) })
	select {
	case <-first:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
		log.Warn("announcements not read yet: sets with BGP use all their members until they are")
	}
	return nil
}

// startReporter publishes the agent's status to the store and serves it
// as metrics.
func startReporter(ctx context.Context, cfg Config, st store.Node, rec *Reconciler, dp monitor.StatusSource, bw *bwenforce.Host, s *stack) {
	started := time.Now().UTC()
	status := func() model.NodeStatus {
		ns := rec.Status(started, nil)
		store.ReportInvalid(&ns, st.Invalid) // objects the store's Follow refused
		if m, err := monitor.Status(dp); err == nil {
			ns.Monitor = m
		} else {
			ns.Errors = append(ns.Errors, err.Error())
		}
		if bw != nil {
			var errs []string
			ns.Bandwidth, errs = bw.NodeStatus()
			ns.Errors = append(ns.Errors, errs...)
		}
		return ns
	}
	s.goRun(func() { store.PublishStatus(ctx, st, "agent", cfg.Name, cfg.Status.Interval, status, cfg.Log) })
	if cfg.Status.MetricsListen != "" {
		s.goRun(func() {
			nodemetrics.Serve(ctx, cfg.Status.MetricsListen, "agent", cfg.Name, cfg.Status.MetricsToken, status, cfg.Log)
		})
	}
}

// follow applies the host's share of the store's state until ctx ends;
// systemd is told the agent is ready once the first full state is
// applied. Desired and BandwidthView read of the state only what the
// share holds: the host, the EIPs bound to it, the services with
// backends on it, and the edge sets, quarantines and bandwidth packages
// (placement.AgentKinds).
func follow(ctx context.Context, log *slog.Logger, st store.Node, host string, rec *Reconciler) error {
	var ready sync.Once
	return st.FollowScopeState(ctx, placement.AgentScope(host), func(s *model.State, rev int64, evs []store.Event, full bool) {
		if !full && len(evs) == 0 {
			rec.Advance(rev) // a commit of the region, of nothing of this host's
		} else {
			rec.Handle(s, rev, evs, full)
		}
		ready.Do(func() { sdnotify.Tell(log, sdnotify.Ready) })
	})
}

// Follow is the role's follow (Run's last step) for a Reconciler on other
// maps and links: the fleet bench's agents on the data-plane fakes
// (internal/bench), in its process and in its agent child processes.
func Follow(ctx context.Context, log *slog.Logger, st store.Node, host string, rec *Reconciler) error {
	return follow(ctx, log, st, host, rec)
}

// kernelLinks implements Links with netlink and the loaded data plane.
type kernelLinks struct {
	dp *dataplane.Agent
	nb *nexthop.Resolver
}

func (k *kernelLinks) GuestInterface(a netip.Addr) (string, int, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return "", 0, err
	}
	defer h.Close()
	idx, _, err := nexthop.RouteGet(h, a)
	if err != nil {
		return "", 0, err
	}
	l, err := h.LinkByIndex(idx)
	if err != nil {
		return "", 0, err
	}
	return l.Attrs().Name, idx, nil
}

func (k *kernelLinks) AttachGuest(ifname string) error { return k.dp.AttachGuest(ifname) }
func (k *kernelLinks) DetachGuest(ifname string) error { return k.dp.Detach(ifname) }

func (k *kernelLinks) KeepResolved(group string, addrs []netip.Addr) { k.nb.Keep(group, addrs) }

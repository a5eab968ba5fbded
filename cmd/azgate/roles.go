package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/monitor"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/secretfile"
	"github.com/azgate/azgate/internal/store"
)

// defaultEtcd is where the controller's embedded etcd listens by default.
const defaultEtcd = "unix:///var/lib/azgate/etcd.sock"

func roleLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	roleLevel.Set(l)
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: roleLevel})), nil
}

// signalContext is a role's context: it ends on SIGINT or SIGTERM, and
// then (or when the role returns) systemd is told the role is stopping.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		sdnotify.Notify(sdnotify.Stopping) // best effort: nothing to log it with here
	}()
	return ctx, cancel
}

// roleResult is what a role returns once its Run returned: nil when a
// signal ended it (Run then returns nil or the context's error), and its
// error otherwise, logged with its cause, so that main exits non-zero.
// An error is never dropped because a signal came meanwhile: a role that
// failed to start and was then stopped still failed (issue 17.4).
func roleResult(ctx context.Context, log *slog.Logger, role string, err error, stopping string) error {
	if err == nil || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		log.Info(stopping)
		return nil
	}
	log.Error(role+" failed", "err", err)
	return err
}

// The edge's and the agent's default /metrics addresses: apart, so both
// roles may run on one host.
const (
	defaultEdgeMetrics  = "127.0.0.1:9464"
	defaultAgentMetrics = "127.0.0.1:9465"
)

// daemonFlags are shared by the data-plane roles.
type daemonFlags struct {
	name          string
	etcd          string
	pinDir        string
	allowDrop     []string
	hashSeed      uint32
	icmpRate      uint32
	icmpBurst     uint32
	monitor       string // --monitor: off, drops or trace
	monitorRate   uint32
	monitorBurst  uint32
	metricsListen string
	metricsToken  string // file
	logLevel      string
	etcdAuth      store.ClientAuth
	loadJitter    time.Duration // --etcd-load-jitter
	// Shared bandwidth (docs/bandwidth.md, "Hosts: measurement and
	// enforcement").
	bwStore, bwPasswordFile string
	bwInterval, bwGrace     time.Duration
}

func (d *daemonFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&d.name, "name", "", "node name (an edge of an edge set, or a host)")
	f.StringVar(&d.etcd, "etcd-endpoints", defaultEtcd, "etcd endpoints, comma-separated (the controller's embedded etcd by default)")
	f.DurationVar(&d.loadJitter, "etcd-load-jitter", 0, "spread the full loads of a region-wide restart over this window: wait a random share of it before each full load of the store (0: none; at most "+maxLoadJitter.String()+")")
	f.StringVar(&d.pinDir, "pin-dir", "", "bpffs directory for this node's maps and links (default /sys/fs/bpf/azgate/NAME)")
	f.StringSliceVar(&d.allowDrop, "upgrade-allow-drop", nil, "pinned maps an upgrade may start empty when it cannot migrate them, though flows break (agent_flows, lb_nat_conns, or all; docs/upgrades.md); without it such an upgrade is refused")
	f.Uint32Var(&d.hashSeed, "hash-seed", flowhash.DefaultHashSeed, "cluster-wide flow hash seed (every node must use the same)")
	f.Uint32Var(&d.icmpRate, "icmp-rate", 100, "ICMP errors per second per CPU the data plane may send")
	f.Uint32Var(&d.icmpBurst, "icmp-burst", 50, "ICMP error burst")
	f.StringVar(&d.monitor, "monitor", "drops", "data-plane events for azgate monitor and azgate capture: off, drops (every drop) or trace (every frame in and every verdict too); rate limited per CPU by --monitor-rate")
	f.Uint32Var(&d.monitorRate, "monitor-rate", dataplane.DefaultMonitorRate, "monitor events a second per CPU at most (those over it are counted as lost)")
	f.Uint32Var(&d.monitorBurst, "monitor-burst", dataplane.DefaultMonitorBurst, "monitor events at most in one burst per CPU (0: --monitor-rate; at least --monitor-rate / 100)")
	f.StringVar(&d.metricsListen, "metrics-listen", defaultEdgeMetrics, "Prometheus /metrics address (empty: off)")
	f.StringVar(&d.metricsToken, "metrics-token-file", "", "file holding a token /metrics then requires as \"Authorization: Bearer TOKEN\" (default: none, /metrics is open)")
	f.StringVar(&d.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&d.bwStore, "bw-store", "", "shared bandwidth: the zone's measurement store, unix:///path/redis.sock or redis://host:port (mem: an in-process store, for tests); empty: bandwidth reporting and enforcement off (docs/bandwidth.md)")
	f.StringVar(&d.bwPasswordFile, "bw-store-password-file", "", "file holding the --bw-store password (mode 0600 or stricter; never on the command line)")
	f.DurationVar(&d.bwInterval, "bw-interval", bandwidth.DefaultInterval, "shared bandwidth: report per-EIP rates and poll the limits this often")
	f.DurationVar(&d.bwGrace, "bw-grace", bandwidth.DefaultGrace, "shared bandwidth: keep limits the store cannot confirm this long, then fall back to the package's static split")
	addEtcdAuthFlags(c, &d.etcdAuth)
}

// monitorConfig is --monitor, --monitor-rate and --monitor-burst.
func (d *daemonFlags) monitorConfig() (dataplane.MonitorConfig, error) {
	c := dataplane.MonitorConfig{Rate: d.monitorRate, Burst: d.monitorBurst}
	switch d.monitor {
	case "off":
	case "drops":
		c.Drops = true
	case "trace":
		c.Trace = true
	default:
		return c, fmt.Errorf("--monitor %q: want off, drops or trace", d.monitor)
	}
	if d.monitorRate == 0 || d.monitorRate > dataplane.MaxMonitorRate || d.monitorBurst > dataplane.MaxMonitorRate {
		return c, fmt.Errorf("--monitor-rate %d, --monitor-burst %d: from 1 to %d events a second per CPU", d.monitorRate, d.monitorBurst, dataplane.MaxMonitorRate)
	}
	if d.monitorBurst != 0 && uint64(d.monitorBurst)*dataplane.MonitorTicksPerSecond < uint64(d.monitorRate) {
		min := (d.monitorRate + dataplane.MonitorTicksPerSecond - 1) / dataplane.MonitorTicksPerSecond
		return c, fmt.Errorf("--monitor-burst %d: at least --monitor-rate / %d (%d): the data plane refills its bucket once a clock tick (up to 1/%d s), a smaller burst caps the rate below --monitor-rate",
			d.monitorBurst, dataplane.MonitorTicksPerSecond, min, dataplane.MonitorTicksPerSecond)
	}
	return c, nil
}

// openBandwidthStore opens --bw-store (nil when unset: bandwidth off).
func (d *daemonFlags) openBandwidthStore() (bwstore.Store, error) {
	if d.bwStore == "" {
		if d.bwPasswordFile != "" {
			return nil, fmt.Errorf("--bw-store-password-file without --bw-store")
		}
		return nil, nil
	}
	s, err := bandwidth.OpenStore(d.bwStore, d.bwPasswordFile)
	if err != nil {
		return nil, fmt.Errorf("--bw-store: %w", err)
	}
	return s, nil
}

// maxLoadJitter bounds --etcd-load-jitter: a node waits that long at
// most before its first load (its data plane keeps the last state
// meanwhile, but a new node serves nothing).
const maxLoadJitter = 5 * time.Minute

// checkLoadJitter checks --etcd-load-jitter.
func checkLoadJitter(d time.Duration) error {
	if d < 0 || d > maxLoadJitter {
		return fmt.Errorf("--etcd-load-jitter %v: want a duration from 0 to %v", d, maxLoadJitter)
	}
	return nil
}

// readMetricsToken reads --metrics-token-file ("" when unset).
func (d *daemonFlags) readMetricsToken() (string, error) { return readMetricsToken(d.metricsToken) }

// checkStore makes the checks of connectStore that need no connection:
// the endpoints' forms, the TLS files, the password file.
func checkStore(endpoints string, auth store.ClientAuth, log *slog.Logger) error {
	return store.Options{Endpoints: strings.Split(endpoints, ","), Auth: auth, Log: log}.Check()
}

// connectStore connects to etcd for a role. A refused credential is a
// configuration error: say so now rather than retry forever. An etcd not
// up yet is waited for (the role goes on, logging what it does
// meanwhile: meanwhile).
func connectStore(endpoints string, auth store.ClientAuth, log *slog.Logger, meanwhile string) (*store.Store, error) {
	return connectStoreWith(store.Options{Endpoints: strings.Split(endpoints, ","), Log: log, Auth: auth}, meanwhile)
}

// connectStoreWith is connectStore with every option given.
func connectStoreWith(o store.Options, meanwhile string) (*store.Store, error) {
	endpoints, log := strings.Join(o.Endpoints, ","), o.Log
	st, err := store.Connect(o)
	if err != nil {
		return nil, err
	}
	if err := st.Ping(context.Background()); err != nil {
		var ce *store.CredentialError
		if errors.As(err, &ce) {
			st.Close()
			return nil, fmt.Errorf("etcd at %s: %w", endpoints, err)
		}
		log.Warn("etcd does not answer yet; "+meanwhile, "endpoints", endpoints, "err", err)
	}
	return st, nil
}

// readMetricsToken reads a --metrics-token-file ("" when path is), by
// the rules of every secret file (internal/secretfile: mode 0600 or
// stricter, first line): a token others can read protects nothing.
func readMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	return secretfile.Read(path, "--metrics-token-file")
}

// check checks the shared flags (the node name is required) and makes
// the role's logger; it opens nothing.
func (d *daemonFlags) check() (*slog.Logger, error) {
	if d.name == "" {
		return nil, fmt.Errorf("--name is required (this node's name: an edge of an edge set, or a host)")
	}
	if err := checkLoadJitter(d.loadJitter); err != nil {
		return nil, err
	}
	log, err := roleLogger(d.logLevel)
	if err != nil {
		return nil, err
	}
	if err := checkStore(d.etcd, d.etcdAuth, log); err != nil {
		return nil, err
	}
	if _, err := d.readMetricsToken(); err != nil {
		return nil, err
	}
	// The store's form and password file; a Redis client dials on first use.
	bws, err := d.openBandwidthStore()
	if err != nil {
		return nil, err
	}
	if bws != nil {
		bws.Close()
	}
	return log, nil
}

// connect connects to etcd (waiting for it in the background) and says
// where the node's pins are. loadGC is the store's LoadGCPercent
// (store.NodeLoadGCPercent for an edge, store.AgentLoadGCPercent for an
// agent).
func (d *daemonFlags) connect(log *slog.Logger, loadGC int) (*slog.Logger, *store.Store, dataplane.LoadOptions, error) {
	st, err := connectStoreWith(store.Options{Endpoints: strings.Split(d.etcd, ","), Log: log, Auth: d.etcdAuth, LoadJitter: d.loadJitter, FreeAfterLoad: true, LoadGCPercent: loadGC}, "following it anyway")
	if err != nil {
		return nil, nil, dataplane.LoadOptions{}, err
	}
	pin := d.pinDir
	if pin == "" {
		pin = dataplane.NodePinDir(d.name)
	}
	return log.With("node", d.name), st, dataplane.LoadOptions{PinDir: pin, AllowDrop: d.allowDrop}, nil
}

func init() {
	register(func() *cobra.Command {
		var df daemonFlags
		var attach []string
		var icmpSource, icmpSource6, healthSource, healthSource6, arpGateway, arpGateway6, bwZone string
		var noTTL bool
		var icmpTTL, icmpFrag icmpBudgetFlags
		var eipMax, ctMax, ctMax6, listenerMax, backendMax, driftFlows uint32
		var driftDelay time.Duration
		var followShare bool
		var arpIfaces, healthCmds []string
		var cfgARP edge.ARPConfig
		var healthCmdFile string
		var healthCmdConc int
		var storeGrace, settle time.Duration
		var syncListen string
		var syncCfg edge.SyncConfig
		var rates edge.RateConfig
		lb := edge.DefaultLB
		c := &cobra.Command{
			Use:   "edge",
			Short: "Run the edge role: XDP EIP routing between the Internet and the AZ underlay",
			Long: `Runs the edge role. The XDP program is attached to every --attach interface
and its maps and links are pinned under --pin-dir: when this process stops,
forwarding continues with the last state, and a restart takes over
without interruption. The node must be an edge of an edge set.

With BGP settings on its set and on itself (azgate set bgp, azgate set
edge-bgp), the edge announces its set's routes to its upstream routers,
dialling out only (it never listens for BGP), while it is well: data plane
attached, not drained (azgate edge drain), store reached within
--store-grace, maps equal to the desired state. On SIGTERM it withdraws,
waits until every peer was sent the withdrawal, then stops (docs/bgp.md).`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(cmd *cobra.Command) (func() error, error) {
			cmds, err := healthCommands(healthCmds, healthCmdFile)
			if err != nil {
				return nil, err
			}
			cfg := edge.Config{Name: df.name, Interfaces: attach, HashSeed: df.hashSeed, ICMPRate: df.icmpRate,
				ICMPBurst: df.icmpBurst, ICMPTimeExceeded: !noTTL, Version: version, LB: lb, HealthCommands: cmds,
				HealthCommandConcurrency: healthCmdConc, StoreGrace: storeGrace, AnnounceSettle: settle,
				EIPMax: eipMax, ConnMax: ctMax, ConnMax6: ctMax6, ListenerMax: listenerMax, BackendMax: backendMax, FollowShare: followShare,
				DriftFlows: driftFlows, DriftDelay: driftDelay}
			if cfg.Monitor, err = df.monitorConfig(); err != nil {
				return nil, err
			}
			roleMonitor = &monitor.Switch{}
			cfg.MonitorSwitch = roleMonitor
			if cfg.MetricsToken, err = df.readMetricsToken(); err != nil {
				return nil, err
			}
			cfg.ICMPBudgets = map[dataplane.ICMPKind]dataplane.ICMPBudget{}
			icmpTTL.apply(cmd, cfg.ICMPBudgets, dataplane.ICMPKindTTL, df.icmpRate, df.icmpBurst)
			icmpFrag.apply(cmd, cfg.ICMPBudgets, dataplane.ICMPKindFrag, df.icmpRate, df.icmpBurst)
			if icmpSource != "" {
				a, err := netip.ParseAddr(icmpSource)
				if err != nil {
					return nil, fmt.Errorf("--icmp-source: %w", err)
				}
				cfg.ICMPSource = a
			}
			if icmpSource6 != "" {
				a, err := netip.ParseAddr(icmpSource6)
				if err != nil {
					return nil, fmt.Errorf("--icmp-source6: %w", err)
				}
				cfg.ICMPSource6 = a
			}
			if healthSource != "" {
				a, err := netip.ParseAddr(healthSource)
				if err != nil {
					return nil, fmt.Errorf("--health-source %q: not an IPv4 address", healthSource)
				}
				cfg.HealthSource = a
			}
			if healthSource6 != "" {
				a, err := netip.ParseAddr(healthSource6)
				if err != nil {
					return nil, fmt.Errorf("--health-source6 %q: not an IPv6 address", healthSource6)
				}
				cfg.HealthSource6 = a
			}
			if syncListen != "" {
				p, err := strconv.ParseUint(strings.TrimPrefix(syncListen, ":"), 10, 16)
				if err != nil || p == 0 {
					return nil, fmt.Errorf("--sync-listen %q: a port (the address is always the edge's underlay address in its set)", syncListen)
				}
				syncCfg.Port = uint16(p)
			}
			cfg.ARP = cfgARP
			cfg.ARP.Ifaces = arpIfaces
			cfg.Rates = rates
			if arpGateway != "" {
				a, err := netip.ParseAddr(arpGateway)
				if err != nil {
					return nil, fmt.Errorf("--arp-gateway %q: not an IPv4 address", arpGateway)
				}
				cfg.ARP.Gateway = a
			}
			if arpGateway6 != "" {
				a, err := netip.ParseAddr(arpGateway6)
				if err != nil {
					return nil, fmt.Errorf("--arp-gateway6 %q: not an IPv6 address", arpGateway6)
				}
				cfg.ARP.Gateway6 = a
			}
			check := cfg
			check.Sync = syncCfg
			if err := check.CheckFlags(); err != nil {
				return nil, err
			}
			log, err := df.check()
			if err != nil {
				return nil, err
			}
			return func() error {
				log, st, load, err := df.connect(log, store.NodeLoadGCPercent)
				if err != nil {
					return err
				}
				defer st.Close()
				cfg.Log = log
				if syncCfg.Port != 0 {
					syncCfg.Secrets = st
					cfg.Sync = syncCfg
				}
				ctx, cancel := signalContext()
				defer cancel()
				bws, err := df.openBandwidthStore()
				if err != nil {
					return err
				}
				if bws != nil {
					defer bws.Close()
					cfg.Bandwidth = edge.BandwidthConfig{Store: bws, Zone: bwZone, Interval: df.bwInterval, Grace: df.bwGrace}
				}
				return roleResult(ctx, log, "edge", edge.Run(ctx, cfg, st, load, df.metricsListen),
					"edge stopping; the data plane keeps forwarding")
			}, nil
		})
		df.add(c)
		c.Flags().StringSliceVar(&attach, "attach", nil, "interfaces to attach the edge program to (Internet side and underlay side)")
		c.Flags().StringVar(&icmpSource, "icmp-source", "", "source address of ICMP errors (default: the first IPv4 address of the first --attach interface)")
		c.Flags().StringVar(&icmpSource6, "icmp-source6", "", "source address of ICMPv6 errors (time exceeded, packet too big) about packets to IPv6 EIPs: a global unicast IPv6 address of the edge the Internet routes to it (default: none, such packets are dropped and counted)")
		c.Flags().StringVar(&healthSource6, "health-source6", "", "the edge's own IPv6 health-check address (global unicast, e.g. from 2001:db8::/32 in a lab; never an EIP or VIP): the backends of IPv6 encap VIPs are checked from it through the NVGRE tunnel at their guests' IPv6 addresses (default: none, at their IPv4 addresses)")
		c.Flags().StringVar(&healthSource, "health-source", "", "the edge's own health-check address (e.g. from 198.18.0.0/15; never an EIP or VIP): encap-mode backends are checked from it through the NVGRE tunnel (default: none, they are probed directly at their private addresses)")
		c.Flags().BoolVar(&noTTL, "no-icmp-ttl", false, "count and drop expired TTLs instead of answering with ICMP time exceeded")
		icmpTTL.add(c, "icmp-ttl", "ICMP time exceeded")
		icmpFrag.add(c, "icmp-frag", "ICMP fragmentation needed (path MTU discovery)")
		c.Flags().Uint32Var(&eipMax, "eip-max", 0, "capacity of the maps with an entry per EIP or VIP: routes, counters, bandwidth buckets, firewall scopes; below 65536 also of the rate and bandwidth limits (0: 1048576, also the most; docs/scale.md)")
		c.Flags().Uint32Var(&ctMax, "ct-size", 0, "capacity of the connection tables (0: 1048576, also the most; docs/scale.md)")
		c.Flags().Uint32Var(&ctMax6, "ct-size6", 0, "capacity of the IPv6 VIPs' connection table and of their nat reverse table (lb_conns6, lb_nat_conns6), whose entries are larger (0: a quarter of --ct-size, 262144 by default; at most 1048576; docs/scale.md)")
		c.Flags().Uint32Var(&driftFlows, "drift-flows", 0, "capacity of the drifting EIPs' flow table: TCP flows to an EIP moved to another host that started after the move (0: 65536; at most 1048576; docs/scale.md, docs/dataplane.md \"EIP drift\")")
		c.Flags().DurationVar(&driftDelay, "drift-delay", edge.DefaultDriftDelay, "make-before-break: for this long after the edge first sees an EIP moved to another host, every packet to the EIP still goes to the previous host, giving the new host's agent time to program it (0: none; at most 5s)")
		c.Flags().BoolVar(&followShare, "follow-share", true, "load and watch only this edge's set's share of the store; false: the whole region, as before issue 19 (docs/scale.md \"Scopes\")")
		c.Flags().Uint32Var(&listenerMax, "listener-max", 0, "capacity of the single-port service listeners (VIP, protocol, port); services that would take the edge over it are left out and reported, the same on every edge of a set with the same value (0: 262144, also the most; docs/scale.md)")
		c.Flags().Uint32Var(&backendMax, "backend-max", 0, "capacity of the maps with an entry per service backend: backend slots and their counters, the nat reply fallback, health-check marks; services that would take the edge over it are left out and reported, as for --listener-max (0: 65536, also the most; docs/scale.md)")
		c.Flags().DurationVar(&lb.SYN, "ct-syn-timeout", lb.SYN, "connection-table timeout of a TCP connection until its handshake completes (0: the default)")
		c.Flags().DurationVar(&lb.Established, "ct-established-timeout", lb.Established, "connection-table timeout of an established TCP connection (0: the default)")
		c.Flags().DurationVar(&lb.FIN, "ct-fin-timeout", lb.FIN, "connection-table timeout after a FIN or RST (0: the default)")
		c.Flags().DurationVar(&lb.UDP, "ct-udp-timeout", lb.UDP, "connection-table timeout of UDP (and other) flows (0: the default)")
		c.Flags().Uint32Var(&lb.InsertRate, "ct-insert-rate", lb.InsertRate, "new connection entries per second per CPU; beyond it (a SYN flood) flows are forwarded by the table alone (0: no cap)")
		c.Flags().Uint32Var(&lb.InsertBurst, "ct-insert-burst", lb.InsertBurst, "burst of new connection entries per CPU")
		c.Flags().StringArrayVar(&healthCmds, "health-command", nil, `a command that command health checks may run, by NAME (repeatable): "NAME=/abs/path [args...]", split on spaces, no shell; it gets AZGATE_BACKEND_ADDR and AZGATE_BACKEND_PORT, exit 0 means up`)
		c.Flags().StringVar(&healthCmdFile, "health-commands", "", "file of health commands, one NAME=/abs/path [args...] a line ('#' comments), not writable by others")
		c.Flags().IntVar(&healthCmdConc, "health-command-concurrency", 0, "health-check commands run at once, over all backends; more wait their turn (0: twice the CPUs)")
		c.Flags().StringSliceVar(&arpIfaces, "arp-iface", nil, "--attach interfaces on a segment shared with clients or servers: the one member of the edge set that owns the set's ARP (elected through the store) answers ARP there for the VIPs and announces them with gratuitous ARP on takeover")
		c.Flags().StringVar(&cfgARP.Scope, "arp-scope", "", "name of the ARP ownership the edge campaigns for (default: its edge set's name); edges of several sets on one segment must share one")
		c.Flags().StringVar(&arpGateway, "arp-gateway", "", "an address the ARP owner also answers for on the --arp-iface segments: the default gateway of nat-mode servers there, so their replies go through the owner")
		c.Flags().StringVar(&arpGateway6, "arp-gateway6", "", "an IPv6 address (global or link-local) the ARP owner also answers neighbor solicitations for, as a router, on the --arp-iface segments: the IPv6 default gateway of nat-mode servers there (the IPv6 VIPs are answered whatever it is)")
		c.Flags().DurationVar(&cfgARP.TTL, "arp-lease-ttl", store.DefaultOwnerTTL, "lease of the ARP ownership in the store (whole seconds): a dead owner is replaced about this long after it stopped renewing")
		c.Flags().DurationVar(&cfgARP.Margin, "arp-lease-margin", store.DefaultOwnerMargin, "the ARP owner stops answering this long before its lease could expire in the store (covers clock-rate differences and its time to stop)")
		c.Flags().DurationVar(&storeGrace, "store-grace", edge.DefaultStoreGrace, "how long the edge keeps announcing its BGP routes without reaching the store (it keeps forwarding regardless; 0: the default)")
		c.Flags().DurationVar(&settle, "announce-settle", edge.DefaultSettle, "how long every condition must hold before the edge announces (again); withdrawal is immediate (0: the default)")
		c.AddCommand(edgeAdminCommands()...)
		c.Flags().StringVar(&syncListen, "sync-listen", "", "connection sync with the other members of the edge set: the TCP port (\":7946\") to listen on, on the edge's underlay address; every member of a set uses the same port (default: off; docs/connsync.md)")
		c.Flags().DurationVar(&syncCfg.Refresh, "sync-refresh", 0, "send the connection entries used since the last refresh to the peers again this often, so their copies of long-lived flows do not expire (default 30s)")
		c.Flags().DurationVar(&rates.Interval, "rate-interval", edge.DefaultRateInterval, "DDoS detection: measure per-EIP packet, bit and SYN rates this often and report them to the controller (negative: off; docs/ddos.md)")
		c.Flags().Float64Var(&rates.FloorPPS, "rate-floor-pps", edge.DefaultRateFloorPPS, "DDoS detection: report an EIP when it receives at least this many packets/s (or reaches another floor)")
		c.Flags().Float64Var(&rates.FloorBPS, "rate-floor-bps", edge.DefaultRateFloorBPS, "DDoS detection: report an EIP when it receives at least this many bits/s")
		c.Flags().Float64Var(&rates.FloorSYN, "rate-floor-syn", edge.DefaultRateFloorSYN, "DDoS detection: report an EIP when it receives at least this many TCP SYNs/s")
		c.Flags().IntVar(&rates.TopN, "rate-top", edge.DefaultRateTopN, "DDoS detection: at most this many EIPs per report, the highest packet rates")
		c.Flags().StringVar(&bwZone, "bw-zone", edge.DefaultBandwidthZone, "shared bandwidth: the zone of the --bw-store the edge reports its ingress to (every edge of the region uses the same)")
		c.Flags().DurationVar(&syncCfg.JoinTimeout, "sync-join-timeout", 0, "a starting edge that finds no live peer for this long is the first of its set and ready without a full copy (default 10s)")
		return c
	})
	register(func() *cobra.Command {
		var df daemonFlags
		var underlay, icmpSource6 string
		var local, oldLocal []string
		var flowMax, eipMax uint32
		c := &cobra.Command{
			Use:   "agent",
			Short: "Run the host agent: NVGRE decap and 1:1 NAT to local guests, encap of their replies",
			Args:  cobra.NoArgs,
		}
		roleCommand(c, func(cmd *cobra.Command) (func() error, error) {
			// The agent's configuration, the guests' local access
			// included, is checked before anything starts
			// (agent.Config.Check: the store is not needed for it).
			var allow []agent.LocalAllow
			if len(oldLocal) > 0 {
				return nil, fmt.Errorf("--local-prefix is gone (it handed the host's kernel every guest packet to the prefix: other tenants' guests, the host's listeners, the underlay): name what guests may reach with --local-allow PREFIX[:PROTO[:PORT[-PORT]]] (docs/roles.md)")
			}
			for _, p := range local {
				a, err := agent.ParseLocalAllow(p)
				if err != nil {
					return nil, fmt.Errorf("--local-allow %w", err)
				}
				allow = append(allow, a)
			}
			cfg := agent.Config{Name: df.name, Underlay: underlay, HashSeed: df.hashSeed, ICMPRate: df.icmpRate,
				ICMPBurst: df.icmpBurst, Version: version, LocalAllow: allow, Status: agent.StatusConfig{MetricsListen: df.metricsListen}, EIPMax: eipMax}
			if icmpSource6 != "" {
				a, err := netip.ParseAddr(icmpSource6)
				if err != nil {
					return nil, fmt.Errorf("--icmp-source6 %q: not an IPv6 address", icmpSource6)
				}
				cfg.ICMPSource6 = a
			}
			var err error
			if cfg.Monitor, err = df.monitorConfig(); err != nil {
				return nil, err
			}
			roleMonitor = &monitor.Switch{}
			cfg.MonitorSwitch = roleMonitor
			if err := cfg.Check(); err != nil {
				return nil, err
			}
			log, err := df.check()
			if err != nil {
				return nil, err
			}
			if cfg.Status.MetricsToken, err = df.readMetricsToken(); err != nil {
				return nil, err
			}
			return func() error {
				log, st, load, err := df.connect(log, store.AgentLoadGCPercent)
				if err != nil {
					return err
				}
				defer st.Close()
				load.AgentFlowMax, load.AgentEIPMax = flowMax, cfg.EIPMax
				cfg.Log = log
				bws, err := df.openBandwidthStore()
				if err != nil {
					return err
				}
				if bws != nil {
					defer bws.Close()
					cfg.Bandwidth = agent.BandwidthConfig{Store: bws, Interval: df.bwInterval, Grace: df.bwGrace}
				}
				ctx, cancel := signalContext()
				defer cancel()
				return roleResult(ctx, log, "agent", agent.Run(ctx, cfg, st, load),
					"agent stopping; the data plane keeps forwarding")
			}, nil
		})
		df.add(c)
		// The agent's own default, so that an edge and an agent on one
		// host both serve their metrics.
		agentMetrics := c.Flags().Lookup("metrics-listen")
		agentMetrics.DefValue, df.metricsListen = defaultAgentMetrics, defaultAgentMetrics
		c.Flags().StringVar(&underlay, "underlay-if", "", "the host's underlay interface")
		c.Flags().StringVar(&icmpSource6, "icmp-source6", "", "source address of the ICMPv6 packets too big sent to IPv6 guests whose packets do not fit the tunnel: a global unicast IPv6 address of the host (default: the host's IPv6 underlay address; a host of the IPv4 underlay sends none, such packets are dropped and counted, drop_too_big)")
		c.Flags().StringArrayVar(&local, "local-allow", nil, "what guests may send to the host's kernel, PREFIX[:PROTO[:PORT[-PORT]]] (PROTO tcp, udp with a port; icmp, any or a number), repeatable; the rest of the prefix is dropped, and without a prefix a guest reaches nothing of its host (default: none; docs/roles.md)")
		c.Flags().StringSliceVar(&oldLocal, "local-prefix", nil, "gone: use --local-allow")
		_ = c.Flags().MarkHidden("local-prefix")
		c.Flags().Uint32Var(&eipMax, "eip-max", 0, "capacity of the maps with an entry per EIP of the host's guests: EIPs, counters, bandwidth limits and buckets (0: 65536, also the most; a new size is migrated on start; docs/scale.md)")
		c.Flags().Uint32Var(&flowMax, "flow-table-size", 0, "capacity of the flow table that sends each reply back through the VIP or EIP its flow came in by (default 1048576; the IPv6 VIPs' flow table takes a quarter of it; a new size is migrated on start, flows kept: docs/upgrades.md)")
		return c
	})
	register(func() *cobra.Command {
		return &cobra.Command{
			Use:   "dataplane-reset NODE",
			Short: "Detach a node's XDP programs and remove its pinned maps (forwarding stops; upgrades need it no more: docs/upgrades.md)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return dataplane.RemovePins(dataplane.NodePinDir(args[0]))
			},
		}
	})
}

// healthCommands builds the edge's list of health-check commands from
// --health-command and --health-commands; a name given twice is an error.
func healthCommands(specs []string, file string) (health.Commands, error) {
	var list []health.Command
	for _, s := range specs {
		c, err := health.ParseCommand(s)
		if err != nil {
			return nil, fmt.Errorf("--health-command: %w", err)
		}
		list = append(list, c)
	}
	if file != "" {
		more, err := health.LoadCommandsFile(file)
		if err != nil {
			return nil, fmt.Errorf("--health-commands: %w", err)
		}
		list = append(list, more...)
	}
	return health.NewCommands(list)
}

// icmpBudgetFlags are one ICMP error kind's own budget on the edge
// (--icmp-ttl-rate, --icmp-frag-burst, ...): each kind has its own bucket,
// --icmp-rate and --icmp-burst unless these are given.
type icmpBudgetFlags struct {
	prefix      string
	rate, burst uint32
}

func (b *icmpBudgetFlags) add(c *cobra.Command, prefix, what string) {
	b.prefix = prefix
	c.Flags().Uint32Var(&b.rate, prefix+"-rate", 0, what+" errors per second per CPU, a budget no other kind of error spends (default --icmp-rate)")
	c.Flags().Uint32Var(&b.burst, prefix+"-burst", 0, what+" error burst (default --icmp-burst)")
}

// apply sets the kind's budget if either flag was given.
func (b *icmpBudgetFlags) apply(c *cobra.Command, to map[dataplane.ICMPKind]dataplane.ICMPBudget, k dataplane.ICMPKind, rate, burst uint32) {
	fr, fb := c.Flags().Changed(b.prefix+"-rate"), c.Flags().Changed(b.prefix+"-burst")
	if !fr && !fb {
		return
	}
	if fr {
		rate = b.rate
	}
	if fb {
		burst = b.burst
	}
	to[k] = dataplane.ICMPBudget{Rate: rate, Burst: burst}
}

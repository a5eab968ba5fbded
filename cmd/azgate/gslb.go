//go:build !node

package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
	"github.com/azgate/azgate/internal/gslbrole"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/store"
)

// gslbFlags are `azgate gslb`'s settings (docs/gslb.md, "The role").
type gslbFlags struct {
	name, vantage               string
	listen                      []string
	geoipDB, prefixMap          string
	geoipInterval               time.Duration
	quorum                      int
	rrl                         gslbrole.RRL
	viewInterval                time.Duration
	maxTCPConns, maxTCPPerNet   int
	udpSockets                  int
	etcd                        string
	etcdAuth                    store.ClientAuth
	metricsListen, metricsToken string
	logLevel                    string
}

func init() {
	register(func() *cobra.Command {
		var f gslbFlags
		c := &cobra.Command{
			Use:   "gslb",
			Short: "Run the GSLB's authoritative DNS server; manage GSLB records (record) and see target health (status)",
			Long: `Without a subcommand, runs the gslb role (docs/gslb.md, "The role"): an
authoritative DNS server on each --listen address (UDP and TCP) answering for the DNS
zones and GSLB records of the desired state (azgate dns zone, azgate gslb
record), following etcd. Clients are located by EDNS Client Subnet or the
resolver's address in --geoip-db (a MaxMind-format file, reloaded when
replaced) and/or --prefix-map. Every target of a record with a probe block
is health checked from here; several gslb instances (--vantage) share their
views through etcd and a target leaves the answers when --quorum of the
fresh views say it is down (default a majority).

DNS is public by design: it authenticates no one, answers only for its
zones (no recursion), and is bounded in size, time and TCP connections
and in UDP answers by response rate limiting (--rrl-*, on by default: answers
of one class to one client network per second, over it every --rrl-slip-th
answer is an empty TC=1 one and the others are dropped).
The default --listen is loopback; binding :53 on a public address is the
operator's choice. /metrics is loopback-only unless --metrics-token-file.`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(*cobra.Command) (func() error, error) { return prepareGSLB(f) })
		fl := c.Flags()
		fl.StringVar(&f.name, "name", "", "node name: its status key (default HOSTNAME)")
		fl.StringVar(&f.vantage, "vantage", "", "vantage point name of this node's probe view (default --name)")
		fl.StringArrayVar(&f.listen, "listen", []string{"127.0.0.1:5353"}, "DNS address HOST:PORT, UDP and TCP (a public :53 is an explicit choice); repeatable, e.g. one IPv4 and one IPv6 service address, each with the same limits; [::]:53 is both families on every address")
		fl.StringVar(&f.geoipDB, "geoip-db", "", "MaxMind-format database locating clients (azgate_region, else continent code; coordinates); reloaded when the file is replaced")
		fl.DurationVar(&f.geoipInterval, "geoip-interval", 5*time.Second, "how often --geoip-db's file is checked for a change")
		fl.StringVar(&f.prefixMap, "prefix-map", "", "file of \"PREFIX REGION [LAT LON]\" lines, asked before --geoip-db (docs/geo.md)")
		fl.IntVar(&f.quorum, "quorum", 0, "fresh vantage views that must say down to take a target out (0: a majority)")
		fl.DurationVar(&f.viewInterval, "view-interval", time.Second, "how often this node's probe view is published; views older than 3 intervals (3s at least) do not count")
		d := gslbrole.DefaultRRL
		fl.IntVar(&f.rrl.ResponsesPerSecond, "rrl-responses-per-second", d.ResponsesPerSecond, "UDP response rate limit: answers per second of one class (name and type, NXDOMAIN, error) to one client network; 0: off")
		fl.IntVar(&f.rrl.Slip, "rrl-slip", d.Slip, "over the limit, every Nth answer is sent empty with TC=1 (the client retries over TCP), the others dropped; 1: all, 0: none")
		fl.DurationVar(&f.rrl.Window, "rrl-window", d.Window, "a quiet class gets at most --rrl-responses-per-second x this many answers at once")
		fl.IntVar(&f.rrl.IPv4Prefix, "rrl-ipv4-prefix", d.IPv4Prefix, "client network length for IPv4 sources")
		fl.IntVar(&f.rrl.IPv6Prefix, "rrl-ipv6-prefix", d.IPv6Prefix, "client network length for IPv6 sources")
		fl.IntVar(&f.udpSockets, "udp-sockets", 1, "UDP sockets sharing the DNS port (SO_REUSEPORT), one goroutine each; as many as cores to use several (docs/gslb.md, Server)")
		fl.IntVar(&f.maxTCPConns, "max-tcp-conns", 256, "open DNS TCP connections at most; more are closed at once and counted")
		fl.IntVar(&f.maxTCPPerNet, "max-tcp-conns-per-net", 0, "open DNS TCP connections from one source /24 (IPv6 /56) at most (0: an eighth of --max-tcp-conns)")
		fl.StringVar(&f.etcd, "etcd-endpoints", defaultEtcd, "etcd endpoints, comma-separated (the controller's embedded etcd by default)")
		fl.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9467", "Prometheus /metrics address (empty: off; a non-loopback address needs --metrics-token-file)")
		fl.StringVar(&f.metricsToken, "metrics-token-file", "", "file holding a token /metrics then requires as \"Authorization: Bearer TOKEN\"")
		fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
		addEtcdAuthFlags(c, &f.etcdAuth)
		c.AddCommand(gslbRecordCommand(), gslbStatusCommand())
		return c
	})
}

// loopbackOnly refuses a metrics address off loopback without a token.
func loopbackOnly(addr, token string) error {
	if addr == "" || token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--metrics-listen %q is not a loopback address: give --metrics-token-file so /metrics is not open to the network", addr)
}

// prepareGSLB checks the settings, reads --prefix-map and opens
// --geoip-db (files), and returns what runs the server.
func prepareGSLB(f gslbFlags) (func() error, error) {
	log, err := roleLogger(f.logLevel)
	if err != nil {
		return nil, err
	}
	if f.name == "" {
		if f.name, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--name: %w", err)
		}
	}
	token, err := readMetricsToken(f.metricsToken)
	if err != nil {
		return nil, err
	}
	if err := loopbackOnly(f.metricsListen, token); err != nil {
		return nil, err
	}
	if err := checkListens("--listen", f.listen); err != nil {
		return nil, err
	}
	if err := checkStore(f.etcd, f.etcdAuth, log); err != nil {
		return nil, err
	}
	if err := f.roleConfig(log, nil).Check(); err != nil {
		return nil, err
	}
	var chain geo.Chain
	if f.prefixMap != "" {
		fh, err := os.Open(f.prefixMap)
		if err != nil {
			return nil, fmt.Errorf("--prefix-map: %w", err)
		}
		m, err := geo.ParsePrefixMap(fh, f.prefixMap)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("--prefix-map: %w", err)
		}
		chain = append(chain, m)
	}
	var db *geo.DB
	if f.geoipDB != "" {
		if db, err = geo.Open(f.geoipDB); err != nil {
			return nil, fmt.Errorf("--geoip-db: %w", err)
		}
		chain = append(chain, db)
	}
	return func() error { return runGSLB(f, log, token, chain, db) }, nil
}

// roleConfig is the gslb role's configuration from the flags.
func (f gslbFlags) roleConfig(log *slog.Logger, loc geo.Locator) gslbrole.Config {
	return gslbrole.Config{Name: f.name, Vantage: f.vantage, Version: version, Locator: loc, Quorum: f.quorum, RRL: f.rrl,
		ViewEvery: f.viewInterval, Listen: f.listen, Server: dnsserver.ServerConfig{MaxTCPConns: f.maxTCPConns, MaxTCPConnsPerNet: f.maxTCPPerNet, UDPSockets: f.udpSockets}, Log: log}
}

func runGSLB(f gslbFlags, log *slog.Logger, token string, chain geo.Chain, db *geo.DB) error {
	ctx, cancel := signalContext()
	defer cancel()
	if db != nil {
		defer db.Close()
		go db.Watch(ctx, f.geoipInterval, func(err error) { log.Warn("geoip database not reloaded; the previous one stays in use", "err", err) })
	}
	var loc geo.Locator
	if len(chain) > 0 {
		loc = chain
	} else {
		log.Warn("no --geoip-db and no --prefix-map: clients are not located (nearest answers follow the failover order)")
	}
	st, err := connectStore(f.etcd, f.etcdAuth, log, "serving an empty catalog until it does")
	if err != nil {
		return err
	}
	defer st.Close()
	g, err := gslbrole.New(st, f.roleConfig(log, loc))
	if err != nil {
		return err
	}
	if f.metricsListen != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(g.Collector(db))
		go nodemetrics.ServeRegistry(ctx, f.metricsListen, nodemetrics.WithNode(reg, f.name), token, log)
	}
	return g.Run(ctx)
}

// gslbTargetFlag parses --target VIP,region=R[,weight=N][,order=N][,lat=F,lon=F].
func gslbTargetFlag(spec string) (model.GSLBTarget, error) {
	var t model.GSLBTarget
	a, rest, _ := strings.Cut(spec, ",")
	vip, err := parseAddr("--target "+strconv.Quote(spec)+": vip", a)
	if err != nil {
		return t, err
	}
	t.VIP = vip
	kv, err := keyValues("target", rest, "region", "weight", "order", "lat", "lon")
	if err != nil {
		return t, err
	}
	t.Region = kv["region"]
	num := func(k string, bits int, set func(int64)) error {
		v, ok := kv[k]
		if !ok {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			return fmt.Errorf("--target %q: %s %q is not a number", spec, k, v)
		}
		set(n)
		return nil
	}
	if err := num("weight", 32, func(n int64) { t.Weight = uint32(n) }); err != nil {
		return t, err
	}
	if err := num("order", 32, func(n int64) { t.Order = int(n) }); err != nil {
		return t, err
	}
	for _, k := range []string{"lat", "lon"} {
		if v, ok := kv[k]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return t, fmt.Errorf("--target %q: %s %q is not a number", spec, k, v)
			}
			if k == "lat" {
				t.Lat = x
			} else {
				t.Lon = x
			}
		}
	}
	return t, nil
}

// recordFlags are the flags of gslb record create and set.
type recordFlags struct {
	zone, policy, allDown string
	ttl                   uint32
	targets               []string
	probe                 string // KIND[:PORT], "none" removes it
	path, host            string
	insecure              bool
	interval, timeout     time.Duration
	rise, fall            int
}

func (r *recordFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&r.zone, "zone", "", "the DNS zone the name lies in")
	f.StringVar(&r.policy, "policy", "", "nearest, weighted or failover")
	f.StringVar(&r.allDown, "all-down", "", "when every target is down: failopen (answer the nearest anyway; default) or servfail")
	f.Uint32Var(&r.ttl, "ttl", 0, "TTL of the answers (default 30)")
	f.StringArrayVar(&r.targets, "target", nil, "VIP,region=R[,weight=N][,order=N][,lat=F,lon=F] (repeatable; set: replaces every target)")
	f.StringVar(&r.probe, "probe", "", "health check of every target: tcp:PORT, http[:PORT] or https[:PORT] (set: \"none\" removes it)")
	f.StringVar(&r.path, "probe-path", "", "http(s) probe: the GET path (default /)")
	f.StringVar(&r.host, "probe-host", "", "http(s) probe: Host header and TLS server name (default the VIP)")
	f.BoolVar(&r.insecure, "probe-insecure", false, "https probe: do not verify the certificate")
	f.DurationVar(&r.interval, "probe-interval", 0, "time between checks (default 1s)")
	f.DurationVar(&r.timeout, "probe-timeout", 0, "a check's timeout (default min(interval, 1s))")
	f.IntVar(&r.rise, "probe-rise", 0, "consecutive successes to go up (default 2)")
	f.IntVar(&r.fall, "probe-fall", 0, "consecutive failures to go down (default 2)")
}

// apply sets on rec the flags the command line changed.
func (r *recordFlags) apply(cmd *cobra.Command, rec *model.GSLBRecord) error {
	ch := cmd.Flags().Changed
	if ch("zone") {
		rec.Zone = r.zone
	}
	if ch("policy") {
		rec.Policy = r.policy
	}
	if ch("all-down") {
		rec.AllDown = r.allDown
	}
	if ch("ttl") {
		rec.TTL = r.ttl
	}
	if ch("target") {
		rec.Targets = nil
		for _, spec := range r.targets {
			t, err := gslbTargetFlag(spec)
			if err != nil {
				return err
			}
			rec.Targets = append(rec.Targets, t)
		}
	}
	if ch("probe") {
		if r.probe == "none" {
			rec.Probe = nil
		} else {
			kind, port, hasPort := strings.Cut(r.probe, ":")
			p := &model.GSLBProbe{Kind: kind}
			if hasPort {
				n, err := strconv.ParseUint(port, 10, 16)
				if err != nil || n == 0 {
					return fmt.Errorf("--probe %q: port %q is not 1-65535", r.probe, port)
				}
				p.Port = uint16(n)
			}
			rec.Probe = p
		}
	}
	probeFlags := []string{"probe-path", "probe-host", "probe-insecure", "probe-interval", "probe-timeout", "probe-rise", "probe-fall"}
	for _, n := range probeFlags {
		if ch(n) && rec.Probe == nil {
			return fmt.Errorf("--%s: the record has no probe (give --probe KIND[:PORT])", n)
		}
	}
	if p := rec.Probe; p != nil {
		c := *p
		if ch("probe-path") {
			c.Path = r.path
		}
		if ch("probe-host") {
			c.Host = r.host
		}
		if ch("probe-insecure") {
			c.Insecure = r.insecure
		}
		if ch("probe-interval") {
			c.Interval = model.Duration(r.interval)
		}
		if ch("probe-timeout") {
			c.Timeout = model.Duration(r.timeout)
		}
		if ch("probe-rise") {
			c.Rise = r.rise
		}
		if ch("probe-fall") {
			c.Fall = r.fall
		}
		rec.Probe = &c
	}
	return nil
}

func gslbRecordCommand() *cobra.Command {
	c := &cobra.Command{Use: "record", Aliases: []string{"records"}, Short: "GSLB records: a name answered per query among regional VIPs"}
	var cf recordFlags
	var replace bool
	create := &cobra.Command{
		Use:   "create NAME --zone ZONE --policy POLICY --target VIP,region=R[,...]...",
		Short: "Create a GSLB record",
		Example: `  azgate gslb record create pathd.example.com --zone example.com --policy nearest \
      --target 203.0.113.10,region=eu-west,lat=53.35,lon=-6.26 \
      --target 198.51.100.10,region=us-east,lat=39.04,lon=-77.49 \
      --probe http:8080 --probe-path /healthz --probe-interval 500ms --probe-fall 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec := &model.GSLBRecord{Name: args[0]}
			if err := cf.apply(cmd, rec); err != nil {
				return err
			}
			if es := rec.Validate(); len(es) > 0 {
				return fmt.Errorf("invalid GSLB record %q: %w", rec.Name, es)
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			var res client.Result
			if replace {
				res, err = cl.Put(cmd.Context(), rec)
			} else {
				res, err = cl.Create(cmd.Context(), rec)
			}
			if err != nil {
				return err
			}
			return writeResult(cmd, "GSLB record "+rec.Name, res, rec)
		},
	}
	cf.add(create)
	create.Flags().BoolVar(&replace, "replace", false, "replace the record if it exists (PUT) instead of failing")
	create.MarkFlagRequired("zone")
	create.MarkFlagRequired("policy")
	create.MarkFlagRequired("target")

	var sf recordFlags
	set := &cobra.Command{
		Use:     "set NAME [--policy P] [--all-down A] [--ttl N] [--target ...]... [--probe ...]",
		Short:   "Change a GSLB record: only the flags given change (--target replaces every target)",
		Example: `  azgate gslb record set pathd.example.com --policy failover --probe-fall 3`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, o, err := cl.Edit(cmd.Context(), model.KindGSLBRecord, args[0], func(o model.Object) error {
				return sf.apply(cmd, o.(*model.GSLBRecord))
			})
			if err != nil {
				return err
			}
			return writeResult(cmd, "GSLB record "+o.Key(), res, o)
		},
	}
	sf.add(set)
	c.AddCommand(create, set)
	c.AddCommand(objectCommands(model.KindGSLBRecord, describeGSLBRecord, gslbRecordTable)...)
	return c
}

func describeGSLBRecord(w io.Writer, o model.Object) {
	r := o.(*model.GSLBRecord)
	tw := newTable(w)
	row(tw, "name:", r.Name)
	row(tw, "zone:", r.Zone)
	row(tw, "policy:", r.Policy)
	row(tw, "all down:", r.AllDown)
	row(tw, "ttl:", r.TTL)
	if p := r.Probe.Normalized(); p != nil {
		desc := fmt.Sprintf("%s port %d every %v, timeout %v, rise %d, fall %d", p.Kind, p.Port, time.Duration(p.Interval), time.Duration(p.Timeout), p.Rise, p.Fall)
		if p.Kind != "tcp" {
			desc += fmt.Sprintf(", GET %s", p.Path)
			if p.Host != "" {
				desc += " Host " + p.Host
			}
			if p.Insecure {
				desc += " (certificate not verified)"
			}
		}
		row(tw, "probe:", desc)
	} else {
		row(tw, "probe:", "none (targets always up)")
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w, "VIP", "REGION", "WEIGHT", "ORDER", "LAT", "LON")
	for _, t := range r.Targets {
		row(tw, t.VIP, t.Region, t.Weight, t.Order, t.Lat, t.Lon)
	}
	tw.Flush()
}

func gslbRecordTable(w io.Writer, objs []model.Object) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
	tw := newTable(w, "NAME", "ZONE", "POLICY", "ALL-DOWN", "TTL", "TARGETS", "PROBE")
	for _, o := range objs {
		r := o.(*model.GSLBRecord)
		var ts []string
		for _, t := range r.Targets {
			ts = append(ts, t.Region+"="+t.VIP.String())
		}
		probe := "none"
		if p := r.Probe.Normalized(); p != nil {
			probe = fmt.Sprintf("%s:%d", p.Kind, p.Port)
		}
		row(tw, r.Name, r.Zone, r.Policy, r.AllDown, r.TTL, strings.Join(ts, ","), probe)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no GSLB records)")
	}
}

func gslbStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Each gslb node's targets: the heartbeat (UP, every vantage point combined) and its own probe (LOCAL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := apiClient()
			if err != nil {
				return err
			}
			st, err := cl.Status(cmd.Context())
			if err != nil {
				return err
			}
			nodes := st.Nodes[gslbrole.Role]
			sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
			if globals.json {
				if nodes == nil {
					nodes = []model.NodeStatus{}
				}
				return printJSON(cmd.OutOrStdout(), nodes)
			}
			printGSLBStatus(cmd.OutOrStdout(), nodes, time.Now())
			return nil
		},
	}
}

func printGSLBStatus(w io.Writer, nodes []model.NodeStatus, now time.Time) {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no gslb node reports its status")
		return
	}
	for i, n := range nodes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		g := n.GSLB
		if g == nil {
			fmt.Fprintf(w, "%s: no GSLB status\n", n.Name)
			continue
		}
		q := "majority"
		if g.Quorum > 0 {
			q = strconv.Itoa(g.Quorum)
		}
		fmt.Fprintf(w, "%s: DNS on %s, vantage %s, %d zone(s), %d record(s), views %s (quorum %s), updated %s ago\n",
			n.Name, g.Listen, g.Vantage, g.Zones, g.Records, strings.Join(g.Views, ","), q, ago(now, n.Updated))
		tw := newTable(w, "TARGET", "VIP", "UP", "LOCAL", "SINCE", "CHECKS", "FAILURES", "RTT", "LAST-ERROR")
		for _, t := range g.Targets {
			row(tw, t.Key, t.VIP, t.Up, t.LocalUp, ago(now, t.Since), t.Checks, t.Failures, fmt.Sprintf("%.1fms", t.RTTMS), t.LastErr)
		}
		tw.Flush()
		for _, s := range g.Skipped {
			fmt.Fprintf(w, "skipped %s %s: %s\n", model.Singular(s.Kind), s.Key, s.Reason)
		}
	}
}

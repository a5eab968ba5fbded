//go:build !node

package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/prober"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/secretfile"
)

// proberFlags are `azgate prober`'s settings (docs/prober.md).
type proberFlags struct {
	node                        string
	relays, origins             []string
	interval, timeout, post     time.Duration
	probes, maxQueue            int
	reportURL, tokenFile        string
	dns                         []string
	reportFamily                string
	metricsListen, metricsToken string
	logLevel                    string
}

func init() {
	register(func() *cobra.Command {
		var f proberFlags
		c := &cobra.Command{
			Use:   "prober",
			Short: "Measure hops to relays and origins and report them to pathd",
			Long: `Runs a path-computation prober (docs/prober.md) at an edge or relay
named --node. Every --interval it connects --probes times to every
--relay and --origin (TCP), and reports each hop's median connect time,
loss and availability to pathd at --report-url.

The report host is resolved through --dns (the GSLB), honouring the
answer's TTL (clamped to 1-60 s) and again after a failed POST, so the
prober reports to its nearest healthy region and follows a failover. A
report stays queued until a pathd acknowledged it (at most --max-queue
measurements; the oldest are dropped and counted past that).`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(*cobra.Command) (func() error, error) { return prepareProber(f) })
		fl := c.Flags()
		fl.StringVar(&f.node, "node", "", "this edge's or relay's node name (the From of its reports); required")
		fl.StringArrayVar(&f.relays, "relay", nil, "a relay to measure: NAME=IP:PORT, an IPv6 address in brackets (r1=[2001:db8::1]:443) (repeatable)")
		fl.StringArrayVar(&f.origins, "origin", nil, "an origin to measure: NAME=IP:PORT, an IPv6 address in brackets (repeatable)")
		fl.DurationVar(&f.interval, "interval", prober.DefaultInterval, "time between rounds (pathd counts a hop failed after 3 missed reports at its --report-interval)")
		fl.IntVar(&f.probes, "probes", prober.DefaultProbes, "TCP connects per target per round")
		fl.DurationVar(&f.timeout, "timeout", prober.DefaultTimeout, "timeout of one connect")
		fl.StringVar(&f.reportURL, "report-url", "", "pathd's report endpoint, e.g. http://pathd.example:8080/v1/reports; required")
		fl.StringArrayVar(&f.dns, "dns", nil, "DNS server IP:PORT the report host is resolved through (repeatable; default: the system resolver)")
		fl.StringVar(&f.reportFamily, "report-family", "ipv4", "the report host's address family tried first: ipv4 (A, then AAAA when the name has none) or ipv6 (AAAA, then A: a prober with IPv6 only)")
		fl.StringVar(&f.tokenFile, "token-file", "", "file whose first line is pathd's report token (mode 0600 or stricter); required")
		fl.IntVar(&f.maxQueue, "max-queue", prober.DefaultMaxQueue, "measurements kept while pathd is unreachable")
		fl.DurationVar(&f.post, "post-timeout", prober.DefaultPostTimeout, "timeout of one POST to pathd")
		fl.StringVar(&f.metricsListen, "metrics-listen", "", "Prometheus /metrics address, e.g. 127.0.0.1:9468 (default: off)")
		fl.StringVar(&f.metricsToken, "metrics-token-file", "", "file holding a token /metrics then requires as \"Authorization: Bearer TOKEN\"")
		fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
		return c
	})
}

// parseTargets parses NAME=IP:PORT flags.
func parseTargets(flag string, vals []string, origin bool) ([]prober.Target, error) {
	var out []prober.Target
	for _, v := range vals {
		name, addr, ok := strings.Cut(v, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--%s %q: want NAME=IP:PORT", flag, v)
		}
		out = append(out, prober.Target{Name: name, Addr: addr, Origin: origin})
	}
	return out, nil
}

// prepareProber checks the settings and returns what runs the prober.
func prepareProber(f proberFlags) (func() error, error) {
	log, err := roleLogger(f.logLevel)
	if err != nil {
		return nil, err
	}
	relays, err := parseTargets("relay", f.relays, false)
	if err != nil {
		return nil, err
	}
	origins, err := parseTargets("origin", f.origins, true)
	if err != nil {
		return nil, err
	}
	if f.tokenFile == "" {
		return nil, fmt.Errorf("--token-file is required (pathd refuses reports without its token)")
	}
	token, err := secretfile.Read(f.tokenFile, "--token-file")
	if err != nil {
		return nil, err
	}
	mtoken, err := readMetricsToken(f.metricsToken)
	if err != nil {
		return nil, err
	}
	p, err := prober.New(prober.Config{
		Node: f.node, Targets: append(relays, origins...), Interval: f.interval, Probes: f.probes,
		Timeout: f.timeout, ReportURL: f.reportURL, DNS: f.dns, ReportFamily: f.reportFamily, Token: token, MaxQueue: f.maxQueue,
		PostTimeout: f.post, Log: log.With("node", f.node),
	})
	if err != nil {
		return nil, fmt.Errorf("prober: %w", err)
	}
	return func() error { return runProber(f, p, log, mtoken, len(relays)+len(origins)) }, nil
}

func runProber(f proberFlags, p *prober.Prober, log *slog.Logger, mtoken string, targets int) error {
	ctx, cancel := signalContext()
	defer cancel()
	if f.metricsListen != "" {
		go nodemetrics.ServeRegistry(ctx, f.metricsListen, nodemetrics.WithNode(prober.NewRegistry(p), f.node), mtoken, log)
	}
	log.Info("prober running", "node", f.node, "targets", targets, "report_url", f.reportURL)
	sdnotify.Tell(log, sdnotify.Ready) // configured: probing starts now
	p.Run(ctx)
	return nil
}

//go:build !node

package main

import (
	"crypto/tls"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/ddos"
	"github.com/azgate/azgate/internal/nodemetrics"
)

func init() {
	register(func() *cobra.Command {
		var cfg controller.Config
		var etcd, logLevel string
		var ddosOn bool
		var ddosEIP []string
		c := &cobra.Command{
			Use:   "controller",
			Short: "Run the controller: the REST API, validation and the desired state in etcd",
			Long: `Runs the controller until SIGINT or SIGTERM. By default it starts an
embedded single-node etcd with its data in --data-dir, reachable by the
other roles at unix://DATA_DIR/etcd.sock; --etcd-endpoints uses an external
etcd cluster instead. The API token is created in DATA_DIR/token (mode 0600)
on first start; it is an admin's. --tokens-file adds named tokens with a
role each (read-only, operator, admin), re-read when the file changes, so
tokens rotate without a restart (docs/security.md). The API listens on loopback unless --listen names another
address; --listen "" with --listen-unix serves the unix socket alone.`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(cmd *cobra.Command) (func() error, error) {
			log, err := roleLogger(logLevel)
			if err != nil {
				return nil, err
			}
			cfg.Node = nodemetrics.HostNode()
			if etcd != "" {
				cfg.EtcdEndpoints = strings.Split(etcd, ",")
			}
			cfg.Version, cfg.Logger = version, log
			cfg.DDoS.Off = !ddosOn
			if cfg.DDoS.Detector.Override, err = parseDDoSOverrides(ddosEIP); err != nil {
				return nil, err
			}
			if err := cfg.Check(); err != nil {
				return nil, err
			}
			if etcd != "" {
				if err := checkStore(etcd, cfg.EtcdAuth, log); err != nil {
					return nil, err
				}
			}
			if cfg.TLSCert != "" {
				if _, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey); err != nil {
					return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
				}
			}
			return func() error {
				ctx, cancel := signalContext()
				defer cancel()
				return controller.Run(ctx, cfg)
			}, nil
		})
		f := c.Flags()
		f.StringVar(&cfg.DataDir, "data-dir", controller.DefaultDataDir, "directory for the token and the embedded etcd's data")
		f.StringVar(&cfg.Listen, "listen", controller.DefaultListen, `API address (HOST:PORT; "" for none, with --listen-unix)`)
		f.StringVar(&cfg.ListenUnix, "listen-unix", "", "also serve the API on this unix socket")
		f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate: serve HTTPS on --listen")
		f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM key of --tls-cert")
		f.StringVar(&etcd, "etcd-endpoints", "", "external etcd endpoints, comma-separated (default: start an embedded etcd)")
		f.StringVar(&cfg.EtcdListen, "etcd-listen", "", "extra client socket of the embedded etcd, unix:///path (no TCP: it has no authentication)")
		f.IntVar(&cfg.TxnOps, "etcd-max-txn-ops", 0, "operations per etcd transaction (default 4096 embedded, 128 external: the server's --max-txn-ops)")
		f.StringVar(&cfg.TokensFile, "tokens-file", "", "file of named API tokens, one a line: NAME ROLE TOKEN or NAME ROLE sha256:HEX (role read-only, operator or admin; mode 0600); re-read when it changes")
		f.IntVar(&cfg.MaxListPage, "max-list-page", controller.DefaultMaxListPage, "most objects one GET /v1/KIND answers; a list without a limit (or a larger one) is cut there with a continue token (docs/api.md)")
		f.IntVar(&cfg.AuditKeep, "audit-keep", controller.DefaultAuditKeep, "audit records kept in etcd, the newest (azgate audit; docs/security.md)")
		f.BoolVar(&cfg.MetricsAuth, "metrics-auth", false, "require the API token on GET /metrics too (default: /metrics is open, like /healthz)")
		f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", controller.DefaultMaxBodyBytes, "largest request body accepted; larger ones get 413 (the default fits a 1M-EIP document about 3 times)")
		f.IntVar(&cfg.MaxConns, "max-conns", controller.DefaultMaxConns, "concurrent API connections on each listener (TCP, unix socket); more wait")
		f.IntVar(&cfg.MaxConnsPerSource, "max-conns-per-source", 0, "concurrent TCP API connections from one source address, more are closed (0: max(8, --max-conns/8))")
		f.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", controller.DefaultReadHeaderTimeout, "time a client has to send a request's headers")
		f.DurationVar(&cfg.ReadTimeout, "read-timeout", controller.DefaultReadTimeout, "time a client has to send a whole request, body included")
		f.DurationVar(&cfg.WriteTimeout, "write-timeout", controller.DefaultWriteTimeout, "time to send an answer, from when it starts")
		f.DurationVar(&cfg.IdleTimeout, "idle-timeout", controller.DefaultIdleTimeout, "how long a kept-alive connection may wait for its next request")
		f.DurationVar(&cfg.MoveGrace, "move-grace", controller.DefaultMoveGrace, "how long an object that leaves an edge set's scope (a release from a pull-out or a quarantine, a prefix moved) stays copied there, so that the set's edges keep routing it while its route is withdrawn upstream (0: off; docs/scale.md, Scopes)")
		f.DurationVar(&cfg.DriftGrace, "drift-grace", controller.DefaultDriftGrace, "how long the connections open when a bind moves an EIP to another host keep reaching the old guest (the old host's agent keeps translating, the edges send it their segments; 0: off, a move breaks them; docs/eip.md, Drift)")
		f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
		dd := &cfg.DDoS.Detector
		f.BoolVar(&ddosOn, "ddos", true, "DDoS detection: quarantine EIPs whose summed rates (reported by the edges) exceed their trigger level, release them after the cool-down (docs/ddos.md); one controller of a region acts")
		f.Float64Var(&dd.Threshold.PPS, "ddos-pps", ddos.DefaultPPS, "DDoS detection: packets/s to one EIP that trigger a quarantine (negative: not checked)")
		f.Float64Var(&dd.Threshold.BPS, "ddos-bps", ddos.DefaultBPS, "DDoS detection: bits/s to one EIP that trigger a quarantine (negative: not checked)")
		f.Float64Var(&dd.Threshold.SYN, "ddos-syn", ddos.DefaultSYN, "DDoS detection: TCP SYNs/s to one EIP that trigger a quarantine (negative: not checked)")
		f.Float64Var(&dd.K, "ddos-baseline-factor", ddos.DefaultK, "DDoS detection: the trigger level is max(threshold, this × the EIP's learned baseline)")
		f.Float64Var(&dd.Alpha, "ddos-baseline-weight", ddos.DefaultAlpha, "DDoS detection: weight of one interval in the baseline's moving average (0..1]")
		f.IntVar(&dd.Enter, "ddos-enter", ddos.DefaultEnter, "DDoS detection: consecutive intervals above the trigger level before a quarantine")
		f.Float64Var(&dd.Release, "ddos-release", ddos.DefaultRelease, "DDoS detection: every rate must stay below this fraction of its trigger level for the cool-down before a release")
		f.DurationVar(&dd.Cooldown, "ddos-cooldown", ddos.DefaultCooldown, "DDoS detection: how long a quarantined EIP must stay calm before it is released")
		f.StringArrayVar(&ddosEIP, "ddos-eip", nil, `DDoS detection: thresholds of one EIP instead of the global ones, "ADDR:pps=N,bps=N,syn=N" (any of them; repeatable)`)
		f.DurationVar(&cfg.DDoS.Interval, "ddos-interval", controller.DefaultDDoSInterval, "DDoS detection: time between decisions")
		f.IntVar(&cfg.DDoS.Events, "ddos-events", controller.DefaultDDoSEvents, "DDoS detection: decisions kept for GET /v1/ddos/events")
		addEtcdAuthFlags(c, &cfg.EtcdAuth)
		return c
	})
}

// parseDDoSOverrides reads --ddos-eip values: "ADDR:pps=N,bps=N,syn=N".
func parseDDoSOverrides(vs []string) (map[netip.Addr]ddos.Rates, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	out := map[netip.Addr]ddos.Rates{}
	for _, v := range vs {
		addr, rest, ok := strings.Cut(v, ":")
		a, err := netip.ParseAddr(addr)
		if !ok || err != nil || rest == "" {
			return nil, fmt.Errorf("--ddos-eip %q: want ADDR:pps=N,bps=N,syn=N", v)
		}
		var r ddos.Rates
		for _, kv := range strings.Split(rest, ",") {
			k, val, ok := strings.Cut(kv, "=")
			n, err := strconv.ParseFloat(val, 64)
			if !ok || err != nil || n == 0 || math.IsNaN(n) || math.IsInf(n, 0) {
				return nil, fmt.Errorf("--ddos-eip %q: %q: want pps=N, bps=N or syn=N with N a non-zero number (negative: not checked)", v, kv)
			}
			switch k {
			case "pps":
				r.PPS = n
			case "bps":
				r.BPS = n
			case "syn":
				r.SYN = n
			default:
				return nil, fmt.Errorf("--ddos-eip %q: unknown rate %q (want pps, bps or syn)", v, k)
			}
		}
		if _, dup := out[a]; dup {
			return nil, fmt.Errorf("--ddos-eip: %v given twice", a)
		}
		out[a] = r
	}
	return out, nil
}

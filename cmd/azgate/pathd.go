//go:build !node

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/pathcomp"
	"github.com/azgate/azgate/internal/pathd"
	"github.com/azgate/azgate/internal/pathd/hopstore"
	"github.com/azgate/azgate/internal/sdnotify"
	"github.com/azgate/azgate/internal/secretfile"
)

// pathdFlags are `azgate pathd`'s settings (docs/pathd.md, "Flags").
type pathdFlags struct {
	listen                   []string
	region, instance         string
	tokenFile                string
	peerTokenFiles           []string // REGION=FILE
	metricsTokenFile         string
	peers                    []string
	redis, redisPasswordFile string
	redisReplicas            []string
	recompute, expire        time.Duration
	reportInterval           time.Duration
	tlsCert, tlsKey          string
	logLevel                 string
}

func init() {
	register(func() *cobra.Command {
		var f pathdFlags
		c := &cobra.Command{
			Use:   "pathd",
			Short: "Run a path-computation server: probers' hop reports in, best back-to-origin paths out",
			Long: `Runs one path-computation server of a region's cluster (docs/pathd.md).

Probers POST hop measurements (POST /v1/reports, bearer --token-file);
the server smooths them per hop, keeps the figures in the cluster's
Redis (--redis; in memory without it), forwards each report once to
every other region (--peer REGION=URL, bearer the pair's token of
--peer-token-file REGION=FILE on their POST /v1/forward), recomputes the best path per (edge, origin)
every --recompute and answers GET /v1/paths?edge=E&origin=O. GET
/healthz is the announcer's heartbeat: 503 while Redis is unreachable.`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(*cobra.Command) (func() error, error) { return prepareRunPathd(f) })
		fl := c.Flags()
		fl.StringArrayVar(&f.listen, "listen", nil, "address of the API, HOST:PORT, e.g. 192.0.2.10:7090 (the server's address behind the cluster VIP); repeatable (an IPv4 and an IPv6 address, e.g. [2001:db8::10]:7090; [::]:7090 is both families on every address); required")
		fl.StringVar(&f.region, "region", "", "this server's region (its cluster); required")
		fl.StringVar(&f.instance, "instance", "", "this server's name within the region (default: the host name)")
		fl.StringVar(&f.tokenFile, "token-file", "", "file holding the probers' bearer token (reports, paths, metrics; mode 0600 or stricter); required")
		fl.StringArrayVar(&f.peerTokenFiles, "peer-token-file", nil, "REGION=FILE: the file holding the token this region and REGION share for /v1/forward, both ways (mode 0600 or stricter); one per peer region, each different; a forward is taken only for REGION's own sources; repeatable")
		fl.StringVar(&f.metricsTokenFile, "metrics-token-file", "", "file holding the token /metrics requires (default: the --token-file token)")
		fl.StringArrayVar(&f.peers, "peer", nil, "another region's cluster: REGION=URL (http(s)://VIP:PORT), repeatable")
		fl.StringVar(&f.redis, "redis", "", "the cluster's Redis primary: unix:///path/redis.sock, redis://host:port or rediss://host:port (default: in memory, nothing survives a restart)")
		fl.StringVar(&f.redisPasswordFile, "redis-password-file", "", "file whose first line is the Redis password, for the primary and the replicas (mode 0600 or stricter)")
		fl.StringArrayVar(&f.redisReplicas, "redis-replica", nil, "a replica of --redis (same forms), read at startup when the primary does not answer; repeatable")
		fl.DurationVar(&f.recompute, "recompute", time.Second, "interval of path recomputes, Redis flushes and reads of the cluster's changes")
		fl.DurationVar(&f.expire, "expire", 10*time.Minute, "forget hops not reported, edges not queried and forward sources not heard from for this long")
		fl.DurationVar(&f.reportInterval, "report-interval", 5*time.Second, "how often probers report a hop: a hop silent for 3 intervals counts as failed")
		fl.StringVar(&f.tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM; with --tls-key)")
		fl.StringVar(&f.tlsKey, "tls-key", "", "the --tls-cert key (PEM)")
		fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
		return c
	})
}

// config turns the flags into pathd's Config (every check in one place).
func (f pathdFlags) config() (pathd.Config, error) {
	var cfg pathd.Config
	if len(f.listen) == 0 || f.region == "" || f.tokenFile == "" {
		return cfg, errors.New("--listen, --region and --token-file are required")
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return cfg, errors.New("--tls-cert and --tls-key go together")
	}
	if f.instance == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("--instance: none given and no host name: %w", err)
		}
		f.instance, _, _ = strings.Cut(h, ".")
	}
	if err := pathcomp.ValidateName(f.instance); err != nil {
		return cfg, fmt.Errorf("--instance: %w", err)
	}
	if f.recompute < 10*time.Millisecond || f.expire < time.Minute || f.reportInterval < 100*time.Millisecond {
		return cfg, fmt.Errorf("--recompute at least 10ms, --expire at least 1m, --report-interval at least 100ms")
	}
	tok, err := secretfile.Read(f.tokenFile, "secret file")
	if err != nil {
		return cfg, fmt.Errorf("--token-file: %w", err)
	}
	peerToks := map[string]string{}
	for _, p := range f.peerTokenFiles {
		region, file, ok := strings.Cut(p, "=")
		if !ok || region == "" || file == "" {
			return cfg, fmt.Errorf("--peer-token-file %q: want REGION=FILE (one token per pair of regions; one token shared by every region let any region forge another's reports)", p)
		}
		if _, dup := peerToks[region]; dup {
			return cfg, fmt.Errorf("--peer-token-file %s: region given twice", region)
		}
		tok, err := secretfile.Read(file, "secret file")
		if err != nil {
			return cfg, fmt.Errorf("--peer-token-file %s: %w", region, err)
		}
		peerToks[region] = tok
	}
	var metricsTok string
	if f.metricsTokenFile != "" {
		if metricsTok, err = secretfile.Read(f.metricsTokenFile, "secret file"); err != nil {
			return cfg, fmt.Errorf("--metrics-token-file: %w", err)
		}
	}
	cfg = pathd.Config{Region: f.region, Instance: f.instance, Node: f.instance, Token: tok, PeerTokens: peerToks, MetricsToken: metricsTok,
		Recompute: f.recompute, Expire: f.expire, Store: pathcomp.Config{ReportInterval: f.reportInterval}}
	for _, p := range f.peers {
		region, url, ok := strings.Cut(p, "=")
		if !ok {
			return cfg, fmt.Errorf("--peer %q: want REGION=URL", p)
		}
		cfg.Peers = append(cfg.Peers, pathd.Peer{Region: region, URL: url})
	}
	if f.redis == "" {
		if f.redisPasswordFile != "" || len(f.redisReplicas) > 0 {
			return cfg, errors.New("--redis-password-file and --redis-replica need --redis")
		}
		return cfg, nil
	}
	var pw string
	if f.redisPasswordFile != "" {
		if pw, err = secretfile.Read(f.redisPasswordFile, "secret file"); err != nil {
			return cfg, fmt.Errorf("--redis-password-file: %w", err)
		}
	}
	redisCfg := func(flag, u string) (hopstore.Config, error) {
		scheme, _, ok := strings.Cut(u, "://")
		if !ok || (scheme != "unix" && scheme != "redis" && scheme != "rediss") {
			return hopstore.Config{}, fmt.Errorf("%s %q: want unix:///path/redis.sock, redis://host:port or rediss://host:port", flag, u)
		}
		c, err := hopstore.ConfigFromURL(u)
		if err != nil {
			return c, fmt.Errorf("%s: %w", flag, err)
		}
		if c.Password != "" {
			return c, fmt.Errorf("%s: the URL holds a password: give it in --redis-password-file (a command line is visible in ps)", flag)
		}
		c.Password = pw
		return c, nil
	}
	primary, err := redisCfg("--redis", f.redis)
	if err != nil {
		return cfg, err
	}
	var replicas []hopstore.Config
	for _, u := range f.redisReplicas {
		r, err := redisCfg("--redis-replica", u)
		if err != nil {
			return cfg, err
		}
		replicas = append(replicas, r)
	}
	if cfg.Hops, err = hopstore.NewRedis(f.region, primary, replicas); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// prepareRunPathd checks the settings (reading the token files) and
// returns what runs the server.
func prepareRunPathd(f pathdFlags) (func() error, error) {
	log, cfg, err := preparePathd(f)
	if err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := signalContext()
		defer cancel()
		return runPrepared(ctx, f, log, cfg, nil)
	}, nil
}

// preparePathd is every check before pathd opens its listener: the
// flags, the token files, the Redis URLs (a client dials on first use).
func preparePathd(f pathdFlags) (*slog.Logger, pathd.Config, error) {
	log, err := roleLogger(f.logLevel)
	if err != nil {
		return nil, pathd.Config{}, err
	}
	if err := checkListens("--listen", f.listen); len(f.listen) > 0 && err != nil {
		return nil, pathd.Config{}, err
	}
	cfg, err := f.config()
	if err != nil {
		return nil, cfg, err
	}
	if f.tlsCert != "" {
		if _, err = tls.LoadX509KeyPair(f.tlsCert, f.tlsKey); err != nil {
			err = fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
	}
	if err == nil {
		err = cfg.Check()
	}
	if err != nil {
		if cfg.Hops != nil {
			cfg.Hops.Close()
		}
		return nil, cfg, err
	}
	return log, cfg, nil
}

// runPathdCtx runs the server until ctx ends; listening, if not nil, is
// told the address once the listener is open (tests).
func runPathdCtx(ctx context.Context, f pathdFlags, listening func(string)) error {
	log, cfg, err := preparePathd(f)
	if err != nil {
		return err
	}
	return runPrepared(ctx, f, log, cfg, listening)
}

func runPrepared(ctx context.Context, f pathdFlags, log *slog.Logger, cfg pathd.Config, listening func(string)) error {
	if cfg.Hops == nil {
		log.Warn("no --redis: hop figures are kept in memory only (lost at restart, not shared with the cluster's other servers)")
	} else {
		defer cfg.Hops.Close()
	}
	cfg.Log = log.With("region", cfg.Region, "instance", cfg.Instance)
	s, err := pathd.New(cfg)
	if err != nil {
		return err
	}
	var lns []net.Listener
	for _, l := range f.listen {
		ln, err := net.Listen("tcp", l)
		if err != nil {
			for _, o := range lns {
				o.Close()
			}
			return fmt.Errorf("--listen: %w", err)
		}
		lns = append(lns, ln)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, ln := range lns {
		if listening != nil {
			listening(ln.Addr().String())
		}
		cfg.Log.Info("pathd serving", "listen", ln.Addr().String(), "source", s.Source(), "peers", len(cfg.Peers), "tls", f.tlsCert != "")
	}
	sdnotify.Tell(cfg.Log, sdnotify.Ready) // configured, the API listening
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	// One HTTP server per listener, the same timeouts and limits on
	// each; the first to fail stops them all.
	errs := make(chan error, len(lns))
	for _, ln := range lns {
		go func() {
			err := s.Serve(ctx, ln, f.tlsCert, f.tlsKey)
			cancel()
			errs <- err
		}()
	}
	for range lns {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	cancel()
	<-done
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

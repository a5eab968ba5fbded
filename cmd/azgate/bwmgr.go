//go:build !node

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/store"
)

// bwmgrFlags are `azgate bwmgr`'s settings (BW-CONTRACT.md, docs/cli.md).
type bwmgrFlags struct {
	scope, zone                 string
	storeURL, storePW           string
	regionURL, regionPW         string
	interval, grace             time.Duration
	leaseTTL                    time.Duration
	name                        string
	etcd                        string
	etcdAuth                    store.ClientAuth
	metricsListen, metricsToken string
	logLevel                    string
}

func init() {
	register(func() *cobra.Command {
		var f bwmgrFlags
		c := &cobra.Command{
			Use:   "bwmgr",
			Short: "Run a shared-bandwidth manager: --scope az (one zone) or --scope region",
			Long: `Runs a manager of shared bandwidth (docs/bandwidth.md, "Managers").

--scope az: the zone manager of --zone. Every --interval it reads the
zone's reports from --store, sums them per EIP and writes them to the
region tier (--region-store); it reads the zone's share of each EIP back
from the region tier and splits it over the zone's hosts by their demand,
writing each host its limits in --store, decreases first.

--scope region: the region manager. It follows the bandwidth packages in
etcd, reads the zones' sums from --region-store, estimates demand,
allocates each package (weighted max-min fairness with min and max) and
writes each zone its share, never more than the capacity in force.

Run several replicas of each scope: one acts (an ownership lease in etcd,
like the edges' ARP owner), the others stand by and take over when its
lease ends; SIGTERM hands over at once.`,
			Args: cobra.NoArgs,
		}
		roleCommand(c, func(*cobra.Command) (func() error, error) { return prepareBwmgr(f) })
		fl := c.Flags()
		fl.StringVar(&f.scope, "scope", "", "az (a zone manager, with --zone and --store) or region")
		fl.StringVar(&f.zone, "zone", "", "the zone (AZ name, or an edge zone such as \"edge\") this az-scope manager serves")
		fl.StringVar(&f.storeURL, "store", "", "az scope: the zone's measurement store: unix:///path/redis.sock, redis://host:port, rediss://host:port, or mem: (this process only)")
		fl.StringVar(&f.storePW, "store-password-file", "", "file whose first line is --store's password (mode 0600 or stricter)")
		fl.StringVar(&f.regionURL, "region-store", "", "the region tier's store (same forms as --store); required")
		fl.StringVar(&f.regionPW, "region-store-password-file", "", "file whose first line is --region-store's password (mode 0600 or stricter)")
		fl.DurationVar(&f.interval, "interval", bandwidth.DefaultInterval, "time between rounds (the hosts report at the same interval)")
		fl.DurationVar(&f.grace, "grace", bandwidth.DefaultGrace, "TTL of the limits written: the layer below falls back when no manager wrote for this long")
		fl.DurationVar(&f.leaseTTL, "lease-ttl", store.DefaultOwnerTTL, "lease of the scope's ownership in etcd (whole seconds): a dead manager is replaced about this long after it stopped renewing")
		fl.StringVar(&f.name, "name", "", "holder name in the ownership key (default HOSTNAME/PID)")
		fl.StringVar(&f.etcd, "etcd-endpoints", defaultEtcd, "etcd endpoints, comma-separated (the controller's embedded etcd by default)")
		fl.StringVar(&f.metricsListen, "metrics-listen", "", "Prometheus /metrics address, e.g. 127.0.0.1:9466 (default: off)")
		fl.StringVar(&f.metricsToken, "metrics-token-file", "", "file holding a token /metrics then requires as \"Authorization: Bearer TOKEN\"")
		fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
		addEtcdAuthFlags(c, &f.etcdAuth)
		return c
	})
}

func (f bwmgrFlags) check() error {
	switch f.scope {
	case "az":
		if f.zone == "" {
			return errors.New("--scope az needs --zone")
		}
		if f.zone == bandwidth.RegionTier {
			return fmt.Errorf("--zone %q is the region tier's name: pick another", f.zone)
		}
		if f.storeURL == "" {
			return errors.New("--scope az needs --store (the zone's measurement store)")
		}
	case "region":
		if f.zone != "" || f.storeURL != "" || f.storePW != "" {
			return errors.New("--zone, --store and --store-password-file are for --scope az")
		}
	default:
		return fmt.Errorf("--scope %q: want az or region", f.scope)
	}
	if f.regionURL == "" {
		return errors.New("--region-store is required (the region tier every manager of the region shares)")
	}
	if f.leaseTTL < time.Second {
		return fmt.Errorf("--lease-ttl %v: at least 1s", f.leaseTTL)
	}
	return nil
}

// prepareBwmgr checks the settings and returns what runs the manager.
func prepareBwmgr(f bwmgrFlags) (func() error, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	log, err := roleLogger(f.logLevel)
	if err != nil {
		return nil, err
	}
	if f.name == "" {
		h, _ := os.Hostname()
		f.name = fmt.Sprintf("%s/%d", h, os.Getpid())
	}
	if err := checkStore(f.etcd, f.etcdAuth, log); err != nil {
		return nil, err
	}
	if err := bandwidth.CheckManager(f.zone, bandwidth.Config{Interval: f.interval, Grace: f.grace, Log: log}); err != nil {
		return nil, err
	}
	token, err := readMetricsToken(f.metricsToken)
	if err != nil {
		return nil, err
	}
	// The stores' forms and password files (a Redis client dials on
	// first use: this opens no socket).
	for _, s := range []struct{ flag, url, pw string }{{"--region-store", f.regionURL, f.regionPW}, {"--store", f.storeURL, f.storePW}} {
		if s.flag == "--store" && f.scope != "az" {
			continue
		}
		st, err := bandwidth.OpenStore(s.url, s.pw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.flag, err)
		}
		st.Close()
	}
	return func() error { return runBwmgr(f, log, token) }, nil
}

func runBwmgr(f bwmgrFlags, log *slog.Logger, token string) error {
	region, err := bandwidth.OpenStore(f.regionURL, f.regionPW)
	if err != nil {
		return fmt.Errorf("--region-store: %w", err)
	}
	defer region.Close()
	if f.regionURL == "mem:" {
		log.Warn("--region-store mem: is an in-process store: no other process sees it")
	}
	var zoneStore bwstore.Store
	if f.scope == "az" {
		if zoneStore, err = bandwidth.OpenStore(f.storeURL, f.storePW); err != nil {
			return fmt.Errorf("--store: %w", err)
		}
		defer zoneStore.Close()
		if f.storeURL == "mem:" {
			log.Warn("--store mem: is an in-process store: no host in another process sees it")
		}
	}
	st, err := connectStore(f.etcd, f.etcdAuth, log, "campaigning anyway")
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := signalContext()
	defer cancel()
	met := bandwidth.NewMetrics(f.scope, f.zone)
	log = log.With("scope", f.scope, "holder", f.name)
	if f.zone != "" {
		log = log.With("zone", f.zone)
	}
	cfg := bandwidth.Config{Interval: f.interval, Grace: f.grace, Log: log, Metrics: met}
	var r bandwidth.Rounder
	if f.scope == "az" {
		z, err := bandwidth.NewZoneManager(f.zone, zoneStore, region, cfg)
		if err != nil {
			return err
		}
		r = z
	} else {
		rm, err := bandwidth.NewRegionManager(region, cfg)
		if err != nil {
			return err
		}
		r = rm
		go followPackages(ctx, st, rm, log)
	}
	if f.metricsListen != "" {
		go nodemetrics.ServeRegistry(ctx, f.metricsListen, nodemetrics.WithNode(met.Registry, nodemetrics.HostNode()), token, log)
	}
	err = bandwidth.Run(ctx, st, r, bandwidth.RunOptions{Key: bandwidth.ScopeKey(f.scope, f.zone), Holder: f.name,
		Claim: store.ClaimOptions{TTL: f.leaseTTL}, Interval: f.interval, Log: log, Metrics: met})
	return roleResult(ctx, log, "bwmgr", err, "bandwidth manager stopping; scope released")
}

// followPackages keeps the region manager's packages equal to the store's
// (store.Follower: the roles' view of the desired state).
func followPackages(ctx context.Context, st store.Follower, rm *bandwidth.RegionManager, log *slog.Logger) {
	for ctx.Err() == nil {
		// The whole store, not a scope (store/scope.go): the region
		// manager places every package's EIPs, bound on any host.
		err := st.Follow(ctx, func(s *model.State, _ int64, _ []store.Event, _ bool) { rm.SetState(s) })
		if ctx.Err() != nil {
			return
		}
		log.Warn("following the desired state failed; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

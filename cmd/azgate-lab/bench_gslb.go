package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/bench"
	"github.com/azgate/azgate/internal/gslbbench"
)

// benchGSLBCommands are `azgate-lab bench gslb` and its hidden serving
// child `azgate-lab bench gslb-serve`. The first is azgate's GSLB DNS
// server next to gdnsd on the same zone, MaxMind database and probe
// settings (docs/bench-gslb.md).
func benchGSLBCommands() []*cobra.Command {
	var o gslbbench.Options
	c := &cobra.Command{
		Use:   "gslb",
		Short: "GSLB DNS: qps, latency and CPU/query with dnsperf + ECS, and failover time, next to gdnsd in the same run",
		Long: `Builds a test MaxMind database (3 regions in documentation ranges) and a
zone example. with pathd.example as a nearest-region GSLB record over
three VIPs (TCP listeners on 127.77.0.11-13 that the bench owns), and
serves it with azgate's GSLB server (a child process: azgate-lab bench
gslb-serve) on 127.77.0.2 and with gdnsd (geoip plugin on the same
database, tcp_connect probes and an extfile heartbeat) on 127.77.0.3,
both pinned to the same CPU with the same thread count.

It checks first that both answer each region's client subnets with that
region's VIP and that azgate's ECS scope is the database record's prefix.
Then: dnsperf (one process per region, each with its ECS option) at
saturation and at a fixed rate, per server: q/s, mean and p99 latency,
lost queries, server CPU per query. Then failover: the bench closes a
region's VIP listener, polls both servers every 10 ms with a client of
that region, and reports the time until the answer moves to the next
region, and back after reopening. Needs gdnsd, dnsperf and taskset.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			o.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
			if !cmd.Flags().Changed("user") && os.Geteuid() == 0 {
				o.User = "nobody"
			}
			if o.User == "-" {
				o.User = ""
			}
			rep, err := gslbbench.Run(ctx, o)
			if rep != nil {
				if rerr := bench.Report(cmd.OutOrStdout(), rep.Results(), globals.json); rerr != nil && err == nil {
					err = rerr
				}
			}
			if err != nil {
				return fmt.Errorf("bench gslb: %w", err)
			}
			return nil
		},
	}
	f := c.Flags()
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "dnsperf run per server and round")
	f.IntVar(&o.Rounds, "rounds", 3, "saturation rounds (servers alternate order; the median round is reported)")
	f.IntVar(&o.Rate, "rate", 5000, "fixed-rate latency run, total queries/s (-1: skip)")
	f.IntVar(&o.Inflight, "inflight", 50, "outstanding queries per dnsperf process (dnsperf -q); 3x this beyond ~200 overflows the servers' UDP receive buffers")
	f.IntVar(&o.Threads, "threads", 1, "server threads: GOMAXPROCS for azgate, udp_threads/tcp_threads for gdnsd")
	f.StringVar(&o.ServerCPUs, "server-cpus", "", `taskset CPU list for both servers (default on 2+ CPUs: "1"; "-": no pinning)`)
	f.StringVar(&o.ClientCPUs, "client-cpus", "", `taskset CPU list for dnsperf (default on 2+ CPUs: "0"; "-": no pinning)`)
	f.DurationVar(&o.Probe.Interval, "probe-interval", 2*time.Second, "probe interval, both servers (whole seconds, at least 2s: gdnsd's range)")
	f.DurationVar(&o.Probe.Timeout, "probe-timeout", time.Second, "probe timeout, both servers (whole seconds, below the interval)")
	f.IntVar(&o.Probe.Rise, "probe-rise", 2, "successes in a row to come back up (gdnsd up_thresh)")
	f.IntVar(&o.Probe.Fall, "probe-fall", 2, "failures in a row to go down (gdnsd down_thresh, with ok_thresh 1)")
	f.IntVar(&o.FailoverReps, "failover-reps", 6, "failover repetitions, cycling over the regions (-1: skip)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a Go CPU profile of azgate's server process (the whole run) to this file")
	f.StringVar(&o.User, "user", "", `user both servers run as, through setpriv (default as root: "nobody"; "-": the bench's own user)`)
	f.StringVar(&o.Gdnsd, "gdnsd", "", "gdnsd binary (default: from PATH)")
	f.StringVar(&o.Dnsperf, "dnsperf", "", "dnsperf binary (default: from PATH)")

	var cfg string
	child := &cobra.Command{
		Use:    gslbbench.ServeChildArg + " --config FILE",
		Short:  "azgate's GSLB DNS server on the bench's zone until SIGTERM (bench gslb's child)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return gslbbench.Serve(ctx, cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	child.Flags().StringVar(&cfg, "config", "", "the JSON config the bench wrote")
	_ = child.MarkFlagRequired("config")
	return []*cobra.Command{c, child}
}

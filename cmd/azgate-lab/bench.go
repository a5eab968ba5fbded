package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/bench"
	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/lab"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{
			Use:   "bench",
			Short: "Benchmarks: each result next to a baseline measured in the same run",
			Long: `Benchmarks: each result next to a baseline measured in the same run.
The suites that build a lab run the azgate binary for its roles
(--azgate PATH; default: azgate in this binary's directory).`,
		}
		var dp bench.DataplaneOptions
		d := &cobra.Command{
			Use:   "dataplane",
			Short: "ns/packet of every edge and agent path (BPF_PROG_TEST_RUN repeat mode) next to the XDP_TX floor",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				rs, err := bench.Dataplane(dp)
				if err != nil {
					return fmt.Errorf("bench dataplane: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		d.Flags().IntVar(&dp.Repeat, "repeat", 2_000_000, "runs per measurement")
		d.Flags().IntVar(&dp.Rounds, "rounds", 5, "measurements per path (the fastest is reported)")
		d.Flags().BoolVar(&dp.NoMonitor, "no-monitor", false, "skip the monitor's cost (edge_drop and edge_encap with the monitor off, on without and with a listener)")
		d.Flags().StringVar(&dp.BaselineObjects, "baseline-objects", "", "directory with an earlier version's edge_bpfel.o and agent_bpfel.o, timed in the same run (before/cut columns; scripts/baseline-objects.sh REV DIR extracts them)")
		d.Flags().StringVar(&dp.Only, "only", "", "time only the paths whose name contains this (to profile one path with perf)")
		d.Flags().DurationVar(&dp.Soak, "soak", 0, "with --only: then run those paths alone this long, untimed (for perf)")
		d.Flags().StringVar(&dp.JITLines, "jit-lines", "", "with --soak: write the program's JIT address to source line table to this file")
		c.AddCommand(d)

		var fo bench.DataplaneOptions
		fw := &cobra.Command{
			Use:   "firewall",
			Short: "ns/packet of the Internet -> EIP path with 100k firewall rules loaded against none, in one run",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				rs, err := bench.Firewall(fo)
				if err != nil {
					return fmt.Errorf("bench firewall: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		fw.Flags().IntVar(&fo.Repeat, "repeat", 2_000_000, "runs per measurement")
		fw.Flags().IntVar(&fo.Rounds, "rounds", 5, "measurements per path (the fastest is reported)")
		fw.Flags().StringVar(&fo.Only, "only", "", "time only the paths whose name contains this")
		c.AddCommand(fw)

		var flo bench.LabOptions
		fwl := &cobra.Command{
			Use:   "firewall-lab",
			Short: "Packets/s one lab edge drops for a flood of denied traffic (100k rules) next to a bare XDP drop program",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				flo.Binary = globals.azgate
				flo.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				rs, err := bench.FirewallLab(ctx, flo)
				if err != nil {
					return fmt.Errorf("bench firewall-lab: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		fwl.Flags().DurationVar(&flo.Duration, "duration", 5*time.Second, "per measurement")
		fwl.Flags().IntVar(&flo.Rounds, "rounds", 3, "measurements of each (the median is reported)")
		fwl.Flags().Uint32Var(&flo.Flows, "flows", 1024, "flows (UDP source ports) the generator cycles through")
		c.AddCommand(fwl)

		var lo bench.LabOptions
		l := &cobra.Command{
			Use:   "lab",
			Short: "Packets/s one edge forwards Internet -> underlay to an IPv4 and an IPv6 EIP (live-frames generator) next to kernel forwarding of each family",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				lo.Binary = globals.azgate
				lo.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				rs, err := bench.Lab(ctx, lo)
				if err != nil {
					return fmt.Errorf("bench lab: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		l.Flags().DurationVar(&lo.Duration, "duration", 5*time.Second, "per measurement")
		l.Flags().IntVar(&lo.Rounds, "rounds", 3, "measurements of each (the median is reported)")
		l.Flags().Uint32Var(&lo.Flows, "flows", 1024, "flows (UDP source ports) the generator cycles through")
		c.AddCommand(l)

		var lbo bench.LBOptions
		var lbLab bool
		lbc := &cobra.Command{
			Use:   "lb",
			Short: "Maglev properties, load-balancer ns/packet next to the XDP_TX floor, a large connection table",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if lbLab { // before the minutes of the per-packet suite
					if err := (lab.Config{Binary: globals.azgate}).CheckBinaries(); err != nil {
						return fmt.Errorf("bench lb (lab): %w", err)
					}
				}
				lbo.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				rs, err := bench.LB(lbo)
				if err != nil {
					return fmt.Errorf("bench lb: %w", err)
				}
				if lbLab {
					ctx, cancel := signalContext()
					defer cancel()
					lr, err := bench.LBLab(ctx, bench.LabOptions{Binary: globals.azgate, Out: lbo.Out})
					if err != nil {
						return fmt.Errorf("bench lb (lab): %w", err)
					}
					rs = append(rs, lr...)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		lbc.Flags().IntVar(&lbo.Repeat, "repeat", 2_000_000, "runs per measurement")
		lbc.Flags().IntVar(&lbo.Rounds, "rounds", 9, "measurements per path (the fastest is reported)")
		lbc.Flags().StringVar(&lbo.Only, "only", "", "time only the packet paths whose name contains this (to profile one path with perf)")
		lbc.Flags().DurationVar(&lbo.Soak, "soak", 0, "with --only: then run those paths alone this long, untimed (for perf)")
		lbc.Flags().StringVar(&lbo.JITLines, "jit-lines", "", "with --soak: write the program's JIT address to source line table to this file")
		lbc.Flags().StringVar(&lbo.BaselineObjects, "baseline-objects", "", "directory with an earlier version's edge_bpfel.o, timed in the same run (before/cut columns)")
		lbc.Flags().Uint32Var(&lbo.BigTable, "conn-table", 10_000_000, "entries of the large connection table to build and serve (0: skip)")
		lbc.Flags().BoolVar(&lbLab, "lab", true, "also measure a nat VIP through one edge in a lab, next to an nftables DNAT load balancer")
		c.AddCommand(lbc)

		var before, after []string
		cmp := &cobra.Command{
			Use:   "compare --before FILE... --after FILE...",
			Short: "Per-packet results of two builds' runs (--json output, alternated), the fastest of each, with the cuts",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				rs, err := bench.Compare(before, after)
				if err != nil {
					return fmt.Errorf("bench compare: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		cmp.Flags().StringArrayVar(&before, "before", nil, "JSON output of a run of the earlier build (repeatable)")
		cmp.Flags().StringArrayVar(&after, "after", nil, "JSON output of a run of this build (repeatable)")
		c.AddCommand(cmp)

		var so bench.SyncOptions
		syn := &cobra.Command{
			Use:   "sync",
			Short: "Connection sync between two edges' maps over loopback TCP: entries/s per core, lag at 100k new connections/s, bytes per entry",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				so.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				rs, err := bench.FleetSync(so)
				if err != nil {
					return fmt.Errorf("bench sync: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		syn.Flags().DurationVar(&so.Duration, "duration", 5*time.Second, "per measurement")
		syn.Flags().IntVar(&so.Rate, "rate", 100_000, "new connections/s offered for the lag")
		c.AddCommand(syn)

		var co bench.ControlOptions
		ctl := &cobra.Command{
			Use:   "control",
			Short: "Bind-to-edge-map latency in the lab; apply and edge load of many EIPs",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := signalContext()
				defer cancel()
				co.Binary = globals.azgate
				co.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
				rs, err := bench.Control(ctx, co)
				if err != nil {
					return fmt.Errorf("bench control: %w", err)
				}
				return bench.Report(cmd.OutOrStdout(), rs, globals.json)
			},
		}
		ctl.Flags().IntVar(&co.Binds, "binds", 200, "bind calls to time")
		ctl.Flags().IntVar(&co.EIPs, "eips", 1_000_000, "bound EIPs for the load test (0: skip)")
		c.AddCommand(ctl)

		c.AddCommand(fleetCommand())
		c.AddCommand(benchBandwidthCommand())
		c.AddCommand(benchGSLBCommands()...)
		return c
	})
}

// fleetCommand is `azgate-lab bench fleet`: the fleet benchmarks of issue 8,
// one section each, all by default or one with --only.
func fleetCommand() *cobra.Command {
	var only, cpuProfile string
	fo := bench.FleetOptions{}
	ffo := bench.FleetFailoverOptions{}
	var so bench.SyncOptions
	f := &cobra.Command{
		Use:   "fleet",
		Short: "Edge fleets: control-plane drift and table agreement on a 3-member etcd cluster; failover gaps by cause in the lab",
		Long: `Sections (all by default, one with --only):

  control  SETS x EDGES edge reconcilers on the data-plane fakes in this
           process, each with its own etcd client and watch, on a
           3-member etcd cluster of etcd-server processes on unix sockets,
           each following its set's share of the store, with EIPS bound
           EIPs spread over the sets and a service per set. Times the drift
           from store.Commit of an EIP rebind to every edge of its set
           having applied it, the time until every edge's table checksum
           agrees with its set's after a change of every set's service, the
           etcd members' CPU time and RSS, and then one edge of set0 alone in
           a child process holding --rss-eips EIPs of its set while the
           other sets hold the rest of the region (its RSS). --full-sets F
           makes the first F sets 32 edges; --agents N adds N agent
           reconcilers following their hosts' shares (loads, rebind
           drift); --edge-procs N runs the first N edges (set0's first)
           each as a child process, timed alike, and reports their RSS
           at rest and at peak; --agent-procs N runs N agents as child processes, one
           each, for the hosts with the most EIPs (loads, RSS at rest and
           peak); --restart then starts every edge, agent and agent
           process again at once with --restart-jitter and times until
           all serve the current revision. Prints each figure the issue
           sets a target for next to it. The child processes run
           azgate-fleetnode (beside azgate-lab, make build puts it there;
           --fleetnode PATH): the node roles' code on the fakes, without
           the lab's, so that their memory is a node's; each prints its
           VmRSS, VmHWM, RssAnon and RssFile.

  sync     connection sync between two edges' real maps over loopback
           TCP: entries/s per core, lag at --sync-rate new connections/s,
           bytes per entry (the same as azgate-lab bench sync).

  failover a lab of its own (prefix azb-, BIRD in the router, hold 3 s,
           keepalive 1 s) with long-lived connections through an EIP, an
           encap and a nat service: the traffic gap and the datagrams lost
           while the router drops a member of the prefix set, by cause
           (drain, SIGTERM, SIGKILL, link down, hang), and on its return.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			say := func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
			var rs []bench.Result
			switch only {
			case "", "control", "sync", "failover":
			default:
				return fmt.Errorf("bench fleet: --only %q: want control, sync or failover", only)
			}
			if only == "" || only == "control" {
				if err := fo.Check(); err != nil {
					return fmt.Errorf("bench fleet: --sets %d --edges-per-set %d --full-sets %d --edge-procs %d --eips %d --rss-eips %d: %w", fo.Sets, fo.EdgesPerSet, fo.FullSets, fo.EdgeProcs, fo.EIPs, fo.RSSEIPs, err)
				}
			}
			if only == "" || only == "control" {
				fo.Out = say
				if cpuProfile != "" {
					stop, err := fleetnode.StartCPUProfile(cpuProfile)
					if err != nil {
						return err
					}
					defer stop()
				}
				r, err := bench.FleetControl(ctx, fo)
				if err != nil {
					return fmt.Errorf("bench fleet (control): %w", err)
				}
				rs = append(rs, r...)
			}
			if only == "" || only == "sync" {
				so.Out = say
				r, err := bench.FleetSync(so)
				if err != nil {
					return fmt.Errorf("bench fleet (sync): %w", err)
				}
				rs = append(rs, r...)
			}
			if only == "" || only == "failover" {
				ffo.Binary = globals.azgate
				ffo.Out = say
				r, err := bench.FleetFailover(ctx, ffo)
				rs = append(rs, r...)
				if err != nil {
					bench.Report(cmd.OutOrStdout(), rs, globals.json)
					return fmt.Errorf("bench fleet (failover): %w", err)
				}
			}
			return bench.Report(cmd.OutOrStdout(), rs, globals.json)
		},
	}
	f.Flags().StringVar(&only, "only", "", "run one section: control, sync or failover")
	f.Flags().DurationVar(&so.Duration, "sync-duration", 5*time.Second, "sync: per measurement")
	f.Flags().IntVar(&so.Rate, "sync-rate", 100_000, "sync: new connections/s offered for the lag")
	f.Flags().StringSliceVar(&ffo.Causes, "failover-causes", nil, "failover: the causes to measure (default: drain, sigterm, sigkill, link-down, hang)")
	f.Flags().StringVar(&cpuProfile, "cpuprofile", "", "control: write a Go CPU profile of the fleet process (edges and clients) to this file")
	f.Flags().IntVar(&fo.Sets, "sets", bench.DefaultFleetSets, "control: edge sets")
	f.Flags().IntVar(&fo.EdgesPerSet, "edges-per-set", bench.DefaultFleetEdgesPerSet, "control: edges in each set (at most 32, model.MaxSetEdges)")
	f.Flags().IntVar(&fo.Proxies, "proxies", 0, "control: etcd gRPC proxies (0-16) in front of the members; the edges point at them round-robin (0: at the members)")
	f.Flags().IntVar(&fo.EIPs, "eips", bench.DefaultFleetEIPs, "control: bound EIPs in the region, spread over the sets (each edge indexes its set's share)")
	f.Flags().IntVar(&fo.FullSets, "full-sets", 0, "control: the first this many sets have 32 edges (model.MaxSetEdges), the others --edges-per-set")
	f.Flags().IntVar(&fo.Agents, "agents", 0, "control: then this many agents (hosts h0..; on the fakes, in this process) follow their hosts' shares: their loads and rebind drift (0: none)")
	f.Flags().IntVar(&fo.EdgeProcs, "edge-procs", 0, "control: the first this many edges (set0's, then set1's, ...) run each as a child process (one edge on the fakes following its set's share), the others in this process; each reports its load and RSS at rest and at peak (0: none)")
	f.Flags().IntVar(&fo.AgentProcs, "agent-procs", bench.DefaultFleetAgentProcs, "control: then this many agent child processes (one agent each on the fakes, for the hosts with the most EIPs) report their loads and RSS at rest and at peak (0: none)")
	f.Flags().BoolVar(&fo.Restart, "restart", true, "control: then a region-wide restart: every edge, agent and agent process started again at once, timed until all serve the current revision")
	f.Flags().DurationVar(&fo.RestartJitter, "restart-jitter", bench.DefaultFleetRestartJitter, "control: the restart's load jitter (each node waits a random share of it before its full load, as --etcd-load-jitter)")
	f.Flags().IntVar(&fo.Changes, "changes", 200, "control: EIP rebinds timed")
	f.Flags().IntVar(&fo.ServiceChanges, "service-changes", 20, "control: service changes timed")
	f.Flags().StringVar(&fo.Binary, "fleetnode", "", "control: the edge and agent processes' executable, azgate-fleetnode (the node roles' code on the data-plane fakes; default: beside azgate-lab, where make build puts it)")
	f.Flags().StringVar(&fo.EdgeProfile, "rss-profile", "", "control: the one-edge child writes Go CPU (its load) and allocation profiles to this path + .cpu and .heap")
	f.Flags().IntVar(&fo.RSSRuns, "rss-runs", 1, "control: run the one-edge child this many times on the same region; its figures are the medians")
	f.Flags().IntVar(&fo.RSSEIPs, "rss-eips", bench.DefaultFleetRSSEIPs, "control: then one edge of set0 alone in a child process follows its set's share holding this many EIPs (the region grows until set0 holds them) and reports its RSS (0: skip)")

	return f
}

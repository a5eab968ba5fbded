package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/bench"
	"github.com/azgate/azgate/internal/bwalloc"
	"github.com/azgate/azgate/internal/bwsim"
)

// benchBandwidthCommand is `azgate-lab bench bandwidth`: the shared-bandwidth
// simulator (internal/bwsim) driving the real managers (internal/bandwidth),
// next to an oracle that knows the true demand (docs/bandwidth.md,
// "Simulator").
func benchBandwidthCommand() *cobra.Command {
	o := bench.BandwidthOptions{Config: bwsim.DefaultConfig}
	var margin float64
	var window time.Duration
	c := &cobra.Command{
		Use:   "bandwidth",
		Short: "Shared-bandwidth simulator: overshoot, convergence, fairness, utilisation against an oracle; round time at 100k EIPs",
		Long: `Simulates hosts in three AZs enforcing per-EIP token buckets (a fluid
model on a simulated clock), reporting every second into an in-process
store, on which the real managers (internal/bandwidth: a zone manager per
AZ and the region manager) run their rounds. Each scenario's metrics are
printed next to the oracle's (bwalloc's allocation on the true demand);
a figure that misses its target says FAIL. Scenarios: ` + strings.Join(bwsim.Names, ", ") + `.
The scale scenario (100k EIPs in 10k packages) measures the wall-clock
time of the managers' rounds; the other figures are simulated and do not
depend on the machine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Config.Estimator.Margin = margin
			o.Config.Estimator.Window = window
			o.Out = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
			rs, err := bench.Bandwidth(o)
			if err != nil {
				return fmt.Errorf("bench bandwidth: %w", err)
			}
			return bench.Report(cmd.OutOrStdout(), rs, globals.json)
		},
	}
	f := c.Flags()
	f.StringSliceVar(&o.Scenarios, "scenario", nil, "scenarios to run, comma-separated (default: all): "+strings.Join(bwsim.Names, ", "))
	f.Uint64Var(&o.Config.Seed, "seed", o.Config.Seed, "seed of the random traces and of lost reports")
	f.IntVar(&o.Config.ReportDelay, "report-delay", o.Config.ReportDelay, "ticks from the end of a measurement interval to the round that uses it")
	f.IntVar(&o.Config.PushDelay, "push-delay", o.Config.PushDelay, "ticks from the managers' round to the hosts reading their limits")
	f.Float64Var(&o.Config.Loss, "loss", o.Config.Loss, "probability that a host's report is lost")
	f.BoolVar(&o.Config.NoDrops, "no-drops", false, "hosts report no drop counts (demand above a limit is found by probing only)")
	f.DurationVar(&o.Config.Tick, "tick", o.Config.Tick, "simulation step")
	f.DurationVar(&o.Config.Grace, "grace", o.Config.Grace, "the managers' grace: TTL of the limits they write (hosts then use the static split)")
	f.Float64Var(&margin, "margin", 0, fmt.Sprintf("estimator margin over the recent peak (0: bwalloc's default, %v)", bwalloc.DefaultEstimatorConfig.Margin))
	f.DurationVar(&window, "window", 0, fmt.Sprintf("estimator peak window (0: bwalloc's default, %v)", bwalloc.DefaultEstimatorConfig.Window))
	f.IntVar(&o.ScalePackages, "scale-packages", 10_000, "packages of 10 EIPs in the scale scenario")
	return c
}

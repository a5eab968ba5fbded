package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/bwsim"
)

// BandwidthOptions configure `azgate-lab bench bandwidth`.
type BandwidthOptions struct {
	// Scenarios to run (bwsim.Names); empty: all.
	Scenarios []string
	// Config is the simulator's (delays, loss, seed, estimator).
	Config bwsim.Config
	// ScalePackages sizes the scale scenario (packages of 10 EIPs).
	ScalePackages int
	Out           func(string, ...any)
}

// Bandwidth runs the shared-bandwidth simulator (internal/bwsim: the
// real managers of internal/bandwidth on an in-process store) on each
// scenario and reports its metrics next to the oracle's (the allocation
// on true demand): overshoot, convergence after the scenario's events,
// Jain's fairness index of served/oracle, utilisation under contention,
// and the wall-clock time of the managers' rounds. A metric that does not
// apply to a scenario (no contention, no events) is left out. Every
// figure with a target is checked: a missed one has FAIL after its
// target in the table and at the start of its note, and Out lists them
// at the end.
func Bandwidth(o BandwidthOptions) ([]Result, error) {
	names := o.Scenarios
	if len(names) == 0 {
		names = bwsim.Names
	}
	if o.ScalePackages*10 > bwsim.MaxEIPs {
		return nil, fmt.Errorf("--scale-packages %d: at most %d (the simulator's EIPs come from 198.18.0.0/15, %d addresses)", o.ScalePackages, bwsim.MaxEIPs/10, bwsim.MaxEIPs)
	}
	var rs []Result
	for _, name := range names {
		var sc *bwsim.Scenario
		if name == "scale" && o.ScalePackages > 0 {
			sc = bwsim.Scale(o.Config.Seed, o.ScalePackages, 10)
		} else {
			var err error
			if sc, err = bwsim.Build(name, o.Config.Seed); err != nil {
				return rs, err
			}
		}
		start := time.Now()
		r, err := bwsim.Run(o.Config, sc)
		if err != nil {
			return rs, err
		}
		if o.Out != nil {
			o.Out("%s: %d packages, %d EIPs, %d hosts, %v simulated in %v", name, r.Packages, r.EIPs, r.Hosts, r.Duration, time.Since(start).Round(time.Millisecond))
		}
		rs = append(rs, BandwidthResults(r)...)
	}
	if o.Out != nil {
		var missed []string
		for _, r := range rs {
			if Missed(r) {
				missed = append(missed, fmt.Sprintf("%s %.4g (target %s)", r.Name, r.Value, strings.TrimSuffix(r.Target, " FAIL")))
			}
		}
		if len(missed) > 0 {
			o.Out("bench bandwidth: %d checks FAIL: %s", len(missed), strings.Join(missed, "; "))
		} else {
			o.Out("bench bandwidth: every check met")
		}
	}
	return rs, nil
}

// Missed says whether a bandwidth result missed its target.
func Missed(r Result) bool { return strings.HasSuffix(r.Target, " FAIL") }

// meets checks v against a target: "<= x", ">= x" or "x" (equal); an
// empty target is met.
func meets(v float64, target string) bool {
	op, num := "=", target
	if a, b, ok := strings.Cut(target, " "); ok {
		op, num = a, b
	}
	var x float64
	if _, err := fmt.Sscan(num, &x); err != nil {
		return true
	}
	switch op {
	case "<=":
		return v <= x+1e-9
	case ">=":
		return v >= x-1e-9
	}
	return v == x
}

// BandwidthResults turns one scenario's metrics into result lines (the
// oracle as baseline where it has a figure of its own).
func BandwidthResults(r *bwsim.Result) []Result {
	c := r.Config
	note := fmt.Sprintf("%s; %d packages, %d EIPs, %d hosts, %d buckets, %v; tick %v, reports every %v, report delay %d ticks, push delay %d ticks (round to hosts), loss %.3g, drops counted %v, seed %d",
		r.Description, r.Packages, r.EIPs, r.Hosts, r.Slots, r.Duration, c.Tick, c.Interval, c.ReportDelay, c.PushDelay, c.Loss, !c.NoDrops, c.Seed)
	var rs []Result
	add := func(name string, v float64, unit, target string, baseline float64, hasBase bool, n string) {
		if math.IsNaN(v) {
			return
		}
		x := Result{Suite: "bandwidth", Name: r.Scenario + "/" + name, Value: v, Unit: unit, Target: target, Note: n}
		if target != "" && !meets(v, target) {
			x.Target += " FAIL"
			x.Note = strings.TrimSuffix("FAIL: misses its target "+target+"; "+n, "; ")
		}
		if hasBase {
			x.Baseline, x.BaselineValue = "oracle", baseline
			if baseline != 0 {
				x.Ratio = v / baseline
			}
		}
		rs = append(rs, x)
	}
	add("overshoot-max", r.OvershootMax, "x capacity", "<= 1.02", r.OracleOvershootMax, true, note)
	add("over-1.02", r.OverPct, "% of 1s windows", "0", 0, true, "")
	add("limits-max", r.LimitsMax, "x capacity", "<= 1", 1, true, "largest sum of a package's limits in force on the hosts at any tick")
	if r.ManagedFrom >= 0 {
		add("managed-from", r.ManagedFrom.Seconds(), "s", "", 0, false, "time from which every (EIP, host) had enforced a limit from a manager; before it a host whose reports never reached one is on a static split nothing counts")
		add("limits-max-managed", r.LimitsMaxManaged, "x capacity", "<= 1", 1, true, "limits-max from managed-from on")
		add("overshoot-max-managed", r.OvershootMaxManaged, "x capacity", "<= 1.02", r.OracleOvershootMax, true, "overshoot-max over the windows from managed-from on")
	}
	if r.Measured > r.Missed {
		var ev []string
		for k, d := range r.EventConv {
			at := r.Events[k].Seconds()
			switch {
			case d == -1:
				ev = append(ev, fmt.Sprintf("%.1fs: never", at))
			case d == -2:
				ev = append(ev, fmt.Sprintf("%.1fs: not measured", at))
			default:
				ev = append(ev, fmt.Sprintf("%.1fs: %.1fs", at, d.Seconds()))
			}
		}
		// The managers' design: an increase that needs room from a
		// decrease goes out three rounds after it (Settle), and the zone
		// tier adds a round: 3 s (measure, estimate) + 4 intervals.
		convTarget := fmt.Sprintf("<= %g", (3*time.Second + 4*c.Interval).Seconds())
		add("convergence-max", r.ConvMax.Seconds(), "s", convTarget, 0, true, "per event (at: time to within the tolerance) "+strings.Join(ev, ", ")+
			"; target 3 s + 4 rounds: increases wait three rounds for the decreases that make room, and one round through the zone managers")
		add("convergence-mean", r.ConvMean.Seconds(), "s", "", 0, true, "")
	}
	if r.Measured > 0 {
		add("unconverged-events", float64(r.Missed), "events", "0", 0, true,
			fmt.Sprintf("of %d events measured (followed by %v without another), those after which some EIP was never again within %.0f %% of the oracle before the next", r.Measured, c.MinSegment, 100*c.Tolerance))
	}
	add("within-5pct", r.WithinPct, "% of time", "", 100, true, "")
	if r.ContendedPct > 0 {
		add("jain", 100*r.Jain, "index x100", "", 100, true, fmt.Sprintf("Jain's index of served/oracle x 100, mean over the contended ticks (%.0f %% of the time)", r.ContendedPct))
		add("jain-steady", 100*r.JainSteady, "index x100", ">= 99", 100, true, fmt.Sprintf("ticks at least %v after the last event", c.SteadyAfter))
		add("jain-steady-min", 100*r.JainMin, "index x100", "", 100, true, "")
		add("utilisation", 100*r.Util, "%", "", 100, true, "")
		add("utilisation-steady", 100*r.UtilSteady, "%", ">= 95", 100, true, "")
		add("utilisation-outage", 100*r.UtilOutage, "%", "", 100, true, "while no manager runs: limits held, then the static split")
	}
	if r.Rounds > 0 && r.EIPs >= 1000 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		target := ""
		if r.EIPs >= 100_000 {
			target = "<= 100"
		}
		md, mx := r.RoundMedian, r.RoundMax
		add("allocation-median", ms(md.Alloc), "ms", target, 0, false,
			fmt.Sprintf("%d rounds; wall clock of the real code: Allocator.Package for every package and direction (RoundStats.Alloc)", r.Rounds))
		add("allocation-max", ms(mx.Alloc), "ms", "", 0, false, "")
		add("round-region-median", ms(md.Region), "ms", "", 0, false, "RegionManager.Round less the allocation: read the zones' sums, estimate per EIP and per zone, split over zones, budget, write the zones' shares (bwstore.Mem)")
		add("round-zones-median", ms(md.Zones), "ms", "", 0, false, "every ZoneManager.Round, one after the other: read reports, sum to the region, estimate per host, split over hosts, budget, write the hosts' limits (bwstore.Mem)")
		add("round-total-median", ms(md.Total()), "ms", "", 0, false,
			fmt.Sprintf("zone and region rounds one after the other in one process (in production each its own, every %v)", c.Interval))
		add("round-total-max", ms(mx.Total()), "ms", "", 0, false, "")
	}
	return rs
}

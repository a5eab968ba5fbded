package bwsim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
)

// oracleScenario: three packages whose oracle the simulator can meet
// exactly, because no EIP of a contended package has its demand met (a
// met EIP keeps the estimator's 10 % margin over its peak, which the
// others then lack; see docs/bandwidth.md, "Simulator"):
//   - 100M, five EIPs, weights 1, 2, 3 and one with a 30M min, one capped
//     at 10M: the last three want 80M, the first two start idle and want
//     80M from 10 s on (the event; until then they hold a small limit);
//   - 1G, uncontended: every EIP gets its demand;
//   - 100M: an EIP on edges in three AZs wanting 60M (its traffic 50/30/20
//     % over them) against one on an agent wanting 200M: 50M each, the
//     first only if its limit follows its traffic over the zones (an
//     equal split would serve it 16.7 + 16.7 + 12M).
func oracleScenario() *Scenario {
	p1 := Package{Name: "unmet", Capacity: 100 * M, EIPs: []EIP{
		{EIP: bwalloc.EIP{Addr: Addr(1), Weight: 1}, Hosts: []Host{Agent(0, 1)}},
		{EIP: bwalloc.EIP{Addr: Addr(2), Weight: 2}, Hosts: []Host{Agent(1, 1)}},
		{EIP: bwalloc.EIP{Addr: Addr(3), Weight: 3}, Hosts: []Host{Agent(2, 1)}},
		{EIP: bwalloc.EIP{Addr: Addr(4), Weight: 1, Min: 30 * M}, Hosts: []Host{Agent(0, 2)}},
		{EIP: bwalloc.EIP{Addr: Addr(5), Weight: 1, Max: 10 * M}, Hosts: []Host{Agent(1, 2)}},
	}}
	p2 := Package{Name: "spare", Capacity: 1000 * M, EIPs: []EIP{
		{EIP: bwalloc.EIP{Addr: Addr(10)}, Hosts: []Host{Agent(0, 3)}},
		{EIP: bwalloc.EIP{Addr: Addr(11)}, Hosts: []Host{Agent(1, 3)}},
		{EIP: bwalloc.EIP{Addr: Addr(12)}, Hosts: []Host{Agent(2, 3)}},
	}}
	p3 := Package{Name: "zones", Capacity: 100 * M, EIPs: []EIP{
		{EIP: bwalloc.EIP{Addr: Addr(20)}, Hosts: []Host{Edge(0, 1), Edge(1, 1), Edge(2, 1)}},
		{EIP: bwalloc.EIP{Addr: Addr(21)}, Hosts: []Host{Agent(0, 4)}},
	}}
	return &Scenario{
		Name:     "oracle",
		Packages: []Package{p1, p2, p3},
		Duration: 40 * time.Second,
		Events:   []time.Duration{10 * time.Second},
		Demand: func(t time.Duration, p, i int) float64 {
			switch p {
			case 0:
				if i < 2 && t < 10*time.Second {
					return 0
				}
				return 80 * M
			case 1:
				return []float64{100, 50, 20}[i] * M
			}
			return []float64{60, 200}[i] * M
		},
		Spread: func(_ time.Duration, _, _ int, dst []float64) { copy(dst, []float64{0.5, 0.3, 0.2}) },
	}
}

// TestMatchesOracle: with no delay and no loss the managers' rates reach
// the oracle's within 1 % for every EIP and stay there. The bounds are
// in rounds, as the managers' design sets them (docs/bandwidth.md,
// "Simulator"): an increase that needs room from a decrease elsewhere
// goes out three rounds after it (Config.Settle, 2.5 intervals, so the
// decrease is in force below first), and the zone tier adds a round
// (a zone splits the region's shares of the round before), so with drops
// counted a step up is met five rounds after the interval that shows it
// (one to measure, three to settle, one through the zones). By probing
// alone (no drop counts) an EIP doubles its limit once per such cycle:
// from 1 Mbit/s to 20 in five doublings, 25 rounds; an EIP on hosts in
// three AZs gets there as fast here, to within 5 %. Steady (fairness,
// utilisation) is then judged after that convergence: SteadyAfter the
// bound. (The simulator's own round, before issue 18 part 5, had no
// settle wait and no zone tier: 3 s and 8 s.)
func TestMatchesOracle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noDrops   bool
		onePerEIP bool
		tol       float64
		within    time.Duration
	}{
		{"drops counted", false, false, 0.01, 5 * time.Second},
		{"probing only, one host per EIP", true, true, 0.01, 25 * time.Second},
		{"probing only, an EIP in three AZs", true, false, 0.05, 25 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := oracleScenario()
			if tc.onePerEIP {
				sc.Packages = sc.Packages[:2]
			}
			r, err := Run(Config{Tolerance: tc.tol, NoDrops: tc.noDrops, SteadyAfter: max(tc.within, DefaultConfig.SteadyAfter)}, sc)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("converged in %v", r.ConvMax)
			if r.Measured != 1 || r.Missed != 0 || r.ConvMax > tc.within {
				t.Fatalf("converged to within %.0f %% of the oracle after %v (missed %d of %d), want ≤ %v", 100*tc.tol, r.ConvMax, r.Missed, r.Measured, tc.within)
			}
			if r.UtilSteady < 0.99 || r.JainSteady < 0.999 || r.JainMin < 0.995 {
				t.Errorf("steady: utilisation %.4f, Jain %.5f (min %.5f)", r.UtilSteady, r.JainSteady, r.JainMin)
			}
			if r.LimitsMax > 1 || r.OvershootMax > OverLimit || r.OverPct != 0 {
				t.Errorf("limits up to %.4f × capacity, served up to %.4f × (%.1f %% of windows over)", r.LimitsMax, r.OvershootMax, r.OverPct)
			}
		})
	}
}

// TestMarginCost pins down what TestMatchesOracle avoids: an EIP whose
// demand is met in a contended package is allocated its peak × 1.1, and
// the EIP that wants more gets that much less than the oracle gives it.
// hot-every-az: four EIPs at 15M (allocated 16.5M each) and one wanting
// 70M at weight 2: the oracle gives it 40M, the allocation at most 34M,
// less what the floors of the zone and host splits leave unused; a
// smaller margin wastes less.
func TestMarginCost(t *testing.T) {
	def, err := Run(Config{}, HotEveryAZ())
	if err != nil {
		t.Fatal(err)
	}
	if def.UtilSteady > 0.94+1e-9 || def.UtilSteady < 0.9 {
		t.Errorf("steady utilisation %.4f, want at most 0.94 (100M − 4 × 1.5M of margin)", def.UtilSteady)
	}
	small, err := Run(Config{Estimator: bwalloc.EstimatorConfig{Margin: 1.06}}, HotEveryAZ())
	if err != nil {
		t.Fatal(err)
	}
	if small.UtilSteady < def.UtilSteady+0.015 {
		t.Errorf("margin 1.06: steady utilisation %.4f, want 1.5 points above the default's %.4f", small.UtilSteady, def.UtilSteady)
	}
}

// TestScenarios runs every scenario (the scale one small) with the
// default delays and 1 % loss, then with 20 % loss: the package's limits
// in force never sum above its capacity (the managers' budgets; the
// static split sums to the capacity), a 1 s window never passes more
// than 1.02 × capacity, and the same seed gives the same figures.
//
// With 20 % loss that holds from the moment every host has enforced a
// limit from a manager (Result.ManagedFrom), not before: a host whose
// first reports are lost is on its static split and no manager knows it
// carries the EIP, while its zone's share goes to the hosts that
// reported (a known defect of the managers, docs/bandwidth.md
// "Simulator"; `azgate-lab bench bandwidth` prints limits-max FAIL for it).
// The test pins that down: over capacity only before ManagedFrom, and
// ManagedFrom within the grace (10 s; at 20 % loss some of 300 hosts lose
// their first four or five reports).
//
// Utilisation under contention is above 75 %, but in onoff (60 % there):
// its EIPs switch every 8 s, and capacity an EIP frees reaches the others
// only once its estimate has fallen (the 2 s window) and the decrease has
// settled (three rounds, and a round through the zones) — most of each
// 8 s period.
func TestScenarios(t *testing.T) {
	for _, name := range Names {
		for _, loss := range []float64{0.01, 0.2} {
			sc, err := Build(name, 7)
			if err != nil {
				t.Fatal(err)
			}
			if name == "scale" {
				sc = Scale(7, 30, 10)
			}
			cfg := Config{Seed: 7, ReportDelay: 2, PushDelay: 1, Loss: loss, Grace: DefaultConfig.Grace}
			r, err := Run(cfg, sc)
			if err != nil {
				t.Fatal(err)
			}
			if r.ManagedFrom < 0 || r.ManagedFrom > cfg.Grace {
				t.Errorf("%s, loss %v: every host managed from %v, want within the grace", name, loss, r.ManagedFrom)
			}
			if r.LimitsMaxManaged > 1 || r.OvershootMaxManaged > OverLimit+1e-9 || r.OverPctManaged != 0 {
				t.Errorf("%s, loss %v: from %v on, limits up to %.4f × capacity, served up to %.4f × (%.1f %% of windows over)", name, loss, r.ManagedFrom, r.LimitsMaxManaged, r.OvershootMaxManaged, r.OverPctManaged)
			}
			if loss < 0.1 && (r.LimitsMax > 1 || r.OvershootMax > OverLimit+1e-9 || r.OverPct != 0) {
				t.Errorf("%s, loss %v: limits up to %.4f × capacity, served up to %.4f × (%.1f %% of windows over)", name, loss, r.LimitsMax, r.OvershootMax, r.OverPct)
			}
			if r.LimitsMax > 1 {
				t.Logf("%s, loss %v: KNOWN DEFECT: limits up to %.4f × capacity before every host was managed (%v)", name, loss, r.LimitsMax, r.ManagedFrom)
			}
			floor := 0.75
			if name == "onoff" {
				floor = 0.6
			}
			if r.ContendedPct > 0 && !(r.Util > floor) {
				t.Errorf("%s, loss %v: utilisation %.3f", name, loss, r.Util)
			}
			again, _ := Run(cfg, sc)
			r.RoundMedian, r.RoundMax, again.RoundMedian, again.RoundMax = Timing{}, Timing{}, Timing{}, Timing{}
			if a, b := fmt.Sprintf("%+v", *r), fmt.Sprintf("%+v", *again); a != b {
				t.Errorf("%s: two runs with seed 7 differ:\n%+v\n%+v", name, *r, *again)
			}
		}
	}
}

// TestOutage: while no manager runs, hosts hold their limits for the
// grace period, then use the static split, which ignores demand; the
// manager's return neither overshoots nor leaves the package unfair.
func TestOutage(t *testing.T) {
	r, err := Run(Config{Loss: 0}, OutageScenario())
	if err != nil {
		t.Fatal(err)
	}
	// The static split of the steps package for the outage's demand
	// (10, 80, 10, 30, 20, 10 M) serves 10 + 11.1 + 10 + 20 + 11.1 + 10
	// (weights 1, 1, 2, 1, 1, 3 over what the min leaves, the max 15M).
	if r.UtilOutage > 0.9 || r.UtilOutage < 0.6 {
		t.Errorf("utilisation during the outage %.3f: want the static split's, well below the managed", r.UtilOutage)
	}
	if r.UtilSteady < 0.95 || r.JainSteady < 0.99 {
		t.Errorf("after the return: utilisation %.3f, Jain %.4f", r.UtilSteady, r.JainSteady)
	}
	if r.LimitsMax > 1 || r.OvershootMax > OverLimit+1e-9 {
		t.Errorf("limits up to %.4f × capacity, served up to %.4f ×", r.LimitsMax, r.OvershootMax)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{PushDelay: 5}, "push delay 5 ticks"},
		{Config{Loss: 1.5}, "loss 1.5"},
		{Config{Interval: 150 * time.Millisecond}, "interval 150ms"},
		{Config{ReportDelay: -1}, "report delay -1"},
		{Config{Estimator: bwalloc.EstimatorConfig{Margin: 1.01}}, "margin 1.01"},
	} {
		_, err := Run(tc.cfg, Steps())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	bad := Steps()
	bad.Packages[0].EIPs[1].Addr = bad.Packages[0].EIPs[0].Addr
	if _, err := Run(Config{}, bad); err == nil || !strings.Contains(err.Error(), "198.18.0.1") {
		t.Errorf("an EIP twice: %v", err)
	}
}

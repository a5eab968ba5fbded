package bwsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
)

// M is 1 Mbit/s in bits/s.
const M = 1_000_000

// MaxEIPs is how many addresses Addr has: 198.18.0.0/15.
const MaxEIPs = 1 << 17

// Addr is the n-th EIP address of the simulator (0 ≤ n < MaxEIPs), in
// 198.18.0.0/15 (the benchmarking range).
func Addr(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(n>>16&1), byte(n >> 8), byte(n)})
}

// Agent is host h of zone z (az1, az2, az3 for z = 0, 1, 2).
func Agent(z, h int) Host {
	return Host{Zone: fmt.Sprintf("az%d", z+1), Name: fmt.Sprintf("az%d-agent%03d", z+1, h)}
}

// Edge is edge h of zone z.
func Edge(z, h int) Host {
	return Host{Zone: fmt.Sprintf("az%d", z+1), Name: fmt.Sprintf("az%d-edge%d", z+1, h)}
}

// Names lists the scenarios Build knows, in the order the benchmark runs
// them.
var Names = []string{"steps", "onoff", "flash", "hot-every-az", "diurnal", "outage", "scale"}

// Build returns the named scenario, its random traces drawn from seed.
func Build(name string, seed uint64) (*Scenario, error) {
	switch name {
	case "steps":
		return Steps(), nil
	case "onoff":
		return OnOff(seed), nil
	case "flash":
		return Flash(), nil
	case "hot-every-az":
		return HotEveryAZ(), nil
	case "diurnal":
		return Diurnal(seed), nil
	case "outage":
		return OutageScenario(), nil
	case "scale":
		return Scale(seed, 10_000, 10), nil
	}
	return nil, fmt.Errorf("bandwidth simulator: no scenario %q (have %v)", name, Names)
}

// phased is a piecewise-constant demand: values[k] from at[k] (at[0] = 0)
// to the next.
func phased(at []time.Duration, values [][]float64) func(t time.Duration, p, i int) float64 {
	return func(t time.Duration, _, i int) float64 {
		k := 0
		for k+1 < len(at) && t >= at[k+1] {
			k++
		}
		return values[k][i] * M
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// stepsPackage is the package of the steps and outage scenarios: 100
// Mbit/s over six EIPs, one per agent across three AZs, weights 1, 1, 2,
// 1, 1, 3; the fourth has a 20 Mbit/s min, the fifth a 15 Mbit/s max.
func stepsPackage() Package {
	w := []uint32{1, 1, 2, 1, 1, 3}
	pk := Package{Name: "steps", Capacity: 100 * M}
	for i := range w {
		e := EIP{EIP: bwalloc.EIP{Addr: Addr(i + 1), Weight: w[i]}, Hosts: []Host{Agent(i%3, i/3)}}
		switch i {
		case 3:
			e.Min = 20 * M
		case 4:
			e.Max = 15 * M
		}
		pk.EIPs = append(pk.EIPs, e)
	}
	return pk
}

// Steps: demand steps in one contended package: one EIP steps up, one
// steps down (its capacity goes to the others), all fall below the
// capacity, all rise at once from idle, one stops. Steps fall 0.4 s into
// an interval, as they would at any phase of the reports.
func Steps() *Scenario {
	at := []time.Duration{0, secs(15.4), secs(30.4), secs(45.4), secs(60.4), secs(75.4)}
	return &Scenario{
		Name:        "steps",
		Description: "100M package, 6 EIPs on agents in 3 AZs (weights 1,1,2,1,1,3; a min, a max); demand steps every 15 s",
		Packages:    []Package{stepsPackage()},
		Duration:    90 * time.Second,
		Events:      at[1:],
		Demand: phased(at, [][]float64{
			{10, 40, 40, 30, 20, 40},
			{60, 40, 40, 30, 20, 40}, // one steps up
			{60, 2, 40, 30, 20, 40},  // one steps down
			{5, 5, 5, 5, 5, 5},       // all below the capacity
			{50, 50, 50, 50, 50, 50}, // all up at once
			{50, 50, 50, 50, 50, 0},  // one stops
		}),
	}
}

// OnOff: eight EIPs of a 100 Mbit/s package each switch on (at a demand
// of their own, 15-50 Mbit/s) or off with probability 0.35 every 8 s.
func OnOff(seed uint64) *Scenario {
	r := rand.New(rand.NewPCG(seed, 2))
	const n = 8
	pk := Package{Name: "onoff", Capacity: 100 * M}
	level := make([]float64, n)
	for i := range n {
		pk.EIPs = append(pk.EIPs, EIP{EIP: bwalloc.EIP{Addr: Addr(100 + i), Weight: uint32(1 + r.IntN(3))}, Hosts: []Host{Agent(i%3, i/3)}})
		level[i] = float64(15 + r.IntN(36))
	}
	at := []time.Duration{0}
	on := make([]bool, n)
	for i := range on {
		on[i] = r.Float64() < 0.6
	}
	var values [][]float64
	snap := func() {
		v := make([]float64, n)
		for i := range v {
			if on[i] {
				v[i] = level[i]
			}
		}
		values = append(values, v)
	}
	snap()
	for t := 8.4; t < 120; t += 8 {
		for i := range on {
			if r.Float64() < 0.35 {
				on[i] = !on[i]
			}
		}
		at = append(at, secs(t))
		snap()
	}
	return &Scenario{
		Name:        "onoff",
		Description: "100M package, 8 EIPs (weights 1-3) switching on (15-50M) or off every 8 s",
		Packages:    []Package{pk},
		Duration:    120 * time.Second,
		Events:      at[1:],
		Demand:      phased(at, values),
	}
}

// Flash: a 1 Gbit/s package of 40 EIPs at 5 Mbit/s each (200 Mbit/s,
// uncontended); at 20.4 s fifteen of them jump to 200 Mbit/s (3.1 Gbit/s
// wanted), at 50.4 s they fall back.
func Flash() *Scenario {
	const n = 40
	pk := Package{Name: "flash", Capacity: 1000 * M}
	for i := range n {
		pk.EIPs = append(pk.EIPs, EIP{EIP: bwalloc.EIP{Addr: Addr(200 + i)}, Hosts: []Host{Agent(i%3, i/3%4)}})
	}
	base, crowd := make([]float64, n), make([]float64, n)
	for i := range n {
		base[i], crowd[i] = 5, 5
		if i%8 < 3 {
			crowd[i] = 200
		}
	}
	at := []time.Duration{0, secs(20.4), secs(50.4)}
	return &Scenario{
		Name:        "flash",
		Description: "1G package, 40 EIPs at 5M; 15 jump to 200M for 30 s (flash crowd)",
		Packages:    []Package{pk},
		Duration:    80 * time.Second,
		Events:      at[1:],
		Demand:      phased(at, [][]float64{base, crowd, base}),
	}
}

// HotEveryAZ: one EIP (weight 2) carried by two edges in each of the
// three AZs, wanting 70 Mbit/s, with four others on agents at 15 Mbit/s
// each, in a 100 Mbit/s package. The hot EIP's traffic moves between the
// AZs: 60/30/10 %, then 10/30/60 % at 30.4 s, then all in az3 at 60.4 s;
// within an AZ 70 % on the first edge. Its limit must follow the traffic
// through the zone split and the host split.
func HotEveryAZ() *Scenario {
	pk := Package{Name: "hot", Capacity: 100 * M}
	var hosts []Host
	for z := range 3 {
		hosts = append(hosts, Edge(z, 1), Edge(z, 2))
	}
	pk.EIPs = append(pk.EIPs, EIP{EIP: bwalloc.EIP{Addr: Addr(300), Weight: 2}, Hosts: hosts})
	for i := range 4 {
		pk.EIPs = append(pk.EIPs, EIP{EIP: bwalloc.EIP{Addr: Addr(301 + i), Weight: 1}, Hosts: []Host{Agent(i%3, 10+i)}})
	}
	at := []time.Duration{0, secs(30.4), secs(60.4)}
	zoneShares := [][]float64{{0.6, 0.3, 0.1}, {0.1, 0.3, 0.6}, {0, 0, 1}}
	return &Scenario{
		Name:        "hot-every-az",
		Description: "100M package: one EIP (70M, weight 2) on 2 edges in each of 3 AZs, its traffic moving between AZs; 4 EIPs at 15M on agents",
		Packages:    []Package{pk},
		Duration:    90 * time.Second,
		Events:      at[1:],
		Demand: func(_ time.Duration, _, i int) float64 {
			if i == 0 {
				return 70 * M
			}
			return 15 * M
		},
		Spread: func(t time.Duration, _, _ int, dst []float64) {
			k := 0
			for k+1 < len(at) && t >= at[k+1] {
				k++
			}
			for z := range 3 {
				dst[2*z] = 0.7 * zoneShares[k][z]
				dst[2*z+1] = 0.3 * zoneShares[k][z]
			}
		},
	}
}

// Diurnal: three packages (10 Mbit/s with 5 EIPs, 100 Mbit/s with 10, 1
// Gbit/s with 20) whose EIPs follow a compressed day: demand_i =
// base_i × (1 + 0.8 sin(2πt/60 s + φ_i)), φ_i within a radian, Σ base =
// 0.9 × capacity: contended around each peak, far from it in the
// troughs.
func Diurnal(seed uint64) *Scenario {
	r := rand.New(rand.NewPCG(seed, 5))
	sizes := []struct {
		c uint64
		n int
	}{{10 * M, 5}, {100 * M, 10}, {1000 * M, 20}}
	sc := &Scenario{Name: "diurnal", Description: "10M/5, 100M/10 and 1G/20 EIPs: sinusoidal demand (60 s days), 0.2-1.6x capacity", Duration: 180 * time.Second}
	type wave struct{ base, phase float64 }
	var waves [][]wave
	n := 400
	for p, sz := range sizes {
		pk := Package{Name: fmt.Sprintf("diurnal%d", p), Capacity: sz.c}
		raw := make([]float64, sz.n)
		var sum float64
		for i := range raw {
			raw[i] = 0.2 + r.Float64()
			sum += raw[i]
		}
		ws := make([]wave, sz.n)
		for i := range sz.n {
			pk.EIPs = append(pk.EIPs, EIP{EIP: bwalloc.EIP{Addr: Addr(n), Weight: uint32(1 + r.IntN(3))}, Hosts: []Host{Agent(i%3, 20+p*10+i/3)}})
			n++
			ws[i] = wave{base: raw[i] / sum * 0.9 * float64(sz.c), phase: r.Float64()}
		}
		sc.Packages = append(sc.Packages, pk)
		waves = append(waves, ws)
	}
	sc.Demand = func(t time.Duration, p, i int) float64 {
		w := waves[p][i]
		return w.base * (1 + 0.8*math.Sin(2*math.Pi*t.Seconds()/60+w.phase))
	}
	return sc
}

// OutageScenario: the steps package, contended; the manager is lost at
// 20.4 s (hosts hold their limits for the grace period, then fall back
// to the static split), demand shifts at 25.4 s, the manager returns at
// 45.4 s with no history, and demand steps again at 65.4 s.
func OutageScenario() *Scenario {
	at := []time.Duration{0, secs(25.4), secs(65.4)}
	return &Scenario{
		Name:        "outage",
		Description: "the steps package; manager lost 20.4-45.4 s (limits held 10 s, then the static split), demand shifts during it",
		Packages:    []Package{stepsPackage()},
		Duration:    80 * time.Second,
		Events:      []time.Duration{secs(45.4), secs(65.4)},
		Outage:      &Outage{From: secs(20.4), To: secs(45.4)},
		Demand: phased(at, [][]float64{
			{10, 40, 40, 30, 20, 40},
			{10, 80, 10, 30, 20, 10},
			{40, 40, 40, 40, 40, 40},
		}),
	}
}

// Scale: pkgs packages of per EIPs (1 Gbit/s each; weights 1-4, a third
// with a min, a fifth with a max, as BenchmarkAllocateRound), every EIP on
// 1-3 hosts in distinct AZs out of 100 agents per AZ, half the packages
// contended; at 5.4 s every tenth package's demand doubles. 15 s.
func Scale(seed uint64, pkgs, per int) *Scenario {
	r := rand.New(rand.NewPCG(seed, 7))
	sc := &Scenario{Name: "scale", Duration: 15 * time.Second, Events: []time.Duration{secs(5.4)},
		Description: fmt.Sprintf("%d packages of %d EIPs (1G each), each EIP on 1-3 of 300 agents in 3 AZs, half contended; every 10th package doubles at 5.4 s", pkgs, per)}
	base := make([][]float64, pkgs)
	n := 0
	for p := range pkgs {
		c := uint64(1000 * M)
		pk := Package{Name: fmt.Sprintf("pkg%05d", p), Capacity: c}
		base[p] = make([]float64, per)
		for i := range per {
			e := EIP{EIP: bwalloc.EIP{Addr: Addr(n), Weight: uint32(1 + r.IntN(4))}}
			n++
			if r.IntN(3) == 0 {
				e.Min = c / uint64(per) / 2
			}
			if r.IntN(5) == 0 {
				e.Max = c / 2
			}
			zones := r.Perm(3)[:1+r.IntN(3)]
			slices.Sort(zones)
			for _, z := range zones {
				e.Hosts = append(e.Hosts, Agent(z, r.IntN(100)))
			}
			if p%2 == 0 {
				base[p][i] = float64(r.Uint64N(c / uint64(per) * 3))
			} else {
				base[p][i] = float64(r.Uint64N(c / uint64(per)))
			}
			pk.EIPs = append(pk.EIPs, e)
		}
		sc.Packages = append(sc.Packages, pk)
	}
	step := sc.Events[0]
	sc.Demand = func(t time.Duration, p, i int) float64 {
		if p%10 == 0 && t >= step {
			return 2 * base[p][i]
		}
		return base[p][i]
	}
	return sc
}

package bwsim

import (
	"math"
	"time"

	"github.com/azgate/azgate/internal/bwalloc"
)

// Result is one scenario's metrics. Rates compare what the EIPs were
// served (the fluid model's per-tick rates) with the oracle's allocation:
// bwalloc's Allocator on the true demand (spare held), each EIP served
// min(demand, oracle limit).
type Result struct {
	Scenario              string
	Description           string
	Packages, EIPs, Hosts int
	Slots                 int // (EIP, host) token buckets
	Duration              time.Duration
	Config                Config
	// OvershootMax is the largest aggregate over a 1 s window divided by
	// the capacity, over every package and window; OverPct the share of
	// (package, window) pairs above OverLimit × capacity, in %.
	OvershootMax, OverPct float64
	// OracleOvershootMax is the same figure for the oracle's rates.
	OracleOvershootMax float64
	// LimitsMax is the largest sum of a package's limits in force on the
	// hosts, at any tick, divided by its capacity: decreases pushed before
	// increases and a static split that sums to the capacity keep it ≤ 1.
	LimitsMax float64
	// ManagedFrom is the time from which every (EIP, host) had enforced a
	// limit from a manager at least once (-1: never). Before it a host
	// may be on a static split that no manager knows of (its reports have
	// not reached one yet), which nothing counts: the *Managed figures
	// are those above, over the ticks from ManagedFrom on (windows that
	// start there).
	ManagedFrom                                           time.Duration
	LimitsMaxManaged, OvershootMaxManaged, OverPctManaged float64
	// Convergence after the scenario's events: per event, the time until
	// every EIP of every package is within Tolerance of the oracle and
	// stays so until the next event. Measured counts the events measured
	// (followed by MinSegment without another), Missed those after which
	// some package never settled; ConvMax and ConvMean are over the
	// others.
	ConvMax, ConvMean time.Duration
	Measured, Missed  int
	// Events are the scenario's; EventConv is each event's convergence time (the slowest package's),
	// -1 when missed, -2 when not measured (another event too soon).
	Events, EventConv []time.Duration
	// WithinPct is the share of (package, tick) pairs with every EIP within
	// Tolerance of the oracle, in %.
	WithinPct float64
	// Jain is the mean over contended (package, tick) pairs of Jain's index
	// of served/oracle over the package's EIPs with an oracle share; NaN
	// when no package was ever contended. JainSteady and JainMin over the
	// steady ones (SteadyAfter since the last event, manager running).
	Jain, JainSteady, JainMin float64
	// Util is Σ served / Σ capacity over contended (package, tick) pairs
	// (demand above capacity), UtilSteady over the steady ones,
	// UtilOutage over the ticks of the outage (held limits, then the
	// static split); NaN when there are none. The oracle's is 1.
	Util, UtilSteady, UtilOutage float64
	ContendedPct                 float64 // share of (package, tick) pairs contended, in %
	// Rounds the manager ran, and the wall-clock time of its parts in the
	// median and the slowest round (by total): the real bwalloc code on
	// this machine, not simulated.
	Rounds                int
	RoundMedian, RoundMax Timing
}

// recorder keeps the per-tick series the metrics are computed from: per
// package (flat, package-major) the aggregate served, true demand and
// oracle rates, whether every EIP was within tolerance, and Jain's index.
type recorder struct {
	s      *sim
	n      int
	served []float64 // per EIP, this tick (bits/s)
	limit  []float64 // per package, this tick: Σ limits in force
	oracle []float64 // per EIP, the oracle's rate for the current demand
	last   []float64 // per EIP, the demand the oracle was computed for

	pServed, pDemand, pOracle, pJain []float64
	pOK                              []bool
	limitsMax, limitsMaxManaged      float64

	alloc  bwalloc.Allocator
	in     []bwalloc.EIP
	grants []bwalloc.Grant
	x      []float64
}

func newRecorder(s *sim, n int) *recorder {
	P := len(s.pkgs)
	r := &recorder{s: s, n: n, served: make([]float64, len(s.eips)), limit: make([]float64, P), oracle: make([]float64, len(s.eips)), last: make([]float64, len(s.eips)),
		pServed: make([]float64, P*n), pDemand: make([]float64, P*n), pOracle: make([]float64, P*n), pJain: make([]float64, P*n), pOK: make([]bool, P*n)}
	for i := range r.last {
		r.last[i] = -1
	}
	return r
}

// tick records one tick: r.served holds each EIP's served rate, demand
// its true demand.
func (r *recorder) tick(tick int, demand []float64) {
	s := r.s
	for p := range s.pkgs {
		pk := &s.pkgs[p]
		changed := false
		for _, ei := range pk.eips {
			if demand[ei] != r.last[ei] {
				changed = true
				break
			}
		}
		if changed {
			r.in = r.in[:0]
			for _, ei := range pk.eips {
				x := s.eips[ei].terms
				x.Demand = uint64(demand[ei])
				r.in = append(r.in, x)
				r.last[ei] = demand[ei]
			}
			res, err := r.alloc.Package(pk.capacity, r.in, bwalloc.Options{HoldSpare: true}, r.grants)
			if err != nil {
				panic(err) // the same input the simulator validated
			}
			r.grants = res.Grants
			for k, g := range res.Grants {
				ei := pk.eips[k]
				r.oracle[ei] = min(demand[ei], float64(g.Limit))
			}
		}
		c := float64(pk.capacity)
		i := p*r.n + tick
		var sv, d, o float64
		ok := true
		r.x = r.x[:0]
		for _, ei := range pk.eips {
			sv += r.served[ei]
			d += demand[ei]
			o += r.oracle[ei]
			ok = ok && Within(r.served[ei], r.oracle[ei], s.cfg.Tolerance, 0.001*c)
			if r.oracle[ei] > 0 {
				r.x = append(r.x, r.served[ei]/r.oracle[ei])
			}
		}
		r.pServed[i], r.pDemand[i], r.pOracle[i], r.pOK[i] = sv, d, o, ok
		r.limitsMax = max(r.limitsMax, r.limit[p]/c)
		if s.managedFrom >= 0 {
			r.limitsMaxManaged = max(r.limitsMaxManaged, r.limit[p]/c)
		}
		r.pJain[i] = math.NaN()
		if d > c {
			r.pJain[i] = Jain(r.x)
		}
	}
	clear(r.served)
	clear(r.limit)
}

func (r *recorder) result() *Result {
	s, n := r.s, r.n
	cfg := s.cfg
	res := &Result{Scenario: s.sc.Name, Description: s.sc.Description, Packages: len(s.pkgs), EIPs: len(s.eips),
		Hosts: len(s.hosts), Slots: len(s.slots), Duration: time.Duration(n) * cfg.Tick, Config: cfg, LimitsMax: r.limitsMax, Events: s.sc.Events,
		LimitsMaxManaged: r.limitsMaxManaged, ManagedFrom: -1}
	if s.managedFrom >= 0 {
		res.ManagedFrom = time.Duration(s.managedFrom) * cfg.Tick
	}
	var overWinManaged float64
	tickOf := func(d time.Duration) int { return int((d + cfg.Tick - 1) / cfg.Tick) }
	events := make([]int, len(s.sc.Events))
	for k, e := range s.sc.Events {
		events[k] = tickOf(e)
	}
	// steady[t]: SteadyAfter since the last event, the manager running
	// and not just back.
	steady := make([]bool, n)
	outage := make([]bool, n)
	for t := range steady {
		steady[t] = t >= tickOf(cfg.SteadyAfter)
	}
	for _, e := range events {
		for t := e; t < min(n, e+tickOf(cfg.SteadyAfter)); t++ {
			steady[t] = false
		}
	}
	if o := s.sc.Outage; o != nil {
		for t := tickOf(o.From); t < min(n, tickOf(o.To)+tickOf(cfg.SteadyAfter)); t++ {
			steady[t] = false
			outage[t] = t < tickOf(o.To)
		}
	}
	var overWin float64
	convSum, convN := 0, 0
	convMax := 0
	perEvent := make([]int, len(events)) // max over packages; -1 missed, -2 skipped
	for k := range perEvent {
		perEvent[k] = -2
	}
	var within, jainN, jainSN, contended int
	var jainSum, jainSSum float64
	res.JainMin = math.NaN()
	var uS, uC, usS, usC, uoS, uoC float64
	for p := range s.pkgs {
		c := float64(s.pkgs[p].capacity)
		sv := r.pServed[p*n : (p+1)*n]
		peak, frac := Overshoot(sv, c, s.tpi)
		res.OvershootMax = max(res.OvershootMax, peak)
		overWin += frac
		if s.managedFrom >= 0 {
			peak, frac := Overshoot(sv[s.managedFrom:], c, s.tpi)
			res.OvershootMaxManaged = max(res.OvershootMaxManaged, peak)
			overWinManaged += frac
		}
		opeak, _ := Overshoot(r.pOracle[p*n:(p+1)*n], c, s.tpi)
		res.OracleOvershootMax = max(res.OracleOvershootMax, opeak)
		ok := r.pOK[p*n : (p+1)*n]
		for k, v := range Convergence(ok, events, tickOf(cfg.MinSegment)) {
			switch {
			case v == -2:
			case v == -1 || perEvent[k] == -1:
				perEvent[k] = -1
			default:
				perEvent[k] = max(perEvent[k], v)
			}
		}
		for t := range n {
			i := p*n + t
			if ok[t] {
				within++
			}
			if r.pDemand[i] > c {
				contended++
				j := r.pJain[i]
				jainSum += j
				jainN++
				if steady[t] {
					jainSSum += j
					jainSN++
					if !(res.JainMin <= j) {
						res.JainMin = j
					}
				}
			}
		}
		dm := r.pDemand[p*n : (p+1)*n]
		a, b, _ := ContendedSums(sv, dm, c, nil)
		uS, uC = uS+a, uC+b
		a, b, _ = ContendedSums(sv, dm, c, steady)
		usS, usC = usS+a, usC+b
		a, b, _ = ContendedSums(sv, dm, c, outage)
		uoS, uoC = uoS+a, uoC+b
	}
	for _, v := range perEvent {
		if v < 0 {
			res.EventConv = append(res.EventConv, time.Duration(v))
		} else {
			res.EventConv = append(res.EventConv, time.Duration(v)*cfg.Tick)
		}
		switch {
		case v == -1:
			res.Measured++
			res.Missed++
		case v >= 0:
			res.Measured++
			convSum += v
			convN++
			convMax = max(convMax, v)
		}
	}
	P := float64(len(s.pkgs))
	res.OverPct = 100 * overWin / P
	res.OverPctManaged = 100 * overWinManaged / P
	res.WithinPct = 100 * float64(within) / (P * float64(n))
	res.ContendedPct = 100 * float64(contended) / (P * float64(n))
	res.ConvMax = time.Duration(convMax) * cfg.Tick
	if convN > 0 {
		res.ConvMean = time.Duration(convSum) * cfg.Tick / time.Duration(convN)
	}
	res.Jain, res.JainSteady = ratio(jainSum, float64(jainN)), ratio(jainSSum, float64(jainSN))
	res.Util, res.UtilSteady, res.UtilOutage = ratio(uS, uC), ratio(usS, usC), ratio(uoS, uoC)
	return res
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

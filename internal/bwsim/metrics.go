package bwsim

import "math"

// The metrics of the issue-10 benchmarks, as pure functions of per-tick
// series so they can be checked on hand-made series (metrics_test.go).

// OverLimit is the overshoot threshold: a package counts as over its
// capacity in a 1 s window when it passed more than 1.02 × capacity,
// which the 20 ms default burst allows at most (docs/bandwidth.md).
const OverLimit = 1.02

// Overshoot slides a window of w ticks over served (bits/s per tick) and
// returns the largest window average divided by capacity, and the
// fraction (0-1) of the windows whose average is above OverLimit ×
// capacity. A series shorter than one window is one window over what it
// has.
func Overshoot(served []float64, capacity float64, w int) (peak, fracOver float64) {
	if len(served) == 0 || capacity <= 0 {
		return 0, 0
	}
	w = max(1, min(w, len(served)))
	var sum float64
	windows, over := 0, 0
	for i, s := range served {
		sum += s
		if i >= w {
			sum -= served[i-w]
		}
		if i < w-1 {
			continue
		}
		r := sum / float64(w) / capacity
		peak = max(peak, r)
		windows++
		if r > OverLimit*(1+1e-12) {
			over++
		}
	}
	return peak, float64(over) / float64(windows)
}

// Jain is Jain's fairness index (Σx)² / (n·Σx²) of x: 1 when every x is
// the same, 1/n when one takes everything (Jain, Chiu and Hawe, DEC-TR-301,
// 1984). 1 for an empty or all-zero x.
func Jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(x)) * s2)
}

// Within reports whether a served rate is within tol (relative) of the
// oracle's, with an absolute slack (bits/s) so that idle and tiny EIPs do
// not turn rounding into misses.
func Within(served, oracle, tol, slack float64) bool {
	return math.Abs(served-oracle) <= tol*oracle+slack
}

// Convergence is the time, in ticks, from each event to the first tick
// from which ok stays true until the next event (or the end of the
// series): 0 when ok never left. events are tick indexes in increasing
// order. An event after which ok is false at the last tick of its segment
// is missed: its entry is -1. Events whose segment is shorter than
// minSeg ticks are skipped (entry -2): nothing can be said about them.
func Convergence(ok []bool, events []int, minSeg int) []int {
	out := make([]int, len(events))
	for k, e := range events {
		end := len(ok)
		if k+1 < len(events) {
			end = min(end, events[k+1])
		}
		if e < 0 || e >= end || end-e < minSeg {
			out[k] = -2
			continue
		}
		t := end
		for t > e && ok[t-1] {
			t--
		}
		if t == end {
			out[k] = -1
			continue
		}
		out[k] = t - e
	}
	return out
}

// ContendedSums gives the utilisation's numerator and denominator: Σ
// served and Σ capacity over the ticks at which demand exceeds capacity
// (the package is contended) and mask is true (nil: all), and how many
// such ticks there were, so that several packages' figures can be added
// up (Result.Util). The oracle's utilisation is 1: when contended it
// hands out the whole capacity and every EIP uses its share.
func ContendedSums(served, demand []float64, capacity float64, mask []bool) (s, c float64, n int) {
	for i := range served {
		if demand[i] > capacity && (mask == nil || mask[i]) {
			s += served[i]
			c += capacity
			n++
		}
	}
	return s, c, n
}

package bwsim

import (
	"math"
	"slices"
	"testing"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{0.7, 0.7, 0.7, 0.7}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 2}, 0.9}, // 3² / (2 × 5)
		{[]float64{1, 1, 0.5}, 6.25 / 6.75},
		{nil, 1},
	} {
		if got := Jain(tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

func TestOvershoot(t *testing.T) {
	// 10 ticks at the capacity, then 10 at 1.1 ×: windows of 10 end at
	// ticks 9..19; the one ending at e holds e-9 ticks at 110, so its
	// ratio is 1 + (e-9)/100: above 1.02 from e = 12, 8 windows of 11.
	s := slices.Repeat([]float64{100}, 10)
	s = append(s, slices.Repeat([]float64{110}, 10)...)
	peak, frac := Overshoot(s, 100, 10)
	if math.Abs(peak-1.1) > 1e-12 || math.Abs(frac-8.0/11) > 1e-12 {
		t.Errorf("overshoot %v, %v; want 1.1, 8/11", peak, frac)
	}
	// Exactly 1.02 is not over; a short series is one window.
	if peak, frac := Overshoot([]float64{102, 102}, 100, 10); math.Abs(peak-1.02) > 1e-12 || frac != 0 {
		t.Errorf("overshoot at 1.02: %v, %v", peak, frac)
	}
	// A one-tick burst is averaged over its windows: those ending at
	// 9..14 hold it, 6 of 11.
	s = slices.Repeat([]float64{90}, 20)
	s[5] = 290
	if peak, frac := Overshoot(s, 100, 10); math.Abs(peak-1.1) > 1e-12 || math.Abs(frac-6.0/11) > 1e-12 {
		t.Errorf("burst: %v, %v; want 1.1 over 6 of 11 windows", peak, frac)
	}
}

func TestConvergence(t *testing.T) {
	ok := []bool{T, T, F, F, T, F, T, T, T, T /* 10 */, F, F, F, F, F, T, T, T /* 18 */, F, F, F, F}
	got := Convergence(ok, []int{0, 2, 10, 18, 21}, 2)
	// 0: segment [0,2) all true: 0. 2: true from 6 on: 4. 10: from 15:
	// 5. 18: false at its end: missed. 21: segment of 1 < 2: skipped.
	if want := []int{0, 4, 5, -1, -2}; !slices.Equal(got, want) {
		t.Errorf("convergence %v, want %v", got, want)
	}
}

func TestUtilisation(t *testing.T) {
	served := []float64{50, 95, 100, 90, 10}
	demand := []float64{50, 200, 150, 300, 20}
	s, c, n := ContendedSums(served, demand, 100, nil)
	if u := ratio(s, c); n != 3 || math.Abs(u-285.0/300) > 1e-12 {
		t.Errorf("utilisation %v over %d ticks, want 0.95 over 3", u, n)
	}
	if s, c, n := ContendedSums(served[:1], demand[:1], 100, nil); n != 0 || !math.IsNaN(ratio(s, c)) {
		t.Errorf("no contention: %v/%v, %d", s, c, n)
	}
	if s, c, n := ContendedSums(served, demand, 100, []bool{T, F, T, F, T}); s != 100 || c != 100 || n != 1 {
		t.Errorf("masked: %v/%v over %d", s, c, n)
	}
}

const T, F = true, false

func TestWithin(t *testing.T) {
	if !Within(95, 100, 0.05, 0) || Within(94.9, 100, 0.05, 0) || !Within(0.5, 0, 0.05, 1) || Within(2, 0, 0.05, 1) {
		t.Error("Within")
	}
}

package maglev

import (
	"fmt"
	"time"
)

// Report is what Measure found for one (N, M).
type Report struct {
	N int    // backends, equal weights
	M uint64 // table size
	// Imbalance is max/mean − 1 of the slots per backend, in %.
	Imbalance float64
	// FailMoved is the % of the healthy backends' slots that changed when
	// one backend failed (Table.Fail). It must be 0.
	FailMoved float64
	// AddCollateral and RemoveCollateral are the % of all slots that moved
	// beyond the changed backend's own share when a backend is added or
	// removed by a new Build: the slots whose backend changed, minus the
	// slots the added backend took or the removed one had.
	AddCollateral, RemoveCollateral float64
	// BuildTime is the time one Build of N backends at M took.
	BuildTime time.Duration
}

// Measure builds a table of n equal-weight backends (keys "b0000",
// "b0001", …) at size m and measures its balance, how many healthy flows a
// failure moves, and how many flows beyond its own share adding or removing
// a backend moves. The failed and removed backend is the middle one
// (n/2); the added one is the key after the last. For the table sizes
// azgate uses it takes well under a second (four Builds and one Fail).
func Measure(n int, m uint64, seed uint32) (Report, error) {
	r := Report{N: n, M: m}
	if n < 1 {
		return r, fmt.Errorf("measure: need at least one backend, got %d", n)
	}
	bs := make([]Backend, n+1)
	for i := range bs {
		bs[i] = Backend{Key: fmt.Sprintf("b%04d", i), Weight: 1}
	}
	start := time.Now()
	t, err := Build(bs[:n], m, seed)
	r.BuildTime = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("measure: %w", err)
	}

	maxShare := 0
	for _, s := range Shares(t) {
		maxShare = max(maxShare, s)
	}
	r.Imbalance = 100 * (float64(maxShare)/(float64(m)/float64(n)) - 1)

	victim := bs[n/2].Key
	failed := t.Fail(map[string]bool{victim: true})
	healthy, moved := 0, 0
	for j, e := range t.Entry {
		if t.Backends[e].Key == victim {
			continue
		}
		healthy++
		if failed.Entry[j] != e {
			moved++
		}
	}
	if healthy > 0 {
		r.FailMoved = 100 * float64(moved) / float64(healthy)
	}

	added, err := Build(bs, m, seed)
	if err != nil {
		return r, fmt.Errorf("measure: adding backend %q: %w", bs[n].Key, err)
	}
	r.AddCollateral = Collateral(t, added, bs[n].Key)

	rest := append(append([]Backend(nil), bs[:n/2]...), bs[n/2+1:n]...)
	removed, err := Build(rest, m, seed)
	if err != nil {
		return r, fmt.Errorf("measure: removing backend %q: %w", victim, err)
	}
	r.RemoveCollateral = Collateral(t, removed, victim)
	return r, nil
}

// Collateral compares two tables of the same size that differ by the
// backend key (added to or removed from before): it returns the % of
// slots whose backend changed, minus the % that belong to key in either
// table (the flows that had to move). Slots are compared by backend key,
// not index, since indices shift when a backend comes or goes.
func Collateral(before, after *Table, key string) float64 {
	if before.M != after.M || before.M == 0 {
		return 100
	}
	name := func(t *Table, j int) string {
		if e := t.Entry[j]; e >= 0 {
			return t.Backends[e].Key
		}
		return ""
	}
	changed, own := 0, 0
	for j := range before.Entry {
		a, b := name(before, j), name(after, j)
		if a == key || b == key {
			own++
		}
		if a != b {
			changed++
		}
	}
	return 100 * float64(changed-own) / float64(before.M)
}

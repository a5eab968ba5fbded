package bwalloc

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPlanPushes(t *testing.T) {
	k := func(i int, h string) HostKey { return HostKey{Addr: ip(i), Host: h} }
	old := map[HostKey]uint64{
		k(1, "h1"): 50, k(1, "h2"): 50, // h2 stops carrying 1
		k(2, "h1"): 30, // unchanged
		k(3, "h2"): 20, // grows
		k(4, "h1"): 40, // shrinks
	}
	new := map[HostKey]uint64{
		k(1, "h1"): 60,
		k(2, "h1"): 30,
		k(3, "h2"): 45,
		k(4, "h1"): 10,
		k(4, "h3"): 5, // h3 starts carrying 4
	}
	p := PlanPushes(old, new)
	want := []Push{
		{HostKey: k(4, "h1"), Old: 40, New: 10},
		{HostKey: k(1, "h2"), Old: 50, Removed: true},
		{HostKey: k(1, "h1"), Old: 50, New: 60},
		{HostKey: k(3, "h2"), Old: 20, New: 45},
		{HostKey: k(4, "h3"), New: 5, Added: true},
	}
	if got := p.Ordered(); !slices.Equal(got, want) {
		t.Fatalf("pushes\n%+v\nwant\n%+v", got, want)
	}
	if len(p.Decreases) != 2 || len(p.Increases) != 3 {
		t.Fatalf("%d decreases, %d increases", len(p.Decreases), len(p.Increases))
	}
}

// TestPlanNeverOverCapacity: applying the decreases in any order and any
// subset, then the increases likewise, the sum in force never exceeds
// max(Σ old, Σ new).
func TestPlanNeverOverCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 5))
	for it := 0; it < 2000; it++ {
		old, new := map[HostKey]uint64{}, map[HostKey]uint64{}
		var so, sn uint64
		for i := 0; i < 1+r.IntN(30); i++ {
			key := HostKey{Addr: ip(r.IntN(8)), Host: "h" + strconv.Itoa(r.IntN(4))}
			if r.IntN(5) != 0 {
				if _, ok := old[key]; !ok {
					v := r.Uint64N(1000)
					old[key] = v
					so += v
				}
			}
			if r.IntN(5) != 0 {
				if _, ok := new[key]; !ok {
					v := r.Uint64N(1000)
					new[key] = v
					sn += v
				}
			}
		}
		bound := max(so, sn)
		p := PlanPushes(old, new)
		ps, err := PlanSorted(sortedTable(old), sortedTable(new))
		if err != nil || !slices.Equal(ps.Ordered(), p.Ordered()) {
			t.Fatalf("iteration %d: PlanSorted (%v) differs from PlanPushes", it, err)
		}
		inForce := map[HostKey]uint64{}
		for key, v := range old {
			inForce[key] = v
		}
		sum := func() (s uint64) {
			for _, v := range inForce {
				s += v
			}
			return
		}
		for _, phase := range [][]Push{p.Decreases, p.Increases} {
			ph := slices.Clone(phase)
			r.Shuffle(len(ph), func(i, j int) { ph[i], ph[j] = ph[j], ph[i] })
			for _, push := range ph {
				if push.Removed {
					delete(inForce, push.HostKey)
				} else {
					inForce[push.HostKey] = push.New
				}
				if s := sum(); s > bound {
					t.Fatalf("iteration %d: %d in force, above max(old %d, new %d)", it, s, so, sn)
				}
			}
		}
		if len(inForce) != len(new) {
			t.Fatalf("after the plan %d limits, want %d", len(inForce), len(new))
		}
		for key, v := range new {
			if inForce[key] != v {
				t.Fatalf("%v: %d after the plan, want %d", key, inForce[key], v)
			}
		}
	}
}

func sortedTable(m map[HostKey]uint64) []Limit {
	var l []Limit
	for k, v := range m {
		l = append(l, Limit{k, v})
	}
	slices.SortFunc(l, CompareLimits)
	return l
}

func TestPlanSortedRefusesUnsorted(t *testing.T) {
	a := Limit{HostKey{ip(1), "h1"}, 1}
	b := Limit{HostKey{ip(2), "h1"}, 1}
	for _, tc := range []struct {
		old, new []Limit
		want     string
	}{
		{[]Limit{b, a}, nil, "old limits not sorted or repeated at 1 (198.18.0.1 on h1)"},
		{nil, []Limit{a, a}, "new limits not sorted or repeated at 1"},
	} {
		if _, err := PlanSorted(tc.old, tc.new); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

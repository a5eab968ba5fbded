package bwalloc

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// HostKey names one EIP's limit on one host (or edge).
type HostKey struct {
	Addr netip.Addr
	Host string
}

// Push is one change of a per-host limit.
type Push struct {
	HostKey
	Old, New uint64
	// Added: the host had no limit for the EIP from this allocation
	// (Old is 0). Removed: the host no longer carries it (New is 0); the
	// consumer deletes the limit rather than setting it to 0.
	Added, Removed bool
}

// Plan is the ordered set of changes from the limits in force to the new
// ones.
//
// How a consumer applies it: push every Decrease (any order, in
// parallel); wait until each is confirmed applied by its agent (or
// edge), or until the agent is known to have fallen back to its static
// split; only then push the Increases. Then, per package, the sum of the
// limits in force never exceeds max(Σ old, Σ new) ≤ capacity at any
// moment: during the first phase every limit is ≤ its old value, after
// it every limit is ≤ its new value. If some decrease of a package cannot
// be confirmed, hold that package's increases to the next round (the
// manager recomputes from what is in force then). "Old" must be what the
// data plane enforces (the agents' reports), not what was last computed,
// or a returning manager could push increases on top of unknown limits.
type Plan struct {
	Decreases []Push
	Increases []Push
}

// Ordered returns the pushes in the order to apply them: decreases, then
// increases.
func (p Plan) Ordered() []Push {
	return append(append(make([]Push, 0, len(p.Decreases)+len(p.Increases)), p.Decreases...), p.Increases...)
}

// PlanPushes compares the limits in force (old) with the new ones and
// returns the changes, decreases before increases, each list sorted by
// host then address (so a consumer can batch per host). Unchanged limits
// are left out. A key only in old is a removal (a decrease); a key only
// in new is an addition (an increase).
func PlanPushes(old, new map[HostKey]uint64) Plan {
	var p Plan
	for k, o := range old {
		n, ok := new[k]
		switch {
		case !ok:
			p.Decreases = append(p.Decreases, Push{HostKey: k, Old: o, Removed: true})
		case n < o:
			p.Decreases = append(p.Decreases, Push{HostKey: k, Old: o, New: n})
		case n > o:
			p.Increases = append(p.Increases, Push{HostKey: k, Old: o, New: n})
		}
	}
	for k, n := range new {
		if _, ok := old[k]; !ok {
			p.Increases = append(p.Increases, Push{HostKey: k, New: n, Added: true})
		}
	}
	slices.SortFunc(p.Decreases, cmpPush)
	slices.SortFunc(p.Increases, cmpPush)
	return p
}

func cmpPush(x, y Push) int {
	if c := cmp.Compare(x.Host, y.Host); c != 0 {
		return c
	}
	return x.Addr.Compare(y.Addr)
}

// Limit is one entry of a per-host limit table kept as a slice.
type Limit struct {
	HostKey
	Bps uint64
}

// CompareLimits orders a limit table for PlanSorted: by host, then
// address.
func CompareLimits(x, y Limit) int {
	if c := cmp.Compare(x.Host, y.Host); c != 0 {
		return c
	}
	return x.Addr.Compare(y.Addr)
}

// PlanSorted is PlanPushes for limit tables kept as slices sorted by
// CompareLimits (a manager with hundreds of thousands of host limits
// merges in one pass instead of hashing every key twice; see
// BENCHMARKS.md). The plan is the same as PlanPushes' for the same
// tables. Errors: a table not sorted, or a key twice.
func PlanSorted(old, new []Limit) (Plan, error) {
	for _, t := range []struct {
		name string
		l    []Limit
	}{{"old", old}, {"new", new}} {
		for i := 1; i < len(t.l); i++ {
			if CompareLimits(t.l[i-1], t.l[i]) >= 0 {
				return Plan{}, fmt.Errorf("push plan: %s limits not sorted or repeated at %d (%v on %s)", t.name, i, t.l[i].Addr, t.l[i].Host)
			}
		}
	}
	var p Plan
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		var c int
		switch {
		case i == len(old):
			c = 1
		case j == len(new):
			c = -1
		default:
			c = CompareLimits(old[i], new[j])
		}
		switch {
		case c < 0:
			p.Decreases = append(p.Decreases, Push{HostKey: old[i].HostKey, Old: old[i].Bps, Removed: true})
			i++
		case c > 0:
			p.Increases = append(p.Increases, Push{HostKey: new[j].HostKey, New: new[j].Bps, Added: true})
			j++
		default:
			o, n := old[i].Bps, new[j].Bps
			if n < o {
				p.Decreases = append(p.Decreases, Push{HostKey: new[j].HostKey, Old: o, New: n})
			} else if n > o {
				p.Increases = append(p.Increases, Push{HostKey: new[j].HostKey, Old: o, New: n})
			}
			i++
			j++
		}
	}
	return p, nil
}

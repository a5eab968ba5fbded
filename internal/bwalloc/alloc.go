package bwalloc

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
)

// EIP is one member of a bandwidth package as the allocator sees it: the
// package's terms for it and its demand estimate for this round.
type EIP struct {
	Addr netip.Addr
	// Min is guaranteed when demanded: the EIP gets at least
	// min(Min, Demand) (bits/s).
	Min uint64
	// Max caps the EIP's limit (bits/s); 0 means no cap but the capacity.
	Max uint64
	// Weight is the EIP's share of contended capacity; 0 counts as 1.
	Weight uint32
	// Demand is the estimate for this round (Estimator.Demand), bits/s.
	Demand uint64
}

// Grant is one EIP's allocation.
type Grant struct {
	Addr netip.Addr
	// Limit is the EIP's limit in bits/s, to be split over its hosts.
	Limit uint64
	// Want is the demand the allocator tried to meet: Demand capped by Max
	// and the capacity.
	Want uint64
	// Guarantee is the floor the EIP got before any sharing:
	// min(Min, Want), scaled down only if the package's guarantees
	// exceed its capacity (Result.MinsScaled).
	Guarantee uint64
}

// Unmet reports whether the EIP wanted more than it got.
func (g Grant) Unmet() bool { return g.Limit < g.Want }

// Options tune Allocator.Package.
type Options struct {
	// HoldSpare keeps capacity that no EIP demands unallocated instead of
	// handing it out as headroom. The default (false) hands it out: an EIP
	// whose demand rises can use its headroom at once, before the next
	// round, and the total still never exceeds the capacity.
	HoldSpare bool
}

// Result is one package's allocation.
type Result struct {
	// Grants, one per EIP, sorted by address (whatever the input order).
	Grants []Grant
	// Contended is true when the EIPs want more than the capacity.
	Contended bool
	// Level is, when Contended, the water level: bits/s per unit of
	// weight that every EIP with unmet demand gets (unless its guarantee
	// gives it more). 0 when not contended.
	Level float64
	// Allocated is the sum of the limits (≤ capacity).
	Allocated uint64
	// MinsScaled is true when the guarantees (min(Min, Want)) summed to
	// more than the capacity and were scaled down in proportion. Package
	// validation refuses mins above capacity, so this means the input was
	// not validated.
	MinsScaled bool
}

// MaxRate bounds a package's capacity (2^53 bits/s, about 9 Pbit/s):
// up to it the water level computed in float64 is exact to a bit/s, so a
// limit is never more than a couple of bits/s below its exact share.
const MaxRate = 1 << 53

// Allocator holds scratch space so that allocating many packages in a
// round does not allocate memory per package. The zero value is ready.
// It is not safe for concurrent use; use one per goroutine.
type Allocator struct {
	order  []int32
	eips   []EIP
	lo, hi []uint64
	w      []float64
	out    []uint64
	head   []uint64
	ev     []event
}

// event is a breakpoint of the water-filling sweep: item i enters the
// sloped part of clamp(λ·w, lo, hi) at λ = lo/w and leaves it at hi/w.
type event struct {
	v     float64
	i     int32
	leave bool
}

// Package allocates capacity (bits/s) over eips by weighted max-min
// fairness with per-EIP minimums and caps (docs/bandwidth.md):
//
//	want_i  = min(Demand_i, Max_i, capacity)
//	g_i     = min(Min_i, want_i)
//	limit_i = clamp(λ·w_i, g_i, want_i)   with λ chosen so Σ limit = capacity
//
// when the EIPs want more than the capacity (contended); otherwise every
// EIP gets its want and the spare capacity is handed out as additive
// headroom by weight, each EIP's headroom clamp(μ·w_i, 0, cap_i − want_i),
// cap_i = min(Max_i, capacity) (unless opts.HoldSpare). Limits are whole
// bits/s rounded down, so a few bits/s (fewer than the EIPs) may be left
// unallocated. The result depends only on the set of EIPs, not their
// order, and is appended to dst[:0].
//
// Errors: a capacity above MaxRate, an address given twice, or Min > Max
// (with Max set).
func (a *Allocator) Package(capacity uint64, eips []EIP, opts Options, dst []Grant) (Result, error) {
	n := len(eips)
	res := Result{Grants: dst[:0]}
	if capacity > MaxRate {
		return res, fmt.Errorf("bandwidth allocation: capacity %d bits/s above the most the allocator handles, %d", capacity, uint64(MaxRate))
	}
	if n == 0 {
		return res, nil
	}
	a.sortInput(eips)
	es := a.eips
	for k := range es {
		e := &es[k]
		if k > 0 && es[k-1].Addr == e.Addr {
			return res, fmt.Errorf("bandwidth allocation: EIP %v given twice", e.Addr)
		}
		if !e.Addr.IsValid() {
			return res, fmt.Errorf("bandwidth allocation: EIP with no address")
		}
		if e.Max != 0 && e.Min > e.Max {
			return res, fmt.Errorf("bandwidth allocation: EIP %v: min %d above max %d", e.Addr, e.Min, e.Max)
		}
	}
	a.lo = grow(a.lo, n)
	a.hi = grow(a.hi, n)
	a.out = grow(a.out, n)
	a.w = grow(a.w, n)
	var sumWant, sumG uint64
	var wantOverflow bool
	for k := range es {
		e := &es[k]
		c := capOf(e.Max, capacity)
		want := min(e.Demand, c)
		a.hi[k] = want
		a.lo[k] = min(e.Min, want)
		a.w[k] = float64(max(e.Weight, 1))
		var carry uint64
		sumWant, carry = bits.Add64(sumWant, want, 0)
		wantOverflow = wantOverflow || carry != 0
		sumG, carry = bits.Add64(sumG, a.lo[k], 0)
		if carry != 0 {
			sumG = math.MaxUint64 // scaled below, still ≤ capacity in sum
		}
	}
	if sumG > capacity {
		res.MinsScaled = true
		var s uint64
		for k := range es {
			hi, lo := bits.Mul64(a.lo[k], capacity)
			a.lo[k], _ = bits.Div64(hi, lo, sumG)
			s += a.lo[k]
		}
		sumG = s
	}
	if wantOverflow || sumWant > capacity {
		res.Contended = true
		res.Level = a.waterfill(a.lo[:n], a.hi[:n], a.w[:n], capacity, a.out[:n])
	} else {
		copy(a.out, a.hi[:n])
		spare := capacity - sumWant
		if !opts.HoldSpare && spare > 0 {
			// Headroom: lo 0, hi cap − want, level μ over the weights.
			for k := range es {
				a.lo[k] = 0
				a.hi[k] = capOf(es[k].Max, capacity) - a.out[k]
			}
			a.head = grow(a.head, n)
			head := a.head[:n]
			a.waterfill(a.lo[:n], a.hi[:n], a.w[:n], spare, head)
			for k := range es {
				a.out[k] += head[k]
			}
		}
		// Restore the reported guarantee for the grants below.
		for k := range es {
			c := capOf(es[k].Max, capacity)
			a.lo[k] = min(es[k].Min, min(es[k].Demand, c))
		}
	}
	for k := range es {
		c := capOf(es[k].Max, capacity)
		res.Grants = append(res.Grants, Grant{
			Addr:      es[k].Addr,
			Limit:     a.out[k],
			Want:      min(es[k].Demand, c),
			Guarantee: a.lo[k],
		})
		res.Allocated += a.out[k]
	}
	return res, nil
}

// capOf is an EIP's ceiling: its Max when set, never above the capacity.
func capOf(maxBps, capacity uint64) uint64 {
	if maxBps == 0 {
		return capacity
	}
	return min(maxBps, capacity)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// sortInput copies eips into a.eips sorted by address (a no-op sort when
// the caller keeps them sorted, as the manager does).
func (a *Allocator) sortInput(eips []EIP) {
	a.eips = append(a.eips[:0], eips...)
	if !slices.IsSortedFunc(a.eips, cmpEIP) {
		slices.SortFunc(a.eips, cmpEIP)
	}
}

func cmpEIP(x, y EIP) int { return x.Addr.Compare(y.Addr) }

// waterfill sets out[i] = ⌊clamp(λ·w[i], lo[i], hi[i])⌋ for the λ at which
// the (real-valued) sum equals target, and returns λ. It needs
// Σ lo ≤ target; when Σ hi ≤ target every out[i] = hi[i] and λ is 0. The
// integer sum never exceeds target: if float rounding pushes it over, the
// excess is taken back from the first items (in index order, i.e. by
// address) that are above their lo.
//
// The sum f(λ) = Σ clamp(λ·w_i, lo_i, hi_i) is continuous, piecewise
// linear and non-decreasing; the sweep walks its 2n breakpoints in order
// keeping f = fixed + λ·W (fixed: the items not yet in their sloped part,
// W: the weight of those in it) and solves the linear piece that crosses
// target. O(n log n).
func (a *Allocator) waterfill(lo, hi []uint64, w []float64, target uint64, out []uint64) float64 {
	var sumHi, sumLo uint64
	overflow := false
	for i := range hi {
		var c uint64
		sumHi, c = bits.Add64(sumHi, hi[i], 0)
		overflow = overflow || c != 0
		sumLo += lo[i]
	}
	if !overflow && sumHi <= target {
		copy(out, hi)
		return 0
	}
	ev := a.ev[:0]
	for i := range lo {
		if lo[i] < hi[i] {
			ev = append(ev,
				event{v: float64(lo[i]) / w[i], i: int32(i)},
				event{v: float64(hi[i]) / w[i], i: int32(i), leave: true})
		}
	}
	slices.SortFunc(ev, func(x, y event) int {
		if c := cmp.Compare(x.v, y.v); c != 0 {
			return c
		}
		if c := cmp.Compare(x.i, y.i); c != 0 {
			return c
		}
		if x.leave == y.leave {
			return 0
		}
		if x.leave {
			return 1
		}
		return -1
	})
	a.ev = ev
	t := float64(target)
	fixed := float64(sumLo)
	W := 0.0
	lambda := math.NaN()
	for _, e := range ev {
		if W > 0 && fixed+e.v*W >= t {
			lambda = (t - fixed) / W
			break
		}
		if e.leave {
			fixed += float64(hi[e.i])
			W -= w[e.i]
		} else {
			fixed -= float64(lo[e.i])
			W += w[e.i]
		}
	}
	if math.IsNaN(lambda) {
		// Float rounding missed the crossing: it lies at the last breakpoint.
		lambda = ev[len(ev)-1].v
	}
	var sum uint64
	for i := range out {
		x := lambda * w[i]
		switch {
		case x <= float64(lo[i]):
			out[i] = lo[i]
		case x >= float64(hi[i]):
			out[i] = hi[i]
		default:
			out[i] = min(max(uint64(x), lo[i]), hi[i])
		}
		sum += out[i]
	}
	for i := 0; sum > target && i < len(out); i++ {
		take := min(sum-target, out[i]-lo[i])
		out[i] -= take
		sum -= take
	}
	return lambda
}

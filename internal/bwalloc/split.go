package bwalloc

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// DefaultHostFloor is the share of an EIP's limit split equally over its
// hosts before the rest follows demand.
const DefaultHostFloor = 0.1

// HostShare is one host's (or edge's) part of an EIP's limit. Demand is
// the input, echoed back; Limit the share.
type HostShare struct {
	Host   string
	Demand uint64
	Limit  uint64
}

// SplitHosts splits an EIP's limit (bits/s) over the hosts that carry it,
// appending to dst[:0] one share per host sorted by host name:
//
//	floor_h = ⌊limit × floorFrac⌋ / n        (equal for every host)
//	share_h = floor_h + rest × Demand_h / Σ Demand
//
// where rest is what the floors leave; with no demand anywhere the rest
// is split equally. Fractions are apportioned by largest remainder (ties
// to the host that sorts first), so the shares sum exactly to limit. The
// floor keeps a host that just started carrying the EIP (no demand
// measured yet) from being starved, so its demand can show and grow.
// Pass per-host demand estimates (an Estimator keyed by EIP and host),
// not raw rates, so a host pinned at its share probes upward.
//
// Errors: an empty or repeated host name, floorFrac outside [0, 1].
func SplitHosts(dst []HostShare, limit uint64, hosts []HostShare, floorFrac float64) ([]HostShare, error) {
	dst = append(dst[:0], hosts...)
	if !(floorFrac >= 0 && floorFrac <= 1) {
		return dst[:0], fmt.Errorf("host split: floor %v: must be in [0, 1]", floorFrac)
	}
	n := uint64(len(dst))
	if n == 0 {
		return dst, nil
	}
	if !slices.IsSortedFunc(dst, cmpHost) {
		slices.SortFunc(dst, cmpHost)
	}
	for i := range dst {
		if dst[i].Host == "" {
			return dst[:0], fmt.Errorf("host split: host %d has no name", i)
		}
		if i > 0 && dst[i].Host == dst[i-1].Host {
			return dst[:0], fmt.Errorf("host split: host %q given twice", dst[i].Host)
		}
	}
	per := mulFloor(limit, floorFrac) / n
	rest := limit - per*n
	// Σ demand must fit 64 bits: halve every demand until it does (the
	// proportions barely change).
	shift := uint(0)
	var total uint64
	for {
		total = 0
		over := false
		for i := range dst {
			var c uint64
			total, c = bits.Add64(total, dst[i].Demand>>shift, 0)
			over = over || c != 0
		}
		if !over {
			break
		}
		shift++
	}
	var given uint64
	if total == 0 {
		q := rest / n
		for i := range dst {
			dst[i].Limit = per + q
		}
		given = q * n
		for i := 0; given < rest; i++ {
			dst[i].Limit++
			given++
		}
		return dst, nil
	}
	// Largest remainder: quota_h = rest·d_h/total exactly, in 128 bits.
	type rem struct {
		r uint64
		i int
	}
	var rems []rem
	if len(dst) <= 16 {
		var buf [16]rem
		rems = buf[:0]
	}
	for i := range dst {
		d := dst[i].Demand >> shift
		hi, lo := bits.Mul64(rest, d)
		q, r := bits.Div64(hi, lo, total) // hi < total as d ≤ total
		dst[i].Limit = per + q
		given += q
		rems = append(rems, rem{r, i})
	}
	if given < rest {
		slices.SortFunc(rems, func(x, y rem) int {
			if c := cmp.Compare(y.r, x.r); c != 0 {
				return c
			}
			return cmp.Compare(x.i, y.i)
		})
		for k := 0; given < rest; k++ {
			dst[rems[k].i].Limit++
			given++
		}
	}
	return dst, nil
}

func cmpHost(x, y HostShare) int { return cmp.Compare(x.Host, y.Host) }

// mulFloor is ⌊x·f⌋ for f in [0, 1], never above x.
func mulFloor(x uint64, f float64) uint64 {
	p := float64(x) * f
	if p >= float64(x) {
		return x
	}
	return uint64(p)
}

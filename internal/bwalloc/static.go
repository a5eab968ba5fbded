package bwalloc

// StaticSplit is the fallback an agent applies when it has heard from no
// manager for its grace period (issue 10 part 6): the package's capacity
// shared by weight alone, with no demand information,
//
//	limit_i = clamp(λ·w_i, Min_i, cap_i)     Σ limit = capacity
//
// i.e. capacity × w_i / Σ w when no min or max binds. It is the
// allocation in which every EIP demands without bound, so it honours
// min, max and weight as Allocator.Package does; Demand is ignored. The
// result is the same on every agent that has the same package, so each
// can compute its own EIPs' limits alone and the total stays ≤ capacity.
// An EIP on several hosts divides its static limit over them with
// SplitHosts and zero demands (an equal split).
func StaticSplit(capacity uint64, eips []EIP) (Result, error) {
	var a Allocator
	in := make([]EIP, len(eips))
	for i, e := range eips {
		e.Demand = capOf(e.Max, capacity)
		in[i] = e
	}
	return a.Package(capacity, in, Options{HoldSpare: true}, nil)
}

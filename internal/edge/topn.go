package edge

// topN returns the n greatest of items by less (x before y: x is the
// lesser), in no order: a bounded min-heap of n over one pass (n log n
// memory-free of the rest: per-EIP counters, connection-table
// occupancy).
func topN[T any](items []T, n int, less func(x, y T) bool) []T {
	h := make([]T, 0, max(0, min(n, len(items))))
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && less(h[l], h[m]) {
				m = l
			}
			if l+1 < len(h) && less(h[l+1], h[m]) {
				m = l + 1
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, e := range items {
		switch {
		case len(h) < n:
			h = append(h, e)
			for i := len(h) - 1; i > 0 && less(h[i], h[(i-1)/2]); i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
		case n > 0 && less(h[0], e):
			h[0] = e
			down(0)
		}
	}
	return h
}

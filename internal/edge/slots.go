package edge

import "math/bits"

// slots allocates per-EIP counter slots (indexes into the data plane's
// counter array) from a bitmap: 128 KiB for a million routes.
type slots struct {
	used []uint64
	hint int // first word that may have a free bit
}

func (s *slots) reset() { s.used, s.hint = s.used[:0], 0 }

func (s *slots) use(i uint32) {
	w := int(i / 64)
	for len(s.used) <= w {
		s.used = append(s.used, 0)
	}
	s.used[w] |= 1 << (i % 64)
}

func (s *slots) free(i uint32) {
	w := int(i / 64)
	if w < len(s.used) {
		s.used[w] &^= 1 << (i % 64)
		s.hint = min(s.hint, w)
	}
}

// alloc returns the lowest free slot.
func (s *slots) alloc() uint32 {
	for w := s.hint; w < len(s.used); w++ {
		if s.used[w] != ^uint64(0) {
			b := bits.TrailingZeros64(^s.used[w])
			s.used[w] |= 1 << b
			s.hint = w
			return uint32(w*64 + b)
		}
	}
	s.used = append(s.used, 1)
	s.hint = len(s.used) - 1
	return uint32((len(s.used) - 1) * 64)
}

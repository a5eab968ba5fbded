// Package maglev computes Maglev consistent-hashing lookup tables for
// azgate's L4 load balancer (D. E. Eisenbud et al., "Maglev: A Fast and
// Reliable Software Network Load Balancer", NSDI'16, section 3.4).
//
// Every edge node builds the same table from the same (backends, M, seed),
// and the data plane sends a flow to Entry[flowhash % M]. The package is
// pure computation: no I/O, standard library only.
//
// # Permutations
//
// Backend b's preference list is the permutation
//
//	perm_b(k) = (offset_b + k*skip_b) mod M,   k = 0 .. M-1
//	offset_b  = h(0x00, seed, key) mod M
//	skip_b    = h(0x01, seed, key) mod (M-1) + 1
//
// where h(d, seed, key) = fmix64(FNV-1a-64(d || seed as 4 bytes
// little-endian || key bytes)) and fmix64 is MurmurHash3's 64-bit
// finalizer. The leading byte d makes the two hashes independent; the
// finalizer gives full avalanche, which FNV-1a alone lacks for short keys
// that differ only in their last bytes ("b0001", "b0002"). M is prime, so
// every skip in [1, M-1] is coprime with M and each perm_b visits every slot
// exactly once; it also makes skip_b invertible mod M, which Fail uses.
//
// # Population and weights
//
// Backends take turns; on its turn a backend claims the first slot of its
// permutation that is still free. Which backend takes the next turn is
// decided like a divisor (Sainte-Laguë/Webster) apportionment: backend b,
// having had t_b turns, next bids (2*t_b + 1) / weight_b, and the lowest
// bid wins, ties going to the lower backend index. With equal weights this
// is exactly the round robin of the paper; with weights, each backend gets
// turns, and therefore slots (one slot per turn), in proportion to its
// weight, to within about one slot. Weight 0 takes no turns: a drained
// backend owns no slot. All comparisons are exact integer cross-products,
// so the result does not depend on floating point. Cilium's pkg/maglev
// weights backends the same way in spirit (more turns for heavier
// backends); the exact turn order here is azgate's own.
//
// # Failures
//
// Table.Fail repoints only the slots of failed backends, each to the
// healthy backend whose permutation reaches that slot earliest (see Fail),
// so flows of healthy backends never move. Planned changes (adding,
// removing, reweighting) are a new Build, which moves few flows beyond the
// changed backend's own share when M ≥ 100 × N (measured by Measure).
package maglev

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strings"
)

const (
	// DefaultSize is the default table size M: prime, and at least 100
	// slots per backend for up to 655 backends.
	DefaultSize = 65537

	// MaxSize is the largest table size Build accepts (2^26 slots, 256 MiB
	// of int32 entries): slot numbers and their products with a modular
	// inverse then fit comfortably in 64 bits, and larger maps make no sense
	// for a per-service BPF array.
	MaxSize = 1 << 26

	// SlotsPerBackend is the minimum ratio M / N. The paper (section 5.3)
	// and Cilium recommend M ≫ N; at 100 slots per backend the load
	// imbalance of an equal-weight table is below 1 %.
	SlotsPerBackend = 100
)

// Backend is one destination of a service.
type Backend struct {
	// Key is the backend's stable identity (e.g. "az1-h1/g1:8080"): its
	// permutation is derived from it, so the same key keeps the same slots
	// across rebuilds and nodes.
	Key string
	// Weight is the backend's relative share of the slots; 0 means drained
	// (no slots at all).
	Weight uint32
}

// Table is a Maglev lookup table. Treat it as read only: Fail returns a new
// table.
type Table struct {
	M    uint64 // table size, prime
	Seed uint32 // seed of the permutation hash

	// Backends sorted by Key in byte-wise order (Go string comparison).
	// Entry refers to backends by their index in this order, and the turn
	// order of the population and Fail's tie-break follow it, so every node
	// computes the same table whatever order it received the backends in.
	// This order MUST NOT be changed: changing it changes the table on
	// upgraded nodes only, and edge nodes would then disagree about where
	// flows go.
	Backends []Backend

	// Entry has M slots, each an index into Backends; -1 only when no
	// backend has a weight above 0.
	Entry []int32

	perm   []perm  // per backend, in Backends order
	built  []int32 // Entry as Build made it (shared between tables, never written)
	failed []bool  // per backend: failed through Fail (cumulative)
}

// perm is one backend's permutation: perm(k) = (offset + k*skip) mod M, and
// inv = skip⁻¹ mod M gives the position of a slot: k = (j - offset) * inv.
type perm struct{ offset, skip, inv uint32 }

// Build computes the table of size m for backends (in any order). It
// returns an error naming the problem when m is not a prime, is larger
// than MaxSize or smaller than 100 × len(backends) (drained backends count:
// draining one must not make a valid configuration invalid), or when a key
// is empty or appears twice. Without backends, or when every weight is 0,
// every Entry is -1.
func Build(backends []Backend, m uint64, seed uint32) (*Table, error) {
	if m > MaxSize {
		return nil, fmt.Errorf("table size %d is too large: the maximum is %d (2^26)", m, MaxSize)
	}
	if !IsPrime(m) {
		return nil, fmt.Errorf("table size %d is not prime", m)
	}
	for i, b := range backends {
		if b.Key == "" {
			return nil, fmt.Errorf("backend %d (weight %d) has an empty key", i, b.Weight)
		}
	}
	bs := slices.Clone(backends)
	slices.SortFunc(bs, func(a, b Backend) int { return strings.Compare(a.Key, b.Key) })
	for i := 1; i < len(bs); i++ {
		if bs[i].Key == bs[i-1].Key {
			return nil, fmt.Errorf("duplicate backend key %q", bs[i].Key)
		}
	}
	if n := uint64(len(bs)); m < SlotsPerBackend*n {
		need := SlotsPerBackend * n
		if need > MaxSize {
			return nil, fmt.Errorf("table size %d is smaller than %d x %d backends, and %d backends need more than the maximum table size %d",
				m, SlotsPerBackend, n, n, MaxSize)
		}
		return nil, fmt.Errorf("table size %d is smaller than %d x %d backends; use a prime of at least %d, e.g. %d",
			m, SlotsPerBackend, n, need, nextPrime(need))
	}
	t := &Table{
		M:        m,
		Seed:     seed,
		Backends: bs,
		perm:     permutations(bs, m, seed),
		failed:   make([]bool, len(bs)),
	}
	t.built = populate(bs, t.perm, m, true)
	t.Entry = slices.Clone(t.built)
	return t, nil
}

// permutations derives every backend's offset and skip (see the package
// comment) and the inverse of its skip.
func permutations(bs []Backend, m uint64, seed uint32) []perm {
	ps := make([]perm, len(bs))
	for i, b := range bs {
		offset := keyHash(0, seed, b.Key) % m
		skip := uint64(1)
		if m > 1 {
			skip = keyHash(1, seed, b.Key)%(m-1) + 1
		}
		ps[i] = perm{offset: uint32(offset), skip: uint32(skip), inv: uint32(invMod(skip, m))}
	}
	return ps
}

// keyHash is fmix64(FNV-1a-64(domain || seed little-endian || key)).
func keyHash(domain byte, seed uint32, key string) uint64 {
	h := fnv.New64a()
	var pre [5]byte
	pre[0] = domain
	binary.LittleEndian.PutUint32(pre[1:], seed)
	h.Write(pre[:])
	h.Write([]byte(key))
	return fmix64(h.Sum64())
}

// fmix64 is the 64-bit finalizer of Austin Appleby's MurmurHash3.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// invMod returns a⁻¹ mod m for a coprime with m (extended Euclid).
func invMod(a, m uint64) uint64 {
	if m == 1 {
		return 0
	}
	t, newT := int64(0), int64(1)
	r, newR := int64(m), int64(a%m)
	for newR != 0 {
		q := r / newR
		t, newT = newT, t-q*newT
		r, newR = newR, r-q*newR
	}
	if t < 0 {
		t += int64(m)
	}
	return uint64(t)
}

// populate fills the table: the backend with the lowest bid (2t+1)/w takes
// the next turn (ties to the lower index) and claims the next free slot of
// its permutation. Each turn fills exactly one slot, so the slot counts are
// the Sainte-Laguë apportionment of M by weight. O(M log N) for the turn
// order plus the permutation walk (about M ln M probes in total, as in the
// paper); memory O(M + N). fast allows the round-robin shortcut for equal
// weights.
func populate(bs []Backend, ps []perm, m uint64, fast bool) []int32 {
	entry := make([]int32, m)
	for j := range entry {
		entry[j] = -1
	}
	n := len(bs)
	w := make([]uint64, n)
	turns := make([]uint64, n)
	next := make([]uint32, n) // next slot of each backend's permutation to try
	heap := make([]int32, 0, n)
	for i, b := range bs {
		w[i] = uint64(b.Weight)
		next[i] = ps[i].offset
		if b.Weight > 0 {
			heap = append(heap, int32(i))
		}
	}
	if len(heap) == 0 {
		return entry
	}
	// less: does backend a bid lower than b? (2ta+1)/wa < (2tb+1)/wb by
	// cross-multiplication: 2t+1 ≤ 2^27+1 and w < 2^32, so no overflow.
	less := func(a, b int32) bool {
		x := (2*turns[a] + 1) * w[b]
		y := (2*turns[b] + 1) * w[a]
		return x < y || (x == y && a < b)
	}
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(heap) {
				return
			}
			c := l
			if r := l + 1; r < len(heap) && less(heap[r], heap[l]) {
				c = r
			}
			if !less(heap[c], heap[i]) {
				return
			}
			heap[i], heap[c] = heap[c], heap[i]
			i = c
		}
	}
	// With equal weights the bids only ever tie or differ by whole turns,
	// so the turn order is the paper's plain round robin in index order:
	// skip the heap (three quarters of the time at N = 1000). The tests hold
	// both paths equal.
	roundRobin := fast
	for _, i := range heap {
		roundRobin = roundRobin && w[i] == w[heap[0]]
	}
	if !roundRobin {
		for i := len(heap)/2 - 1; i >= 0; i-- {
			down(i)
		}
	}
	rr := 0
	// Probe a bitmap of taken slots (M/8 bytes, cache resident) rather
	// than entry itself.
	taken := make([]uint64, (m+63)/64)
	mm := uint32(m)
	for filled := uint64(0); filled < m; filled++ {
		b := heap[0]
		if roundRobin {
			b = heap[rr]
			if rr++; rr == len(heap) {
				rr = 0
			}
		}
		skip := ps[b].skip
		c := next[b]
		for taken[c>>6]&(1<<(c&63)) != 0 {
			if c += skip; c >= mm {
				c -= mm
			}
		}
		taken[c>>6] |= 1 << (c & 63)
		entry[c] = b
		if c += skip; c >= mm {
			c -= mm
		}
		next[b] = c
		if !roundRobin {
			turns[b]++
			down(0)
		}
	}
	return entry
}

// Fail returns a copy of t in which the backends named in failed (keys
// mapped to true; keys not in the table are ignored), together with those
// already failed in t, are out of service. Only their slots change: each
// goes to its next choice, the healthy backend (weight > 0, not failed)
// whose permutation reaches the slot earliest,
//
//	pos_b(j) = (j - offset_b) * skip_b⁻¹ mod M,
//
// ties going to the lower backend index: of the healthy backends, the one
// that prefers the slot most. The permutations are independent, so a
// failed backend's slots spread evenly over the healthy backends (weights
// are not considered: a weight-1 backend takes as many as a weight-10
// one). No slot of a healthy backend changes, so none of their flows move.
// O(M + failed slots × N).
//
// The result depends only on the built table and the union of the failed
// sets, not on the order failures were reported: Fail(A).Fail(B) equals
// Fail(A ∪ B), so every node that saw the same failures forwards alike.
// Fail of an empty set returns a table identical to t. If no healthy
// backend is left, every slot goes back to the backend Build gave it (even
// slots an earlier Fail had moved): forwarding to a backend that may be
// dead beats forwarding nowhere. Failures cannot be undone through Fail:
// recovery, like any planned change, is a new Build.
//
// Fail also works on a Table assembled by hand (its Entry is then taken as
// the built table).
func (t *Table) Fail(failed map[string]bool) *Table {
	n := len(t.Backends)
	nt := &Table{
		M:        t.M,
		Seed:     t.Seed,
		Backends: slices.Clone(t.Backends),
		perm:     t.perm,
		built:    t.built,
		failed:   make([]bool, n),
	}
	if t.M == 0 || uint64(len(t.Entry)) != t.M {
		nt.Entry = slices.Clone(t.Entry) // not a table Build could make
		return nt
	}
	if len(nt.perm) != n {
		nt.perm = permutations(nt.Backends, t.M, t.Seed)
	}
	if nt.built == nil {
		nt.built = slices.Clone(t.Entry)
	}
	var healthy []int32
	anyFailed := false
	for i, b := range nt.Backends {
		nt.failed[i] = (i < len(t.failed) && t.failed[i]) || failed[b.Key]
		anyFailed = anyFailed || nt.failed[i]
		if b.Weight > 0 && !nt.failed[i] {
			healthy = append(healthy, int32(i))
		}
	}
	nt.Entry = slices.Clone(nt.built)
	if !anyFailed || len(healthy) == 0 {
		return nt
	}
	m := t.M
	for j, b := range nt.Entry {
		if b < 0 || int(b) >= n || !nt.failed[b] {
			continue
		}
		best, bestPos := int32(-1), m
		for _, h := range healthy {
			p := nt.perm[h]
			d := uint64(j) + m - uint64(p.offset)
			if d >= m {
				d -= m
			}
			if pos := d * uint64(p.inv) % m; pos < bestPos {
				best, bestPos = h, pos
			}
		}
		nt.Entry[j] = best
	}
	return nt
}

// Lookup returns the backend of a flow hash: Entry[hash % M]. It reports
// false when the slot has no backend (no backend with weight > 0).
func (t *Table) Lookup(hash uint32) (Backend, bool) {
	if t.M == 0 || uint64(len(t.Entry)) != t.M {
		return Backend{}, false
	}
	i := t.Entry[uint64(hash)%t.M]
	if i < 0 || int(i) >= len(t.Backends) {
		return Backend{}, false
	}
	return t.Backends[i], true
}

// Checksum is a digest of the table operators can compare across nodes:
// FNV-1a 64 over the little-endian encoding
//
//	M (8 bytes) | Seed (4) | len(Backends) (4)
//	| for each backend: len(Key) (4) | Key | Weight (4)
//	| for each Entry: int32 (4, two's complement)
//
// Two nodes with the same checksum forward every flow hash alike.
func (t *Table) Checksum() uint64 {
	h := fnv.New64a()
	buf := make([]byte, 0, 4096)
	buf = binary.LittleEndian.AppendUint64(buf, t.M)
	buf = binary.LittleEndian.AppendUint32(buf, t.Seed)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(t.Backends)))
	for _, b := range t.Backends {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(b.Key)))
		buf = append(buf, b.Key...)
		buf = binary.LittleEndian.AppendUint32(buf, b.Weight)
		if len(buf) >= 4096-4 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	for _, e := range t.Entry {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(e))
		if len(buf) >= 4096-4 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return h.Sum64()
}

// Shares returns the number of slots of every backend, by key (0 for
// drained backends).
func Shares(t *Table) map[string]int {
	s := make(map[string]int, len(t.Backends))
	for _, b := range t.Backends {
		s[b.Key] = 0
	}
	for _, e := range t.Entry {
		if e >= 0 && int(e) < len(t.Backends) {
			s[t.Backends[e].Key]++
		}
	}
	return s
}

// IsPrime reports whether n is prime (deterministic Miller–Rabin, exact for
// every uint64).
func IsPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	small := [...]uint64{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}
	for _, p := range small {
		if n%p == 0 {
			return n == p
		}
	}
	d, s := n-1, 0
	for d%2 == 0 {
		d /= 2
		s++
	}
	// The first twelve primes as bases decide every n < 3.3 × 10^24
	// (Sorenson and Webster, 2015).
next:
	for _, a := range small {
		x := powMod(a, d, n)
		if x == 1 || x == n-1 {
			continue
		}
		for r := 1; r < s; r++ {
			x = mulMod(x, x, n)
			if x == n-1 {
				continue next
			}
		}
		return false
	}
	return true
}

func mulMod(a, b, m uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	_, r := bits.Div64(hi%m, lo, m)
	return r
}

func powMod(a, e, m uint64) uint64 {
	r := uint64(1)
	a %= m
	for e > 0 {
		if e&1 == 1 {
			r = mulMod(r, a, m)
		}
		a = mulMod(a, a, m)
		e >>= 1
	}
	return r
}

// nextPrime returns the smallest prime ≥ n.
func nextPrime(n uint64) uint64 {
	for !IsPrime(n) {
		n++
	}
	return n
}

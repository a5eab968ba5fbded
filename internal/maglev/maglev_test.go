package maglev

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/flowhash"
)

var update = flag.Bool("update", false, "rewrite testdata/golden_*.txt from the current code")

// equal returns n backends "b0000", "b0001", … of weight 1.
func equal(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{Key: fmt.Sprintf("b%04d", i), Weight: 1}
	}
	return bs
}

func mustBuild(t testing.TB, bs []Backend, m uint64, seed uint32) *Table {
	t.Helper()
	tab, err := Build(bs, m, seed)
	if err != nil {
		t.Fatalf("Build(%d backends, %d, %d): %v", len(bs), m, seed, err)
	}
	return tab
}

func keyAt(t *Table, j int) string {
	if e := t.Entry[j]; e >= 0 {
		return t.Backends[e].Key
	}
	return ""
}

// render is the golden file format: parameters, each backend's permutation
// parameters (pinning the permutation hash), shares, checksum, then the
// entries twenty to a line.
func render(t *Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# azgate maglev table; regenerate: go test ./internal/maglev -run TestGolden -update\n")
	fmt.Fprintf(&b, "M %d\nSeed %d\nChecksum %#016x\n", t.M, t.Seed, t.Checksum())
	sh := Shares(t)
	for i, be := range t.Backends {
		p := t.perm[i]
		fmt.Fprintf(&b, "backend %d key=%q weight=%d offset=%d skip=%d failed=%v slots=%d\n",
			i, be.Key, be.Weight, p.offset, p.skip, t.failed[i], sh[be.Key])
	}
	b.WriteString("entry (slot: backend index)\n")
	for j := 0; j < len(t.Entry); j += 20 {
		fmt.Fprintf(&b, "%4d:", j)
		for _, e := range t.Entry[j:min(j+20, len(t.Entry))] {
			fmt.Fprintf(&b, " %d", e)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	three := []Backend{{"az1-h1/g1:8080", 1}, {"az2-h7/g3:8080", 1}, {"az3-h2/g9:8080", 1}}
	cases := []struct {
		name  string
		table func() *Table
	}{
		{"golden_equal_n3_m307.txt", func() *Table { return mustBuild(t, three, 307, 0x5eed) }},
		{"golden_weighted_n4_m401.txt", func() *Table {
			return mustBuild(t, []Backend{{"az1-h1/g1:8080", 1}, {"az2-h7/g3:8080", 2}, {"az3-h2/g9:8080", 3}, {"az3-h4/g1:8080", 0}}, 401, 0x5eed)
		}},
		{"golden_fail_n3_m307.txt", func() *Table {
			return mustBuild(t, three, 307, 0x5eed).Fail(map[string]bool{"az2-h7/g3:8080": true})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := render(c.table())
			path := filepath.Join("testdata", c.name)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the table built now; if the change is intended (it changes where "+
					"every flow goes on upgraded nodes), rerun with -update.\ngot:\n%s", path, got)
			}
		})
	}
}

func TestIsPrime(t *testing.T) {
	const n = 200000
	composite := make([]bool, n)
	for i := 2; i < n; i++ {
		if composite[i] {
			continue
		}
		for j := 2 * i; j < n; j += i {
			composite[j] = true
		}
	}
	for i := 0; i < n; i++ {
		if want := i >= 2 && !composite[i]; IsPrime(uint64(i)) != want {
			t.Fatalf("IsPrime(%d) = %v, want %v", i, !want, want)
		}
	}
	for _, c := range []struct {
		n    uint64
		want bool
	}{
		{DefaultSize, true}, {655373, true}, {100003, true}, {16381, true},
		{561, false}, {41041, false}, {825265, false}, // Carmichael numbers
		{3215031751, false},          // strong pseudoprime to bases 2, 3, 5, 7
		{3825123056546413051, false}, // strong pseudoprime to bases 2 … 23
		{1<<61 - 1, true},            // Mersenne prime
		{18446744073709551557, true}, // largest 64-bit prime
		{math.MaxUint64, false},
		{4294967291 * 4294967279, false}, // product of the two largest 32-bit primes
	} {
		if got := IsPrime(c.n); got != c.want {
			t.Errorf("IsPrime(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name     string
		backends []Backend
		m        uint64
		want     string
	}{
		{"not prime", equal(3), 65536, "table size 65536 is not prime"},
		{"zero", nil, 0, "table size 0 is not prime"},
		{"one", nil, 1, "table size 1 is not prime"},
		{"too small", equal(1000), 65537,
			"table size 65537 is smaller than 100 x 1000 backends; use a prime of at least 100000, e.g. 100003"},
		{"too small, drained count", append(equal(3), Backend{"z", 0}), 307,
			"table size 307 is smaller than 100 x 4 backends; use a prime of at least 400, e.g. 401"},
		{"too large", equal(3), MaxSize + 15, "table size 67108879 is too large: the maximum is 67108864 (2^26)"},
		{"duplicate", []Backend{{"b", 1}, {"a", 1}, {"b", 2}}, 307, `duplicate backend key "b"`},
		{"empty key", []Backend{{"a", 1}, {"", 1}}, 307, "backend 1 (weight 1) has an empty key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab, err := Build(c.backends, c.m, 0)
			if err == nil {
				t.Fatalf("Build succeeded (M=%d), want error %q", tab.M, c.want)
			}
			if err.Error() != c.want {
				t.Errorf("error %q, want %q", err, c.want)
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	for _, bs := range [][]Backend{nil, {{"a", 0}, {"b", 0}}} {
		tab := mustBuild(t, bs, 307, 1)
		if len(tab.Entry) != 307 {
			t.Fatalf("len(Entry) = %d", len(tab.Entry))
		}
		for j, e := range tab.Entry {
			if e != -1 {
				t.Fatalf("Entry[%d] = %d, want -1 with no weight", j, e)
			}
		}
		if b, ok := tab.Lookup(12345); ok {
			t.Errorf("Lookup on an empty table = %v, true", b)
		}
		if f := tab.Fail(map[string]bool{"a": true}); !slices.Equal(f.Entry, tab.Entry) {
			t.Error("Fail changed an empty table")
		}
	}
	var zero Table
	if _, ok := zero.Lookup(1); ok {
		t.Error("Lookup on the zero Table reported a backend")
	}
	if f := zero.Fail(map[string]bool{"a": true}); len(f.Entry) != 0 {
		t.Error("Fail of the zero Table made entries")
	}
}

// TestFailHandMade: a Table assembled from exported fields (say, decoded
// from an operator's dump) fails over like the one Build made.
func TestFailHandMade(t *testing.T) {
	built := mustBuild(t, equal(10), 1009, 3)
	hand := &Table{M: built.M, Seed: built.Seed, Backends: slices.Clone(built.Backends), Entry: slices.Clone(built.Entry)}
	failed := map[string]bool{"b0004": true, "b0007": true}
	if !slices.Equal(hand.Fail(failed).Entry, built.Fail(failed).Entry) {
		t.Error("Fail of a hand-made copy differs from Fail of the built table")
	}
}

func imbalance(t *Table) float64 {
	maxShare, n := 0, 0
	for _, s := range Shares(t) {
		maxShare = max(maxShare, s)
		n++
	}
	return 100 * (float64(maxShare)/(float64(t.M)/float64(n)) - 1)
}

func TestImbalance(t *testing.T) {
	for _, c := range []struct {
		n int
		m uint64
	}{{10, DefaultSize}, {100, DefaultSize}, {1000, 655373}} {
		t.Run(fmt.Sprintf("N=%d,M=%d", c.n, c.m), func(t *testing.T) {
			tab := mustBuild(t, equal(c.n), c.m, 7)
			// Round robin, one slot per turn: every backend has ⌊M/N⌋ or ⌈M/N⌉.
			lo, hi := int(c.m)/c.n, (int(c.m)+c.n-1)/c.n
			for k, s := range Shares(tab) {
				if s < lo || s > hi {
					t.Errorf("%s has %d slots, want %d or %d", k, s, lo, hi)
				}
			}
			imb := imbalance(tab)
			t.Logf("imbalance %.3f %%", imb)
			if imb > 1 {
				t.Errorf("imbalance %.3f %% > 1 %%", imb)
			}
		})
	}
}

// TestFlowHashSpread sends random flows through internal/flowhash as the
// data plane does and checks each backend gets its share of them.
func TestFlowHashSpread(t *testing.T) {
	const n, flows = 10, 200000
	tab := mustBuild(t, equal(n), DefaultSize, 3)
	r := rand.New(rand.NewPCG(1, 2))
	got := map[string]int{}
	for range flows {
		var a, b [4]byte
		putU32(a[:], r.Uint32())
		putU32(b[:], r.Uint32())
		tu := flowhash.Tuple{
			Src: netip.AddrFrom4(a), Dst: netip.AddrFrom4(b),
			SrcPort: uint16(r.Uint32()), DstPort: 443, Proto: 6,
		}
		be, ok := tab.Lookup(flowhash.Hash4(tu, 0x5eed1234))
		if !ok {
			t.Fatal("Lookup found no backend")
		}
		got[be.Key]++
	}
	for _, be := range tab.Backends {
		dev := float64(got[be.Key])/(flows/n) - 1
		if math.Abs(dev) > 0.05 {
			t.Errorf("%s got %d of %d flows (%+.1f %% from its share)", be.Key, got[be.Key], flows, 100*dev)
		}
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func TestLookup(t *testing.T) {
	tab := mustBuild(t, equal(10), DefaultSize, 1)
	for _, h := range []uint32{0, 1, DefaultSize - 1, DefaultSize, math.MaxUint32, 0xdeadbeef} {
		b, ok := tab.Lookup(h)
		if want := tab.Backends[tab.Entry[uint64(h)%tab.M]]; !ok || b != want {
			t.Errorf("Lookup(%#x) = %v, %v; want %v", h, b, ok, want)
		}
	}
}

// rankOf walks backend i's permutation explicitly: rank[j] is the turn at
// which the permutation reaches slot j. It checks Fail's modular-inverse
// shortcut independently.
func rankOf(t *Table, i int) []uint32 {
	rank := make([]uint32, t.M)
	p := t.perm[i]
	c := uint64(p.offset)
	for k := uint64(0); k < t.M; k++ {
		rank[c] = uint32(k)
		c = (c + uint64(p.skip)) % t.M
	}
	return rank
}

// checkFail checks f = base.Fail(...) slot by slot against failed (the
// union of all failed keys): healthy backends keep every slot, and each
// slot of a failed backend goes to the healthy backend ranking it first.
// It returns how many slots each healthy backend took over.
func checkFail(t testing.TB, base, f *Table, failed map[string]bool) map[string]int {
	t.Helper()
	var healthy []int
	for i, b := range base.Backends {
		if b.Weight > 0 && !failed[b.Key] {
			healthy = append(healthy, i)
		}
	}
	ranks := make([][]uint32, len(base.Backends))
	for _, i := range healthy {
		ranks[i] = rankOf(base, i)
	}
	took := map[string]int{}
	for j, e := range base.Entry {
		switch {
		case e < 0:
			if f.Entry[j] != -1 {
				t.Fatalf("slot %d: -1 became %d", j, f.Entry[j])
			}
		case !failed[base.Backends[e].Key]:
			if f.Entry[j] != e {
				t.Fatalf("slot %d of healthy backend %s moved to %s", j, keyAt(base, j), keyAt(f, j))
			}
		case len(healthy) == 0:
			if f.Entry[j] != e {
				t.Fatalf("slot %d: nothing healthy, yet %s became %s", j, keyAt(base, j), keyAt(f, j))
			}
		default:
			want := healthy[0]
			for _, h := range healthy[1:] {
				if ranks[h][j] < ranks[want][j] {
					want = h
				}
			}
			if int(f.Entry[j]) != want {
				t.Fatalf("slot %d of failed %s went to %s, want %s (next choice)",
					j, keyAt(base, j), keyAt(f, j), base.Backends[want].Key)
			}
			took[base.Backends[want].Key]++
		}
	}
	return took
}

func TestFail(t *testing.T) {
	for _, c := range []struct {
		n      int
		failed []int
	}{{10, []int{3}}, {100, []int{42}}, {100, []int{0, 1, 2, 50, 99}}} {
		t.Run(fmt.Sprintf("N=%d,failed=%v", c.n, c.failed), func(t *testing.T) {
			bs := equal(c.n)
			tab := mustBuild(t, bs, DefaultSize, 9)
			sum := tab.Checksum()
			failed := map[string]bool{}
			for _, i := range c.failed {
				failed[bs[i].Key] = true
			}
			f := tab.Fail(failed)
			if tab.Checksum() != sum {
				t.Fatal("Fail modified the table it was called on")
			}
			took := checkFail(t, tab, f, failed)
			moved := 0
			for _, s := range took {
				moved += s
			}
			fair := float64(moved) / float64(c.n-len(c.failed))
			most := 0
			for _, s := range took {
				most = max(most, s)
			}
			t.Logf("%d slots of failed backends moved, 0 of healthy ones; %d of %d healthy backends took some, at most %d (%.2f x fair share %.1f)",
				moved, len(took), c.n-len(c.failed), most, float64(most)/fair, fair)
			if float64(most) > 3*fair {
				t.Errorf("one backend took %d of the %d failed slots, more than 3 x fair share %.1f", most, moved, fair)
			}
			for k := range Shares(f) {
				if failed[k] && Shares(f)[k] != 0 {
					t.Errorf("failed %s still has %d slots", k, Shares(f)[k])
				}
			}
		})
	}
}

func TestFailIdentity(t *testing.T) {
	tab := mustBuild(t, equal(10), DefaultSize, 4)
	for _, failed := range []map[string]bool{nil, {}, {"nope": true}, {"b0003": false}} {
		f := tab.Fail(failed)
		if !slices.Equal(f.Entry, tab.Entry) || f.Checksum() != tab.Checksum() {
			t.Errorf("Fail(%v) changed the table", failed)
		}
	}
	// A failed table keeps its failures through Fail of an empty set.
	f := tab.Fail(map[string]bool{"b0001": true})
	if g := f.Fail(nil); g.Checksum() != f.Checksum() {
		t.Error("Fail(nil) of a failed table changed it")
	}
}

func TestFailComposes(t *testing.T) {
	bs := equal(20)
	bs[5].Weight = 0 // drained backends take part too
	tab := mustBuild(t, bs, 2003, 11)
	r := rand.New(rand.NewPCG(3, 4))
	set := func() map[string]bool {
		s := map[string]bool{}
		for _, b := range bs {
			if r.IntN(4) == 0 {
				s[b.Key] = true
			}
		}
		return s
	}
	all := map[string]bool{}
	for _, b := range bs {
		all[b.Key] = true
	}
	pairs := [][2]map[string]bool{{all, nil}, {nil, all}, {{"b0000": true}, all}}
	for range 50 {
		pairs = append(pairs, [2]map[string]bool{set(), set()})
	}
	for _, p := range pairs {
		a, b := p[0], p[1]
		union := map[string]bool{}
		for k := range a {
			union[k] = true
		}
		for k := range b {
			union[k] = true
		}
		want := tab.Fail(union)
		checkFail(t, tab, want, union)
		for _, got := range []*Table{tab.Fail(a).Fail(b), tab.Fail(b).Fail(a)} {
			if !slices.Equal(got.Entry, want.Entry) {
				t.Fatalf("Fail(%v) then Fail(%v) differs from Fail of the union", a, b)
			}
		}
	}
}

func TestFailAll(t *testing.T) {
	bs := equal(5)
	tab := mustBuild(t, bs, 503, 2)
	all := map[string]bool{}
	for _, b := range bs {
		all[b.Key] = true
	}
	if f := tab.Fail(all); !slices.Equal(f.Entry, tab.Entry) {
		t.Error("Fail of every backend changed the table; it must keep forwarding to the built backends")
	}
	delete(all, "b0002")
	for j, e := range tab.Fail(all).Entry {
		if tab.Backends[e].Key != "b0002" {
			t.Fatalf("slot %d goes to %s, but b0002 is the only healthy backend", j, tab.Backends[e].Key)
		}
	}
}

func TestChurn(t *testing.T) {
	for _, n := range []int{10, 100} {
		t.Run(fmt.Sprintf("N=%d,M=%d", n, DefaultSize), func(t *testing.T) {
			bs := equal(n)
			base := mustBuild(t, bs, DefaultSize, 5)
			worstAdd, worstRemove := 0.0, 0.0
			for k := range 5 {
				added := mustBuild(t, append(slices.Clone(bs), Backend{fmt.Sprintf("new%d", k), 1}), DefaultSize, 5)
				worstAdd = max(worstAdd, Collateral(base, added, fmt.Sprintf("new%d", k)))
				v := k * n / 5
				removed := mustBuild(t, slices.Delete(slices.Clone(bs), v, v+1), DefaultSize, 5)
				worstRemove = max(worstRemove, Collateral(base, removed, bs[v].Key))
			}
			t.Logf("collateral (worst of 5): add %.3f %%, remove %.3f %% of all slots", worstAdd, worstRemove)
			if worstAdd > 1 || worstRemove > 1 {
				t.Errorf("collateral add %.3f %%, remove %.3f %%: more than 1 %%", worstAdd, worstRemove)
			}
		})
	}
}

// checkWeights holds every backend's slots to the Sainte-Laguë bound:
// |slots − M·w/W| ≤ (w/W)·N/2 + 1/2 (see populate).
func checkWeights(t testing.TB, tab *Table) {
	t.Helper()
	var total float64
	for _, b := range tab.Backends {
		total += float64(b.Weight)
	}
	sh := Shares(tab)
	n := float64(len(tab.Backends))
	for _, b := range tab.Backends {
		w := float64(b.Weight)
		quota := float64(tab.M) * w / total
		if b.Weight == 0 {
			quota = 0
		}
		bound := 0.5
		if total > 0 {
			bound += w / total * n / 2
		}
		if d := math.Abs(float64(sh[b.Key]) - quota); d > bound+1e-6 {
			t.Fatalf("%s (weight %d of %.0f) has %d slots, quota %.2f: off by %.2f > %.2f",
				b.Key, b.Weight, total, sh[b.Key], quota, d, bound)
		}
	}
}

func TestWeights(t *testing.T) {
	cases := []struct {
		name string
		m    uint64
		ws   []uint32
	}{
		{"1..10", DefaultSize, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"100x2", DefaultSize, slices.Concat(slices.Repeat([]uint32{1}, 50), slices.Repeat([]uint32{2}, 50))},
		{"drained", DefaultSize, []uint32{3, 0, 3, 1, 0}},
		{"huge", 307, []uint32{math.MaxUint32, math.MaxUint32 / 2, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := equal(len(c.ws))
			var total float64
			for i, w := range c.ws {
				bs[i].Weight = w
				total += float64(w)
			}
			tab := mustBuild(t, bs, c.m, 8)
			checkWeights(t, tab)
			sh := Shares(tab)
			worst := 0.0
			for _, b := range bs {
				if b.Weight == 0 {
					if sh[b.Key] != 0 {
						t.Errorf("drained %s has %d slots", b.Key, sh[b.Key])
					}
					continue
				}
				if quota := float64(c.m) * float64(b.Weight) / total; quota >= 100 {
					worst = max(worst, math.Abs(float64(sh[b.Key])/quota-1))
				}
			}
			t.Logf("worst relative error of a share (quota ≥ 100 slots): %.3f %%", 100*worst)
			if worst > 0.01 {
				t.Errorf("a share is %.3f %% off its weight, more than 1 %%", 100*worst)
			}
		})
	}
}

// TestRoundRobinShortcut holds populate's equal-weight shortcut to the
// general weighted turn order.
func TestRoundRobinShortcut(t *testing.T) {
	for _, n := range []int{1, 2, 10, 100} {
		for _, w := range []uint32{1, 7} {
			bs := equal(n)
			for i := range bs {
				bs[i].Weight = w
			}
			if n > 2 {
				bs[1].Weight = 0
			}
			ps := permutations(bs, DefaultSize, 1)
			if !slices.Equal(populate(bs, ps, DefaultSize, true), populate(bs, ps, DefaultSize, false)) {
				t.Errorf("N=%d weight %d: round robin and weighted turns differ", n, w)
			}
		}
	}
}

// TestDrain sets one backend's weight to 0: it loses every slot, and the
// table maps every slot to the same key as if it had been removed.
func TestDrain(t *testing.T) {
	for _, n := range []int{10, 100} {
		bs := equal(n)
		base := mustBuild(t, bs, DefaultSize, 6)
		drainedBs := slices.Clone(bs)
		drainedBs[n/2].Weight = 0
		drained := mustBuild(t, drainedBs, DefaultSize, 6)
		removed := mustBuild(t, slices.Delete(slices.Clone(bs), n/2, n/2+1), DefaultSize, 6)
		if s := Shares(drained)[bs[n/2].Key]; s != 0 {
			t.Errorf("drained backend has %d slots", s)
		}
		others := 0
		for j := range base.Entry {
			if keyAt(drained, j) != keyAt(removed, j) {
				t.Fatalf("slot %d: drained table says %s, table without the backend says %s", j, keyAt(drained, j), keyAt(removed, j))
			}
			if k := keyAt(base, j); k != bs[n/2].Key && k != keyAt(drained, j) {
				others++
			}
		}
		col := Collateral(base, drained, bs[n/2].Key)
		t.Logf("N=%d: draining one backend moved %d slots of the other backends (%.3f %% of the %d slots)",
			n, others, col, DefaultSize)
		if col > 1 {
			t.Errorf("N=%d: drain moved %.3f %% beyond the drained share", n, col)
		}
	}
}

func TestDeterminism(t *testing.T) {
	bs := equal(100)
	for i := range bs {
		bs[i].Weight = uint32(1 + i%3)
	}
	in := slices.Clone(bs)
	a := mustBuild(t, bs, DefaultSize, 77)
	if !slices.Equal(bs, in) {
		t.Fatal("Build modified its argument")
	}
	shuffled := slices.Clone(bs)
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.Reverse(bs)
	for _, other := range [][]Backend{in, bs, shuffled} {
		b := mustBuild(t, other, DefaultSize, 77)
		if !slices.Equal(a.Backends, b.Backends) || !slices.Equal(a.Entry, b.Entry) || a.Checksum() != b.Checksum() {
			t.Fatal("two builds of the same backends differ")
		}
	}
	if !slices.IsSortedFunc(a.Backends, func(x, y Backend) int { return strings.Compare(x.Key, y.Key) }) {
		t.Error("Backends not sorted by key")
	}
}

func TestChecksum(t *testing.T) {
	bs := equal(3)
	base := mustBuild(t, bs, 307, 1)
	seen := map[uint64]string{base.Checksum(): "base"}
	variants := map[string]*Table{
		"seed":   mustBuild(t, bs, 307, 2),
		"size":   mustBuild(t, bs, 311, 1),
		"weight": mustBuild(t, []Backend{{"b0000", 1}, {"b0001", 1}, {"b0002", 2}}, 307, 1),
		"key":    mustBuild(t, []Backend{{"b0000", 1}, {"b0001", 1}, {"b0003", 1}}, 307, 1),
		"failed": base.Fail(map[string]bool{"b0001": true}),
	}
	for name, v := range variants {
		c := v.Checksum()
		if prev, dup := seen[c]; dup {
			t.Errorf("%s and %s have the same checksum %#x", name, prev, c)
		}
		seen[c] = name
	}
	// Same weights and entries, different backend keys: the encoding
	// length-prefixes keys, so "ab"+"c" and "a"+"bc" differ.
	x := &Table{M: 2, Backends: []Backend{{"ab", 1}, {"c", 1}}, Entry: []int32{0, 1}}
	y := &Table{M: 2, Backends: []Backend{{"a", 1}, {"bc", 1}}, Entry: []int32{0, 1}}
	if x.Checksum() == y.Checksum() {
		t.Error("checksum does not separate keys")
	}
}

func TestMeasure(t *testing.T) {
	cases := []struct {
		n int
		m uint64
	}{{10, DefaultSize}, {100, DefaultSize}, {1000, 655373}}
	start := time.Now()
	for _, c := range cases {
		r, err := Measure(c.n, c.m, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("N=%d M=%d: imbalance %.3f %%, fail moved %.3f %%, add collateral %.3f %%, remove collateral %.3f %%, build %v",
			r.N, r.M, r.Imbalance, r.FailMoved, r.AddCollateral, r.RemoveCollateral, r.BuildTime)
		if r.Imbalance > 1 || r.FailMoved != 0 || r.AddCollateral > 1 || r.RemoveCollateral > 1 {
			t.Errorf("N=%d M=%d out of bounds: %+v", c.n, c.m, r)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Measure for the bench sizes took %v, want < 5 s", d)
	}
	if _, err := Measure(0, DefaultSize, 0); err == nil {
		t.Error("Measure(0, …) succeeded")
	}
	if _, err := Measure(1000, DefaultSize, 0); err == nil || !strings.Contains(err.Error(), "100003") {
		t.Errorf("Measure(1000, 65537) = %v, want the table-size error", err)
	}
}

// fuzzPrimes are table sizes for FuzzBuild (up to 20 backends).
var fuzzPrimes = []uint64{2, 101, 211, 307, 401, 1009, 2003, 4099}

func FuzzBuild(f *testing.F) {
	f.Add(uint32(0), uint8(3), []byte("a\x00b\x00c"), []byte{1, 1, 1}, uint64(0b010), uint64(0))
	f.Add(uint32(7), uint8(7), []byte("az1-h1/g1:8080\x00az2-h1/g1:8080\x00az3\x00x\x00y"), []byte{5, 0, 200, 1, 3}, uint64(0b101), uint64(0b11))
	f.Add(uint32(1), uint8(2), []byte("a\x00a"), []byte{1, 1}, uint64(1), uint64(2))
	f.Add(uint32(1), uint8(2), []byte("a\x00\x00b"), []byte{}, uint64(0), uint64(0))
	f.Add(uint32(9), uint8(6), bytes.Repeat([]byte("k\x00"), 20), []byte{0xff, 0x80, 1}, ^uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, seed uint32, mi uint8, keys, weights []byte, failA, failB uint64) {
		m := fuzzPrimes[int(mi)%len(fuzzPrimes)]
		var bs []Backend
		if len(keys) > 0 {
			for i, k := range bytes.Split(keys, []byte{0}) {
				if i == 20 {
					break
				}
				w := uint32(1)
				if i < len(weights) {
					// High bit set: a weight near the top of the range.
					if w = uint32(weights[i]); w&0x80 != 0 {
						w <<= 24
					}
				}
				bs = append(bs, Backend{Key: string(k), Weight: w})
			}
		}
		tab, err := Build(bs, m, seed)
		dup, empty := false, false
		seen := map[string]bool{}
		for _, b := range bs {
			empty = empty || b.Key == ""
			dup = dup || seen[b.Key]
			seen[b.Key] = true
		}
		tooSmall := m < SlotsPerBackend*uint64(len(bs))
		if (err != nil) != (dup || empty || tooSmall) {
			t.Fatalf("Build: err %v, duplicate %v, empty key %v, too small %v", err, dup, empty, tooSmall)
		}
		if err != nil {
			return
		}
		if uint64(len(tab.Entry)) != m || len(tab.Backends) != len(bs) {
			t.Fatalf("table has %d entries and %d backends", len(tab.Entry), len(tab.Backends))
		}
		anyWeight := false
		for _, b := range bs {
			anyWeight = anyWeight || b.Weight > 0
		}
		for j, e := range tab.Entry {
			if e == -1 && !anyWeight {
				continue
			}
			if e < 0 || int(e) >= len(tab.Backends) || tab.Backends[e].Weight == 0 {
				t.Fatalf("Entry[%d] = %d is not a backend with weight", j, e)
			}
		}
		checkWeights(t, tab)
		pick := func(mask uint64) map[string]bool {
			s := map[string]bool{}
			for i, b := range tab.Backends {
				if mask&(1<<i) != 0 {
					s[b.Key] = true
				}
			}
			return s
		}
		a, b := pick(failA), pick(failB)
		fa := tab.Fail(a)
		checkFail(t, tab, fa, a)
		union := pick(failA | failB)
		fu := tab.Fail(union)
		checkFail(t, tab, fu, union)
		if !slices.Equal(fa.Fail(b).Entry, fu.Entry) {
			t.Fatal("Fail(A).Fail(B) differs from Fail(A ∪ B)")
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	for _, c := range []struct {
		n int
		m uint64
	}{{100, DefaultSize}, {1000, 655373}} {
		for _, weighted := range []bool{false, true} {
			bs := equal(c.n)
			name := fmt.Sprintf("N=%d,M=%d", c.n, c.m)
			if weighted {
				for i := range bs {
					bs[i].Weight = uint32(1 + i%4)
				}
				name += ",weighted"
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					if _, err := Build(bs, c.m, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.m), "ns/slot")
			})
		}
	}
}

// BenchmarkFail fails one of 100 backends at M = 65537 and reports the
// ratio to a full Build of the same table measured in the same run.
func BenchmarkFail(b *testing.B) {
	bs := equal(100)
	tab := mustBuild(b, bs, DefaultSize, 1)
	failed := map[string]bool{"b0042": true}
	start := time.Now()
	const builds = 5
	for range builds {
		mustBuild(b, bs, DefaultSize, 1)
	}
	build := time.Since(start) / builds
	b.ResetTimer()
	for b.Loop() {
		tab.Fail(failed)
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per)/float64(build), "x-build")
}

// BenchmarkLookup reports Lookup against the bare Entry[hash % M] it wraps.
func BenchmarkLookup(b *testing.B) {
	tab := mustBuild(b, equal(100), DefaultSize, 1)
	hashes := make([]uint32, 4096)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range hashes {
		hashes[i] = r.Uint32()
	}
	var sink int
	i := 0
	for b.Loop() {
		be, _ := tab.Lookup(hashes[i&4095])
		sink += int(be.Weight)
		i++
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	start := time.Now()
	for k := 0; k < b.N; k++ {
		sink += int(tab.Entry[uint64(hashes[k&4095])%tab.M])
	}
	raw := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/raw, "x-raw-index")
	if sink == -1 {
		b.Log(sink)
	}
}

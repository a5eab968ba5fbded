package flowhash

import (
	"math/rand"
	"net/netip"
	"testing"
)

// refRol32 and refJhash3words are a line-by-line transcription of Linux
// include/linux/jhash.h (rol32 from include/linux/bitops.h, __jhash_final,
// __jhash_nwords and jhash_3words), kept deliberately independent of Jhash3
// (no math/bits) so a slip in either shows up as a mismatch.
func refRol32(word uint32, shift uint) uint32 {
	return word<<(shift&31) | word>>((-shift)&31)
}

func refJhashFinal(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= refRol32(b, 14)
	a ^= c
	a -= refRol32(c, 11)
	b ^= a
	b -= refRol32(a, 25)
	c ^= b
	c -= refRol32(b, 16)
	a ^= c
	a -= refRol32(c, 4)
	b ^= a
	b -= refRol32(a, 14)
	c ^= b
	c -= refRol32(b, 24)
	return a, b, c
}

func refJhashNwords(a, b, c, initval uint32) uint32 {
	a += initval
	b += initval
	c += initval
	_, _, c = refJhashFinal(a, b, c)
	return c
}

const refJHASHINITVAL = 0xdeadbeef

func refJhash3words(a, b, c, initval uint32) uint32 {
	return refJhashNwords(a, b, c, initval+refJHASHINITVAL+(3<<2))
}

// jhashVectors were produced by the same transcription of jhash.h compiled
// as C (clang -O2, x86-64) and pinned here, so the reference itself is
// checked against a C compiler's arithmetic.
var jhashVectors = []struct{ a, b, c, initval, want uint32 }{
	{0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x1b68e557},
	{0x00000001, 0x00000002, 0x00000003, 0x00000004, 0x8103143f},
	{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xc343af0b},
	{0xdeadbeef, 0xcafebabe, 0x12345678, 0x5eed1234, 0xf276ef30},
	// 203.0.113.10 -> 198.51.100.7 TCP 40000 -> 80, seed 0x5eed1234 ^ 6.
	{0x0a7100cb, 0x076433c6, 0x5000409c, 0x5eed1232, 0x6024aa6d},
	// Same addresses, ICMP (no ports), seed 0x5eed1234 ^ 1.
	{0x0a7100cb, 0x076433c6, 0x00000000, 0x5eed1235, 0x5a504b5a},
	{0x80000000, 0x00000001, 0x7fffffff, 0x21524110, 0x9dcb7f76},
}

func TestJhash3Vectors(t *testing.T) {
	for _, v := range jhashVectors {
		if got := refJhash3words(v.a, v.b, v.c, v.initval); got != v.want {
			t.Errorf("reference jhash_3words(%#x, %#x, %#x, %#x) = %#x, want %#x", v.a, v.b, v.c, v.initval, got, v.want)
		}
		if got := Jhash3(v.a, v.b, v.c, v.initval); got != v.want {
			t.Errorf("Jhash3(%#x, %#x, %#x, %#x) = %#x, want %#x", v.a, v.b, v.c, v.initval, got, v.want)
		}
	}
}

func TestJhash3MatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		a, b, c, s := r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()
		if got, want := Jhash3(a, b, c, s), refJhash3words(a, b, c, s); got != want {
			t.Fatalf("Jhash3(%#x, %#x, %#x, %#x) = %#x, reference %#x", a, b, c, s, got, want)
		}
	}
}

func TestPortsWord(t *testing.T) {
	for _, tc := range []struct {
		sport, dport uint16
		want         uint32
	}{
		// On the wire 0x12 0x34 0x56 0x78; a little-endian load reads
		// the first byte as the least significant.
		{0x1234, 0x5678, 0x78563412},
		{40000, 80, 0x5000409c},
		{1, 0, 0x00000100},
		{0, 1, 0x01000000},
		{0, 0, 0},
		{0xffff, 0xffff, 0xffffffff},
	} {
		if got := PortsWord(tc.sport, tc.dport); got != tc.want {
			t.Errorf("PortsWord(%d, %d) = %#08x, want %#08x", tc.sport, tc.dport, got, tc.want)
		}
	}
}

func TestHash4(t *testing.T) {
	tcp := Tuple{Src: netip.MustParseAddr("203.0.113.10"), Dst: netip.MustParseAddr("198.51.100.7"),
		SrcPort: 40000, DstPort: 80, Proto: 6}
	if got := Hash4(tcp, 0x5eed1234); got != 0x6024aa6d {
		t.Errorf("Hash4(%+v) = %#x, want 0x6024aa6d", tcp, got)
	}
	icmp := Tuple{Src: tcp.Src, Dst: tcp.Dst, Proto: 1}
	if got := Hash4(icmp, 0x5eed1234); got != 0x5a504b5a {
		t.Errorf("Hash4(%+v) = %#x, want 0x5a504b5a", icmp, got)
	}
	if got := FlowID(tcp, 0x5eed1234); got != 0x6d {
		t.Errorf("FlowID = %#x, want the hash's low byte 0x6d", got)
	}

	// Against the reference, word by word, for random tuples.
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 10000; i++ {
		tu, seed := randTuple(r), r.Uint32()
		s, d := tu.Src.As4(), tu.Dst.As4()
		sw := uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
		dw := uint32(d[0]) | uint32(d[1])<<8 | uint32(d[2])<<16 | uint32(d[3])<<24
		pw := uint32(tu.SrcPort>>8) | uint32(tu.SrcPort&0xff)<<8 | uint32(tu.DstPort>>8)<<16 | uint32(tu.DstPort&0xff)<<24
		want := refJhash3words(sw, dw, pw, seed^uint32(tu.Proto))
		if got := Hash4(tu, seed); got != want {
			t.Fatalf("Hash4(%+v, %#x) = %#x, reference %#x", tu, seed, got, want)
		}
		if got := FlowID(tu, seed); got != uint8(want) {
			t.Fatalf("FlowID(%+v, %#x) = %#x, want %#x", tu, seed, got, uint8(want))
		}
	}
}

func randTuple(r *rand.Rand) Tuple {
	var s, d [4]byte
	r.Read(s[:])
	r.Read(d[:])
	return Tuple{Src: netip.AddrFrom4(s), Dst: netip.AddrFrom4(d),
		SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), Proto: uint8(r.Uint32())}
}

func TestHash4Deterministic(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 1000; i++ {
		tu, seed := randTuple(r), r.Uint32()
		cp := tu // a copy, to show nothing but the value matters
		if Hash4(tu, seed) != Hash4(cp, seed) || FlowID(tu, seed) != FlowID(cp, seed) {
			t.Fatalf("Hash4 of %+v not deterministic", tu)
		}
	}
}

// Every input changes the hash: the seed (each single-bit flip), each
// field of the tuple, and the direction (the hash is not symmetric: the
// two directions of a flow are independent flows for the data plane).
func TestHash4Sensitivity(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	const n = 2000
	seedSame, fidSame := 0, 0
	for i := 0; i < n; i++ {
		tu, seed := randTuple(r), r.Uint32()
		h := Hash4(tu, seed)
		for bit := 0; bit < 32; bit++ {
			if Hash4(tu, seed^1<<bit) == h {
				t.Fatalf("flipping seed bit %d leaves Hash4(%+v, %#x) unchanged", bit, tu, seed)
			}
		}
		// Two random seeds collide with probability 2^-32 for the hash
		// and 2^-8 for the FlowID.
		s2 := r.Uint32()
		if s2 != seed && Hash4(tu, s2) == h {
			seedSame++
		}
		if s2 != seed && FlowID(tu, s2) == FlowID(tu, seed) {
			fidSame++
		}
		for name, m := range map[string]func(Tuple) Tuple{
			"src":   func(x Tuple) Tuple { b := x.Src.As4(); b[3] ^= 1; x.Src = netip.AddrFrom4(b); return x },
			"dst":   func(x Tuple) Tuple { b := x.Dst.As4(); b[0] ^= 0x80; x.Dst = netip.AddrFrom4(b); return x },
			"sport": func(x Tuple) Tuple { x.SrcPort ^= 1; return x },
			"dport": func(x Tuple) Tuple { x.DstPort ^= 0x100; return x },
			"proto": func(x Tuple) Tuple { x.Proto ^= 1; return x },
		} {
			if Hash4(m(tu), seed) == h {
				t.Fatalf("changing %s leaves Hash4(%+v, %#x) unchanged", name, tu, seed)
			}
		}
	}
	if seedSame > 1 {
		t.Errorf("%d of %d random seed pairs gave the same hash", seedSame, n)
	}
	// Expect n/256 ~ 8; 40 is far outside any plausible random deviation.
	if fidSame > 40 {
		t.Errorf("%d of %d random seed pairs gave the same FlowID (expected about %d)", fidSame, n, n/256)
	}
	tu := Tuple{Src: netip.MustParseAddr("203.0.113.10"), Dst: netip.MustParseAddr("198.51.100.7"), SrcPort: 1, DstPort: 2, Proto: 17}
	rev := Tuple{Src: tu.Dst, Dst: tu.Src, SrcPort: tu.DstPort, DstPort: tu.SrcPort, Proto: tu.Proto}
	if Hash4(tu, 0) == Hash4(rev, 0) {
		t.Errorf("Hash4 is symmetric for %+v", tu)
	}
}

// The FlowID spreads flows evenly over its 256 values: a chi-square test
// over many random tuples (255 degrees of freedom; 400 is beyond the
// 99.999th percentile).
func TestFlowIDUniform(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const n = 256 * 400
	var counts [256]int
	seed := r.Uint32()
	for i := 0; i < n; i++ {
		counts[FlowID(randTuple(r), seed)]++
	}
	exp := float64(n) / 256
	chi := 0.0
	for _, c := range counts {
		d := float64(c) - exp
		chi += d * d / exp
	}
	if chi > 400 {
		t.Errorf("FlowID distribution chi-square %.1f over 255 degrees of freedom", chi)
	}
}

func BenchmarkHash4(b *testing.B) {
	tu := Tuple{Src: netip.MustParseAddr("203.0.113.10"), Dst: netip.MustParseAddr("198.51.100.7"),
		SrcPort: 40000, DstPort: 80, Proto: 6}
	var sink uint32
	for i := 0; b.Loop(); i++ {
		tu.SrcPort = uint16(i)
		sink += Hash4(tu, 0x5eed1234)
	}
	_ = sink
}

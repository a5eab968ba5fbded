package dnsserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/gslb"

	"github.com/miekg/dns"
)

// fastFixture is the differential tests' world: handlers over the test
// catalog (handler_test.go) with different health states, and sources.
type fastFixture struct {
	hs   []*Handler
	srcs []netip.Addr
}

func newFastFixture(t testing.TB) *fastFixture {
	f := &fastFixture{srcs: []netip.Addr{
		netip.MustParseAddr("198.18.2.1"),         // us
		netip.MustParseAddr("198.18.1.77"),        // eu
		netip.MustParseAddr("198.18.12.9"),        // London: coordinates only
		netip.MustParseAddr("198.18.200.1"),       // unknown
		netip.MustParseAddr("2001:db8:100::5"),    // eu over IPv6
		netip.MustParseAddr("2001:db8:ff::5"),     // unknown IPv6
		netip.MustParseAddr("2001:db8:8000:1::5"), // us over IPv6, from the database (/48)
		netip.MustParseAddr("2001:db8:8100::9"),   // Singapore over IPv6, coordinates only (/44)
	}}
	for _, down := range [][]netip.Addr{
		nil, {vipEU}, {vipEU, vipUS}, {vipEU, vipUS, vipAP}, {vip6EU}, {vip6EU, vip6US},
		{vipW3}, {vipW1, vipW3}, {vipF1}, {vipF1, vipF2, vipF3},
	} {
		h, _ := testHandler(t, down...)
		f.hs = append(f.hs, h)
	}
	return f
}

// check runs q through both paths; when the fast path answers, its bytes
// must be the reference's. It reports whether the fast path answered.
func (f *fastFixture) check(t testing.TB, q []byte, hi, si int) bool {
	t.Helper()
	h := f.hs[hi%len(f.hs)]
	src := f.srcs[si%len(f.srcs)]
	var st fastState
	fast := h.fastAnswer(q, src, make([]byte, 0, MaxUDPSize), &st)
	if fast == nil {
		return false
	}
	ref := referenceAnswer(h, q, src, nil)
	if !bytes.Equal(fast, ref) {
		var fm, rm dns.Msg
		fe, re := fm.Unpack(fast), rm.Unpack(ref)
		t.Fatalf("query %x from %v (health %d):\nfast %x (%v)\n%v\nref  %x (%v)\n%v", q, src, hi%len(f.hs), fast, fe, &fm, ref, re, &rm)
	}
	return true
}

// wireQuery packs a query for name/qtype with an ECS option of family
// fam, source bits and address a (masked), plus extra options.
func wireQuery(t testing.TB, name string, qtype uint16, id uint16, rd bool, edns bool, ecs *dns.EDNS0_SUBNET, extra ...dns.EDNS0) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id, m.RecursionDesired = id, rd
	if edns || ecs != nil || len(extra) > 0 {
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(4096)
		if ecs != nil {
			o.Option = append(o.Option, ecs)
		}
		o.Option = append(o.Option, extra...)
		m.Extra = append(m.Extra, o)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ecsOf(p netip.Prefix) *dns.EDNS0_SUBNET {
	p = p.Masked()
	e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()}
	if p.Addr().Is6() {
		e.Family = 2
	}
	return e
}

var fastNames = []string{"pathd.example.", "PathD.Example.", "PATHD.EXAMPLE.", "w.example.", "fo.example.",
	"fo-strict.example.", "strict.example.", "www.example.", "nope.example.", "example.", "pathd.example.org.",
	"x.pathd.example.", "big.example."}

// fastSeeds are real queries: every name and type, with and without EDNS,
// with ECS of both families and every prefix length, and cookies.
func fastSeeds(t testing.TB) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	var out [][]byte
	addrs4 := []string{"198.18.1.0", "198.18.2.200", "198.18.12.9", "198.18.200.1", "198.18.5.5"}
	addrs6 := []string{"2001:db8:100::1", "2001:db8:ff::1", "2001:db8:1ff:ffff::1",
		"2001:db8:8000:ffff::1", "2001:db8:810f::1", "::ffff:198.18.1.77", "::ffff:198.18.200.1"}
	for i, name := range fastNames {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
			id := uint16(r.Uint32())
			out = append(out, wireQuery(t, name, qt, id, i%2 == 0, false, nil))
			out = append(out, wireQuery(t, name, qt, id, true, true, nil))
			for _, a := range addrs4 {
				for bits := 0; bits <= 32; bits += 1 + r.IntN(4) {
					out = append(out, wireQuery(t, name, qt, uint16(r.Uint32()), true, true,
						ecsOf(netip.PrefixFrom(netip.MustParseAddr(a), bits))))
				}
			}
			for _, a := range addrs6 {
				for bits := 0; bits <= 128; bits += 1 + r.IntN(12) {
					out = append(out, wireQuery(t, name, qt, uint16(r.Uint32()), false, true,
						ecsOf(netip.PrefixFrom(netip.MustParseAddr(a), bits))))
				}
			}
			out = append(out, wireQuery(t, name, qt, id, true, true,
				ecsOf(netip.MustParsePrefix("198.18.1.0/24")), &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}))
		}
	}
	return out
}

// TestFastPathDifferential: every seed (and every health state and
// source) gives the reference's bytes whenever the fast path answers, and
// the fast path does answer the common queries (so the comparison is not
// vacuous).
func TestFastPathDifferential(t *testing.T) {
	f := newFastFixture(t)
	fastN, total := 0, 0
	for _, q := range fastSeeds(t) {
		for hi := range f.hs {
			for si := range f.srcs {
				total++
				if f.check(t, q, hi, si) {
					fastN++
				}
			}
		}
	}
	t.Logf("fast path answered %d of %d", fastN, total)
	if fastN < total/5 {
		t.Errorf("fast path answered only %d of %d", fastN, total)
	}
	// Every prefix length of both families (IPv6 clients of the prefix map
	// and of the database, IPv4-mapped ones), each with and without host
	// bits, for pathd A and AAAA, all health states.
	for bits := 0; bits <= 128; bits++ {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			var ps []netip.Prefix
			if bits <= 32 {
				ps = append(ps, netip.PrefixFrom(netip.MustParseAddr("198.18.1.255"), bits))
			}
			ps = append(ps, netip.PrefixFrom(netip.MustParseAddr("2001:db8:100:ffff:ffff::1"), bits),
				netip.PrefixFrom(netip.MustParseAddr("2001:db8:8000:ffff:ffff::1"), bits), // the database's IPv6 /48
				netip.PrefixFrom(netip.MustParseAddr("::ffff:198.18.1.255"), bits))        // IPv4-mapped, family 2
			for _, p := range ps {
				q := wireQuery(t, "pathd.example.", qt, uint16(bits), true, true, ecsOf(p))
				for hi := range f.hs {
					f.check(t, q, hi, hi)
				}
			}
		}
	}
}

// TestFastPathAnswers: the queries the fast path must take, and the ones
// it must leave to the reference path.
func TestFastPathAnswers(t *testing.T) {
	f := newFastFixture(t)
	h := f.hs[0]
	src := f.srcs[0]
	ecs := ecsOf(netip.MustParsePrefix("198.18.1.0/24"))
	plain := wireQuery(t, "pathd.example.", dns.TypeA, 7, true, true, ecs)
	mod := func(b []byte, f func([]byte) []byte) []byte { return f(bytes.Clone(b)) }
	for _, tc := range []struct {
		name string
		q    []byte
		fast bool
	}{
		{"A with ECS", plain, true},
		{"AAAA with ECS v6", wireQuery(t, "pathd.example.", dns.TypeAAAA, 1, false, true, ecsOf(netip.MustParsePrefix("2001:db8:100::/48"))), true},
		{"A no EDNS", wireQuery(t, "PATHD.example.", dns.TypeA, 1, false, false, nil), true},
		{"weighted", wireQuery(t, "w.example.", dns.TypeA, 1, false, true, nil), true},
		{"cookie", wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true, ecs, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}), true},
		{"ECS source 0", wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true, ecsOf(netip.MustParsePrefix("0.0.0.0/0"))), true},

		{"static name", wireQuery(t, "www.example.", dns.TypeA, 1, true, true, nil), false},
		{"not in zone", wireQuery(t, "pathd.example.org.", dns.TypeA, 1, true, true, nil), false},
		{"NXDOMAIN", wireQuery(t, "nope.example.", dns.TypeA, 1, true, true, nil), false},
		{"TXT", wireQuery(t, "pathd.example.", dns.TypeTXT, 1, true, true, nil), false},
		{"NODATA: AAAA of a v4-only record", wireQuery(t, "w.example.", dns.TypeAAAA, 1, true, true, nil), false},
		{"NSID option", wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true, nil, &dns.EDNS0_NSID{Code: dns.EDNS0NSID}), false},
		{"two ECS", wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true, ecs, ecs), false},
		{"ECS bits beyond prefix", mod(wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true,
			ecsOf(netip.MustParsePrefix("198.18.0.0/20"))), func(b []byte) []byte { b[len(b)-1] |= 1; return b }), false},
		{"ECS family 0", wireQuery(t, "pathd.example.", dns.TypeA, 1, true, true,
			&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 0, Address: netip.MustParseAddr("0.0.0.0").AsSlice()}), false},
		{"ECS scope set", mod(plain, func(b []byte) []byte { b[len(b)-4] = 24; return b }), false},
		{"ECS address too long", mod(plain, func(b []byte) []byte {
			b = append(b, 0)
			b[len(b)-16]++ // OPT RDLENGTH
			b[len(b)-6]++  // option length
			return b
		}), false},
		{"EDNS version 1", mod(plain, func(b []byte) []byte { b[12+len("\x05pathd\x07example\x00")+4+6] = 1; return b }), false},
		{"trailing byte", append(wireQuery(t, "pathd.example.", dns.TypeA, 1, true, false, nil), 0), false},
		{"class CH", mod(wireQuery(t, "pathd.example.", dns.TypeA, 1, true, false, nil), func(b []byte) []byte { b[len(b)-1] = 3; return b }), false},
		{"opcode NOTIFY", mod(plain, func(b []byte) []byte { b[2] |= 4 << 3; return b }), false},
		{"response", mod(plain, func(b []byte) []byte { b[2] |= 0x80; return b }), false},
		{"two questions", mod(plain, func(b []byte) []byte { b[5] = 2; return b }), false},
		{"an answer record", mod(plain, func(b []byte) []byte { b[7] = 1; return b }), false},
		{"escaped byte in name", mod(wireQuery(t, "pathd.example.", dns.TypeA, 1, true, false, nil), func(b []byte) []byte { b[13] = '.'; return b }), false},
		{"compressed name", append(append([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, 0xC0, 12), 0, 1, 0, 1), false},
		{"SERVFAIL: all down", wireQuery(t, "strict.example.", dns.TypeA, 1, true, false, nil), false}, // see below
	} {
		t.Run(tc.name, func(t *testing.T) {
			hh := h
			if strings.HasPrefix(tc.name, "SERVFAIL") {
				hh = f.hs[3] // every v4 target down
			}
			var st fastState
			got := hh.fastAnswer(tc.q, src, nil, &st) != nil
			if got != tc.fast {
				t.Fatalf("fast path answered %v, want %v", got, tc.fast)
			}
			if got {
				f.check(t, tc.q, 0, 0)
			}
			// Whatever path, the server's answer is the reference's.
			s := &udpServer{h: hh, fast: hh}
			want := referenceAnswer(hh, tc.q, src, nil)
			if tc.q[2]&0x80 != 0 {
				want = nil
			}
			if got := s.answer(tc.q, src, nil, &st); !bytes.Equal(got, want) {
				t.Fatalf("server answer %x, reference %x", got, want)
			}
		})
	}
}

// TestFastPathCatalogSwap: a new catalog is served at once by the fast
// path (the index follows the catalog pointer).
func TestFastPathCatalogSwap(t *testing.T) {
	h, _ := testHandler(t)
	var st fastState
	q := wireQuery(t, "fo.example.", dns.TypeA, 1, false, false, nil)
	a := h.fastAnswer(q, netip.MustParseAddr("198.18.2.1"), nil, &st)
	cfg := testConfig()
	cfg.Zones[0].GSLB[3].TTL = 77
	c, err := gslb.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.SetCatalog(c)
	b := h.fastAnswer(q, netip.MustParseAddr("198.18.2.1"), nil, &st)
	if a == nil || b == nil || binary.BigEndian.Uint32(b[len(b)-10:]) != 77 {
		t.Fatalf("after the swap: %x (before %x)", b, a)
	}
}

// TestFastPathNoAlloc: the fast path allocates nothing per query beyond
// what the locator does (geo.PrefixMap and the policy's location).
func TestFastPathNoAlloc(t *testing.T) {
	h, _ := testHandler(t)
	out := make([]byte, 0, MaxUDPSize)
	var st fastState
	for _, tc := range []struct {
		q    []byte
		max  float64
		what string
	}{
		{wireQuery(t, "w.example.", dns.TypeA, 1, false, true, nil), 0, "weighted"},
		{wireQuery(t, "fo.example.", dns.TypeA, 1, false, true, nil), 0, "failover"},
		{wireQuery(t, "pathd.example.", dns.TypeA, 1, false, true, ecsOf(netip.MustParsePrefix("198.18.1.0/24"))), 0, "nearest with ECS"},
	} {
		src := netip.MustParseAddr("198.18.2.1")
		n := testing.AllocsPerRun(200, func() {
			if h.fastAnswer(tc.q, src, out, &st) == nil {
				t.Fatal("no fast answer")
			}
		})
		if n > tc.max {
			t.Errorf("%s: %v allocations per query, want at most %v", tc.what, n, tc.max)
		}
	}
}

// FuzzFastPath: random and mutated queries (seeded with real ones), every
// health state and source: whenever the fast path answers, its bytes are
// the reference path's packed answer.
func FuzzFastPath(f *testing.F) {
	for i, q := range fastSeeds(f) {
		f.Add(q, uint8(i), uint8(i/7))
	}
	fx := newFastFixture(f)
	f.Fuzz(func(t *testing.T, q []byte, hi, si uint8) {
		fx.check(t, q, int(hi), int(si))
	})
}

func BenchmarkUDPPath(b *testing.B) {
	h, _ := testHandler(b)
	q := wireQuery(b, "pathd.example.", dns.TypeA, 1, false, true, ecsOf(netip.MustParsePrefix("198.18.1.0/24")))
	src := netip.MustParseAddr("198.18.2.1")
	out := make([]byte, 0, MaxUDPSize)
	b.Run("fast", func(b *testing.B) {
		var st fastState
		b.ReportAllocs()
		for b.Loop() {
			h.fastAnswer(q, src, out, &st)
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			referenceAnswer(h, q, src, out)
		}
	})
}

var _ = fmt.Sprint

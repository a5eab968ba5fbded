package gslbrole

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/gslb/dnsserver"

	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// rrlOf is DefaultRRL at perSecond.
func rrlOf(perSecond int) RRL {
	c := DefaultRRL
	c.ResponsesPerSecond = perSecond
	return c
}

// answerOf packs a response to name/qtype with rcode.
func answerOf(t testing.TB, name string, qtype uint16, rcode int) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response, m.Rcode = true, rcode
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRateLimiter: a window's worth (twice the rate by default), refilled
// at the rate, per /24 (IPv4) or /56 (IPv6) and response class; the table
// stays bounded.
func TestRateLimiter(t *testing.T) {
	resp := answerOf(t, "www.example.", dns.TypeA, dns.RcodeSuccess)
	l := newRateLimiter(rrlOf(5))
	t0 := time.Unix(1000, 0)
	a := netip.MustParseAddr("198.51.100.7")
	same := netip.MustParseAddr("198.51.100.200") // same /24
	other := netip.MustParseAddr("198.51.101.7")
	n := 0
	for i := range 20 {
		src := a
		if i%2 == 1 {
			src = same
		}
		if l.allow(src, resp, t0) {
			n++
		}
	}
	if n != 10 {
		t.Errorf("burst: %d allowed, want 10 (2 x rate)", n)
	}
	if !l.allow(other, resp, t0) {
		t.Error("another /24 is limited by the first one's bucket")
	}
	if l.allow(a, resp, t0.Add(100*time.Millisecond)) {
		t.Error("0.5 token after 100 ms: allowed")
	}
	if !l.allow(a, resp, t0.Add(300*time.Millisecond)) {
		t.Error("1.5 tokens after 300 ms: refused")
	}
	v6 := newRateLimiter(rrlOf(1))
	if !v6.allow(netip.MustParseAddr("2001:db8:0:1::1"), resp, t0) || !v6.allow(netip.MustParseAddr("2001:db8:0:2::1"), resp, t0) ||
		v6.allow(netip.MustParseAddr("2001:db8:0:3::1"), resp, t0) {
		t.Error("IPv6 sources of one /56 do not share a bucket of 2")
	}
	// Bounded: a flood of sources never grows the table past the bound.
	big := newRateLimiter(rrlOf(1))
	for i := range maxRateSources + 100 {
		// One /56 each, inside 2001:db8::/32.
		big.allow(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 16), byte(i >> 8), byte(i), 0, 0, 0, 0, 0, 0, 0, 0, 1}), resp, t0)
	}
	if len(big.buckets) > maxRateSources {
		t.Errorf("%d buckets, bound %d", len(big.buckets), maxRateSources)
	}
	// A full table whose sweep frees little starts over, so the next full
	// scan is at least a quarter of the table away: with buckets going idle
	// one by one (one per new source), a sweep that removed only the idle
	// ones would scan the whole table on every new source.
	drip := newRateLimiter(rrlOf(1))
	step := rateIdle / maxRateSources
	for i := range maxRateSources {
		drip.buckets[rateKey{net: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), dnsserver.SourceNetV4Bits)}] =
			&rateBucket{tokens: 1, last: t0.Add(time.Duration(i) * step)}
	}
	drip.allow(netip.MustParseAddr("198.51.100.1"), resp, t0.Add(rateIdle+step/2)) // one bucket idle
	if n := len(drip.buckets); n > maxRateSources*3/4 {
		t.Errorf("after a sweep freeing 1 bucket: %d buckets, want at most %d (the next new source would scan them all again)", n, maxRateSources*3/4)
	}
	if newRateLimiter(rrlOf(0)) != nil {
		t.Error("rate 0 is no limiter")
	}
}

// TestRoleRateLimit: through the running role, 40 UDP queries sent at
// once from one source get 10 answers (the burst), and of the rest every
// other one an empty TC=1 answer (slip) and the others nothing; all of
// it counted. TCP is not limited.
func TestRoleRateLimit(t *testing.T) {
	r := startRole(t, embeddedtest.Store(t), Config{Name: "rrl", RRL: rrlOf(5)})
	c, err := net.Dial("udp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion("example.", dns.TypeSOA)
	for i := range 40 {
		q.Id = uint16(i + 1)
		b, _ := q.Pack()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	answered, slipped := 0, 0
	buf := make([]byte, 1500)
	c.SetReadDeadline(time.Now().Add(time.Second))
	for {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if m.Truncated && m.Rcode == dns.RcodeSuccess {
			slipped++
		} else {
			answered++
		}
	}
	// The bucket refills 5 per second: a slow machine may answer one or
	// two more.
	if answered < 10 || answered > 12 {
		t.Errorf("answered %d, want the burst of 10", answered)
	}
	rest := 40 - answered
	if slipped < rest/2 || slipped > rest/2+1 {
		t.Errorf("slipped %d of %d over the limit, want every other one", slipped, rest)
	}
	if s, d := r.metric(t, "azgate_gslb_rate_limited_total", "action=slipped"), r.metric(t, "azgate_gslb_rate_limited_total", "action=dropped"); int(s) != slipped || int(s+d) != rest {
		t.Errorf("metrics slipped %v dropped %v; saw %d slipped of %d", s, d, slipped, rest)
	}
	tc := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	for range 3 {
		if resp, _, err := tc.Exchange(q, r.addr); err != nil || resp.Truncated || resp.Rcode != dns.RcodeRefused {
			t.Fatalf("TCP while UDP is limited: %v %v", resp, err)
		}
	}
}

// TestRateLimiterClasses: buckets are per response class, as BIND's RRL:
// another name or type has its own, 0x20 spellings share one, every
// NXDOMAIN of a network shares one, every error shares one; the prefix
// lengths are the knobs'.
func TestRateLimiterClasses(t *testing.T) {
	t0 := time.Unix(1000, 0)
	src := netip.MustParseAddr("198.51.100.7")
	c := rrlOf(1)
	c.Window = time.Second // one answer per class at once
	c.IPv4Prefix = 28
	for _, tc := range []struct {
		name   string
		a, b   []byte
		bSrc   string
		shared bool
	}{
		{"same name and type", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "www.example.", dns.TypeA, 0), "", true},
		{"0x20 spelling", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "WwW.eXample.", dns.TypeA, 0), "", true},
		{"another type", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "www.example.", dns.TypeTXT, 0), "", false},
		{"another name", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "w.example.", dns.TypeA, 0), "", false},
		{"NXDOMAINs share", answerOf(t, "a.example.", dns.TypeA, dns.RcodeNameError), answerOf(t, "b.example.", dns.TypeA, dns.RcodeNameError), "", true},
		{"errors share", answerOf(t, "a.example.", dns.TypeA, dns.RcodeRefused), answerOf(t, "b.example.", dns.TypeMX, dns.RcodeFormatError), "", true},
		{"NXDOMAIN is not an answer", answerOf(t, "a.example.", dns.TypeA, 0), answerOf(t, "a.example.", dns.TypeA, dns.RcodeNameError), "", false},
		{"same /28", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "www.example.", dns.TypeA, 0), "198.51.100.15", true},
		{"another /28", answerOf(t, "www.example.", dns.TypeA, 0), answerOf(t, "www.example.", dns.TypeA, 0), "198.51.100.16", false},
	} {
		l := newRateLimiter(c)
		if !l.allow(src, tc.a, t0) {
			t.Fatalf("%s: first answer refused", tc.name)
		}
		bs := src
		if tc.bSrc != "" {
			bs = netip.MustParseAddr(tc.bSrc)
		}
		if got := !l.allow(bs, tc.b, t0); got != tc.shared {
			t.Errorf("%s: second answer limited %v, want %v", tc.name, got, tc.shared)
		}
	}
	for _, bad := range []RRL{{ResponsesPerSecond: -1}, {ResponsesPerSecond: 5, Slip: -1, Window: time.Second, IPv4Prefix: 24, IPv6Prefix: 56},
		{ResponsesPerSecond: 5, Slip: 2, Window: 0, IPv4Prefix: 24, IPv6Prefix: 56}, {ResponsesPerSecond: 5, Slip: 2, Window: time.Second, IPv4Prefix: 33, IPv6Prefix: 56}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if DefaultRRL.Validate() != nil || (RRL{}).Validate() != nil {
		t.Error("the default or off refused")
	}
}

// BenchmarkRRL: what the limit adds to every UDP answer (class hash, lock,
// bucket), one client network and class: the flood's case.
func BenchmarkRRL(b *testing.B) {
	l := newRateLimiter(DefaultRRL)
	resp := answerOf(b, "pathd.example.", dns.TypeA, dns.RcodeSuccess)
	src := netip.MustParseAddr("198.51.100.7")
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(src, resp)
	}
}

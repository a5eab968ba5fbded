package dnsserver

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkAnswer measures the handler alone (no sockets): a nearest
// answer with ECS, including the pack a server would do.
func BenchmarkAnswer(b *testing.B) {
	for _, tc := range []struct {
		name, q, ecs string
	}{
		{"nearest+ECS", "pathd.example.", "198.18.9.0/24"},
		{"weighted", "w.example.", ""},
		{"static", "www.example.", ""},
		{"nxdomain", "nope.example.", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, _ := testHandler(b)
			q := query(tc.q, dns.TypeA, tc.ecs, 1)
			src := netip.MustParseAddr("198.18.2.1")
			b.ReportAllocs()
			for b.Loop() {
				r := h.Answer(q, src, false)
				if _, err := r.Pack(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFastPathFamilies: the fast path's cost per query for IPv4 and
// IPv6 clients (ECS), located by the prefix map and by the MaxMind
// database, A and AAAA: the IPv6 rows beside the IPv4 ones.
func BenchmarkFastPathFamilies(b *testing.B) {
	h, _ := testHandler(b)
	for _, tc := range []struct {
		name  string
		qtype uint16
		ecs   string
	}{
		{"A/v4-map", dns.TypeA, "198.18.1.0/24"},
		{"A/v4-db", dns.TypeA, "198.18.12.0/24"},
		{"AAAA/v6-map", dns.TypeAAAA, "2001:db8:100::/48"},
		{"AAAA/v6-db", dns.TypeAAAA, "2001:db8:8000::/48"},
		{"A/v6-db", dns.TypeA, "2001:db8:8000::/48"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := wireQuery(b, "pathd.example.", tc.qtype, 1, false, true, ecsOf(netip.MustParsePrefix(tc.ecs)))
			src := netip.MustParseAddr("198.18.2.1")
			out := make([]byte, 0, MaxUDPSize)
			var st fastState
			if h.fastAnswer(q, src, out, &st) == nil {
				b.Fatal("not a fast-path query")
			}
			b.ReportAllocs()
			for b.Loop() {
				h.fastAnswer(q, src, out, &st)
			}
		})
	}
}

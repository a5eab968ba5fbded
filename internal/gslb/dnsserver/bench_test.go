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

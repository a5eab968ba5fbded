package dnsserver

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// FuzzHandler feeds random bytes through the message path: what miekg/dns
// unpacks goes to the handler over UDP and over TCP. The handler must not
// panic, and every answer must pack within the size limit of its transport
// (the client's EDNS size, at most MaxUDPSize, for UDP; MaxResponseSize for
// TCP). Messages that do not unpack are answered FORMERR by dns.Server
// before reaching the handler (TestServerMalformedECSOnWire).
func FuzzHandler(f *testing.F) {
	for _, q := range []*dns.Msg{
		query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1),
		query("big.example.", dns.TypeTXT, "", 2),
		query("nope.example.", dns.TypeAAAA, "2001:db8:100::/48", 3),
		query("example.", dns.TypeANY, "", 4),
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	h, _ := testHandler(f, vipEU)
	src := netip.MustParseAddr("198.18.2.1")
	f.Fuzz(func(t *testing.T, data []byte) {
		var req dns.Msg
		if req.Unpack(data) != nil {
			return
		}
		for _, tcp := range []bool{false, true} {
			r := h.Answer(req.Copy(), src, tcp)
			if r == nil {
				if !req.Response {
					t.Fatal("no answer to a query")
				}
				continue
			}
			b, err := r.Pack()
			if err != nil {
				t.Fatalf("answer does not pack: %v\n%v", err, r)
			}
			limit := MaxResponseSize
			if !tcp {
				limit = MinUDPSize
				if o := req.IsEdns0(); o != nil && r.IsEdns0() != nil {
					limit = min(max(int(o.UDPSize()), MinUDPSize), MaxUDPSize)
				}
			}
			if len(b) > limit {
				t.Fatalf("answer %d bytes over %d (tcp %v)", len(b), limit, tcp)
			}
		}
	})
}

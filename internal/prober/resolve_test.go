package prober

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAnswerValidation: a real DNS server on loopback answers each name in
// its own way; the resolver takes only an address that is for the name it
// asked (directly or through a CNAME chain from it), of the type asked,
// with the chain's smallest TTL, and refuses an answer to another question.
func TestAnswerValidation(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	answers := map[string][]dns.RR{
		// Only a record for another name: nothing for the asked one.
		"other.example.": {rr("evil.example. 30 IN A 203.0.113.66")},
		// A stray record first, then the chain: the chain's end counts,
		// with the CNAME's smaller TTL.
		"chain.example.": {
			rr("evil.example. 30 IN A 203.0.113.66"),
			rr("chain.example. 5 IN CNAME mid.example."),
			rr("mid.example. 30 IN CNAME end.example."),
			rr("end.example. 30 IN A 192.0.2.7"),
		},
		// An AAAA in an answer to an A question is not the A asked for.
		"type.example.": {rr("type.example. 30 IN AAAA 2001:db8::7")},
		// A CNAME loop ends, without an address.
		"loop.example.":  {rr("loop.example. 30 IN CNAME loop2.example."), rr("loop2.example. 30 IN CNAME loop.example.")},
		"plain.example.": {rr("PLAIN.example. 20 IN A 192.0.2.8")},
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		name := strings.ToLower(q.Question[0].Name)
		if name == "question.example." {
			r.Question[0].Name = "elsewhere.example."
			r.Answer = []dns.RR{rr("elsewhere.example. 30 IN A 203.0.113.66")}
		}
		if q.Question[0].Qtype == dns.TypeA {
			r.Answer = append(r.Answer, answers[name]...)
		}
		w.WriteMsg(r)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	server := pc.LocalAddr().String()
	ctx := context.Background()
	for _, c := range []struct {
		host string
		want netip.Addr
		ttl  time.Duration
		err  string
	}{
		{host: "plain.example", want: netip.MustParseAddr("192.0.2.8"), ttl: 20 * time.Second},
		{host: "chain.example", want: netip.MustParseAddr("192.0.2.7"), ttl: 5 * time.Second},
		{host: "other.example", err: "no address"},
		{host: "type.example", err: "no address"},
		{host: "loop.example", err: "no address"},
		{host: "question.example", err: "another question"},
	} {
		a, ttl, err := newResolver(c.host, []string{server}, false).ask(ctx, server, dns.TypeA)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v %v %v, want an error with %q", c.host, a, ttl, err, c.err)
			}
			continue
		}
		if err != nil || a != c.want || ttl != c.ttl {
			t.Errorf("%s: %v %v %v, want %v for %v", c.host, a, ttl, err, c.want, c.ttl)
		}
	}
}

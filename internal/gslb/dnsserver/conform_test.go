package dnsserver

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestConformance: the answers RFC 3225, RFC 6891, RFC 6840 and RFC 7871
// ask for, from the real server on loopback to miekg/dns's client, over UDP
// (the fast path where it answers, earlyReject, the reference path) and
// TCP (miekg/dns's server with tcpReader). Every answer clears AD and CD
// (RFC 4035 §3.1.6, RFC 6840 §5.8: we do not validate); every query that
// had an OPT record gets one back, rejections included (RFC 6891 §7), with
// the query's DO bit (RFC 3225 §3).
func TestConformance(t *testing.T) {
	s, _ := startServer(t, ServerConfig{})
	ecsRaw := func(data ...byte) dns.EDNS0 { return &dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: data} }
	for _, tc := range []struct {
		name   string
		q      string
		opcode int
		edns   bool
		do     bool
		opts   []dns.EDNS0
		twoOPT bool
		ver    uint8
		rcode  int // extended RCODEs included
	}{
		{name: "DO copied, fast path", q: "pathd.example.", edns: true, do: true, rcode: dns.RcodeSuccess},
		{name: "DO copied, fast path with ECS", q: "pathd.example.", edns: true, do: true,
			opts: []dns.EDNS0{ecsRaw(0, 1, 24, 0, 198, 18, 1)}, rcode: dns.RcodeSuccess},
		{name: "DO copied, reference path", q: "www.example.", edns: true, do: true, rcode: dns.RcodeSuccess},
		{name: "DO copied, NXDOMAIN", q: "nope.example.", edns: true, do: true, rcode: dns.RcodeNameError},
		{name: "DO clear stays clear", q: "pathd.example.", edns: true, rcode: dns.RcodeSuccess},
		{name: "no EDNS: no OPT", q: "pathd.example.", rcode: dns.RcodeSuccess},
		{name: "ECS exact length", q: "www.example.", edns: true, opts: []dns.EDNS0{ecsRaw(0, 1, 20, 0, 198, 18, 16)}, rcode: dns.RcodeSuccess},
		// RFC 7871 §6: too few or too many ADDRESS octets: FORMERR.
		{name: "ECS address shorter than /24 needs", q: "pathd.example.", edns: true, do: true,
			opts: []dns.EDNS0{ecsRaw(0, 1, 24, 0, 198, 18)}, rcode: dns.RcodeFormatError},
		{name: "ECS address longer than /8 needs", q: "pathd.example.", edns: true,
			opts: []dns.EDNS0{ecsRaw(0, 1, 8, 0, 198, 18, 1, 0)}, rcode: dns.RcodeFormatError},
		{name: "ECS IPv6 /40 with 16 octets", q: "pathd.example.", edns: true,
			opts: []dns.EDNS0{ecsRaw(0, 2, 40, 0, 0x20, 1, 0xd, 0xb8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}, rcode: dns.RcodeFormatError},
		{name: "ECS bits beyond the prefix", q: "pathd.example.", edns: true,
			opts: []dns.EDNS0{ecsRaw(0, 1, 20, 0, 198, 18, 17)}, rcode: dns.RcodeFormatError},
		// Undecodable ECS (miekg/dns's Unpack fails): FORMERR, with OPT.
		{name: "ECS family 0 with a prefix", q: "pathd.example.", edns: true, do: true,
			opts: []dns.EDNS0{ecsRaw(0, 0, 8, 0, 10)}, rcode: dns.RcodeFormatError},
		{name: "ECS family 3", q: "pathd.example.", edns: true, opts: []dns.EDNS0{ecsRaw(0, 3, 8, 0, 10)}, rcode: dns.RcodeFormatError},
		{name: "ECS IPv4 /33", q: "pathd.example.", edns: true,
			opts: []dns.EDNS0{ecsRaw(0, 1, 33, 0, 10, 0, 0, 0, 0)}, rcode: dns.RcodeFormatError},
		{name: "ECS IPv6 /129", q: "pathd.example.", edns: true,
			opts: []dns.EDNS0{ecsRaw(append([]byte{0, 2, 129, 0}, make([]byte, 17)...)...)}, rcode: dns.RcodeFormatError},
		{name: "dig +subnet=0 (family 0, /0)", q: "pathd.example.", edns: true, opts: []dns.EDNS0{ecsRaw(0, 0, 0, 0)}, rcode: dns.RcodeSuccess},
		// RFC 6891 §6.1.1: two OPT records: FORMERR.
		{name: "two OPT records", q: "pathd.example.", edns: true, do: true, twoOPT: true, rcode: dns.RcodeFormatError},
		// RFC 6891 §6.1.3: BADVERS.
		{name: "EDNS version 1", q: "pathd.example.", edns: true, do: true, ver: 1, rcode: dns.RcodeBadVers},
		// RFC 1035 §4.1.1: an opcode we do not implement: NOTIMP.
		{name: "opcode 3 (unassigned)", q: "pathd.example.", opcode: 3, edns: true, do: true, rcode: dns.RcodeNotImplemented},
		{name: "opcode UPDATE", q: "www.example.", opcode: dns.OpcodeUpdate, edns: true, rcode: dns.RcodeNotImplemented},
		{name: "opcode NOTIFY", q: "www.example.", opcode: dns.OpcodeNotify, edns: true, rcode: dns.RcodeNotImplemented},
		{name: "opcode 3 without EDNS: no OPT", q: "pathd.example.", opcode: 3, rcode: dns.RcodeNotImplemented},
	} {
		for _, net := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+net, func(t *testing.T) {
				m := new(dns.Msg)
				m.SetQuestion(tc.q, dns.TypeA)
				m.Opcode = tc.opcode
				m.AuthenticatedData, m.CheckingDisabled = true, true
				if tc.edns {
					o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
					o.SetUDPSize(1232)
					o.SetDo(tc.do)
					o.SetVersion(tc.ver)
					o.Option = tc.opts
					m.Extra = append(m.Extra, o)
					if tc.twoOPT {
						m.Extra = append(m.Extra, dns.Copy(o))
					}
				}
				addr := s.UDPAddr().String()
				if net == "tcp" {
					addr = s.TCPAddr().String()
				}
				c := &dns.Client{Net: net, Timeout: 2 * time.Second}
				r, _, err := c.Exchange(m, addr)
				if err != nil {
					t.Fatal(err)
				}
				if r.Rcode != tc.rcode {
					t.Errorf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
				if r.AuthenticatedData || r.CheckingDisabled {
					t.Errorf("AD %v CD %v: want both clear", r.AuthenticatedData, r.CheckingDisabled)
				}
				if r.Opcode != tc.opcode || r.Id != m.Id || !r.Response {
					t.Errorf("opcode %d id %d QR %v: want %d %d true", r.Opcode, r.Id, r.Response, tc.opcode, m.Id)
				}
				if len(r.Question) != 1 || r.Question[0].Name != tc.q {
					t.Errorf("question %v", r.Question)
				}
				ro := r.IsEdns0()
				nopt := 0
				for _, rr := range r.Extra {
					if _, ok := rr.(*dns.OPT); ok {
						nopt++
					}
				}
				switch {
				case !tc.edns && nopt != 0:
					t.Errorf("%d OPT records answering a query without EDNS", nopt)
				case tc.edns && (nopt != 1 || ro == nil):
					t.Errorf("%d OPT records answering a query with EDNS: want 1", nopt)
				case tc.edns:
					if ro.Do() != tc.do {
						t.Errorf("DO %v, want %v (RFC 3225 §3)", ro.Do(), tc.do)
					}
					if ro.Version() != 0 || ro.UDPSize() != MaxUDPSize {
						t.Errorf("OPT version %d size %d", ro.Version(), ro.UDPSize())
					}
					for _, o := range ro.Option {
						if o.Option() == dns.EDNS0SUBNET && tc.rcode != dns.RcodeSuccess {
							t.Errorf("ECS echoed in a %s", dns.RcodeToString[tc.rcode])
						}
					}
				}
			})
		}
	}
	// Every UDP answer that could came from the fast path.
	if s.UDPStats().Fast.Load() == 0 {
		t.Error("no answer from the fast path")
	}
}

// TestCheckECS: the wire check of an ECS option, case by case.
func TestCheckECS(t *testing.T) {
	for _, tc := range []struct {
		e  []byte
		ok bool
	}{
		{[]byte{0, 1, 24, 0, 198, 18, 1}, true},
		{[]byte{0, 1, 0, 0}, true},
		{[]byte{0, 0, 0, 0}, true},
		{[]byte{0, 2, 56, 0, 0x20, 1, 0xd, 0xb8, 0, 0, 1}, true},
		{[]byte{0, 1, 32, 0, 198, 18, 1, 7}, true},
		{[]byte{0, 1, 24, 0, 198, 18}, false},          // short
		{[]byte{0, 1, 24, 0, 198, 18, 1, 0}, false},    // long
		{[]byte{0, 1, 23, 0, 198, 18, 1}, false},       // bit 24 set
		{[]byte{0, 1, 33, 0, 198, 18, 1, 0, 0}, false}, // /33
		{[]byte{0, 0, 8, 0, 10}, false},
		{[]byte{0, 3, 8, 0, 10}, false},
		{[]byte{0, 1, 24, 33, 198, 18, 1}, false}, // scope /33
		{[]byte{0, 1, 24}, false},
	} {
		if got := checkECS(tc.e); got != tc.ok {
			t.Errorf("checkECS(%v) = %v, want %v", tc.e, got, tc.ok)
		}
	}
}

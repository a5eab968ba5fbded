package dnsserver

import (
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/gslb"
)

// Size limits (RFC 1035 §4.2.1, RFC 6891 §6.2.5, DNS flag day 2020).
const (
	// MinUDPSize is what a client without EDNS can take over UDP.
	MinUDPSize = 512
	// MaxUDPSize caps the client's advertised EDNS size: above it UDP
	// answers fragment, so we truncate and let the client use TCP.
	MaxUDPSize = 1232
	// MaxResponseSize is the hard cap on any response, TCP included.
	MaxResponseSize = 16384
)

// Stats counts what the handler answered; every dropped or refused query
// is counted here. Fields are read with atomic loads.
type Stats struct {
	Queries   atomic.Uint64
	FormErr   atomic.Uint64 // malformed queries (ECS, question count, EDNS)
	Refused   atomic.Uint64 // names outside every zone, transfers, non-IN classes
	NXDomain  atomic.Uint64
	NoData    atomic.Uint64
	ServFail  atomic.Uint64 // GSLB records with every target down and servfail set
	FailOpen  atomic.Uint64 // GSLB answers given with every target down
	Truncated atomic.Uint64 // responses cut to the client's size (TC set)
	NotImp    atomic.Uint64 // opcodes other than QUERY
}

// Handler answers authoritatively from a Catalog. It implements
// dns.Handler; it is safe for concurrent use and the Catalog can be
// replaced at any time with SetCatalog.
type Handler struct {
	catalog atomic.Pointer[gslb.Catalog]
	loc     geo.Locator
	health  gslb.Health
	Stats   Stats
}

// NewHandler returns a handler serving c. loc may be nil (no location:
// nearest falls back to failover order); health may be nil (all up).
func NewHandler(c *gslb.Catalog, loc geo.Locator, health gslb.Health) *Handler {
	if health == nil {
		health = gslb.AllUp{}
	}
	h := &Handler{loc: loc, health: health}
	h.catalog.Store(c)
	return h
}

// SetCatalog swaps the served zones; queries in flight finish on the old one.
func (h *Handler) SetCatalog(c *gslb.Catalog) { h.catalog.Store(c) }

// ServeDNS implements dns.Handler.
func (h *Handler) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	tcp := false
	var src netip.Addr
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		src = addrOf(a.IP)
	case *net.TCPAddr:
		src, tcp = addrOf(a.IP), true
	}
	resp := h.Answer(req, src, tcp)
	if resp == nil {
		return
	}
	_ = w.WriteMsg(resp)
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// Answer builds the response to req from a client (the resolver) at src,
// received over TCP or UDP. It returns nil for messages that get no answer
// (responses). The result is already truncated to what the client can take.
func (h *Handler) Answer(req *dns.Msg, src netip.Addr, tcp bool) *dns.Msg {
	if req.Response {
		return nil // never answer a response: no reflection loops
	}
	h.Stats.Queries.Add(1)
	m := new(dns.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	m.RecursionDesired = req.RecursionDesired // copied back, RFC 1035 §4.1.1
	m.RecursionAvailable = false
	if len(req.Question) == 1 {
		m.Question = []dns.Question{req.Question[0]}
	}

	// EDNS (RFC 6891): one OPT at most, version 0; we answer with our own,
	// rejections included (§7: a response without OPT tells the resolver
	// we have no EDNS), with the query's DO bit (RFC 3225 §3).
	var opt *dns.OPT
	nopt := 0
	for _, rr := range req.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			if opt == nil {
				opt = o
			}
			nopt++
		}
	}
	var ro *dns.OPT
	if opt != nil {
		ro = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		ro.SetUDPSize(MaxUDPSize)
		ro.SetDo(opt.Do())
		m.Extra = append(m.Extra, ro)
	}
	if req.Opcode != dns.OpcodeQuery {
		h.Stats.NotImp.Add(1)
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	if len(req.Question) != 1 || nopt > 1 || (opt != nil && opt.Hdr.Name != ".") {
		return h.formErr(m)
	}
	size := MinUDPSize
	var ecs *dns.EDNS0_SUBNET
	if opt != nil {
		if opt.Version() != 0 {
			// BADVERS (RFC 6891 §6.1.3); Pack puts its upper bits in ro.
			m.Rcode = dns.RcodeBadVers
			return m
		}
		size = max(int(opt.UDPSize()), MinUDPSize)
		for _, o := range opt.Option {
			e, ok := o.(*dns.EDNS0_SUBNET)
			if !ok {
				continue
			}
			if ecs != nil {
				return h.formErr(m) // RFC 7871 §7.1.1: one ECS option
			}
			ecs = e
		}
	}
	limit := min(size, MaxUDPSize)
	if tcp {
		limit = MaxResponseSize
	}

	// Client location: ECS when present and non-zero, else the resolver.
	var client netip.Addr
	var echo *dns.EDNS0_SUBNET
	if ecs != nil {
		addr, ok := validECS(ecs)
		if !ok {
			return h.formErr(m)
		}
		echo = &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: ecs.Family,
			SourceNetmask: ecs.SourceNetmask, Address: ecs.Address}
		ro.Option = append(ro.Option, echo)
		if ecs.SourceNetmask > 0 {
			client = addr
		}
	}
	if !client.IsValid() {
		client = src
		// RFC 7871 §7.1.2: with SOURCE 0 the answer must use scope 0
		// (the resolver's own address was used, not the client's).
		ecs = nil
	}

	h.answerQuestion(m, req.Question[0], client, ecs != nil, echo)
	m.Authoritative = m.Rcode != dns.RcodeRefused
	m.Compress = true
	if m.Len() > limit {
		m.Truncate(limit)
		// Truncate keeps the question and OPT; TC tells the client to
		// retry over TCP (RFC 7766). Over TCP the cap only protects us.
		m.Truncated = true
		h.Stats.Truncated.Add(1)
	}
	return m
}

// countReject counts a query earlyReject answered.
func (h *Handler) countReject(kind int) {
	switch kind {
	case rejectFormErr:
		h.Stats.Queries.Add(1)
		h.Stats.FormErr.Add(1)
	case rejectNotImp:
		h.Stats.Queries.Add(1)
		h.Stats.NotImp.Add(1)
	case rejectBadVers:
		h.Stats.Queries.Add(1)
	}
}

func (h *Handler) formErr(m *dns.Msg) *dns.Msg {
	h.Stats.FormErr.Add(1)
	m.Rcode = dns.RcodeFormatError
	m.Answer, m.Ns = nil, nil
	return m
}

// validECS checks an ECS option as RFC 7871 §7.1.1 asks (family 1 or 2,
// source prefix within the family, no address bits set beyond the source
// prefix) and returns the client prefix's address. miekg/dns already
// rejects unknown families and too-long prefixes when unpacking; the
// checks are repeated here for messages built in memory.
func validECS(e *dns.EDNS0_SUBNET) (netip.Addr, bool) {
	var a netip.Addr
	switch e.Family {
	case 0:
		// dig sends family 0 with +subnet=0: "do not use my address".
		return netip.Addr{}, e.SourceNetmask == 0
	case 1:
		ip4 := e.Address.To4()
		if ip4 == nil || e.SourceNetmask > 32 {
			return a, false
		}
		a = netip.AddrFrom4([4]byte(ip4))
	case 2:
		ip := e.Address.To16()
		if ip == nil || e.SourceNetmask > 128 {
			return a, false
		}
		a = netip.AddrFrom16([16]byte(ip))
	default:
		return a, false
	}
	p, err := a.Prefix(int(e.SourceNetmask))
	if err != nil || p.Addr() != a {
		return a, false // bits beyond the prefix: FORMERR (§7.1.1)
	}
	return a, true
}

// answerQuestion fills m for q asked by a client at client. useECS says the
// client address came from ECS, so echo carries the scope.
func (h *Handler) answerQuestion(m *dns.Msg, q dns.Question, client netip.Addr, useECS bool, echo *dns.EDNS0_SUBNET) {
	if q.Qclass != dns.ClassINET {
		h.Stats.Refused.Add(1)
		m.Rcode = dns.RcodeRefused
		return
	}
	c := h.catalog.Load()
	name := dns.CanonicalName(q.Name)
	z := c.Find(name)
	if z == nil {
		h.Stats.Refused.Add(1)
		m.Rcode = dns.RcodeRefused
		return
	}
	switch q.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		// Zone transfers are out of scope (issue 11): refuse, RFC 5936 §4.2.
		h.Stats.Refused.Add(1)
		m.Rcode = dns.RcodeRefused
		return
	}
	if !z.Exists(name) {
		h.Stats.NXDomain.Add(1)
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{z.NegativeSOA()}
		return
	}
	var ans []dns.RR
	if name == z.Origin() {
		switch q.Qtype {
		case dns.TypeSOA:
			ans = append(ans, z.SOA())
		case dns.TypeNS:
			ans = append(ans, z.NS()...)
		}
	}
	if q.Qtype == dns.TypeANY {
		// RFC 8482: answer ANY with a small synthesised HINFO.
		ans = append(ans, &dns.HINFO{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeHINFO,
			Class: dns.ClassINET, Ttl: gslb.DefaultRecordTTL}, Cpu: "RFC8482"})
	} else {
		for _, rr := range z.Static(name) {
			t := rr.Header().Rrtype
			if t == q.Qtype || (t == dns.TypeCNAME && q.Qtype != dns.TypeCNAME) {
				ans = append(ans, rr)
			}
		}
	}
	if g := z.GSLB(name); g != nil && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA) {
		locate := func() *gslb.ClientLoc {
			if h.loc == nil || !client.IsValid() {
				return nil
			}
			return gslb.LocateClient(h.loc, client)
		}
		ch := g.Choose(q.Qtype == dns.TypeAAAA, locate, h.health, m.Id)
		if ch.FailOpen {
			h.Stats.FailOpen.Add(1)
		}
		if useECS && ch.UsedLoc != nil && echo != nil {
			echo.SourceScope = uint8(min(max(ch.UsedLoc.Bits, 0), maxBits(client)))
		}
		if ch.ServFail {
			h.Stats.ServFail.Add(1)
			m.Rcode = dns.RcodeServerFailure
			return
		}
		if ch.OK {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: g.TTL()}
			if q.Qtype == dns.TypeA {
				hdr.Rrtype = dns.TypeA
				ans = append(ans, &dns.A{Hdr: hdr, A: ch.Target.VIP.AsSlice()})
			} else {
				hdr.Rrtype = dns.TypeAAAA
				ans = append(ans, &dns.AAAA{Hdr: hdr, AAAA: ch.Target.VIP.AsSlice()})
			}
		}
	}
	if len(ans) == 0 {
		h.Stats.NoData.Add(1)
		m.Ns = []dns.RR{z.NegativeSOA()}
		return
	}
	// Answer with the query's spelling of the name (0x20 case
	// randomisation, draft-vixie-dnsext-dns0x20): copy headers, don't
	// mutate the catalog's records.
	for _, rr := range ans {
		if rr.Header().Name != q.Name {
			rr = dns.Copy(rr)
			rr.Header().Name = q.Name
		}
		m.Answer = append(m.Answer, rr)
	}
}

func maxBits(a netip.Addr) int {
	if a.Is4() {
		return 32
	}
	return 128
}

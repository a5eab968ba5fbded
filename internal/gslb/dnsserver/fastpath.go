package dnsserver

import (
	"encoding/binary"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/gslb"
)

// The wire-level fast path for the query an authoritative GSLB server
// mostly gets: one question, class IN, type A or AAAA, for a name with a
// GSLB record, opcode QUERY, no answer or authority records, and at most an
// OPT record (EDNS version 0) whose options are at most one well-formed
// ECS option (RFC 7871: address exactly SOURCE PREFIX-LENGTH bits long,
// no bits set beyond it, SCOPE 0) and COOKIEs, which Answer ignores too.
// It reads the query bytes in place, chooses the target with the same
// policy code as Answer (choose) and writes the answer bytes into the
// caller's buffer: header, the question as sent, one record whose owner
// is a compression pointer to the question, and our OPT with the ECS echo.
//
// Anything else returns nil and goes the reference way (miekg/dns unpack,
// Handler.Answer, pack): other names and types, names with bytes that
// miekg/dns would escape in presentation form, compression pointers,
// trailing bytes, other EDNS options, odd ECS, and answers that are not a
// plain address (SERVFAIL, NODATA). FuzzFastPath holds the two to the
// same bytes: whenever this path answers, its answer equals the packed
// reference answer.

// fastState is what one UDP loop reuses between queries.
type fastState struct {
	idx   *fastIndex
	loc   gslb.ClientLoc
	lower [255]byte
}

// fastIndex maps the lower-case wire form of every GSLB name to its
// record, for the catalog it was built from.
type fastIndex struct {
	cat   *gslb.Catalog
	names map[string]*gslb.CatalogGSLB
}

func buildFastIndex(c *gslb.Catalog) *fastIndex {
	idx := &fastIndex{cat: c, names: map[string]*gslb.CatalogGSLB{}}
	var buf [256]byte
	for name, g := range c.ServedGSLB() {
		if !plainPresentation(name) {
			continue // escaped bytes
		}
		n, err := dns.PackDomainName(name, buf[:], 0, nil, false)
		if err != nil {
			continue
		}
		idx.names[string(buf[:n])] = g
	}
	return idx
}

// plainPresentation: no escapes (catalog names are lower case already).
func plainPresentation(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' {
			return false
		}
	}
	return true
}

// plainByte is a label byte miekg/dns leaves as is in presentation form
// (no \X or \DDD escape), so the wire bytes, lower-cased, are the
// canonical name's.
func plainByte(b byte) bool {
	if b <= ' ' || b >= 0x7f {
		return false
	}
	switch b {
	case '.', '(', ')', ';', '@', '"', '\\':
		return false
	}
	return true
}

const (
	ednsCodeCookie = 10
	// fastOPT is our OPT record's fixed part: root name, type OPT, UDP
	// size MaxUDPSize, extended RCODE 0, version 0, the query's DO bit.
	optFixedLen = 11
)

// fastAnswer answers q from src into out, or returns nil for the
// reference path.
func (h *Handler) fastAnswer(q []byte, src netip.Addr, out []byte, st *fastState) []byte {
	if len(q) < 17 || q[2]&0xF8 != 0 || // QR, opcode
		binary.BigEndian.Uint16(q[4:]) != 1 || binary.BigEndian.Uint16(q[6:]) != 0 ||
		binary.BigEndian.Uint16(q[8:]) != 0 {
		return nil
	}
	arcount := binary.BigEndian.Uint16(q[10:])
	if arcount > 1 {
		return nil
	}
	// The name: plain labels, lower-cased into st.lower.
	off, n := 12, 0
	for {
		if off >= len(q) {
			return nil
		}
		ln := int(q[off])
		if ln == 0 {
			break
		}
		if ln > 63 || off+1+ln >= len(q) || n+1+ln+1 > 255 {
			return nil
		}
		st.lower[n] = byte(ln)
		for i := 1; i <= ln; i++ {
			b := q[off+i]
			if !plainByte(b) {
				return nil
			}
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			st.lower[n+i] = b
		}
		n += 1 + ln
		off += 1 + ln
	}
	st.lower[n] = 0
	n++
	qend := off + 1 + 4 // after QTYPE, QCLASS
	if qend > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[off+1:])
	if binary.BigEndian.Uint16(q[off+3:]) != dns.ClassINET || (qtype != dns.TypeA && qtype != dns.TypeAAAA) {
		return nil
	}
	c := h.catalog.Load()
	if st.idx == nil || st.idx.cat != c {
		st.idx = buildFastIndex(c)
	}
	g := st.idx.names[string(st.lower[:n])]
	if g == nil {
		return nil
	}

	// EDNS: one OPT, version 0, ECS and COOKIE options only.
	var (
		hasOPT, hasECS bool
		doBit          byte   // the query's DO bit, copied (RFC 3225 §3)
		ecs            []byte // the option's data: family, source, scope, address
		ecsAddr        netip.Addr
		ecsBits        int
	)
	p := qend
	if arcount == 1 {
		if p+optFixedLen > len(q) || q[p] != 0 || binary.BigEndian.Uint16(q[p+1:]) != dns.TypeOPT ||
			q[p+6] != 0 { // version
			return nil
		}
		rdlen := int(binary.BigEndian.Uint16(q[p+9:]))
		doBit = q[p+7] & 0x80
		p += optFixedLen
		if p+rdlen != len(q) {
			return nil
		}
		hasOPT = true
		for p < len(q) {
			if p+4 > len(q) {
				return nil
			}
			code, olen := binary.BigEndian.Uint16(q[p:]), int(binary.BigEndian.Uint16(q[p+2:]))
			p += 4
			if p+olen > len(q) {
				return nil
			}
			data := q[p : p+olen]
			p += olen
			switch code {
			case dns.EDNS0SUBNET:
				if hasECS {
					return nil
				}
				hasECS = true
				a, bits, ok := fastECS(data)
				if !ok {
					return nil
				}
				ecs, ecsAddr, ecsBits = data, a, bits
			case ednsCodeCookie:
			default:
				return nil
			}
		}
	} else if p != len(q) {
		return nil
	}

	// The answer, as answerQuestion chooses it.
	client := src
	useECS := hasECS && ecsBits > 0
	if useECS {
		client = ecsAddr
	}
	id := binary.BigEndian.Uint16(q)
	v6 := qtype == dns.TypeAAAA
	locate := func() *gslb.ClientLoc {
		if h.loc == nil || !client.IsValid() {
			return nil
		}
		gslb.LocateInto(&st.loc, h.loc, client)
		return &st.loc
	}
	ch := g.Choose(v6, locate, h.health, id)
	if !ch.OK {
		return nil // SERVFAIL or NODATA: the reference path
	}
	h.Stats.Queries.Add(1)
	if ch.FailOpen {
		h.Stats.FailOpen.Add(1)
	}
	scope := byte(0)
	if useECS && ch.UsedLoc != nil {
		scope = byte(min(max(ch.UsedLoc.Bits, 0), maxBits(client)))
	}
	ttl := g.TTL()

	ar := byte(0)
	if hasOPT {
		ar = 1
	}
	out = append(out[:0], q[0], q[1], 0x84|q[2]&0x01, 0, 0, 1, 0, 1, 0, 0, 0, ar)
	out = append(out, q[12:qend]...)
	out = append(out, 0xC0, 12, byte(qtype>>8), byte(qtype), 0, 1,
		byte(ttl>>24), byte(ttl>>16), byte(ttl>>8), byte(ttl))
	if v6 {
		a := ch.Target.VIP.As16()
		out = append(out, 0, 16)
		out = append(out, a[:]...)
	} else {
		a := ch.Target.VIP.As4()
		out = append(out, 0, 4)
		out = append(out, a[:]...)
	}
	if hasOPT {
		rdlen := 0
		if hasECS {
			rdlen = 4 + len(ecs)
		}
		out = append(out, 0, 0, 41, MaxUDPSize>>8, MaxUDPSize&0xff, 0, 0, doBit, 0, byte(rdlen>>8), byte(rdlen))
		if hasECS {
			out = append(out, 0, 8, byte(len(ecs)>>8), byte(len(ecs)), ecs[0], ecs[1], ecs[2], scope)
			out = append(out, ecs[4:]...)
		}
	}
	return out
}

// fastECS accepts an ECS option the fast path can echo byte for byte:
// family 1 or 2, source prefix within it, SCOPE 0, exactly the prefix's
// bytes, no bits set beyond the prefix. Other options (valid or not) go
// to the reference path, which answers FORMERR where RFC 7871 asks.
func fastECS(d []byte) (netip.Addr, int, bool) {
	if len(d) < 4 || d[3] != 0 {
		return netip.Addr{}, 0, false
	}
	bits := int(d[2])
	var a16 [16]byte
	var a netip.Addr
	switch binary.BigEndian.Uint16(d) {
	case 1:
		if bits > 32 || len(d)-4 != (bits+7)/8 {
			return a, 0, false
		}
		copy(a16[:4], d[4:])
		a = netip.AddrFrom4([4]byte(a16[:4]))
	case 2:
		if bits > 128 || len(d)-4 != (bits+7)/8 {
			return a, 0, false
		}
		copy(a16[:], d[4:])
		a = netip.AddrFrom16(a16)
	default:
		return a, 0, false
	}
	if p, err := a.Prefix(bits); err != nil || p.Addr() != a {
		return a, 0, false
	}
	return a, bits, true
}

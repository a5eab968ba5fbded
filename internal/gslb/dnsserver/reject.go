package dnsserver

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// Queries rejected before the handler, read from the wire. miekg/dns
// answers what its accept function or Unpack refuses with a bare header:
// no OPT record, and the query's AD and CD bits left set. A resolver reads
// a missing OPT as "no EDNS here" (RFC 6891 §7) and stops sending it, and
// an authoritative server sets neither bit (RFC 4035 §3.1.6, RFC 6840
// §5.8). Unpack also pads or cuts an ECS address to its family's length,
// so an option with too few or too many address octets (RFC 7871 §6:
// FORMERR) reached the handler looking valid. earlyReject decides these
// cases from the bytes, for UDP (udpServer.answer) and TCP (tcpReader)
// alike, before any unpacking.

// wireInfo is what earlyReject reads of a query.
type wireInfo struct {
	opcode  int
	rd      bool
	qdcount int
	qend    int  // end of the one question, when it is plain; 0 otherwise
	nopt    int  // OPT records in the additional section
	do      bool // the first OPT's DO bit
	version byte // the first OPT's version
	badECS  bool // an ECS option RFC 7871 §6 or §7.1.1 rejects
	cut     bool // the message ends inside a record
}

// Rejection kinds, for the handler's counters.
const (
	rejectNone = iota
	rejectIgnore
	rejectFormErr
	rejectNotImp
	rejectBadVers
)

// earlyReject answers q when it must be rejected before the handler: an
// opcode other than QUERY (NOTIMP), not one question, more than one OPT,
// an ECS option that is undecodable or of the wrong length, a message cut
// short (FORMERR), an EDNS version above 0 (BADVERS). The answer carries
// an OPT record when the query had one (with the query's DO bit, RFC 3225
// §3), the query's ID, opcode, RD and plain question, AD and CD clear.
// It returns kind rejectNone (nil) when the handler should answer.
func earlyReject(q, out []byte) ([]byte, int) {
	if len(q) < 12 || q[2]&0x80 != 0 {
		return nil, rejectIgnore
	}
	w := readWire(q)
	rcode, kind := 0, rejectNone
	switch {
	case w.opcode != dns.OpcodeQuery:
		rcode, kind = dns.RcodeNotImplemented, rejectNotImp
	case w.qdcount != 1 || w.cut || w.nopt > 1 || w.badECS ||
		binary.BigEndian.Uint16(q[6:]) > 1 || binary.BigEndian.Uint16(q[8:]) > 1 || binary.BigEndian.Uint16(q[10:]) > 2:
		rcode, kind = dns.RcodeFormatError, rejectFormErr
	case w.nopt == 1 && w.version != 0:
		rcode, kind = dns.RcodeBadVers, rejectBadVers
	default:
		return nil, rejectNone
	}
	return rejectAnswer(q, out, w, rcode), kind
}

// rejectAnswer packs the rejection of q with rcode (extended RCODEs in
// the OPT record).
func rejectAnswer(q, out []byte, w wireInfo, rcode int) []byte {
	b2 := byte(0x80 | w.opcode<<3)
	if w.rd {
		b2 |= 0x01
	}
	out = append(out[:0], q[0], q[1], b2, byte(rcode&0xF), 0, 0, 0, 0, 0, 0, 0, 0)
	if w.qend > 0 {
		out[5] = 1
		out = append(out, q[12:w.qend]...)
	}
	if w.nopt > 0 {
		out[11] = 1
		flags := byte(0)
		if w.do {
			flags = 0x80
		}
		out = append(out, 0, 0, 41, MaxUDPSize>>8, MaxUDPSize&0xff, byte(rcode>>4), 0, flags, 0, 0, 0)
	}
	return out
}

// readWire walks q's sections (names may be compressed) far enough to
// find the OPT records and check their ECS options.
func readWire(q []byte) wireInfo {
	w := wireInfo{opcode: int(q[2]>>3) & 0xF, rd: q[2]&0x01 != 0, qdcount: int(binary.BigEndian.Uint16(q[4:]))}
	off := 12
	for i := range w.qdcount {
		end, ok := skipName(q, off)
		if !ok || end+4 > len(q) {
			w.cut = true
			return w
		}
		if i == 0 && w.qdcount == 1 {
			if pe, plain := plainName(q, off); plain && pe == end {
				w.qend = end + 4
			}
		}
		off = end + 4
	}
	an, ns, ar := int(binary.BigEndian.Uint16(q[6:])), int(binary.BigEndian.Uint16(q[8:])), int(binary.BigEndian.Uint16(q[10:]))
	for i := range an + ns + ar {
		end, ok := skipName(q, off)
		if !ok || end+10 > len(q) {
			w.cut = true
			return w
		}
		typ := binary.BigEndian.Uint16(q[end:])
		rdlen := int(binary.BigEndian.Uint16(q[end+8:]))
		rd := end + 10
		if rd+rdlen > len(q) {
			w.cut = true
			return w
		}
		if i >= an+ns && typ == dns.TypeOPT {
			w.nopt++
			if w.nopt == 1 {
				w.version = q[end+5]
				w.do = q[end+6]&0x80 != 0
			}
			if !checkOptions(q[rd : rd+rdlen]) {
				w.badECS = true
			}
		}
		off = rd + rdlen
	}
	return w
}

// skipName returns the offset after the (possibly compressed) name at off.
func skipName(q []byte, off int) (int, bool) {
	for off < len(q) {
		ln := int(q[off])
		switch {
		case ln == 0:
			return off + 1, true
		case ln&0xC0 == 0xC0:
			if off+2 > len(q) {
				return 0, false
			}
			return off + 2, true
		case ln > 63:
			return 0, false
		}
		off += 1 + ln
	}
	return 0, false
}

// checkOptions reports whether the OPT data d is well formed and its ECS
// options valid. An ECS option (RFC 7871 §6, §7.1.1) has family 1 or 2
// (or 0 with SOURCE 0 and no address, what dig sends for +subnet=0),
// SOURCE and SCOPE within the family, exactly ceil(SOURCE/8) address
// octets and no address bits set beyond SOURCE.
func checkOptions(d []byte) bool {
	for len(d) > 0 {
		if len(d) < 4 {
			return false
		}
		code, n := binary.BigEndian.Uint16(d), int(binary.BigEndian.Uint16(d[2:]))
		if 4+n > len(d) {
			return false
		}
		if code == dns.EDNS0SUBNET && !checkECS(d[4:4+n]) {
			return false
		}
		d = d[4+n:]
	}
	return true
}

func checkECS(e []byte) bool {
	if len(e) < 4 {
		return false
	}
	src := int(e[2])
	maxb := 0
	switch binary.BigEndian.Uint16(e) {
	case 0:
		return src == 0 && len(e) == 4
	case 1:
		maxb = 32
	case 2:
		maxb = 128
	default:
		return false
	}
	addr := e[4:]
	if src > maxb || int(e[3]) > maxb || len(addr) != (src+7)/8 {
		return false
	}
	if src%8 != 0 && addr[len(addr)-1]&(0xFF>>(src%8)) != 0 {
		return false
	}
	return true
}

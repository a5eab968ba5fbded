package dpfuzz

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6 as docs/dataplane.md describes the data plane's reading of it (RFC
// 8200 with RFC 5095, RFC 7112 and RFC 4291's address rules): the oracle's
// second reading, not a copy of bpf/lib/parse.h.

// IPv6 next headers the harness knows.
const (
	ProtoHopOpts  = 0
	ProtoRouting  = 43
	ProtoFragment = 44
	ProtoESP      = 50
	ProtoAH       = 51
	ProtoICMPv6   = 58
	ProtoNoNext   = 59
	ProtoDstOpts  = 60
)

// The bounds of the walk (docs/dataplane.md): at most MaxIPv6Ext extension
// headers, and the upper-layer header (or a later fragment's data) must
// start within the first MaxIPv6L4Off bytes of the frame.
const (
	MaxIPv6Ext   = 6
	MaxIPv6L4Off = 255
)

// IPv6 is a well-formed IPv6 packet found in a frame (ParseIPv6).
type IPv6 struct {
	Off   int    // offset of its header in the frame
	Pkt   []byte // the packet: 40 + payload length bytes from Off
	Proto uint8  // the upper-layer protocol (a later fragment's: its fragment header's next header)
	L4    int    // offset of the upper-layer header (or a later fragment's data) in Pkt
	Exts  int    // extension headers
	// FragOff, MF: the fragment header's offset (8-byte units) and M
	// flag (both 0 without one).
	FragOff uint16
	MF      bool
}

func (p IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(p.Pkt[8:24])) }
func (p IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(p.Pkt[24:40])) }
func (p IPv6) HopLimit() uint8 { return p.Pkt[7] }
func (p IPv6) End() int        { return p.Off + len(p.Pkt) }

func (p IPv6) String() string {
	return fmt.Sprintf("%v -> %v next %d hop limit %d exts %d frag %d/%v len %d", p.Src(), p.Dst(), p.Proto, p.HopLimit(), p.Exts, p.FragOff, p.MF, len(p.Pkt))
}

// V6Error is why an IPv6 frame is refused: the counter the data plane
// drops it under and what is wrong.
type V6Error struct {
	Counter string
	Msg     string
}

func (e *V6Error) Error() string { return e.Msg }

func v6err(counter, format string, a ...any) *V6Error {
	return &V6Error{Counter: counter, Msg: fmt.Sprintf(format, a...)}
}

// ParseIPv6 validates the IPv6 packet at off of frame b, in this order:
// the fixed header inside the frame, version 6, the payload inside the
// frame (bytes after it are padding); then each extension header
// (hop-by-hop, routing, fragment, destination options) in turn: no more
// than MaxIPv6Ext, hop-by-hop only first, starting within MaxIPv6L4Off
// bytes, its first 8 bytes inside the payload, no second fragment header,
// no routing header of type 0, the whole header inside the payload (a
// header that does not fit after a first fragment's header: a tiny
// fragment); a later fragment ends the walk (its data must start within
// MaxIPv6L4Off); then the upper-layer header within MaxIPv6L4Off and, for
// TCP (20 bytes, data offset at least 5 and, unfragmented, inside the
// payload), UDP (8) and ICMPv6 (8), complete (in a first fragment: a tiny
// fragment). AH is walked as an extension header (RFC 8200 4, its length
// per RFC 4302: a multiple of 8 bytes of at least 12, else
// drop_ip6_ext_bad). ESP, No Next Header and anything else end the walk.
func ParseIPv6(b []byte, off int) (IPv6, error) {
	if off < 0 || len(b) < off+40 {
		return IPv6{}, v6err("drop_ip_trunc", "IPv6 header at %d cut short (frame of %d bytes)", off, len(b))
	}
	if b[off]>>4 != 6 {
		return IPv6{}, v6err("drop_ip_bad", "IP version %d in an IPv6 frame", b[off]>>4)
	}
	plen := int(binary.BigEndian.Uint16(b[off+4:]))
	if off+40+plen > len(b) {
		return IPv6{}, v6err("drop_ip_trunc", "IPv6 payload length %d beyond the frame (%d bytes after the header)", plen, len(b)-off-40)
	}
	p := IPv6{Off: off, Pkt: b[off : off+40+plen]}
	nh, at := b[off+6], 40 // at: offset in p.Pkt
	first, seenFrag := false, false
	// RFC 8200 4 lists AH (RFC 4302) among the extension headers: a
	// first fragment's chain runs through it (RFC 7112).
	for ; nh == ProtoHopOpts || nh == ProtoRouting || nh == ProtoFragment || nh == ProtoDstOpts || nh == ProtoAH; p.Exts++ {
		if p.Exts == MaxIPv6Ext {
			return p, v6err("drop_ip6_ext_limit", "more than %d extension headers", MaxIPv6Ext)
		}
		if nh == ProtoHopOpts && p.Exts > 0 {
			return p, v6err("drop_ip6_ext_bad", "hop-by-hop options as extension header %d", p.Exts+1)
		}
		if off+at > MaxIPv6L4Off {
			return p, v6err("drop_ip6_ext_limit", "extension header at byte %d of the frame", off+at)
		}
		short := func(what string) error {
			if first {
				return v6err("drop_ip6_tiny_frag", "first fragment ends in the header chain: %s", what)
			}
			return v6err("drop_ip6_ext_bad", "truncated extension header chain: %s", what)
		}
		if at+8 > len(p.Pkt) {
			return p, short(fmt.Sprintf("header %d at %d of a %d-byte packet", nh, at, len(p.Pkt)))
		}
		h := p.Pkt[at:]
		size := 8
		if nh == ProtoFragment {
			if seenFrag {
				return p, v6err("drop_ip6_ext_bad", "a second fragment header")
			}
			seenFrag = true
			w := binary.BigEndian.Uint16(h[2:])
			p.FragOff, p.MF = w>>3, w&1 != 0
			if p.FragOff != 0 {
				p.Exts++
				p.Proto, p.L4 = h[0], at+8
				if off+p.L4 > MaxIPv6L4Off {
					return p, v6err("drop_ip6_ext_limit", "a later fragment's data at byte %d of the frame", off+p.L4)
				}
				return p, nil
			}
			first = p.MF // an atomic fragment (RFC 6946) is a whole packet
		} else if nh == ProtoAH {
			// RFC 4302 2.2: Payload Len is the header's length in
			// 32-bit words minus 2; in IPv6 a multiple of 8 bytes,
			// and at least the 12 bytes of its fixed fields.
			size = (int(h[1]) + 2) * 4
			if size%8 != 0 || size < 12 {
				return p, v6err("drop_ip6_ext_bad", "authentication header of %d bytes (a multiple of 8 of at least 12 in IPv6)", size)
			}
			if at+size > len(p.Pkt) {
				return p, short(fmt.Sprintf("authentication header of %d bytes at %d of a %d-byte packet", size, at, len(p.Pkt)))
			}
		} else {
			if nh == ProtoRouting && h[2] == 0 {
				return p, v6err("drop_ip6_rh0", "routing header type 0")
			}
			size = (int(h[1]) + 1) * 8
			if at+size > len(p.Pkt) {
				return p, short(fmt.Sprintf("header %d of %d bytes at %d of a %d-byte packet", nh, size, at, len(p.Pkt)))
			}
		}
		nh, at = h[0], at+size
	}
	if off+at > MaxIPv6L4Off {
		return p, v6err("drop_ip6_ext_limit", "upper-layer header at byte %d of the frame", off+at)
	}
	p.Proto, p.L4 = nh, at
	l4 := p.Pkt[at:]
	cut := func(what string, need int) error {
		if first {
			return v6err("drop_ip6_tiny_frag", "first fragment with %d bytes of its %s header (%d)", len(l4), what, need)
		}
		return v6err("drop_l4_trunc", "%s header cut short (%d bytes)", what, len(l4))
	}
	switch nh {
	case ProtoTCP:
		if len(l4) < 20 {
			return p, cut("TCP", 20)
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || (!first && doff > len(l4)) {
			return p, v6err("drop_l4_trunc", "TCP data offset %d in a segment of %d bytes", doff, len(l4))
		}
	case ProtoUDP:
		if len(l4) < 8 {
			return p, cut("UDP", 8)
		}
	case ProtoICMPv6:
		if len(l4) < 8 {
			return p, cut("ICMPv6", 8)
		}
	}
	return p, nil
}

var (
	v6Mapped    = netip.MustParsePrefix("::ffff:0:0/96")
	v6Multicast = netip.MustParsePrefix("ff00::/8")
	v6LinkMcast = netip.MustParsePrefix("ff02::/16")
	v6LinkLocal = netip.MustParsePrefix("fe80::/10")
)

// MartianV6 says why an IPv6 packet never comes from a wire ("" if it
// may): a source that is the unspecified address (but for DAD's neighbour
// solicitations and MLD reports: ICMPv6 to a link-scope group, RFC 4861
// 7.2.2, RFC 3810 5.2.13), loopback, multicast, IPv4-mapped (RFC 4291
// 2.5.5.2); a destination that is the unspecified address, loopback,
// IPv4-mapped, or multicast of scope 0 (reserved) or 1 (interface-local)
// (RFC 4291 2.5.2, 2.5.3, 2.7).
func MartianV6(p IPv6) string {
	src := p.Src()
	switch {
	case src == netip.IPv6Unspecified():
		if p.Proto == ProtoICMPv6 && v6LinkMcast.Contains(p.Dst()) {
			return ""
		}
		return "source ::"
	case src == netip.IPv6Loopback():
		return "source ::1"
	case v6Multicast.Contains(src):
		return "multicast source"
	case v6Mapped.Contains(src):
		return "IPv4-mapped source"
	}
	dst := p.Dst()
	switch {
	case dst == netip.IPv6Unspecified():
		return "destination :: (RFC 4291 2.5.2: never a destination)"
	case dst == netip.IPv6Loopback():
		return "destination ::1 (RFC 4291 2.5.3: dropped when received on an interface)"
	case v6Mapped.Contains(dst):
		return "IPv4-mapped destination"
	case dst.IsMulticast() && dst.As16()[1]&0x0f == 0:
		return "multicast destination of reserved scope 0 (RFC 4291 2.7: silently dropped)"
	case dst.IsInterfaceLocalMulticast():
		return "interface-local multicast destination (RFC 4291 2.7, erratum 3480: loopback only)"
	}
	return ""
}

// OffLinkV6: a link-local source to a destination neither link-local nor
// multicast (RFC 4291 2.5.6: never forwarded off its link), unless
// ICMPv6 (neighbour unreachability detection and redirects come from a
// link-local address to a global one: the kernel judges them).
func OffLinkV6(p IPv6) bool {
	return v6LinkLocal.Contains(p.Src()) && !v6LinkLocal.Contains(p.Dst()) && !v6Multicast.Contains(p.Dst()) && p.Proto != ProtoICMPv6
}

// NDPv6: the packet is neighbour discovery a host takes from its guest
// (RFC 4861): ICMPv6 router solicitation, neighbour solicitation or
// advertisement (types 133, 135, 136), unfragmented, hop limit 255. The
// agent passes it from a guest to the host's kernel, so that the guest
// resolves its gateway. A router advertisement (134) is not among them: a
// guest is never its host's router (RA guard, RFC 6105).
func NDPv6(p IPv6) bool {
	if p.Proto != ProtoICMPv6 || p.FragOff != 0 || p.MF || p.HopLimit() != 255 || p.L4 >= len(p.Pkt) {
		return false
	}
	t := p.Pkt[p.L4]
	return t == 133 || t == 135 || t == 136
}

// judgeIPv6 reads an IPv6 frame (its network header at l3) as every
// program's parser does: a malformed or martian packet is dropped under
// its counter (the verdict's Counter) and nothing may be transmitted for
// it; offLink applies the link-local check (the edge's). A valid packet
// gets Counter pass_ipv6 (the kernel's, "not IPv4: ...") here: the
// callers then apply the IPv6 EIPs' paths (eip6.go: judgeEdge6,
// judgeGuest6), which take some of them.
func judgeIPv6(b []byte, l3 int, offLink bool) Verdict {
	p, err := ParseIPv6(b, l3)
	if err != nil {
		e := err.(*V6Error)
		return Verdict{Forbid: "malformed IPv6: " + e.Msg, Counter: e.Counter}
	}
	if m := MartianV6(p); m != "" {
		return Verdict{Forbid: "martian IPv6 " + m, Counter: "drop_ip6_martian"}
	}
	if offLink && OffLinkV6(p) {
		return Verdict{Forbid: fmt.Sprintf("spoofed: link-local source %v off its link (to %v)", p.Src(), p.Dst()), Counter: "drop_ip6_off_link"}
	}
	return Verdict{Forbid: "not IPv4: IPv6 for the kernel (to no IPv6 EIP)", Counter: "pass_ipv6"}
}

// IPv6Packet builds an IPv6 packet: the fixed header (hop limit 64) with
// first next header nh and payload (extension headers and upper layer).
func IPv6Packet(src, dst netip.Addr, nh uint8, payload []byte) []byte {
	p := make([]byte, 40, 40+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(len(payload)))
	p[6], p[7] = nh, 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return append(p, payload...)
}

// v6Pool are IPv6 addresses worth trying: each class the data plane tells
// apart and its neighbours just outside (the unspecified address,
// loopback, multicast and its link scope, IPv4-mapped, link-local and the
// edges of fe80::/10, global documentation addresses).
var v6Pool = []netip.Addr{
	netip.MustParseAddr("::"), netip.MustParseAddr("::1"), netip.MustParseAddr("::2"),
	netip.MustParseAddr("ff02::1"), netip.MustParseAddr("ff02::1:ff00:1"), netip.MustParseAddr("ff02::16"),
	netip.MustParseAddr("ff05::2"), netip.MustParseAddr("ff00::"), netip.MustParseAddr("feff::1"),
	netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:0:0"), netip.MustParseAddr("::fffe:c000:201"),
	netip.MustParseAddr("::1:ffff:c000:201"),
	netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2"), netip.MustParseAddr("febf:ffff::1"),
	netip.MustParseAddr("fec0::1"), netip.MustParseAddr("fe7f::1"),
	netip.MustParseAddr("2001:db8:1::10"), netip.MustParseAddr("2001:db8:2::1"), netip.MustParseAddr("2001:db8::1"),
}

func (m *Mutator) addr6() netip.Addr {
	if len(m.Addrs6) > 0 && m.R.IntN(2) == 0 {
		return m.Addrs6[m.R.IntN(len(m.Addrs6))]
	}
	if m.R.IntN(8) == 0 {
		var b [16]byte
		for i := range b {
			b[i] = byte(m.R.Uint32())
		}
		return netip.AddrFrom16(b)
	}
	return v6Pool[m.R.IntN(len(v6Pool))]
}

// v6layout is where a frame's IPv6 headers are, read leniently (past
// what the parser refuses): the fixed header, each extension header's
// offset and type (at most 10), the upper layer's.
type v6layout struct {
	l3    int
	ext   []int // offsets of the extension headers in the frame
	nhAt  []int // where each header's type is written (the previous header's next header field)
	l4    int   // -1 when the chain runs past the frame
	proto uint8
}

func findV6(b []byte, l3 int) v6layout {
	lay := v6layout{l3: l3, l4: -1}
	if len(b) < l3+40 {
		return lay
	}
	nhAt, at := l3+6, l3+40
	for i := 0; i < 10; i++ {
		nh := b[nhAt]
		if nh != ProtoHopOpts && nh != ProtoRouting && nh != ProtoFragment && nh != ProtoDstOpts && nh != ProtoAH {
			if at <= len(b) {
				lay.l4, lay.proto = at, nh
			}
			return lay
		}
		if len(b) < at+8 {
			return lay
		}
		lay.ext, lay.nhAt = append(lay.ext, at), append(lay.nhAt, nhAt)
		nhAt, at = at, at+extSize(nh, b[at+1])
	}
	return lay
}

// extSize is the length of an extension header of type nh whose length
// field is n.
func extSize(nh, n uint8) int {
	switch nh {
	case ProtoFragment:
		return 8
	case ProtoAH:
		return (int(n) + 2) * 4
	}
	return (int(n) + 1) * 8
}

// extHeader makes an extension header of type nh whose next header is
// next: options (PadN) of 1-3 units or, now and then, a long one;
// routing of type 0, 2, 3 or 4; a fragment (first, later, atomic).
func (m *Mutator) extHeader(nh, next uint8) []byte {
	switch nh {
	case ProtoFragment:
		w := []uint16{0x0001, 0x0000, 185 << 3, 185<<3 | 1, 1 << 3, uint16(m.R.Uint32())}[m.R.IntN(6)]
		return []byte{next, 0, byte(w >> 8), byte(w), 0, 0, 0x12, 0x34}
	case ProtoAH:
		// SPI, sequence number and a 96-bit ICV: 24 bytes, or now
		// and then a length IPv6 refuses.
		h := make([]byte, 24)
		h[0], h[1] = next, []byte{4, 4, 4, 0, 1, 3}[m.R.IntN(6)]
		h[7] = 1
		return h
	case ProtoRouting:
		typ := []byte{0, 2, 3, 4, byte(m.R.Uint32())}[m.R.IntN(5)]
		n := 1 + m.R.IntN(2)
		h := make([]byte, n*8)
		h[0], h[1], h[2], h[3] = next, byte(n-1), typ, byte(m.R.IntN(3))
		return h
	}
	n := 1 + m.R.IntN(3)
	if m.R.IntN(8) == 0 {
		n = 20 + m.R.IntN(12)
	}
	h := make([]byte, n*8)
	h[0], h[1], h[2], h[3] = next, byte(n-1), 1, byte(n*8-4)
	return h
}

// once6 applies one IPv6 mutation to frame b (its IPv6 header at l3).
func (m *Mutator) once6(b []byte, l3 int) []byte {
	lay := findV6(b, l3)
	if len(b) < l3+40 {
		return b
	}
	exts := []uint8{ProtoHopOpts, ProtoRouting, ProtoFragment, ProtoDstOpts, ProtoAH}
	switch m.R.IntN(14) {
	case 0: // version
		b[l3] = []byte{0x60, 0x40, 0x70, 0x00, 0x6f, byte(m.R.Uint32())}[m.R.IntN(6)]
	case 1: // payload length
		n := len(b) - l3 - 40
		put16(b, l3+4, m.pick16(0, uint16(n), uint16(n+1), uint16(max(0, n-1)), uint16(max(0, n-8)), 0xffff, uint16(m.R.Uint32())))
	case 2: // hop limit
		b[l3+7] = []byte{0, 1, 2, 64, 255}[m.R.IntN(5)]
	case 3: // a next header: the fixed header's or an extension header's
		at := l3 + 6
		if len(lay.ext) > 0 && m.R.IntN(2) == 0 {
			at = lay.ext[m.R.IntN(len(lay.ext))]
		}
		b[at] = []byte{ProtoHopOpts, ProtoTCP, ProtoUDP, ProtoRouting, ProtoFragment, ProtoESP, ProtoAH, ProtoICMPv6, ProtoNoNext, ProtoDstOpts, byte(m.R.Uint32())}[m.R.IntN(11)]
	case 4: // source
		if m.R.IntN(6) == 0 {
			copy(b[l3+8:l3+24], b[l3+24:l3+40])
		} else {
			a := m.addr6().As16()
			copy(b[l3+8:], a[:])
		}
	case 5: // destination
		a := m.addr6().As16()
		copy(b[l3+24:], a[:])
	case 6: // insert an extension header at a point of the chain
		i := m.R.IntN(len(lay.ext) + 1)
		at, nhAt := l3+40, l3+6
		if i < len(lay.ext) {
			at, nhAt = lay.ext[i], lay.nhAt[i]
		} else if lay.l4 >= 0 {
			at = lay.l4
			if len(lay.ext) > 0 {
				nhAt = lay.ext[len(lay.ext)-1]
			}
		} else {
			break
		}
		if at > len(b) {
			break
		}
		nh := exts[m.R.IntN(len(exts))]
		h := m.extHeader(nh, b[nhAt])
		b[nhAt] = nh
		b = append(b[:at], append(h, b[at:]...)...)
	case 7: // remove an extension header
		if len(lay.ext) > 0 {
			i := m.R.IntN(len(lay.ext))
			at := lay.ext[i]
			size := extSize(b[lay.nhAt[i]], b[at+1])
			if at+size <= len(b) {
				b[lay.nhAt[i]] = b[at]
				b = append(b[:at], b[at+size:]...)
			}
		}
	case 8: // an extension header's length, routing type or fragment field
		if len(lay.ext) > 0 {
			at := lay.ext[m.R.IntN(len(lay.ext))]
			switch m.R.IntN(3) {
			case 0:
				b[at+1] = []byte{0, 1, 2, 31, 255, byte(m.R.Uint32())}[m.R.IntN(6)]
			case 1:
				b[at+2] = []byte{0, 2, 4, byte(m.R.Uint32())}[m.R.IntN(4)]
			default:
				put16(b, at+2, m.pick16(0, 1, 185<<3, 185<<3|1, 8, uint16(m.R.Uint32())))
			}
		}
	case 9: // the upper layer: ports, TCP data offset or flags, ICMPv6 type
		if lay.l4 >= 0 && lay.l4+14 <= len(b) {
			switch {
			case lay.proto == ProtoICMPv6:
				b[lay.l4] = []byte{1, 2, 3, 4, 128, 129, 133, 134, 135, 136, 137, 143}[m.R.IntN(12)]
			case lay.proto == ProtoTCP && m.R.IntN(2) == 0:
				b[lay.l4+12] = []byte{0x00, 0x40, 0x50, 0x60, 0xf0}[m.R.IntN(5)]
			default:
				put16(b, lay.l4+2*m.R.IntN(2), m.port())
			}
		}
	case 10: // truncate in the chain or the upper-layer header
		cut := []int{l3 + 39, l3 + 40, l3 + 44}
		for _, e := range lay.ext {
			cut = append(cut, e+4, e+8)
		}
		if lay.l4 >= 0 {
			cut = append(cut, lay.l4+4, lay.l4+7, lay.l4+19)
		}
		if n := cut[m.R.IntN(len(cut))]; n >= ethHdrLen && n < len(b) {
			b = b[:n]
		}
	case 11: // a chain of destination options headers around the bound
		n := MaxIPv6Ext - 2 + m.R.IntN(4)
		nhAt := l3 + 6
		if lay.l4 < 0 {
			break
		}
		var chain []byte
		next := b[nhAt]
		if len(lay.ext) > 0 {
			next = lay.proto
		}
		for i := n - 1; i >= 0; i-- {
			chain = append([]byte{next, 0, 1, 4, 0, 0, 0, 0}, chain...)
			next = ProtoDstOpts
		}
		b[nhAt] = ProtoDstOpts
		b = append(b[:l3+40], append(chain, b[lay.l4:]...)...)
	case 12: // wrap the packet in NVGRE to the node (an IPv6 EIP's guest's packet from its host)
		if l3 >= ethHdrLen && len(m.Keys) > 0 && m.Endpoint.IsValid() {
			b = m.wrapNVGREAs(b[l3:], EtherIPv6)
		}
	case 13: // the UDP checksum 0 (RFC 8200 8.1: invalid in IPv6), or the hop limit a translation keeps
		if lay.l4 >= 0 && lay.proto == ProtoUDP && lay.l4+8 <= len(b) && m.R.IntN(2) == 0 {
			b[lay.l4+6], b[lay.l4+7] = 0, 0
		} else {
			b[l3+7] = []byte{0, 1, 255}[m.R.IntN(3)]
		}
	}
	return b
}

// fixUp6 sets the payload length of the IPv6 packet at l3 to reach the
// end of the frame.
func fixUp6(b []byte, l3 int) {
	if len(b) >= l3+40 && len(b)-l3-40 <= 0xffff {
		binary.BigEndian.PutUint16(b[l3+4:], uint16(len(b)-l3-40))
	}
}

// asIPv6 rewrites an IPv4 frame's packet as IPv6 (addresses from the
// pool, the same upper layer).
func (m *Mutator) asIPv6(b []byte) []byte {
	lay := findLayout(b)
	if lay.l3 < 0 || lay.l4 < 0 || lay.l4 > len(b) {
		return b
	}
	proto := lay.proto
	if proto == ProtoICMP {
		proto = ProtoICMPv6
	}
	p := IPv6Packet(m.addr6(), m.addr6(), proto, b[lay.l4:])
	out := append([]byte(nil), b[:lay.l3-2]...)
	return append(append(out, 0x86, 0xdd), p...)
}

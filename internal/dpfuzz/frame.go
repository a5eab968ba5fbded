// Package dpfuzz is the pure half of the data-plane fuzzing harness (issue 9
// part 7): a structure-aware mutator of Ethernet frames and an oracle that
// says, independently of the BPF programs, which frames must never be
// transmitted and whether a transmitted frame is well formed. The half that
// runs the programs (BPF_PROG_TEST_RUN in batches, counters) lives in
// internal/dataplane's tests, which configure the programs the oracle
// describes.
//
// Nothing here imports the data plane: the oracle is a second reading of
// the rules in docs/dataplane.md (RFC 791, RFC 1812, RFC 7637; for IPv6
// RFC 8200, RFC 5095, RFC 7112, RFC 4291: ipv6.go), not a copy of the C
// code, so a bug in one is not silently shared by the other.
package dpfuzz

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Ethertypes and IP protocols the harness knows.
const (
	EtherIPv4  = 0x0800
	EtherARP   = 0x0806
	EtherIPv6  = 0x86dd
	EtherVLAN  = 0x8100
	EtherQinQ  = 0x88a8
	EtherTEB   = 0x6558 // transparent Ethernet bridging: NVGRE's payload
	ProtoICMP  = 1
	ProtoTCP   = 6
	ProtoUDP   = 17
	ProtoGRE   = 47
	ethHdrLen  = 14
	nvgreExtra = 8 + 14 // GRE with key, inner Ethernet
)

// IPv4 is a well-formed IPv4 packet found in a frame (see ParseIPv4).
type IPv4 struct {
	Off int    // offset of its header in the frame
	HL  int    // header length
	Pkt []byte // the packet, total length bytes from Off
}

func (p IPv4) Src() netip.Addr  { return netip.AddrFrom4([4]byte(p.Pkt[12:16])) }
func (p IPv4) Dst() netip.Addr  { return netip.AddrFrom4([4]byte(p.Pkt[16:20])) }
func (p IPv4) Proto() uint8     { return p.Pkt[9] }
func (p IPv4) TTL() uint8       { return p.Pkt[8] }
func (p IPv4) FragWord() uint16 { return binary.BigEndian.Uint16(p.Pkt[6:8]) }
func (p IPv4) DF() bool         { return p.FragWord()&0x4000 != 0 }
func (p IPv4) MF() bool         { return p.FragWord()&0x2000 != 0 }
func (p IPv4) FragOff() uint16  { return p.FragWord() & 0x1fff }

// Fragmented: a fragment of a datagram (first, middle or last).
func (p IPv4) Fragmented() bool { return p.MF() || p.FragOff() != 0 }
func (p IPv4) L4() []byte       { return p.Pkt[p.HL:] }
func (p IPv4) End() int         { return p.Off + len(p.Pkt) }

// Ports are the TCP/UDP ports of an unfragmented packet (else 0, 0).
func (p IPv4) Ports() (src, dst uint16) {
	if p.Fragmented() || (p.Proto() != ProtoTCP && p.Proto() != ProtoUDP) || len(p.L4()) < 4 {
		return 0, 0
	}
	return binary.BigEndian.Uint16(p.L4()), binary.BigEndian.Uint16(p.L4()[2:])
}

func (p IPv4) String() string {
	return fmt.Sprintf("%v -> %v proto %d ttl %d frag %#04x len %d", p.Src(), p.Dst(), p.Proto(), p.TTL(), p.FragWord(), len(p.Pkt))
}

// Checksum is the Internet checksum (RFC 1071) of b: 0 over a header that
// carries a correct one.
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// Link is what precedes the network header of a frame: Ethernet and its
// VLAN tags.
type Link struct {
	Tags      int    // VLAN tags (802.1Q or 802.1ad)
	EtherType uint16 // after the tags
	L3        int    // offset of the network header
}

// ParseLink reads Ethernet and any number of VLAN tags. ok is false if the
// frame ends inside them.
func ParseLink(b []byte) (l Link, ok bool) {
	off := 12
	for {
		if len(b) < off+2 {
			return l, false
		}
		et := binary.BigEndian.Uint16(b[off:])
		if et == EtherVLAN || et == EtherQinQ {
			l.Tags++
			off += 4
			continue
		}
		l.EtherType, l.L3 = et, off+2
		return l, true
	}
}

// ParseIPv4 validates the IPv4 packet at off (RFC 791, RFC 1812 5.2.2):
// version 4, a header of at least 20 bytes inside the frame, a total length
// that covers the header and lies inside the frame, a correct header
// checksum. It does not look at the addresses or the payload.
func ParseIPv4(b []byte, off int) (IPv4, error) {
	if off < 0 || len(b) < off+20 {
		return IPv4{}, fmt.Errorf("IPv4 header at %d cut short (frame of %d bytes)", off, len(b))
	}
	if b[off]>>4 != 4 {
		return IPv4{}, fmt.Errorf("IP version %d", b[off]>>4)
	}
	hl := int(b[off]&0xf) * 4
	if hl < 20 || len(b) < off+hl {
		return IPv4{}, fmt.Errorf("IPv4 header length %d in a frame of %d bytes", hl, len(b))
	}
	tot := int(binary.BigEndian.Uint16(b[off+2:]))
	if tot < hl || off+tot > len(b) {
		return IPv4{}, fmt.Errorf("IPv4 total length %d (header %d) beyond the frame (%d bytes from %d)", tot, hl, len(b)-off, off)
	}
	p := IPv4{Off: off, HL: hl, Pkt: b[off : off+tot]}
	if Checksum(p.Pkt[:hl]) != 0 {
		return IPv4{}, fmt.Errorf("IPv4 header checksum wrong")
	}
	return p, nil
}

// L4Complete tells whether the first fragment (or whole packet) p carries
// the complete fixed header of its transport, with a TCP data offset that
// is at least 5 and, unless more fragments follow, inside the packet.
// Later fragments carry no transport header: true.
func L4Complete(p IPv4) error {
	if p.FragOff() != 0 {
		return nil
	}
	l4 := p.L4()
	switch p.Proto() {
	case ProtoTCP:
		if len(l4) < 20 {
			return fmt.Errorf("TCP header cut short (%d bytes)", len(l4))
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || (!p.MF() && doff > len(l4)) {
			return fmt.Errorf("TCP data offset %d in a segment of %d bytes", doff, len(l4))
		}
	case ProtoUDP:
		if len(l4) < 8 {
			return fmt.Errorf("UDP header cut short (%d bytes)", len(l4))
		}
	case ProtoICMP:
		if len(l4) < 8 {
			return fmt.Errorf("ICMP header cut short (%d bytes)", len(l4))
		}
	}
	return nil
}

// Martian: an address no router forwards from or to (RFC 1812 5.3.7):
// 0/8, 127/8, multicast, class E and the limited broadcast.
func Martian(a netip.Addr) bool {
	b := a.As4()
	return b[0] == 0 || b[0] == 127 || b[0] >= 224
}

// Bogon: the non-routable unicast ranges that never come from the Internet
// (RFC 1918, RFC 6598 shared space, RFC 3927 link local).
func Bogon(a netip.Addr) bool {
	for _, p := range bogons {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var bogons = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
}

// ICMPError: an ICMP type that quotes the packet it is about (RFC 792).
func ICMPError(typ uint8) bool { return typ == 3 || typ == 4 || typ == 5 || typ == 11 || typ == 12 }

// NVGRE is an NVGRE packet (RFC 7637) found in a frame: its outer IPv4
// packet, key and the inner frame.
type NVGRE struct {
	Outer IPv4
	Key   uint32
	Inner int // offset of the inner Ethernet header in the frame
}

// ParseNVGRE reads the GRE header of the outer packet o: exactly the K
// bit, protocol 0x6558, then an inner Ethernet header inside o.
func ParseNVGRE(o IPv4) (NVGRE, error) {
	g := o.L4()
	if o.Fragmented() {
		return NVGRE{}, fmt.Errorf("fragmented GRE")
	}
	if len(g) < nvgreExtra {
		return NVGRE{}, fmt.Errorf("GRE payload of %d bytes", len(g))
	}
	if fl, pr := binary.BigEndian.Uint16(g), binary.BigEndian.Uint16(g[2:]); fl != 0x2000 || pr != EtherTEB {
		return NVGRE{}, fmt.Errorf("GRE flags %#04x protocol %#04x, NVGRE is 0x2000 0x6558", fl, pr)
	}
	return NVGRE{Outer: o, Key: binary.BigEndian.Uint32(g[4:]), Inner: o.Off + o.HL + 8}, nil
}

// VSID of the key (its high 24 bits).
func (n NVGRE) VSID() uint32 { return n.Key >> 8 }

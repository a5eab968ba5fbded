package dpfuzz

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
)

// Mutator makes fuzz inputs from seed frames: structure-aware mutations
// (header fields set to values that matter, VLAN tags added and removed,
// options, fragments, truncation and padding, NVGRE wrapping, ICMP errors
// quoting other packets) followed, most of the time, by a fix-up of lengths
// and checksums so that the mutation reaches past the parser, and now and
// then by one last corruption of a length or checksum; and frames of pure
// random bytes. It is deterministic for a given rand source.
type Mutator struct {
	R *rand.Rand
	// Addrs are addresses worth trying as sources and destinations:
	// the node's EIPs, VIPs, clients, backends, hosts, bogons, martians.
	// Addrs6 are IPv6 ones (IPv6 EIPs, clients, guests, the region's
	// prefixes), tried half the time beside the classes of v6Pool.
	Addrs  []netip.Addr
	Addrs6 []netip.Addr
	// Prefixes worth trying addresses in and just outside of (a
	// firewall's source prefixes): a quarter of the addresses tried.
	Prefixes []netip.Prefix
	// Ports worth trying (listeners, backends' ports, 0).
	Ports []uint16
	// Keys are NVGRE keys worth trying (VSID << 8 | FlowID).
	Keys []uint32
	// Endpoint is where NVGRE goes (the node's underlay address), and
	// TunnelSrcs the outer sources to wrap packets from.
	Endpoint   netip.Addr
	TunnelSrcs []netip.Addr
	// MaxFrame bounds the frames made.
	MaxFrame int
}

// Random is a frame of random bytes, of a random length of at least an
// Ethernet header; half the time with a plausible Ethernet header and
// ethertype so that the bytes behind it are parsed.
func (m *Mutator) Random() []byte {
	n := ethHdrLen + m.R.IntN(min(m.MaxFrame, 1600)-ethHdrLen)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(m.R.Uint32())
	}
	if m.R.IntN(2) == 0 {
		et := []uint16{EtherIPv4, EtherIPv4, EtherVLAN, EtherARP, EtherIPv6}[m.R.IntN(5)]
		binary.BigEndian.PutUint16(b[12:], et)
		if m.R.IntN(2) == 0 && n >= 34 {
			b[14] = 0x45
			if et == EtherIPv6 {
				b[14] = 0x60
				if n >= 54 && m.R.IntN(2) == 0 {
					fixUp6(b, 14)
				}
			}
		}
	}
	return b
}

// Mutate returns a mutation of seed (which it does not modify); others are
// more seeds, for splicing.
func (m *Mutator) Mutate(seed []byte, others [][]byte) []byte {
	b := append(make([]byte, 0, len(seed)+128), seed...)
	for n := 1 + m.R.IntN(3); n > 0; n-- {
		b = m.once(b, others)
	}
	switch r := m.R.IntN(8); {
	case r < 6:
		FixUp(b, true)
		if m.R.IntN(5) == 0 {
			b = m.corrupt(b)
		}
	case r == 6:
		FixUp(b, false) // checksums only: lengths as mutated
	}
	if len(b) < ethHdrLen {
		b = append(b, make([]byte, ethHdrLen-len(b))...)
	}
	if len(b) > m.MaxFrame {
		b = b[:m.MaxFrame]
	}
	return b
}

// layout is where the headers of a frame are, as far as they can be found
// (mutations aim at them even if they are already broken).
type layout struct {
	l3, l4 int // -1 when absent
	proto  uint8
	inner  int // inner Ethernet header of NVGRE, or -1
}

func findLayout(b []byte) layout {
	lay := layout{l3: -1, l4: -1, inner: -1}
	l, ok := ParseLink(b)
	if !ok || l.EtherType != EtherIPv4 || len(b) < l.L3+20 {
		return lay
	}
	lay.l3 = l.L3
	hl := int(b[l.L3]&0xf) * 4
	lay.proto = b[l.L3+9]
	if hl >= 20 && len(b) > l.L3+hl {
		lay.l4 = l.L3 + hl
		if lay.proto == ProtoGRE && len(b) >= lay.l4+nvgreExtra+20 {
			lay.inner = lay.l4 + 8
		}
	}
	return lay
}

func (m *Mutator) addr() netip.Addr {
	if len(m.Prefixes) > 0 && m.R.IntN(4) == 0 {
		return m.nearPrefix(m.Prefixes[m.R.IntN(len(m.Prefixes))])
	}
	if len(m.Addrs) == 0 || m.R.IntN(8) == 0 {
		return netip.AddrFrom4([4]byte{byte(m.R.Uint32()), byte(m.R.Uint32()), byte(m.R.Uint32()), byte(m.R.Uint32())})
	}
	return m.Addrs[m.R.IntN(len(m.Addrs))]
}

// nearPrefix is an address inside p (its first, its last or a random
// one) or just outside it (the one before its first, after its last).
func (m *Mutator) nearPrefix(p netip.Prefix) netip.Addr {
	p = p.Masked()
	b := p.Addr().As4()
	base := binary.BigEndian.Uint32(b[:])
	size := uint32(1)<<(32-p.Bits()) - 1 // host mask
	if p.Bits() == 0 {
		size = ^uint32(0)
	}
	var a uint32
	switch m.R.IntN(6) {
	case 0:
		a = base
	case 1:
		a = base | size
	case 2:
		a = base - 1
	case 3:
		a = (base | size) + 1
	default:
		a = base | m.R.Uint32()&size
	}
	binary.BigEndian.PutUint32(b[:], a)
	return netip.AddrFrom4(b)
}

func (m *Mutator) port() uint16 {
	if len(m.Ports) == 0 || m.R.IntN(4) == 0 {
		return uint16(m.R.Uint32())
	}
	return m.Ports[m.R.IntN(len(m.Ports))]
}

func (m *Mutator) pick16(vals ...uint16) uint16 { return vals[m.R.IntN(len(vals))] }

func put16(b []byte, at int, v uint16) {
	if at >= 0 && at+2 <= len(b) {
		binary.BigEndian.PutUint16(b[at:], v)
	}
}

func putAddr(b []byte, at int, a netip.Addr) {
	if at >= 0 && at+4 <= len(b) {
		x := a.As4()
		copy(b[at:], x[:])
	}
}

// once applies one mutation.
func (m *Mutator) once(b []byte, others [][]byte) []byte {
	// IPv6: mostly its own mutations (the rest below are IPv4's but
	// for the link's, truncation, padding and splicing).
	if l, ok := ParseLink(b); ok && l.EtherType == EtherIPv6 && m.R.IntN(4) != 0 {
		return m.once6(b, l.L3)
	}
	lay := findLayout(b)
	// NVGRE carrying IPv6: half the time one of IPv6's mutations of the
	// inner packet.
	if lay.inner >= 0 && len(b) >= lay.inner+ethHdrLen+40 && binary.BigEndian.Uint16(b[lay.inner+12:]) == EtherIPv6 && m.R.IntN(2) == 0 {
		return m.once6(b, lay.inner+ethHdrLen)
	}
	// Half the time aim at the inner packet of NVGRE, if there is one.
	if lay.inner >= 0 && m.R.IntN(2) == 0 {
		in := findLayout(b[lay.inner:])
		if in.l3 >= 0 {
			in.l3 += lay.inner
			if in.l4 >= 0 {
				in.l4 += lay.inner
			}
			in.inner = -1
			lay = in
		}
	}
	switch m.R.IntN(21) {
	case 20: // the same upper layer in IPv6
		b = m.asIPv6(b)
	case 0, 1: // bit flips, mostly in the headers
		for n := 1 + m.R.IntN(4); n > 0 && len(b) > 0; n-- {
			i := m.R.IntN(min(len(b), 96))
			b[i] ^= 1 << m.R.IntN(8)
		}
	case 2: // a random byte anywhere
		if len(b) > 0 {
			b[m.R.IntN(len(b))] = byte(m.R.Uint32())
		}
	case 3: // version / IHL
		if lay.l3 >= 0 {
			b[lay.l3] = []byte{0x45, 0x46, 0x4f, 0x44, 0x40, 0x55, 0x65, 0x4a, byte(m.R.Uint32())}[m.R.IntN(9)]
		}
	case 4: // total length
		if lay.l3 >= 0 {
			hl := int(b[lay.l3]&0xf) * 4
			put16(b, lay.l3+2, m.pick16(0, uint16(hl-1), uint16(hl), uint16(len(b)-lay.l3), uint16(len(b)-lay.l3+1),
				uint16(len(b)-lay.l3-1), 0xffff, uint16(m.R.Uint32())))
		}
	case 5: // fragments: DF, MF, offsets
		if lay.l3 >= 0 {
			put16(b, lay.l3+6, m.pick16(0, 0x4000, 0x2000, 0x0001, 0x2001, 0x1fff, 0x6000, 0x00b9, uint16(m.R.Uint32())))
		}
	case 6: // TTL
		if lay.l3 >= 0 {
			b[lay.l3+8] = []byte{0, 1, 2, 64, 255}[m.R.IntN(5)]
		}
	case 7: // protocol
		if lay.l3 >= 0 {
			b[lay.l3+9] = []byte{ProtoICMP, ProtoTCP, ProtoUDP, ProtoGRE, 0, 4, 41, 50, 132, 255}[m.R.IntN(10)]
		}
	case 8: // source
		if lay.l3 >= 0 {
			if m.R.IntN(6) == 0 { // land: the destination itself
				copy(b[lay.l3+12:lay.l3+16], b[lay.l3+16:lay.l3+20])
			} else if len(m.Prefixes) > 0 && m.R.IntN(2) == 0 {
				putAddr(b, lay.l3+12, m.nearPrefix(m.Prefixes[m.R.IntN(len(m.Prefixes))]))
			} else {
				putAddr(b, lay.l3+12, m.addr())
			}
		}
	case 9: // destination
		if lay.l3 >= 0 {
			putAddr(b, lay.l3+16, m.addr())
		}
	case 10: // ports
		if lay.l4 >= 0 {
			put16(b, lay.l4+2*m.R.IntN(2), m.port())
		}
	case 11: // TCP flags, data offset, UDP length, ICMP type and code
		if lay.l4 >= 0 {
			switch lay.proto {
			case ProtoTCP:
				if lay.l4+14 <= len(b) {
					if m.R.IntN(2) == 0 {
						b[lay.l4+13] = []byte{0x02, 0x12, 0x10, 0x04, 0x01, 0x11, 0x14, 0xff, 0}[m.R.IntN(9)]
					} else {
						b[lay.l4+12] = []byte{0x00, 0x40, 0x50, 0x60, 0xf0}[m.R.IntN(5)]
					}
				}
			case ProtoUDP:
				put16(b, lay.l4+4, m.pick16(0, 7, 8, uint16(len(b)-lay.l4), 0xffff))
			case ProtoICMP:
				if lay.l4+2 <= len(b) {
					b[lay.l4] = []byte{0, 3, 4, 5, 8, 11, 12, 13, 14, 42}[m.R.IntN(10)]
					b[lay.l4+1] = []byte{0, 1, 3, 4}[m.R.IntN(4)]
				}
			case ProtoGRE:
				if m.R.IntN(2) == 0 {
					put16(b, lay.l4, m.pick16(0x2000, 0, 0x8000, 0x3000, 0xa000, 0x2001, uint16(m.R.Uint32())))
				} else {
					put16(b, lay.l4+2, m.pick16(EtherTEB, EtherIPv4, 0x880b, uint16(m.R.Uint32())))
				}
			}
		}
	case 12: // NVGRE key
		if lay.proto == ProtoGRE && lay.l4 >= 0 && lay.l4+8 <= len(b) && len(m.Keys) > 0 {
			k := m.Keys[m.R.IntN(len(m.Keys))]
			if m.R.IntN(3) == 0 {
				k ^= 1 << (8 + m.R.IntN(24))
			}
			binary.BigEndian.PutUint32(b[lay.l4+4:], k)
		}
	case 13: // VLAN tags: add or remove one
		if len(b) >= ethHdrLen {
			if m.R.IntN(2) == 0 {
				tag := []byte{0x81, 0x00, 0, byte(m.R.IntN(4096))}
				if m.R.IntN(3) == 0 {
					tag[0], tag[1] = 0x88, 0xa8
				}
				b = append(b[:12], append(tag, b[12:]...)...)
			} else if et := binary.BigEndian.Uint16(b[12:]); (et == EtherVLAN || et == EtherQinQ) && len(b) >= 18 {
				b = append(b[:12], b[16:]...)
			}
		}
	case 14: // IP options: grow the header by a few option words
		if lay.l3 >= 0 && lay.l4 >= 0 {
			hl := int(b[lay.l3]&0xf) * 4
			words := 1 + m.R.IntN(min(3, (60-hl)/4+1))
			if hl+4*words <= 60 {
				opt := make([]byte, 4*words)
				switch m.R.IntN(3) {
				case 0: // NOPs then end of list
					for i := range opt {
						opt[i] = 1
					}
					opt[len(opt)-1] = 0
				case 1: // record route, perhaps with a bad length
					opt[0], opt[1], opt[2] = 7, byte(len(opt)-1+m.R.IntN(3)), 4
				default:
					for i := range opt {
						opt[i] = byte(m.R.Uint32())
					}
				}
				b = append(b[:lay.l4], append(opt, b[lay.l4:]...)...)
				b[lay.l3] = 0x40 | byte((hl+len(opt))/4)
			}
		}
	case 15: // truncate, near a header boundary or anywhere
		cut := []int{lay.l3, lay.l3 + 19, lay.l3 + 20, lay.l4, lay.l4 + 3, lay.l4 + 7, lay.l4 + 13, lay.l4 + 19, lay.inner + 14, lay.inner + 33}
		n := cut[m.R.IntN(len(cut))]
		if m.R.IntN(3) == 0 || n < ethHdrLen {
			n = ethHdrLen + m.R.IntN(max(1, len(b)-ethHdrLen))
		}
		if n >= ethHdrLen && n < len(b) {
			b = b[:n]
		}
	case 16: // padding or random trailing bytes
		pad := make([]byte, 1+m.R.IntN(64))
		if m.R.IntN(2) == 0 {
			for i := range pad {
				pad[i] = byte(m.R.Uint32())
			}
		}
		b = append(b, pad...)
	case 17: // wrap the IP packet in NVGRE to the node
		if lay.l3 >= 0 {
			b = m.wrapNVGRE(b[lay.l3:])
		}
	case 18: // an ICMP error quoting this or another packet
		src := b
		if len(others) > 0 && m.R.IntN(2) == 0 {
			src = others[m.R.IntN(len(others))]
		}
		if q := findLayout(src); q.l3 >= 0 {
			b = m.icmpAbout(b, src[q.l3:])
		}
	case 19: // splice: this frame's headers, another's tail
		if len(others) > 0 && len(b) > ethHdrLen {
			o := others[m.R.IntN(len(others))]
			cut := ethHdrLen + m.R.IntN(len(b)-ethHdrLen)
			if cut < len(o) {
				b = append(b[:cut], o[cut:]...)
			}
		}
	}
	return b
}

// corrupt breaks one length or checksum of a fixed-up frame.
func (m *Mutator) corrupt(b []byte) []byte {
	if l, ok := ParseLink(b); ok && l.EtherType == EtherIPv6 && len(b) >= l.L3+40 {
		put16(b, l.L3+4, binary.BigEndian.Uint16(b[l.L3+4:])+uint16(1+m.R.IntN(8)))
		return b
	}
	lay := findLayout(b)
	if lay.l3 < 0 {
		return b
	}
	switch m.R.IntN(4) {
	case 0:
		b[lay.l3+10] ^= byte(1 + m.R.IntN(255))
	case 1:
		put16(b, lay.l3+2, binary.BigEndian.Uint16(b[lay.l3+2:])+uint16(1+m.R.IntN(8)))
	case 2:
		put16(b, lay.l3+2, binary.BigEndian.Uint16(b[lay.l3+2:])-uint16(1+m.R.IntN(8)))
	default:
		if lay.l4 >= 0 && lay.l4+8 <= len(b) {
			b[lay.l4+m.R.IntN(8)] ^= 0xff
		}
	}
	return b
}

// wrapNVGRE makes an NVGRE frame to the node carrying ip, from one of the
// tunnel sources (or any address), with one of the keys.
func (m *Mutator) wrapNVGRE(ip []byte) []byte {
	return m.wrapNVGREAs(ip, EtherIPv4)
}

// wrapNVGREAs is wrapNVGRE with the inner frame's ethertype (IPv6's for
// an IPv6 packet).
func (m *Mutator) wrapNVGREAs(ip []byte, et uint16) []byte {
	src := m.addr()
	if len(m.TunnelSrcs) > 0 && m.R.IntN(4) != 0 {
		src = m.TunnelSrcs[m.R.IntN(len(m.TunnelSrcs))]
	}
	key := uint32(m.R.Uint32())
	if len(m.Keys) > 0 && m.R.IntN(4) != 0 {
		key = m.Keys[m.R.IntN(len(m.Keys))]
	}
	inner := append([]byte{2, 1, 0, 0, 0, 1, 2, 0xcc, 0, 0, 0, 2, byte(et >> 8), byte(et)}, ip...)
	if et == EtherIPv4 && m.R.IntN(2) == 0 {
		// The agent's guest MAC for a service: 02:01 + the inner
		// destination.
		if len(ip) >= 20 {
			copy(inner[2:6], ip[16:20])
		}
	}
	g := make([]byte, 8)
	binary.BigEndian.PutUint32(g, 0x20006558)
	binary.BigEndian.PutUint32(g[4:], key)
	out := IPv4Packet(src, m.Endpoint, ProtoGRE, 64, 0x4000, append(g, inner...))
	return append([]byte{2, 0xbb, 0, 0, 0, 1, 2, 0xbb, 0, 0, 0, 2, 8, 0}, out...)
}

// icmpAbout makes an ICMP error about quoted (an IP packet) in frame b's
// Ethernet header, from and to addresses of the pool (half the time to
// the quoted packet's source, as a router would send it).
func (m *Mutator) icmpAbout(b, quoted []byte) []byte {
	n := min(len(quoted), 28+m.R.IntN(3)*20)
	typ := []byte{3, 11, 12, 4, 5}[m.R.IntN(5)]
	ic := append([]byte{typ, byte(m.R.IntN(5)), 0, 0, 0, 0, byte(m.R.IntN(6)), byte(m.R.Uint32())}, quoted[:n]...)
	binary.BigEndian.PutUint16(ic[2:], Checksum(ic))
	dst := m.addr()
	if len(quoted) >= 20 && m.R.IntN(2) == 0 {
		dst = netip.AddrFrom4([4]byte(quoted[12:16]))
	}
	eth := append([]byte(nil), b[:min(len(b), 12)]...)
	eth = append(eth, make([]byte, 12-len(eth))...)
	return append(append(eth, 8, 0), IPv4Packet(m.addr(), dst, ProtoICMP, byte(1+m.R.IntN(64)), 0, ic)...)
}

// IPv4Packet builds an IPv4 packet (no options, checksum set).
func IPv4Packet(src, dst netip.Addr, proto, ttl uint8, frag uint16, payload []byte) []byte {
	p := make([]byte, 20, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(20+len(payload)))
	binary.BigEndian.PutUint16(p[6:], frag)
	p[8], p[9] = ttl, proto
	putAddr(p, 12, src)
	putAddr(p, 16, dst)
	binary.BigEndian.PutUint16(p[10:], Checksum(p))
	return append(p, payload...)
}

// FixUp makes the IPv4 packets of a frame consistent again after a
// mutation: with lengths, each total length is set to reach the end of
// the frame (the inner packet of NVGRE: of the outer one); then the
// TCP/UDP/ICMP checksums of unfragmented packets (a UDP checksum 0 is
// left) and the header checksums, inner first.
func FixUp(b []byte, lengths bool) {
	l, ok := ParseLink(b)
	if ok && l.EtherType == EtherIPv6 && lengths {
		fixUp6(b, l.L3)
		return
	}
	if !ok || l.EtherType != EtherIPv4 || l.Tags > 2 {
		return
	}
	fix := func(l3, end int) {
		if len(b) < l3+20 || end > len(b) {
			return
		}
		hl := int(b[l3]&0xf) * 4
		if hl < 20 || l3+hl > end {
			return
		}
		if lengths && end-l3 <= 0xffff {
			binary.BigEndian.PutUint16(b[l3+2:], uint16(end-l3))
		}
		fixL4(b, l3, hl)
		b[l3+10], b[l3+11] = 0, 0
		binary.BigEndian.PutUint16(b[l3+10:], Checksum(b[l3:l3+hl]))
	}
	l3 := l.L3
	if len(b) >= l3+20 && b[l3+9] == ProtoGRE {
		hl := int(b[l3]&0xf) * 4
		end := len(b)
		if !lengths {
			end = min(l3+int(binary.BigEndian.Uint16(b[l3+2:])), len(b))
		}
		in := l3 + hl + nvgreExtra
		if hl >= 20 && len(b) >= in+20 && binary.BigEndian.Uint16(b[in-2:]) == EtherIPv4 {
			fix(in, end)
		}
		if hl >= 20 && lengths && len(b) >= in+40 && binary.BigEndian.Uint16(b[in-2:]) == EtherIPv6 {
			fixUp6(b, in)
		}
	}
	fix(l3, len(b))
}

func fixL4(b []byte, l3, hl int) {
	tot := int(binary.BigEndian.Uint16(b[l3+2:]))
	if tot < hl || l3+tot > len(b) || binary.BigEndian.Uint16(b[l3+6:])&0x3fff != 0 {
		return
	}
	pkt := b[l3 : l3+tot]
	l4 := pkt[hl:]
	pseudo := func(proto byte) uint16 {
		ph := append(append(append([]byte(nil), pkt[12:20]...), 0, proto), byte(len(l4)>>8), byte(len(l4)))
		return Checksum(append(ph, l4...))
	}
	switch pkt[9] {
	case ProtoTCP:
		if len(l4) >= 20 {
			l4[16], l4[17] = 0, 0
			binary.BigEndian.PutUint16(l4[16:], pseudo(ProtoTCP))
		}
	case ProtoUDP:
		if len(l4) >= 8 && (l4[6] != 0 || l4[7] != 0) {
			l4[6], l4[7] = 0, 0
			c := pseudo(ProtoUDP)
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(l4[6:], c)
		}
	case ProtoICMP:
		if len(l4) < 8 {
			return
		}
		if q := l4[8:]; ICMPError(l4[0]) && len(q) >= 20 && q[0]>>4 == 4 {
			if qhl := int(q[0]&0xf) * 4; qhl >= 20 && qhl <= len(q) {
				q[10], q[11] = 0, 0
				binary.BigEndian.PutUint16(q[10:], Checksum(q[:qhl]))
			}
		}
		l4[2], l4[3] = 0, 0
		binary.BigEndian.PutUint16(l4[2:], Checksum(l4))
	}
}

package dpfuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// IPv6 EIPs (issue 21), as docs/dataplane.md states their paths and the
// RFCs their rules: the edge encapsulates Internet -> IPv6 EIP over the
// IPv4 underlay (a router hop: the hop limit decremented, RFC 8200 3),
// decapsulates an IPv6 EIP's guest's packets from its host, and the agent
// translates the EIP 1:1 to the guest's address6 both ways (a host: the
// hop limit kept). A Region's or Host's EIPs map holds IPv6 EIPs beside
// the IPv4 ones (an IPv6 key); Own and UnderlayNets may hold IPv6
// prefixes; a Policy decides IPv6 flows too.

// Out6 is how a forwarded IPv6 packet must leave (Verdict.Out6): in
// NVGRE (Encap) from the node's endpoint to Host (or, Host not valid, to
// one of Edges) with the VSID, or bare; with the addresses Src and Dst
// (the agent's translation) and the hop limit decremented (HopDec, a
// router hop) or kept.
type Out6 struct {
	Encap    bool
	Host     netip.Addr
	Edges    map[netip.Addr]bool
	VSID     uint32
	Src, Dst netip.Addr
	HopDec   bool
	// VIP: an IPv6 VIP's packet (vip6.go), which may leave as VIP
	// allows (Encap, Host and Edges unused); Reply: a nat backend's
	// packet, which may leave translated from one of its VIPs.
	VIP   *VIP6
	Reply bool
	// SPort, DPort: the ports a translation writes (0: kept), Quote: an
	// ICMPv6 error's quote may be translated (the checker sets them from
	// what the VIP allows).
	SPort, DPort uint16
	Quote        bool
}

var (
	v6ULA = netip.MustParsePrefix("fc00::/7")
)

// martianSrc6 is MartianV6's reading of the source alone ("" if it may
// come from a wire).
func martianSrc6(p IPv6) string {
	q := p
	// The destination's rules do not apply: a harmless one.
	pkt := append([]byte(nil), p.Pkt[:40]...)
	copy(pkt[24:40], netip.MustParseAddr("2001:db8::1").AsSlice())
	q.Pkt = pkt
	return MartianV6(q)
}

// noForwardDst6: a destination no router forwards a guest's packet to
// (RFC 4291: the unspecified address and loopback never, multicast and
// link-local not off the link, IPv4-mapped never on the wire), and for
// the edge's return path unique-local too (RFC 4193: never routed on the
// Internet; the edge is the region's border). "" if it may be forwarded.
func noForwardDst6(a netip.Addr, border bool) string {
	switch {
	case a == netip.IPv6Unspecified(), a == netip.IPv6Loopback():
		return "the unspecified address or loopback"
	case v6Multicast.Contains(a):
		return "multicast"
	case v6LinkLocal.Contains(a):
		return "link-local"
	case v6Mapped.Contains(a):
		return "IPv4-mapped"
	case border && v6ULA.Contains(a):
		return "unique-local (RFC 4193: never routed on the Internet)"
	}
	return ""
}

// udpCsum0 says whether p carries a UDP header (unfragmented or a first
// fragment) whose checksum is 0: RFC 8200 8.1, a receiver discards it.
func udpCsum0(p IPv6) bool {
	return p.Proto == ProtoUDP && p.FragOff == 0 && p.L4+8 <= len(p.Pkt) && p.Pkt[p.L4+6] == 0 && p.Pkt[p.L4+7] == 0
}

// ports6 are an IPv6 packet's TCP or UDP ports, when it carries its
// upper-layer header (unfragmented, or a first fragment: the parser
// checked the whole header is there), else 0, 0.
func ports6(p IPv6) (uint16, uint16) {
	if p.FragOff != 0 || (p.Proto != ProtoTCP && p.Proto != ProtoUDP) || p.L4+4 > len(p.Pkt) {
		return 0, 0
	}
	return binary.BigEndian.Uint16(p.Pkt[p.L4:]), binary.BigEndian.Uint16(p.Pkt[p.L4+2:])
}

// Ports6 is ports6 for the harness (the flow hash of an encapsulation).
func Ports6(p IPv6) (src, dst uint16) { return ports6(p) }

// judgeEdge6 reads an IPv6 frame at the edge: judgeIPv6's rules, then, for
// a valid packet to an IPv6 EIP, the Internet -> IPv6 EIP path (docs:
// "IPv6 EIPs"): from the Internet side the firewall, then anti-spoofing;
// from any side a link-local source is never forwarded (RFC 4291 2.5.6);
// a hop limit of 1 or 0 is not forwarded (an ICMPv6 time exceeded may go
// back, RFC 4443 3.3, but for 2.4(e)'s exceptions); the rest is
// encapsulated to the EIP's host, hop limit decremented. Rate and
// bandwidth limits are not modelled (the harness configures none).
func (r *Region) judgeEdge6(side Side, b []byte, l Link) Verdict {
	v := judgeIPv6(b, l.L3, true)
	if v.Counter != "pass_ipv6" {
		return v
	}
	p, _ := ParseIPv6(b, l.L3)
	_, eip := r.EIPs[p.Dst()]
	if p.Proto == ProtoICMPv6 && p.FragOff == 0 && !p.MF && p.Exts == 0 && p.L4 < len(p.Pkt) && p.Pkt[p.L4] == 135 && (!eip || r.VIPs[p.Dst()]) {
		// A neighbor solicitation to anything but an IPv6 EIP (which
		// forwards it as any packet) is never forwarded nor load
		// balanced: on an ARP interface of the ARP owner, answered or
		// dropped under a drop_ndp_* reason (docs: "NDP"; TestNDPAnswer
		// holds those byte for byte), else the kernel's: pass_ipv6, or
		// not.
		v = Verdict{NoForward: "a neighbor solicitation", NoICMP: "a neighbor solicitation (link-local: never expires here)",
			Counter: "pass_ipv6", CounterMaybe: true, VLAN: b[12 : l.L3-2]}
		if l.Tags == 0 && p.Exts == 0 && len(p.Pkt) >= 40+24 {
			v.NSRequest, v.NSFor, v.NS = true, netip.AddrFrom16([16]byte(p.Pkt[48:64])), &p
		}
		return v
	}
	if vip, ok := r.vip6Of(p.Dst()); ok {
		return r.judgeVIP6(side, b, l, p, vip)
	}
	if _, eip := r.EIPs[p.Dst()]; !eip && p.Proto == ProtoGRE && r.NVGREEndpoint6.IsValid() && p.Dst() == r.NVGREEndpoint6 {
		// NVGRE over IPv6 to the edge (docs: "The IPv6 underlay",
		// Decapsulation): only from the underlay interface and a
		// host's IPv6 address, else drop_spoof. The oracle knows no
		// host of the IPv6 underlay (decapsulation from one is the
		// fixtures', TestEdgeUl6Decap): nothing may come out.
		return Verdict{Forbid: fmt.Sprintf("NVGRE over IPv6 to the edge from no host of the IPv6 underlay: %v on the %v side", p.Src(), side),
			Counter: "drop_spoof"}
	}
	bnd, ok := r.EIPs[p.Dst()]
	if !ok || !p.Dst().Is6() {
		if vip, ok := r.natVIP6Of(p.Src()); ok && !r.isPublic(p.Dst()) {
			return r.judgeNATReply6(side, b, l, p, vip, v)
		}
		return v
	}
	if v = r.inbound6(side, b, l, p, "an IPv6 EIP"); v.Forbid != "" {
		return v
	}
	if p.HopLimit() <= 1 {
		v.NoForward = fmt.Sprintf("hop limit expired: %d", p.HopLimit())
	}
	r.noICMP6(&v, b, p)
	v.Out6 = &Out6{Encap: true, Host: bnd.Host, VSID: bnd.VSID, Src: p.Src(), Dst: p.Dst(), HopDec: true}
	return v
}

// inbound6 is the verdict on a valid packet p to one of the region's
// IPv6 addresses (what: an IPv6 EIP or VIP) before its own outputs: from
// the Internet side the firewall, then anti-spoofing; from any side a
// link-local source is never forwarded (RFC 4291 2.5.6: a router must
// not, whichever interface it came in on). v.Forbid says if it stops.
func (r *Region) inbound6(side Side, b []byte, l Link, p IPv6, what string) Verdict {
	v := Verdict{IP6: &p, Fwd6: &p, VLAN: b[12 : l.L3-2], Trailer: b[p.End():]}
	if side == Internet {
		if r.firewall6(&v, p); v.Forbid != "" {
			return v
		}
		if c, counter := r.spoofClass6(p); c != "" {
			v.Forbid, v.Counter = c, counter
			return v
		}
	}
	if v6LinkLocal.Contains(p.Src()) {
		v.Forbid = fmt.Sprintf("link-local source %v to %s from the %v side (RFC 4291 2.5.6: never forwarded)", p.Src(), what, side)
		v.Counter = "drop_ip6_off_link"
	}
	return v
}

// spoofClass6 is the IPv6 twin of spoofClass (docs: "IPv6 EIPs", 3.): the
// class an Internet-side source to an IPv6 EIP is dropped under, and the
// counter, or "".
func (r *Region) spoofClass6(p IPv6) (string, string) {
	src := p.Src()
	switch {
	case src == p.Dst():
		return "land attack: source is the destination", "drop_spoof_own"
	case v6ULA.Contains(src):
		return "spoofed: non-routable source (unique-local)", "drop_spoof_bogon"
	case v6LinkLocal.Contains(src):
		return fmt.Sprintf("spoofed: link-local source %v off its link (to an IPv6 EIP)", src), "drop_ip6_off_link"
	}
	for _, pf := range r.UnderlayNets {
		if pf.Contains(src) {
			return "spoofed: underlay source " + pf.String(), "drop_spoof_underlay"
		}
	}
	for _, pf := range r.Own {
		if pf.Contains(src) {
			return "spoofed: the region's own source " + pf.String(), "drop_spoof_own"
		}
	}
	return "", ""
}

// firewall6 applies the Policy to an Internet-side IPv6 packet to an
// IPv6 EIP (docs: "Firewall, IPv6"): ports of an unfragmented packet or a
// first fragment, none for a later one.
func (r *Region) firewall6(v *Verdict, p IPv6) {
	if r.Policy == nil {
		return
	}
	f := Flow{Src: p.Src(), Dst: p.Dst(), Proto: p.Proto, Fragment: p.FragOff != 0}
	f.SPort, f.DPort = ports6(p)
	v.Firewall, v.FirewallRan = r.Policy.Decide(f), true
	switch v.Firewall.Drop {
	case FWDeny:
		v.Forbid = "denied by the firewall: rule " + v.Firewall.Rule
	case FWPrivate:
		v.Forbid = "denied by the firewall (private destination): no allow rule matches"
	}
}

// judgeDecap6 reads NVGRE to the edge whose inner frame is IPv6 (docs:
// "IPv6 guests"): an IPv6 EIP's guest's packet, forwarded to the Internet
// from its host only. v holds the outer packet's verdict.
func (r *Region) judgeDecap6(v *Verdict, b []byte, n NVGRE) {
	v.Fwd, v.Trailer, v.NoForward = nil, nil, ""
	in, err := ParseIPv6(b[:n.Outer.End()], n.Inner+ethHdrLen)
	if err != nil {
		v.Forbid = "malformed inner packet: " + err.Error()
		return
	}
	if m := martianSrc6(in); m != "" {
		v.Forbid = "inner packet: martian IPv6 " + m
		return
	}
	if d := noForwardDst6(in.Dst(), true); d != "" {
		v.Forbid = fmt.Sprintf("inner packet: destination %v is %s", in.Dst(), d)
		return
	}
	bnd, ok := r.EIPs[in.Src()]
	switch {
	case !ok || !in.Src().Is6():
		v.Forbid = fmt.Sprintf("spoofed: inner source %v is no IPv6 EIP", in.Src())
		return
	case bnd.Host != n.Outer.Src() || bnd.VSID != n.VSID():
		v.Forbid = fmt.Sprintf("spoofed: inner source %v is bound to %v VSID %d, sent by %v VSID %d", in.Src(), bnd.Host, bnd.VSID, n.Outer.Src(), n.VSID())
		return
	}
	if in.HopLimit() <= 1 {
		// No ICMPv6 error is encapsulated back: nothing at all.
		v.Forbid = fmt.Sprintf("inner hop limit expired: %d", in.HopLimit())
		return
	}
	v.Fwd6 = &in
	v.Out6 = &Out6{Src: in.Src(), Dst: in.Dst(), HopDec: true}
}

// eip6Of is the IPv6 EIP whose guest has private address a, if any.
func (h *Host) eip6Of(a netip.Addr) (netip.Addr, Binding, bool) {
	for e, b := range h.EIPs {
		if e.Is6() && b.Host == a {
			return e, b, true
		}
	}
	return netip.Addr{}, Binding{}, false
}

// judgeFromEdge6 reads NVGRE from an edge whose inner frame is IPv6
// (docs: "Agent, IPv6 EIPs", underlay -> guest): delivered to the guest
// of the IPv6 EIP it is for, in the tunnel's VSID, its destination
// translated to the guest's address6, the hop limit kept (a host).
func (h *Host) judgeFromEdge6(v *Verdict, b []byte, n NVGRE) {
	v.Fwd, v.Trailer, v.NoForward = nil, nil, ""
	in, err := ParseIPv6(b[:n.Outer.End()], n.Inner+ethHdrLen)
	if err != nil {
		v.Forbid = "malformed inner packet: " + err.Error()
		return
	}
	if m := martianSrc6(in); m != "" {
		v.Forbid = "inner packet: martian IPv6 " + m
		return
	}
	if in.HopLimit() == 0 {
		v.Forbid = "inner packet: hop limit 0"
		return
	}
	dst := in.Dst()
	e, ok := h.EIPs[dst]
	if !ok || !dst.Is6() || e.VSID != n.VSID() {
		v.Forbid = fmt.Sprintf("unknown destination: inner destination %v is no IPv6 EIP of this host in VSID %d", dst, n.VSID())
		return
	}
	if udpCsum0(in) {
		v.Forbid, v.Counter, v.CounterMaybe = "UDP checksum 0 (RFC 8200 8.1: discarded by its receiver)", "drop_ip6_udp_csum0", true
		return
	}
	v.Fwd6 = &in
	v.Out6 = &Out6{Src: in.Src(), Dst: e.Host}
}

// judgeGuest6 reads a guest's IPv6 frame (docs: "Agent, IPv6 EIPs", guest
// -> underlay): judgeIPv6's rules; neighbour discovery to the host's
// kernel; a source that is no IPv6 EIP's guest dropped; a destination no
// router forwards to or hop limit 0 dropped; the rest tunnelled to one of
// the edges, its source translated to the EIP, the hop limit kept.
func (h *Host) judgeGuest6(b []byte, l Link) Verdict {
	v := judgeIPv6(b, l.L3, false)
	if v.Counter != "pass_ipv6" {
		return v
	}
	p, _ := ParseIPv6(b, l.L3)
	if NDPv6(p) {
		return Verdict{Forbid: "not IPv4: neighbour discovery from a guest, for the host's kernel", Counter: "pass_ipv6"}
	}
	eip, bnd, ok := h.eip6Of(p.Src())
	if !ok {
		return Verdict{Forbid: "IPv6 from a guest without an IPv6 EIP", Counter: "drop_local"}
	}
	if d := noForwardDst6(p.Dst(), false); d != "" {
		return Verdict{Forbid: fmt.Sprintf("guest's destination %v is %s", p.Dst(), d), Counter: "drop_bad_dst"}
	}
	if p.HopLimit() == 0 {
		return Verdict{Forbid: "guest's packet with hop limit 0", Counter: "drop_ttl"}
	}
	if udpCsum0(p) {
		return Verdict{Forbid: "UDP checksum 0 (RFC 8200 8.1: discarded by its receiver)", Counter: "drop_ip6_udp_csum0", CounterMaybe: true}
	}
	return Verdict{IP6: &p, Fwd6: &p, VLAN: b[12 : l.L3-2], Trailer: b[p.End():],
		Out6: &Out6{Encap: true, Edges: h.Edges, VSID: bnd.VSID, Src: eip, Dst: p.Dst()}}
}

// pseudoSum6 is the ones' complement sum (unfolded to 16 bits, not
// inverted) of an IPv6 packet's upper layer with RFC 8200 8.1's
// pseudo-header: what a correct checksum makes 0xffff. ok is false when
// the packet carries no checksummed upper-layer header.
func pseudoSum6(p IPv6) (uint16, bool) {
	if p.FragOff != 0 || p.L4 > len(p.Pkt) {
		return 0, false
	}
	l4 := p.Pkt[p.L4:]
	switch {
	case p.Proto == ProtoTCP && len(l4) >= 20, p.Proto == ProtoUDP && len(l4) >= 8, p.Proto == ProtoICMPv6 && len(l4) >= 4:
	default:
		return 0, false
	}
	ph := make([]byte, 0, 40+len(l4))
	ph = append(ph, p.Pkt[8:40]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(l4)))
	ph = append(ph, 0, 0, 0, p.Proto)
	s := ^Checksum(append(ph, l4...))
	if s == 0 { // ones' complement: 0 and 0xffff are both zero
		s = 0xffff
	}
	return s, true
}

// CheckSum6 says whether an IPv6 packet's upper-layer checksum is correct
// (true too when it carries none to check).
func CheckSum6(p IPv6) bool {
	s, ok := pseudoSum6(p)
	return !ok || s == 0xffff
}

// checkFwd6 holds a transmitted IPv6 packet o to the verdict: the input's
// packet with the addresses Out6 says, the hop limit decremented or kept,
// every other byte the same but the upper-layer checksum, which a
// translation updates so that the packet's sum is what it was (a correct
// checksum stays correct, RFC 1624; a wrong one stays as wrong).
func checkFwd6(v Verdict, o IPv6, hopDec bool) error {
	in, w := v.Fwd6, v.Out6
	if len(o.Pkt) != len(in.Pkt) {
		return fmt.Errorf("IPv6 packet of %d bytes transmitted as %d", len(in.Pkt), len(o.Pkt))
	}
	if o.Src() != w.Src || o.Dst() != w.Dst {
		return fmt.Errorf("IPv6 %v -> %v transmitted as %v -> %v, want %v -> %v", in.Src(), in.Dst(), o.Src(), o.Dst(), w.Src, w.Dst)
	}
	hop := in.HopLimit()
	if hopDec {
		hop--
	}
	if o.HopLimit() != hop {
		return fmt.Errorf("hop limit %d transmitted as %d (want %d)", in.HopLimit(), o.HopLimit(), hop)
	}
	want := append([]byte(nil), in.Pkt...)
	want[7] = hop
	copy(want[8:24], w.Src.AsSlice())
	copy(want[24:40], w.Dst.AsSlice())
	translated := w.Src != in.Src() || w.Dst != in.Dst()
	if in.FragOff == 0 && (in.Proto == ProtoTCP || in.Proto == ProtoUDP) && in.L4+4 <= len(want) {
		if w.SPort != 0 {
			binary.BigEndian.PutUint16(want[in.L4:], w.SPort)
			translated = true
		}
		if w.DPort != 0 {
			binary.BigEndian.PutUint16(want[in.L4+2:], w.DPort)
			translated = true
		}
	}
	if w.Quote && in.L4+8 <= len(want) {
		// An ICMPv6 error's quote translated with its flow (the
		// checksum covers it: the sum holds it still).
		copy(want[in.L4+8:], o.Pkt[in.L4+8:])
		translated = true
	}
	if translated && in.FragOff == 0 {
		// The checksum field may differ: the sum must not.
		if c := csumOff6(*in); c >= 0 && c+2 <= len(want) {
			copy(want[c:c+2], o.Pkt[c:c+2])
			s0, ok0 := pseudoSum6(*in)
			s1, ok1 := pseudoSum6(o)
			if ok0 != ok1 || s0 != s1 {
				return fmt.Errorf("upper-layer checksum not updated for the translation: sum %#04x before, %#04x after", s0, s1)
			}
			if in.Proto == ProtoUDP && o.Pkt[c] == 0 && o.Pkt[c+1] == 0 {
				return errors.New("UDP checksum 0 transmitted (RFC 8200 8.1: sent as 0xffff)")
			}
		}
	}
	if !bytes.Equal(o.Pkt, want) {
		i := 0
		for i < len(want) && o.Pkt[i] == want[i] {
			i++
		}
		return fmt.Errorf("IPv6 packet changed beyond its addresses, hop limit and checksum: first at byte %d (%#02x, want %#02x)", i, o.Pkt[i], want[i])
	}
	return nil
}

// csumOff6 is the offset in p.Pkt of the upper layer's checksum (TCP,
// UDP, ICMPv6), or -1.
func csumOff6(p IPv6) int {
	switch p.Proto {
	case ProtoTCP:
		return p.L4 + 16
	case ProtoUDP:
		return p.L4 + 6
	case ProtoICMPv6:
		return p.L4 + 2
	}
	return -1
}

// checkOutput6 is CheckOutput for an IPv6 frame transmitted: an ICMPv6
// error about the input (from the ICMPv6 source, to the input's source,
// quoting it, checksum right, RFC 4443), or the forwarded packet as
// Out6 says, untagged, ending the frame.
func (r *Region) checkOutput6(v Verdict, out []byte, ol Link) (string, error) {
	o, err := ParseIPv6(out, ol.L3)
	if err != nil {
		return "", fmt.Errorf("IPv6 output: %v", err)
	}
	if m := MartianV6(o); m != "" {
		return "", fmt.Errorf("IPv6 output %v: martian %s", o, m)
	}
	if o.Proto == ProtoICMPv6 && o.FragOff == 0 && !o.MF && o.L4 < len(o.Pkt) && o.Pkt[o.L4] < 128 && v.IP6 != nil && o.Dst() == v.IP6.Src() {
		return OutICMP, r.checkICMP6(v, o, out, ol)
	}
	if v.NSRequest {
		return OutNA, checkNA(v, o, out)
	}
	if v.NoForward != "" || v.Fwd6 == nil || v.Out6 == nil {
		return "", fmt.Errorf("IPv6 forwarded, but the input may not be: %s", v.NoForward)
	}
	if v.Out6.Encap {
		return "", errors.New("IPv6 forwarded bare: it must be encapsulated")
	}
	if ol.Tags > 0 {
		return OutForward, errors.New("IPv6 forwarded with VLAN tags")
	}
	if v.Out6.VIP != nil {
		// Translated in place: the input's Ethernet padding kept (as
		// an IPv4 packet forwarded without a tunnel keeps it).
		if !bytes.Equal(out[o.End():], v.Trailer) {
			return OutForward, fmt.Errorf("%d bytes after the translated IPv6 packet, not the input's padding", len(out)-o.End())
		}
		return OutForward, r.checkVIP6Bare(v, o, true)
	}
	if o.End() != len(out) {
		return OutForward, fmt.Errorf("%d bytes after the forwarded IPv6 packet", len(out)-o.End())
	}
	return OutForward, checkFwd6(v, o, v.Out6.HopDec)
}

// checkICMP6 holds an ICMPv6 error o about the input to RFC 4443 and the
// docs ("ICMPv6 errors"): allowed for the input; from the ICMPv6 source,
// hop limit 64; time exceeded (3/0) for an expired hop limit, else packet
// too big (2/0) with an MTU of at least 1280; the quote the start of the
// input packet, the message within 1280 bytes; the checksum right; the
// input's VLAN tags kept.
func (r *Region) checkICMP6(v Verdict, o IPv6, out []byte, ol Link) error {
	if v.NoICMP != "" {
		return fmt.Errorf("ICMPv6 error about %s", v.NoICMP)
	}
	if !r.ICMPSource6.IsValid() || o.Src() != r.ICMPSource6 {
		return fmt.Errorf("ICMPv6 error from %v, the ICMPv6 source is %v", o.Src(), r.ICMPSource6)
	}
	if !bytes.Equal(out[12:ol.L3-2], v.VLAN) {
		return fmt.Errorf("ICMPv6 error with VLAN tags %x, the input had %x", out[12:ol.L3-2], v.VLAN)
	}
	if o.End() != len(out) || len(o.Pkt) > 1280 {
		return fmt.Errorf("ICMPv6 error of %d bytes in a frame of %d (at most 1280)", len(o.Pkt), len(out)-ol.L3)
	}
	if o.Exts != 0 || o.HopLimit() != 64 {
		return fmt.Errorf("ICMPv6 error with %d extension headers, hop limit %d", o.Exts, o.HopLimit())
	}
	m := o.Pkt[o.L4:]
	typ, code := m[0], m[1]
	mtu := binary.BigEndian.Uint32(m[4:])
	switch {
	case v.NoForward != "":
		if typ != 3 || code != 0 {
			return fmt.Errorf("ICMPv6 %d/%d about an expired hop limit (want time exceeded 3/0)", typ, code)
		}
	case typ != 2 || code != 0 || mtu < 1280:
		return fmt.Errorf("ICMPv6 %d/%d MTU %d about a packet that may be forwarded (only packet too big 2/0, MTU >= 1280)", typ, code, mtu)
	}
	if !CheckSum6(o) {
		return errors.New("ICMPv6 checksum wrong")
	}
	q := m[8:]
	if len(q) < 40 || !bytes.HasPrefix(v.IP6.Pkt, q) {
		return errors.New("the quote is not the start of the input packet")
	}
	if len(q) < len(v.IP6.Pkt) && len(o.Pkt) != 1280 {
		return fmt.Errorf("quote of %d of the packet's %d bytes in an error of %d (RFC 4443 2.4(c): as much as fits 1280)", len(q), len(v.IP6.Pkt), len(o.Pkt))
	}
	return nil
}

// checkEncap6 holds NVGRE carrying IPv6 (o, the outer IPv4 packet of out)
// to Out6: from the node's endpoint to the host (or an edge), DF,
// unfragmented, the VSID, outer TOS the traffic class, inner ethertype
// IPv6, the packet ending the outer one and the frame.
func (r *Region) checkEncap6(v Verdict, out []byte, ol Link, o IPv4) error {
	w := v.Out6
	vipEncap := w != nil && w.VIP != nil && !w.Reply && len(w.VIP.Encap) > 0
	if v.NoForward != "" || v.Fwd6 == nil || w == nil || !(w.Encap || vipEncap) {
		return fmt.Errorf("NVGRE transmitted, but the input may not be forwarded so: %s", v.NoForward)
	}
	if ol.Tags > 0 {
		return errors.New("NVGRE transmitted with VLAN tags")
	}
	if o.Src() != r.NVGREEndpoint || o.Proto() != ProtoGRE {
		return fmt.Errorf("outer %v: want GRE from %v", o, r.NVGREEndpoint)
	}
	switch {
	case vipEncap:
		// Checked with the VSID below.
	case w.Host.IsValid() && o.Dst() != w.Host:
		return fmt.Errorf("encapsulated to %v, the EIP's host is %v", o.Dst(), w.Host)
	case !w.Host.IsValid() && !w.Edges[o.Dst()]:
		return fmt.Errorf("encapsulated to %v, no edge of the host", o.Dst())
	}
	if !o.DF() || o.Fragmented() || o.TTL() == 0 || o.HL != 20 {
		return fmt.Errorf("outer %v: NVGRE leaves unfragmented with DF, no options, a TTL", o)
	}
	n, err := ParseNVGRE(o)
	if err != nil {
		return err
	}
	if vipEncap && !vipEncapOK(w.VIP, o.Dst(), n.VSID()) {
		return fmt.Errorf("IPv6 VIP %v's packet encapsulated to %v VSID %d: no encap backend of the VIP (%v)", v.Fwd6.Dst(), o.Dst(), n.VSID(), w.VIP.Encap)
	}
	if !vipEncap && n.VSID() != w.VSID {
		return fmt.Errorf("VSID %d, the EIP's is %d", n.VSID(), w.VSID)
	}
	if et := binary.BigEndian.Uint16(out[n.Inner+12:]); et != EtherIPv6 {
		return fmt.Errorf("inner ethertype %#04x carrying IPv6", et)
	}
	// The inner frame parsed as the frame it is (the walk's bound is
	// from its start).
	in, err := ParseIPv6(out[n.Inner:o.End()], ethHdrLen)
	if err != nil {
		return fmt.Errorf("inner: %v", err)
	}
	if n.Inner+in.End() != o.End() || o.End() != len(out) {
		return fmt.Errorf("inner packet ends at %d, outer at %d, frame at %d", n.Inner+in.End(), o.End(), len(out))
	}
	if tc := in.Pkt[0]<<4 | in.Pkt[1]>>4; o.Pkt[1] != tc {
		return fmt.Errorf("outer TOS %#02x, the traffic class %#02x", o.Pkt[1], tc)
	}
	return checkFwd6(v, in, w.HopDec)
}

// CheckPassed6 holds a frame handed to the kernel changed for an IPv6
// input (the edge's decapsulation or the agent's translation with the
// next hop unresolved): the packet as Out6 says but for the hop limit,
// which the kernel's forwarding decrements, bare and ending the frame.
func (r *Region) CheckPassed6(v Verdict, out []byte) error {
	if v.Forbid != "" || v.NoForward != "" || v.Fwd6 == nil || v.Out6 == nil || v.Out6.Encap {
		return fmt.Errorf("handed to the kernel changed, but the input may not be forwarded so: %v", v)
	}
	ol, ok := ParseLink(out)
	if !ok || ol.EtherType != EtherIPv6 || ol.Tags > 0 {
		return fmt.Errorf("handed to the kernel: not an untagged IPv6 frame")
	}
	o, err := ParseIPv6(out, ol.L3)
	if err != nil {
		return fmt.Errorf("handed to the kernel: %v", err)
	}
	if o.End() != len(out) {
		return fmt.Errorf("%d bytes after the IPv6 packet handed to the kernel", len(out)-o.End())
	}
	if v.Out6.VIP != nil {
		// lb_nat_pass: translated, the next hop unresolved.
		return r.checkVIP6Bare(v, o, false)
	}
	return checkFwd6(v, o, false)
}

// allNodes is ff02::1 (RFC 4291 2.7.1).
var allNodes = netip.MustParseAddr("ff02::1")

// checkNA holds a neighbor advertisement o to RFC 4861 4.4 and 7.2.4 as
// an answer to the verdict's solicitation: untagged, 86 bytes, from the
// target, hop limit 255, no extension header, code 0, the checksum right,
// Solicited set and to the solicitation's source (its Ethernet source),
// or for duplicate address detection (from ::) clear and to all-nodes;
// the target the one asked for, a target link-layer address option with
// the frame's source MAC (the harness's checker holds the frame byte for
// byte: fuzz_test.go checkNDP).
func checkNA(v Verdict, o IPv6, out []byte) error {
	if o.Proto != ProtoICMPv6 || o.L4 >= len(o.Pkt) || o.Pkt[o.L4] != 136 {
		return errors.New("a solicitation answered with other than a neighbor advertisement")
	}
	if len(out) != 14+40+32 || o.Off != 14 || o.Exts != 0 || len(o.Pkt) != 40+32 {
		return fmt.Errorf("neighbor advertisement of %d bytes (IPv6 at %d, %d extension headers): want 86, untagged, none", len(out), o.Off, o.Exts)
	}
	na := o.Pkt[40:]
	dad := v.NS.Src().IsUnspecified()
	flags := byte(0x60)
	wantDst := v.NS.Src()
	if dad {
		flags, wantDst = 0x20, allNodes
	}
	switch {
	case o.HopLimit() != 255:
		return fmt.Errorf("hop limit %d: want 255", o.HopLimit())
	case o.Src() != v.NSFor || netip.AddrFrom16([16]byte(na[8:24])) != v.NSFor:
		return fmt.Errorf("advertisement from %v for %v: the solicitation asked for %v", o.Src(), netip.AddrFrom16([16]byte(na[8:24])), v.NSFor)
	case o.Dst() != wantDst:
		return fmt.Errorf("advertisement to %v: want %v", o.Dst(), wantDst)
	case na[1] != 0 || na[4]&0x7f != flags || !bytes.Equal(na[5:8], []byte{0, 0, 0}):
		return fmt.Errorf("code %d, flags %#02x: want 0 and %#02x (and Router or not)", na[1], na[4], flags)
	case !bytes.Equal(na[24:26], []byte{2, 1}) || !bytes.Equal(na[26:32], out[6:12]):
		return errors.New("no target link-layer address option with the frame's source MAC")
	case !CheckSum6(o):
		return errors.New("ICMPv6 checksum wrong")
	}
	if dad && !bytes.Equal(out[0:6], []byte{0x33, 0x33, 0, 0, 0, 1}) {
		return fmt.Errorf("to MAC %x: want all-nodes' 33:33:00:00:00:01", out[0:6])
	}
	return nil
}

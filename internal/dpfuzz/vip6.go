package dpfuzz

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6 VIPs (issue 21), as docs/dataplane.md states their paths (*IPv6
// VIPs*, *IPv6 VIPs in mode nat*): from the Internet side the edge checks
// a packet to an IPv6 VIP as one to an IPv6 EIP (the firewall, then
// anti-spoofing; from any side a link-local source is never forwarded; a
// hop limit of 1 or 0 is not forwarded), then load balances it: NVGRE to
// an encap backend's host in its VSID (the packet unchanged but its hop
// limit, decremented), or DNAT66 to a nat backend's IPv6 address (the
// destination port the backend's, or kept; the upper-layer checksum
// updated; an ICMPv6 error's quote translated), or nothing (no listener,
// no backend). Which listener a port meets is the data plane's to decide
// (its own tests hold that byte for byte): the oracle holds every output
// to the VIP's backends as a whole. A nat backend's reply (SNAT66) may
// leave from the VIP, its source port translated, or go to the kernel.

// VIP6 is what may come out for an IPv6 VIP's packets: NVGRE to one of
// Encap's hosts in its VSID, or the packet translated to one of NAT's.
type VIP6 struct {
	Encap []Binding
	NAT   []NATBackend6
}

// NATBackend6 is an IPv6 VIP's nat backend: its address and port (0: the
// listener's port, the destination port kept).
type NATBackend6 struct {
	Addr netip.Addr
	Port uint16
}

// vip6Of is the IPv6 VIP a is, if any.
func (r *Region) vip6Of(a netip.Addr) (*VIP6, bool) {
	v, ok := r.VIP6s[a]
	if !ok || !a.Is6() {
		return nil, false
	}
	return &v, true
}

// natVIP6Of is an IPv6 VIP one of whose nat backends is a, if any (the
// first in the map's order: the checker looks the output's source up).
func (r *Region) natVIP6Of(a netip.Addr) (*VIP6, bool) {
	for _, v := range r.VIP6s {
		for _, b := range v.NAT {
			if b.Addr == a {
				return &v, true
			}
		}
	}
	return nil, false
}

// noICMP6 sets v.NoICMP for an IPv6 packet the edge may answer with an
// ICMPv6 error (RFC 4443 2.4(e)) and says whether it may.
func (r *Region) noICMP6(v *Verdict, b []byte, p IPv6) {
	switch {
	case !r.ICMPSource6.IsValid():
		v.NoICMP = "no ICMPv6 source configured"
	case len(b) > 0 && b[0]&1 != 0:
		v.NoICMP = "a link-layer multicast or broadcast frame (RFC 4443 2.4(e))"
	case p.Proto == ProtoICMPv6 && p.FragOff != 0:
		v.NoICMP = "a later fragment of ICMPv6 (perhaps an error's)"
	case p.Proto == ProtoICMPv6 && p.L4 < len(p.Pkt) && (p.Pkt[p.L4] < 128 || p.Pkt[p.L4] == 137):
		v.NoICMP = fmt.Sprintf("an ICMPv6 error or redirect (type %d, RFC 4443 2.4(e))", p.Pkt[p.L4])
	}
}

// judgeVIP6 reads a valid IPv6 packet p to the IPv6 VIP vip: the IPv6
// EIP's discipline (judgeEdge6), then the VIP's outputs.
func (r *Region) judgeVIP6(side Side, b []byte, l Link, p IPv6, vip *VIP6) Verdict {
	v := r.inbound6(side, b, l, p, "an IPv6 VIP")
	if v.Forbid != "" {
		return v
	}
	if udpCsum0(p) && len(vip.NAT) > 0 && p.HopLimit() > 1 {
		// DNAT66 cannot update a checksum that is not there (RFC 8200
		// 8.1): dropped after the listener (which may drop it first,
		// or give an encap backend) and the hop limit's check (an
		// expired one is answered as any other).
		v.Counter, v.CounterMaybe = "drop_ip6_udp_csum0", true
		if len(vip.Encap) == 0 {
			v.Forbid = "UDP checksum 0 to an IPv6 VIP in mode nat (RFC 8200 8.1: not translated)"
			return v
		}
	}
	if p.HopLimit() <= 1 {
		v.NoForward = fmt.Sprintf("hop limit expired: %d", p.HopLimit())
	}
	r.noICMP6(&v, b, p)
	v.Out6 = &Out6{VIP: vip, Src: p.Src(), Dst: p.Dst(), HopDec: true}
	return v
}

// judgeNATReply6 reads a valid IPv6 packet p from an IPv6 VIP's nat
// backend to no EIP or VIP (v: judgeIPv6's verdict, pass_ipv6): from the
// side the backend's route leaves by (the underlay in the harness) it may
// be a reply the edge translates back from the VIP, or the kernel's
// (pass_ipv6, or drop_spoof or a route's drop first: CounterMaybe); from
// the Internet side nothing may be transmitted (a forged reply).
func (r *Region) judgeNATReply6(side Side, b []byte, l Link, p IPv6, vip *VIP6, v Verdict) Verdict {
	v.CounterMaybe = true
	if side == Internet {
		v.Forbid = "not IPv4: a nat backend's address from the Internet side (a forged reply: dropped, or the kernel's)"
		return v
	}
	w := Verdict{IP6: &p, Fwd6: &p, VLAN: b[12 : l.L3-2], Trailer: b[p.End():], Counter: "pass_ipv6", CounterMaybe: true}
	if udpCsum0(p) && p.HopLimit() > 1 {
		// A reply of a known connection is not translated without a
		// checksum (RFC 8200 8.1): dropped, after its route and hop
		// limit; else the kernel's.
		w.CounterOr = "drop_ip6_udp_csum0"
		w.Forbid = "not IPv4: a nat backend's UDP with checksum 0 (dropped if a reply, else the kernel's)"
		return w
	}
	// The client a reply goes to got through the VIP path: from the
	// underlay side a unique-local one may (anti-spoofing is the
	// Internet side's), so only what no router forwards is refused.
	if d := noForwardDst6(p.Dst(), false); d != "" {
		w.Forbid = fmt.Sprintf("not IPv4: a nat backend's packet to %v, %s", p.Dst(), d)
		return w
	}
	if p.HopLimit() <= 1 {
		w.NoForward = fmt.Sprintf("hop limit expired: %d", p.HopLimit())
	}
	r.noICMP6(&w, b, p)
	w.Out6 = &Out6{VIP: vip, Reply: true, Src: p.Src(), Dst: p.Dst(), HopDec: true}
	return w
}

// checkVIP6Bare holds a bare IPv6 packet o transmitted (or handed to the
// kernel, hop false) for an IPv6 VIP's verdict: DNAT66 to one of the
// VIP's nat backends (the source kept, the destination port the
// backend's or kept), or, for a nat backend's reply, from a VIP that has
// that backend (the destination kept, the source port translated); an
// ICMPv6 error's quote may be translated; the rest as checkFwd6.
func (r *Region) checkVIP6Bare(v Verdict, o IPv6, hop bool) error {
	in, w := v.Fwd6, *v.Out6
	if len(o.Pkt) < 40 {
		return fmt.Errorf("IPv6 output of %d bytes", len(o.Pkt))
	}
	isErr := in.Proto == ProtoICMPv6 && in.FragOff == 0 && in.L4 < len(in.Pkt) && in.Pkt[in.L4] < 128
	// The ports a translation may change: an unfragmented packet's or a
	// first fragment's TCP or UDP header.
	hasPorts := in.FragOff == 0 && (in.Proto == ProtoTCP || in.Proto == ProtoUDP) && in.L4+4 <= len(in.Pkt) && len(o.Pkt) == len(in.Pkt)
	var dport, osport, odport uint16
	if hasPorts {
		dport = binary.BigEndian.Uint16(in.Pkt[in.L4+2:])
		osport, odport = binary.BigEndian.Uint16(o.Pkt[in.L4:]), binary.BigEndian.Uint16(o.Pkt[in.L4+2:])
	}
	if w.Reply {
		vip, ok := r.vip6Of(o.Src())
		if !ok || !vipHasNAT(vip, in.Src()) {
			return fmt.Errorf("a nat backend's packet %v -> %v transmitted from %v, no IPv6 VIP of that backend", in.Src(), in.Dst(), o.Src())
		}
		// The source port becomes the VIP's listener's (the oracle
		// does not model listeners: any).
		w.Src, w.SPort, w.Quote = o.Src(), osport, isErr
	} else {
		if len(w.VIP.NAT) == 0 {
			return fmt.Errorf("IPv6 to VIP %v forwarded bare to %v: the VIP has no nat backend", in.Dst(), o.Dst())
		}
		found := false
		for _, b := range w.VIP.NAT {
			if b.Addr == o.Dst() && (!hasPorts || b.Port == 0 && odport == dport || b.Port != 0 && odport == b.Port) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("IPv6 to VIP %v port %d translated to %v port %d: no nat backend of the VIP is that (%v)", in.Dst(), dport, o.Dst(), odport, w.VIP.NAT)
		}
		w.Dst, w.DPort, w.Quote = o.Dst(), odport, isErr
	}
	v.Out6 = &w
	return checkFwd6(v, o, hop && w.HopDec)
}

func vipHasNAT(v *VIP6, a netip.Addr) bool {
	for _, b := range v.NAT {
		if b.Addr == a {
			return true
		}
	}
	return false
}

// vipEncapOK says whether NVGRE to host in VSID vs is an encap backend of
// the VIP.
func vipEncapOK(v *VIP6, host netip.Addr, vs uint32) bool {
	for _, b := range v.Encap {
		if b.Host == host && b.VSID == vs {
			return true
		}
	}
	return false
}

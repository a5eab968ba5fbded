package dpfuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Side is where a frame arrives.
type Side uint8

const (
	Internet Side = iota // the edge's Internet-facing interfaces
	Underlay             // the underlay (the edge's, or a host's)
	Guest                // a guest's port on a host
)

func (s Side) String() string {
	return [...]string{"internet", "underlay", "guest"}[s]
}

// Binding is where an EIP lives: its host's underlay address and VSID.
type Binding struct {
	Host netip.Addr
	VSID uint32
}

// Flow is what a firewall rule matches (the Policy hook).
type Flow struct {
	Src, Dst     netip.Addr
	Proto        uint8
	SPort, DPort uint16 // 0 for later fragments and port-less protocols
	Fragment     bool   // a later fragment (offset > 0): no ports
}

// Policy is the hook for the firewall (issue 9 part 1): rules by source
// prefix, destination, protocol and port, evaluated for packets from the
// Internet side to an EIP or VIP right after anti-spoofing (as xdp_edge
// does: a spoofed packet is counted as spoofed whatever the rules say). A
// denied packet must never be transmitted, not even as an ICMP error about
// it. The harness configures the same rules in the data plane and in a
// Policy (Firewall); with no rules, Policy is nil.
type Policy interface {
	// Decide returns the firewall's verdict on f and the rule it counts.
	Decide(f Flow) FWDecision
}

// Region is what the oracle knows of the node under test and its region:
// the same facts the harness writes into the program's maps.
type Region struct {
	// NVGREEndpoint is the underlay address NVGRE is taken at;
	// NVGREEndpoint6 the IPv6 one (the edge's underlay6; not valid:
	// none). The oracle knows no host of the IPv6 underlay: NVGRE over
	// IPv6 to NVGREEndpoint6 is from an unknown source (eip6.go).
	NVGREEndpoint, NVGREEndpoint6 netip.Addr
	// ICMPSource is the source of the ICMP errors the node sends;
	// ICMPSource6 of its ICMPv6 errors (not valid: it sends none).
	ICMPSource, ICMPSource6 netip.Addr
	// EIPs and their bindings (IPv4 and IPv6 EIPs: eip6.go), VIPs (the
	// Internet-side destinations).
	EIPs map[netip.Addr]Binding
	VIPs map[netip.Addr]bool
	// VIP6s are the IPv6 VIPs (each in VIPs too) and what may come out
	// for their packets (vip6.go).
	VIP6s map[netip.Addr]VIP6
	// Own are the region's set prefixes, EIPs and VIPs; UnderlayNets the
	// hosts' and edges' underlay prefixes (docs/dataplane.md, ingress
	// anti-spoofing).
	Own, UnderlayNets []netip.Prefix
	// Policy, if not nil, is the firewall.
	Policy Policy
}

// Verdict is the oracle's reading of one input frame.
type Verdict struct {
	// Forbid: nothing may be transmitted for this frame (malformed,
	// spoofed, denied, ...): the reason.
	Forbid string
	// NoForward: the packet may not be forwarded (TTL expired, ARP): at
	// most an answer (an ICMP error, an ARP reply) may go back.
	NoForward string
	// NoICMP: no ICMP error may be sent about it (RFC 1812 4.3.2.7).
	NoICMP string
	// ARPRequest: an untagged ARP request for an IPv4 address (the only
	// ARP frame an answer may be sent for); ARPFor is the address asked.
	ARPRequest bool
	ARPFor     netip.Addr
	// NSRequest: an untagged ICMPv6 neighbor solicitation without
	// extension headers (the only one the edge may answer, with a
	// neighbor advertisement: bpf/lib/ndp.h); NSFor its target and NS
	// the solicitation.
	NSRequest bool
	NSFor     netip.Addr
	NS        *IPv6
	// IP is the input's (outer) IPv4 packet; Fwd the packet that would be
	// forwarded: IP, or the inner one of NVGRE to the node.
	IP, Fwd *IPv4
	// Tunnel is set for NVGRE to the node.
	Tunnel *NVGRE
	// Trailer is what follows the forwarded packet in the input frame
	// (Ethernet padding), which a frame forwarded without a tunnel keeps.
	Trailer []byte
	// VLAN is the input's VLAN tags as they were on the wire (empty when
	// untagged): an ICMP error goes back with the same tags.
	VLAN []byte
	// Counter, when set, is the counter the input must move (the
	// harness holds the counters only IPv6 moves, pass_ipv6 and
	// drop_ip6_*, to the verdicts' count exactly, and others to at
	// least it). CounterMaybe: the drop comes after a route lookup the
	// oracle does not model, which may drop the packet first under its
	// own reason (drop_fib, drop_too_big, ...): Counter or that one.
	Counter      string
	CounterMaybe bool
	// CounterOr, with CounterMaybe: another counter the input may move
	// instead (a nat backend's packet: the kernel's pass_ipv6, or a
	// reply's drop when its connection is known: vip6.go).
	CounterOr string
	// IP6 is the input's IPv6 packet when the frame is IPv6 and
	// forwarded or answered by the node (an IPv6 EIP's path); Fwd6 the
	// IPv6 packet that would be forwarded (IP6, or the inner one of
	// NVGRE), and Out6 how it must leave (eip6.go).
	IP6, Fwd6 *IPv6
	Out6      *Out6
	// Firewall is the Policy's decision, when the input reaches the
	// firewall (FirewallRan): well formed, from the Internet side, to an
	// EIP or VIP, not spoofed.
	Firewall    FWDecision
	FirewallRan bool
}

func (v Verdict) String() string {
	switch {
	case v.Forbid != "":
		return "forbidden: " + v.Forbid
	case v.NoForward != "":
		return "not to forward: " + v.NoForward
	}
	return "may be forwarded"
}

var linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")

// isPublic reports whether a is one of the region's EIPs or VIPs.
func (r *Region) isPublic(a netip.Addr) bool {
	_, eip := r.EIPs[a]
	return eip || r.VIPs[a]
}

// inRegion returns the class of an Internet-side source to an EIP or VIP
// that must be dropped as spoofed, or "".
func (r *Region) spoofClass(p IPv4) string {
	src, dst := p.Src(), p.Dst()
	_, eip := r.EIPs[dst]
	if !eip && !r.VIPs[dst] {
		return ""
	}
	switch {
	case src == dst:
		return "land attack: source is the destination"
	case Bogon(src):
		return "spoofed: non-routable source"
	}
	// The underlay first: a prefix in both classes counts as underlay.
	for _, p := range r.UnderlayNets {
		if p.Contains(src) {
			return "spoofed: underlay source " + p.String()
		}
	}
	for _, p := range r.Own {
		if p.Contains(src) {
			return "spoofed: the region's own source " + p.String()
		}
	}
	return ""
}

// firewall applies the Policy to a packet from the Internet side to an
// EIP or VIP, before anti-spoofing (edge_main's order: an allowed packet
// counts on its rule even when anti-spoofing then drops it).
func (r *Region) firewall(v *Verdict, p IPv4) {
	_, eip := r.EIPs[p.Dst()]
	if r.Policy == nil || (!eip && !r.VIPs[p.Dst()]) {
		return
	}
	f := Flow{Src: p.Src(), Dst: p.Dst(), Proto: p.Proto(), Fragment: p.FragOff() != 0}
	f.SPort, f.DPort = p.Ports()
	// A first fragment carries its L4 header: matched on its ports (or a
	// deny on a port would let a datagram split in two through).
	if p.MF() && p.FragOff() == 0 && (p.Proto() == ProtoTCP || p.Proto() == ProtoUDP) && len(p.L4()) >= 4 {
		f.SPort, f.DPort = binary.BigEndian.Uint16(p.L4()), binary.BigEndian.Uint16(p.L4()[2:])
	}
	v.Firewall, v.FirewallRan = r.Policy.Decide(f), true
	switch v.Firewall.Drop {
	case FWDeny:
		v.Forbid = "denied by the firewall: rule " + v.Firewall.Rule
	case FWPrivate:
		v.Forbid = "denied by the firewall (private destination): no allow rule matches"
	}
}

// judgeIP applies the rules every IPv4 packet meets, wherever it comes
// from: well formed, a routable source and destination, a TTL to forward
// with, and when an ICMP error about it is allowed.
func judgeIP(v *Verdict, p IPv4, hop Hop) {
	if err := L4Complete(p); err != nil {
		v.Forbid = "malformed: " + err.Error()
		return
	}
	if Martian(p.Src()) {
		v.Forbid = fmt.Sprintf("martian source: %v", p.Src())
		return
	}
	if Martian(p.Dst()) {
		v.Forbid = fmt.Sprintf("martian destination: %v", p.Dst())
		return
	}
	// A router forwards nothing with TTL <= 1; a host sends no datagram
	// with TTL 0 (RFC 1122 3.2.1.7).
	if (hop == RouterHop && p.TTL() <= 1) || p.TTL() == 0 {
		v.NoForward = fmt.Sprintf("TTL expired: %d", p.TTL())
	}
	switch {
	case p.FragOff() != 0:
		v.NoICMP = "a later fragment"
	case p.Proto() == ProtoICMP && ICMPError(p.L4()[0]):
		v.NoICMP = fmt.Sprintf("an ICMP error (type %d)", p.L4()[0])
	}
}

// JudgeEdge reads a frame arriving at the edge (xdp_edge) on side.
func (r *Region) JudgeEdge(side Side, b []byte) (v Verdict) {
	l, ok := ParseLink(b)
	if !ok {
		return Verdict{Forbid: "malformed: link header cut short"}
	}
	if l.Tags > 2 {
		return Verdict{Forbid: fmt.Sprintf("VLAN stack deeper than the edge parses: %d tags", l.Tags)}
	}
	switch l.EtherType {
	case EtherIPv4:
	case EtherIPv6:
		// Every side: the link-local check is the edge's; then the
		// IPv6 EIPs' path.
		return r.judgeEdge6(side, b, l)
	case EtherARP:
		v.NoForward = "ARP"
		v.NoICMP = "ARP"
		if l.Tags == 0 && len(b) >= 42 && bytes.Equal(b[14:22], []byte{0, 1, 8, 0, 6, 4, 0, 1}) {
			v.ARPRequest = true
			v.ARPFor = netip.AddrFrom4([4]byte(b[38:42]))
		}
		return v
	default:
		return Verdict{Forbid: fmt.Sprintf("not IPv4: ethertype %#04x", l.EtherType)}
	}
	p, err := ParseIPv4(b, l.L3)
	if err != nil {
		return Verdict{Forbid: "malformed: " + err.Error()}
	}
	v.IP, v.Fwd, v.Trailer, v.VLAN = &p, &p, b[p.End():], b[12:l.L3-2]
	if judgeIP(&v, p, RouterHop); v.Forbid != "" {
		return v
	}
	if p.Proto() != ProtoGRE || p.Dst() != r.NVGREEndpoint {
		if side == Internet {
			// The firewall, then anti-spoofing (edge_main's order).
			if r.firewall(&v, p); v.Forbid != "" {
				return v
			}
			if c := r.spoofClass(p); c != "" {
				v.Forbid = c
				return v
			}
		} else if r.isPublic(p.Dst()) && linkLocal4.Contains(p.Src()) {
			// RFC 3927 7: a router forwards no link-local source,
			// whichever side it came from.
			v.Forbid = "link-local source " + p.Src().String() + " from the underlay (RFC 3927 7)"
			return v
		}
		return v
	}
	// NVGRE to the edge: only from the underlay, well formed, from the
	// host its inner source is bound to.
	if side != Underlay {
		v.Forbid = "NVGRE to the edge from the Internet side"
		return v
	}
	n, err := ParseNVGRE(p)
	if err != nil {
		v.Forbid = "malformed NVGRE: " + err.Error()
		return v
	}
	v.Tunnel = &n
	if innerEther(b, n) == EtherIPv6 {
		r.judgeDecap6(&v, b, n)
		return v
	}
	inner, err := innerIPv4(b, n)
	if err != nil {
		v.Forbid = "malformed inner packet: " + err.Error()
		return v
	}
	v.Fwd, v.Trailer = &inner, nil
	v.NoForward, v.NoICMP = "", "inner packet of a tunnel: no ICMP error back into it"
	if judgeIP(&v, inner, RouterHop); v.Forbid != "" {
		v.Forbid = "inner packet: " + v.Forbid
		return v
	}
	if v.NoForward != "" {
		// The edge sends no ICMP error into a tunnel: nothing at all.
		v.Forbid = "inner " + v.NoForward
		return v
	}
	src := inner.Src()
	if bnd, ok := r.EIPs[src]; ok {
		if bnd.Host != p.Src() || bnd.VSID != n.VSID() {
			v.Forbid = fmt.Sprintf("spoofed: inner source %v is bound to %v VSID %d, sent by %v VSID %d", src, bnd.Host, bnd.VSID, p.Src(), n.VSID())
		}
		return v
	}
	if !r.VIPs[src] {
		v.Forbid = fmt.Sprintf("spoofed: inner source %v is neither an EIP nor a VIP", src)
	}
	return v
}

// innerEther is the ethertype of NVGRE n's inner frame.
func innerEther(b []byte, n NVGRE) uint16 { return binary.BigEndian.Uint16(b[n.Inner+12:]) }

// innerIPv4 is the IPv4 packet of NVGRE n's inner frame, which must lie
// inside the outer packet.
func innerIPv4(b []byte, n NVGRE) (IPv4, error) {
	end := n.Outer.End()
	if et := binary.BigEndian.Uint16(b[n.Inner+12:]); et != EtherIPv4 {
		return IPv4{}, fmt.Errorf("inner ethertype %#04x", et)
	}
	return ParseIPv4(b[:end], n.Inner+14)
}

// Kinds of transmitted frames CheckOutput tells apart.
const (
	OutForward = "forward"   // the packet (translated or not), TTL - 1
	OutEncap   = "encap"     // NVGRE carrying the packet
	OutICMP    = "icmp"      // an ICMP error about the packet
	OutARP     = "arp-reply" // an ARP reply
	OutNA      = "ndp-reply" // a neighbor advertisement answering a solicitation
)

// Hop says how a transmitted packet's TTL relates to the input's: a router
// hop (the edge) decrements it, a host (the agent) leaves it.
type Hop uint8

const (
	RouterHop Hop = iota
	HostHop
)

// CheckOutput holds a transmitted frame to the verdict on its input and to
// the shape every frame on the wire must have: untagged Ethernet (an ICMP
// error carries the input's VLAN tags back instead), then a
// well-formed IPv4 packet (valid header checksum, total length matching
// the frame, routable addresses, TTL above 0) and, for NVGRE, a
// well-formed encapsulation (DF, GRE K + 0x6558, an inner IPv4 packet ending
// the frame) around the forwarded packet; an ICMP error must be allowed for
// the input, come from the ICMP source, go to the input's source and quote
// the input; an ARP reply must answer an untagged request. It returns the
// kind of output.
func (r *Region) CheckOutput(v Verdict, hop Hop, out []byte) (string, error) {
	if v.Forbid != "" {
		return "", fmt.Errorf("transmitted, but the input must never be: %s", v.Forbid)
	}
	ol, ok := ParseLink(out)
	if !ok || len(out) < ethHdrLen {
		return "", fmt.Errorf("%d bytes: no Ethernet header", len(out))
	}
	tags := out[12 : ol.L3-2]
	if ol.Tags > 0 && !bytes.Equal(tags, v.VLAN) {
		return "", fmt.Errorf("transmitted with VLAN tags %x, the input had %x", tags, v.VLAN)
	}
	switch et := ol.EtherType; et {
	case EtherIPv4:
	case EtherIPv6:
		return r.checkOutput6(v, out, ol)
	case EtherARP:
		if ol.Tags > 0 {
			return "", errors.New("a tagged ARP frame transmitted")
		}
		return OutARP, checkARPReply(v, out)
	default:
		return "", fmt.Errorf("transmitted ethertype %#04x", et)
	}
	o, err := ParseIPv4(out, ol.L3)
	if err != nil {
		return "", fmt.Errorf("output: %v", err)
	}
	if v.Out6 != nil {
		return OutEncap, r.checkEncap6(v, out, ol, o)
	}
	if v.IP == nil {
		return "", errors.New("an IPv4 frame transmitted for an input that has none")
	}
	if Martian(o.Src()) || Martian(o.Dst()) || o.TTL() == 0 {
		return "", fmt.Errorf("output %v: martian address or TTL 0", o)
	}
	if err := L4Complete(o); err != nil {
		return "", fmt.Errorf("output: %v", err)
	}
	// ICMP error generated about the input.
	if o.Src() == r.ICMPSource && o.Proto() == ProtoICMP && len(o.L4()) >= 8 && ICMPError(o.L4()[0]) && o.Dst() == v.IP.Src() {
		if v.NoICMP != "" {
			return OutICMP, fmt.Errorf("ICMP error about %s", v.NoICMP)
		}
		if o.End() != len(out) {
			return OutICMP, fmt.Errorf("ICMP error of %d bytes in a frame of %d", len(o.Pkt), len(out)-ol.L3)
		}
		if Checksum(o.L4()) != 0 {
			return OutICMP, errors.New("ICMP checksum wrong")
		}
		q := o.L4()[8:]
		if len(q) < 20 || !bytes.HasPrefix(v.IP.Pkt, q) {
			return OutICMP, errors.New("the quote is not the start of the input packet")
		}
		return OutICMP, nil
	}
	if ol.Tags > 0 {
		return "", fmt.Errorf("forwarded with VLAN tags %x (only ICMP errors keep them)", tags)
	}
	if v.NoForward != "" || v.Fwd == nil {
		return "", fmt.Errorf("forwarded, but the input may not be: %s", v.NoForward)
	}
	want := v.Fwd.TTL()
	if hop == RouterHop {
		want--
	}
	fwd := o
	kind := OutForward
	// NVGRE the node built: from its endpoint, 42 bytes (outer IPv4, GRE
	// with key, inner Ethernet) longer than the packet it carries.
	if o.Proto() == ProtoGRE && o.Src() == r.NVGREEndpoint && len(o.Pkt) == len(v.Fwd.Pkt)+20+nvgreExtra {
		// Encapsulated by the node.
		kind = OutEncap
		if !o.DF() || o.Fragmented() {
			return kind, fmt.Errorf("outer frag_off %#04x: NVGRE leaves unfragmented with DF", o.FragWord())
		}
		n, err := ParseNVGRE(o)
		if err != nil {
			return kind, err
		}
		in, err := innerIPv4(out, n)
		if err != nil {
			return kind, fmt.Errorf("inner: %v", err)
		}
		if in.End() != o.End() || o.End() != len(out) {
			return kind, fmt.Errorf("inner packet ends at %d, outer at %d, frame at %d", in.End(), o.End(), len(out))
		}
		if out[ethHdrLen+1] != in.Pkt[1] {
			return kind, fmt.Errorf("outer TOS %#02x, inner %#02x", out[ethHdrLen+1], in.Pkt[1])
		}
		fwd = in
	} else if !bytes.Equal(out[o.End():], v.Trailer) {
		return kind, fmt.Errorf("%d bytes after the packet, not the input's padding", len(out)-o.End())
	}
	if fwd.TTL() != want {
		return kind, fmt.Errorf("TTL %d transmitted as %d", v.Fwd.TTL(), fwd.TTL())
	}
	if len(fwd.Pkt) != len(v.Fwd.Pkt) || fwd.HL != v.Fwd.HL {
		return kind, fmt.Errorf("packet of %d bytes (header %d) transmitted as %d (%d)", len(v.Fwd.Pkt), v.Fwd.HL, len(fwd.Pkt), fwd.HL)
	}
	if fwd.Proto() != v.Fwd.Proto() || fwd.FragWord() != v.Fwd.FragWord() {
		return kind, fmt.Errorf("protocol or fragment field changed: %v -> %v", v.Fwd, fwd)
	}
	if Martian(fwd.Src()) || Martian(fwd.Dst()) {
		return kind, fmt.Errorf("forwarded %v: martian address", fwd)
	}
	return kind, nil
}

func checkARPReply(v Verdict, out []byte) error {
	if !v.ARPRequest {
		return errors.New("ARP transmitted, but the input is no untagged ARP request")
	}
	if len(out) < 42 || !bytes.Equal(out[14:22], []byte{0, 1, 8, 0, 6, 4, 0, 2}) {
		return fmt.Errorf("ARP output is no reply for IPv4 over Ethernet")
	}
	if spa := netip.AddrFrom4([4]byte(out[28:32])); spa != v.ARPFor {
		return fmt.Errorf("ARP reply for %v, the request asked for %v", spa, v.ARPFor)
	}
	if !bytes.Equal(out[0:6], out[32:38]) {
		return errors.New("ARP reply not sent to its target's hardware address")
	}
	return nil
}

// Host is what the oracle knows of a host running the agent.
type Host struct {
	// Underlay is the host's underlay address (NVGRE's endpoint and
	// source); Edges the edges it takes NVGRE from.
	Underlay netip.Addr
	Edges    map[netip.Addr]bool
	// EIPs hosted here (their VSID and guest address), VIPs served here
	// (their VSID), and the addresses each guest port may send from.
	EIPs      map[netip.Addr]Binding // Host: the guest's private address
	VIPs      map[netip.Addr]uint32
	PortAddrs map[netip.Addr]bool
}

// JudgeAgent reads a frame arriving at a host's agent: NVGRE from the
// underlay (xdp_agent_underlay) or a guest's frame (xdp_agent_guest).
// The agent is a host, not a router hop: TTLs are left as they are.
func (h *Host) JudgeAgent(side Side, b []byte) (v Verdict) {
	l, ok := ParseLink(b)
	if !ok {
		return Verdict{Forbid: "malformed: link header cut short"}
	}
	if l.Tags > 2 {
		return Verdict{Forbid: fmt.Sprintf("VLAN stack deeper than the agent parses: %d tags", l.Tags)}
	}
	if l.EtherType == EtherIPv6 {
		// The host's own IPv6 on the underlay; a guest's translated if
		// it has an IPv6 EIP (eip6.go).
		if side == Guest {
			return h.judgeGuest6(b, l)
		}
		return judgeIPv6(b, l.L3, false)
	}
	if l.EtherType != EtherIPv4 {
		return Verdict{Forbid: fmt.Sprintf("not IPv4: ethertype %#04x", l.EtherType)}
	}
	p, err := ParseIPv4(b, l.L3)
	if err != nil {
		return Verdict{Forbid: "malformed: " + err.Error()}
	}
	v.IP, v.Fwd, v.Trailer, v.VLAN = &p, &p, b[p.End():], b[12:l.L3-2]
	if judgeIP(&v, p, HostHop); v.Forbid != "" {
		return v
	}
	if side == Guest {
		if !h.PortAddrs[p.Src()] {
			v.Forbid = fmt.Sprintf("spoofed: source %v is no address of the port", p.Src())
		}
		return v
	}
	if p.Proto() != ProtoGRE || p.Dst() != h.Underlay {
		v.Forbid = "not NVGRE to this host: the kernel's"
		return v
	}
	if !h.Edges[p.Src()] {
		v.Forbid = fmt.Sprintf("spoofed: NVGRE from %v, no edge", p.Src())
		return v
	}
	n, err := ParseNVGRE(p)
	if err != nil {
		v.Forbid = "malformed NVGRE: " + err.Error()
		return v
	}
	v.Tunnel = &n
	if innerEther(b, n) == EtherIPv6 {
		h.judgeFromEdge6(&v, b, n)
		return v
	}
	inner, err := innerIPv4(b, n)
	if err != nil {
		v.Forbid = "malformed inner packet: " + err.Error()
		return v
	}
	// The outer packet ends here (its TTL is no matter: RFC 1122
	// 3.2.1.7); the inner one is delivered.
	v.Fwd, v.Trailer, v.NoForward = &inner, nil, ""
	if judgeIP(&v, inner, HostHop); v.Forbid != "" {
		v.Forbid = "inner packet: " + v.Forbid
		return v
	}
	dst := inner.Dst()
	if e, ok := h.EIPs[dst]; ok {
		if e.VSID != n.VSID() {
			v.Forbid = fmt.Sprintf("wrong VSID: EIP %v is in VSID %d, the tunnel's is %d", dst, e.VSID, n.VSID())
		}
		return v
	}
	if vs, ok := h.VIPs[dst]; !ok || vs != n.VSID() {
		v.Forbid = fmt.Sprintf("unknown destination: inner destination %v is no EIP or VIP of this host in VSID %d", dst, n.VSID())
	}
	return v
}

package model

import (
	"fmt"
	"net/netip"
	"sort"
)

// Replies of backends.
//
//   - nat: the edge translates a backend's replies back to the VIP by the
//     backend alone, without per-connection state: lb_nat_rev maps
//     (backend address, backend port, protocol) to (VIP, VIP port); a
//     keep-port backend of an any-port listener is entered with port 0,
//     the fallback for ports with no entry of their own.
//   - encap: the host agent translates each reply by its own flow (the
//     agent_flows entry written when the flow came in, bpf/lib/agentflow.h),
//     so a guest's port may answer for any number of VIP ports, VIPs and
//     its EIP at once: encap services claim nothing here (issue 7,
//     section 2).
//
// So in nat mode one backend port of one address can answer for one VIP
// port only: claimsOf says which backend ports each listener of a service
// uses, and Validate (within a service) and State.Put (across services,
// with the State's replies index) refuse two different translations of
// the same port.

// replyKey is whose replies: a nat backend's address or an encap backend's
// guest, over a protocol.
type replyKey struct {
	addr        netip.Addr // nat
	host, guest string     // encap
	proto       string
}

func (k replyKey) String() string {
	if k.host != "" {
		return "guest " + k.host + "/" + k.guest
	}
	return k.addr.String()
}

// replyClaim is the backend ports of a replyKey that one listener's use of
// one backend translates back to the VIP.
type replyClaim struct {
	key    int32  // index into replyClaims.keys
	lo, hi uint16 // the backend ports (0-65535 for any)
	// vport: a backend with a fixed port on a single-port listener of
	// another port answers from lo for VIP port vport. 0: the replies keep
	// their port (VIP port = backend port).
	vport uint16
	// any: a keep-port backend of an any-port listener, entered as the
	// data plane's port-0 fallback: every port of the key.
	any bool
	// Where it comes from: indexes into the service's listeners, pools
	// and the pool's backends.
	listener, pool, backend int32
}

// replyClaims are a service's claims and the keys they refer to (claims
// are many, listeners x backends, so they hold an index, not the key).
type replyClaims struct {
	keys   []replyKey
	claims []replyClaim
}

// wellFormed: a listener whose protocol and ports Validate accepts.
func (l Listener) wellFormed() bool {
	return (l.Protocol == ProtoTCP || l.Protocol == ProtoUDP) &&
		!(l.Port == 0 && l.PortEnd != 0) && !(l.PortEnd != 0 && l.PortEnd < l.Port)
}

// several reports whether the listener covers more than one port.
func (l Listener) several() bool { return l.AnyPort() || l.Last() != l.Port }

// claimsOf lists the service's claims in the order of its listeners
// and pools. It skips what Validate refuses on its own (malformed
// listeners, missing pools or backend addresses, fixed ports on listeners
// of several ports), so it can run on an invalid service.
func claimsOf(s *Service) replyClaims {
	var rc replyClaims
	if s.Mode != ModeNAT {
		return rc // encap replies go by flow (see above)
	}
	// The key of each pool's backends (-1: none), computed once.
	ids := map[replyKey]int32{}
	keyOf := make([][]int32, len(s.Pools))
	n := 0
	for li := range s.Listeners {
		l := &s.Listeners[li]
		if !l.wellFormed() {
			continue
		}
		p, pi := s.Pool(l.Pool)
		if p == nil {
			continue
		}
		n += len(p.Backends)
		if keyOf[pi] != nil {
			continue
		}
		keyOf[pi] = make([]int32, len(p.Backends))
		for bi := range p.Backends {
			b := &p.Backends[bi]
			var k replyKey
			switch {
			case s.Mode == ModeNAT && b.Address.IsValid():
				k.addr = b.Address
			case s.Mode == ModeEncap && b.Host != "" && b.Guest != "":
				k.host, k.guest = b.Host, b.Guest
			default:
				keyOf[pi][bi] = -1
				continue
			}
			// Both protocols: the listener picks one (tcp at id, udp at id+1).
			id, ok := ids[k]
			if !ok {
				id = int32(len(rc.keys))
				ids[k] = id
				k.proto = ProtoTCP
				rc.keys = append(rc.keys, k)
				k.proto = ProtoUDP
				rc.keys = append(rc.keys, k)
			}
			keyOf[pi][bi] = id
		}
	}
	rc.claims = make([]replyClaim, 0, n)
	for li := range s.Listeners {
		l := &s.Listeners[li]
		if !l.wellFormed() {
			continue
		}
		p, pi := s.Pool(l.Pool)
		if p == nil {
			continue
		}
		udp := int32(0)
		if l.Protocol == ProtoUDP {
			udp = 1
		}
		for bi := range p.Backends {
			b := &p.Backends[bi]
			id := keyOf[pi][bi]
			if id < 0 {
				continue
			}
			c := replyClaim{key: id + udp, listener: int32(li), pool: int32(pi), backend: int32(bi)}
			switch {
			case b.Port != 0 && l.several():
				continue // refused by Validate
			case b.Port != 0:
				c.lo, c.hi = b.Port, b.Port
				if b.Port != l.Port {
					c.vport = l.Port
				}
			case l.AnyPort():
				c.lo, c.hi, c.any = 0, 65535, true
			default:
				c.lo, c.hi = l.Port, l.Last()
			}
			rc.claims = append(rc.claims, c)
		}
	}
	return rc
}

// field names the claim's backend in the service.
func (c replyClaim) field() string { return fmt.Sprintf("pools[%d].backends[%d]", c.pool, c.backend) }

// origin names the listener, pool and backend of a claim.
func (c replyClaim) origin(s *Service) string {
	p := &s.Pools[c.pool]
	return fmt.Sprintf("listeners[%d] (%s) -> pool %s, backend %s", c.listener, s.Listeners[c.listener], p.Name, p.Backends[c.backend].Key())
}

// target says where the claim sends the replies from backend port port.
func (c replyClaim) target(vip netip.Addr, port uint16) string {
	switch {
	case c.any && port == 0:
		return fmt.Sprintf("%v (the port kept)", vip)
	case c.vport != 0:
		return netip.AddrPortFrom(vip, c.vport).String()
	}
	return netip.AddrPortFrom(vip, port).String()
}

// replier says whose replies, in messages: port 0 for every port.
func replier(k replyKey, port uint16) string {
	if port == 0 {
		return fmt.Sprintf("replies from %s over %s", k, k.proto)
	}
	return fmt.Sprintf("replies from %s %s port %d", k, k.proto, port)
}

// what names the kind of backend a key is, in messages.
func what(k replyKey) string {
	if k.host != "" {
		return "guest"
	}
	return "address"
}

// anyNote explains an any-port listener's claim on k, when one is
// involved.
func anyNote(k replyKey, claims ...replyClaim) string {
	for _, c := range claims {
		if c.any {
			return " (a keep-port backend of an any-port listener claims every port of its " + what(k) + ")"
		}
	}
	return ""
}

// validateReplies refuses two listeners of the service that would need
// different translations for the replies of the same backend port: a
// backend with a fixed port answering for a VIP port of another number,
// while another listener of the service sends the same address or guest
// to that port (with a fixed port, keeping the port, or through the
// any-port listener, for the ports no specific listener takes).
// Translations that agree are fine: the same backend through several
// listeners that keep the port, or a fixed port equal to its listener's.
func (s *Service) validateReplies(es *Errors) {
	rc := claimsOf(s)
	if len(rc.claims) == 0 {
		return
	}
	// The ports specific listeners take, per protocol: the any-port
	// listener sends the others only.
	specific := map[string][]portSpan{}
	for _, l := range s.Listeners {
		if l.wellFormed() && !l.AnyPort() {
			specific[l.Protocol] = append(specific[l.Protocol], portSpan{l.Port, l.Last()})
		}
	}
	for p := range specific {
		specific[p] = mergeSpans(specific[p])
	}
	type group struct {
		idents []replyClaim // replies keep the port, specific listeners
		wild   *replyClaim  // the any-port listener's
		fixed  []replyClaim // vport != 0
	}
	groups := make([]group, len(rc.keys))
	for i, c := range rc.claims {
		g := &groups[c.key]
		switch {
		case c.vport != 0:
			g.fixed = append(g.fixed, c)
		case c.any:
			if g.wild == nil {
				g.wild = &rc.claims[i]
			}
		default:
			g.idents = append(g.idents, c)
		}
	}
	reported := map[[2]int32]bool{}
	for ki := range groups {
		g, k := &groups[ki], rc.keys[ki]
		if len(g.fixed) == 0 {
			continue
		}
		sort.SliceStable(g.idents, func(a, b int) bool { return g.idents[a].lo < g.idents[b].lo })
		fixedAt := map[uint16]replyClaim{}
		for _, c := range g.fixed {
			port := c.lo
			var other *replyClaim
			if o, dup := fixedAt[port]; dup {
				if o.vport != c.vport {
					other = &o
				}
			} else {
				fixedAt[port] = c
				// Specific listeners of one protocol do not overlap, so
				// neither do the idents of a key.
				i := sort.Search(len(g.idents), func(i int) bool { return g.idents[i].hi >= port })
				if i < len(g.idents) && g.idents[i].lo <= port {
					other = &g.idents[i]
				} else if g.wild != nil && !spansHold(specific[k.proto], port) {
					other = g.wild
				}
			}
			if other == nil || reported[[2]int32{c.pool, c.backend}] {
				continue
			}
			reported[[2]int32{c.pool, c.backend}] = true
			es.add(c.field(), "%s would have to leave from %s for %s, and from %s for %s: a backend port answers for one VIP port only (replies are translated back by the backend's %s, port and protocol alone)",
				replier(k, port), other.target(s.VIP, port), other.origin(s), c.target(s.VIP, port), c.origin(s), what(k))
		}
	}
}

// portSpan is a range of ports, lo <= hi.
type portSpan struct{ lo, hi uint16 }

// mergeSpans sorts spans and merges those that overlap or touch.
func mergeSpans(sp []portSpan) []portSpan {
	sort.Slice(sp, func(a, b int) bool { return sp[a].lo < sp[b].lo })
	out := sp[:0]
	for _, x := range sp {
		if n := len(out); n > 0 && uint32(x.lo) <= uint32(out[n-1].hi)+1 {
			out[n-1].hi = max(out[n-1].hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

// spansHold reports whether sorted, merged spans hold a port.
func spansHold(sp []portSpan, port uint16) bool { return spansMeet(sp, port, port) }

// spansMeet reports whether sorted, merged spans hold a port of lo-hi.
func spansMeet(sp []portSpan, lo, hi uint16) bool {
	i := sort.Search(len(sp), func(i int) bool { return sp[i].hi >= lo })
	return i < len(sp) && sp[i].lo <= hi
}

// replySpans is what the State indexes of a service: per key, the backend
// ports its listeners claim, sorted and merged (0-65535 for an any-port
// listener's keep-port backend).
func replySpans(v *Service) map[replyKey][]portSpan {
	rc := claimsOf(v)
	spans := make([][]portSpan, len(rc.keys))
	for _, c := range rc.claims {
		spans[c.key] = append(spans[c.key], portSpan{c.lo, c.hi})
	}
	out := make(map[replyKey][]portSpan, len(spans))
	for i, sp := range spans {
		if len(sp) > 0 {
			out[rc.keys[i]] = mergeSpans(sp)
		}
	}
	return out
}

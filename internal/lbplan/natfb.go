package lbplan

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/model"
)

// NATBackendsMax is the size of the reply path's stateless fallback map
// (LB_NAT_BACKENDS_MAX, lb_nat_backends), per family: IPv6 backends'
// keys are in lb_nat_backends6, which holds as many (and the IPv6 nat
// backend slots' addresses beside them).
const NATBackendsMax = 65536

// NATBackend is a nat-mode backend as its replies leave it: address, port
// and IP protocol (the key of lb_nat_backends).
type NATBackend struct {
	Addr  netip.Addr
	Port  uint16
	Proto uint8
}

// natBackends computes the reply path's stateless fallback: every nat
// backend (address, port, protocol) whose replies can only be for one
// VIP and port, with them. The edge that gets a backend's SYN-ACK before
// the connection's reverse entry (the SYN went to another member of the
// set; connection sync lags a few ms) translates by it instead of
// dropping the reply. TCP only: the data plane uses it for SYN-ACKs
// alone (a backend's own datagrams must leave untranslated, and nothing
// tells a UDP reply from them).
//
// Only single-port listeners give one: a range or any-port listener
// leaves the VIP port a reply must leave with to the connection (the
// client's destination port), so
//   - a backend with its own port behind a range or any-port listener
//     makes that (address, port, protocol) ambiguous;
//   - a backend with the listener's port ("same as the client's") behind
//     one makes every port of the range (or every port) of that address
//     and protocol ambiguous.
//
// A key of two VIPs or two ports is ambiguous too. Ambiguous keys are
// left out (the reply waits for the synced entry, as before), and so are
// keys over limit (NATBackendsMax, or the edge's --backend-max: in key
// order, per family); left is how many. IPv6 VIPs' nat backends give
// keys by the same rule (an IPv6 backend, lb_nat_backends6).
func natBackends(p *Plan, limit int) (map[NATBackend]netip.AddrPort, int) {
	type ap struct {
		addr  netip.Addr
		proto uint8
	}
	type span struct{ lo, hi uint16 }
	cand := map[NATBackend]map[netip.AddrPort]bool{}
	poison := map[NATBackend]bool{}
	wild := map[ap][]span{}
	for l, id := range p.Listeners {
		pl := p.Pool(id)
		if pl == nil || l.Proto != protoNum[model.ProtoTCP] {
			continue
		}
		for _, b := range pl.Backends {
			t := b.Target
			// A backend of the VIP's family (model.Validate refuses
			// another): IPv4 keys in lb_nat_backends, IPv6 keys in
			// lb_nat_backends6.
			if t.Mode != ModeNAT || !t.Addr.IsValid() || t.Addr.Is4() != l.VIP.Is4() {
				continue
			}
			switch {
			case l.Port != 0 && !l.IsRange():
				k := NATBackend{Addr: t.Addr, Port: cmp.Or(t.Port, l.Port), Proto: l.Proto}
				if cand[k] == nil {
					cand[k] = map[netip.AddrPort]bool{}
				}
				cand[k][netip.AddrPortFrom(l.VIP, l.Port)] = true
			case t.Port != 0:
				poison[NATBackend{Addr: t.Addr, Port: t.Port, Proto: l.Proto}] = true
			case l.Port == 0:
				wild[ap{t.Addr, l.Proto}] = append(wild[ap{t.Addr, l.Proto}], span{0, 65535})
			default:
				wild[ap{t.Addr, l.Proto}] = append(wild[ap{t.Addr, l.Proto}], span{l.Port, l.Last})
			}
		}
	}
	var keep []NATBackend
	left := len(poison)
	for k, vs := range cand {
		if poison[k] {
			continue // counted with poison
		}
		if len(vs) != 1 || slices.ContainsFunc(wild[ap{k.Addr, k.Proto}], func(s span) bool { return k.Port >= s.lo && k.Port <= s.hi }) {
			left++
			continue
		}
		keep = append(keep, k)
	}
	for _, ss := range wild {
		left += len(ss) // a (backend, listener) pair no key can stand for
	}
	slices.SortFunc(keep, func(a, b NATBackend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	out := make(map[NATBackend]netip.AddrPort, len(keep))
	n4, n6 := 0, 0 // each family's map holds limit keys
	for _, k := range keep {
		n := &n4
		if k.Addr.Is6() {
			n = &n6
		}
		if *n == limit {
			left++
			continue
		}
		*n++
		for v := range cand[k] {
			out[k] = v
		}
	}
	return out, left
}

package lbplan

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/maglev"
)

// ErrNoListener: no listener takes the flow; the edge passes such packets
// to its kernel.
var ErrNoListener = errors.New("no listener: the edge passes such packets to its kernel")

// Choice is where a new flow goes.
type Choice struct {
	Listener Listener
	Pool     *Pool
	Hash     uint32 // flowhash.Hash4 (an IPv6 VIP's flow: Hash6) with the plan's seed
	Slot     uint64 // Hash % M
	Backend  Backend
	// FirstChoice is the slot's backend before failures were applied,
	// when it differs (it is down).
	FirstChoice string
}

// Lookup says where a new flow goes, as the edge's data plane decides:
// the exact-port listener, else the port range holding the port, else the
// any-port listener of the destination and protocol; that pool's table
// slot of the flow hash. (An established flow stays on the backend in the
// edge's connection table.)
func (p *Plan) Lookup(t flowhash.Tuple) (*Choice, error) {
	l, ok := p.listenerFor(t.Dst, t.Proto, t.DstPort)
	if !ok {
		return nil, fmt.Errorf("%v protocol %d port %d: %w", t.Dst, t.Proto, t.DstPort, ErrNoListener)
	}
	pl := p.Pool(p.Listeners[l])
	if pl == nil {
		return nil, fmt.Errorf("listener %+v names pool %q, which the plan does not have", l, p.Listeners[l])
	}
	var hash uint32
	if t.Dst.Is6() {
		hash = flowhash.Hash6(t, p.Seed) // flow_hash6, as the edge's lb_decide6
	} else {
		hash = flowhash.Hash4(t, p.Seed)
	}
	c := &Choice{Listener: l, Pool: pl, Hash: hash, Slot: uint64(hash) % pl.M}
	b, ok := pl.Table.Lookup(hash)
	if !ok {
		return c, fmt.Errorf("pool %s of service %s has no backend to send the flow to (all drained or down)", pl.Name, pl.Service)
	}
	c.Backend = backendOf(pl, b)
	if first, ok := pl.Built.Lookup(hash); ok && first.Key != b.Key {
		c.FirstChoice = first.Key
	}
	return c, nil
}

func backendOf(pl *Pool, b maglev.Backend) Backend {
	for _, x := range pl.Backends {
		if x.Spec.Key() == b.Key {
			return x
		}
	}
	return Backend{Weight: b.Weight}
}

func (p *Plan) listenerFor(vip netip.Addr, proto uint8, port uint16) (Listener, bool) {
	l := Listener{VIP: vip, Proto: proto, Port: port}
	if _, ok := p.Listeners[l]; ok {
		return l, true
	}
	for x := range p.Listeners {
		if x.VIP == vip && x.Proto == proto && x.IsRange() && x.Covers(port) {
			return x, true
		}
	}
	l.Port = 0
	_, ok := p.Listeners[l]
	return l, ok
}

// String writes the listener as the CLI reads it: "tcp:80",
// "tcp:8000-8100", "udp:any".
func (l Listener) String() string {
	proto := fmt.Sprint(l.Proto)
	for name, n := range protoNum {
		if n == l.Proto {
			proto = name
		}
	}
	switch {
	case l.Port == 0:
		return proto + ":any"
	case l.IsRange():
		return fmt.Sprintf("%s:%d-%d", proto, l.Port, l.Last)
	}
	return fmt.Sprintf("%s:%d", proto, l.Port)
}

// ServicePools lists the pools of one service in the plan.
func (p *Plan) ServicePools(service string) []*Pool {
	var out []*Pool
	for _, pl := range p.Pools {
		if pl.Service == service {
			out = append(out, pl)
		}
	}
	return out
}

// Package dptest is the test bed for running the data-plane programs with
// BPF_PROG_TEST_RUN: a namespace with the edge's (or a host's) interfaces,
// addresses, routes and permanent neighbours, so bpf_fib_lookup inside the
// program resolves next hops exactly as on a real node, with fixed MACs for
// byte-exact expectations.
package dptest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netlab"
)

// Addresses and MACs of the test bed (RFC 2544 benchmarking and RFC 5737
// documentation ranges).
const (
	ExtDev      = "ext0" // Internet side of the node under test
	ExtMAC      = "02:aa:00:00:00:01"
	RtrMAC      = "02:aa:00:00:00:02" // upstream router
	ExtAddr     = "198.18.100.1"
	RtrAddr     = "198.18.100.0"
	UlDev       = "ul0" // underlay side
	UlMAC       = "02:bb:00:00:00:01"
	FabMAC      = "02:bb:00:00:00:02" // underlay router
	UlAddr      = "198.18.0.1"
	FabAddr     = "198.18.0.254"
	DeadGW      = "198.18.0.253"    // gateway with no neighbour entry
	NoNeighNet  = "198.19.250.0/24" // via DeadGW on the underlay
	DeadExtGW   = "198.18.101.254"  // on the Internet side, never resolved
	NoNeighInet = "198.19.249.0/24" // via DeadExtGW
	HoleNet     = "198.19.251.0/24"
	GuestDev    = "g1" // host side of a guest link (agent bed)
	GuestMAC    = "02:cc:00:00:00:01"
	VMMAC       = "02:cc:00:00:00:02" // the guest itself
	GuestGW     = "198.19.21.0"
	GuestAddr   = "198.19.21.1"
)

// Env is a namespace holding the node under test and one holding its peers.
type Env struct {
	Node *netlab.Node
	Peer *netlab.Node
}

var seq atomic.Uint32

// New builds the test bed. The node has ext0 (to the router, default route),
// ul0 (to the underlay router, 198.18.0.0/15 and a guest link g1, all at
// MTU 1500; forwarding on.
func New() (*Env, error) {
	sweepOnce.Do(sweepDead)
	id := seq.Add(1)
	base := fmt.Sprintf("azgt-%d-%d", os.Getpid()%100000, id)
	node, err := netlab.NewNode(base + "n")
	if err != nil {
		return nil, err
	}
	peer, err := netlab.NewNode(base + "p")
	if err != nil {
		node.Delete()
		return nil, err
	}
	e := &Env{Node: node, Peer: peer}
	if err := e.build(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) build() error {
	n, p := e.Node, e.Peer
	steps := []func() error{
		func() error {
			return netlab.Veth(netlab.End{Node: n, Dev: ExtDev, MAC: ExtMAC}, netlab.End{Node: p, Dev: "rtr", MAC: RtrMAC}, 1500)
		},
		func() error {
			return netlab.Veth(netlab.End{Node: n, Dev: UlDev, MAC: UlMAC}, netlab.End{Node: p, Dev: "fab", MAC: FabMAC}, 1500)
		},
		func() error {
			return netlab.Veth(netlab.End{Node: n, Dev: GuestDev, MAC: GuestMAC}, netlab.End{Node: p, Dev: "vm", MAC: VMMAC}, 1500)
		},
		func() error { return n.Addr(ExtDev, ExtAddr+"/31") },
		func() error { return n.Addr(ExtDev, "198.18.101.1/24") },
		func() error { return n.Addr(UlDev, UlAddr+"/24") },
		func() error { return n.Addr(GuestDev, GuestGW+"/31") },
		func() error { return n.Route("default", RtrAddr, ExtDev) },
		func() error { return n.Route("198.18.0.0/15", FabAddr, UlDev) },
		func() error { return n.Route(NoNeighNet, DeadGW, UlDev) },
		func() error { return n.Route(NoNeighInet, DeadExtGW, ExtDev) },
		func() error { return n.Blackhole(HoleNet) },
		func() error { return n.Neigh(ExtDev, RtrAddr, RtrMAC) },
		func() error { return n.Neigh(UlDev, FabAddr, FabMAC) },
		func() error { return n.Neigh(GuestDev, GuestAddr, VMMAC) },
		n.Forwarding,
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// Close removes both namespaces and everything in them.
func (e *Env) Close() {
	if e.Node != nil {
		e.Node.Delete()
	}
	if e.Peer != nil {
		e.Peer.Delete()
	}
}

// xdpMd mirrors struct xdp_md for BPF_PROG_TEST_RUN's context.
type xdpMd struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// XDPContext is the context of a run of an n-byte frame arriving on the
// interface ifindex (for callers that run a program themselves, many times
// in one Node.Do).
func XDPContext(n, ifindex int) any {
	return xdpMd{DataEnd: uint32(n), IngressIfindex: uint32(ifindex)}
}

// Result of one program run.
type Result struct {
	Action uint32
	Out    []byte
}

// Run runs prog once on data as if it arrived on dev of the node.
func (e *Env) Run(prog *ebpf.Program, dev string, data []byte) (Result, error) {
	idx, err := e.Node.Ifindex(dev)
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = e.Node.Do(func() error {
		restore, err := pinFirstCPU()
		if err != nil {
			return err
		}
		defer restore()
		opts := &ebpf.RunOptions{
			Data:    data,
			DataOut: make([]byte, len(data)+512),
			Context: xdpMd{DataEnd: uint32(len(data)), IngressIfindex: uint32(idx)},
		}
		ret, err := prog.Run(opts)
		if err != nil {
			return err
		}
		res = Result{Action: ret, Out: opts.DataOut}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("BPF_PROG_TEST_RUN: %w", err)
	}
	return res, nil
}

// pinFirstCPU pins the calling thread (locked by netlab's Do) to the first
// CPU this process may use and returns how to undo it. Always the same CPU:
// per-CPU state (counters, the ICMP token bucket, the next-hop cache, the
// bench programs' run counter) then carries from run to run, which the
// fixtures and the benchmarks' distinct flows rely on.
func pinFirstCPU() (func(), error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("CPU affinity: %w", err)
	}
	first := -1
	for c := 0; c < 1024; c++ {
		if old.IsSet(c) {
			first = c
			break
		}
	}
	if first < 0 {
		return nil, errors.New("CPU affinity: no CPU allowed")
	}
	var one unix.CPUSet
	one.Set(first)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return nil, fmt.Errorf("pin to CPU %d: %w", first, err)
	}
	return func() { unix.SchedSetaffinity(0, &old) }, nil
}

// MustMAC parses a MAC constant.
func MustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// The IPv6 side of the bed (Env.InternetIPv6): the Internet side's
// segment with its router, an unresolved gateway, a blackhole, a route
// with a small MTU, and the underlay's IPv6 with its router.
const (
	ExtAddr6     = "2001:db8:100::1"
	RtrAddr6     = "2001:db8:100::ff"   // the upstream router (the IPv6 default route), resolved
	DeadExtGW6   = "2001:db8:100::fe"   // on the Internet side, never resolved
	NoNeighInet6 = "2001:db8:249::/48"  // via DeadExtGW6
	HoleNet6     = "2001:db8:251::/48"  // blackhole
	SmallMTUNet6 = "2001:db8:1280::/48" // via RtrAddr6 with MTU SmallMTU6 (locked: bpf_fib_lookup reads an IPv6 route's MTU only then)
	SmallMTU6    = 1280
	UlAddr6      = "2001:db8:ff::1"    // the underlay's IPv6 (on UlDev)
	FabAddr6     = "2001:db8:ff::fe"   // the underlay router, resolved
	DeadGW6      = "2001:db8:ff::fd"   // on the underlay, never resolved
	NoNeighNet6  = "2001:db8:250::/48" // via DeadGW6 on the underlay
)

// InternetIPv6 gives the node IPv6 routing on both sides, for the edge's
// IPv6 return path: IPv6 forwarding on, ExtAddr6/64 on ExtDev with the
// default route via RtrAddr6 (neighbour RtrMAC), NoNeighInet6 via
// DeadExtGW6, HoleNet6 a blackhole, SmallMTUNet6 via RtrAddr6 with MTU
// SmallMTU6 (locked, "mtu lock": an IPv6 route's unlocked MTU metric is
// not what the FIB lookup answers, the device's is); UlAddr6/64 on UlDev with FabAddr6 (FabMAC) resolved and
// NoNeighNet6 via DeadGW6.
func (e *Env) InternetIPv6() error {
	n := e.Node
	if err := n.IPv6(true); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return n.Addr(ExtDev, ExtAddr6+"/64") },
		func() error { return n.Addr(UlDev, UlAddr6+"/64") },
		func() error { return n.Route("::/0", RtrAddr6, ExtDev) },
		func() error { return n.Route(NoNeighInet6, DeadExtGW6, ExtDev) },
		func() error { return n.Route(NoNeighNet6, DeadGW6, UlDev) },
		func() error { return n.Blackhole(HoleNet6) },
		func() error { return n.Neigh(ExtDev, RtrAddr6, RtrMAC) },
		func() error { return n.Neigh(UlDev, FabAddr6, FabMAC) },
		func() error {
			ext, err := n.Ifindex(ExtDev)
			if err != nil {
				return err
			}
			_, dst, _ := net.ParseCIDR(SmallMTUNet6)
			return n.Handle().RouteReplace(&netlink.Route{Dst: dst, Gw: net.ParseIP(RtrAddr6), LinkIndex: ext, MTU: SmallMTU6, MTULock: true})
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("internet IPv6: %w", err)
		}
	}
	return nil
}

// GuestIPv6 gives the guest link IPv6 for the agent's IPv6 EIP path:
// IPv6 forwarding on in the node, a route to each prefix through GuestDev
// and a permanent neighbour for addr (the guest, VMMAC); an address of
// another prefix stays unresolved (bpf_fib_lookup: no neighbour).
func (e *Env) GuestIPv6(addr string, prefixes ...string) error {
	for _, k := range []string{"net.ipv6.conf.all.forwarding", "net.ipv6.conf.default.forwarding"} {
		if err := e.Node.Sysctl(k, "1"); err != nil {
			return err
		}
	}
	g, err := e.Node.Ifindex(GuestDev)
	if err != nil {
		return err
	}
	return e.Node.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		for _, p := range prefixes {
			_, n, err := net.ParseCIDR(p)
			if err != nil {
				return fmt.Errorf("guest IPv6 route %q: %w", p, err)
			}
			if err := h.RouteReplace(&netlink.Route{LinkIndex: g, Dst: n}); err != nil {
				return fmt.Errorf("guest IPv6 route %s: %w", p, err)
			}
		}
		ip := net.ParseIP(addr)
		if ip == nil || ip.To4() != nil {
			return fmt.Errorf("guest IPv6 address %q", addr)
		}
		return h.NeighSet(&netlink.Neigh{LinkIndex: g, Family: unix.AF_INET6, State: netlink.NUD_PERMANENT,
			IP: ip, HardwareAddr: MustMAC(VMMAC)})
	})
}

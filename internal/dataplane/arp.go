package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ARPMap is what the edge's ARP ownership needs of the data plane
// (issue 8, part 6): the interfaces it answers on (SetARP), until when it
// may answer (SetARPOwner: the deadline of its claim, enforced by the
// program itself, so an owner whose daemon dies stops answering on time),
// and the addresses it answers for besides the VIPs (SetARPAddrs). The
// same interfaces and deadline govern the answers to IPv6 neighbor
// solicitations for the IPv6 VIPs (bpf/lib/ndp.h): one election.
type ARPMap interface {
	// SetARP answers on ifindex with mac (nil: not on ifindex).
	SetARP(ifindex int, mac net.HardwareAddr) error
	// ARPIfaces lists the interfaces answered on (a restarted daemon
	// removes those no longer configured).
	ARPIfaces() (map[int]net.HardwareAddr, error)
	// SetARPOwner lets the program answer until the given time (the zero
	// time or a past one: not at all).
	SetARPOwner(until time.Time) error
	// ARPOwner reads the deadline back (zero: not answering).
	ARPOwner() (time.Time, error)
	// SetARPAddrs replaces the extra addresses: IPv4 ones are answered
	// ARP, IPv6 ones neighbor solicitations (as a router: they are
	// gateways); at most ARPAddrsMax of each family (CheckARPAddrs).
	SetARPAddrs(addrs []netip.Addr) error
}

var _ ARPMap = (*Edge)(nil)

// ARPAddrsMax is the capacity of arp_addrs and of arp_addrs6
// (ARP_ADDRS_MAX in consts.h).
const ARPAddrsMax = 16

// monoNow reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monoNow() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

func (e *Edge) ARPIfaces() (map[int]net.HardwareAddr, error) {
	out := map[int]net.HardwareAddr{}
	var k uint32
	var v edgeArpIface
	it := e.objs.ArpIfaces.Iterate()
	for it.Next(&k, &v) {
		out[int(k)] = net.HardwareAddr(slices.Clone(v.Mac[:]))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("arp_ifaces: %w", err)
	}
	return out, nil
}

func (e *Edge) SetARPOwner(until time.Time) error {
	var v edgeArpOwner
	if !until.IsZero() {
		// The kernel's clock first, then what is left: a pause between
		// the two reads (preemption, GC) shortens the deadline written,
		// never lengthens it past the claim's.
		now, err := monoNow()
		if err != nil {
			return err
		}
		if d := time.Until(until); d > 0 {
			v.UntilNs = now + uint64(d)
		}
	}
	if err := e.objs.ArpOwner.Update(uint32(0), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("arp_owner: %w", err)
	}
	return nil
}

func (e *Edge) ARPOwner() (time.Time, error) {
	var v edgeArpOwner
	if err := e.objs.ArpOwner.Lookup(uint32(0), &v); err != nil {
		return time.Time{}, fmt.Errorf("arp_owner: %w", err)
	}
	now, err := monoNow()
	if err != nil {
		return time.Time{}, err
	}
	if v.UntilNs <= now {
		return time.Time{}, nil
	}
	return time.Now().Add(time.Duration(v.UntilNs - now)), nil
}

func (e *Edge) SetARPAddrs(addrs []netip.Addr) error {
	if err := CheckARPAddrs(addrs); err != nil {
		return err
	}
	want4 := map[uint32]bool{}
	want6 := map[edgeIpAddr]bool{}
	for _, a := range addrs {
		if a.Is4() {
			want4[ip4word(a)] = true
		} else {
			want6[ip6addr(a)] = true
		}
	}
	if err := syncARPAddrs(e.objs.ArpAddrs, "arp_addrs", want4, 1); err != nil {
		return err
	}
	return syncARPAddrs(e.objs.ArpAddrs6, "arp_addrs6", want6, naFlagRouter)
}

// naFlagRouter is NA_F_ROUTER (consts.h): the extra IPv6 addresses are
// gateways, advertised with the Router flag (RFC 4861 4.4: a host that
// saw it clear would take the address off its default router list).
const naFlagRouter = 0x80

// CheckARPAddrs checks the extra addresses SetARPAddrs takes: unicast
// IPv4, or unicast IPv6 (global or link-local: an IPv6 default gateway
// is often fe80::1), at most ARPAddrsMax of each family.
func CheckARPAddrs(addrs []netip.Addr) error {
	n4, n6 := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, a := range addrs {
		switch {
		case !a.IsValid() || a.Zone() != "":
			return fmt.Errorf("arp_addrs: %v is not an address without a zone", a)
		case a.Is4In6() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || (a.Is4() && a.As4()[0] == 0):
			return fmt.Errorf("arp_addrs: %v is not a unicast address", a)
		case a.Is4():
			n4[a] = true
		default:
			n6[a] = true
		}
	}
	if len(n4) > ARPAddrsMax || len(n6) > ARPAddrsMax {
		return fmt.Errorf("arp_addrs: %d IPv4 and %d IPv6 addresses, at most %d of each", len(n4), len(n6), ARPAddrsMax)
	}
	return nil
}

// syncARPAddrs makes m (arp_addrs or arp_addrs6) hold the keys of want,
// each with value v.
func syncARPAddrs[K comparable](m *ebpf.Map, name string, want map[K]bool, v uint32) error {
	var k K
	var cur uint32
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &cur) {
		if !want[k] || cur != v {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, k := range stale {
		if !want[k] {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	for k := range want {
		if err := m.Update(k, v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// FakeARP is an in-memory ARPMap.
type FakeARP struct {
	mu     sync.Mutex
	Ifaces map[int]string
	Until  time.Time
	Addrs  []netip.Addr
}

func NewFakeARP() *FakeARP { return &FakeARP{Ifaces: map[int]string{}} }

func (f *FakeARP) SetARP(ifindex int, mac net.HardwareAddr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mac == nil {
		delete(f.Ifaces, ifindex)
	} else {
		f.Ifaces[ifindex] = mac.String()
	}
	return nil
}

func (f *FakeARP) ARPIfaces() (map[int]net.HardwareAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]net.HardwareAddr{}
	for i, m := range f.Ifaces {
		out[i], _ = net.ParseMAC(m)
	}
	return out, nil
}

func (f *FakeARP) SetARPOwner(until time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Until = until
	return nil
}

func (f *FakeARP) ARPOwner() (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Now().Before(f.Until) {
		return f.Until, nil
	}
	return time.Time{}, nil
}

func (f *FakeARP) SetARPAddrs(addrs []netip.Addr) error {
	if err := CheckARPAddrs(addrs); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Addrs = slices.Clone(addrs)
	return nil
}

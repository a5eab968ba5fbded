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
// and the addresses it answers for besides the VIPs (SetARPAddrs).
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
	// SetARPAddrs replaces the extra addresses (IPv4 only, at most
	// ARPAddrsMax).
	SetARPAddrs(addrs []netip.Addr) error
}

var _ ARPMap = (*Edge)(nil)

// ARPAddrsMax is the capacity of arp_addrs (ARP_ADDRS_MAX in consts.h).
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
	want := map[uint32]bool{}
	for _, a := range addrs {
		if !a.Is4() {
			return fmt.Errorf("arp_addrs: %v is not IPv4", a)
		}
		want[ip4word(a)] = true
	}
	if len(want) > ARPAddrsMax {
		return fmt.Errorf("arp_addrs: %d addresses, at most %d", len(want), ARPAddrsMax)
	}
	var k, v uint32
	var stale []uint32
	it := e.objs.ArpAddrs.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("arp_addrs: %w", err)
	}
	for _, k := range stale {
		if err := e.objs.ArpAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("arp_addrs: %w", err)
		}
	}
	for k := range want {
		if err := e.objs.ArpAddrs.Update(k, uint32(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("arp_addrs: %w", err)
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
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Addrs = slices.Clone(addrs)
	return nil
}

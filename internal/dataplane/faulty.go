package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
)

// Faults decides which calls of a fault-injecting map fail: the Nth call
// of a chosen operation, or any write at random from a seed (reads fail
// only when named by FailNth: a reconciler that cannot read its maps has
// nothing to converge from). After runs after every successful write, so
// a test can check what packets would see between two writes.
type Faults struct {
	mu    sync.Mutex
	calls map[string]int
	nth   map[string]int // op -> the call number (1-based) that fails
	rnd   *rand.Rand
	p     float64
	// Injected counts the failures injected.
	Injected int
	// After is called after each successful write with the operation's
	// name (e.g. "PutListener").
	After func(op string)
}

// NewFaults returns a Faults that fails nothing.
func NewFaults() *Faults { return &Faults{calls: map[string]int{}, nth: map[string]int{}} }

// FailNth makes the nth call (1-based, counted from now) of op fail.
func (f *Faults) FailNth(op string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op] = 0
	f.nth[op] = n
}

// FailRandomly makes each write fail with probability p, drawn from a
// generator seeded with seed (reproducible).
func (f *Faults) FailRandomly(seed uint64, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rnd, f.p = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), p
}

// Off stops every injection.
func (f *Faults) Off() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.nth)
	f.rnd = nil
}

func (f *Faults) check(op string, write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	if n, ok := f.nth[op]; ok && f.calls[op] == n {
		delete(f.nth, op)
		f.Injected++
		return fmt.Errorf("%s: call %d: %w", op, n, ErrInjected)
	}
	if write && f.rnd != nil && f.rnd.Float64() < f.p {
		f.Injected++
		return fmt.Errorf("%s: %w", op, ErrInjected)
	}
	return nil
}

func (f *Faults) done(op string) {
	if f.After != nil {
		f.After(op)
	}
}

// write runs a write through the faults.
func (f *Faults) write(op string, do func() error) error {
	if err := f.check(op, true); err != nil {
		return err
	}
	if err := do(); err != nil {
		return err
	}
	f.done(op)
	return nil
}

// FaultyVIPs injects faults into a VIPMap.
type FaultyVIPs struct {
	VIPMap
	F *Faults
}

func (f FaultyVIPs) PutVIP(a netip.Addr) error {
	return f.F.write("PutVIP", func() error { return f.VIPMap.PutVIP(a) })
}
func (f FaultyVIPs) DeleteVIP(a netip.Addr) error {
	return f.F.write("DeleteVIP", func() error { return f.VIPMap.DeleteVIP(a) })
}
func (f FaultyVIPs) VIPs() ([]netip.Addr, error) {
	if err := f.F.check("VIPs", false); err != nil {
		return nil, err
	}
	return f.VIPMap.VIPs()
}

// FaultyListeners injects faults into a ListenerMap.
type FaultyListeners struct {
	ListenerMap
	F *Faults
}

func (f FaultyListeners) PutListener(l Listener, v ListenerValue) error {
	return f.F.write("PutListener", func() error { return f.ListenerMap.PutListener(l, v) })
}
func (f FaultyListeners) DeleteListener(l Listener) error {
	return f.F.write("DeleteListener", func() error { return f.ListenerMap.DeleteListener(l) })
}
func (f FaultyListeners) Listeners() (map[Listener]ListenerValue, error) {
	if err := f.F.check("Listeners", false); err != nil {
		return nil, err
	}
	return f.ListenerMap.Listeners()
}

// FaultyTables injects faults into a TableMap.
type FaultyTables struct {
	TableMap
	F *Faults
}

func (f FaultyTables) SetTable(slot uint32, entries []uint32) error {
	return f.F.write("SetTable", func() error { return f.TableMap.SetTable(slot, entries) })
}
func (f FaultyTables) DeleteTable(slot uint32) error {
	return f.F.write("DeleteTable", func() error { return f.TableMap.DeleteTable(slot) })
}
func (f FaultyTables) SetTableOwner(slot uint32, owner uint64) error {
	return f.F.write("SetTableOwner", func() error { return f.TableMap.SetTableOwner(slot, owner) })
}
func (f FaultyTables) TableOwners() (map[uint32]uint64, error) {
	if err := f.F.check("TableOwners", false); err != nil {
		return nil, err
	}
	return f.TableMap.TableOwners()
}

// FaultyBackends injects faults into a BackendMap.
type FaultyBackends struct {
	BackendMap
	F *Faults
}

func (f FaultyBackends) SetBackend(idx uint32, b LBBackend) error {
	return f.F.write("SetBackend", func() error { return f.BackendMap.SetBackend(idx, b) })
}
func (f FaultyBackends) Backends() (map[uint32]LBBackend, error) {
	if err := f.F.check("Backends", false); err != nil {
		return nil, err
	}
	return f.BackendMap.Backends()
}
func (f FaultyBackends) ResetBackendCounters(idx uint32) error {
	return f.F.write("ResetBackendCounters", func() error { return f.BackendMap.ResetBackendCounters(idx) })
}

// FaultyNATBackends injects faults into a NATBackendMap.
type FaultyNATBackends struct {
	NATBackendMap
	F *Faults
}

func (f FaultyNATBackends) PutNATBackend(b NATBackend, vip netip.AddrPort) error {
	return f.F.write("PutNATBackend", func() error { return f.NATBackendMap.PutNATBackend(b, vip) })
}
func (f FaultyNATBackends) DeleteNATBackend(b NATBackend) error {
	return f.F.write("DeleteNATBackend", func() error { return f.NATBackendMap.DeleteNATBackend(b) })
}
func (f FaultyNATBackends) NATBackends() (map[NATBackend]netip.AddrPort, error) {
	if err := f.F.check("NATBackends", false); err != nil {
		return nil, err
	}
	return f.NATBackendMap.NATBackends()
}

// FaultyLBConfig injects faults into an LBConfigMap.
type FaultyLBConfig struct {
	LBConfigMap
	F *Faults
}

func (f FaultyLBConfig) SetLBConfig(c LBConfig) error {
	return f.F.write("SetLBConfig", func() error { return f.LBConfigMap.SetLBConfig(c) })
}
func (f FaultyLBConfig) SetARP(ifindex int, mac net.HardwareAddr) error {
	return f.F.write("SetARP", func() error { return f.LBConfigMap.SetARP(ifindex, mac) })
}

// FaultyLB is an LBMaps (and EdgeMaps) whose load-balancer maps fail as
// F says: every map of inner wrapped in its faulty form.
type FaultyLB struct {
	EdgeMaps
	FaultyVIPs
	FaultyListeners
	FaultyTables
	FaultyBackends
	FaultyNATBackends
	FaultyLBConfig
	F *Faults
}

var _ LBMaps = (*FaultyLB)(nil)

// NewFaultyLB wraps a data plane with both map sets (a FakeLB, or an
// *Edge in privileged tests).
func NewFaultyLB(inner interface {
	EdgeMaps
	LBMaps
}, f *Faults) *FaultyLB {
	return &FaultyLB{EdgeMaps: inner, FaultyVIPs: FaultyVIPs{inner, f}, FaultyListeners: FaultyListeners{inner, f},
		FaultyTables: FaultyTables{inner, f}, FaultyBackends: FaultyBackends{inner, f},
		FaultyNATBackends: FaultyNATBackends{inner, f}, FaultyLBConfig: FaultyLBConfig{inner, f}, F: f}
}

// FaultyLimits injects faults into a LimitMaps.
type FaultyLimits struct {
	LimitMaps
	F *Faults
}

func (f FaultyLimits) PutLimits(a netip.Addr, l Limits) error {
	return f.F.write("PutLimits", func() error { return f.LimitMaps.PutLimits(a, l) })
}
func (f FaultyLimits) DeleteLimits(a netip.Addr) error {
	return f.F.write("DeleteLimits", func() error { return f.LimitMaps.DeleteLimits(a) })
}
func (f FaultyLimits) Limits() (map[netip.Addr]Limits, error) {
	if err := f.F.check("Limits", false); err != nil {
		return nil, err
	}
	return f.LimitMaps.Limits()
}

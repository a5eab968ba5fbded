package bwstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock gives Mem its notion of now; tests pass a manual one.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Mem is the in-process store, the default when no Redis is configured:
// one process (the lab, the simulator, a single-node setup) holds every
// AZ's reports and limits, with the same TTL and generation rules as Redis.
type Mem struct {
	clock Clock
	mu    sync.Mutex
	azs   map[string]*memAZ
}

type memAZ struct {
	reports map[string]memReport // by reporter
	limits  map[string]memLimits // by host
	gens    map[string]uint64    // last accepted generation by host; never expires
}

type memReport struct {
	at    time.Time
	ttl   time.Duration
	rates []Rate
}

type memLimits struct {
	at  time.Time
	ttl time.Duration
	lim Limits
}

// NewMem returns an empty in-process store; clock nil means the wall clock.
func NewMem(clock Clock) *Mem {
	if clock == nil {
		clock = wallClock{}
	}
	return &Mem{clock: clock, azs: make(map[string]*memAZ)}
}

func (m *Mem) az(name string) *memAZ {
	a := m.azs[name]
	if a == nil {
		a = &memAZ{reports: map[string]memReport{}, limits: map[string]memLimits{}, gens: map[string]uint64{}}
		m.azs[name] = a
	}
	return a
}

// WriteReports implements Store.
func (m *Mem) WriteReports(ctx context.Context, az, reporter string, ttl time.Duration, rates []Rate) error {
	if err := checkReports(az, reporter, ttl, rates); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cp := make([]Rate, len(rates))
	for i, r := range rates {
		r.EIP = r.EIP.Unmap()
		cp[i] = r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.az(az)
	now := m.clock.Now()
	if _, ok := a.reports[reporter]; !ok {
		m.expire(a, now)
		if len(a.reports) >= MaxReporters {
			return fmt.Errorf("%w: az %s: %d live reporters, at most %d (reporter %s)", ErrTooMany, az, len(a.reports), MaxReporters, reporter)
		}
	}
	a.reports[reporter] = memReport{at: now, ttl: ttl, rates: cp}
	return nil
}

func (m *Mem) expire(a *memAZ, now time.Time) {
	for k, r := range a.reports {
		if now.Sub(r.at) >= r.ttl {
			delete(a.reports, k)
		}
	}
}

// ReadReports implements Store.
func (m *Mem) ReadReports(ctx context.Context, az string) (Snapshot, error) {
	if err := checkName("az", az); err != nil {
		return Snapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{AZ: az}
	a := m.azs[az]
	if a == nil {
		return s, nil
	}
	now := m.clock.Now()
	m.expire(a, now)
	for rep, r := range a.reports {
		age := now.Sub(r.at)
		for _, x := range r.rates {
			s.Reports = append(s.Reports, Report{Reporter: rep, Rate: x, Age: age})
		}
	}
	sortReports(s.Reports)
	return s, nil
}

// WriteLimits implements Store.
func (m *Mem) WriteLimits(ctx context.Context, az, host string, ttl time.Duration, lim Limits) error {
	if err := checkLimits(az, host, ttl, lim); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cp := lim
	cp.Limits = make([]Limit, len(lim.Limits))
	for i, l := range lim.Limits {
		l.EIP = l.EIP.Unmap()
		cp.Limits[i] = l
	}
	sortLimits(cp.Limits)
	cp.Issued = time.UnixMilli(lim.Issued.UnixMilli())
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.az(az)
	if cur := a.gens[host]; lim.Generation <= cur {
		return &StaleGenerationError{AZ: az, Host: host, Given: lim.Generation, Stored: cur}
	}
	if _, ok := a.gens[host]; !ok && len(a.gens) >= MaxReporters {
		return fmt.Errorf("%w: az %s: limits for %d hosts, at most %d (host %s)", ErrTooMany, az, len(a.gens), MaxReporters, host)
	}
	a.gens[host] = lim.Generation
	a.limits[host] = memLimits{at: m.clock.Now(), ttl: ttl, lim: cp}
	return nil
}

func (m *Mem) current(az, host string) (memLimits, time.Duration, bool) {
	a := m.azs[az]
	if a == nil {
		return memLimits{}, 0, false
	}
	l, ok := a.limits[host]
	if !ok {
		return memLimits{}, 0, false
	}
	age := m.clock.Now().Sub(l.at)
	if age >= l.ttl {
		delete(a.limits, host)
		return memLimits{}, 0, false
	}
	return l, age, true
}

// ReadLimits implements Store.
func (m *Mem) ReadLimits(ctx context.Context, az, host string) (HostLimits, bool, error) {
	if err := checkName("az", az); err != nil {
		return HostLimits{}, false, err
	}
	if err := checkName("host", host); err != nil {
		return HostLimits{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return HostLimits{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, age, ok := m.current(az, host)
	if !ok {
		return HostLimits{}, false, nil
	}
	hl := HostLimits{Limits: l.lim, Age: age}
	hl.Limits.Limits = append([]Limit(nil), l.lim.Limits...)
	return hl, true, nil
}

// LimitsGeneration implements Store.
func (m *Mem) LimitsGeneration(ctx context.Context, az, host string) (uint64, bool, error) {
	if err := checkName("az", az); err != nil {
		return 0, false, err
	}
	if err := checkName("host", host); err != nil {
		return 0, false, err
	}
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, _, ok := m.current(az, host)
	return l.lim.Generation, ok, nil
}

// Close implements Store; Mem holds nothing to release.
func (m *Mem) Close() error { return nil }

package probe

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// State is a target's state as the monitor sees it.
type State struct {
	Key      string
	Addr     netip.Addr
	Up       bool
	Since    time.Time // when Up last changed (or the first check)
	Checks   uint64
	Failures uint64
	LastErr  string        // "" when the last check succeeded
	LastRTT  time.Duration // of the last successful check
}

// Options configure a Monitor.
type Options struct {
	// InitialUp is the state before the first Rise or Fall is reached
	// (GSLB: true, a new record answers at once; announcer: false, the
	// route waits for Rise successes).
	InitialUp bool
	// MaxConcurrent bounds the checks in flight (default 64): a monitor
	// with thousands of targets spreads them (jittered starts) and never
	// has more than this many dials or requests outstanding. A check
	// waiting for a slot is late, not lost; one that times out frees its
	// slot though the server may still be working on its request.
	MaxConcurrent int
	// Dial makes the checks' connections (TCP and HTTP); nil: a
	// net.Dialer. Tests and source-address binding set it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnChange is called when a target's Up flips, at the check that
	// reaches Rise or Fall, from the monitor's goroutines but never
	// concurrently (calls are serialized). It may call States, State and
	// Up; it must not block for long: the target's next check waits.
	OnChange func(State)
	// RootCAs verifies HTTPS targets' certificates; nil: the system's.
	RootCAs *x509.CertPool
	// Logger logs transitions; nil: slog.Default().
	Logger *slog.Logger
}

const defaultMaxConcurrent = 64

// Monitor checks a set of targets, each on its own ticker.
type Monitor struct {
	o   Options
	log *slog.Logger
	sem chan struct{}
	// cbMu serializes OnChange.
	cbMu sync.Mutex

	mu   sync.RWMutex
	ents map[string]*entry
	// down counts the targets down per address (Up reads it on every
	// GSLB query: no walk over the targets).
	down map[netip.Addr]int
	// runCtx is Run's context while it runs; targets set then start at
	// once.
	runCtx context.Context
	wg     sync.WaitGroup
}

// entry is one target and its state. The check goroutine owns the
// counters; mu guards st and the run counts.
type entry struct {
	t       Target // Spec normalized
	st      State
	okRun   int
	failRun int
	cancel  context.CancelFunc // stops its goroutine; nil while not running
	client  httpDoer
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewMonitor returns a monitor with no targets; Set gives it some, Run
// checks them.
func NewMonitor(o Options) *Monitor {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = defaultMaxConcurrent
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Monitor{o: o, log: log, sem: make(chan struct{}, o.MaxConcurrent),
		ents: map[string]*entry{}, down: map[netip.Addr]int{}}
}

// Set replaces the targets (declarative). A target whose Addr and
// normalized Spec are unchanged keeps its state and its ticker; one whose
// Spec changed keeps its state (Up, Since, counts) but its rise/fall run
// starts again on the new ticker; a new or readdressed target starts at
// Options.InitialUp. Any invalid target, or a key listed twice, is an
// error naming the key and the field, and nothing is changed.
func (m *Monitor) Set(targets []Target) error {
	next := make(map[string]Target, len(targets))
	for _, t := range targets {
		if err := t.Validate(); err != nil {
			return err
		}
		if _, dup := next[t.Key]; dup {
			return fmt.Errorf("probe target %q: key listed twice", t.Key)
		}
		t.Spec = t.Spec.Normalize()
		next[t.Key] = t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ents := make(map[string]*entry, len(next))
	for k, t := range next {
		old := m.ents[k]
		if old != nil && old.t == t {
			ents[k] = old
			continue
		}
		e := m.newEntry(t)
		if old != nil && old.t.Addr == t.Addr {
			e.st = old.st
		}
		if old != nil {
			old.stop()
		}
		ents[k] = e
		if m.runCtx != nil {
			m.start(e)
		}
	}
	for k, old := range m.ents {
		if _, ok := next[k]; !ok {
			old.stop()
		}
	}
	m.ents = ents
	m.recount()
	return nil
}

func (m *Monitor) newEntry(t Target) *entry {
	e := &entry{t: t, st: State{Key: t.Key, Addr: t.Addr, Up: m.o.InitialUp}}
	e.dial = m.o.Dial
	if e.dial == nil {
		d := &net.Dialer{}
		e.dial = d.DialContext
	}
	if t.Spec.Kind == HTTP || t.Spec.Kind == HTTPS {
		e.client = newHTTPClient(t, e.dial, m.o.RootCAs)
	}
	return e
}

// recount rebuilds the down counts. Called with m.mu held.
func (m *Monitor) recount() {
	clear(m.down)
	for _, e := range m.ents {
		if !e.st.Up {
			m.down[e.t.Addr]++
		}
	}
}

func (e *entry) stop() {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
}

// start runs e's goroutine. Called with m.mu held and m.runCtx set.
func (m *Monitor) start(e *entry) {
	ctx, cancel := context.WithCancel(m.runCtx)
	e.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.loop(ctx, e)
	}()
}

// Run checks the targets until ctx ends, then stops every check and
// returns once they have. Each target has its own ticker, started after a
// random delay within its interval so that targets set together do not
// all dial at once. Run is not called twice at once; after it returns,
// Set still updates the targets (they are not checked) and Run may run
// again.
func (m *Monitor) Run(ctx context.Context) {
	m.mu.Lock()
	if m.runCtx != nil {
		m.mu.Unlock()
		panic("probe: Monitor.Run called while running")
	}
	m.runCtx = ctx
	for _, e := range m.ents {
		m.start(e)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.runCtx = nil // Set starts no more goroutines
	for _, e := range m.ents {
		e.stop()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Monitor) loop(ctx context.Context, e *entry) {
	iv := e.t.Spec.Interval
	jitter := time.NewTimer(rand.N(iv))
	select {
	case <-ctx.Done():
		jitter.Stop()
		return
	case <-jitter.C:
	}
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		m.check(ctx, e)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// check runs one check of e and records it.
func (m *Monitor) check(ctx context.Context, e *entry) {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	start := time.Now()
	err := e.do(ctx)
	rtt := time.Since(start)
	<-m.sem
	if ctx.Err() != nil {
		return // removed, changed or stopping: the result is nobody's
	}
	m.record(e, err, rtt, start)
}

// record applies a check's result to e's state, and calls OnChange when
// Up flipped. Only e's goroutine calls it.
func (m *Monitor) record(e *entry, err error, rtt time.Duration, at time.Time) {
	m.mu.Lock()
	if m.ents[e.t.Key] != e {
		m.mu.Unlock()
		return
	}
	st := &e.st
	st.Checks++
	if st.Since.IsZero() {
		st.Since = at
	}
	changed := false
	if err == nil {
		st.LastErr, st.LastRTT = "", rtt
		e.okRun++
		e.failRun = 0
		if !st.Up && e.okRun >= e.t.Spec.Rise {
			st.Up, st.Since, changed = true, at, true
			if m.down[e.t.Addr]--; m.down[e.t.Addr] <= 0 {
				delete(m.down, e.t.Addr)
			}
		}
	} else {
		st.Failures++
		st.LastErr = errString(err)
		e.failRun++
		e.okRun = 0
		if st.Up && e.failRun >= e.t.Spec.Fall {
			st.Up, st.Since, changed = false, at, true
			m.down[e.t.Addr]++
		}
	}
	snap := *st
	m.mu.Unlock()
	if !changed {
		return
	}
	if snap.Up {
		m.log.Info("probe: target up", "target", snap.Key, "addr", snap.Addr, "checks", snap.Checks)
	} else {
		m.log.Info("probe: target down", "target", snap.Key, "addr", snap.Addr, "err", snap.LastErr, "checks", snap.Checks)
	}
	if m.o.OnChange != nil {
		m.cbMu.Lock()
		defer m.cbMu.Unlock()
		m.o.OnChange(snap)
	}
}

// errString bounds an error's text (a State is served in status pages).
func errString(err error) string {
	s := err.Error()
	if len(s) > 256 {
		s = s[:256] + "..."
	}
	return s
}

// States returns every target's state, sorted by Key.
func (m *Monitor) States() []State {
	m.mu.RLock()
	out := make([]State, 0, len(m.ents))
	for _, e := range m.ents {
		out = append(out, e.st)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// State returns one target's state.
func (m *Monitor) State(key string) (State, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.ents[key]
	if !ok {
		return State{}, false
	}
	return e.st, true
}

// Up reports whether addr is serving, as gslb.Health wants it: false only
// when some target with that Addr is down; an address no target checks is
// up (the GSLB answers with targets nobody probes).
func (m *Monitor) Up(addr netip.Addr) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.down[addr] == 0
}

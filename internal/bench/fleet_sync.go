package bench

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
)

// Connection sync (issue 8 part 5): two members of an edge set in this
// process, each with its own real (unpinned) edge maps, synced over TCP on
// loopback through internal/connsync as the daemons run it (authenticated
// sessions, batches, acknowledgements). The sender's events come from a
// generator standing in for the ring buffer (its cost is the ring
// reader's: one decode per event), paced or as fast as it goes; the
// receiver translates every entry to its own slots and writes it into its
// connection table (and the nat reverse table) with batched map updates.
//
// Figures:
//   - sync_apply: entries per CPU-second (the thread's user and system
//     time) one goroutine writes into the receiver's maps
//     (dataplane.ApplyConns, batches of 256), the receiver's per-core
//     bound, next to a plain BatchUpdate of ready entries (the kernel's
//     own cost);
//   - sync_pipeline: entries/s through the whole pipeline, offered as fast
//     as the sender goes, and entries per CPU-second of the process (both
//     ends on this machine's cores, from getrusage);
//   - sync_lag: p50/p99/max from an event to its batch's acknowledgement,
//     at SyncOptions.Rate new connections/s offered;
//   - sync_bytes_per_entry: bytes on the wire per entry at that rate
//     (frame headers and MACs included).

// SyncOptions sizes the sync benchmark.
type SyncOptions struct {
	Duration time.Duration // per measurement (0: 5 s)
	Rate     int           // offered new connections/s for the lag (0: 100000)
	ConnMax  uint32        // receiver's connection table (0: 1M)
	Out      func(string, ...any)
}

// benchClock is the kernel's jiffies, read through the bench program and
// extrapolated between readings, at the measured HZ: the clock the edge's
// syncer runs on (internal/edge/sync.go). Both members share it, as two
// machines share wall time through NTP. A clock of its own would stamp
// entries the kernel's maps then age against bpf_jiffies64.
type benchClock = *connsync.JiffyClock

// kernelClock opens the bench program and returns the kernel clock and a
// function that closes the program.
func kernelClock() (benchClock, func(), error) {
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, nil, fmt.Errorf("the kernel's jiffies: %w", err)
	}
	hz, err := b.MeasureHZ()
	if err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("the kernel's HZ: %w", err)
	}
	c, err := connsync.NewJiffyClock(b.Jiffies, hz)
	if err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("the kernel's jiffies: %w", err)
	}
	return c, func() { b.Close() }, nil
}

// genEvents generates new-connection events once begin is closed: rate
// per second (0: as fast as read), distinct flows, on backend slot 0
// generation 1. One reader.
type genEvents struct {
	clock    benchClock
	rate     int
	begin    chan struct{}
	start    time.Time // set before begin is closed
	n        uint64
	mu       sync.Mutex
	deadline time.Time
	stop     chan struct{}
	once     sync.Once
}

func newGen(clock benchClock, rate int) *genEvents {
	return &genEvents{clock: clock, rate: rate, begin: make(chan struct{}), stop: make(chan struct{})}
}

func (g *genEvents) run() { g.start = time.Now(); close(g.begin) }

// wait sleeps until t, the deadline or stop.
func (g *genEvents) wait(t time.Time) error {
	g.mu.Lock()
	d := g.deadline
	g.mu.Unlock()
	timeout := dataplane.ErrNoEvent
	if d.IsZero() || t.Before(d) {
		d, timeout = t, nil
	}
	select {
	case <-time.After(time.Until(d)):
		return timeout
	case <-g.stop:
		return dataplane.ErrClosed
	}
}

func (g *genEvents) Read(ev *dataplane.ConnEvent) error {
	select {
	case <-g.begin:
	case <-g.stop:
		return dataplane.ErrClosed
	default:
		if err := g.wait(time.Now().Add(time.Hour)); err != nil {
			return err
		}
		return dataplane.ErrNoEvent
	}
	if g.rate > 0 {
		// Ahead of the schedule: sleep at least 500 µs, so events come
		// in bursts as the ring delivers them (one wake-up per burst,
		// not one timer per event: the generator's cost is not sync's).
		due := g.start.Add(time.Duration(float64(g.n) / float64(g.rate) * float64(time.Second)))
		if time.Until(due) > 0 {
			if soon := time.Now().Add(500 * time.Microsecond); due.Before(soon) {
				due = soon
			}
			if err := g.wait(due); err != nil {
				return err
			}
		}
	} else {
		select {
		case <-g.stop:
			return dataplane.ErrClosed
		default:
		}
	}
	i := g.n
	g.n++
	*ev = dataplane.ConnEvent{Key: dataplane.ConnKey{Src: 0xcb | uint32(i>>16)<<8, Dst: 0x1464_33c6, // 203.0.x.x -> 198.51.100.20
		Sport: uint16(i), Dport: dataplane.PortWord(80), Proto: dataplane.ProtoTCP},
		Backend: 0, Gen: 1, Last: uint32(g.clock.Jiffies()), State: dataplane.ConnSYN, Kind: dataplane.ConnEventNew}
	return nil
}

func (g *genEvents) SetDeadline(t time.Time) {
	g.mu.Lock()
	g.deadline = t
	g.mu.Unlock()
}

func (g *genEvents) Close() error { g.once.Do(func() { close(g.stop) }); return nil }

// threadCPU is the calling thread's CPU time (lock it to the thread).
func threadCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

const benchOwner = 0x0123_4567_89ab_cdef

func syncMember(name string, slot uint32, connMax uint32) (*dataplane.Edge, error) {
	e, err := dataplane.LoadEdgeMaps(dataplane.LoadOptions{ConnMax: connMax, EIPMax: 1024})
	if err != nil {
		return nil, err
	}
	if err := e.SetBackend(slot, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: netip.MustParseAddr("198.19.100.1"), Port: 8080,
		Gen: 1, Owner: benchOwner}); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// syncPair runs a sender (events ev) and a receiver; stop ends both.
func syncPair(ev connsync.Events, connMax uint32, clock benchClock) (a, b *connsync.Syncer, rx *dataplane.Edge, stop func(), err error) {
	ta, err := syncMember("a", 0, 1024)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tb, err := syncMember("b", 7, connMax)
	if err != nil {
		ta.Close()
		return nil, nil, nil, nil, err
	}
	secret := make([]byte, 32)
	var addrB netip.AddrPort
	mk := func(name string, t connsync.Table, ev connsync.Events, peers func() ([]connsync.Peer, bool)) (*connsync.Syncer, error) {
		s, err := connsync.New(connsync.Config{Name: name, Listen: netip.MustParseAddrPort("127.0.0.1:0"), Secret: secret, Table: t,
			Events: ev, Clock: clock, Peers: peers, Refresh: -1, JoinTimeout: 200 * time.Millisecond, QueueBatches: 4096})
		if err != nil {
			return nil, err
		}
		return s, s.Listen()
	}
	// The receiver serves only members of its set connecting from their
	// addresses there: it lists the sender (on loopback).
	// (addrA is set before either runs.)
	var addrA netip.AddrPort
	b, err = mk("b", tb, nil, func() ([]connsync.Peer, bool) { return []connsync.Peer{{Name: "a", Addr: addrA}}, true })
	if err != nil {
		return nil, nil, nil, nil, err
	}
	addrB = netip.MustParseAddrPort(b.Addr().String())
	a, err = mk("a", ta, ev, func() ([]connsync.Peer, bool) { return []connsync.Peer{{Name: "b", Addr: addrB}}, true })
	if err != nil {
		return nil, nil, nil, nil, err
	}
	addrA = netip.MustParseAddrPort(a.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b.Run(ctx) }()
	go func() { defer wg.Done(); a.Run(ctx) }()
	stop = func() {
		cancel()
		wg.Wait()
		ta.Close()
		tb.Close()
	}
	for end := time.Now().Add(5 * time.Second); !a.Ready() || len(a.Status().Peers) == 0 || !a.Status().Peers[0].Connected; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			st := a.Status()
			stop()
			return nil, nil, nil, nil, fmt.Errorf("sync bench: the sender did not connect to the receiver in 5s (ready %v %s; peers %+v)", st.Ready, st.Reason, st.Peers)
		}
	}
	return a, b, tb, stop, nil
}

// FleetSync measures connection sync (see the comment above).
func FleetSync(o SyncOptions) ([]Result, error) {
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 100_000
	}
	if o.ConnMax == 0 {
		o.ConnMax = 1 << 20
	}
	if o.Out == nil {
		o.Out = func(string, ...any) {}
	}
	clock, closeClock, err := kernelClock()
	if err != nil {
		return nil, err
	}
	defer closeClock()
	var rs []Result

	// 1. The receiver's map writes, one goroutine, each on fresh maps
	// (a full LRU table evicts on every insert: slower, and the same for
	// all three only if each starts empty).
	batch := make([]dataplane.SyncedConn, 256)
	apply := func(d time.Duration, plain, nat bool) (float64, error) {
		rx, err := syncMember("rx", 7, o.ConnMax)
		if err != nil {
			return 0, err
		}
		defer rx.Close()
		// Per core: the CPU time of this thread (user and system: the
		// map updates are the kernel's), not the wall clock, which a
		// busy shared machine stretches.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		n := 0
		start, cpu0 := time.Now(), threadCPU()
		for time.Since(start) < d {
			if plain {
				// The kernel's own cost: BatchUpdate of ready entries in
				// 64k chunks, no translation (dataplane.FillConns).
				if err := rx.FillConns(65536, netip.AddrFrom4([4]byte{198, 51, 100, byte(n >> 16)}), 80, 1, clock.Jiffies()); err != nil {
					return 0, err
				}
				n += 65536
				continue
			}
			for i := range batch {
				k := uint32(n + i)
				batch[i] = dataplane.SyncedConn{Key: dataplane.ConnKey{Src: 0xcb | k>>16<<8, Dst: 0x1464_33c6, Sport: uint16(k), Dport: 0x5000, Proto: 6},
					Backend: 7, Gen: 1, Last: uint32(clock.Jiffies()), State: dataplane.ConnEST, NAT: nat,
					BAddr: dataplane.AddrWord(netip.MustParseAddr("198.19.100.1")), BPort: dataplane.PortWord(8080)}
			}
			if err := rx.ApplyConns(batch); err != nil {
				return 0, err
			}
			n += len(batch)
		}
		return float64(n) / (threadCPU() - cpu0), nil
	}
	o.Out("sync: receiver map writes (%v each)", o.Duration)
	plain, err := apply(o.Duration, true, false)
	if err != nil {
		return nil, err
	}
	encapRate, err := apply(o.Duration, false, false)
	if err != nil {
		return nil, err
	}
	natRate, err := apply(o.Duration, false, true)
	if err != nil {
		return nil, err
	}
	rs = append(rs,
		Result{Suite: "sync", Name: "sync_apply_encap", Value: encapRate, Unit: "entries/CPU-s", Target: ">= 1M entries/s per core",
			Baseline: "plain BatchUpdate", BaselineValue: plain, Ratio: encapRate / plain,
			Note: "one goroutine: ApplyConns of encap entries (one lb_conns BatchUpdate per 256); baseline: FillConns, 64k-entry BatchUpdates of ready entries"},
		Result{Suite: "sync", Name: "sync_apply_nat", Value: natRate, Unit: "entries/CPU-s", Target: ">= 1M entries/s per core",
			Baseline: "plain BatchUpdate", BaselineValue: plain, Ratio: natRate / plain,
			Note: "one goroutine: nat entries, each with its reverse entry (two BatchUpdates per 256)"})

	// 2. The whole pipeline: as fast as the sender goes (the receiver
	// bounds it; the rest is dropped at the queue), then paced at 80 % of
	// what was applied, where nothing is dropped, for the CPU it costs.
	o.Out("sync: pipeline over loopback TCP, unpaced (%v)", o.Duration)
	pipe := func(rate int) (applied, sent, drops uint64, wall, cpu float64, err error) {
		gen := newGen(clock, rate)
		a, b, _, stop, err := syncPair(gen, o.ConnMax, clock)
		if err != nil {
			return 0, 0, 0, 0, 0, err
		}
		gen.run()
		time.Sleep(200 * time.Millisecond) // warm up
		b0, a0, c0, t0 := b.Status().Metrics.Applied, a.Status().Metrics, cpuSeconds(), time.Now()
		time.Sleep(o.Duration)
		b1, a1, c1, t1 := b.Status().Metrics.Applied, a.Status().Metrics, cpuSeconds(), time.Now()
		gen.Close()
		stop()
		return b1 - b0, a1.Sent - a0.Sent, a1.QueueDrops - a0.QueueDrops, t1.Sub(t0).Seconds(), c1 - c0, nil
	}
	applied, sent, drops, wall, cpu, err := pipe(0)
	if err != nil {
		return nil, err
	}
	maxRate := float64(applied) / wall
	rs = append(rs, Result{Suite: "sync", Name: "sync_pipeline_max", Value: maxRate, Unit: "entries/s",
		Note: fmt.Sprintf("generator -> batch -> HMAC'd TCP on loopback -> translate -> maps, unpaced: the receiver's rate; %.2f CPUs busy (both ends), %d sent, %d dropped at the queue", cpu/wall, sent, drops)})
	paced := int(0.8 * maxRate)
	o.Out("sync: pipeline paced at %d entries/s (%v)", paced, o.Duration)
	applied, sent, drops, wall, cpu, err = pipe(paced)
	if err != nil {
		return nil, err
	}
	rs = append(rs, Result{Suite: "sync", Name: "sync_pipeline_per_cpu", Value: float64(applied) / cpu, Unit: "entries/CPU-s", Target: ">= 1M entries/s per core",
		Note: fmt.Sprintf("paced at %d/s: %d sent, %d applied, %d dropped in %.1fs; %.2f CPUs busy: entries per CPU-second of sender and receiver together", paced, sent, applied, drops, wall, cpu/wall)})

	// 3. Lag and bytes at the offered rate.
	o.Out("sync: lag at %d new connections/s (%v)", o.Rate, o.Duration)
	gen := newGen(clock, o.Rate)
	a, _, _, stop, err := syncPair(gen, o.ConnMax, clock)
	if err != nil {
		return nil, err
	}
	gen.run()
	m0 := a.Status().Metrics
	c0, t0 := cpuSeconds(), time.Now()
	time.Sleep(o.Duration)
	st := a.Status()
	c1, t1 := cpuSeconds(), time.Now()
	gen.Close()
	stop()
	sent = st.Metrics.Sent - m0.Sent
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	note := fmt.Sprintf("%d entries sent in %.1fs, %d dropped; %.2f CPUs busy (both ends)", sent, t1.Sub(t0).Seconds(),
		st.Metrics.QueueDrops-m0.QueueDrops, (c1-c0)/t1.Sub(t0).Seconds())
	rs = append(rs,
		Result{Suite: "sync", Name: "sync_lag_p50", Value: ms(st.Lag.P50), Unit: "ms", Note: note},
		Result{Suite: "sync", Name: "sync_lag_p99", Value: ms(st.Lag.P99), Unit: "ms", Target: "<= 50 ms", Note: "event to the peer's ack of its batch (last 8192 batches)"},
		Result{Suite: "sync", Name: "sync_lag_max", Value: ms(st.Lag.Max), Unit: "ms"},
		Result{Suite: "sync", Name: "sync_bytes_per_entry", Value: float64(st.Metrics.SentBytes-m0.SentBytes) / float64(max(sent, 1)), Unit: "B",
			Note: "28 B an entry, plus a frame's 47 B (length, header, HMAC) per batch"})
	return rs, nil
}

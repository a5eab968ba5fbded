package connsync

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// The tests run two (or three) Syncers in one process over real TCP on
// loopback, each with its own real, unpinned edge data plane (real BPF
// maps, so it needs root). The events come from a channel standing in for
// the ring buffer (internal/dataplane TestConnEvents tests the ring
// itself through the program).

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads BPF maps")
	}
}

// chanEvents is an Events fed by the test.
type chanEvents struct {
	ch       chan dataplane.ConnEvent
	mu       sync.Mutex
	deadline time.Time
	closed   chan struct{}
	once     sync.Once
}

func newChanEvents() *chanEvents {
	return &chanEvents{ch: make(chan dataplane.ConnEvent, 1<<16), closed: make(chan struct{})}
}

func (c *chanEvents) Read(ev *dataplane.ConnEvent) error {
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	wait := time.Until(d)
	if d.IsZero() {
		wait = time.Hour
	}
	select {
	case *ev = <-c.ch:
		return nil
	default:
	}
	if wait <= 0 {
		return dataplane.ErrNoEvent
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case *ev = <-c.ch:
		return nil
	case <-t.C:
		return dataplane.ErrNoEvent
	case <-c.closed:
		return dataplane.ErrClosed
	}
}

func (c *chanEvents) SetDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
}

func (c *chanEvents) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// The tests' clock is the kernel's jiffies, read as the data plane reads
// them (bpf_jiffies64 through dataplane.Bench), at the kernel's measured
// HZ: entries the real program stamps are compared with it, and a clock
// of the test's own is off the kernel's by however long the machine has
// been up (a fixed base ran ahead of a freshly booted kernel's jiffies,
// so every lag read ~30 minutes; behind an older one's, every age and
// lag clamped to 0, which no assertion could catch).
var (
	clockOnce sync.Once
	clockErr  error
	clock     *JiffyClock
	clockHZ   uint32
)

// kernelClock loads the kernel clock (once; it needs root to load the
// BPF program that reads it) and returns it.
func kernelClock(t testing.TB) *JiffyClock {
	t.Helper()
	requireRoot(t)
	clockOnce.Do(func() {
		b, err := dataplane.LoadBench()
		if err != nil {
			clockErr = err
			return
		}
		// Kept open for the process: the clock recalibrates through it.
		if clockHZ, clockErr = b.MeasureHZ(); clockErr != nil {
			return
		}
		clock, clockErr = NewJiffyClock(b.Jiffies, clockHZ)
	})
	if clockErr != nil {
		t.Fatalf("the kernel's jiffies: %v", clockErr)
	}
	return clock
}

// jiffiesOf is d in the kernel's jiffies.
func jiffiesOf(d time.Duration) uint32 { return uint32(d.Seconds() * float64(clockHZ)) }

// validationClock is a Clock for configuration checks that never read
// the time: New checks HZ only.
type validationClock struct{}

func (validationClock) HZ() uint32 { return 250 }
func (validationClock) Jiffies() uint64 {
	panic("connsync: validationClock is for configuration checks only")
}

// Backends every member has, each edge in its own slots: the same
// identities (owner hashes) at different slots and generations.
var (
	ownerNAT   = uint64(0x1111_2222_3333_4444)
	ownerEncap = uint64(0x5555_6666_7777_8888)
	natAddr    = netip.MustParseAddr("198.19.100.1")
	hostAddr   = netip.MustParseAddr("198.18.11.1")
	vip        = netip.MustParseAddr("198.51.100.20")
	client     = netip.MustParseAddr("203.0.113.7")
)

type member struct {
	name   string
	edge   *dataplane.Edge
	ev     *chanEvents
	s      *Syncer
	cancel context.CancelFunc
	done   chan struct{}
	slots  map[uint64]uint32 // owner -> slot
	gens   map[uint64]uint16
}

// newMember loads a data plane with the two backends at base and base+3.
func newMember(t *testing.T, name string, base uint32, gen uint16) *member {
	t.Helper()
	e, err := dataplane.LoadEdgeMaps(dataplane.LoadOptions{ConnMax: 1 << 16, EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	m := &member{name: name, edge: e, ev: newChanEvents(), slots: map[uint64]uint32{ownerNAT: base, ownerEncap: base + 3},
		gens: map[uint64]uint16{ownerNAT: gen, ownerEncap: gen + 1}}
	if err := e.SetBackend(base, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: natAddr, Port: 8080, Gen: gen, Owner: ownerNAT}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetBackend(base+3, dataplane.LBBackend{Mode: dataplane.ModeEncap, Addr: hostAddr, Guest: netip.MustParseAddr("198.19.11.1"),
		VSID: 100, Gen: gen + 1, Owner: ownerEncap}); err != nil {
		t.Fatal(err)
	}
	return m
}

type cluster struct {
	t       *testing.T
	secret  []byte
	mu      sync.Mutex // members: the Syncers' Peers read it
	members map[string]*member
	addrs   sync.Map // name -> netip.AddrPort
	tweak   func(*Config)
}

func newCluster(t *testing.T) *cluster {
	kernelClock(t)
	return &cluster{t: t, secret: bytes.Repeat([]byte{7}, 32), members: map[string]*member{}}
}

// start runs m's Syncer; its peers are every other member of the cluster
// (started or not: one not started has an address nobody listens on).
func (c *cluster) start(m *member, secret []byte) {
	c.t.Helper()
	cfg := Config{Name: m.name, Listen: netip.MustParseAddrPort("127.0.0.1:0"), Secret: secret, Table: m.edge, Events: m.ev, Clock: clock,
		JoinTimeout: 500 * time.Millisecond, IOTimeout: 2 * time.Second, DialTimeout: 200 * time.Millisecond, Refresh: -1,
		Peers: func() ([]Peer, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			var ps []Peer
			for name := range c.members {
				if name == m.name {
					continue
				}
				a, ok := c.addrs.Load(name)
				if !ok {
					a = netip.MustParseAddrPort("127.0.0.1:1") // not listening: refused
				}
				ps = append(ps, Peer{Name: name, Addr: a.(netip.AddrPort)})
			}
			return ps, true
		}}
	if c.tweak != nil {
		c.tweak(&cfg)
	}

	s, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		c.t.Fatal(err)
	}
	c.addrs.Store(m.name, netip.MustParseAddrPort(s.Addr().String()))
	ctx, cancel := context.WithCancel(context.Background())
	m.s, m.cancel, m.done = s, cancel, make(chan struct{})
	go func() { defer close(m.done); s.Run(ctx) }()
	c.t.Cleanup(m.stop)
}

func (m *member) stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
		m.cancel = nil
	}
}

func (c *cluster) add(name string, base uint32, gen uint16) *member {
	m := newMember(c.t, name, base, gen)
	c.mu.Lock()
	c.members[name] = m
	c.mu.Unlock()
	return m
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !f(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

func key(port uint16) dataplane.ConnKey {
	return dataplane.MakeConnKey(client, vip, port, 80, dataplane.ProtoTCP)
}

// emit makes m's "data plane" report an entry on backend owner.
func (m *member) emit(port uint16, owner uint64, kind, state uint8, ageJ uint32) {
	m.ev.ch <- dataplane.ConnEvent{Key: key(port), Backend: uint16(m.slots[owner]), Gen: m.gens[owner],
		Last: uint32(clock.Jiffies()) - ageJ, State: state, FID: uint8(port), Kind: kind}
}

// TestInsertTranslated: an entry A's data plane makes appears on B in B's
// slot and generation of the same backend, aged as on A, with the nat
// reverse entry of a nat-mode backend; a state change follows.
func TestInsertTranslated(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	c.start(a, c.secret)
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })

	j0 := uint32(clock.Jiffies())
	a.emit(50000, ownerNAT, dataplane.ConnEventNew, dataplane.ConnSYN, jiffiesOf(time.Second)) // seen 1 s ago
	a.emit(50001, ownerEncap, dataplane.ConnEventNew, dataplane.ConnEST, 0)
	var got dataplane.ConnEntry
	waitFor(t, "the entries on b", 3*time.Second, func() bool {
		var err error
		got, err = b.edge.LookupConn(key(50000))
		_, err2 := b.edge.LookupConn(key(50001))
		return err == nil && err2 == nil
	})
	j1 := uint32(clock.Jiffies())
	if got.Backend != 10 || got.Gen != 7 || got.State != dataplane.ConnSYN || got.FID != uint8(50000&0xff) {
		t.Fatalf("b's entry %+v: want b's slot 10 generation 7, SYN", got)
	}
	// The entry was 1 s old on a; on b it is older by the time since b
	// applied it, at most the time since the emit (a loaded machine may
	// take seconds to sync: the bound follows the time measured, not an
	// idle machine's).
	age, took := int64(j1-got.Last), int64(j1-j0)
	if age < int64(jiffiesOf(960*time.Millisecond)) || age > int64(jiffiesOf(1200*time.Millisecond))+took {
		t.Fatalf("b's entry is %d jiffies old (HZ %d) %d jiffies after the emit, want about 1 s more than the time since b applied it, as on a", age, clockHZ, took)
	}
	enc, _ := b.edge.LookupConn(key(50001))
	if enc.Backend != 13 || enc.Gen != 8 {
		t.Fatalf("encap entry %+v: want slot 13 generation 8", enc)
	}
	cl, _ := key(50000).Addrs()
	v, err := b.edge.LookupNATConn(netip.AddrPortFrom(natAddr, 8080), cl, dataplane.ProtoTCP)
	if err != nil || v != netip.AddrPortFrom(vip, 80) {
		t.Fatalf("nat reverse entry on b: %v %v, want %v:80", v, err, vip)
	}
	a.emit(50000, ownerNAT, dataplane.ConnEventState, dataplane.ConnEST, 0)
	waitFor(t, "the state change on b", 3*time.Second, func() bool {
		got, _ = b.edge.LookupConn(key(50000))
		return got.State == dataplane.ConnEST
	})
	st := a.s.Status()
	if st.Metrics.Sent < 3 || st.Lag.Samples == 0 {
		t.Fatalf("a's status %+v: want 3 entries sent and lag measured", st)
	}
	if bs := b.s.Status().Metrics; bs.Applied < 3 || bs.Unmapped != 0 {
		t.Fatalf("b's metrics %+v: want 3 applied, none unmapped", bs)
	}
	t.Logf("lag p50 %v p99 %v; bytes per entry %.1f", st.Lag.P50, st.Lag.P99, float64(st.Metrics.SentBytes)/float64(st.Metrics.Sent))
}

// TestUnknownBackend: an entry for a backend the receiver does not have
// yet waits for it (its own watch of the store may lag) and is written
// once it is there; one whose backend never comes is dropped and counted
// after 2 s; one whose slot the sender gave to another backend (its
// generation moved on) is not even sent.
func TestUnknownBackend(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	// a has two backends b does not know (yet).
	for i, o := range []uint64{0xabc, 0xdef} {
		if err := a.edge.SetBackend(uint32(20+i), dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: natAddr, Port: 9, Gen: 1, Owner: o}); err != nil {
			t.Fatal(err)
		}
		a.slots[o], a.gens[o] = uint32(20+i), 1
	}
	c.start(a, c.secret)
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })
	a.emit(50010, 0xabc, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	a.emit(50013, 0xdef, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	a.ev.ch <- dataplane.ConnEvent{Key: key(50011), Backend: 0, Gen: 99, Kind: dataplane.ConnEventNew, State: dataplane.ConnSYN}
	a.emit(50012, ownerNAT, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	waitFor(t, "the known entry on b", 3*time.Second, func() bool { _, err := b.edge.LookupConn(key(50012)); return err == nil })
	if _, err := b.edge.LookupConn(key(50010)); err == nil {
		t.Fatal("an entry for a backend b does not have was written")
	}
	// b's reconciler programs 0xabc now.
	if err := b.edge.SetBackend(30, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: natAddr, Port: 9, Gen: 2, Owner: 0xabc}); err != nil {
		t.Fatal(err)
	}
	var got dataplane.ConnEntry
	waitFor(t, "the parked entry on b", 3*time.Second, func() bool {
		var err error
		got, err = b.edge.LookupConn(key(50010))
		return err == nil
	})
	if got.Backend != 30 || got.Gen != 2 {
		t.Fatalf("parked entry %+v: want slot 30 generation 2", got)
	}
	waitFor(t, "the never-known entry counted", 4*time.Second, func() bool { return b.s.Status().Metrics.Unmapped == 1 })
	if _, err := b.edge.LookupConn(key(50013)); err == nil {
		t.Fatal("an entry for a backend b never had was written")
	}
	if _, err := b.edge.LookupConn(key(50011)); err == nil {
		t.Fatal("an entry of a stale slot generation was written")
	}
	if n := a.s.Status().Metrics.Unmapped; n != 1 {
		t.Fatalf("a counted %d stale events, want 1", n)
	}
}

// fill writes n entries into m's table (as if its data plane made them).
func (m *member) fill(t *testing.T, from uint16, n int) {
	t.Helper()
	var cs []dataplane.SyncedConn
	now := uint32(clock.Jiffies())
	for i := 0; i < n; i++ {
		owner := ownerNAT
		if i%2 == 1 {
			owner = ownerEncap
		}
		k := dataplane.MakeConnKey(netip.AddrFrom4([4]byte{203, 0, 113, byte(i >> 16)}), vip, from+uint16(i), 80, dataplane.ProtoTCP)
		cs = append(cs, dataplane.SyncedConn{Key: k, Backend: uint16(m.slots[owner]), Gen: m.gens[owner], Last: now - uint32(i%100),
			State: dataplane.ConnEST})
	}
	if err := m.edge.ApplyConns(cs); err != nil {
		t.Fatal(err)
	}
}

func countConns(t *testing.T, m *member) (n int, bad int) {
	t.Helper()
	err := m.edge.DumpConns(4096, func(es []dataplane.ConnEntry) error {
		for _, e := range es {
			n++
			if !(e.Backend == uint16(m.slots[ownerNAT]) && e.Gen == m.gens[ownerNAT]) &&
				!(e.Backend == uint16(m.slots[ownerEncap]) && e.Gen == m.gens[ownerEncap]) {
				bad++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, bad
}

// TestFullCopyOnJoin: the first member, alone, is ready once it found no
// live peer; a member that joins is not ready until it pulled a full copy
// of the first's table (translated to its own slots), then is.
func TestFullCopyOnJoin(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	const n = 20000
	a.fill(t, 1000, n)
	c.start(a, c.secret)
	if a.s.Ready() {
		t.Fatal("a is ready at once although its set has another member it has not tried")
	}
	waitFor(t, "a ready as the first", 3*time.Second, a.s.Ready)
	if r := a.s.Reason(); !bytes.Contains([]byte(r), []byte("first")) {
		t.Fatalf("a's reason %q", r)
	}
	c.start(b, c.secret)
	waitFor(t, "b ready", 10*time.Second, b.s.Ready)
	if r := b.s.Reason(); r != fmt.Sprintf("full copy from a: %d entries", n) {
		t.Fatalf("b's reason %q", r)
	}
	got, bad := countConns(t, b)
	if got != n || bad != 0 {
		t.Fatalf("b holds %d entries (%d in slots not its own), want %d", got, bad, n)
	}
}

// TestAuthFailure: a member with another secret is refused both ways and
// counted; it writes nothing into the others' tables, and finding no peer
// that accepts it, it counts itself first.
func TestAuthFailure(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	m := c.add("mallory", 10, 7)
	c.start(a, c.secret)
	waitFor(t, "a ready", 3*time.Second, a.s.Ready)
	c.start(m, bytes.Repeat([]byte{8}, 32))
	m.emit(50020, ownerNAT, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	waitFor(t, "auth failures counted", 5*time.Second, func() bool {
		return a.s.Status().Metrics.AuthFailures > 0 && m.s.Status().Metrics.AuthFailures > 0
	})
	time.Sleep(200 * time.Millisecond)
	if n, _ := countConns(t, a); n != 0 {
		t.Fatalf("a holds %d entries from an unauthenticated peer", n)
	}
	if st := a.s.Status().Metrics; st.Received != 0 || st.Applied != 0 {
		t.Fatalf("a received %d, applied %d from an unauthenticated peer", st.Received, st.Applied)
	}
	waitFor(t, "mallory alone", 3*time.Second, m.s.Ready)
}

// rawSession opens an authenticated session to s as name (a peer's
// client side, by hand).
func rawSession(t *testing.T, s *Syncer, name string, secret []byte) *session {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sess, err := clientHandshake(conn, name, secret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func batchFrame(seq uint64, es ...entry) []byte {
	b := make([]byte, batchHeader+len(es)*entrySize)
	b[0] = frameBatch
	b[1] = byte(seq)
	b[9] = byte(len(es))
	for i := range es {
		encodeEntry(b[batchHeader+i*entrySize:], &es[i])
	}
	return b
}

func wireEntry(port uint16, owner uint64) entry {
	k := key(port)
	return entry{src: k.Src, dst: k.Dst, sport: k.Sport, dport: k.Dport, proto: k.Proto, kind: kindNew, state: dataplane.ConnEST, owner: owner}
}

// TestFaultyStream: garbage before the handshake, a connection cut in
// the middle of a batch, a frame with a bad MAC, an oversized length and
// a malformed batch corrupt nothing and are counted; the stream between
// the real members goes on and its lag stays measured.
func TestFaultyStream(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	c.start(a, c.secret)
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })
	before := b.s.Status().Metrics

	// Garbage instead of a hello.
	conn, err := net.Dial("tcp", b.s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("b answered garbage")
	}
	conn.Close()

	// Cut in the middle of a batch: half a frame, then close.
	s1 := rawSession(t, b.s, "a", c.secret)
	f1 := frameBytes(s1, batchFrame(1, wireEntry(50030, ownerNAT), wireEntry(50031, ownerNAT)))
	s1.c.Write(f1[:len(f1)/2])
	s1.c.Close()

	// A frame whose MAC is wrong (a flipped bit in an entry).
	s3 := rawSession(t, b.s, "a", c.secret)
	f3 := frameBytes(s3, batchFrame(1, wireEntry(50032, ownerNAT)))
	f3[4+batchHeader+4] ^= 1
	s3.c.Write(f3)

	// An oversized length.
	s4 := rawSession(t, b.s, "a", c.secret)
	s4.c.Write([]byte{0xff, 0xff, 0xff, 0x7f})
	// A well-authenticated batch that lies about its entry count.
	s5 := rawSession(t, b.s, "a", c.secret)
	bad := batchFrame(1, wireEntry(50033, ownerNAT))
	bad[9] = 3
	if err := s5.writeFrame(bad); err != nil {
		t.Fatal(err)
	}
	// An authenticated batch with one malformed entry among good ones.
	s6 := rawSession(t, b.s, "a", c.secret)
	zero := wireEntry(50034, ownerNAT)
	zero.owner = 0
	if err := s6.writeFrame(batchFrame(1, zero, wireEntry(50035, ownerNAT))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the faults counted", 5*time.Second, func() bool {
		m := b.s.Status().Metrics
		_, err := b.edge.LookupConn(key(50035)) // the good entry beside a malformed one
		return m.Malformed-before.Malformed >= 3 && m.AuthFailures-before.AuthFailures >= 1 &&
			m.MalformedEntries-before.MalformedEntries == 1 && err == nil
	})
	for _, p := range []uint16{50030, 50031, 50032, 50033, 50034} {
		if _, err := b.edge.LookupConn(key(p)); err == nil {
			t.Fatalf("entry %d written from a faulty stream", p)
		}
	}
	// The real stream goes on.
	lagBefore := a.s.Status().Lag.Samples
	a.emit(50040, ownerNAT, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	waitFor(t, "the stream after the faults", 3*time.Second, func() bool { _, err := b.edge.LookupConn(key(50040)); return err == nil })
	waitFor(t, "lag measured again", 3*time.Second, func() bool { return a.s.Status().Lag.Samples > lagBefore })
	if n, badSlots := countConns(t, b); badSlots != 0 || n != 2 {
		t.Fatalf("b holds %d entries, %d in slots not its own: want the 2 good ones", n, badSlots)
	}
}

// frameBytes is the frame s would send next, captured instead of sent
// (s's sequence moves on as if it had been).
func frameBytes(s *session, body []byte) []byte {
	var buf bytes.Buffer
	real := s.c
	s.c = &captureConn{Conn: real, w: &buf}
	s.writeFrame(body)
	s.c = real
	return buf.Bytes()
}

// captureConn records writes instead of sending them.
type captureConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c *captureConn) Write(b []byte) (int, error) { c.w.Write(b); return len(b), nil }

// TestCutMidSession: the session between two members is cut while
// batches flow (the peer restarts); the sender reconnects, entries sent
// after that arrive, and nothing half-written appears.
func TestCutMidSession(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	c.start(a, c.secret)
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := uint16(1); !stop.Load(); p++ {
			a.emit(p, ownerNAT, dataplane.ConnEventNew, dataplane.ConnEST, 0)
			if p%64 == 0 {
				time.Sleep(time.Millisecond)
			}
			if p == 60000 {
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	// Cut: b's syncer stops (closing its sessions) and starts again on
	// the same maps and address.
	addr, _ := c.addrs.Load("b")
	b.stop()
	c.tweak = func(cfg *Config) {
		if cfg.Name == "b" {
			cfg.Listen = addr.(netip.AddrPort)
		}
	}
	c.start(b, c.secret)
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	a.emit(65000, ownerNAT, dataplane.ConnEventNew, dataplane.ConnEST, 0)
	waitFor(t, "the last entry after the cut", 5*time.Second, func() bool { _, err := b.edge.LookupConn(key(65000)); return err == nil })
	if _, bad := countConns(t, b); bad != 0 {
		t.Fatalf("%d entries in slots not b's", bad)
	}
	if st := a.s.Status().Metrics; st.Sessions < 2 {
		t.Fatalf("a established %d sessions, want a reconnect", st.Sessions)
	}
}

// TestQueueOverflow: a peer that accepts nothing (down) fills its queue;
// the reader goes on reading the ring and counts the drops.
func TestQueueOverflow(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	c.add("b", 10, 7) // never started
	c.tweak = func(cfg *Config) { cfg.QueueBatches = 2; cfg.BatchMax = 10 }
	c.start(a, c.secret)
	waitFor(t, "a ready", 3*time.Second, a.s.Ready)
	const n = 1000
	for i := 0; i < n; i++ {
		a.emit(uint16(i+1), ownerNAT, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	}
	waitFor(t, "every event read", 3*time.Second, func() bool { return a.s.Status().Metrics.Events == n })
	st := a.s.Status()
	if st.Metrics.QueueDrops < n-2*10 {
		t.Fatalf("dropped %d entries, want at least %d (a queue of 2 batches of 10)", st.Metrics.QueueDrops, n-20)
	}
	if len(st.Peers) != 1 || st.Peers[0].Connected {
		t.Fatalf("peers %+v", st.Peers)
	}
}

func TestConfigRefused(t *testing.T) {
	ok := Config{Name: "a", Listen: netip.MustParseAddrPort("198.18.0.1:7946"), Secret: make([]byte, 32),
		Peers: func() ([]Peer, bool) { return nil, true }, Table: (*dataplane.Edge)(nil), Clock: validationClock{}}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Config){
		"wildcard listen": func(c *Config) { c.Listen = netip.MustParseAddrPort("0.0.0.0:7946") },
		"short secret":    func(c *Config) { c.Secret = make([]byte, 8) },
		"no name":         func(c *Config) { c.Name = "" },
		"no table":        func(c *Config) { c.Table = nil },
	} {
		c := ok
		f(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSessionCap: connections beyond MaxSessions are closed at once and
// counted; the member's own peer still gets through once they go.
func TestSessionCap(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	c.start(a, c.secret)
	var conns []net.Conn
	for i := 0; i < MaxSessions+5; i++ {
		conn, err := net.Dial("tcp", a.s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	waitFor(t, "the excess refused", 3*time.Second, func() bool { return a.s.Status().Metrics.Refused >= 5 })
	for _, conn := range conns {
		conn.Close()
	}
	b := c.add("b", 10, 7)
	c.start(b, c.secret)
	waitFor(t, "b's session after the flood", 5*time.Second, func() bool {
		p := b.s.Status().Peers
		return len(p) == 1 && p[0].Connected
	})
}

// TestRefresh: entries used since the last refresh are sent again with
// their current age (so the peers' copies of long-lived flows do not
// expire); entries idle for longer are not.
func TestRefresh(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	c.tweak = func(cfg *Config) {
		if cfg.Name == "a" {
			cfg.Refresh = 500 * time.Millisecond
		}
	}
	c.start(b, c.secret)
	waitFor(t, "b ready", 3*time.Second, b.s.Ready)
	c.start(a, c.secret)
	waitFor(t, "a ready", 5*time.Second, a.s.Ready)
	now := uint32(clock.Jiffies())
	var cs []dataplane.SyncedConn
	for i, age := range []uint32{0, jiffiesOf(200 * time.Millisecond), jiffiesOf(time.Minute)} { // now, 200 ms ago, a minute ago
		cs = append(cs, dataplane.SyncedConn{Key: key(uint16(52000 + i)), Backend: uint16(a.slots[ownerEncap]), Gen: a.gens[ownerEncap],
			Last: now - age, State: dataplane.ConnEST})
	}
	if err := a.edge.ApplyConns(cs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the used entries refreshed on b", 3*time.Second, func() bool {
		_, e0 := b.edge.LookupConn(key(52000))
		_, e1 := b.edge.LookupConn(key(52001))
		return e0 == nil && e1 == nil
	})
	if _, err := b.edge.LookupConn(key(52002)); err == nil {
		t.Fatal("an entry idle for a minute was refreshed")
	}
	got, _ := b.edge.LookupConn(key(52001))
	// Its age: the 200 ms it had when a was given it, plus the time since
	// (however long a loaded machine took to refresh it), within a
	// margin of clock ticks; not a fixed bound.
	waited := uint32(clock.Jiffies()) - now
	if age := uint32(clock.Jiffies()) - got.Last; got.Backend != 13 || age < jiffiesOf(160*time.Millisecond) || age > jiffiesOf(200*time.Millisecond)+waited+jiffiesOf(100*time.Millisecond) {
		t.Fatalf("refreshed entry %+v, %d jiffies old after %d jiffies (HZ %d): want b's slot 13, 200 ms plus the wait", got, age, waited, clockHZ)
	}
	if a.s.Status().Metrics.Refreshed < 2 {
		t.Fatal("refreshes not counted")
	}
}

// TestJoinTogether: two members that start together, beside a member
// that holds the table, both take their copy from it, never from each
// other (a starting member's copy is no proof of a complete table); and
// members that all start together with nobody ready are ready after the
// join timeout.
func TestJoinTogether(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	const n = 1000
	a.fill(t, 2000, n)
	c.start(a, c.secret)
	waitFor(t, "a ready", 3*time.Second, a.s.Ready)
	b := c.add("b", 10, 7)
	d := c.add("d", 20, 3)
	c.start(b, c.secret)
	c.start(d, c.secret)
	waitFor(t, "b and d ready", 10*time.Second, func() bool { return b.s.Ready() && d.s.Ready() })
	for _, m := range []*member{b, d} {
		if r := m.s.Reason(); r != fmt.Sprintf("full copy from a: %d entries", n) {
			t.Fatalf("%s: %q", m.name, r)
		}
		if got, bad := countConns(t, m); got != n || bad != 0 {
			t.Fatalf("%s holds %d entries (%d in slots not its own), want %d", m.name, got, bad, n)
		}
	}

	c2 := newCluster(t)
	x := c2.add("x", 0, 1)
	y := c2.add("y", 10, 7)
	c2.start(x, c2.secret)
	c2.start(y, c2.secret)
	waitFor(t, "x and y ready", 5*time.Second, func() bool { return x.s.Ready() && y.s.Ready() })
	t.Logf("x: %s; y: %s", x.s.Reason(), y.s.Reason())
}

// TestNonMemberRefused: a node that holds the region's secret but is not
// a member of the set (or claims a member's name from another address)
// is refused and counted.
func TestNonMemberRefused(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	c.start(a, c.secret)
	before := a.s.Status().Metrics.AuthFailures
	sess := rawSession(t, a.s, "stranger", c.secret)
	sess.writeFrame(batchFrame(1, wireEntry(53000, ownerNAT))) // may fail: a closes
	waitFor(t, "the stranger refused", 3*time.Second, func() bool { return a.s.Status().Metrics.AuthFailures > before })
	time.Sleep(100 * time.Millisecond)
	if _, err := a.edge.LookupConn(key(53000)); err == nil {
		t.Fatal("a non-member's entry was written")
	}
	c.add("b", 10, 7) // a member (not started: its address in the set is 127.0.0.1)
	if err := a.s.isMember("b", &net.TCPAddr{IP: net.ParseIP("127.0.0.2"), Port: 1}); err == nil {
		t.Fatal("a member's name from another address was accepted")
	}
	if err := a.s.isMember("b", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}); err != nil {
		t.Fatalf("a member from its address: %v", err)
	}
}

// Package connsync streams the connection entries of an edge to the other
// members of its edge set, so that a member that takes a flow over (ECMP
// rehashes it when another member dies or is drained) finds the entry the
// flow was given, and with it the backend, even where Maglev would now
// choose another (a backend changed since the flow began). Issue 8 part 5;
// docs/connsync.md.
//
// The data plane writes an event into a ring buffer when it makes an
// entry or changes its TCP state (bpf/lib/lb.h ct_emit). The Syncer reads
// them, translates what is local to this edge (the backend slot becomes
// the backend's identity, the jiffies an age), batches them (at most
// BatchMax entries or BatchDelay) and queues each batch for every peer
// (bounded: a full queue drops and counts, the reader never blocks). Each
// peer's session sends its queue over TCP on the underlay, authenticated
// with the region's shared secret; the receiver translates back to its own
// slots and clock and writes the entries into its maps. A member that
// starts pulls a full copy from a live peer before it reports Ready.
package connsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// Table is what the Syncer needs of the data plane's maps
// (*dataplane.Edge).
type Table interface {
	Backends() (map[uint32]dataplane.LBBackend, error)
	ApplyConns([]dataplane.SyncedConn) error
	DumpConns(chunk int, f func([]dataplane.ConnEntry) error) error
}

// Events is the data plane's event ring (*dataplane.ConnEventReader).
type Events interface {
	Read(*dataplane.ConnEvent) error
	SetDeadline(time.Time)
	Close() error
}

// Clock reads the kernel's jiffies, the data plane's time.
type Clock interface {
	Jiffies() uint64
	HZ() uint32
}

// Peer is another member of the edge set.
type Peer struct {
	Name string
	Addr netip.AddrPort // its underlay address and sync port
}

// Config of a Syncer.
type Config struct {
	Name   string         // this edge
	Listen netip.AddrPort // the underlay address and port to listen on
	Secret []byte         // the region's sync secret (store.Secrets)
	// Peers returns the other members of the set; known false: the set
	// is not known yet (the store has not been read).
	Peers  func() (peers []Peer, known bool)
	Table  Table
	Events Events // nil: receive only
	// SetEvents switches the data plane's events on while the set has
	// another member and off while it has none (nil: left as it is).
	SetEvents func(on bool) error
	Clock     Clock
	Log       *slog.Logger

	// MaxAge: entries last seen longer ago are not sent in a full copy or
	// a refresh (the longest connection timeout; 0: 15 minutes).
	MaxAge time.Duration
	// Refresh: entries used since the last refresh are sent again every
	// Refresh (0: 30 s), so the peers' copies of long-lived flows do not
	// expire (docs/connsync.md, "Expiry"). Negative: never.
	Refresh      time.Duration
	BatchMax     int           // entries per batch (0: 256)
	BatchDelay   time.Duration // the longest an event waits for its batch (0: 1 ms)
	QueueBatches int           // batches queued per peer (0: 1024)
	IOTimeout    time.Duration // every read and write (0: 5 s); idle sessions ping at a third of it
	DialTimeout  time.Duration // 0: 2 s
	// JoinTimeout: a member that finds no live peer for this long after
	// it learnt its set is the first and Ready (0: 10 s).
	JoinTimeout time.Duration
	// LagHorizon: the lag figures (Status) are of the batches
	// acknowledged within this long (0: 1 minute).
	LagHorizon time.Duration
}

func (c *Config) defaults() {
	if c.MaxAge == 0 {
		c.MaxAge = 15 * time.Minute
	}
	if c.Refresh == 0 {
		c.Refresh = 30 * time.Second
	}
	if c.BatchMax <= 0 {
		c.BatchMax = 256
	}
	c.BatchMax = min(c.BatchMax, maxBatchWire, 65535)
	if c.BatchDelay <= 0 {
		c.BatchDelay = time.Millisecond
	}
	if c.QueueBatches <= 0 {
		c.QueueBatches = 1024
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = 5 * time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 10 * time.Second
	}
	if c.LagHorizon <= 0 {
		c.LagHorizon = time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// batch is a run of encoded entries, shared (read only) by every peer's
// queue.
type batch struct {
	n     int
	v6    bool      // IPv6 VIPs' entries (frameBatch6, entry6Size each)
	buf   []byte    // n entries
	first time.Time // when its oldest event happened (lag)
}

// Syncer runs the connection sync of one edge.
type Syncer struct {
	cfg Config
	m   Metrics
	be  *backends
	lag *lagWindow

	ready   atomic.Bool
	reason  atomic.Pointer[string]
	dumpMu  sync.Mutex // one full copy at a time
	live    atomic.Int32
	appMu   sync.Mutex // ApplyConns' callers (sessions) one at a time
	lastRef time.Time

	mu    sync.Mutex
	peers map[string]*peerLink
	links sync.WaitGroup // the peers' goroutines: Run waits for them
	ln    net.Listener

	// Entries whose backend this edge does not have yet: a service's
	// first connections can reach it before its own watch of the store
	// has programmed the backend. Retried for parkFor, then dropped.
	parkMu sync.Mutex
	parked []parkedEntry
}

// parkedEntry is an entry waiting for its backend.
type parkedEntry struct {
	e     entry
	since time.Time
}

const (
	parkFor = 2 * time.Second
	parkMax = 65536
)

// New checks the configuration and makes a Syncer (Run starts it).
func New(cfg Config) (*Syncer, error) {
	cfg.defaults()
	switch {
	case cfg.Name == "" || len(cfg.Name) > maxName:
		return nil, fmt.Errorf("connsync: name %q: 1 to %d bytes", cfg.Name, maxName)
	case !cfg.Listen.IsValid() || cfg.Listen.Addr().IsUnspecified():
		return nil, fmt.Errorf("connsync: listen address %v: must be the edge's underlay address and a port (not a wildcard)", cfg.Listen)
	case len(cfg.Secret) < 16:
		return nil, errors.New("connsync: secret: at least 16 bytes")
	case cfg.Peers == nil || cfg.Table == nil || cfg.Clock == nil:
		return nil, errors.New("connsync: Peers, Table and Clock are required")
	case cfg.Clock.HZ() == 0:
		return nil, errors.New("connsync: clock HZ is 0")
	}
	s := &Syncer{cfg: cfg, be: newBackends(cfg.Table), lag: newLagWindow(8192, cfg.LagHorizon), peers: map[string]*peerLink{}}
	s.setReason("waiting for the edge set from the store")
	return s, nil
}

func (s *Syncer) setReason(r string) { s.reason.Store(&r) }

// Ready reports whether this member holds the connection table a member
// of its set needs (a full copy from a live peer, or no live peer: it is
// the first), and why (or why not). The announcer gates BGP on it.
func (s *Syncer) Ready() bool { return s.ready.Load() }

// Reason says why Ready is what it is.
func (s *Syncer) Reason() string { return *s.reason.Load() }

func (s *Syncer) becomeReady(why string) {
	s.setReason(why)
	if !s.ready.Swap(true) {
		s.cfg.Log.Info("connection sync ready", "why", why)
	}
}

// Addr is the address the Syncer listens on (after Run started).
func (s *Syncer) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Listen opens the listening socket (Run calls it if not done before).
func (s *Syncer) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Listen.String())
	if err != nil {
		return fmt.Errorf("connsync: listen on %v: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	return nil
}

// Run syncs until ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.accept(ctx) }()
	go func() { defer wg.Done(); s.manage(ctx) }()
	if s.cfg.Events != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.readEvents(ctx) }()
	}
	<-ctx.Done()
	s.mu.Lock()
	s.ln.Close()
	for _, p := range s.peers {
		p.stop()
	}
	s.mu.Unlock()
	if s.cfg.Events != nil {
		s.cfg.Events.SetDeadline(time.Now()) // wakes the reader
	}
	wg.Wait()
	s.links.Wait() // after manage: it starts them
	return nil
}

// manage follows the set's membership (a session per peer) and decides
// readiness; it also runs the periodic refresh.
func (s *Syncer) manage(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var known time.Time
	lastLive := time.Time{}
	s.lastRef = time.Now()
	eventsOn := -1 // unknown
	for {
		peers, ok := s.cfg.Peers()
		if ok {
			if known.IsZero() {
				known = time.Now()
			}
			s.setPeers(ctx, peers)
			if on := min(len(peers), 1); on != eventsOn {
				if s.cfg.SetEvents == nil {
					eventsOn = on
				} else if err := s.cfg.SetEvents(on == 1); err != nil {
					s.cfg.Log.Warn("connection sync: cannot switch the data plane's events", "on", on == 1, "err", err)
				} else {
					eventsOn = on
				}
			}
			if s.live.Load() > 0 {
				lastLive = time.Now()
			}
			if !s.ready.Load() {
				switch {
				case len(peers) == 0:
					s.becomeReady("no other member in the set")
				case s.live.Load() == 0 && time.Since(known) > s.cfg.JoinTimeout && time.Since(lastLive) > s.cfg.JoinTimeout:
					s.becomeReady(fmt.Sprintf("no live peer for %v: this member is the first", s.cfg.JoinTimeout))
				case time.Since(known) > s.cfg.JoinTimeout && s.allStarting():
					// The whole set (re)starts: every live peer is
					// pulling its copy too, and each has sent what it
					// had. Waiting longer would wait for each other.
					s.becomeReady("every live peer is starting too: this member is among the first")
				}
			}
		}
		s.retryParked()
		if s.cfg.Events != nil && s.cfg.Refresh > 0 && eventsOn == 1 && time.Since(s.lastRef) >= s.cfg.Refresh {
			s.lastRef = time.Now()
			if err := s.refresh(ctx); err != nil {
				s.cfg.Log.Warn("connection sync refresh failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// allStarting: at least one session is up, and every peer with a
// session up answered its last full copy as starting itself.
func (s *Syncer) allStarting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.peers {
		if !l.status().Connected {
			continue
		}
		if l.peerState.Load() != peerStarting {
			return false
		}
		n++
	}
	return n > 0
}

func (s *Syncer) setPeers(ctx context.Context, peers []Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]Peer{}
	for _, p := range peers {
		if p.Name != s.cfg.Name && p.Addr.IsValid() {
			want[p.Name] = p
		}
	}
	moved := map[string]*peerLink{}
	for name, l := range s.peers {
		if w, ok := want[name]; !ok || w.Addr != l.peer.Addr {
			l.stop()
			delete(s.peers, name)
			if ok {
				moved[name] = l
			}
		}
	}
	for name, p := range want {
		if _, ok := s.peers[name]; !ok {
			l := newPeerLink(s, p)
			if old := moved[name]; old != nil {
				l.takeQueue(old)
			}
			s.peers[name] = l
			s.links.Add(1)
			go func() { defer s.links.Done(); l.run(ctx) }()
		}
	}
}

// enqueue offers a batch to every peer; a full queue drops it (counted).
func (s *Syncer) enqueue(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.peers {
		select {
		case l.q <- b:
		default:
			l.noteDrop(b.n)
		}
	}
}

// readEvents is the ring buffer's reader: it never blocks on the network.
// IPv4 and IPv6 entries go in batches of their own (frameBatch,
// frameBatch6), each closed at BatchMax entries or BatchDelay after its
// first event.
func (s *Syncer) readEvents(ctx context.Context) {
	ev := dataplane.ConnEvent{}
	newBatch := func(v6 bool) *batch {
		if v6 {
			return &batch{v6: true, buf: make([]byte, 0, s.cfg.BatchMax*entry6Size)}
		}
		return &batch{buf: make([]byte, 0, s.cfg.BatchMax*entrySize)}
	}
	open := [2]*batch{newBatch(false), newBatch(true)}
	var deadline time.Time // the earlier open batch's
	flushOne := func(i int) {
		if open[i].n == 0 {
			return
		}
		s.enqueue(open[i])
		s.m.Batches.Add(1)
		open[i] = newBatch(i == 1)
	}
	flush := func() {
		flushOne(0)
		flushOne(1)
		deadline = time.Time{}
	}
	hz := uint64(s.cfg.Clock.HZ())
	var e entry
	// The clocks are read once per 32 events (and at a batch's start):
	// within a jiffy of the truth, at a fraction of the cost per event.
	var nowJ uint64
	var nowT time.Time
	stale := 0
	for ctx.Err() == nil {
		if deadline.IsZero() {
			s.cfg.Events.SetDeadline(time.Now().Add(100 * time.Millisecond))
		} else {
			s.cfg.Events.SetDeadline(deadline)
		}
		err := s.cfg.Events.Read(&ev)
		if err != nil {
			if errors.Is(err, dataplane.ErrNoEvent) {
				flush()
				continue
			}
			if errors.Is(err, dataplane.ErrClosed) {
				return
			}
			s.m.Malformed.Add(1)
			continue
		}
		s.m.Events.Add(1)
		fam := 0
		if ev.Key.V6 {
			fam = 1
			s.m.Events6.Add(1)
		}
		b := open[fam]
		owner, ok := s.be.owner(uint32(ev.Backend), ev.Gen)
		if !ok {
			s.m.Unmapped.Add(1) // its slot was given to another backend since
			continue
		}
		if stale == 0 || b.n == 0 {
			nowJ, nowT, stale = s.cfg.Clock.Jiffies(), time.Now(), 32
		}
		stale--
		ageJ := uint64(uint32(nowJ) - ev.Last)
		if ageJ > 1<<31 {
			ageJ = 0 // an event "from the future": the clock's rounding
		}
		ageMS := ageJ * 1000 / hz
		e = entryOf(&ev.Key)
		e.kind, e.state, e.fid, e.owner, e.ageMS = ev.Kind, ev.State, ev.FID, owner, uint32(min(ageMS, 1<<31))
		if b.n == 0 {
			b.first = nowT.Add(-time.Duration(ageMS) * time.Millisecond)
			if d := nowT.Add(s.cfg.BatchDelay); deadline.IsZero() || d.Before(deadline) {
				deadline = d
			}
		}
		b.put(&e)
		if b.n >= s.cfg.BatchMax {
			flushOne(fam)
		}
		if stale == 0 && !deadline.IsZero() && time.Now().After(deadline) {
			flush()
		}
	}
}

// entryOf is an entry with key k's flow (the rest zero).
func entryOf(k *dataplane.ConnKey) entry {
	if k.V6 {
		return entry{v6: true, src6: k.Src6, dst6: k.Dst6, sport: k.Sport, dport: k.Dport, proto: k.Proto}
	}
	return entry{src: k.Src, dst: k.Dst, sport: k.Sport, dport: k.Dport, proto: k.Proto}
}

// key is the entry's connection-table key.
func (e *entry) key() dataplane.ConnKey {
	if e.v6 {
		return dataplane.ConnKey{V6: true, Src6: e.src6, Dst6: e.dst6, Sport: e.sport, Dport: e.dport, Proto: e.proto}
	}
	return dataplane.ConnKey{Src: e.src, Dst: e.dst, Sport: e.sport, Dport: e.dport, Proto: e.proto}
}

// walk reads the local table and encodes its entries as kind, skipping
// those last seen more than maxAge ago, in batches passed to f.
func (s *Syncer) walk(kind uint8, maxAge time.Duration, f func(*batch) error) (int, error) {
	bySlot := s.be.snapshot()
	hz := uint64(s.cfg.Clock.HZ())
	maxJ := uint64(maxAge.Seconds() * float64(hz))
	now := uint32(s.cfg.Clock.Jiffies())
	total := 0
	b := &batch{buf: make([]byte, 0, s.cfg.BatchMax*entry6Size), first: time.Now()}
	var e entry
	err := s.cfg.Table.DumpConns(s.cfg.BatchMax, func(es []dataplane.ConnEntry) error {
		for i := range es {
			c := &es[i]
			if c.Key.V6 != b.v6 { // DumpConns: one family per chunk, IPv4 first
				if b.n > 0 {
					if err := f(b); err != nil {
						return err
					}
				}
				b = &batch{v6: c.Key.V6, buf: make([]byte, 0, s.cfg.BatchMax*entry6Size), first: time.Now()}
			}
			be, ok := bySlot[uint32(c.Backend)]
			if !ok || be.Gen != c.Gen || be.Owner == 0 {
				continue // a slot given to another backend: the entry is dead here too
			}
			ageJ := uint64(now - c.Last)
			if ageJ > 1<<31 {
				ageJ = 0
			}
			if ageJ > maxJ {
				continue
			}
			e = entryOf(&c.Key)
			e.kind, e.state, e.fid, e.owner, e.ageMS = kind, c.State, c.FID, be.Owner, uint32(ageJ*1000/hz)
			b.put(&e)
			total++
			if b.n >= s.cfg.BatchMax {
				if err := f(b); err != nil {
					return err
				}
				b = &batch{v6: b.v6, buf: make([]byte, 0, s.cfg.BatchMax*entry6Size), first: time.Now()}
			}
		}
		return nil
	})
	if err == nil && b.n > 0 {
		err = f(b)
	}
	return total, err
}

// enqueueBulk offers a batch of the refresh to every connected peer,
// waiting while the peer's queue is half full (the other half stays for
// the ring's events, which never wait) for at most the I/O timeout.
func (s *Syncer) enqueueBulk(ctx context.Context, b *batch) {
	s.mu.Lock()
	links := make([]*peerLink, 0, len(s.peers))
	for _, l := range s.peers {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		if !l.status().Connected {
			continue
		}
		deadline := time.Now().Add(s.cfg.IOTimeout)
		for len(l.q) >= cap(l.q)/2 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		select {
		case l.q <- b:
		default:
			l.noteDrop(b.n)
		}
	}
}

// refresh sends again, to every connected peer, the entries used since
// the last refresh (docs/connsync.md, "Expiry"), at the pace the peers
// take them.
func (s *Syncer) refresh(ctx context.Context) error {
	n, err := s.walk(kindRefresh, s.cfg.Refresh+time.Second, func(b *batch) error {
		s.enqueueBulk(ctx, b)
		return ctx.Err()
	})
	s.m.Refreshed.Add(uint64(n))
	return err
}

// apply translates received entries (of frameBatch, or frameBatch6 if
// v6) to this edge and writes them.
func (s *Syncer) apply(entries []byte, v6 bool, buf []dataplane.SyncedConn) (applied, unmapped int, err error) {
	now := uint32(s.cfg.Clock.Jiffies())
	hz := uint64(s.cfg.Clock.HZ())
	buf = buf[:0]
	var e entry
	size, decode := entrySize, decodeEntry
	if v6 {
		size, decode = entry6Size, decodeEntry6
		s.m.Received6.Add(uint64(len(entries) / size))
	}
	for off := 0; off+size <= len(entries); off += size {
		if decode(entries[off:off+size], &e) != nil {
			s.m.MalformedEntries.Add(1)
			continue
		}
		c, ok := s.translate(&e, now, hz)
		if !ok {
			unmapped++
			s.park(e, time.Now())
			continue
		}
		buf = append(buf, c)
	}
	return s.write(buf, unmapped)
}

// translate turns a received entry into this edge's slot and clock.
func (s *Syncer) translate(e *entry, now uint32, hz uint64) (dataplane.SyncedConn, bool) {
	idx, be, ok := s.be.slot(e.owner)
	if !ok {
		return dataplane.SyncedConn{}, false
	}
	c := dataplane.SyncedConn{Key: e.key(),
		Backend: uint16(idx), Gen: be.Gen, Last: now - uint32(uint64(e.ageMS)*hz/1000), State: e.state, FID: e.fid}
	if be.Mode == dataplane.ModeNAT {
		c.NAT = true
		if e.v6 {
			// An IPv6 VIP's nat backend: its reverse entry in
			// lb_nat_conns6. A backend of the other family is not
			// this entry's (the model refuses one).
			w, ok := dataplane.AddrWords6(be.Addr)
			if !ok {
				return dataplane.SyncedConn{}, false
			}
			c.BAddr6 = w
		} else if !be.Addr.Is4() {
			return dataplane.SyncedConn{}, false
		} else {
			c.BAddr = dataplane.AddrWord(be.Addr)
		}
		c.BPort = e.dport // the backend has no port of its own: the VIP's
		if be.Port != 0 {
			c.BPort = dataplane.PortWord(be.Port)
		}
	}
	return c, true
}

// park keeps an entry whose backend is unknown, for retry.
func (s *Syncer) park(e entry, now time.Time) {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	if len(s.parked) >= parkMax {
		s.m.Unmapped.Add(1)
		return
	}
	s.parked = append(s.parked, parkedEntry{e: e, since: now})
}

// retryParked applies the parked entries whose backend is now known (aged
// by the time they waited) and drops, counted, those parked too long.
func (s *Syncer) retryParked() {
	s.parkMu.Lock()
	ps := s.parked
	s.parked = nil
	s.parkMu.Unlock()
	if len(ps) == 0 {
		return
	}
	now := uint32(s.cfg.Clock.Jiffies())
	hz := uint64(s.cfg.Clock.HZ())
	var buf []dataplane.SyncedConn
	var keep []parkedEntry
	for _, p := range ps {
		e := p.e
		e.ageMS += uint32(time.Since(p.since).Milliseconds())
		if c, ok := s.translate(&e, now, hz); ok {
			buf = append(buf, c)
		} else if time.Since(p.since) < parkFor {
			keep = append(keep, p)
		} else {
			s.m.Unmapped.Add(1)
		}
	}
	if len(keep) > 0 {
		s.parkMu.Lock()
		s.parked = append(s.parked, keep...)
		s.parkMu.Unlock()
	}
	if _, _, err := s.write(buf, 0); err != nil {
		s.cfg.Log.Warn("connection sync: parked entries not written", "err", err)
	}
}

// write applies translated entries.
func (s *Syncer) write(buf []dataplane.SyncedConn, unmapped int) (applied, unmappedOut int, err error) {
	if len(buf) == 0 {
		return 0, unmapped, nil
	}
	s.appMu.Lock()
	err = s.cfg.Table.ApplyConns(buf)
	s.appMu.Unlock()
	if err != nil {
		s.m.ApplyErrors.Add(1)
		return 0, unmapped, err
	}
	s.m.Applied.Add(uint64(len(buf)))
	return len(buf), unmapped, nil
}

// Status is what the Syncer reports (node status, /metrics).
type Status struct {
	Ready   bool
	Reason  string
	Peers   []PeerStatus
	Metrics MetricsSnapshot
	Lag     LagSnapshot
}

// PeerStatus is one peer's session.
type PeerStatus struct {
	Name      string
	Addr      string
	Connected bool
	Queued    int // batches waiting
	Error     string
}

// Status reads the Syncer's state.
func (s *Syncer) Status() Status {
	st := Status{Ready: s.Ready(), Reason: s.Reason(), Metrics: s.m.Snapshot(), Lag: s.lag.snapshot()}
	s.mu.Lock()
	for _, l := range s.peers {
		st.Peers = append(st.Peers, l.status())
	}
	s.mu.Unlock()
	sort.Slice(st.Peers, func(i, j int) bool { return st.Peers[i].Name < st.Peers[j].Name })
	return st
}

package connsync

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// peerLink is this edge's session to one peer: it dials the peer, sends
// this edge's batches and reads the peer's acknowledgements (and, while
// this member is not ready, the full copy it asked for).
type peerLink struct {
	s    *Syncer
	peer Peer
	q    chan *batch

	stopOnce sync.Once
	stopCh   chan struct{}

	mu        sync.Mutex
	connected bool
	lastErr   string

	peerState atomic.Int32 // peerUnknown, peerStarting, peerReady: from the peer's last copy

	// resend holds the batches a session sent but the peer did not
	// acknowledge before the session ended (lost in the connection, or
	// applied but the ack lost): the next session sends them first, in
	// their order, before anything queued after them. Only run's
	// goroutine (its sessions, one at a time) touches it.
	resend []*batch
	// dropped is when this peer's queue first dropped a batch since its
	// last catch-up (unix ns; 0: none): the next session sends again
	// every entry used since then (catchUp).
	dropped atomic.Int64
}

// noteDrop records a batch dropped for this peer.
func (l *peerLink) noteDrop(n int) {
	l.s.m.QueueDrops.Add(uint64(n))
	l.dropped.CompareAndSwap(0, time.Now().UnixNano())
}

// sentBatch is a batch written to the peer and not yet acknowledged.
type sentBatch struct {
	seq uint64
	b   *batch
}

// What a peer's last full copy said of it.
const (
	peerUnknown  = 0
	peerStarting = 1 // it was pulling its own copy
	peerReady    = 2
)

func newPeerLink(s *Syncer, p Peer) *peerLink {
	return &peerLink{s: s, peer: p, q: make(chan *batch, s.cfg.QueueBatches), stopCh: make(chan struct{})}
}

func (l *peerLink) stop() { l.stopOnce.Do(func() { close(l.stopCh) }) }

// takeQueue, for a peer whose address changed (a new link replaces the
// stopped old one), drops what the old link still queued, counted as
// queue drops, and has the new link catch the peer up on every entry used
// since the oldest of them (or since the old link's own first drop), as
// after a full queue. Batches the old link sent and the peer did not
// acknowledge are not among them: the old link's goroutine owns those.
func (l *peerLink) takeQueue(old *peerLink) {
	since := old.dropped.Load()
	for {
		select {
		case b := <-old.q:
			l.s.m.QueueDrops.Add(uint64(b.n))
			if t := b.first.UnixNano(); since == 0 || t < since {
				since = t
			}
			continue
		default:
		}
		break
	}
	if since != 0 {
		l.dropped.Store(since)
	}
}

func (l *peerLink) status() PeerStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return PeerStatus{Name: l.peer.Name, Addr: l.peer.Addr.String(), Connected: l.connected, Queued: len(l.q), Error: l.lastErr}
}

func (l *peerLink) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := l.session(ctx)
		l.mu.Lock()
		l.connected = false
		if err != nil {
			l.lastErr = err.Error()
		}
		l.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			l.s.cfg.Log.Debug("connection sync session ended", "peer", l.peer.Name, "err", err)
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-l.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// countErr books a session's end by cause.
func (s *Syncer) countErr(err error) {
	switch {
	case errors.Is(err, errAuth):
		s.m.AuthFailures.Add(1)
	case errors.Is(err, errMalformed):
		s.m.Malformed.Add(1)
	}
}

// session runs one session to the peer: dial and handshake, ask for a
// full copy if this member needs one, read the peer's frames on a
// goroutine of its own, then send what the last session left
// unacknowledged, catch up after drops and stream the queue. It returns
// when the session ends; on return nothing of it touches the maps.
func (l *peerLink) session(ctx context.Context) error {
	s := l.s
	c, sess, err := l.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	l.mu.Lock()
	l.connected, l.lastErr = true, ""
	l.mu.Unlock()
	s.live.Add(1)
	defer s.live.Add(-1)
	s.m.Sessions.Add(1)

	l.peerState.Store(peerUnknown)
	defer l.peerState.Store(peerUnknown)
	// This release's features first: before the dump request, so the
	// peer knows whether it may send this member IPv6 entries.
	if err := sess.writeFrame(featuresFrame); err != nil {
		return err
	}
	pull := &dumpPull{l: l}
	if err := pull.request(sess); err != nil {
		return err
	}
	defer pull.release()
	win, err := newAckWindow(cap(l.q), s.lag.add)
	if err != nil {
		return err
	}
	// What the window holds when the session ends is the next one's to
	// send first (l.resend holds those not yet resent).
	defer func() { l.resend = append(win.take(), l.resend...) }()
	ls := &linkSession{l: l, sess: sess, win: win, pull: pull, featKnown: make(chan struct{})}

	// On return: the reader is told to stop, the connection closed (its
	// read fails at once), and the reader waited for, so nothing writes
	// the maps after the session ended.
	rerr := make(chan error, 1)
	done := make(chan struct{})
	var reader sync.WaitGroup
	defer reader.Wait()
	defer c.Close()
	defer close(done)
	reader.Go(func() { rerr <- ls.read(done) })

	if err := ls.resendPending(); err != nil {
		return err
	}
	if err := ls.catchUp(ctx); err != nil {
		return err
	}
	return ls.stream(ctx, rerr)
}

// dial connects to the peer from this member's listen address (the
// address the peer's set holds for it) and authenticates both ways; the
// peer must answer with the name this member's set gives it.
func (l *peerLink) dial(ctx context.Context) (net.Conn, *session, error) {
	s := l.s
	d := net.Dialer{Timeout: s.cfg.DialTimeout, LocalAddr: &net.TCPAddr{IP: s.cfg.Listen.Addr().AsSlice()}}
	c, err := d.DialContext(ctx, "tcp", l.peer.Addr.String())
	if err != nil {
		return nil, nil, err
	}
	sess, err := clientHandshake(c, s.cfg.Name, s.cfg.Secret, s.cfg.IOTimeout)
	if err != nil {
		c.Close()
		s.countErr(err)
		return nil, nil, fmt.Errorf("handshake with %s: %w", l.peer.Name, err)
	}
	if sess.peer != l.peer.Name {
		c.Close()
		s.m.AuthFailures.Add(1)
		return nil, nil, fmt.Errorf("%v answered as %q, not %q", l.peer.Addr, sess.peer, l.peer.Name)
	}
	return c, sess, nil
}

// dumpPull is a session's request for a full copy. While pulling, the
// session holds s.dumpMu (one copy at a time); whoever ends the copy
// (its end frame, or the session's end) releases it. A member not ready
// asks at once and again every second (another session may hold the
// copy, or the peer was starting itself).
type dumpPull struct {
	l       *peerLink
	pulling atomic.Bool
	lastReq time.Time // the session's goroutine only
}

// request asks the peer for a full copy if this member needs one and may
// pull now.
func (p *dumpPull) request(sess *session) error {
	s := p.l.s
	if s.ready.Load() || time.Since(p.lastReq) < time.Second || !s.dumpMu.TryLock() {
		return nil
	}
	p.lastReq = time.Now()
	p.pulling.Store(true)
	s.setReason("pulling a full copy from " + p.l.peer.Name)
	if err := sess.writeFrame([]byte{frameDumpReq}); err != nil {
		p.release()
		return err
	}
	return nil
}

// end handles the peer's dump-end frame: the copy is complete (this
// member is ready) or the peer is starting itself.
func (p *dumpPull) end(body []byte) error {
	if len(body) != 10 || body[9] > 1 {
		return fmt.Errorf("%w dump end: %d bytes", errMalformed, len(body))
	}
	if !p.pulling.CompareAndSwap(true, false) {
		return nil
	}
	l, s := p.l, p.l.s
	n := binary.LittleEndian.Uint64(body[1:])
	if body[9] == 1 {
		l.peerState.Store(peerReady)
		s.becomeReady(fmt.Sprintf("full copy from %s: %d entries", l.peer.Name, n))
	} else {
		// The peer is pulling its own copy: what it had is applied, but
		// it is no proof of a complete table (manage decides when every
		// live peer is starting too).
		l.peerState.Store(peerStarting)
		s.setReason(fmt.Sprintf("%s is starting too (%d entries from it so far)", l.peer.Name, n))
	}
	s.dumpMu.Unlock()
	return nil
}

// failed reports a session that ended while pulling.
func (p *dumpPull) failed(err error) {
	if p.pulling.Load() {
		p.l.s.setReason(fmt.Sprintf("full copy from %s failed: %v", p.l.peer.Name, err))
	}
}

// release gives dumpMu back if this pull still holds it.
func (p *dumpPull) release() {
	if p.pulling.CompareAndSwap(true, false) {
		p.l.s.dumpMu.Unlock()
	}
}

// ackWindow is the batches a session wrote and the peer has not yet
// acknowledged, in their order (the peer acknowledges in order). At most
// size are in flight, so a slow peer fills the queue (whose drops are
// counted) rather than this list.
type ackWindow struct {
	size  int
	lag   func(time.Duration) // event to acknowledgement, per batch
	acked chan struct{}       // signalled after each acknowledgement

	mu   sync.Mutex
	sent []sentBatch
}

func newAckWindow(size int, lag func(time.Duration)) (*ackWindow, error) {
	switch {
	case size < 1:
		return nil, fmt.Errorf("connsync: ack window of %d batches: want at least 1 (QueueBatches)", size)
	case lag == nil:
		return nil, errors.New("connsync: ack window: no lag recorder")
	}
	return &ackWindow{size: size, lag: lag, acked: make(chan struct{}, 1)}, nil
}

// push records a batch about to be written as seq.
func (w *ackWindow) push(seq uint64, b *batch) {
	w.mu.Lock()
	w.sent = append(w.sent, sentBatch{seq: seq, b: b})
	w.mu.Unlock()
}

// ack removes the batches up to seq and records seq's lag (at now).
func (w *ackWindow) ack(seq uint64, now time.Time) {
	w.mu.Lock()
	i := 0
	for ; i < len(w.sent) && w.sent[i].seq <= seq; i++ {
		if w.sent[i].seq == seq {
			w.lag(now.Sub(w.sent[i].b.first))
		}
	}
	w.sent = w.sent[i:]
	w.mu.Unlock()
	select {
	case w.acked <- struct{}{}:
	default:
	}
}

// full tells whether size batches are in flight.
func (w *ackWindow) full() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sent) >= w.size
}

// errNoAck: the window stayed full for the I/O timeout.
var errNoAck = errors.New("no acknowledgement")

// waitRoom waits until the window has room, for at most timeout between
// two acknowledgements.
func (w *ackWindow) waitRoom(ctx context.Context, timeout time.Duration) error {
	for w.full() {
		select {
		case <-w.acked:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(timeout):
			return fmt.Errorf("%w for %v", errNoAck, timeout)
		}
	}
	return nil
}

// take empties the window and returns its batches in their order.
func (w *ackWindow) take() []*batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	var bs []*batch
	for _, u := range w.sent {
		bs = append(bs, u.b)
	}
	w.sent = nil
	return bs
}

// linkSession is one session's sending side and its reader.
type linkSession struct {
	l    *peerLink
	sess *session
	win  *ackWindow
	pull *dumpPull
	seq  uint64
	hdr  [batchHeader]byte
	// The peer's features, known from its first frame (a current release
	// sends its features ping first; an older one sends none).
	featKnown chan struct{}
	peerV6    atomic.Bool
}

// v6OK reports whether the peer takes IPv6 entries, waiting (at most the
// I/O timeout) for its first frame if it has not come yet.
func (ls *linkSession) v6OK() bool {
	select {
	case <-ls.featKnown:
	case <-time.After(ls.l.s.cfg.IOTimeout):
	}
	return ls.peerV6.Load()
}

// send numbers b and writes it; it is in the window before it is on the
// wire (the acknowledgement may come at once).
func (ls *linkSession) send(b *batch) error {
	s := ls.l.s
	ls.hdr[0] = frameBatch
	if b.v6 {
		if !ls.v6OK() {
			s.m.Unsupported.Add(uint64(b.n))
			return nil
		}
		ls.hdr[0] = frameBatch6
	}
	ls.seq++
	binary.LittleEndian.PutUint64(ls.hdr[1:], ls.seq)
	binary.LittleEndian.PutUint16(ls.hdr[9:], uint16(b.n))
	ls.win.push(ls.seq, b)
	if err := ls.sess.writeFrame(ls.hdr[:], b.buf); err != nil {
		return err
	}
	s.m.Sent.Add(uint64(b.n))
	if b.v6 {
		s.m.Sent6.Add(uint64(b.n))
	}
	s.m.SentBytes.Add(uint64(4 + batchHeader + len(b.buf) + macSize))
	return nil
}

// resendPending sends first what the last session could not deliver.
func (ls *linkSession) resendPending() error {
	l := ls.l
	resend := l.resend
	l.resend = nil
	for i, b := range resend {
		if err := ls.send(b); err != nil {
			l.resend = resend[i+1:] // the failed one is in the window
			return err
		}
	}
	return nil
}

// catchUp, after drops: what was queued before them (older) first, then
// every entry used since the first drop, at the pace the peer
// acknowledges. At the session's start and, for drops while it runs (a
// peer slower than the events), on the retry tick.
func (ls *linkSession) catchUp(ctx context.Context) error {
	l, s := ls.l, ls.l.s
	since := l.dropped.Swap(0)
	if since == 0 {
		return nil
	}
	for n := len(l.q); n > 0; n-- {
		if err := ls.send(<-l.q); err != nil {
			l.dropped.CompareAndSwap(0, since)
			return err
		}
	}
	n, err := s.walk(kindRefresh, time.Since(time.Unix(0, since))+time.Second, func(b *batch) error {
		if err := ls.win.waitRoom(ctx, s.cfg.IOTimeout); err != nil {
			if errors.Is(err, errNoAck) {
				return fmt.Errorf("catching %s up: %w", l.peer.Name, err)
			}
			return err
		}
		return ls.send(b)
	})
	s.m.CaughtUp.Add(uint64(n))
	if err != nil {
		l.dropped.CompareAndSwap(0, since)
		return err
	}
	s.cfg.Log.Info("connection sync: caught a peer up after dropped events", "peer", l.peer.Name, "entries", n)
	return nil
}

// stream sends the queue as the window allows, pings an idle session,
// asks again for a copy and catches up on the retry tick, until the
// session fails (the reader's error on rerr), the link stops or ctx ends.
func (ls *linkSession) stream(ctx context.Context, rerr <-chan error) error {
	l, s := ls.l, ls.l.s
	ping := time.NewTicker(s.cfg.IOTimeout / 3)
	defer ping.Stop()
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	for {
		q := l.q
		if ls.win.full() {
			q = nil // wait for acknowledgements
		}
		select {
		case <-ls.win.acked:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stopCh:
			return nil
		case err := <-rerr:
			s.countErr(err)
			ls.pull.failed(err)
			return err
		case <-ping.C:
			if err := ls.sess.writeFrame([]byte{framePing}); err != nil {
				return err
			}
		case <-retry.C:
			if err := ls.pull.request(ls.sess); err != nil {
				return err
			}
			if len(l.q) < cap(l.q)/2 { // the peer keeps up again
				if err := ls.catchUp(ctx); err != nil {
					return err
				}
			}
		case b := <-q:
			if err := ls.send(b); err != nil {
				return err
			}
		}
	}
}

// read reads the peer's frames until one fails, is malformed or done is
// closed: acknowledgements, and the batches and end of a full copy.
func (ls *linkSession) read(done <-chan struct{}) error {
	buf := make([]dataplane.SyncedConn, 0, ls.l.s.cfg.BatchMax)
	first := true
	for {
		body, err := ls.sess.readFrame(ls.l.s.cfg.IOTimeout)
		if err != nil {
			return err
		}
		if first {
			first = false
			ls.peerV6.Store(body[0] == framePing && pingFeatures(body)&featV6 != 0)
			close(ls.featKnown)
		}
		if err := ls.handle(body, buf); err != nil {
			return err
		}
		select {
		case <-done:
			return nil
		default:
		}
	}
}

// handle is the reader's action on one frame.
func (ls *linkSession) handle(body []byte, buf []dataplane.SyncedConn) error {
	s := ls.l.s
	switch body[0] {
	case frameAck:
		if len(body) != 1+8+4+4 {
			return fmt.Errorf("%w ack: %d bytes", errMalformed, len(body))
		}
		ls.win.ack(binary.LittleEndian.Uint64(body[1:]), time.Now())
	case frameBatch, frameBatch6:
		_, entries, err := parseBatch(body)
		if err != nil {
			return err
		}
		n := len(entries) / entrySize
		if body[0] == frameBatch6 {
			n = len(entries) / entry6Size
		}
		s.m.Received.Add(uint64(n))
		s.m.DumpReceived.Add(uint64(n))
		if _, _, err := s.apply(entries, body[0] == frameBatch6, buf); err != nil {
			return err
		}
	case frameDumpEnd:
		return ls.pull.end(body)
	case framePing:
	default:
		return fmt.Errorf("%w frame type %d", errMalformed, body[0])
	}
	return nil
}

// MaxSessions bounds the sessions a member serves at once.
const MaxSessions = 64

// accept serves the sessions peers open to this edge.
func (s *Syncer) accept(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	// At most MaxSessions at once (a set has at most 32 members, each
	// with one session here): a flood of connections, authenticated or
	// not, holds no more than that many goroutines and buffers.
	slots := make(chan struct{}, MaxSessions)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			s.m.Refused.Add(1)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			if err := s.serve(ctx, c); err != nil && ctx.Err() == nil {
				s.countErr(err)
				s.cfg.Log.Debug("connection sync peer session ended", "remote", c.RemoteAddr(), "err", err)
			}
		}()
	}
}

// isMember checks that an authenticated peer is a member of this edge's
// set, connecting from its address there: every edge of the region holds
// the secret, but only the set's members sync with each other.
func (s *Syncer) isMember(name string, from net.Addr) error {
	peers, _ := s.cfg.Peers()
	ta, _ := from.(*net.TCPAddr)
	for _, p := range peers {
		if p.Name != name {
			continue
		}
		if ta != nil {
			if a, ok := netip.AddrFromSlice(ta.IP); ok && a.Unmap() == p.Addr.Addr() {
				return nil
			}
		}
		return fmt.Errorf("%w: %s connected from %v, not from its address in the set (%v)", errAuth, name, from, p.Addr.Addr())
	}
	return fmt.Errorf("%w: %s (%v) is not a member of this edge's set", errAuth, name, from)
}

// serve reads a peer's batches, applies them and acknowledges each; and
// sends a full copy when asked.
func (s *Syncer) serve(ctx context.Context, c net.Conn) error {
	// A full copy being sent ends with the session: the connection is
	// closed (its writes fail at once), then the copy is waited for, so
	// nothing reads the maps after Run returned.
	var dumps sync.WaitGroup
	defer dumps.Wait()
	defer c.Close()
	sess, err := serverHandshake(c, s.cfg.Name, s.cfg.Secret, s.cfg.IOTimeout)
	if err != nil {
		return fmt.Errorf("handshake from %v: %w", c.RemoteAddr(), err)
	}
	if err := s.isMember(sess.peer, c.RemoteAddr()); err != nil {
		return err
	}
	var wmu sync.Mutex
	write := func(body ...[]byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return sess.writeFrame(body...)
	}
	// This release's features first (the peer sends IPv6 entries only
	// after seeing featV6); the peer's come before its dump request.
	if err := write(featuresFrame); err != nil {
		return err
	}
	var peerV6 atomic.Bool
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(s.cfg.IOTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if write([]byte{framePing}) != nil {
					c.Close()
					return
				}
			}
		}
	}()
	buf := make([]dataplane.SyncedConn, 0, s.cfg.BatchMax)
	ack := make([]byte, 1+8+4+4)
	ack[0] = frameAck
	var dumping atomic.Bool
	for {
		body, err := sess.readFrame(s.cfg.IOTimeout)
		if err != nil {
			return err
		}
		switch body[0] {
		case frameBatch, frameBatch6:
			seq, entries, err := parseBatch(body)
			if err != nil {
				return err
			}
			v6 := body[0] == frameBatch6
			if v6 {
				s.m.Received.Add(uint64(len(entries) / entry6Size))
			} else {
				s.m.Received.Add(uint64(len(entries) / entrySize))
			}
			applied, unmapped, err := s.apply(entries, v6, buf)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(ack[1:], seq)
			binary.LittleEndian.PutUint32(ack[9:], uint32(applied))
			binary.LittleEndian.PutUint32(ack[13:], uint32(unmapped))
			if err := write(ack); err != nil {
				return err
			}
		case frameDumpReq:
			if !dumping.CompareAndSwap(false, true) {
				return fmt.Errorf("%w: a dump request from %s while one is being sent", errMalformed, sess.peer)
			}
			dumps.Add(1)
			go func() {
				defer dumps.Done()
				defer dumping.Store(false)
				ready := s.ready.Load() // before the walk: what it sends is all it had then
				var hdr [batchHeader]byte
				v6 := peerV6.Load()
				skipped := 0
				n, err := s.walk(kindDump, s.cfg.MaxAge, func(b *batch) error {
					hdr[0] = frameBatch
					if b.v6 {
						if !v6 {
							s.m.Unsupported.Add(uint64(b.n))
							skipped += b.n
							return nil
						}
						hdr[0] = frameBatch6
						s.m.Sent6.Add(uint64(b.n))
					}
					binary.LittleEndian.PutUint16(hdr[9:], uint16(b.n))
					s.m.DumpSent.Add(uint64(b.n))
					return write(hdr[:], b.buf)
				})
				if err != nil {
					s.cfg.Log.Warn("connection sync: full copy failed", "peer", sess.peer, "err", err)
					c.Close()
					return
				}
				end := make([]byte, 10)
				end[0] = frameDumpEnd
				binary.LittleEndian.PutUint64(end[1:], uint64(n-skipped))
				if ready {
					end[9] = 1
				}
				if write(end) != nil {
					c.Close()
				}
				s.cfg.Log.Info("connection sync: full copy sent", "peer", sess.peer, "entries", n)
			}()
		case framePing:
			if f := pingFeatures(body); f != 0 {
				peerV6.Store(f&featV6 != 0)
			}
		default:
			return fmt.Errorf("%w frame type %d from %s", errMalformed, body[0], sess.peer)
		}
	}
}

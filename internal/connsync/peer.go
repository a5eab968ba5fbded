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

func (l *peerLink) session(ctx context.Context) error {
	s := l.s
	d := net.Dialer{Timeout: s.cfg.DialTimeout, LocalAddr: &net.TCPAddr{IP: s.cfg.Listen.Addr().AsSlice()}}
	c, err := d.DialContext(ctx, "tcp", l.peer.Addr.String())
	if err != nil {
		return err
	}
	defer c.Close()
	sess, err := clientHandshake(c, s.cfg.Name, s.cfg.Secret, s.cfg.IOTimeout)
	if err != nil {
		s.countErr(err)
		return fmt.Errorf("handshake with %s: %w", l.peer.Name, err)
	}
	if sess.peer != l.peer.Name {
		s.m.AuthFailures.Add(1)
		return fmt.Errorf("%v answered as %q, not %q", l.peer.Addr, sess.peer, l.peer.Name)
	}
	l.mu.Lock()
	l.connected, l.lastErr = true, ""
	l.mu.Unlock()
	s.live.Add(1)
	defer s.live.Add(-1)
	s.m.Sessions.Add(1)

	// dumping: this session holds dumpMu and waits for a full copy;
	// whoever ends that (the copy's end, or the session's) releases it.
	// A member not ready asks at once and again every second (another
	// session may hold the copy, or the peer was starting itself).
	var dumping atomic.Bool
	l.peerState.Store(peerUnknown)
	defer l.peerState.Store(peerUnknown)
	var lastReq time.Time
	request := func() error {
		if s.ready.Load() || time.Since(lastReq) < time.Second || !s.dumpMu.TryLock() {
			return nil
		}
		lastReq = time.Now()
		dumping.Store(true)
		s.setReason("pulling a full copy from " + l.peer.Name)
		if err := sess.writeFrame([]byte{frameDumpReq}); err != nil {
			dumping.Store(false)
			s.dumpMu.Unlock()
			return err
		}
		return nil
	}
	if err := request(); err != nil {
		return err
	}
	defer func() {
		if dumping.CompareAndSwap(true, false) {
			s.dumpMu.Unlock()
		}
	}()

	// unacked: the batches written and not yet acknowledged, in their
	// order (the peer acknowledges in order). A session that ends leaves
	// them to the next (l.resend); at most QueueBatches are in flight, so
	// a slow peer fills the queue (whose drops are counted) rather than
	// this list.
	var unackedMu sync.Mutex
	var unacked []sentBatch
	acked := make(chan struct{}, 1)
	defer func() {
		unackedMu.Lock()
		defer unackedMu.Unlock()
		var bs []*batch
		for _, u := range unacked {
			bs = append(bs, u.b)
		}
		l.resend = append(bs, l.resend...) // l.resend: those not yet resent
		unacked = nil
	}()
	rerr := make(chan error, 1)
	done := make(chan struct{})
	// On return: the reader is told to stop, the connection closed (its
	// read fails at once), and the reader waited for, so nothing writes
	// the maps after the session ended.
	var reader sync.WaitGroup
	defer reader.Wait()
	defer c.Close()
	defer close(done)
	reader.Add(1)
	go func() {
		defer reader.Done()
		buf := make([]dataplane.SyncedConn, 0, s.cfg.BatchMax)
		for {
			body, err := sess.readFrame(s.cfg.IOTimeout)
			if err != nil {
				rerr <- err
				return
			}
			switch body[0] {
			case frameAck:
				if len(body) != 1+8+4+4 {
					rerr <- fmt.Errorf("%w ack: %d bytes", errMalformed, len(body))
					return
				}
				seq := binary.LittleEndian.Uint64(body[1:])
				now := time.Now()
				unackedMu.Lock()
				i := 0
				for ; i < len(unacked) && unacked[i].seq <= seq; i++ {
					if unacked[i].seq == seq {
						s.lag.add(now.Sub(unacked[i].b.first))
					}
				}
				unacked = unacked[i:]
				unackedMu.Unlock()
				select {
				case acked <- struct{}{}:
				default:
				}
			case frameBatch:
				_, entries, err := parseBatch(body)
				if err != nil {
					rerr <- err
					return
				}
				n := len(entries) / entrySize
				s.m.Received.Add(uint64(n))
				s.m.DumpReceived.Add(uint64(n))
				if _, _, err := s.apply(entries, buf); err != nil {
					rerr <- err
					return
				}
			case frameDumpEnd:
				if len(body) != 10 || body[9] > 1 {
					rerr <- fmt.Errorf("%w dump end: %d bytes", errMalformed, len(body))
					return
				}
				if dumping.CompareAndSwap(true, false) {
					n := binary.LittleEndian.Uint64(body[1:])
					if body[9] == 1 {
						l.peerState.Store(peerReady)
						s.becomeReady(fmt.Sprintf("full copy from %s: %d entries", l.peer.Name, n))
					} else {
						// The peer is pulling its own copy: what it had
						// is applied, but it is no proof of a complete
						// table (manage decides when every live peer is
						// starting too).
						l.peerState.Store(peerStarting)
						s.setReason(fmt.Sprintf("%s is starting too (%d entries from it so far)", l.peer.Name, n))
					}
					s.dumpMu.Unlock()
				}
			case framePing:
			default:
				rerr <- fmt.Errorf("%w frame type %d", errMalformed, body[0])
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()

	ping := time.NewTicker(s.cfg.IOTimeout / 3)
	defer ping.Stop()
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	var seq uint64
	var hdr [batchHeader]byte
	hdr[0] = frameBatch
	send := func(b *batch) error {
		seq++
		binary.LittleEndian.PutUint64(hdr[1:], seq)
		binary.LittleEndian.PutUint16(hdr[9:], uint16(b.n))
		unackedMu.Lock()
		unacked = append(unacked, sentBatch{seq: seq, b: b})
		unackedMu.Unlock()
		if err := sess.writeFrame(hdr[:], b.buf); err != nil {
			return err
		}
		s.m.Sent.Add(uint64(b.n))
		s.m.SentBytes.Add(uint64(4 + batchHeader + len(b.buf) + macSize))
		return nil
	}
	// What the last session could not deliver goes first.
	resend := l.resend
	l.resend = nil
	for i, b := range resend {
		if err := send(b); err != nil {
			l.resend = resend[i+1:] // the failed one is in unacked
			return err
		}
	}
	window := cap(l.q)
	// After drops: what was queued before them (older) first, then every
	// entry used since the first drop, at the pace the peer acknowledges.
	// At the session's start and, for drops while it runs (a peer slower
	// than the events), on the retry tick.
	catchUp := func() error {
		since := l.dropped.Swap(0)
		if since == 0 {
			return nil
		}
		for n := len(l.q); n > 0; n-- {
			if err := send(<-l.q); err != nil {
				l.dropped.CompareAndSwap(0, since)
				return err
			}
		}
		n, err := s.walk(kindRefresh, time.Since(time.Unix(0, since))+time.Second, func(b *batch) error {
			for {
				unackedMu.Lock()
				full := len(unacked) >= window
				unackedMu.Unlock()
				if !full {
					break
				}
				select {
				case <-acked:
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(s.cfg.IOTimeout):
					return fmt.Errorf("catching %s up: no acknowledgement for %v", l.peer.Name, s.cfg.IOTimeout)
				}
			}
			return send(b)
		})
		s.m.CaughtUp.Add(uint64(n))
		if err != nil {
			l.dropped.CompareAndSwap(0, since)
			return err
		}
		s.cfg.Log.Info("connection sync: caught a peer up after dropped events", "peer", l.peer.Name, "entries", n)
		return nil
	}
	if err := catchUp(); err != nil {
		return err
	}
	for {
		q := l.q
		unackedMu.Lock()
		if len(unacked) >= window {
			q = nil // wait for acknowledgements
		}
		unackedMu.Unlock()
		select {
		case <-acked:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stopCh:
			return nil
		case err := <-rerr:
			s.countErr(err)
			if dumping.Load() {
				s.setReason(fmt.Sprintf("full copy from %s failed: %v", l.peer.Name, err))
			}
			return err
		case <-ping.C:
			if err := sess.writeFrame([]byte{framePing}); err != nil {
				return err
			}
		case <-retry.C:
			if err := request(); err != nil {
				return err
			}
			if len(l.q) < cap(l.q)/2 { // the peer keeps up again
				if err := catchUp(); err != nil {
					return err
				}
			}
		case b := <-q:
			if err := send(b); err != nil {
				return err
			}
		}
	}
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
		case frameBatch:
			seq, entries, err := parseBatch(body)
			if err != nil {
				return err
			}
			s.m.Received.Add(uint64(len(entries) / entrySize))
			applied, unmapped, err := s.apply(entries, buf)
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
				hdr[0] = frameBatch
				n, err := s.walk(kindDump, s.cfg.MaxAge, func(b *batch) error {
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
				binary.LittleEndian.PutUint64(end[1:], uint64(n))
				if ready {
					end[9] = 1
				}
				if write(end) != nil {
					c.Close()
				}
				s.cfg.Log.Info("connection sync: full copy sent", "peer", sess.peer, "entries", n)
			}()
		case framePing:
		default:
			return fmt.Errorf("%w frame type %d from %s", errMalformed, body[0], sess.peer)
		}
	}
}

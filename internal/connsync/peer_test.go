package connsync

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestAckWindow: the window a session keeps of the batches in flight.
// An acknowledgement removes every batch up to its sequence number (the
// peer acknowledges in order) and records the lag of that one batch
// only; the window is full at its size and waitRoom gives up after the
// timeout with no acknowledgement; take returns what is left in order.
func TestAckWindow(t *testing.T) {
	if _, err := newAckWindow(0, func(time.Duration) {}); err == nil {
		t.Fatal("a window of 0 batches accepted")
	}
	if _, err := newAckWindow(3, nil); err == nil {
		t.Fatal("a window without a lag recorder accepted")
	}
	var lags []time.Duration
	w, err := newAckWindow(3, func(d time.Duration) { lags = append(lags, d) })
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	bs := make([]*batch, 4)
	for i := range bs {
		bs[i] = &batch{n: i + 1, first: t0.Add(time.Duration(i) * time.Second)}
	}
	for i := range 3 {
		w.push(uint64(i+1), bs[i])
	}
	if !w.full() {
		t.Fatal("3 batches in a window of 3: not full")
	}
	ctx := context.Background()
	start := time.Now()
	if err := w.waitRoom(ctx, 50*time.Millisecond); !errors.Is(err, errNoAck) {
		t.Fatalf("waitRoom on a full window without acks: %v, want errNoAck", err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("waitRoom gave up after %v, before its timeout", el)
	}
	w.ack(2, t0.Add(5*time.Second)) // acknowledges 1 and 2
	if len(lags) != 1 || lags[0] != 4*time.Second {
		t.Fatalf("lags %v: want batch 2's only, 4 s", lags)
	}
	if err := w.waitRoom(ctx, time.Millisecond); err != nil {
		t.Fatalf("waitRoom with room: %v", err)
	}
	w.push(4, bs[3])
	w.ack(2, time.Now()) // a repeated acknowledgement changes nothing
	if got := w.take(); len(got) != 2 || got[0] != bs[2] || got[1] != bs[3] {
		t.Fatalf("left in the window: %v, want batches 3 and 4 in order", got)
	}
	if w.full() || len(w.take()) != 0 {
		t.Fatal("the window is not empty after take")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 3 {
		w.push(uint64(10+i), bs[i])
	}
	if err := w.waitRoom(cctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitRoom after cancel: %v", err)
	}
}

// A peer whose address changes gets a new link: what the old link still
// queued is counted as dropped (sync_drop_queue_full), and the new link
// catches the peer up from the oldest of those batches, as after a full
// queue; a peer removed for good takes its queue with it.
func TestPeerMovedKeepsDrops(t *testing.T) {
	s := &Syncer{cfg: Config{Name: "e1", QueueBatches: 4}, peers: map[string]*peerLink{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the links' goroutines end at once: nothing reads the queues
	a1, a2 := netip.MustParseAddrPort("192.0.2.1:7946"), netip.MustParseAddrPort("192.0.2.2:7946")
	s.setPeers(ctx, []Peer{{Name: "e2", Addr: a1}})
	s.links.Wait()
	t0 := time.Now().Add(-time.Minute)
	s.enqueue(&batch{n: 3, first: t0.Add(time.Second)})
	s.enqueue(&batch{n: 5, first: t0})
	s.setPeers(ctx, []Peer{{Name: "e2", Addr: a2}})
	s.links.Wait()
	if got := s.m.QueueDrops.Load(); got != 8 {
		t.Fatalf("queue drops %d after the move, want the 8 queued entries", got)
	}
	l := s.peers["e2"]
	if l == nil || l.peer.Addr != a2 || l.dropped.Load() != t0.UnixNano() {
		t.Fatalf("new link %+v: want address %v, catching up from the oldest batch (%v)", l, a2, t0)
	}
	s.enqueue(&batch{n: 2, first: time.Now()})
	s.setPeers(ctx, nil)
	s.links.Wait()
	if got := s.m.QueueDrops.Load(); got != 8 || len(s.peers) != 0 {
		t.Fatalf("queue drops %d, peers %d after removing the peer: want 8 and none", got, len(s.peers))
	}
}

package connsync

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Metrics count what the Syncer did (all since it started).
type Metrics struct {
	Events           atomic.Uint64 // read from the ring buffer
	Batches          atomic.Uint64 // batches of events made
	Sent             atomic.Uint64 // entries written to peers (each peer counts)
	SentBytes        atomic.Uint64 // bytes of those frames (headers and MACs included)
	Received         atomic.Uint64 // entries received from peers
	Applied          atomic.Uint64 // entries written into this edge's maps
	Unmapped         atomic.Uint64 // entries dropped: their backend is not on this edge (2 s after they came), or no longer in that slot (sender)
	QueueDrops       atomic.Uint64 // entries dropped: a peer's queue was full
	Malformed        atomic.Uint64 // sessions ended by a frame that did not parse
	MalformedEntries atomic.Uint64 // entries refused inside authenticated frames
	AuthFailures     atomic.Uint64 // handshakes or frames that failed authentication
	ApplyErrors      atomic.Uint64 // map writes that failed
	Sessions         atomic.Uint64 // sessions to peers established
	DumpSent         atomic.Uint64 // entries sent in full copies
	DumpReceived     atomic.Uint64 // entries received in full copies (and batches on this edge's own sessions)
	Refreshed        atomic.Uint64 // entries sent again by the periodic refresh
	CaughtUp         atomic.Uint64 // entries sent again to a peer whose queue had dropped batches
	Refused          atomic.Uint64 // connections closed at once: MaxSessions were being served
	// IPv6 VIPs' entries (lb_conns6), also counted in the totals above.
	Events6     atomic.Uint64 // read from the ring buffer
	Sent6       atomic.Uint64 // written to peers (each peer counts)
	Received6   atomic.Uint64 // received from peers
	Unsupported atomic.Uint64 // not sent: the peer's release does not take IPv6 entries (it announced no featV6)
}

// MetricsSnapshot is Metrics read at one time.
type MetricsSnapshot struct {
	Events, Batches, Sent, SentBytes, Received, Applied, Unmapped, QueueDrops uint64
	Malformed, MalformedEntries, AuthFailures, ApplyErrors, Sessions          uint64
	DumpSent, DumpReceived, Refreshed, Refused, CaughtUp                      uint64
	Events6, Sent6, Received6, Unsupported                                    uint64
}

// Snapshot reads the counters.
func (m *Metrics) Snapshot() MetricsSnapshot {
	return MetricsSnapshot{Events: m.Events.Load(), Batches: m.Batches.Load(), Sent: m.Sent.Load(), SentBytes: m.SentBytes.Load(),
		Received: m.Received.Load(), Applied: m.Applied.Load(), Unmapped: m.Unmapped.Load(), QueueDrops: m.QueueDrops.Load(),
		Malformed: m.Malformed.Load(), MalformedEntries: m.MalformedEntries.Load(), AuthFailures: m.AuthFailures.Load(),
		ApplyErrors: m.ApplyErrors.Load(), Sessions: m.Sessions.Load(), DumpSent: m.DumpSent.Load(),
		DumpReceived: m.DumpReceived.Load(), Refreshed: m.Refreshed.Load(), Refused: m.Refused.Load(),
		CaughtUp: m.CaughtUp.Load(), Events6: m.Events6.Load(), Sent6: m.Sent6.Load(), Received6: m.Received6.Load(),
		Unsupported: m.Unsupported.Load()}
}

// Counters names the counters for the node status (sync_*).
func (m MetricsSnapshot) Counters() map[string]uint64 {
	return map[string]uint64{
		"sync_events": m.Events, "sync_batches": m.Batches, "sync_sent": m.Sent, "sync_sent_bytes": m.SentBytes,
		"sync_received": m.Received, "sync_applied": m.Applied, "sync_unmapped": m.Unmapped,
		"sync_drop_queue_full": m.QueueDrops, "sync_drop_malformed": m.Malformed, "sync_drop_malformed_entries": m.MalformedEntries,
		"sync_auth_failures": m.AuthFailures, "sync_apply_errors": m.ApplyErrors, "sync_sessions": m.Sessions,
		"sync_dump_sent": m.DumpSent, "sync_dump_received": m.DumpReceived, "sync_refreshed": m.Refreshed, "sync_refused": m.Refused,
		"sync_caught_up": m.CaughtUp, "sync_events6": m.Events6, "sync_sent6": m.Sent6, "sync_received6": m.Received6,
		"sync_drop_unsupported": m.Unsupported,
	}
}

// lagWindow keeps the last lags measured (event to the peer's
// acknowledgement of its batch, on this edge's clock): at most size of
// them, and only those measured within the horizon, so the figures
// describe the stream as it is now. (By count alone, the lags of an
// outage's backlog would dominate the window until size more batches
// went, minutes or hours at a low rate.)
type lagWindow struct {
	mu      sync.Mutex
	buf     []lagSample
	next    int
	full    bool
	n       uint64
	horizon time.Duration
}

type lagSample struct {
	at time.Time // when it was measured
	d  time.Duration
}

func newLagWindow(size int, horizon time.Duration) *lagWindow {
	return &lagWindow{buf: make([]lagSample, size), horizon: horizon}
}

func (w *lagWindow) add(d time.Duration) {
	now := time.Now()
	w.mu.Lock()
	w.buf[w.next] = lagSample{now, d}
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
	w.n++
	w.mu.Unlock()
}

// LagSnapshot summarises the lags of the window.
type LagSnapshot struct {
	Samples       uint64        // measured since start
	P50, P99, Max time.Duration // of the last 8192 within the horizon (LagHorizon); 0 without any
}

func (w *lagWindow) snapshot() LagSnapshot {
	since := time.Now().Add(-w.horizon)
	w.mu.Lock()
	n := w.next
	if w.full {
		n = len(w.buf)
	}
	s := make([]time.Duration, 0, n)
	for _, x := range w.buf[:n] {
		if x.at.After(since) {
			s = append(s, x.d)
		}
	}
	total := w.n
	w.mu.Unlock()
	if len(s) == 0 {
		return LagSnapshot{Samples: total}
	}
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return LagSnapshot{Samples: total, P50: q(0.50), P99: q(0.99), Max: s[len(s)-1]}
}

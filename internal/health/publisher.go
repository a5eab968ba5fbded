package health

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// Timings of the StorePublisher.
const (
	// publishOpTimeout bounds one grant or write.
	publishOpTimeout = 5 * time.Second
	// revokeTimeout bounds the revocation of a replaced or final lease
	// (best effort: a lease that cannot be revoked expires by itself).
	revokeTimeout = 2 * time.Second
	// retryMax is the longest wait between attempts while etcd fails.
	retryMax = 5 * time.Second
	// publishTxnOps is the most writes per transaction: under etcd's
	// default limit (128 operations).
	publishTxnOps = 64
)

// ErrPublisherStopped is what Publish returns once the publisher has
// stopped (Ctx ended or Close).
var ErrPublisherStopped = errors.New("health publisher stopped")

// StorePublisher writes reports with one lease for the edge, kept alive
// while the edge runs: the reports of a vanished edge expire.
//
// It remembers the latest report of every target it was given and keeps
// the store equal to that: when the lease is lost (expiry, revocation, a
// partition longer than the TTL) it takes a new one at once and writes
// every report again, without waiting for a verdict to change; the lease
// it replaces is revoked (best effort). Remove deletes a target's report.
// When Ctx ends (or on Close) the lease is revoked, which deletes all of
// this edge's reports.
//
// One goroutine does all the store writes, in order, so a Remove is never
// undone by an older Publish still in flight.
type StorePublisher struct {
	Ctx   context.Context // the lease lives until it ends
	Store store.Leases
	Edge  string
	TTL   time.Duration
	Log   *slog.Logger // nil: slog.Default()

	once   sync.Once
	ctx    context.Context // Ctx, also ended by Close
	cancel context.CancelFunc
	kick   chan struct{} // wakes the loop
	done   chan struct{} // closed when the loop has returned

	mu      sync.Mutex
	reports map[string]string       // key -> JSON: the latest report of every current target
	dirty   map[string][]chan error // keys the store may not have right yet -> Publish calls waiting for them
	lease   store.LeaseID           // the lease reports are written with (0: none)
	kaStop  context.CancelFunc      // ends the current lease's keepalive
	closed  bool
}

func (p *StorePublisher) init() {
	p.once.Do(func() {
		parent := p.Ctx
		if parent == nil {
			parent = context.Background()
		}
		p.ctx, p.cancel = context.WithCancel(parent)
		p.kick = make(chan struct{}, 1)
		p.done = make(chan struct{})
		p.reports = map[string]string{}
		p.dirty = map[string][]chan error{}
		if p.Log == nil {
			p.Log = slog.Default()
		}
		go p.loop()
	})
}

func (p *StorePublisher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *StorePublisher) key(t Target) string {
	return model.HealthReportKey(p.Edge, t.Service, t.Pool, t.Backend)
}

// Publish makes r t's report and returns once it has been tried on the
// store: the error is that attempt's. A failed write is retried in the
// background until it succeeds or is superseded.
func (p *StorePublisher) Publish(ctx context.Context, t Target, r model.HealthReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p.init()
	k := p.key(t)
	ch := make(chan error, 1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPublisherStopped
	}
	// A checker Update stopped must not bring back the report it removed:
	// Update cancels the checker before it calls Remove.
	if err := ctx.Err(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.reports[k] = string(b)
	p.dirty[k] = append(p.dirty[k], ch)
	p.mu.Unlock()
	p.poke()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		select {
		case err := <-ch:
			return err
		default:
			return ErrPublisherStopped
		}
	}
}

// Remove forgets t's report and deletes it from the store. It does not
// block: the delete is done (and retried) in the background.
func (p *StorePublisher) Remove(t Target) {
	p.init()
	k := p.key(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if _, ok := p.reports[k]; !ok {
		return
	}
	delete(p.reports, k)
	if _, ok := p.dirty[k]; !ok {
		p.dirty[k] = nil
	}
	p.poke()
}

// Close revokes the lease, which deletes this edge's reports, and returns
// when the publisher's goroutines have ended (within a few seconds even if
// etcd does not answer). Ending Ctx does the same without the wait.
func (p *StorePublisher) Close() {
	p.init()
	p.cancel()
	<-p.done
}

// leaseState is the loop's current lease.
type leaseState struct {
	id   store.LeaseID
	lost <-chan struct{} // closed when its keepalive has ended
	stop context.CancelFunc
}

// loop owns the lease and does every store write.
func (p *StorePublisher) loop() {
	defer close(p.done)
	var (
		cur     leaseState
		old     []leaseState // replaced leases still to revoke
		backoff time.Duration
	)
	// dropLease gives up the current lease (lost or refused by etcd).
	dropLease := func() {
		if cur.id == 0 {
			return
		}
		cur.stop()
		old = append(old, cur)
		cur = leaseState{}
		p.mu.Lock()
		p.lease, p.kaStop = 0, nil
		p.mu.Unlock()
	}
	for {
		var err error
		if cur.id == 0 && p.pending() {
			if cur, err = p.grant(); err == nil {
				if len(old) > 0 {
					p.Log.Warn("health report lease lost; publishing every report again with a new lease", "edge", p.Edge, "lease", int64(cur.id))
				}
				p.mu.Lock()
				p.lease, p.kaStop = cur.id, cur.stop
				for k := range p.reports { // everything on the lost lease is gone
					if _, ok := p.dirty[k]; !ok {
						p.dirty[k] = nil
					}
				}
				p.mu.Unlock()
			} else if p.ctx.Err() == nil {
				p.fail(err)
				p.Log.Warn("cannot take a lease for health reports; retrying", "edge", p.Edge, "err", err)
			}
		}
		if cur.id == 0 && len(old) > 0 && !p.pending() {
			p.revoke(old) // nothing to move to a new lease
			old = nil
		}
		if cur.id != 0 {
			err = p.flush(cur.id)
			switch {
			case err == nil:
				if len(old) > 0 {
					p.revoke(old)
					old = nil
				}
			case errors.Is(err, store.ErrLeaseNotFound):
				dropLease()
			case p.ctx.Err() == nil:
				p.Log.Warn("health reports not written; retrying", "edge", p.Edge, "err", err)
			}
		}
		var retry <-chan time.Time
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), retryMax)
			retry = time.After(backoff)
		} else {
			backoff = 0
		}
		select {
		case <-p.ctx.Done():
			p.shutdown(cur, old)
			return
		case <-p.kick:
		case <-retry:
		case <-cur.lost: // nil without a lease: never ready
			dropLease()
		}
	}
}

// pending tells whether there is anything to write.
func (p *StorePublisher) pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dirty) > 0 || len(p.reports) > 0
}

// grant takes a lease and starts its keepalive.
func (p *StorePublisher) grant() (leaseState, error) {
	ttl := p.TTL
	if ttl == 0 {
		ttl = model.DefaultHealthReportTTL
	}
	ctx, cancel := context.WithTimeout(p.ctx, publishOpTimeout)
	defer cancel()
	id, err := p.Store.Grant(ctx, ttl)
	if err != nil {
		return leaseState{}, err
	}
	kctx, stop := context.WithCancel(p.ctx)
	lost, err := p.Store.KeepAlive(kctx, id)
	if err != nil {
		stop()
		p.revoke([]leaseState{{id: id}})
		return leaseState{}, err
	}
	return leaseState{id: id, lost: lost, stop: stop}, nil
}

// fail answers the waiting Publish calls with err; their keys stay to do.
func (p *StorePublisher) fail(err error) {
	p.mu.Lock()
	var ws []chan error
	for k, w := range p.dirty {
		ws = append(ws, w...)
		p.dirty[k] = nil
	}
	p.mu.Unlock()
	for _, w := range ws {
		w <- err
	}
}

// flush writes the keys to do with the lease, in transactions of at most
// publishTxnOps: a report is put, a removed target's key deleted.
func (p *StorePublisher) flush(lease store.LeaseID) error {
	type item struct {
		key     string
		value   string
		put     bool
		waiters []chan error
	}
	p.mu.Lock()
	items := make([]item, 0, len(p.dirty))
	for k, w := range p.dirty {
		v, ok := p.reports[k]
		items = append(items, item{key: k, value: v, put: ok, waiters: w})
	}
	clear(p.dirty)
	p.mu.Unlock()
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.key, b.key) })
	for len(items) > 0 {
		chunk := items[:min(len(items), publishTxnOps)]
		kvs := make([]store.KV, len(chunk))
		for i, it := range chunk {
			kvs[i] = store.KV{Key: it.key}
			if it.put {
				kvs[i].Value = []byte(it.value)
			}
		}
		ctx, cancel := context.WithTimeout(p.ctx, publishOpTimeout)
		err := p.Store.WriteLeased(ctx, lease, kvs)
		cancel()
		if err != nil {
			// These and the rest are to do again (unless changed since,
			// which made them to do anyway).
			p.mu.Lock()
			for _, it := range items {
				if _, ok := p.dirty[it.key]; !ok {
					p.dirty[it.key] = nil
				}
			}
			p.mu.Unlock()
			for _, it := range items {
				for _, w := range it.waiters {
					w <- err
				}
			}
			return err
		}
		for _, it := range chunk {
			for _, w := range it.waiters {
				w <- nil
			}
		}
		items = items[len(chunk):]
	}
	return nil
}

// revoke revokes leases, best effort, and waits (bounded) for their
// keepalives to end.
func (p *StorePublisher) revoke(ls []leaseState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), revokeTimeout)
	defer cancel()
	for _, l := range ls {
		if l.stop != nil {
			l.stop()
		}
		if err := p.Store.Revoke(ctx, l.id); err != nil && !errors.Is(err, store.ErrLeaseNotFound) {
			p.Log.Debug("cannot revoke a replaced health report lease; it expires by itself", "edge", p.Edge, "lease", int64(l.id), "err", err)
		}
	}
	for _, l := range ls {
		if l.lost == nil {
			continue
		}
		select {
		case <-l.lost:
		case <-ctx.Done():
			return
		}
	}
}

// shutdown refuses further reports and revokes the leases: etcd deletes
// every report written with them.
func (p *StorePublisher) shutdown(cur leaseState, old []leaseState) {
	p.mu.Lock()
	p.closed = true
	p.lease, p.kaStop = 0, nil
	var ws []chan error
	for _, w := range p.dirty {
		ws = append(ws, w...)
	}
	clear(p.dirty)
	clear(p.reports)
	p.mu.Unlock()
	for _, w := range ws {
		w <- ErrPublisherStopped
	}
	if cur.id != 0 {
		old = append(old, cur)
	}
	p.revoke(old)
}

package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// OwnerRoot holds one key per ownership scope (OwnerKey).
const OwnerRoot = "/azgate/owner/"

// OwnerKey is the key of an ownership scope, e.g. OwnerKey("arp", set)
// for who answers ARP for an edge set's VIPs on a shared segment.
func OwnerKey(kind, scope string) string { return OwnerRoot + kind + "/" + scope }

// Elector is what a role needs to hold an ownership scope: at most one
// member acts for the scope at any time (issue 8, part 6).
type Elector interface {
	// Campaign blocks until this member holds key (its value names the
	// holder), or ctx ends. It never takes a key another member holds:
	// there is no preemption.
	Campaign(ctx context.Context, key, holder string, o ClaimOptions) (*Claim, error)
	// Holder reads who holds key ("" when nobody does).
	Holder(ctx context.Context, key string) (string, error)
}

var _ Elector = (*Store)(nil)

// ClaimOptions set the lease behind a claim.
type ClaimOptions struct {
	// TTL of the lease (whole seconds; at least 1 s). The store deletes
	// the key this long after the last renewal it received, and only then
	// may another member take it.
	TTL time.Duration
	// Margin is how long before the lease could expire on the server the
	// holder stops acting: it must cover the time the holder needs to
	// stop (a map write) and any difference in clock rates over one TTL.
	// Less than TTL.
	Margin time.Duration
	// OnRenew, if set, is called with the new deadline after each
	// renewal (on the claim's goroutine; keep it short): a data plane
	// that enforces the deadline itself moves it forward there.
	OnRenew func(deadline time.Time)
}

// DefaultOwnerTTL and DefaultOwnerMargin are the claim settings the roles
// use unless told otherwise: a dead owner is replaced in about TTL plus
// etcd's lease-expiry check (500 ms).
const (
	DefaultOwnerTTL    = 3 * time.Second
	DefaultOwnerMargin = 500 * time.Millisecond
)

// Check fills the defaults in and validates o.
func (o ClaimOptions) Check() (ClaimOptions, error) {
	if o.TTL == 0 {
		o.TTL = DefaultOwnerTTL
	}
	if o.Margin == 0 {
		o.Margin = DefaultOwnerMargin
	}
	// The server counts whole seconds (Grant rounds down): so does the
	// deadline.
	o.TTL = o.TTL.Truncate(time.Second)
	if o.TTL < time.Second {
		return o, fmt.Errorf("store: claim TTL %v: at least 1s", o.TTL)
	}
	if o.Margin < 0 || o.Margin >= o.TTL {
		return o, fmt.Errorf("store: claim margin %v: must be between 0 and the TTL %v", o.Margin, o.TTL)
	}
	return o, nil
}

// Claim is a held ownership scope. Its holder may act for the scope
// until Deadline, and only while Done is open.
//
// # Why two members never both act
//
// The key is created in a transaction that succeeds only if it does not
// exist (create revision 0), with a lease of TTL. etcd deletes the key
// when the lease is revoked or expires, and a lease expires on the server
// TTL after the last grant or renewal the server received (a new etcd
// leader extends every lease, never shortens one). The holder notes the
// local time each grant or renewal request is SENT: the server receives
// it later, so the lease cannot expire before sent+TTL. The holder's
// deadline is sent+TTL-Margin for the latest renewal that succeeded, and
// Done closes at the deadline unless a renewal moved it (or earlier, when
// the store says the lease is gone). So the holder stops acting at least
// Margin before the key can be deleted by expiry; a revocation (Release)
// comes only after it stopped. Another member acts only once its own
// create transaction succeeded, which needs the key deleted: after the
// first stopped. Margin covers the holder's time to stop after its timer
// fires and clock-rate differences over one TTL (monotonic clocks; the
// wall clocks' offsets do not matter). A holder that loses the store
// (partition, a frozen or dead etcd) stops at its deadline all the same;
// one whose process dies or freezes must have its acts end by themselves
// at the deadline, which is what OnRenew is for (the edge's data plane
// answers ARP only until the deadline it was given).
type Claim struct {
	key, holder string
	lease       LeaseID
	s           *Store
	o           ClaimOptions
	since       time.Time

	mu       sync.Mutex
	deadline time.Time

	done    chan struct{} // closed when the claim ends
	cancel  func()        // stops the keeper (Release)
	stopped chan struct{} // the keeper returned
	once    sync.Once
	why     error
}

// Key returns the scope's key.
func (c *Claim) Key() string { return c.key }

// Since returns when the claim was taken.
func (c *Claim) Since() time.Time { return c.since }

// Deadline returns the time by which the holder must have stopped acting.
func (c *Claim) Deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// Done is closed when the claim ends (deadline reached without a renewal,
// lease gone, Release or the Campaign context ended): stop acting at once.
func (c *Claim) Done() <-chan struct{} { return c.done }

// Err says why the claim ended (nil while it holds).
func (c *Claim) Err() error {
	select {
	case <-c.done:
		return c.why
	default:
		return nil
	}
}

// Release gives the scope up: the caller must have stopped acting. It
// ends the claim and revokes the lease, so another member may take the
// scope at once (without a store, it lapses at the deadline).
func (c *Claim) Release(ctx context.Context) error {
	c.end(errors.New("released"))
	c.cancel()
	<-c.stopped
	return c.s.Revoke(ctx, c.lease)
}

func (c *Claim) end(why error) {
	c.once.Do(func() {
		c.why = why
		close(c.done)
	})
}

// Holder reads who holds key.
func (s *Store) Holder(ctx context.Context, key string) (string, error) {
	resp, err := s.Client.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("store: read owner %s: %w", key, mapErr(err))
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Campaign takes key for holder once nobody holds it: it tries, and
// while another member holds the key it watches for its deletion and
// tries again. The claim is kept alive until ctx ends (which ends it
// without revoking: the lease lapses) or Release. See Claim for the
// timing argument.
func (s *Store) Campaign(ctx context.Context, key, holder string, o ClaimOptions) (*Claim, error) {
	o, err := o.Check()
	if err != nil {
		return nil, err
	}
	backoff := 100 * time.Millisecond
	for {
		c, rev, err := s.tryClaim(ctx, key, holder, o)
		if c != nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			// Held by another member: wait until the key goes.
			err = s.waitDeleted(ctx, key, rev)
			if err == nil {
				backoff = 100 * time.Millisecond
				continue
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.Log.Debug("owner campaign: retrying", "key", key, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// tryClaim makes one attempt: a claim, or (nil, revision of the read,
// nil) when another member holds the key.
func (s *Store) tryClaim(ctx context.Context, key, holder string, o ClaimOptions) (*Claim, int64, error) {
	sent := time.Now()
	g, err := s.Client.Grant(ctx, int64(o.TTL/time.Second))
	if err != nil {
		return nil, 0, mapErr(err)
	}
	lease := LeaseID(g.ID)
	revoke := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		s.Revoke(rctx, lease)
		cancel()
	}
	resp, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(clientv3.LeaseID(lease)))).
		Commit()
	if err != nil {
		revoke()
		return nil, 0, mapErr(err)
	}
	if !resp.Succeeded {
		revoke()
		return nil, resp.Header.Revision, nil
	}
	c := &Claim{key: key, holder: holder, lease: lease, s: s, o: o, since: time.Now(),
		deadline: sent.Add(o.TTL - o.Margin),
		done:     make(chan struct{}), stopped: make(chan struct{})}
	if !time.Now().Before(c.deadline) {
		// The transaction took longer than the lease leaves us: renew
		// before acting, or give up.
		if !c.renew(ctx) {
			revoke()
			return nil, 0, fmt.Errorf("store: claim %s: no renewal before the deadline", key)
		}
	}
	kctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	go c.keep(kctx)
	go c.watchOwn(kctx, resp.Header.Revision)
	return c, 0, nil
}

// waitDeleted returns when key is deleted after revision rev (nil), or
// the watch fails.
func (s *Store) waitDeleted(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.Client.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return mapErr(err)
		}
		for _, e := range resp.Events {
			if e.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("owner watch closed")
}

// watchOwn ends the claim as soon as the key is deleted or rewritten
// behind the holder's back (etcdctl del, a revocation of the lease by
// someone else): the fence in Claim's comment covers expiry and Release,
// not that; this narrows such a forced takeover to the watch's latency.
func (c *Claim) watchOwn(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range c.s.Client.Watch(wctx, c.key, clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				break
			}
			for _, e := range resp.Events {
				rev = e.Kv.ModRevision
				if e.Type == clientv3.EventTypeDelete || string(e.Kv.Value) != c.holder {
					c.end(fmt.Errorf("store: claim %s: key deleted or taken over", c.key))
					cancel()
					return
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// renew sends one renewal that must succeed before the deadline; on
// success it moves the deadline to sent+TTL-Margin.
func (c *Claim) renew(ctx context.Context) bool {
	sent := time.Now()
	rctx, cancel := context.WithDeadline(ctx, c.Deadline())
	defer cancel()
	_, err := c.s.Client.KeepAliveOnce(rctx, clientv3.LeaseID(c.lease))
	if err != nil {
		if errors.Is(mapErr(err), ErrLeaseNotFound) {
			c.end(fmt.Errorf("store: claim %s: lease gone", c.key))
		}
		return false
	}
	d := sent.Add(c.o.TTL - c.o.Margin)
	c.mu.Lock()
	if d.After(c.deadline) {
		c.deadline = d
	}
	c.mu.Unlock()
	if c.o.OnRenew != nil {
		c.o.OnRenew(d)
	}
	return true
}

// keep renews the lease every TTL/3 (retrying every 200 ms after a
// failure) and ends the claim at the deadline.
func (c *Claim) keep(ctx context.Context) {
	defer close(c.stopped)
	defer c.cancel()
	every := c.o.TTL / 3
	next := time.Now().Add(every)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		now := time.Now()
		deadline := c.Deadline()
		if !now.Before(deadline) {
			c.end(fmt.Errorf("store: claim %s: no renewal before the deadline %s", c.key, deadline.Format(time.StampMilli)))
			return
		}
		t.Reset(min(next.Sub(now), deadline.Sub(now)))
		select {
		case <-ctx.Done():
			c.end(ctx.Err())
			return
		case <-c.done:
			return
		case <-t.C:
		}
		if time.Now().Before(next) {
			continue // the deadline check above
		}
		if c.renew(ctx) {
			next = time.Now().Add(every)
		} else {
			next = time.Now().Add(200 * time.Millisecond)
		}
	}
}

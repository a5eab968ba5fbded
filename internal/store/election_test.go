package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/store/etcdembed"
	"github.com/azgate/azgate/internal/store/storetest"
)

// The election tests use short leases: 2 s is the embedded etcd's
// smallest (1.5 election timeouts, rounded up).
var testClaim = ClaimOptions{TTL: 2 * time.Second, Margin: 500 * time.Millisecond}

// embeddedURLs starts an embedded etcd and returns its client URLs, so
// each contender can have its own connection.
func embeddedURLs(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	e, err := etcdembed.StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.ClientURLs
}

func client(t *testing.T, urls []string) *Store {
	t.Helper()
	s, err := Connect(Options{Endpoints: urls, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// contender campaigns in the background and records when it won and when
// its claim ended (when it stopped acting).
type contender struct {
	name  string
	s     *Store
	won   chan *Claim
	ended chan struct{} // endAt is set
	mu    sync.Mutex
	winAt time.Time
	endAt time.Time
}

func campaign(ctx context.Context, t *testing.T, s *Store, name, key string) *contender {
	c := &contender{name: name, s: s, won: make(chan *Claim, 1), ended: make(chan struct{})}
	go func() {
		cl, err := s.Campaign(ctx, key, name, testClaim)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.winAt = time.Now()
		c.mu.Unlock()
		c.won <- cl
		<-cl.Done()
		c.mu.Lock()
		c.endAt = time.Now()
		c.mu.Unlock()
		close(c.ended)
	}()
	return c
}

// times returns when c won and when it stopped (zero: not yet); a claim
// that ended is waited for until its end is recorded.
func (c *contender) times() (win, end time.Time) {
	select {
	case <-c.ended:
	case <-time.After(50 * time.Millisecond):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.winAt, c.endAt
}

// first waits for one of cs to win and returns it.
func first(t *testing.T, within time.Duration, cs ...*contender) (*contender, *Claim) {
	t.Helper()
	out := make(chan struct {
		c  *contender
		cl *Claim
	}, len(cs))
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range cs {
		go func() {
			select {
			case cl := <-c.won:
				out <- struct {
					c  *contender
					cl *Claim
				}{c, cl}
			case <-stop:
			}
		}()
	}
	select {
	case w := <-out:
		return w.c, w.cl
	case <-time.After(within):
		t.Fatalf("nobody won within %v", within)
		return nil, nil
	}
}

func TestClaimOneOwnerOfThree(t *testing.T) {
	urls := embeddedURLs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := OwnerKey("arp", "s1")
	var cs []*contender
	for i := range 3 {
		cs = append(cs, campaign(ctx, t, client(t, urls), fmt.Sprintf("e%d", i), key))
	}
	w, cl := first(t, 5*time.Second, cs...)
	// The others keep waiting: through several renewals, nobody else wins.
	time.Sleep(2 * testClaim.TTL)
	for _, c := range cs {
		if c != w && len(c.won) != 0 {
			t.Fatalf("%s and %s both hold %s", w.name, c.name, key)
		}
	}
	if err := cl.Err(); err != nil {
		t.Fatalf("the winner's claim ended: %v", err)
	}
	h, err := w.s.Holder(ctx, key)
	if err != nil || h != w.name {
		t.Fatalf("Holder = %q, %v; want %s", h, err, w.name)
	}
	if d := time.Until(cl.Deadline()); d <= 0 || d > testClaim.TTL-testClaim.Margin {
		t.Fatalf("deadline %v from now; want within (0, TTL-margin]", d)
	}
}

// A holder that stops renewing (its client is closed: dead, or cut off
// from the store) stops at its deadline; another member wins only later,
// once the server expired the lease.
func TestClaimTakeoverAfterExpiry(t *testing.T) {
	urls := embeddedURLs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := OwnerKey("arp", "s1")
	sa := client(t, urls)
	a := campaign(ctx, t, sa, "a", key)
	_, acl := first(t, 5*time.Second, a)
	b := campaign(ctx, t, client(t, urls), "b", key)
	time.Sleep(testClaim.TTL) // a few renewals
	sa.Close()                // a can no longer renew
	// A timer of this process set for a's deadline tells how late a
	// loaded machine runs timers: a must stop on time against that,
	// not against an idle machine's clock.
	refAt := acl.Deadline()
	ref := make(chan time.Time, 1)
	time.AfterFunc(time.Until(refAt), func() { ref <- time.Now() })
	_, bcl := first(t, 3*testClaim.TTL, b)
	_ = bcl
	aWin, aEnd := a.times()
	bWin, _ := b.times()
	deadline := acl.Deadline()
	late := max(0, (<-ref).Sub(refAt))
	t.Logf("a won %v, deadline %v, stopped %v; b won %v (%v after a stopped)",
		aWin.Format(time.StampMilli), deadline.Format(time.StampMilli), aEnd.Format(time.StampMilli),
		bWin.Format(time.StampMilli), bWin.Sub(aEnd))
	if aEnd.IsZero() || !bWin.After(aEnd) {
		t.Fatalf("b won at %v before a stopped (%v)", bWin, aEnd)
	}
	if aEnd.After(deadline.Add(late + 100*time.Millisecond)) {
		t.Fatalf("a stopped at %v, past its deadline %v (a timer set for the deadline fired %v late)", aEnd, deadline, late)
	}
	if bWin.Sub(aEnd) < testClaim.Margin/2 {
		t.Fatalf("b won %v after a stopped: want about the margin %v at least", bWin.Sub(aEnd), testClaim.Margin)
	}
}

// Release stops the holder and revokes its lease: the next member wins
// at once, after the first stopped.
func TestClaimRelease(t *testing.T) {
	urls := embeddedURLs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := OwnerKey("arp", "s1")
	a := campaign(ctx, t, client(t, urls), "a", key)
	_, acl := first(t, 5*time.Second, a)
	b := campaign(ctx, t, client(t, urls), "b", key)
	time.Sleep(500 * time.Millisecond)
	rel := time.Now()
	if err := acl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first(t, 2*time.Second, b)
	_, aEnd := a.times()
	bWin, _ := b.times()
	if aEnd.IsZero() || !bWin.After(aEnd) {
		t.Fatalf("b won at %v before a stopped (%v)", bWin, aEnd)
	}
	if bWin.Sub(rel) > time.Second {
		t.Fatalf("takeover after a release took %v", bWin.Sub(rel))
	}
}

// A lease revoked behind the holder's back (not what azgate does) ends
// its claim within the watch's latency.
func TestClaimRevokedElsewhere(t *testing.T) {
	urls := embeddedURLs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := OwnerKey("arp", "s1")
	a := campaign(ctx, t, client(t, urls), "a", key)
	_, acl := first(t, 5*time.Second, a)
	admin := client(t, urls)
	r, err := admin.Client.Get(ctx, key)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	at := time.Now()
	if _, err := admin.Client.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acl.Done():
		t.Logf("claim ended %v after the revocation: %v", time.Since(at), acl.Err())
	case <-time.After(time.Second):
		t.Fatal("the claim outlived its revoked lease by 1s")
	}
}

// The store freezes (SIGSTOP: renewals hang, nothing fails): the holder
// stops at its deadline; once the store is back, another member wins,
// after the holder stopped.
func TestClaimStoreFrozen(t *testing.T) {
	url, proc := storetest.StartEtcdProcess(t, "http")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa, sb := client(t, []string{url}), client(t, []string{url})
	for deadline := time.Now().Add(20 * time.Second); sa.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("etcd does not answer")
		}
	}
	key := OwnerKey("arp", "s1")
	a := campaign(ctx, t, sa, "a", key)
	_, acl := first(t, 5*time.Second, a)
	b := campaign(ctx, t, sb, "b", key)
	time.Sleep(time.Second)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	select {
	case <-acl.Done():
	case <-time.After(2 * testClaim.TTL):
		proc.Signal(syscall.SIGCONT)
		t.Fatal("the holder kept its claim with the store frozen")
	}
	_, aEnd := a.times()
	deadline := acl.Deadline()
	t.Logf("frozen at %v; a's deadline %v, stopped %v (%v)", frozen.Format(time.StampMilli),
		deadline.Format(time.StampMilli), aEnd.Format(time.StampMilli), acl.Err())
	if aEnd.After(deadline.Add(100*time.Millisecond)) || aEnd.Before(deadline.Add(-10*time.Millisecond)) {
		t.Fatalf("a stopped at %v: want at its deadline %v", aEnd, deadline)
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	first(t, 10*time.Second, b)
	bWin, _ := b.times()
	if !bWin.After(aEnd) {
		t.Fatalf("b won at %v before a stopped (%v)", bWin, aEnd)
	}
}

func TestClaimOptions(t *testing.T) {
	for _, o := range []ClaimOptions{{TTL: 500 * time.Millisecond}, {TTL: 2 * time.Second, Margin: 2 * time.Second},
		{TTL: 2 * time.Second, Margin: -time.Second}} {
		if _, err := o.Check(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	o, err := ClaimOptions{TTL: 2500 * time.Millisecond}.Check()
	if err != nil || o.TTL != 2*time.Second || o.Margin != DefaultOwnerMargin {
		t.Errorf("got %+v, %v", o, err)
	}
}

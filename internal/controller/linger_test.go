package controller

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// fakeClock is the controller's clock in the linger tests: it moves only
// when the test advances it (and is never compared with the kernel's).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// testGrace is the linger tests' move grace, on the fake clock.
const testGrace = MaxMoveGrace

// lingerCore is a controller with a move grace of testGrace on a fake
// clock, holding scopeRegion with its EIP 198.51.100.7 (bound to h1/g1)
// pulled out into the dedicated set.
func lingerCore(t *testing.T) (*Core, *fakeClock) {
	t.Helper()
	c, _ := openCoreWith(t, "", Config{MoveGrace: testGrace})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.now = clk.now // before any write: the grace loop reads it after one
	ctx := context.Background()
	if _, err := c.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	pullOut(t, c, lingerEIP, "dedicated")
	cp := checkCopies(t, c, "pull out")
	expectScopes(t, "pull out", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "pull out", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "pull out", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")
	return c, clk
}

const lingerEIP = "198.51.100.7"

// pullOut sets the EIP's pull-out set ("": a release).
func pullOut(t *testing.T, c *Core, key, set string) {
	t.Helper()
	o, _, _, err := c.Get(model.KindEIP, key)
	if err != nil {
		t.Fatal(err)
	}
	e := cloneEIP(o.(*model.EIP))
	e.Set = set
	if _, err := c.Replace(context.Background(), key, IfMatch{}, e); err != nil {
		t.Fatal(err)
	}
}

// expire ends the graces due at the fake clock's time and checks how
// many copies it deleted.
func expire(t *testing.T, c *Core, want int) {
	t.Helper()
	n, err := c.expireLingering(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("the end of the grace deleted %d copies, want %d", n, want)
	}
}

// copyLease reads key's lease straight from etcd (ok false: no key).
func copyLease(t *testing.T, c *Core, key string) (id store.LeaseID, ok bool) {
	t.Helper()
	resp, err := c.store.Client.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false
	}
	return store.LeaseID(resp.Kvs[0].Lease), true
}

func lingering(t *testing.T, c *Core, want int) {
	t.Helper()
	if got := metricValue(t, c, "azgate_controller_scope_lingering_copies"); int(got) != want {
		t.Errorf("%v copies lingering, want %d", got, want)
	}
}

// TestMoveGraceRelease: a release from a pull-out keeps the EIP (with its
// new value) and the copy of its guest in the dedicated set's scope until the grace
// ends, then deletes both in one go; the copies stay "current" for the
// start-up check.
func TestMoveGraceRelease(t *testing.T) {
	c, clk := lingerCore(t)
	pullOut(t, c, lingerEIP, "")
	cp := checkCopies(t, c, "release")
	expectScopes(t, "release", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "release", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "release", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")
	if v := cp[store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)]; strings.Contains(v, "dedicated") {
		t.Errorf("the lingering copy holds %s: want the released EIP", v)
	}
	lingering(t, c, 2)
	expectCurrent(t, c.store, "release", true)

	clk.advance(testGrace - time.Second)
	expire(t, c, 0)
	cp = checkCopies(t, c, "before the grace ends")
	expectScopes(t, "before the grace ends", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "before the grace ends", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")

	clk.advance(time.Second)
	expire(t, c, 2)
	cp = checkCopies(t, c, "grace over")
	expectScopes(t, "grace over", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h1")
	expectScopes(t, "grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "grace over", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	lingering(t, c, 0)
	if d := metricValue(t, c, `azgate_controller_scope_copies_total{by="linger",op="delete"}`); d != 2 {
		t.Errorf("%v copies counted deleted at the end of the grace, want 2", d)
	}
	expectCurrent(t, c.store, "grace over", true)
	// A write after it commits as usual (the deletes did not move the
	// commit marker past the view).
	if _, err := c.Bind(context.Background(), "198.51.100.8", IfMatch{}, model.Binding{Host: "h3", Guest: "g4"}); err != nil {
		t.Fatal(err)
	}
	checkCopies(t, c, "a write after the grace")
}

// TestMoveGraceRebind: a rebind during the grace rewrites the lingering
// copy with the new binding and brings the new guest's copy into the
// dedicated set, lingering from the rebind (the set's edges, which still
// receive the EIP's traffic, need the guest's tunnel as well as the
// route). The guest the EIP left loses its copies at once, in the
// dedicated set (where it lingered) and in the prefix set: no copy of an
// EIP points to it after the write. The guest's host is in its own scope
// only throughout.
func TestMoveGraceRebind(t *testing.T) {
	c, clk := lingerCore(t)
	pullOut(t, c, lingerEIP, "")
	clk.advance(testGrace / 2)
	if _, err := c.Bind(context.Background(), lingerEIP, IfMatch{}, model.Binding{Host: "h2", Guest: "g3"}); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "rebind")
	expectScopes(t, "rebind", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h2")
	expectScopes(t, "rebind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h1/g1")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h2/g3", "set/dedicated", "set/prefix-a")
	if v := cp[store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)]; !strings.Contains(v, `"h2"`) {
		t.Errorf("the lingering copy holds %s: want the new binding", v)
	}
	if id, ok := copyLease(t, c, store.ScopeKey("set/dedicated", model.KindGuestCopy, "h2/g3")); !ok || id == 0 {
		t.Errorf("h2/g3's copy in the dedicated set has no lease (%v, %v): a crashed controller would leave it", id, ok)
	}
	lingering(t, c, 2) // the EIP's and h2/g3's in the dedicated set
	// The release's grace counts from the release, not from the rebind.
	clk.advance(testGrace / 2)
	expire(t, c, 1)
	cp = checkCopies(t, c, "release's grace over")
	expectScopes(t, "release's grace over", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h2")
	expectScopes(t, "release's grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "release's grace over", cp, model.KindGuestCopy, "h1/g1")
	expectScopes(t, "release's grace over", cp, model.KindGuestCopy, "h2/g3", "set/dedicated", "set/prefix-a")
	clk.advance(testGrace / 2)
	expire(t, c, 1)
	cp = checkCopies(t, c, "rebind's grace over")
	expectScopes(t, "rebind's grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "rebind's grace over", cp, model.KindGuestCopy, "h1/g1")
	expectScopes(t, "rebind's grace over", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")
	lingering(t, c, 0)
}

// TestMoveGraceDelete: an EIP deleted during the grace loses its
// lingering copy at once; the copies of its former guest go with the
// unbind (no EIP copy points to the guest after it).
func TestMoveGraceDelete(t *testing.T) {
	c, clk := lingerCore(t)
	ctx := context.Background()
	pullOut(t, c, lingerEIP, "")
	if _, err := c.Unbind(ctx, lingerEIP, IfMatch{}); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "unbind")
	expectScopes(t, "unbind", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a")
	expectScopes(t, "unbind", cp, model.KindGuestCopy, "h1/g1")
	if _, err := c.Delete(ctx, model.KindEIP, lingerEIP, IfMatch{}); err != nil {
		t.Fatal(err)
	}
	cp = checkCopies(t, c, "delete")
	expectScopes(t, "delete", cp, model.KindEIP, lingerEIP)
	expectScopes(t, "delete", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "delete", cp, model.KindGuestCopy, "h1/g1")
	lingering(t, c, 0)
	clk.advance(testGrace)
	expire(t, c, 0)
	cp = checkCopies(t, c, "grace over")
	expectScopes(t, "grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "grace over", cp, model.KindGuestCopy, "h1/g1")
}

// TestMoveGraceBack: pulled out again during the grace, the EIP's and its
// guest's copies are ordinary ones again: the grace's end deletes nothing.
func TestMoveGraceBack(t *testing.T) {
	c, clk := lingerCore(t)
	pullOut(t, c, lingerEIP, "")
	pullOut(t, c, lingerEIP, "dedicated")
	cp := checkCopies(t, c, "pulled out again")
	expectScopes(t, "pulled out again", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "pulled out again", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")
	if v := cp[store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)]; !strings.Contains(v, "dedicated") {
		t.Errorf("the copy holds %s: want the EIP pulled out", v)
	}
	lingering(t, c, 0)
	clk.advance(2 * testGrace)
	expire(t, c, 0)
	cp = checkCopies(t, c, "after the grace")
	expectScopes(t, "after the grace", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "after the grace", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "after the grace", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")

	// Released again: a new grace, from now.
	pullOut(t, c, lingerEIP, "")
	clk.advance(testGrace - time.Second)
	expire(t, c, 0)
	clk.advance(time.Second)
	expire(t, c, 2)
	checkCopies(t, c, "second release over")
}

// TestMoveGraceQuarantine: released from quarantine, the EIP and the copy
// of its guest stay in the quarantine set's scope for the grace (their values did not
// change: they are put again as they were, only to take the lease).
func TestMoveGraceQuarantine(t *testing.T) {
	c, clk := lingerCore(t)
	ctx := context.Background()
	const eip = "198.51.100.130" // prefix-b, on h2/g2
	if _, err := c.Create(ctx, &model.Quarantine{Address: netip.MustParseAddr(eip), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "quarantine")
	expectScopes(t, "quarantine", cp, model.KindEIP, eip, "set/quarantine", "set/prefix-b", "host/h2")
	expectScopes(t, "quarantine", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "quarantine", cp, model.KindGuestCopy, "h2/g2", "set/quarantine", "set/prefix-b")
	expectScopes(t, "quarantine", cp, model.KindGuestCopy, "h2/g3")
	puts := metricValue(t, c, `azgate_controller_scope_copies_total{by="write",op="put"}`)
	eipKey, guestKey := store.ScopeKey("set/quarantine", model.KindEIP, eip), store.ScopeKey("set/quarantine", model.KindGuestCopy, "h2/g2")
	if _, err := c.Delete(ctx, model.KindQuarantine, eip, IfMatch{}); err != nil {
		t.Fatal(err)
	}
	cp2 := checkCopies(t, c, "quarantine release")
	expectScopes(t, "quarantine release", cp2, model.KindEIP, eip, "set/quarantine", "set/prefix-b", "host/h2")
	expectScopes(t, "quarantine release", cp2, model.KindHost, "h2", "host/h2")
	expectScopes(t, "quarantine release", cp2, model.KindGuestCopy, "h2/g2", "set/quarantine", "set/prefix-b")
	if p := metricValue(t, c, `azgate_controller_scope_copies_total{by="write",op="put"}`); p != puts+2 {
		t.Errorf("the quarantine's release wrote %v copies, want 2 (put again with the lease)", p-puts)
	}
	for _, k := range []string{eipKey, guestKey} {
		if cp2[k] != cp[k] {
			t.Errorf("%s: %s, want it as it was: %s", k, cp2[k], cp[k])
		}
		if l, _ := copyLease(t, c, k); l == 0 {
			t.Errorf("%s lingers without a lease", k)
		}
	}
	clk.advance(testGrace)
	expire(t, c, 2)
	cp = checkCopies(t, c, "grace over")
	expectScopes(t, "grace over", cp, model.KindEIP, eip, "set/prefix-b", "host/h2")
	expectScopes(t, "grace over", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "grace over", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
}

// TestMoveGraceRepairAndRestart: a repair keeps the lingering copies; a
// restart ends the grace early (the start-up comparison deletes them).
func TestMoveGraceRepairAndRestart(t *testing.T) {
	dir := t.TempDir()
	c, stop := openCoreWith(t, dir, Config{MoveGrace: testGrace})
	if _, err := c.Apply(context.Background(), scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	pullOut(t, c, lingerEIP, "dedicated")
	pullOut(t, c, lingerEIP, "")
	if _, err := c.repairCopies(context.Background()); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "repair")
	expectScopes(t, "repair", cp, model.KindEIP, lingerEIP, "set/dedicated", "set/prefix-a", "host/h1")
	expectScopes(t, "repair", cp, model.KindGuestCopy, "h1/g1", "set/dedicated", "set/prefix-a")
	if d := metricValue(t, c, `azgate_controller_scope_copies_total{by="repair",op="delete"}`); d != 0 {
		t.Errorf("the repair deleted %v copies", d)
	}
	stop()

	c2, _ := openCoreWith(t, dir, Config{MoveGrace: testGrace})
	waitFor(t, func() bool { return metricValue(t, c2, `azgate_controller_scope_repairs_total{result="ok"}`) >= 1 })
	cp = checkCopies(t, c2, "restart")
	expectScopes(t, "restart", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h1")
	expectScopes(t, "restart", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "restart", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
}

// TestMoveGraceEnds: the grace ends on the controller's own clock. The
// release's revision shows the copies kept; they are gone once the
// grace (short here) has passed, waited for with a deadline far above it.
func TestMoveGraceEnds(t *testing.T) {
	c, _ := openCoreWith(t, "", Config{MoveGrace: 200 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	pullOut(t, c, lingerEIP, "dedicated")
	o, _, _, err := c.Get(model.KindEIP, lingerEIP)
	if err != nil {
		t.Fatal(err)
	}
	e := cloneEIP(o.(*model.EIP))
	e.Set = ""
	w, err := c.Replace(ctx, lingerEIP, IfMatch{}, e)
	if err != nil {
		t.Fatal(err)
	}
	key := store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)
	resp, err := c.store.Client.Get(ctx, key, clientv3.WithRev(w.Revision))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("at the release's revision %d, %s is gone: want it kept for the grace", w.Revision, key)
	}
	waitFor(t, func() bool {
		c.writeMu.Lock()
		defer c.writeMu.Unlock()
		return len(scopesOf(storedCopies(t, c.store), model.KindEIP, lingerEIP)) == 2
	})
	cp := checkCopies(t, c, "grace over")
	expectScopes(t, "grace over", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h1")
	expectScopes(t, "grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "grace over", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
}

// TestMoveGraceFlag: the grace is checked.
func TestMoveGraceFlag(t *testing.T) {
	for _, g := range []time.Duration{-time.Second, MaxMoveGrace + time.Second} {
		if _, err := (Config{DataDir: t.TempDir(), MoveGrace: g}).check(); err == nil || !strings.Contains(err.Error(), "move grace") {
			t.Errorf("move grace %v: %v, want refused", g, err)
		}
	}
	for _, g := range []time.Duration{0, DefaultMoveGrace, MaxMoveGrace} {
		if _, err := (Config{DataDir: t.TempDir(), MoveGrace: g}).check(); err != nil {
			t.Errorf("move grace %v: %v", g, err)
		}
	}
}

// TestMoveGraceSameTime: a copy that starts to linger twice at the same
// time (a coarse clock: two batches of an equal deadline hold it) is
// deleted once when its grace ends (a transaction deleting it twice
// would be refused, and the expiry would fail forever).
func TestMoveGraceSameTime(t *testing.T) {
	c, clk := lingerCore(t)
	pullOut(t, c, lingerEIP, "")
	pullOut(t, c, lingerEIP, "dedicated")
	pullOut(t, c, lingerEIP, "")
	c.writeMu.Lock()
	if n := len(c.linger.batches); n != 2 || !c.linger.batches[0].at.Equal(c.linger.batches[1].at) {
		t.Errorf("%d batches: want 2 of the same time", n)
	}
	due := c.linger.due(clk.now().Add(testGrace))
	c.writeMu.Unlock()
	if len(due) != 2 {
		t.Errorf("due: %v, want the EIP's and its guest's copy once each", due)
	}
	clk.advance(testGrace)
	expire(t, c, 2)
	cp := checkCopies(t, c, "grace over")
	expectScopes(t, "grace over", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h1")
	expectScopes(t, "grace over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "grace over", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	lingering(t, c, 0)
}

// TestMoveGraceLease: the lingering copies are put with a store lease
// that outlasts the grace; a rewrite keeps the copy's lease; a copy back
// in its scope is an ordinary one again, without a lease.
func TestMoveGraceLease(t *testing.T) {
	c, clk := lingerCore(t)
	ctx := context.Background()
	eipKey := store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)
	guestKey := store.ScopeKey("set/dedicated", model.KindGuestCopy, "h1/g1")
	if l, ok := copyLease(t, c, eipKey); !ok || l != 0 {
		t.Fatalf("pulled out: %s has lease %x (exists %v), want none", eipKey, l, ok)
	}
	pullOut(t, c, lingerEIP, "")
	lease, _ := copyLease(t, c, eipKey)
	if lease == 0 {
		t.Fatalf("released: %s lingers without a lease", eipKey)
	}
	if l, _ := copyLease(t, c, guestKey); l != lease {
		t.Errorf("released: %s has lease %x, want the write's %x", guestKey, l, lease)
	}
	ttl, err := c.store.Client.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64((testGrace + lingerLeaseMargin) / time.Second); ttl.GrantedTTL != want {
		t.Errorf("the lease's TTL is %d s, want %d (the grace and the margin)", ttl.GrantedTTL, want)
	}

	clk.advance(testGrace / 2)
	if _, err := c.Bind(ctx, lingerEIP, IfMatch{}, model.Binding{Host: "h2", Guest: "g3"}); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "rebind")
	if v := cp[eipKey]; !strings.Contains(v, `"h2"`) {
		t.Errorf("the lingering copy holds %s: want the new binding", v)
	}
	if l, _ := copyLease(t, c, eipKey); l != lease {
		t.Errorf("rebound: %s has lease %x, want its own %x", eipKey, l, lease)
	}
	// h1/g1's copies go with the rebind (no EIP copy points to it).
	// The host itself is in its own scope only.
	for _, sc := range []string{"set/prefix-a", "set/dedicated"} {
		if _, ok := copyLease(t, c, store.ScopeKey(sc, model.KindGuestCopy, "h1/g1")); ok {
			t.Errorf("h1/g1's copy in %s is still there after the rebind", sc)
		}
	}
	expectScopes(t, "rebind", cp, model.KindHost, "h1", "host/h1")

	pullOut(t, c, lingerEIP, "dedicated")
	checkCopies(t, c, "back")
	if l, ok := copyLease(t, c, eipKey); !ok || l != 0 {
		t.Errorf("back in the set: %s has lease %x (exists %v), want an ordinary copy", eipKey, l, ok)
	}
	lingering(t, c, 0) // the EIP is back in the dedicated set; h1/g1's copies went with the rebind
}

// TestMoveGraceLeaseOutlivesController: the lingering copies of a
// controller that stops before their grace ends (and does not come back)
// are deleted by the store when their lease ends. Controller b writes
// (its grace on a clock that does not move, a lease of 2 s) through a's
// store; a looks on.
func TestMoveGraceLeaseOutlivesController(t *testing.T) {
	a, _ := openCoreWith(t, "", Config{MoveGrace: testGrace})
	b, stopB := openCoreWith(t, "", Config{MoveGrace: time.Second, EtcdEndpoints: []string{"unix://" + a.cfg.DataDir + "/etcd.sock"}})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b.now = clk.now
	b.linger.margin = time.Second
	ctx := context.Background()
	if _, err := b.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	pullOut(t, b, lingerEIP, "dedicated")
	pullOut(t, b, lingerEIP, "")
	eipKey := store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)
	lease, ok := copyLease(t, b, eipKey)
	if !ok || lease == 0 {
		t.Fatalf("released: %s: lease %x, exists %v; want it lingering with a lease", eipKey, lease, ok)
	}
	ttl, err := a.store.Client.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL < 2 {
		t.Errorf("the lease's TTL is %d s: want at least the grace and the margin, 2 s", ttl.GrantedTTL)
	}
	rev := b.Revision()
	stopB()

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cp := storedCopies(t, a.store)
		if len(scopesOf(cp, model.KindEIP, lingerEIP)) == 2 && len(scopesOf(cp, model.KindGuestCopy, "h1/g1")) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after its controller stopped, the copies lingering with a lease of 2 s are still there: %v, %v",
				scopesOf(cp, model.KindEIP, lingerEIP), scopesOf(cp, model.KindGuestCopy, "h1/g1"))
		}
	}
	waitFor(t, func() bool { return a.Revision() >= rev })
	cp := checkCopies(t, a, "lease over")
	expectScopes(t, "lease over", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h1")
	expectScopes(t, "lease over", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "lease over", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	if _, cur, err := a.store.CopiesCurrent(ctx); err != nil || !cur {
		t.Errorf("CopiesCurrent %v, %v after the lease: want true", cur, err)
	}
}

// TestMoveGraceLeaseGone: a lingering copy whose lease ended before its
// grace (the controller's expiry failed past the margin; revoked here)
// is gone from the store; a write that would rewrite it forgets the
// copies of that lease and goes in.
func TestMoveGraceLeaseGone(t *testing.T) {
	c, _ := lingerCore(t)
	ctx := context.Background()
	pullOut(t, c, lingerEIP, "")
	eipKey := store.ScopeKey("set/dedicated", model.KindEIP, lingerEIP)
	lease, _ := copyLease(t, c, eipKey)
	if lease == 0 {
		t.Fatalf("released: %s lingers without a lease", eipKey)
	}
	if err := c.store.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Bind(ctx, lingerEIP, IfMatch{}, model.Binding{Host: "h2", Guest: "g3"}); err != nil {
		t.Fatal(err)
	}
	cp := checkCopies(t, c, "rebind")
	expectScopes(t, "rebind", cp, model.KindEIP, lingerEIP, "set/prefix-a", "host/h2")
	expectScopes(t, "rebind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h1/g1")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")
	lingering(t, c, 0)
	if n := metricValue(t, c, `azgate_controller_commits_total{result="lease"}`); n != 1 {
		t.Errorf("%v commits failed with the lease gone, want 1 (then retried)", n)
	}
}

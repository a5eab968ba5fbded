package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// scopeRec is a Sink that keeps what a follower of a scope was told.
type scopeRec struct {
	mu      sync.Mutex
	state   map[string]string // kind/key: value
	loading bool
	batch   []string
	watched []string // "put|del kind/key @rev" of watched changes, in order
	resyncs []int64  // revisions of full loads
	commits []int64  // revisions of every commit
	resets  int
	onSync  func(n int) // called (outside mu) after the nth full load
	changed chan struct{}
}

func newScopeRec() *scopeRec {
	return &scopeRec{state: map[string]string{}, changed: make(chan struct{}, 1)}
}

func (r *scopeRec) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.batch, r.loading = map[string]string{}, nil, true
	r.resets++
}

func (r *scopeRec) Put(kind, key string, value []byte, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state[kind+"/"+key] = string(value)
	if !r.loading {
		r.batch = append(r.batch, fmt.Sprintf("put %s/%s @%d", kind, key, rev))
	}
}

func (r *scopeRec) Delete(kind, key string, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.state, kind+"/"+key)
	if !r.loading {
		r.batch = append(r.batch, fmt.Sprintf("del %s/%s @%d", kind, key, rev))
	}
}

func (r *scopeRec) Commit(rev int64, resync bool) {
	r.mu.Lock()
	r.loading = false
	r.commits = append(r.commits, rev)
	n := 0
	if resync {
		r.resyncs = append(r.resyncs, rev)
		n = len(r.resyncs)
	}
	r.watched = append(r.watched, r.batch...)
	r.batch = nil
	onSync := r.onSync
	r.mu.Unlock()
	if n > 0 && onSync != nil {
		onSync(n)
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// wait waits until cond (under mu) holds, for at most 20 s.
func (r *scopeRec) wait(t *testing.T, what string, cond func(r *scopeRec) bool) {
	t.Helper()
	waitUntil(t, &r.mu, r.changed, what+":", func() bool { return cond(r) }, func() string {
		return fmt.Sprintf("state %v, resyncs %v, commits %v, watched %v", r.state, r.resyncs, r.commits, r.watched)
	})
}

func (r *scopeRec) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.state))
}

// runFollower runs fn until the test ends; it must then return
// context.Canceled.
func runFollower(t *testing.T, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the follower ended with %v", err)
		}
	})
}

// sharing is another Store on s's client, for a follower with its own
// settings.
func sharing(s *Store, log *slog.Logger) *Store {
	return &Store{Client: s.Client, TxnOps: s.TxnOps, Log: log}
}

func eip(a, desc string) *model.EIP {
	return &model.EIP{Address: netip.MustParseAddr(a), Description: desc}
}

// copyOps are copies of objs in scope.
func copyOps(t *testing.T, scope string, objs ...model.Object) []Op {
	ops := put(t, objs...)
	for i := range ops {
		ops[i].Scope = scope
	}
	return ops
}

func commitNow(t *testing.T, s *Store, ops ...[]Op) int64 {
	t.Helper()
	ctx := context.Background()
	rev, err := s.CommitRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev, err = s.Commit(ctx, rev, slices.Concat(ops...))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func TestScope(t *testing.T) {
	s := embedded(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s *Store)
	}{
		{"share", testScopeShare},
		{"move", testScopeMove},
		{"layout", testScopeLayout},
		{"compaction", testScopeCompaction},
		{"invalid", testScopeInvalid},
		{"jitter", testScopeJitter},
		{"marker", testScopeMarker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(t, s)
			tc.fn(t, s)
		})
	}
}

// testScopeShare: a follower of set/A gets A's copies and the primary
// objects of its kinds, nothing of set/B nor of other kinds, loaded and
// watched; LoadScopes reads every copy.
func testScopeShare(t *testing.T, s *Store) {
	ctx := context.Background()
	a1, a2, b1 := eip("198.51.100.1", "a1"), eip("198.51.100.2", "a2"), eip("198.51.100.3", "b1")
	popA := &model.EdgeSet{Name: "pop-a", Edges: []model.EdgeNode{}}
	commitNow(t, s,
		put(t, &model.AZ{Name: "az1"}, popA, a1, a2, b1),
		copyOps(t, "set/A", a1, a2),
		copyOps(t, "set/B", b1),
		copyOps(t, "host/h1", a1))
	// A key under the scope that names no copy is skipped.
	if _, err := s.Client.Put(ctx, ScopeRoot+"set/A/eips", "{}"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	rec := newScopeRec()
	sc := Scope{Name: "set/A", Kinds: []string{model.KindEdgeSet}}
	runFollower(t, func(ctx context.Context) error { return s.FollowScope(ctx, sc, rec) })
	rec.wait(t, "first load", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	want := []string{"edgesets/pop-a", "eips/198.51.100.1", "eips/198.51.100.2"}
	if got := rec.keys(); !slices.Equal(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}

	// Changes: only the scope's and its kinds' reach it, in one commit
	// per watch response.
	a3, b2 := eip("198.51.100.4", "a3"), eip("198.51.100.5", "b2")
	popB := &model.EdgeSet{Name: "pop-b", Edges: []model.EdgeNode{}}
	rev := commitNow(t, s,
		put(t, &model.AZ{Name: "az2"}, popB, a3, b2),
		copyOps(t, "set/A", a3),
		copyOps(t, "set/B", b2),
		copyOps(t, "host/h1", a3),
		[]Op{{Scope: "set/A", Kind: model.KindEIP, Key: a1.Key()}})
	rec.wait(t, "the changes", func(r *scopeRec) bool { return len(r.watched) == 3 && slices.Contains(r.commits, rev) })
	want = []string{"edgesets/pop-a", "edgesets/pop-b", "eips/198.51.100.2", "eips/198.51.100.4"}
	if got := rec.keys(); !slices.Equal(got, want) {
		t.Errorf("after the changes %v, want %v", got, want)
	}
	rec.mu.Lock()
	slices.Sort(rec.watched)
	wantW := []string{fmt.Sprintf("del eips/198.51.100.1 @%d", rev), fmt.Sprintf("put edgesets/pop-b @%d", rev), fmt.Sprintf("put eips/198.51.100.4 @%d", rev)}
	if !slices.Equal(rec.watched, wantW) || rec.commits[len(rec.commits)-1] != rev {
		t.Errorf("watched %v (commits %v), want %v", rec.watched, rec.commits, wantW)
	}
	rec.mu.Unlock()

	// LoadScopes reads every copy.
	var got []string
	lrev, err := s.LoadScopes(ctx, func(scope, kind, key string, value []byte) {
		o, err := model.DecodeStored(kind, key, value)
		if err != nil {
			t.Errorf("%s %s/%s: %v", scope, kind, key, err)
		}
		got = append(got, scope+" "+kind+"/"+o.Key())
	})
	if err != nil || lrev < rev {
		t.Fatalf("LoadScopes: %d, %v (the last commit at %d)", lrev, err, rev)
	}
	wantS := []string{"host/h1 eips/198.51.100.1", "host/h1 eips/198.51.100.4", "set/A eips/198.51.100.2",
		"set/A eips/198.51.100.4", "set/B eips/198.51.100.3", "set/B eips/198.51.100.5"}
	if !slices.Equal(got, wantS) {
		t.Errorf("LoadScopes: %v, want %v", got, wantS)
	}

	// A scope of one segment would read every set's copies.
	for _, bad := range []Scope{{Name: "set"}, {Name: "set/A/B"}, {Name: "set/A", Kinds: []string{"azs", "azs"}}} {
		if err := s.FollowScope(ctx, bad, newScopeRec()); err == nil {
			t.Errorf("FollowScope accepted %+v", bad)
		}
	}
}

// testScopeMove: an EIP moved from set A to set B in one commit is a
// delete for A's follower and a put for B's, at the commit's revision.
func testScopeMove(t *testing.T, s *Store) {
	ctx := context.Background()
	e := eip("198.51.100.7", "on A")
	commitNow(t, s, put(t, e), copyOps(t, "set/A", e))
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	recA, recB := newScopeRec(), newScopeRec()
	kinds := []string{model.KindEdgeSet}
	runFollower(t, func(ctx context.Context) error { return s.FollowScope(ctx, Scope{Name: "set/A", Kinds: kinds}, recA) })
	runFollower(t, func(ctx context.Context) error { return s.FollowScope(ctx, Scope{Name: "set/B", Kinds: kinds}, recB) })
	recA.wait(t, "A's first load", func(r *scopeRec) bool { return len(r.resyncs) == 1 && len(r.state) == 1 })
	recB.wait(t, "B's first load", func(r *scopeRec) bool { return len(r.resyncs) == 1 && len(r.state) == 0 })

	moved := eip("198.51.100.7", "on B")
	rev := commitNow(t, s, []Op{{Scope: "set/A", Kind: model.KindEIP, Key: e.Key()}}, copyOps(t, "set/B", moved), put(t, moved))
	recA.wait(t, "A's delete", func(r *scopeRec) bool { return len(r.watched) > 0 && slices.Contains(r.commits, rev) })
	recB.wait(t, "B's put", func(r *scopeRec) bool { return len(r.watched) > 0 && slices.Contains(r.commits, rev) })
	for _, c := range []struct {
		r    *scopeRec
		want string
	}{{recA, fmt.Sprintf("del eips/198.51.100.7 @%d", rev)}, {recB, fmt.Sprintf("put eips/198.51.100.7 @%d", rev)}} {
		c.r.mu.Lock()
		if !slices.Equal(c.r.watched, []string{c.want}) || c.r.commits[len(c.r.commits)-1] != rev {
			t.Errorf("watched %v, commits %v; want %s", c.r.watched, c.r.commits, c.want)
		}
		c.r.mu.Unlock()
	}
	if v := recB.state[model.KindEIP+"/"+e.Key()]; !strings.Contains(v, "on B") {
		t.Errorf("B holds %q", v)
	}
}

// syncBuf is a log destination safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testScopeLayout: a follower of a scope commits nothing until the
// layout marker says Layout, then loads; one of kinds only does not wait.
func testScopeLayout(t *testing.T, s *Store) {
	ctx := context.Background()
	e := eip("198.51.100.8", "")
	commitNow(t, s, put(t, e, &model.EdgeSet{Name: "pop-a", Edges: []model.EdgeNode{}}), copyOps(t, "set/A", e))
	if _, err := s.Client.Put(ctx, LayoutKey, "1"); err != nil { // an older layout
		t.Fatal(err)
	}
	var logs syncBuf
	f := sharing(s, slog.New(slog.NewTextHandler(&logs, nil)))
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error {
		return f.FollowScope(ctx, Scope{Name: "set/A", Kinds: []string{model.KindEdgeSet}}, rec)
	})
	kindsOnly := newScopeRec()
	runFollower(t, func(ctx context.Context) error {
		return f.FollowScope(ctx, Scope{Kinds: []string{model.KindEdgeSet}}, kindsOnly)
	})
	kindsOnly.wait(t, "the load of kinds only", func(r *scopeRec) bool { return len(r.resyncs) == 1 && len(r.state) == 1 })

	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), ErrNoLayout.Error()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning of the missing layout in 20s; logged: %s", logs.String())
		}
	}
	e2 := eip("198.51.100.9", "")
	commitNow(t, s, put(t, e2), copyOps(t, "set/A", e2))
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	marked, _, err := s.layoutAt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the load once marked", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.commits[0] < marked || rec.resyncs[0] != rec.commits[0] || rec.resets != 1 {
		t.Errorf("commits %v, resets %d; the marker was written before %d", rec.commits, rec.resets, marked)
	}
	if len(rec.state) != 3 {
		t.Errorf("loaded %v", rec.state)
	}
	if n := strings.Count(logs.String(), ErrNoLayout.Error()); n != 1 {
		t.Errorf("the missing layout warned %d times, want once in 30s", n)
	}
}

// testScopeCompaction compacts the history a follower's watches would
// start from while it hands over its first load: it loads again, each
// load after a draw of the jitter.
func testScopeCompaction(t *testing.T, s *Store) {
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	f := sharing(s, quiet)
	f.LoadJitter = time.Millisecond
	var draws sync.Map
	f.drawJitter = func(n time.Duration) time.Duration {
		k := time.Now().UnixNano()
		draws.Store(k, n)
		return 0
	}
	rec := newScopeRec()
	rec.onSync = func(n int) {
		if n != 1 {
			return
		}
		rev := commitNow(t, s, copyOps(t, "set/A", eip("198.51.100.10", "")))
		rev = commitNow(t, s, copyOps(t, "set/A", eip("198.51.100.11", "")), put(t, &model.EdgeSet{Name: "pop-a", Edges: []model.EdgeNode{}}))
		if _, err := s.Client.Compact(ctx, rev); err != nil {
			t.Error(err)
		}
	}
	runFollower(t, func(ctx context.Context) error {
		return f.FollowScope(ctx, Scope{Name: "set/A", Kinds: []string{model.KindEdgeSet}}, rec)
	})
	rec.wait(t, "the reload", func(r *scopeRec) bool { return len(r.resyncs) >= 2 && len(r.state) == 3 })
	n := 0
	draws.Range(func(_, _ any) bool { n++; return true })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.watched) != 0 {
		t.Errorf("changes past the compaction came as events: %v", rec.watched)
	}
	if n < rec.resets {
		t.Errorf("%d jitter draws for %d loads", n, rec.resets)
	}
}

// testScopeInvalid: copies that fail validation are refused as primary
// objects are (store.Invalid) and count as absent.
func testScopeInvalid(t *testing.T, s *Store) {
	ctx := context.Background()
	good := eip("198.51.100.20", "")
	commitNow(t, s, copyOps(t, "set/A", good))
	for key, v := range map[string]string{"198.51.100.21": "{", "198.51.100.22": `{"address": "198.51.100.23"}`} {
		if _, err := s.Client.Put(ctx, ScopeKey("set/A", model.KindEIP, key), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	f := sharing(s, quiet)
	var mu sync.Mutex
	var eips []string
	var last int64
	changed := make(chan struct{}, 1)
	runFollower(t, func(ctx context.Context) error {
		return f.FollowScopeState(ctx, Scope{Name: "set/A"}, func(st *model.State, rev int64, _ []Event, _ bool) {
			mu.Lock()
			eips, last = slices.Sorted(maps.Keys(st.EIPs)), rev
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, &mu, changed, what+":", cond, func() string { return fmt.Sprintf("EIPs %v at %d", eips, last) })
	}
	waitFor("the first load", func() bool { return last > 0 })
	if !slices.Equal(eips, []string{"198.51.100.20"}) {
		t.Errorf("loaded %v", eips)
	}
	if l, n := f.Invalid(); n != 2 || l[0].Kind != model.KindEIP || l[0].Key != "198.51.100.21" || l[1].Key != "198.51.100.22" {
		t.Errorf("invalid: %v (%d)", l, n)
	}
	// A valid write of the key clears it.
	rev := commitNow(t, s, copyOps(t, "set/A", eip("198.51.100.22", "fixed")))
	waitFor("the fix", func() bool { return last >= rev })
	if !slices.Equal(eips, []string{"198.51.100.20", "198.51.100.22"}) {
		t.Errorf("after the fix %v", eips)
	}
	if l, n := f.Invalid(); n != 1 || l[0].Key != "198.51.100.21" {
		t.Errorf("invalid after the fix: %v (%d)", l, n)
	}
}

// testScopeJitter: without LoadJitter no load waits; with it each load
// waits a draw in [0, LoadJitter), and a wait ends with ctx.
func testScopeJitter(t *testing.T, s *Store) {
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	sc := Scope{Name: "set/A", Kinds: []string{model.KindEdgeSet}}
	type draw struct{ n, d time.Duration }
	var mu sync.Mutex
	var draws []draw
	drawing := func(pick func(n time.Duration) time.Duration) func(time.Duration) time.Duration {
		return func(n time.Duration) time.Duration {
			d := pick(n)
			mu.Lock()
			draws = append(draws, draw{n, d})
			mu.Unlock()
			return d
		}
	}

	// No jitter: no draw, FollowScope and FollowSink load at once.
	f := sharing(s, quiet)
	f.drawJitter = drawing(func(n time.Duration) time.Duration { t.Error("drew a jitter of 0"); return 0 })
	for _, follow := range []func(context.Context, Sink) error{
		func(ctx context.Context, k Sink) error { return f.FollowScope(ctx, sc, k) },
		f.FollowSink,
	} {
		rec := newScopeRec()
		runFollower(t, func(ctx context.Context) error { return follow(ctx, rec) })
		rec.wait(t, "the load without jitter", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	}

	// A jitter: the first load comes after a draw below it.
	f = sharing(s, quiet)
	f.LoadJitter = 50 * time.Millisecond
	f.drawJitter = drawing(func(n time.Duration) time.Duration { return n / 2 })
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error { return f.FollowScope(ctx, sc, rec) })
	rec.wait(t, "the load with jitter", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	mu.Lock()
	if len(draws) != 1 || draws[0].n != f.LoadJitter {
		t.Errorf("draws %v before the first load", draws)
	}
	mu.Unlock()

	// The real draw is below the jitter.
	for range 1000 {
		if d := (&Store{}).draw(50 * time.Millisecond); d < 0 || d >= 50*time.Millisecond {
			t.Fatalf("drew %v of 50ms", d)
		}
	}

	// A wait is cut short by ctx, before anything is loaded.
	f = sharing(s, quiet)
	f.LoadJitter = time.Hour
	drew := make(chan struct{})
	f.drawJitter = func(n time.Duration) time.Duration { close(drew); return n - 1 }
	rec = newScopeRec()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.FollowScope(cctx, sc, rec) }()
	select {
	case <-drew:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("no jitter drawn in 20s: %d resets, commits %v", rec.resets, rec.commits)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("FollowScope ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("FollowScope still waiting 20s after its ctx ended")
	}
	if rec.resets != 0 || len(rec.commits) != 0 {
		t.Errorf("loaded during the jitter: %d resets, commits %v", rec.resets, rec.commits)
	}
}

// testScopeMarker: the commit marker names what each transaction wrote,
// so a follower's revision follows commits that touched nothing of its
// share (a commit of nothing it holds), and a commit that did touch it is
// reported with its changes, never before them.
func testScopeMarker(t *testing.T, s *Store) {
	ctx := context.Background()
	e := eip("198.51.100.7", "on A")
	commitNow(t, s, put(t, e), copyOps(t, "set/A", e))
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error {
		return s.FollowScope(ctx, Scope{Name: "set/A", Kinds: []string{model.KindEdgeSet}}, rec)
	})
	rec.wait(t, "the first load", func(r *scopeRec) bool { return len(r.resyncs) == 1 })

	// A commit of set/B only: committed to A's follower with no change.
	other := eip("198.51.100.9", "on B")
	rev := commitNow(t, s, put(t, other), copyOps(t, "set/B", other))
	rec.wait(t, "B's commit reported", func(r *scopeRec) bool { return slices.Contains(r.commits, rev) })
	rec.mu.Lock()
	if len(rec.watched) != 0 {
		t.Errorf("A's follower was told of %v", rec.watched)
	}
	rec.mu.Unlock()

	// Commits touching A: every reported revision holds its changes.
	for i := range 20 {
		v := eip("198.51.100.7", fmt.Sprintf("on A, version %d", i))
		rev = commitNow(t, s, put(t, v), copyOps(t, "set/A", v))
		if i%2 == 0 {
			rev = commitNow(t, s, copyOps(t, "set/B", other)) // interleaved with commits of nothing of A's
		}
	}
	rec.wait(t, "the last commit", func(r *scopeRec) bool { return slices.Contains(r.commits, rev) })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if v := rec.state[model.KindEIP+"/198.51.100.7"]; !strings.Contains(v, "version 19") {
		t.Errorf("A holds %q", v)
	}
	for i := 1; i < len(rec.commits); i++ {
		if rec.commits[i] < rec.commits[i-1] {
			t.Errorf("commits go back: %v", rec.commits)
		}
	}
}

func TestProgress(t *testing.T) {
	p := newProgress(2)
	p.commit(10, nil, false)
	if a := p.applied(); a != 10 {
		t.Fatalf("a commit of nothing followed: applied %d, want 10", a)
	}
	p.commit(11, []int{1}, false)
	p.commit(12, nil, false)
	if a := p.applied(); a != 10 {
		t.Fatalf("a commit of span 1 not arrived yet: applied %d, want 10", a)
	}
	p.change(0, 11) // another span's change does not do
	if a := p.applied(); a != 10 {
		t.Fatalf("applied %d, want 10", a)
	}
	p.change(1, 11)
	if a := p.applied(); a != 12 {
		t.Fatalf("span 1's change arrived: applied %d, want 12", a)
	}
	p.commit(13, nil, true) // not a marker: every span
	p.change(0, 13)
	if a := p.applied(); a != 12 {
		t.Fatalf("span 1 has not reached 13: applied %d, want 12", a)
	}
	p.pending[0].seen = p.pending[0].seen.Add(-2 * markerWait)
	if a := p.applied(); a != 13 {
		t.Fatalf("a change that never came holds the revision for markerWait only: applied %d, want 13", a)
	}
	p.change(1, 20) // a change no marker announces (written straight into etcd)
	if a := p.applied(); a != 13 {
		t.Fatalf("an unannounced change is reported after markerWait: applied %d, want 13", a)
	}
	p.lastAt = p.lastAt.Add(-2 * markerWait)
	if a := p.applied(); a != 20 {
		t.Fatalf("an unannounced change markerWait old: applied %d, want 20", a)
	}
	if _, ok := touches([]byte("2026-12-06T00:00:00Z"), nil); ok {
		t.Error("an older writer's marker (a time) read as naming spans")
	}
	spans, ok := touches([]byte(markerOf([]Op{{Scope: "set/A", Kind: "eips"}, {Kind: "edgesets"}})), []span{primary("edgesets"), primary("eips"), {name: "set/A"}, {name: "set/B"}})
	if !ok || !slices.Equal(spans, []int{0, 2}) {
		t.Errorf("touches = %v, %v; want [0 2]", spans, ok)
	}
}

func TestParseKeyRefusesGuestCopies(t *testing.T) {
	if _, _, ok := ParseKey(Key(model.KindGuestCopy, "h1/g1")); ok {
		t.Error("a guest copy under the primary root parses as an object")
	}
	if kind, key, ok := ParseKey(Key(model.KindHost, "h1")); !ok || kind != model.KindHost || key != "h1" {
		t.Errorf("ParseKey of a host: %q %q %v", kind, key, ok)
	}
	if _, kind, key, ok := ParseScopeKey(ScopeKey("set/a", model.KindGuestCopy, "h1/g1")); !ok || kind != model.KindGuestCopy || key != "h1/g1" {
		t.Errorf("ParseScopeKey of a guest copy: %q %q %v", kind, key, ok)
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store/etcdembed"
	"github.com/azgate/azgate/internal/store/storetest"
)

var quiet = slog.New(slog.DiscardHandler)

func embedded(t *testing.T) *Store {
	t.Helper()
	dir := t.TempDir()
	e, err := etcdembed.StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s, err := Connect(Options{Endpoints: e.ClientURLs, TxnOps: etcdembed.TxnOps, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// external starts Debian's etcd (package etcd-server) on loopback ports
// and connects to it.
func external(t *testing.T) *Store {
	t.Helper()
	client := storetest.StartEtcd(t, "http")
	s, err := Connect(Options{Endpoints: []string{client}, Log: quiet}) // etcd's default: 128 ops per txn
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for deadline := time.Now().Add(20 * time.Second); s.Ping(context.Background()) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s did not answer in 20s", client)
		}
	}
	return s
}

func TestEmbedded(t *testing.T) { suite(t, embedded(t)) }
func TestExternal(t *testing.T) { suite(t, external(t)) }

func suite(t *testing.T, s *Store) {
	t.Run("round trip", func(t *testing.T) { testRoundTrip(t, s) })
	t.Run("conflict", func(t *testing.T) { testConflict(t, s) })
	t.Run("conditional", func(t *testing.T) { testConditional(t, s) })
	t.Run("follow", func(t *testing.T) { testFollow(t, s) })
	t.Run("resync after compaction", func(t *testing.T) { testCompaction(t, s) })
}

// clear removes every object so subtests start empty.
func clear(t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.Client.Delete(context.Background(), "/azgate/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, objs ...model.Object) []Op {
	t.Helper()
	ops := make([]Op, len(objs))
	for i, o := range objs {
		b, err := Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		ops[i] = Op{Kind: model.KindOf(o), Key: o.Key(), Value: b}
	}
	return ops
}

func eips(n int) []model.Object {
	out := make([]model.Object, n)
	for i := range out {
		out[i] = &model.EIP{Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), Description: fmt.Sprint(i)}
	}
	return out
}

func testRoundTrip(t *testing.T, s *Store) {
	clear(t, s)
	ctx := context.Background()
	_, rev, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	objs := append([]model.Object{
		&model.AZ{Name: "az1", Region: "r1"},
		&model.Host{Name: "h1", AZ: "az1", Underlay: netip.MustParseAddr("198.18.1.1"),
			Guests: []model.Guest{{Name: "g1", Address: netip.MustParseAddr("198.19.1.1"), VSID: 5001}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, Edges: []model.EdgeNode{}},
	}, eips(250)...) // more than one transaction of an external etcd (128 ops)
	rev2, err := s.Commit(ctx, rev, put(t, objs...))
	if err != nil {
		t.Fatal(err)
	}
	if rev2 <= rev {
		t.Fatalf("revision %d after commit at %d", rev2, rev)
	}
	if c, err := s.CommitRevision(ctx); err != nil || c != rev2 {
		t.Errorf("commit revision %d, %v; want %d", c, err, rev2)
	}
	// A value that does not decode is skipped, not fatal.
	if _, err := s.Client.Put(ctx, Key(model.KindAZ, "broken"), "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.Put(ctx, Key(model.KindAZ, "other-key"), `{"name": "az9"}`); err != nil {
		t.Fatal(err)
	}
	st, rev3, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev3 < rev2 {
		t.Errorf("load at %d before the commit at %d", rev3, rev2)
	}
	if st.Len(model.KindEIP) != 250 || st.Len(model.KindAZ) != 1 || st.Hosts["h1"].Guests[0].VSID != 5001 ||
		st.EdgeSets["pop-a"].Prefixes[0].String() != "198.51.100.0/24" || st.EIPs["198.51.100.250"].Description != "249" {
		t.Errorf("loaded %d AZs, %d EIPs, host %+v", st.Len(model.KindAZ), st.Len(model.KindEIP), st.Hosts["h1"])
	}
	// Deletes.
	if _, err := s.Commit(ctx, rev3, []Op{{Kind: model.KindEIP, Key: "198.51.100.1"}, {Kind: model.KindAZ, Key: "broken"}}); err != nil {
		t.Fatal(err)
	}
	st, _, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.EIPs["198.51.100.1"]; ok || st.Len(model.KindEIP) != 249 {
		t.Error("deleted EIP still there")
	}
}

func testConflict(t *testing.T, s *Store) {
	clear(t, s)
	ctx := context.Background()
	_, rev, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rev, put(t, &model.AZ{Name: "az1"})); err != nil {
		t.Fatal(err)
	}
	got, err := s.Commit(ctx, rev, put(t, &model.AZ{Name: "az2"}))
	if !errors.Is(err, ErrConflict) || got != rev {
		t.Fatalf("stale commit: %d, %v; want ErrConflict", got, err)
	}
	st, _, _ := s.Load(ctx)
	if _, ok := st.AZs["az2"]; ok {
		t.Error("the stale commit was written")
	}
	// Writes that bypass the commit marker (node statuses) do not conflict.
	_, rev, _ = s.Load(ctx)
	if _, err := s.Client.Put(ctx, StatusRoot+"edge/e1", "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rev, put(t, &model.AZ{Name: "az3"})); err != nil {
		t.Errorf("a status write made a commit conflict: %v", err)
	}
	if r, err := s.Commit(ctx, rev, nil); err != nil || r != rev {
		t.Errorf("empty commit: %d, %v", r, err)
	}
}

// follower records what Follow hands over.
type follower struct {
	mu      sync.Mutex
	resyncs int
	rev     int64
	events  []Event
	st      map[string]int // object counts at the last call
	onSync  func(n int)    // called (outside mu) on each resync
	changed chan struct{}
}

func newFollower() *follower { return &follower{changed: make(chan struct{}, 1000)} }

func (f *follower) handle(st *model.State, rev int64, evs []Event, resync bool) {
	f.mu.Lock()
	f.rev = rev
	f.st = map[string]int{}
	for _, k := range model.Kinds {
		f.st[k] = st.Len(k)
	}
	n := 0
	if resync {
		f.resyncs++
		n = f.resyncs
	} else {
		f.events = append(f.events, evs...)
	}
	f.mu.Unlock()
	if n > 0 && f.onSync != nil {
		f.onSync(n)
	}
	f.changed <- struct{}{}
}

func (f *follower) wait(t *testing.T, cond func(f *follower) bool) {
	t.Helper()
	waitUntil(t, &f.mu, f.changed, "the condition", func() bool { return cond(f) }, func() string {
		return fmt.Sprintf("%d resyncs, %d events, counts %v", f.resyncs, len(f.events), f.st)
	})
}

// waitUntil checks cond, under mu, after every signal on changed (and
// every 50 ms), and fails the test if it is not met within 20 s, with
// what and state (called under mu).
func waitUntil(t *testing.T, mu *sync.Mutex, changed <-chan struct{}, what string, cond func() bool, state func() string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		mu.Lock()
		ok := cond()
		mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		case <-timeout:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s not reached after 20s: %s", what, state())
		}
	}
}

func follow(t *testing.T, s *Store, f *follower) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Follow(ctx, f.handle) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Follow ended with %v", err)
		}
	})
}

func testFollow(t *testing.T, s *Store) {
	clear(t, s)
	ctx := context.Background()
	_, rev, _ := s.Load(ctx)
	rev, err := s.Commit(ctx, rev, put(t, &model.AZ{Name: "az1"}))
	if err != nil {
		t.Fatal(err)
	}
	f := newFollower()
	follow(t, s, f)
	f.wait(t, func(f *follower) bool { return f.resyncs == 1 })
	if f.st[model.KindAZ] != 1 {
		t.Errorf("first load: %v", f.st)
	}
	rev1, err := s.Commit(ctx, rev, put(t, &model.AZ{Name: "az2"}, &model.AZ{Name: "az3"}))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := s.Commit(ctx, rev1, []Op{{Kind: model.KindAZ, Key: "az1"}})
	if err != nil {
		t.Fatal(err)
	}
	f.wait(t, func(f *follower) bool { return len(f.events) == 3 })
	want := []Event{{Kind: "azs", Key: "az2", Rev: rev1}, {Kind: "azs", Key: "az3", Rev: rev1}, {Kind: "azs", Key: "az1", Rev: rev2}}
	for i, e := range f.events {
		w := want[i]
		if e.Kind != w.Kind || e.Key != w.Key || e.Rev != w.Rev || (e.Obj == nil) != (i == 2) {
			t.Errorf("event %d: %+v, want %+v (deleted: %v)", i, e, w, i == 2)
		}
	}
	if f.st[model.KindAZ] != 2 || f.rev < rev2 {
		t.Errorf("state after the events: %v at %d", f.st, f.rev)
	}
}

// testCompaction compacts the history the watch would start from, while
// Follow is handing over its first load: Follow must load again.
func testCompaction(t *testing.T, s *Store) {
	clear(t, s)
	ctx := context.Background()
	f := newFollower()
	f.onSync = func(n int) {
		if n != 1 {
			return
		}
		rev, err := s.CommitRevision(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, name := range []string{"az7", "az8"} {
			if rev, err = s.Commit(ctx, rev, put(t, &model.AZ{Name: name})); err != nil {
				t.Error(err)
				return
			}
		}
		if _, err := s.Client.Compact(ctx, rev); err != nil {
			t.Error(err)
		}
	}
	follow(t, s, f)
	f.wait(t, func(f *follower) bool { return f.resyncs >= 2 && f.st[model.KindAZ] == 2 })
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key, kind, obj string
		ok             bool
	}{
		{Root + "eips/198.51.100.7", "eips", "198.51.100.7", true},
		{Root + "azs/", "", "", false},
		{Root + "azs", "", "", false},
		{StatusRoot + "edge/e1", "", "", false},
	} {
		kind, key, ok := ParseKey(tc.key)
		if ok != tc.ok || (ok && (kind != tc.kind || key != tc.obj)) {
			t.Errorf("ParseKey(%q) = %q, %q, %v", tc.key, kind, key, ok)
		}
	}
	if !strings.HasPrefix(Key("hosts", "h1"), Root) {
		t.Error(Key("hosts", "h1"))
	}
}

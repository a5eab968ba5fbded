package store

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
)

func TestPageSizer(t *testing.T) {
	p := pageSizer{budget: LoadPageBytes}
	if got := p.limit(); got != firstPage {
		t.Errorf("first page %d keys, want %d", got, firstPage)
	}
	small := pageSizer{budget: 1000}
	if got := small.limit(); got != 3 { // 1000 / 256
		t.Errorf("first page of a 1000-byte budget %d keys, want 3", got)
	}
	// 200-byte keys and values (224 with the overhead): the budget at
	// that size.
	kv := &mvccpb.KeyValue{Key: make([]byte, 50), Value: make([]byte, 150)}
	for range 10 {
		p.add(kv)
	}
	if got, want := p.limit(), int64(LoadPageBytes/(200+kvOverhead)); got != want {
		t.Errorf("page of 224-byte keys %d, want %d", got, want)
	}
	// Tiny keys: no more than loadPage a page (etcd's count per page).
	tiny := pageSizer{budget: LoadPageBytes}
	tiny.add(&mvccpb.KeyValue{Key: []byte("k")})
	if got := tiny.limit(); got != loadPage {
		t.Errorf("page of tiny keys %d, want %d", got, loadPage)
	}
	// A key larger than the budget: one a page.
	big := pageSizer{budget: 1000}
	big.add(&mvccpb.KeyValue{Key: []byte("k"), Value: make([]byte, 5000)})
	if got := big.limit(); got != 1 {
		t.Errorf("page of keys over the budget %d, want 1", got)
	}
}

// A full load in many pages reads one revision: writes that land between
// its pages are not in it.
func TestLoadPagesOneRevision(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	objs := eips(250)
	rev, err := s.Commit(ctx, 0, put(t, objs...))
	if err != nil {
		t.Fatal(err)
	}
	s.loadPageBytes = 2048
	var pages []int
	var wrote int64
	s.onPage = func(_ string, keys, _ int) {
		if keys > 0 {
			pages = append(pages, keys)
		}
		if len(pages) != 1 || wrote != 0 {
			return
		}
		// After the first page: change an EIP and delete another, both
		// in later pages.
		e := *objs[199].(*model.EIP)
		e.Description = "changed"
		ops := put(t, &e)
		ops = append(ops, Op{Kind: model.KindEIP, Key: objs[249].Key()})
		r, err := s.Commit(ctx, rev, ops)
		if err != nil {
			t.Error(err)
		}
		wrote = r
	}
	st, loaded, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wrote <= loaded {
		t.Errorf("the load's revision %d is not before the write in its middle (%d)", loaded, wrote)
	}
	if st.Len(model.KindEIP) != 250 || st.EIPs[objs[199].Key()].Description != "199" {
		t.Errorf("loaded %d EIPs, EIP %s %q: the write between pages leaked into the load", st.Len(model.KindEIP), objs[199].Key(), st.EIPs[objs[199].Key()].Description)
	}
	// Pages of about 2 kB: the first of 2048/256 = 8 keys, the others
	// as many as fit at the mean size so far; the EIP range alone (each
	// key and value well over 50 bytes) takes more than 250*50/2048.
	for _, n := range pages {
		if n > 2048/50 {
			t.Errorf("a page of %d keys, over a 2 kB budget", n)
		}
	}
	if pages[0] > 8 || len(pages) < 250*50/2048 {
		t.Errorf("pages %v: want a first of at most 8 keys and more than %d", pages, 250*50/2048)
	}
	// The next load sees the write.
	st, _, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Len(model.KindEIP) != 249 || st.EIPs[objs[199].Key()].Description != "changed" {
		t.Errorf("reloaded %d EIPs, %q", st.Len(model.KindEIP), st.EIPs[objs[199].Key()].Description)
	}
}

// The page budget of a span follows its size (budget 0): 1/loadPages of
// it, between LoadPageMinBytes and LoadPageBytes.
func TestPageSizerFromSpan(t *testing.T) {
	kv := &mvccpb.KeyValue{Key: make([]byte, 76), Value: make([]byte, 100)} // 200 bytes with the overhead
	for _, c := range []struct {
		total int64
		want  int64
	}{
		{1000, LoadPageMinBytes / 200},                       // 200 kB: pages of the minimum
		{200_000, 200_000 * 200 / loadPages / 200},           // 40 MB (an edge of a 100k-EIP set): 1/32 of it
		{5_000_000, min(LoadPageBytes/200, int64(loadPage))}, // 1 GB: the most
	} {
		p := pageSizer{}
		if got := p.limit(); got != firstPage {
			t.Errorf("first page %d keys, want %d", got, firstPage)
		}
		p.total = c.total
		p.add(kv)
		if got := p.limit(); got != c.want {
			t.Errorf("a span of %d keys of 200 bytes: pages of %d keys, want %d", c.total, got, c.want)
		}
	}
}

// A scope's full load is paged by its size: no page holds more than
// about LoadPageMinBytes of a span of 3 MB (one Range of it would); its
// largest page is counted on the copies, the span that grows with the
// share. The load is the whole scope.
func TestLoadPageBound(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 12_000
	desc := string(make([]byte, 200))
	objs := make([]model.Object, n)
	for i := range objs {
		objs[i] = &model.EIP{Address: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Description: strings.ReplaceAll(desc, "\x00", "d")}
	}
	ops := copyOps(t, "set/a", objs...)
	for lo := 0; lo < len(ops); lo += 1000 {
		commitNow(t, s, ops[lo:min(lo+1000, len(ops))])
	}
	f := sharing(s, quiet)
	var mu sync.Mutex
	var pages, largest, total int
	f.onPage = func(prefix string, keys, bytes int) {
		mu.Lock()
		defer mu.Unlock()
		if prefix == ScopeRoot+"set/a/" && keys > 0 {
			pages++
			largest = max(largest, bytes)
			total += bytes
		}
	}
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error { return f.FollowScope(ctx, Scope{Name: "set/a"}, rec) })
	rec.wait(t, "the scope loaded", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if got := len(rec.keys()); got != n {
		t.Fatalf("loaded %d copies, want %d", got, n)
	}
	t.Logf("%d copies, %d bytes in %d pages, the largest %d bytes", n, total, pages, largest)
	// The bound is 1 MiB, not LoadPageMinBytes: raising that is what
	// this test is to catch.
	const bound = 1 << 20
	if total < 2*bound {
		t.Fatalf("the span is %d bytes: too small to need pages", total)
	}
	// A page aims at the budget at the mean size of the keys before it:
	// 5% over it for keys of one size is a page of another budget.
	if largest > bound*105/100 || pages < total/bound {
		t.Errorf("%d pages, the largest %d bytes: want pages of at most ~%d bytes", pages, largest, bound)
	}
}

// An edge's or agent's full load (FollowScope) in many pages is one
// revision's snapshot: writes that land between its pages, to the
// copies and to a primary kind already read, are not in what it commits,
// and its watch then delivers them, each once, from the load's revision
// on.
func TestScopeLoadPagesOneRevision(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	objs := eips(250)
	commitNow(t, s, copyOps(t, "set/a", objs...), put(t, &model.AZ{Name: "az1"}))
	f := sharing(s, quiet)
	f.loadPageBytes = 2048
	var wrote int64
	hook := onCopyPage(f, 2, func() {
		// Between the copies' second and third pages: change a copy
		// and delete another, both in later pages, and add an AZ (a
		// span read already).
		e := *objs[199].(*model.EIP)
		e.Description = "changed"
		ops := copyOps(t, "set/a", &e)
		ops = append(ops, Op{Scope: "set/a", Kind: model.KindEIP, Key: objs[249].Key()})
		ops = append(ops, put(t, &model.AZ{Name: "az2"})...)
		rev, err := s.CommitRevision(ctx)
		if err == nil {
			rev, err = s.Commit(ctx, rev, ops)
		}
		if err != nil {
			t.Error(err)
		}
		wrote = rev
	})
	rec := newScopeRec()
	var loaded map[string]string
	rec.onSync = func(n int) {
		if n == 1 {
			rec.mu.Lock()
			loaded = maps.Clone(rec.state)
			rec.mu.Unlock()
		}
	}
	runFollower(t, func(ctx context.Context) error {
		return f.FollowScope(ctx, Scope{Name: "set/a", Kinds: []string{model.KindAZ}}, rec)
	})
	rec.wait(t, "the write after the load watched", func(r *scopeRec) bool {
		return len(r.resyncs) == 1 && slices.Contains(slices.Collect(maps.Keys(r.state)), model.KindAZ+"/az2")
	})
	hook.mu.Lock()
	defer hook.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if hook.pages < 3 {
		t.Fatalf("the copies came in %d pages: the write was not between pages", hook.pages)
	}
	if rec.resyncs[0] >= wrote {
		t.Errorf("the load's revision %d is not before the write between its pages (%d)", rec.resyncs[0], wrote)
	}
	k199, k249 := model.KindEIP+"/"+objs[199].Key(), model.KindEIP+"/"+objs[249].Key()
	if len(loaded) != 251 || loaded[model.KindAZ+"/az2"] != "" || !strings.Contains(loaded[k199], `"199"`) || loaded[k249] == "" {
		t.Errorf("the load committed %d objects (want 250 copies and az1), az2 %q, %s %q, %s %q: a write between pages leaked into it",
			len(loaded), loaded[model.KindAZ+"/az2"], k199, loaded[k199], k249, loaded[k249])
	}
	want := []string{
		fmt.Sprintf("put %s/az2 @%d", model.KindAZ, wrote),
		fmt.Sprintf("put %s @%d", k199, wrote),
		fmt.Sprintf("del %s @%d", k249, wrote),
	}
	slices.Sort(want)
	if got := slices.Sorted(slices.Values(rec.watched)); !slices.Equal(got, want) {
		t.Errorf("watched %v after the load, want %v", got, want)
	}
	if !strings.Contains(rec.state[k199], "changed") || rec.state[k249] != "" || len(rec.state) != 251 {
		t.Errorf("after the watch: %d objects, %s %q, %s %q", len(rec.state), k199, rec.state[k199], k249, rec.state[k249])
	}
}

// A scope's copies are read kind by kind (scanParts), and the ranges
// between and around the kinds too: the load hands the sink every key of
// the scope once, those under no kind and between kinds' prefixes
// included, as one range of the scope would.
func TestScopeLoadByKindKeepsEveryKey(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := ScopeRoot + "set/a/"
	commitNow(t, s, copyOps(t, "set/a", eips(30)...), copyOps(t, "set/a", &model.AZ{Name: "az1"}))
	for _, k := range []string{"aaa/x", model.KindEIP + "x/y", model.KindEIP + "0/z", "zzz/w", model.KindGuestCopy + "/h1/g1"} {
		if _, err := s.Client.Put(ctx, prefix+k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, kv := range resp.Kvs {
		_, kind, key, ok := ParseScopeKey(string(kv.Key))
		if !ok {
			t.Fatalf("key %s", kv.Key)
		}
		want = append(want, kind+"/"+key)
	}
	for _, budget := range []int{0, 256, 2048} { // pages sized by the ranges (the scope is one page); a key a page; 8 keys a page (the first page, of the whole scope, ends among the EIPs)
		f := sharing(s, quiet)
		f.loadPageBytes = budget
		var got []string
		f.onPage = func(string, int, int) {}
		rec := newScopeRec()
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- f.FollowScope(ctx, Scope{Name: "set/a"}, sinkFunc{rec, func(kind, key string) { got = append(got, kind+"/"+key) }})
		}()
		rec.wait(t, "the scope loaded", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
		cancel()
		<-done
		if !slices.Equal(got, want) {
			t.Errorf("budget %d: the load handed over %v, want %v (one range's keys, in order)", budget, got, want)
		}
	}
}

// sinkFunc passes a follow on to a Sink and calls put with each Put.
type sinkFunc struct {
	Sink
	put func(kind, key string)
}

func (f sinkFunc) Put(kind, key string, value []byte, rev int64) {
	f.put(kind, key)
	f.Sink.Put(kind, key, value, rev)
}

// A scope that fits in one page (an agent's host scope, a small set's)
// is read in one request, as before its load was split kind by kind: a
// request per kind and per gap between kinds (28 for a host scope of 5
// EIPs) made every agent's load ~10 times slower and a fleet's reload
// that many more requests to etcd.
func TestScopeLoadSmallIsOnePage(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	commitNow(t, s, copyOps(t, "host/h1", eips(5)...), copyOps(t, "host/h1", &model.AZ{Name: "az1"}))
	f := sharing(s, quiet)
	var mu sync.Mutex
	var pages []int
	f.onPage = func(prefix string, keys, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if prefix == ScopeRoot+"host/h1/" {
			pages = append(pages, keys)
		}
	}
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error { return f.FollowScope(ctx, Scope{Name: "host/h1"}, rec) })
	rec.wait(t, "the scope loaded", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if got := len(rec.keys()); got != 6 {
		t.Fatalf("loaded %d copies, want 6", got)
	}
	if !slices.Equal(pages, []int{6}) {
		t.Errorf("the scope of 6 copies was read in %d requests (keys %v), want one", len(pages), pages)
	}
}

// A full load whose revision is compacted between its pages fails (the
// rest of its pages cannot be read at that revision) and is done again
// at a later revision: nothing of the failed load is committed, and the
// load committed holds the write the compaction came after.
func TestScopeLoadCompactedBetweenPages(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	if err := s.MarkLayout(ctx); err != nil {
		t.Fatal(err)
	}
	objs := eips(100)
	commitNow(t, s, copyOps(t, "set/a", objs...))
	f := sharing(s, quiet)
	f.loadPageBytes = 2048
	var compacted int64
	hook := onCopyPage(f, 2, func() {
		rev := commitNow(t, s, copyOps(t, "set/a", eip("198.51.100.200", "after")))
		if _, err := s.Client.Compact(ctx, rev); err != nil {
			t.Error(err)
		}
		compacted = rev
	})
	rec := newScopeRec()
	runFollower(t, func(ctx context.Context) error { return f.FollowScope(ctx, Scope{Name: "set/a"}, rec) })
	rec.wait(t, "the scope loaded", func(r *scopeRec) bool { return len(r.resyncs) == 1 })
	hook.mu.Lock()
	defer hook.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if compacted == 0 {
		t.Fatalf("the copies came in %d pages: no compaction between them", hook.pages)
	}
	if rec.resets != 2 || rec.resyncs[0] < compacted || len(rec.state) != 101 || !strings.Contains(rec.state[model.KindEIP+"/198.51.100.200"], "after") {
		t.Errorf("%d loads, the first committed at %d (compacted at %d) with %d copies: want the second load, at or after %d, with 101",
			rec.resets, rec.resyncs[0], compacted, len(rec.state), compacted)
	}
}

// copyPageHook counts the non-empty pages of set/a's copies in a
// store's loads; pages, and what its fn wrote, are read under mu.
type copyPageHook struct {
	mu    sync.Mutex
	pages int
}

// onCopyPage makes f call fn (under the hook's mu) after the n-th
// non-empty page of set/a's copies, between that page and the next.
func onCopyPage(f *Store, n int, fn func()) *copyPageHook {
	h := &copyPageHook{}
	f.onPage = func(prefix string, keys, _ int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if prefix != ScopeRoot+"set/a/" || keys == 0 {
			return
		}
		if h.pages++; h.pages == n {
			fn()
		}
	}
	return h
}

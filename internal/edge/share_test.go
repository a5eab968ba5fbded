package edge

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// countingSink passes a follow on to a sink and counts the objects put
// (by kind) since the last clear, and the last revision committed.
type countingSink struct {
	store.Sink
	mu   sync.Mutex
	puts map[string]int
	keys map[string]bool // kind/key put
	rev  int64
}

func newCountingSink(s store.Sink) *countingSink {
	return &countingSink{Sink: s, puts: map[string]int{}, keys: map[string]bool{}}
}

func (c *countingSink) Put(kind, key string, value []byte, rev int64) {
	c.mu.Lock()
	c.puts[kind]++
	c.keys[kind+"/"+key] = true
	c.mu.Unlock()
	c.Sink.Put(kind, key, value, rev)
}

func (c *countingSink) Commit(rev int64, resync bool) {
	c.Sink.Commit(rev, resync)
	c.mu.Lock()
	c.rev = rev
	c.mu.Unlock()
}

func (c *countingSink) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.puts)
	clear(c.keys)
}

func (c *countingSink) committed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// indexSizes are the entries of every map of the edge's index (under
// r.mu): the memory an edge keeps per object of its share.
func indexSizes(r *Reconciler) map[string]int {
	x := r.idx
	guests := 0
	for _, h := range x.hosts {
		guests += len(h.guest)
	}
	return map[string]int{"hosts": len(x.hosts), "guests": guests, "sets": len(x.sets), "eips": len(x.eips),
		"services": len(x.services), "health": len(x.health), "names": len(x.names), "pulled": len(x.pulled),
		"quarantined": len(x.quarantined), "limits": len(x.limits), "fw": len(x.fw), "packages": len(x.packages),
		"bwOf": len(x.bwOf)}
}

// shareHost is a host of n guests, and n EIPs of prefix p bound to them
// (the first from offset 1).
func shareHost(name string, hostIdx, n int, p netip.Prefix) []model.Object {
	h := &model.Host{Name: name, AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 100, byte(hostIdx)})}
	var objs []model.Object
	for i := range n {
		g := model.Guest{Name: "g" + itoa(i), Address: netip.AddrFrom4([4]byte{198, 19, byte(hostIdx), byte(1 + i)}), VSID: uint32(10000 + 100*hostIdx + i)}
		h.Guests = append(h.Guests, g)
		b := p.Addr().As4()
		b[3] = 0
		addr := netip.AddrFrom4(b)
		for range 1 + (hostIdx%10)*n + i {
			addr = addr.Next()
		}
		objs = append(objs, &model.EIP{Address: addr, Binding: &model.Binding{Host: name, Guest: g.Name}})
	}
	return append([]model.Object{h}, objs...)
}

var (
	prefixA = netip.MustParsePrefix("198.51.100.0/24")
	prefixB = netip.MustParsePrefix("203.0.113.0/24")
)

func twoSets(aEdges, bEdges []string) []model.Object {
	nodes := func(names []string, base byte) []model.EdgeNode {
		var out []model.EdgeNode
		for i, n := range names {
			out = append(out, model.EdgeNode{Name: n, Underlay: netip.AddrFrom4([4]byte{198, 18, base, byte(1 + i)})})
		}
		return out
	}
	return []model.Object{
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefixA}, Edges: nodes(aEdges, 1)},
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefixB}, Edges: nodes(bEdges, 2)},
	}
}

// TestEdgeShareIgnoresOtherSets is issue 19's proof for the edge: a region
// of two prefix sets, written as the controller writes it (primary keys
// and placement's copies); the edges follow their sets' shares over
// embedded etcd on fake maps. Adding ten times the EIPs of set A (bound,
// on hosts of their own) to set B reaches B's edge, and leaves A's edge's
// route map and the sizes of its index as they were; A's edge receives
// not one of B's objects.
//
// The figures are map entries and index sizes: the RSS of an in-process
// node cannot be told apart from the test's (the fleet bench measures
// processes).
func TestEdgeShareIgnoresOtherSets(t *testing.T) {
	const n = 20
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	objs := append([]model.Object{&model.AZ{Name: "az1"}}, twoSets([]string{"edge-a1"}, []string{"edge-b1"})...)
	objs = append(objs, shareHost("az1-a0", 0, n, prefixA)...)
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}

	fakeA, fakeB := dataplane.NewFakeEdge(), dataplane.NewFakeEdge()
	ra := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fakeA)
	rb := NewReconciler(Config{Name: "edge-b1", Log: quiet}, fakeB)
	defer ra.Stop()
	defer rb.Stop()
	ca := newCountingSink(ra)
	go FollowShare(ctx, s, "edge-a1", ca, quiet)
	go FollowShare(ctx, s, "edge-b1", rb, quiet)
	until(t, ra, "edge-a1 holds set A's EIPs", func() bool { return len(fakeA.RouteMap) == n })
	ra.mu.Lock()
	routesA := maps.Clone(fakeA.RouteMap)
	sizesA := indexSizes(ra)
	ra.mu.Unlock()
	ca.clear()
	t.Logf("edge-a1 with %d EIPs in its set: %d routes, index %v", n, len(routesA), sizesA)

	// Ten times as many EIPs in set B, on ten hosts of their own.
	var more []model.Object
	for h := 1; h <= 10; h++ {
		more = append(more, shareHost(fmt.Sprintf("az1-b%d", h), h, n, prefixB)...)
	}
	if _, err := placementtest.Put(ctx, s, more...); err != nil {
		t.Fatal(err)
	}
	until(t, rb, "edge-b1 holds set B's EIPs", func() bool { return len(fakeB.RouteMap) == 10*n })
	// A change every edge reads, after B's: once edge-a1 committed it, it
	// has seen every change before it (a watch delivers in order).
	marker, err := placementtest.Put(ctx, s, &model.AZ{Name: "az2"})
	if err != nil {
		t.Fatal(err)
	}
	until(t, ra, "edge-a1 committed the change after B's", func() bool { return ca.committed() >= marker })

	ra.mu.Lock()
	defer ra.mu.Unlock()
	if !maps.Equal(fakeA.RouteMap, routesA) {
		t.Errorf("edge-a1's routes changed: %d entries, were %d", len(fakeA.RouteMap), len(routesA))
	}
	if got := indexSizes(ra); !maps.Equal(got, sizesA) {
		t.Errorf("edge-a1's index changed: %v, was %v", got, sizesA)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if len(ca.keys) != 1 || !ca.keys[model.KindAZ+"/az2"] {
		t.Errorf("edge-a1 received objects of set B: %d puts %v (want only az/az2)", len(ca.keys), ca.puts)
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	t.Logf("edge-a1 after %d EIPs were added to set B: %d routes, index %v; edge-b1: %d routes, index %v",
		10*n, len(fakeA.RouteMap), indexSizes(ra), len(fakeB.RouteMap), indexSizes(rb))
}

// setChecker passes a follow on to an edge's reconciler and checks after
// every commit that the maps hold routes of the edge's set only: the
// share of one set never committed as another's. (An edge in no set
// refuses to program anything and keeps its maps: not checked.)
type setChecker struct {
	store.Sink
	r       *Reconciler
	fake    *dataplane.FakeEdge
	name    string
	mu      sync.Mutex
	bad     []string
	resyncs int
}

func (c *setChecker) Commit(rev int64, resync bool) {
	c.Sink.Commit(rev, resync)
	c.r.mu.Lock()
	set, _, inSet := c.r.idx.edgeSetOf(c.name)
	var bad []string
	for addr := range c.fake.RouteMap {
		if inSet && !set.Contains(addr) {
			bad = append(bad, fmt.Sprintf("revision %d: route of %v while the edge's set is %v", rev, addr, set))
		}
	}
	c.r.mu.Unlock()
	c.mu.Lock()
	c.bad = append(c.bad, bad...)
	if resync {
		c.resyncs++
	}
	c.mu.Unlock()
}

// TestFollowShareFollowsItsSet: an edge moved from set A to set B, out
// of every set and back into A follows each time the new set's share
// (its index holds that set's EIPs only), and no commit ever leaves it
// with routes of another set than its own (the change that moves it is
// not committed with the old share).
func TestFollowShareFollowsItsSet(t *testing.T) {
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := append([]model.Object{&model.AZ{Name: "az1"}}, twoSets([]string{"edge-a1", "edge-x"}, []string{"edge-b1"})...)
	objs = append(objs, shareHost("az1-a0", 0, 3, prefixA)...)
	objs = append(objs, shareHost("az1-b1", 1, 4, prefixB)...)
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}
	fake := dataplane.NewFakeEdge()
	r := NewReconciler(Config{Name: "edge-x", Log: quiet}, fake)
	defer r.Stop()
	c := &setChecker{Sink: r, r: r, fake: fake, name: "edge-x"}
	done := make(chan struct{})
	go func() { FollowShare(ctx, s, "edge-x", c, quiet); close(done) }()

	inSet := func(set string, routes int) func() bool {
		return func() bool {
			es, _, ok := r.idx.edgeSetOf("edge-x")
			if set == "" {
				// Its share is the kinds every edge reads: no EIP, no host
				// (the maps keep what they held: the reconciler refuses to
				// program an edge in no set).
				return !ok && len(r.idx.eips) == 0 && len(r.idx.hosts) == 0
			}
			return ok && es.Name == set && len(fake.RouteMap) == routes && len(r.idx.eips) == routes
		}
	}
	until(t, r, "edge-x holds set A's EIPs", inSet("pop-a", 3))
	for _, step := range []struct {
		aEdges, bEdges []string
		set            string
		routes         int
	}{
		{[]string{"edge-a1"}, []string{"edge-b1", "edge-x"}, "pop-b", 4},
		{[]string{"edge-a1"}, []string{"edge-b1"}, "", 0},
		{[]string{"edge-a1", "edge-x"}, []string{"edge-b1"}, "pop-a", 3},
	} {
		if _, err := placementtest.Put(ctx, s, twoSets(step.aEdges, step.bEdges)...); err != nil {
			t.Fatal(err)
		}
		until(t, r, fmt.Sprintf("edge-x follows set %q", step.set), inSet(step.set, step.routes))
	}
	cancel()
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) != 0 {
		t.Errorf("%d commits with routes of another set, e.g. %s", len(c.bad), c.bad[0])
	}
	if c.resyncs < 4 {
		t.Errorf("%d full loads, want one per set followed (4)", c.resyncs)
	}
}

// holdChecker passes a follow on to an edge's reconciler and checks,
// after every call, that the plan the announcer reads (AnnouncePlan: the
// routes the edge announces, and writes in its announce key for the
// agents) lists a route covering eip only while the edge's route map
// holds eip's binding: an agent that switches eip's replies to the edge's
// set once the announcement lists it (agent.GroupPlan.ReplySet) finds the
// edge ready. With always, the route map must hold eip after every
// commit (the prefix set's edge, a carrier all along).
type holdChecker struct {
	store.Sink
	r      *Reconciler
	fake   *dataplane.FakeEdge
	eip    netip.Addr
	host   netip.Addr
	always bool

	mu        sync.Mutex
	loaded    bool
	announced int // commits after which the plan lists eip
	bad       []string
}

func (c *holdChecker) check(what string, rev int64, commit bool) {
	c.r.mu.Lock()
	rt, held := c.fake.RouteMap[c.eip]
	held = held && rt.Host == c.host
	c.r.mu.Unlock()
	lists := false
	for _, p := range c.r.AnnouncePlan().Prefixes {
		lists = lists || p.Contains(c.eip)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if lists && !held {
		c.bad = append(c.bad, fmt.Sprintf("%s at revision %d: %v announced without its route (%+v)", what, rev, c.eip, rt))
	}
	if commit {
		c.loaded = true
		if lists {
			c.announced++
		}
	}
	if c.always && c.loaded && !held {
		c.bad = append(c.bad, fmt.Sprintf("%s at revision %d: %v's route missing (%+v)", what, rev, c.eip, rt))
	}
}

func (c *holdChecker) Put(kind, key string, value []byte, rev int64) {
	c.Sink.Put(kind, key, value, rev)
	c.check("put "+kind+"/"+key, rev, false)
}

func (c *holdChecker) Delete(kind, key string, rev int64) {
	c.Sink.Delete(kind, key, rev)
	c.check("delete "+kind+"/"+key, rev, false)
}

func (c *holdChecker) Commit(rev int64, resync bool) {
	c.Sink.Commit(rev, resync)
	c.check("commit", rev, true)
}

// TestShareAnnouncesOnlyWhatItHolds: edges following their sets' shares
// (a prefix set's, a dedicated set's, the quarantine set's) while an EIP
// is pulled out, quarantined, released from the quarantine and returned.
// An edge's plan lists the EIP's /32 only while its maps hold the EIP's
// binding, at every put, delete and commit of its follow; the prefix
// set's edge holds the binding throughout (the agents send the replies
// to it until the set serving the EIP announces it: the edge's egress
// anti-spoofing takes a reply only from the host the EIP is bound to).
func TestShareAnnouncesOnlyWhatItHolds(t *testing.T) {
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := []model.Object{&model.AZ{Name: "az1"},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefixA}, Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.1.1")}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-h1", Underlay: a("198.18.2.1")}}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.3.1")}}},
	}
	host := shareHost("az1-a1", 1, 3, prefixA)
	objs = append(objs, host...)
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}
	bound := *host[1].(*model.EIP)
	eip, ul := bound.Address, host[0].(*model.Host).Underlay

	checkers := map[string]*holdChecker{}
	for _, name := range []string{"edge-a1", "edge-h1", "edge-q1"} {
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: name, Log: quiet}, fake)
		defer r.Stop()
		c := &holdChecker{Sink: r, r: r, fake: fake, eip: eip, host: ul, always: name == "edge-a1"}
		checkers[name] = c
		go FollowShare(ctx, s, name, c, quiet)
	}
	lists := func(name string) bool {
		for _, p := range checkers[name].r.AnnouncePlan().Prefixes {
			if p.Contains(eip) {
				return true
			}
		}
		return false
	}
	// step writes objs (or deletes ref) and waits until every edge applied
	// the commit and which edges list the EIP's /32 is want.
	step := func(what string, want map[string]bool, ref *placement.Ref, objs ...model.Object) {
		t.Helper()
		var rev int64
		var err error
		if ref != nil {
			rev, err = placementtest.Delete(ctx, s, *ref)
		} else {
			rev, err = placementtest.Put(ctx, s, objs...)
		}
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range checkers {
			until(t, c.r, what+": "+name+" applied it", func() bool { return c.r.rev >= rev })
			if got := lists(name); got != want[name] {
				t.Fatalf("%s: %s lists %v: %v, want %v", what, name, eip, got, want[name])
			}
		}
	}
	step("bound (a change every edge reads after the load)", map[string]bool{"edge-a1": true}, nil, &model.AZ{Name: "az2"})
	pulled := bound
	pulled.Set = "hot"
	step("pulled out", map[string]bool{"edge-a1": true, "edge-h1": true}, nil, &pulled)
	step("quarantined", map[string]bool{"edge-a1": true, "edge-q1": true}, nil, &model.Quarantine{Address: eip})
	step("quarantine released", map[string]bool{"edge-a1": true, "edge-h1": true}, &placement.Ref{Kind: model.KindQuarantine, Key: eip.String()})
	step("returned", map[string]bool{"edge-a1": true}, nil, &bound)

	for name, c := range checkers {
		c.mu.Lock()
		if len(c.bad) > 0 {
			t.Errorf("%s: %d violations, the first: %v", name, len(c.bad), c.bad[:min(3, len(c.bad))])
		}
		if name != "edge-a1" && c.announced == 0 {
			t.Errorf("%s never listed %v", name, eip)
		}
		c.mu.Unlock()
	}
}

package edge

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// fakeSpeaker records what the announcer tells it.
type fakeSpeaker struct {
	mu         sync.Mutex
	cfg        *bgp.Config
	prefixes   []netip.Prefix
	waited     int
	stopped    int
	configures int
	// failAnnounce: announcing (not withdrawing) fails.
	failAnnounce atomic.Bool
}

func (f *fakeSpeaker) Configure(_ context.Context, c bgp.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.Validate(); err != nil {
		return err
	}
	f.cfg = &c
	f.configures++
	return nil
}

func (f *fakeSpeaker) Announce(_ context.Context, p []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) > 0 && f.failAnnounce.Load() {
		return errors.New("speaker refused the routes")
	}
	f.prefixes = slices.Clone(p)
	return nil
}

func (f *fakeSpeaker) WaitWithdrawn(context.Context, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waited++
	return nil
}

func (f *fakeSpeaker) Status(context.Context) *model.BGPStatus { return &model.BGPStatus{} }

func (f *fakeSpeaker) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped++
	f.prefixes = nil
}

func (f *fakeSpeaker) announced() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.prefixes {
		out = append(out, p.String())
	}
	return out
}

// fakeLeases is a store that can be cut off.
type fakeLeases struct {
	mu   sync.Mutex
	down atomic.Bool
	// hangRenewal: KeepAliveOnce waits for its context (a slow store).
	hangRenewal atomic.Bool
	next        store.LeaseID
	leases      map[store.LeaseID]bool
	keys        map[string][]byte
	owner       map[string]store.LeaseID
}

var errDown = errors.New("store unreachable")

func newFakeLeases() *fakeLeases {
	return &fakeLeases{leases: map[store.LeaseID]bool{}, keys: map[string][]byte{}, owner: map[string]store.LeaseID{}}
}

func (f *fakeLeases) Grant(context.Context, time.Duration) (store.LeaseID, error) {
	if f.down.Load() {
		return 0, errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.leases[f.next] = true
	return f.next, nil
}

func (f *fakeLeases) KeepAlive(context.Context, store.LeaseID) (<-chan struct{}, error) {
	return nil, errors.New("not used")
}

func (f *fakeLeases) KeepAliveOnce(ctx context.Context, id store.LeaseID) error {
	if f.down.Load() {
		return errDown
	}
	if f.hangRenewal.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leases[id] {
		return store.ErrLeaseNotFound
	}
	return nil
}

func (f *fakeLeases) Revoke(_ context.Context, id store.LeaseID) error {
	if f.down.Load() {
		return errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.leases, id)
	for k, o := range f.owner {
		if o == id {
			delete(f.keys, k)
			delete(f.owner, k)
		}
	}
	return nil
}

func (f *fakeLeases) WriteLeased(_ context.Context, id store.LeaseID, kvs []store.KV) error {
	if f.down.Load() {
		return errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leases[id] {
		return store.ErrLeaseNotFound
	}
	for _, kv := range kvs {
		if kv.Value == nil {
			delete(f.keys, kv.Key)
			delete(f.owner, kv.Key)
		} else {
			f.keys[kv.Key], f.owner[kv.Key] = kv.Value, id
		}
	}
	return nil
}

func (f *fakeLeases) key(k string) (model.Announcement, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.keys[k]
	var an model.Announcement
	if ok {
		json.Unmarshal(b, &an)
	}
	return an, ok
}

var _ store.Leases = (*fakeLeases)(nil)

// bgpRegion is region() with BGP settings on the set and its edge.
func bgpRegion(drained bool) []model.Object {
	objs := region()
	for i, o := range objs {
		if s, ok := o.(*model.EdgeSet); ok {
			s = &model.EdgeSet{Name: s.Name, Prefixes: s.Prefixes, Edges: slices.Clone(s.Edges),
				BGP: &model.SetBGP{ASN: 64601, HoldTime: 3, Keepalive: 1}}
			s.Edges[0].Drained = drained
			s.Edges[0].BGP = &model.NodeBGP{RouterID: a("203.0.113.2"), NextHop: a("203.0.113.2"),
				Peers: []model.BGPPeer{{Address: a("203.0.113.1"), ASN: 64512, Password: "pw"}}}
			objs[i] = s
		}
	}
	return objs
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The announcer announces the set's prefix only while every condition
// holds, withdraws as soon as one fails, names the failing ones, and keeps
// the announce key exactly while it announces.
func TestAnnouncerConditions(t *testing.T) {
	faulty := &dataplane.FaultyEdge{EdgeMaps: dataplane.NewFakeEdge()}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, faulty)
	defer r.Stop()
	spk := &fakeSpeaker{}
	leases := newFakeLeases()
	var dpErr atomic.Pointer[error]
	dpCheck := func() error {
		if p := dpErr.Load(); p != nil {
			return *p
		}
		return nil
	}
	an := NewAnnouncer(AnnounceConfig{Name: "edge-a1", StoreGrace: 300 * time.Millisecond, Settle: time.Nanosecond,
		Interval: 5 * time.Millisecond, Renew: 20 * time.Millisecond, Log: quiet}, spk, leases, r.AnnouncePlan, dpCheck)
	var synced atomic.Bool
	synced.Store(true)
	an.AddCondition("sync", synced.Load)

	key := store.AnnounceKey("pop-a", "edge-a1")
	announcing := func() bool {
		ok, _ := an.Announcing()
		_, hasKey := leases.key(key)
		return ok && slices.Equal(spk.announced(), []string{"198.51.100.0/24"}) && hasKey
	}
	withdrawn := func(cond string) func() bool {
		return func() bool {
			ok, failing := an.Announcing()
			_, hasKey := leases.key(key)
			return !ok && len(spk.announced()) == 0 && !hasKey && slices.Contains(condNames(failing), cond)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	an.Start(ctx)
	// Nothing loaded yet: not a member, maps not programmed.
	waitFor(t, "failing member and maps", func() bool {
		_, f := an.Announcing()
		return slices.Contains(condNames(f), CondMember) && slices.Contains(condNames(f), CondMaps)
	})

	load(t, r, 10, bgpRegion(false)...)
	waitFor(t, "announced", announcing)
	an2, _ := leases.key(key)
	if an2.Set != "pop-a" || an2.Edge != "edge-a1" || an2.Underlay != a("198.18.0.1") || len(an2.Prefixes) != 1 || an2.Since.IsZero() {
		t.Fatalf("announce key: %+v", an2)
	}
	if spk.cfg == nil || spk.cfg.ASN != 64601 || spk.cfg.HoldTime != 3*time.Second || spk.cfg.Peers[0].Password != "pw" {
		t.Fatalf("speaker config: %+v", spk.cfg)
	}

	t.Run("drained", func(t *testing.T) {
		watched(t, r, 11, bgpRegion(true)...)
		waitFor(t, "withdrawn on drain", withdrawn(CondDrained))
		watched(t, r, 12, bgpRegion(false)...)
		waitFor(t, "announced after undrain", announcing)
	})
	t.Run("dataplane", func(t *testing.T) {
		err := errors.New("ext0: edge program not attached")
		dpErr.Store(&err)
		waitFor(t, "withdrawn on a failed self-check", withdrawn(CondDataplane))
		dpErr.Store(nil)
		waitFor(t, "announced", announcing)
	})
	t.Run("maps", func(t *testing.T) {
		faulty.SetFail(true)
		watched(t, r, 13, &model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
		waitFor(t, "withdrawn on a failed commit", withdrawn(CondMaps))
		faulty.SetFail(false) // the reconciler's retry succeeds
		waitFor(t, "announced after the retry", announcing)
	})
	t.Run("store", func(t *testing.T) {
		leases.down.Store(true)
		start := time.Now()
		// (The key cannot be deleted meanwhile: its lease expires.)
		waitFor(t, "withdrawn after the store grace", func() bool {
			ok, failing := an.Announcing()
			return !ok && len(spk.announced()) == 0 && slices.Contains(condNames(failing), CondStore)
		})
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("withdrawn %v after losing the store: before the grace period (300 ms)", d)
		}
		leases.down.Store(false)
		waitFor(t, "announced once the store answers", announcing)
	})
	t.Run("announce fails", func(t *testing.T) {
		// No announce key (agents count the edge live by it) while the
		// speaker has not taken the routes.
		watched(t, r, 16, bgpRegion(true)...)
		waitFor(t, "withdrawn on drain", withdrawn(CondDrained))
		spk.failAnnounce.Store(true)
		watched(t, r, 17, bgpRegion(false)...)
		waitFor(t, "not announcing while the speaker refuses", withdrawn(CondAnnounce))
		spk.failAnnounce.Store(false)
		waitFor(t, "announced once the speaker takes the routes", announcing)
	})
	t.Run("added condition", func(t *testing.T) {
		synced.Store(false)
		waitFor(t, "withdrawn without sync", withdrawn("sync"))
		synced.Store(true)
		waitFor(t, "announced", announcing)
	})
	t.Run("no bgp settings", func(t *testing.T) {
		objs := bgpRegion(false)
		for _, o := range objs {
			if s, ok := o.(*model.EdgeSet); ok {
				s.BGP = nil
				s.Edges[0].BGP = nil
			}
		}
		watched(t, r, 14, objs...)
		waitFor(t, "withdrawn without bgp", withdrawn(CondBGPConfig))
		watched(t, r, 15, bgpRegion(false)...)
		waitFor(t, "announced", announcing)
	})

	if err := an.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := leases.key(key); ok || len(spk.announced()) != 0 || spk.waited == 0 || spk.stopped == 0 {
		t.Fatalf("after shutdown: key %v, announced %v, waited %d, stopped %d", ok, spk.announced(), spk.waited, spk.stopped)
	}
}

// TestAnnounceKeyChangeSkipsRenewal: a withdrawal deletes the announce
// key at once, without renewing the lease first (the agents stop sending
// replies to the edge when the key goes: one store round trip, not two).
// The renewal hangs here and the tick never comes: before, the deletion
// waited behind it.
func TestAnnounceKeyChangeSkipsRenewal(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	leases := newFakeLeases()
	var dpErr atomic.Pointer[error]
	an := NewAnnouncer(AnnounceConfig{Name: "edge-a1", StoreGrace: time.Hour, Settle: time.Nanosecond,
		Interval: 5 * time.Millisecond, Renew: time.Hour, Log: quiet}, &fakeSpeaker{}, leases, r.AnnouncePlan,
		func() error {
			if p := dpErr.Load(); p != nil {
				return *p
			}
			return nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	an.Start(ctx)
	load(t, r, 10, bgpRegion(false)...)
	key := store.AnnounceKey("pop-a", "edge-a1")
	waitFor(t, "the announce key", func() bool { _, ok := leases.key(key); return ok })
	leases.hangRenewal.Store(true)
	err := errors.New("interface ext0: link down (no carrier)")
	dpErr.Store(&err)
	waitFor(t, "the announce key deleted while a renewal would hang", func() bool { _, ok := leases.key(key); return !ok })
	leases.hangRenewal.Store(false)
	dpErr.Store(nil)
	waitFor(t, "the announce key back", func() bool { _, ok := leases.key(key); return ok })
}

// Announcing again waits for the conditions to hold for Settle;
// withdrawing does not wait.
func TestAnnouncerSettle(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	load(t, r, 10, bgpRegion(false)...)
	spk := &fakeSpeaker{}
	an := NewAnnouncer(AnnounceConfig{Name: "edge-a1", Settle: 200 * time.Millisecond, Log: quiet}, spk, newFakeLeases(), r.AnnouncePlan, nil)
	an.lastStore = time.Now().Add(time.Hour) // the store loop is not running
	ctx := context.Background()
	an.Step(ctx)
	if ok, f := an.Announcing(); ok || len(f) != 0 {
		t.Fatalf("announced before settling (failing %v)", f)
	}
	time.Sleep(210 * time.Millisecond)
	an.Step(ctx)
	if ok, f := an.Announcing(); !ok || strings.Join(spk.announced(), ",") != "198.51.100.0/24" {
		t.Fatalf("not announced after settling: %v %v", f, spk.announced())
	}
	watched(t, r, 11, bgpRegion(true)...)
	an.Step(ctx)
	if ok, _ := an.Announcing(); ok || len(spk.announced()) != 0 {
		t.Fatal("a drain did not withdraw at once")
	}
}

// A dedicated set's edge announces the /32s pulled out into it; the prefix
// set's edge keeps its /24 (the longest prefix wins upstream).
func TestAnnouncePlanPullOut(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-d1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	objs := append(bgpRegion(false),
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: a("198.18.0.9")}}},
		&model.EIP{Address: a("198.51.100.7"), Set: "hot", Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	load(t, r, 10, objs...)
	p := r.AnnouncePlan()
	if !p.Member || p.Set != "hot" || len(p.Prefixes) != 1 || p.Prefixes[0] != netip.MustParsePrefix("198.51.100.7/32") || p.InSync != nil {
		t.Fatalf("dedicated edge's plan: %+v", p)
	}
	watched(t, r, 11, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	if p := r.AnnouncePlan(); len(p.Prefixes) != 0 {
		t.Fatalf("returned EIP still announced: %v", p.Prefixes)
	}
	watched(t, r, 12, &model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.0.10")}}},
		&model.Quarantine{Address: a("198.51.100.8")})
	rq := NewReconciler(Config{Name: "edge-q1", Log: quiet}, dataplane.NewFakeEdge())
	defer rq.Stop()
	load(t, rq, 12, append(objs, &model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: a("198.18.0.10")}}},
		&model.Quarantine{Address: a("198.51.100.8")})...)
	if p := rq.AnnouncePlan(); len(p.Prefixes) != 1 || p.Prefixes[0] != netip.MustParsePrefix("198.51.100.8/32") {
		t.Fatalf("quarantine edge's plan: %+v", p)
	}
	rq.Delete(model.KindQuarantine, "198.51.100.8", 13)
	rq.Commit(13, false)
	if p := rq.AnnouncePlan(); len(p.Prefixes) != 0 {
		t.Fatalf("released address still announced: %v", p.Prefixes)
	}
}

// condNames returns the names of failing conditions (without reasons).
func condNames(failing []string) []string {
	out := make([]string, len(failing))
	for i, f := range failing {
		out[i], _, _ = strings.Cut(f, ":")
	}
	return out
}

// TestCommitOfNothingHeld: a commit of the region that changed nothing
// the edge holds moves its applied revision without programming or
// counting in Applies; one with a change goes the whole way.
func TestCommitOfNothingHeld(t *testing.T) {
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, dataplane.NewFakeEdge())
	defer r.Stop()
	var applied []int64
	r.OnApplied = func(rev int64) { applied = append(applied, rev) }
	load(t, r, 10, bgpRegion(false)...)
	n := r.Applies()
	r.Commit(11, false)
	if got := r.Status(time.Now(), nil).AppliedRevision; got != 11 || r.Applies() != n {
		t.Fatalf("applied revision %d, applies %d after a commit of nothing, want 11, %d", got, r.Applies(), n)
	}
	watched(t, r, 12, bgpRegion(true)...)
	if got := r.Status(time.Now(), nil).AppliedRevision; got != 12 || !slices.Equal(applied, []int64{10, 11, 12}) || r.Applies() != n+1 {
		t.Errorf("applied revision %d, OnApplied %v, applies %d; want 12, [10 11 12], %d", got, applied, r.Applies(), n+1)
	}
}

// TestSameConfigFields: every field of bgp.Config that changes the
// sessions makes two configurations differ, so the announcer reconfigures
// the speaker (LocalAddress6, the source of sessions over IPv6, was
// compared by nothing).
func TestSameConfigFields(t *testing.T) {
	base := bgp.Config{RouterID: netip.MustParseAddr("192.0.2.1"), ASN: 64512, NextHop: netip.MustParseAddr("192.0.2.1")}
	if !sameConfig(base, base) {
		t.Fatal("a configuration differs from itself")
	}
	for name, change := range map[string]func(*bgp.Config){
		"NextHop6":      func(c *bgp.Config) { c.NextHop6 = netip.MustParseAddr("2001:db8::1") },
		"LocalAddress":  func(c *bgp.Config) { c.LocalAddress = netip.MustParseAddr("192.0.2.2") },
		"LocalAddress6": func(c *bgp.Config) { c.LocalAddress6 = netip.MustParseAddr("2001:db8::2") },
		"ConnectRetry":  func(c *bgp.Config) { c.ConnectRetry = time.Second },
	} {
		c := base
		change(&c)
		if sameConfig(base, c) {
			t.Errorf("%s changed: sameConfig still says the same", name)
		}
	}
}

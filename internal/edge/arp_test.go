package edge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
	"github.com/azgate/azgate/internal/store/storetest"
)

// recordingARP is a FakeARP that remembers when it was told to stop.
type recordingARP struct {
	*dataplane.FakeARP
	mu      sync.Mutex
	stopped []time.Time
}

func (r *recordingARP) SetARPOwner(t time.Time) error {
	if t.IsZero() {
		r.mu.Lock()
		r.stopped = append(r.stopped, time.Now())
		r.mu.Unlock()
	}
	return r.FakeARP.SetARPOwner(t)
}

// fakeMember is an arpOwner on fake maps whose gratuitous ARPs are
// recorded instead of sent.
type fakeMember struct {
	a    *arpOwner
	dp   *recordingARP
	mu   sync.Mutex
	sent []netip.Addr
	stop func()
	done chan struct{}
}

func (m *fakeMember) announced() []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent)
}

func (m *fakeMember) answering() bool {
	u, _ := m.dp.ARPOwner()
	return !u.IsZero()
}

func startFake(t *testing.T, el store.Elector, name string, cfg ARPConfig) *fakeMember {
	t.Helper()
	m := &fakeMember{dp: &recordingARP{FakeARP: dataplane.NewFakeARP()}, done: make(chan struct{})}
	a, err := newARPOwner(m.dp, el, name, cfg, []string{"lo"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.send = func(_ *net.Interface, ip netip.Addr) error {
		m.mu.Lock()
		m.sent = append(m.sent, ip)
		m.mu.Unlock()
		return nil
	}
	m.a = a
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = func() { cancel(); <-m.done }
	t.Cleanup(m.stop)
	go func() {
		defer close(m.done)
		a.run(ctx)
	}()
	return m
}

func waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

var (
	vip1, vip2 = netip.MustParseAddr("198.51.100.80"), netip.MustParseAddr("198.51.100.81")
	gwAddr     = netip.MustParseAddr("198.51.100.254")
)

// TestARPOwnerHandsOver: of two members, one answers and announces; a
// new VIP is announced alone; a member that leaves the scope (drained,
// or out of the set) stops and gives it up, and the other takes over.
func TestARPOwnerHandsOver(t *testing.T) {
	st := embeddedtest.Store(t)
	cfg := ARPConfig{Ifaces: []string{"lo"}, Gateway: gwAddr, TTL: 2 * time.Second, Margin: 500 * time.Millisecond}
	ms := []*fakeMember{startFake(t, st, "e1", cfg), startFake(t, st, "e2", cfg)}
	for _, m := range ms {
		if m.answering() {
			t.Fatal("a member answers before the election")
		}
		m.a.update("s1", []netip.Addr{vip1})
	}
	waitWithin(t, 5*time.Second, "an owner", func() bool { return ms[0].answering() || ms[1].answering() })
	o := 0
	if ms[1].answering() {
		o = 1
	}
	owner, other := ms[o], ms[1-o]
	time.Sleep(time.Second)
	if other.answering() || len(other.announced()) != 0 || other.a.Status().Owner {
		t.Fatalf("the non-owner answers or announced %v", other.announced())
	}
	if got := owner.announced(); !slices.Equal(sorted(got), []netip.Addr{vip1, gwAddr}) {
		t.Fatalf("the owner announced %v; want the VIP and the gateway", got)
	}
	if s := owner.a.Status(); !s.Owner || s.Scope != "s1" || s.Since.IsZero() {
		t.Fatalf("owner status %+v", s)
	}
	owner.a.update("s1", []netip.Addr{vip1, vip2})
	waitWithin(t, time.Second, "the new VIP announced", func() bool { return len(owner.announced()) == 3 })
	if got := owner.announced(); got[2] != vip2 {
		t.Fatalf("announced %v; want the new VIP alone after the first two", got)
	}
	other.a.update("s1", []netip.Addr{vip1, vip2})

	// The owner leaves the scope (what a drain does).
	left := time.Now()
	owner.a.update("", []netip.Addr{vip1, vip2})
	waitWithin(t, time.Second, "the other takes over", other.answering)
	if owner.answering() {
		t.Fatal("both answer")
	}
	owner.dp.mu.Lock()
	stopped := owner.dp.stopped[len(owner.dp.stopped)-1]
	owner.dp.mu.Unlock()
	t.Logf("handover after leaving the scope: %v", time.Since(left).Round(time.Millisecond))
	if !stopped.After(left) {
		t.Fatal("the old owner was not told to stop")
	}
	waitWithin(t, time.Second, "the new owner announces", func() bool { return len(other.announced()) >= 3 })
	if got := sorted(other.announced()[:3]); !slices.Equal(got, []netip.Addr{vip1, vip2, gwAddr}) {
		t.Fatalf("the new owner announced %v first; want both VIPs and the gateway", got)
	}
	// And once more, AnnounceInterval later (RFC 5227's two announcements).
	time.Sleep(AnnounceInterval + 500*time.Millisecond)
	if got := sorted(other.announced()); !slices.Equal(got, []netip.Addr{vip1, vip1, vip2, vip2, gwAddr, gwAddr}) {
		t.Fatalf("the new owner announced %v; want each address twice", got)
	}
	if s := owner.a.Status(); s.Owner || s.Scope != "" {
		t.Fatalf("the drained member's status %+v", s)
	}
	// Back in the scope: no preemption.
	owner.a.update("s1", []netip.Addr{vip1, vip2})
	time.Sleep(2 * cfg.TTL)
	if owner.answering() || !other.answering() {
		t.Fatal("the returning member took ownership back")
	}
}

func sorted(a []netip.Addr) []netip.Addr {
	a = slices.Clone(a)
	slices.SortFunc(a, func(x, y netip.Addr) int { return x.Compare(y) })
	return a
}

// TestARPOwnerStoreFrozen: the store freezes under the owner; it stops
// answering by its deadline (the data plane is told to stop, and held
// no later deadline than that).
func TestARPOwnerStoreFrozen(t *testing.T) {
	url, proc := storetest.StartEtcdProcess(t, "http")
	quiet := slog.New(slog.DiscardHandler)
	s, err := store.Connect(store.Options{Endpoints: []string{url}, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for end := time.Now().Add(20 * time.Second); s.Ping(context.Background()) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("etcd does not answer")
		}
	}
	cfg := ARPConfig{Ifaces: []string{"lo"}, TTL: 2 * time.Second, Margin: 500 * time.Millisecond}
	m := startFake(t, s, "e1", cfg)
	m.a.update("s1", []netip.Addr{vip1})
	waitWithin(t, 5*time.Second, "ownership", m.answering)
	time.Sleep(time.Second)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer proc.Signal(syscall.SIGCONT)
	frozen := time.Now()
	until, _ := m.dp.ARPOwner()
	// The fake, like the program, stops at its deadline by itself: wait
	// for the daemon's own stop.
	var stopped time.Time
	waitWithin(t, 2*cfg.TTL, "told to stop", func() bool {
		m.dp.mu.Lock()
		defer m.dp.mu.Unlock()
		stopped = m.dp.stopped[len(m.dp.stopped)-1]
		return stopped.After(frozen)
	})
	t.Logf("frozen at +0; data plane deadline +%v; told to stop at +%v", until.Sub(frozen).Round(time.Millisecond),
		stopped.Sub(frozen).Round(time.Millisecond))
	if stopped.After(until.Add(100 * time.Millisecond)) {
		t.Fatalf("told to stop %v after the deadline", stopped.Sub(until))
	}
	if d := until.Sub(frozen); d > cfg.TTL-cfg.Margin {
		t.Fatalf("the data plane's deadline was %v after the freeze; the last renewal allows at most %v", d, cfg.TTL-cfg.Margin)
	}
	if m.answering() {
		t.Fatal("still answering")
	}
	waitWithin(t, time.Second, "the status says not owner", func() bool { return !m.a.Status().Owner })
}

// TestARPScope: the set's name, the configured scope instead, none for a
// drained edge or one in no set.
func TestARPScope(t *testing.T) {
	set := func(drained bool) *model.EdgeSet {
		return &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1"), Drained: drained}}}
	}
	for _, c := range []struct {
		name, scope, edge string
		drained           bool
		want              string
	}{
		{"member", "", "edge-a1", false, "pop-a"},
		{"configured scope", "dmz1", "edge-a1", false, "dmz1"},
		{"drained", "dmz1", "edge-a1", true, ""},
		{"in no set", "", "edge-b1", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewReconciler(Config{Name: c.edge, Log: quiet, ARP: ARPConfig{Scope: c.scope}}, dataplane.NewFakeEdge())
			load(t, r, 1, set(c.drained))
			if got := r.ARPScope(); got != c.want {
				t.Fatalf("ARPScope = %q, want %q", got, c.want)
			}
		})
	}
}

// failingARP refuses to start answering (a map write that fails).
type failingARP struct {
	*dataplane.FakeARP
	mu    sync.Mutex
	tries int
}

func (f *failingARP) SetARPOwner(t time.Time) error {
	if !t.IsZero() {
		f.mu.Lock()
		f.tries++
		f.mu.Unlock()
		return errors.New("injected: arp_owner update refused")
	}
	return f.FakeARP.SetARPOwner(t)
}

// TestARPOwnerCannotAnswer: a member whose data plane refuses the
// deadline gives the ownership it won up, so another member answers.
func TestARPOwnerCannotAnswer(t *testing.T) {
	st := embeddedtest.Store(t)
	cfg := ARPConfig{Ifaces: []string{"lo"}, TTL: 2 * time.Second, Margin: 500 * time.Millisecond}
	bad := &failingARP{FakeARP: dataplane.NewFakeARP()}
	a, err := newARPOwner(bad, st, "bad", cfg, []string{"lo"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.send = func(*net.Interface, netip.Addr) error { t.Error("the failing member announced"); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	a.update("s1", []netip.Addr{vip1})
	waitWithin(t, 5*time.Second, "the failing member wins and fails", func() bool {
		bad.mu.Lock()
		defer bad.mu.Unlock()
		return bad.tries > 0
	})
	good := startFake(t, st, "good", cfg)
	good.a.update("s1", []netip.Addr{vip1})
	waitWithin(t, 3*time.Second, "the other member takes over", good.answering)
	if a.Status().Owner {
		t.Fatal("the failing member says it owns the scope")
	}
	if u, _ := bad.ARPOwner(); !u.IsZero() {
		t.Fatal("the failing member's data plane answers")
	}
}

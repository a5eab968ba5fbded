package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdembed"
)

// openEmptyCore opens a Core on an embedded etcd in dir (a fresh one if
// ""), with nothing applied; stop closes it (again at the test's end,
// then a no-op).
func openEmptyCore(t testing.TB, dir string) (c *Core, stop func()) {
	t.Helper()
	return openCoreWith(t, dir, Config{})
}

// openCoreWith is openEmptyCore with the settings of cfg (its data dir and
// logger are the test's).
func openCoreWith(t testing.TB, dir string, cfg Config) (c *Core, stop func()) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	log := quiet
	if *scopeLog {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cfg.DataDir, cfg.Logger = dir, log
	cfg, err := cfg.check()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err = open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(c.close)
	t.Cleanup(stop)
	return c, stop
}

// storedCopies reads every key under store.ScopeRoot straight from etcd.
func storedCopies(t testing.TB, st *store.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	from, end := store.ScopeRoot, clientv3.GetPrefixRangeEnd(store.ScopeRoot)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(5000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := st.Client.Get(ctx, from, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
		if !resp.More {
			return out
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// wantCopies are the copies of the view's state (placement.AllOps) and
// those lingering after a move (linger.go), which must hold their
// object's current value, in a set scope the object is no longer placed
// in. The caller holds writeMu.
func wantCopies(t testing.TB, c *Core) map[string]string {
	t.Helper()
	c.view.mu.RLock()
	defer c.view.mu.RUnlock()
	ops, err := placement.AllOps(c.view.st)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(ops))
	for _, o := range ops {
		if o.Scope == "" || o.Value == nil {
			t.Fatalf("AllOps gave %+v: want copies to put", o)
		}
		out[store.ScopeKey(o.Scope, o.Kind, o.Key)] = string(o.Value)
	}
	for r, scopes := range c.linger.copies {
		o, ok := copiedObject(c.view.st, r)
		if !ok {
			t.Errorf("%s %s lingers, but it is gone", r.Kind, r.Key)
			continue
		}
		v, err := store.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		placed := placement.Of(c.view.st, r)
		for sc := range scopes {
			if !placement.IsSetScope(sc) || slices.Contains(placed, sc) {
				t.Errorf("%s %s lingers in %s (placed in %q)", r.Kind, r.Key, sc, placed)
			}
			out[store.ScopeKey(sc, r.Kind, r.Key)] = string(v)
		}
	}
	return out
}

// copiedObject is the value copied for r in st: the object, or for a
// guest copy (no object of the State) the copy derived from its host.
func copiedObject(st *model.State, r placement.Ref) (model.Object, bool) {
	if r.Kind != model.KindGuestCopy {
		return st.Get(r.Kind, r.Key)
	}
	hn, gn, ok := model.SplitGuestCopyKey(r.Key)
	if !ok {
		return nil, false
	}
	h, ok := st.Hosts[hn]
	if !ok {
		return nil, false
	}
	g, ok := h.Guest(gn)
	if !ok {
		return nil, false
	}
	return model.NewGuestCopy(h, g), true
}

// checkCopies asserts that the copies in the store are those of the
// controller's state, and returns them. It holds the write lock, so no
// write of the controller (the health loop's either) lands in between.
func checkCopies(t testing.TB, c *Core, step string) map[string]string {
	t.Helper()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	got, want := storedCopies(t, c.store), wantCopies(t, c)
	diffCopies(t, step, got, want)
	return got
}

func diffCopies(t testing.TB, step string, got, want map[string]string) {
	t.Helper()
	var bad []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			bad = append(bad, "missing "+k)
		} else if g != v {
			bad = append(bad, fmt.Sprintf("different %s: %s, want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad = append(bad, "stale "+k)
		}
	}
	sort.Strings(bad)
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("and %d more", len(bad)-10))
	}
	if len(bad) > 0 {
		t.Errorf("%s: the copies are not the state's (%d stored, %d wanted):\n  %s", step, len(got), len(want), strings.Join(bad, "\n  "))
	}
}

// scopesOf lists the scopes holding a copy of kind/key, sorted.
func scopesOf(copies map[string]string, kind, key string) []string {
	var out []string
	for k := range copies {
		sc, kd, ky, ok := store.ParseScopeKey(k)
		if ok && kd == kind && ky == key {
			out = append(out, sc)
		}
	}
	sort.Strings(out)
	return out
}

func expectScopes(t *testing.T, step string, copies map[string]string, kind, key string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := scopesOf(copies, kind, key); !slices.Equal(got, want) {
		t.Errorf("%s: %s %s is copied in %q, want %q", step, kind, key, got, want)
	}
}

func scopeRegion() *model.Document {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	return &model.Document{
		AZs: []model.AZ{{Name: "az1"}},
		Hosts: []model.Host{
			{Name: "h1", AZ: "az1", Underlay: a("198.18.1.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.1.1"), VSID: 5001}}},
			{Name: "h2", AZ: "az1", Underlay: a("198.18.1.2"), Guests: []model.Guest{
				{Name: "g2", Address: a("198.19.1.2"), VSID: 5002}, {Name: "g3", Address: a("198.19.1.3"), VSID: 5003}}},
			{Name: "h3", AZ: "az1", Underlay: a("198.18.1.3"), Guests: []model.Guest{{Name: "g4", Address: a("198.19.1.4"), VSID: 5004}}},
		},
		EdgeSets: []model.EdgeSet{
			{Name: "prefix-a", Prefixes: []netip.Prefix{p("198.51.100.0/25")}, Edges: []model.EdgeNode{{Name: "ea1", Underlay: a("198.18.0.1")}}},
			{Name: "prefix-b", Prefixes: []netip.Prefix{p("198.51.100.128/25")}, Edges: []model.EdgeNode{{Name: "eb1", Underlay: a("198.18.0.2")}}},
			{Name: "dedicated", Role: model.RoleDedicated, Prefixes: []netip.Prefix{}, Edges: []model.EdgeNode{{Name: "ed1", Underlay: a("198.18.0.3")}}},
			{Name: "quarantine", Role: model.RoleQuarantine, Prefixes: []netip.Prefix{}, Edges: []model.EdgeNode{{Name: "eq1", Underlay: a("198.18.0.4")}}},
		},
		EIPs: []model.EIP{
			{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "h1", Guest: "g1"}},
			{Address: a("198.51.100.8")},
			{Address: a("198.51.100.130"), Binding: &model.Binding{Host: "h2", Guest: "g2"}},
		},
		Services: []model.Service{{Name: "web", VIP: a("198.51.100.20"), Mode: "encap",
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
			Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "h3", Guest: "g4", Port: 8080}}}}}},
	}
}

// TestScopeCopiesFollowWrites: after every kind of write, the copies in
// the store are exactly those of the controller's state, and they moved
// where the scopes say.
func TestScopeCopiesFollowWrites(t *testing.T) {
	c, _ := openEmptyCore(t, "")
	ctx := context.Background()
	must := func(step string, err error) map[string]string {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return checkCopies(t, c, step)
	}
	const eip, eipB, eip8 = "198.51.100.7", "198.51.100.130", "198.51.100.8"
	_, err := c.Apply(ctx, scopeRegion(), ApplyOptions{})
	cp := must("apply", err)
	expectScopes(t, "apply", cp, model.KindEIP, eip, "set/prefix-a", "host/h1")
	expectScopes(t, "apply", cp, model.KindEIP, eip8, "set/prefix-a")
	expectScopes(t, "apply", cp, model.KindEIP, eipB, "set/prefix-b", "host/h2")
	// A host is in its own scope only; a set holds a copy of each guest
	// an EIP it carries is bound to or that backs a service it carries.
	expectScopes(t, "apply", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "apply", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "apply", cp, model.KindHost, "h3", "host/h3")
	expectScopes(t, "apply", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	expectScopes(t, "apply", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
	expectScopes(t, "apply", cp, model.KindGuestCopy, "h2/g3")
	expectScopes(t, "apply", cp, model.KindGuestCopy, "h3/g4", "set/prefix-a")
	expectScopes(t, "apply", cp, model.KindService, "web", "set/prefix-a", "host/h3")
	if n := len(scopesOf(cp, model.KindEdgeSet, "prefix-a")) + len(scopesOf(cp, model.KindAZ, "az1")); n != 0 {
		t.Errorf("apply: edge sets or AZs copied (%d): every node reads them whole", n)
	}

	// Rebind to a guest of another host: the EIP's copy moves from h1's
	// scope to h2's, h2/g3's copy joins prefix-a's scope and h1/g1's
	// leaves it; the hosts stay in their own scopes only.
	_, err = c.Bind(ctx, eip, IfMatch{}, model.Binding{Host: "h2", Guest: "g3"})
	cp = must("rebind", err)
	expectScopes(t, "rebind", cp, model.KindEIP, eip, "set/prefix-a", "host/h2")
	expectScopes(t, "rebind", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "rebind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
	expectScopes(t, "rebind", cp, model.KindGuestCopy, "h1/g1")

	// Bind and unbind another one.
	_, err = c.Bind(ctx, eip8, IfMatch{}, model.Binding{Host: "h1", Guest: "g1"})
	cp = must("bind", err)
	expectScopes(t, "bind", cp, model.KindEIP, eip8, "set/prefix-a", "host/h1")
	expectScopes(t, "bind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "bind", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	_, err = c.Unbind(ctx, eip8, IfMatch{})
	cp = must("unbind", err)
	expectScopes(t, "unbind", cp, model.KindEIP, eip8, "set/prefix-a")
	expectScopes(t, "unbind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "unbind", cp, model.KindGuestCopy, "h1/g1")

	// Pull out into the dedicated set: carried by it and by the prefix
	// set it came from; then released.
	o, _, _, err := c.Get(model.KindEIP, eip)
	if err != nil {
		t.Fatal(err)
	}
	pulled := cloneEIP(o.(*model.EIP))
	pulled.Set = "dedicated"
	_, err = c.Replace(ctx, eip, IfMatch{}, pulled)
	cp = must("pull out", err)
	expectScopes(t, "pull out", cp, model.KindEIP, eip, "set/dedicated", "set/prefix-a", "host/h2")
	expectScopes(t, "pull out", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "pull out", cp, model.KindGuestCopy, "h2/g3", "set/dedicated", "set/prefix-a")
	expectScopes(t, "pull out", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
	released := cloneEIP(pulled)
	released.Set = ""
	_, err = c.Replace(ctx, eip, IfMatch{}, released)
	cp = must("release", err)
	expectScopes(t, "release", cp, model.KindEIP, eip, "set/prefix-a", "host/h2")
	expectScopes(t, "release", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "release", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")
	expectScopes(t, "release", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")

	// Quarantine and release.
	_, err = c.Create(ctx, &model.Quarantine{Address: netip.MustParseAddr(eip), Reason: "again"})
	cp = must("quarantine", err)
	expectScopes(t, "quarantine", cp, model.KindEIP, eip, "set/quarantine", "set/prefix-a", "host/h2")
	expectScopes(t, "quarantine", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "quarantine", cp, model.KindGuestCopy, "h2/g3", "set/quarantine", "set/prefix-a")
	_, err = c.Delete(ctx, model.KindQuarantine, eip, IfMatch{})
	cp = must("quarantine release", err)
	expectScopes(t, "quarantine release", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")

	// A prefix moves from prefix-a to prefix-b. The model refuses a
	// prefix that still covers EIPs or VIPs to leave its set (one step at
	// a time, each checked: the set that loses it would strand them, the
	// one that gains it first would overlap), so the moved prefix is
	// empty, and EIPs created in it afterwards are copied to prefix-b.
	extra := netip.MustParsePrefix("203.0.113.0/25")
	sets := scopeRegion().EdgeSets
	sets[0].Prefixes = append(sets[0].Prefixes, extra)
	if _, err := c.Replace(ctx, sets[0].Name, IfMatch{}, &sets[0]); err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(ctx, &model.EIP{Address: netip.MustParseAddr("203.0.113.5")})
	cp = must("EIP in the extra prefix", err)
	expectScopes(t, "EIP in the extra prefix", cp, model.KindEIP, "203.0.113.5", "set/prefix-a")
	if _, err := c.Delete(ctx, model.KindEIP, "203.0.113.5", IfMatch{}); err != nil {
		t.Fatal(err)
	}
	moved := scopeRegion().EdgeSets[:2]
	moved[1].Prefixes = append(moved[1].Prefixes, extra)
	_, err = c.Apply(ctx, &model.Document{EdgeSets: moved}, ApplyOptions{})
	cp = must("move prefix", err)
	_, err = c.Create(ctx, &model.EIP{Address: netip.MustParseAddr("203.0.113.5"), Binding: &model.Binding{Host: "h1", Guest: "g1"}})
	cp = must("EIP in the moved prefix", err)
	expectScopes(t, "EIP in the moved prefix", cp, model.KindEIP, "203.0.113.5", "set/prefix-b", "host/h1")
	expectScopes(t, "EIP in the moved prefix", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "EIP in the moved prefix", cp, model.KindGuestCopy, "h1/g1", "set/prefix-b")
	if _, err := c.Unbind(ctx, "203.0.113.5", IfMatch{}); err != nil {
		t.Fatal(err)
	}
	cp = checkCopies(t, c, "unbind")
	expectScopes(t, "unbind", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "unbind", cp, model.KindGuestCopy, "h1/g1")

	// A backend on another host, then deletes.
	_, err = c.AddBackend(ctx, "web", IfMatch{}, "web", model.Backend{Host: "h1", Guest: "g1", Port: 8080})
	cp = must("add backend", err)
	expectScopes(t, "add backend", cp, model.KindService, "web", "set/prefix-a", "host/h1", "host/h3")
	expectScopes(t, "add backend", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "add backend", cp, model.KindGuestCopy, "h1/g1", "set/prefix-a")
	expectScopes(t, "add backend", cp, model.KindGuestCopy, "h3/g4", "set/prefix-a")
	_, err = c.Delete(ctx, model.KindService, "web", IfMatch{})
	cp = must("delete service", err)
	expectScopes(t, "delete service", cp, model.KindService, "web")
	expectScopes(t, "delete service", cp, model.KindHost, "h1", "host/h1")
	expectScopes(t, "delete service", cp, model.KindHost, "h3", "host/h3")
	expectScopes(t, "delete service", cp, model.KindGuestCopy, "h1/g1")
	expectScopes(t, "delete service", cp, model.KindGuestCopy, "h3/g4")
	if _, err := c.Unbind(ctx, eip, IfMatch{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Delete(ctx, model.KindEIP, eip, IfMatch{})
	cp = must("delete EIP", err)
	expectScopes(t, "delete EIP", cp, model.KindEIP, eip)
	expectScopes(t, "delete EIP", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "delete EIP", cp, model.KindGuestCopy, "h2/g3")
	expectScopes(t, "delete EIP", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
	if _, err := c.Unbind(ctx, eipB, IfMatch{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Delete(ctx, model.KindHost, "h2", IfMatch{})
	cp = must("delete host", err)
	expectScopes(t, "delete host", cp, model.KindHost, "h2")
	expectScopes(t, "delete host", cp, model.KindGuestCopy, "h2/g2")
	expectScopes(t, "delete host", cp, model.KindGuestCopy, "h2/g3")
	m := metricValue(t, c, `azgate_controller_scope_copies_total{by="write",op="delete"}`)
	if m == 0 {
		t.Error("no copy deletion counted")
	}
}

// metricValue reads one sample of the controller's metrics.
func metricValue(t testing.TB, c *Core, series string) float64 {
	t.Helper()
	mfs, err := c.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			if name == series {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

// writeUnscoped writes doc's objects as a controller without scopes does:
// their primary keys only, with store.Commit, and no layout marker.
func writeUnscoped(t testing.TB, dir string, doc *model.Document, after ...func(*store.Store)) {
	t.Helper()
	e, err := etcdembed.StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := store.Connect(store.Options{Endpoints: e.ClientURLs, TxnOps: etcdembed.TxnOps, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ops []store.Op
	for _, p := range doc.Placed() {
		defaults(p.Obj)
		v, err := store.Encode(p.Obj)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, store.Op{Kind: model.KindOf(p.Obj), Key: p.Obj.Key(), Value: v})
	}
	ctx := context.Background()
	rev, err := st.CommitRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, rev, ops); err != nil {
		t.Fatal(err)
	}
	for _, f := range after {
		f(st)
	}
}

// migrationRegion is scopeRegion with n more EIPs in 100.64.0.0/11
// (prefix-a), each bound to a guest of hosts m0, m1, ... (1,000 guests
// each, as the control bench's region, and a spare one), one in a hundred pulled out into
// the dedicated set.
func migrationRegion(n int) *model.Document {
	d := scopeRegion()
	d.EdgeSets[0].Prefixes = append(d.EdgeSets[0].Prefixes, netip.MustParsePrefix("100.64.0.0/11"))
	d.EdgeSets[1].Prefixes = append(d.EdgeSets[1].Prefixes, netip.MustParsePrefix("100.96.0.0/11"))
	const guests = 1000
	for k := 0; k*guests < n; k++ {
		h := model.Host{Name: fmt.Sprintf("m%d", k), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 10 + byte(k>>8), byte(k)})}
		for j := range guests {
			h.Guests = append(h.Guests, model.Guest{Name: fmt.Sprintf("g%d", j),
				Address: netip.AddrFrom4([4]byte{10, byte(j >> 8), byte(j), 1}), VSID: uint32(6000 + k)})
		}
		h.Guests = append(h.Guests, model.Guest{Name: "spare", Address: netip.AddrFrom4([4]byte{10, 250, 0, 1}), VSID: uint32(6000 + k)})
		d.Hosts = append(d.Hosts, h)
	}
	for i := range n {
		e := model.EIP{Address: netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}),
			Binding: &model.Binding{Host: fmt.Sprintf("m%d", i/guests), Guest: fmt.Sprintf("g%d", i%guests)}}
		if i%100 == 5 {
			e.Set = "dedicated"
		}
		d.EIPs = append(d.EIPs, e)
	}
	return d
}

func expectCurrent(t *testing.T, st *store.Store, step string, want bool) {
	t.Helper()
	_, cur, err := st.CopiesCurrent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cur != want {
		t.Errorf("%s: copies current %v, want %v", step, cur, want)
	}
}

func layoutOf(t testing.TB, st *store.Store) string {
	t.Helper()
	resp, err := st.Client.Get(context.Background(), store.LayoutKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestMigrationFromUnscopedLayout starts a controller on a store written
// without scope copies (as the controller before issue 19 writes it): it
// writes every copy and the layout marker; started again on copies that
// were damaged (some lost, one stale, one different), it repairs them.
func TestMigrationFromUnscopedLayout(t *testing.T) {
	dir := t.TempDir()
	writeUnscoped(t, dir, migrationRegion(1000))

	c, stop := openEmptyCore(t, dir)
	if got := c.view.counts()[model.KindEIP]; got != 1003 {
		t.Fatalf("the controller loaded %d EIPs, want 1003", got)
	}
	cp := checkCopies(t, c, "migration")
	if len(cp) < 1003 {
		t.Fatalf("%d copies after the migration", len(cp))
	}
	if l := layoutOf(t, c.store); l != store.Layout {
		t.Errorf("layout marker %q after the migration, want %q", l, store.Layout)
	}
	expectCurrent(t, c.store, "after the migration", true)
	written := metricValue(t, c, `azgate_controller_scope_copies_total{by="repair",op="put"}`)
	if int(written) != len(cp) {
		t.Errorf("the repair counted %v copies written, want %d", written, len(cp))
	}
	expectScopes(t, "migration", cp, model.KindEIP, "100.64.0.5", "set/dedicated", "set/prefix-a", "host/m0")
	expectScopes(t, "migration", cp, model.KindEIP, "100.64.0.10", "set/prefix-a", "host/m0")
	expectScopes(t, "migration", cp, model.KindHost, "m0", "host/m0")
	expectScopes(t, "migration", cp, model.KindGuestCopy, "m0/g5", "set/dedicated", "set/prefix-a")
	expectScopes(t, "migration", cp, model.KindGuestCopy, "m0/g10", "set/prefix-a")
	expectScopes(t, "migration", cp, model.KindGuestCopy, "m0/spare")

	// Damage: lose some copies, add a stale one, change one.
	ctx := context.Background()
	kv := c.store.Client.KV
	lost := 0
	for k := range cp {
		if strings.Contains(k, "/eips/100.64.1.") {
			if _, err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			lost++
		}
	}
	stale := store.ScopeKey("set/prefix-b", model.KindEIP, "100.64.0.1")
	changed := store.ScopeKey("host/m0", model.KindEIP, "100.64.0.20")
	if _, ok := cp[changed]; !ok {
		t.Fatalf("no copy %s", changed)
	}
	for k, v := range map[string]string{stale: cp[store.ScopeKey("set/prefix-a", model.KindEIP, "100.64.0.1")], changed: `{"address":"100.64.0.20"}`} {
		if _, err := kv.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if lost < 100 {
		t.Fatalf("lost only %d copies", lost)
	}
	// A write of this controller keeps the copies current.
	if _, err := c.Bind(ctx, "198.51.100.8", IfMatch{}, model.Binding{Host: "m0", Guest: "spare"}); err != nil {
		t.Fatal(err)
	}
	expectCurrent(t, c.store, "after a write", true)
	stop()

	// A controller without scopes (a rollback) writes its change alone:
	// the copies are no longer current, and the old copy of the EIP is
	// what a follower of its scope would read.
	old := &model.EIP{Address: netip.MustParseAddr("198.51.100.8"), Binding: &model.Binding{Host: "h2", Guest: "g3"}}
	writeUnscoped(t, dir, &model.Document{EIPs: []model.EIP{*old}}, func(st *store.Store) {
		expectCurrent(t, st, "after a write of a controller without scopes", false)
	})

	c2, stop2 := openEmptyCore(t, dir)
	cp = checkCopies(t, c2, "repair")
	expectCurrent(t, c2.store, "after the repair", true)
	expectScopes(t, "repair", cp, model.KindEIP, "198.51.100.8", "set/prefix-a", "host/h2")
	expectScopes(t, "repair", cp, model.KindHost, "m0", "host/m0")
	expectScopes(t, "repair", cp, model.KindHost, "h2", "host/h2")
	expectScopes(t, "repair", cp, model.KindGuestCopy, "m0/g5", "set/dedicated", "set/prefix-a")
	expectScopes(t, "repair", cp, model.KindGuestCopy, "m0/spare")
	expectScopes(t, "repair", cp, model.KindGuestCopy, "h2/g3", "set/prefix-a")
	expectScopes(t, "repair", cp, model.KindGuestCopy, "h2/g2", "set/prefix-b")
	// Written (lost+4): the lost copies (lost), the changed one (1), the
	// EIP the older controller bound in its new host's scope, host/h2
	// (1), and its new value in its set's, set/prefix-a (1), and the copy
	// of its new guest h2/g3 in that set (1). Deleted (3): the stale copy
	// (1), the EIP's in its former host's scope, host/m0 (1), and the copy
	// of its former guest m0/spare in set/prefix-a (1): no other EIP or
	// backend keeps that guest there. (When sets held whole hosts, m0
	// stayed in set/prefix-a for its other guests' EIPs, and 2 were
	// deleted.)
	if w, d := metricValue(t, c2, `azgate_controller_scope_copies_total{by="repair",op="put"}`),
		metricValue(t, c2, `azgate_controller_scope_copies_total{by="repair",op="delete"}`); int(w) != lost+4 || d != 3 {
		t.Errorf("the repair wrote %v and deleted %v copies, want %d and 3", w, d, lost+4)
	}

	// Copies changed past the controllers (the commit marker did not
	// move): the copies look current, the controller serves at once and
	// mends them in the background.
	cp = storedCopies(t, c2.store)
	lostKey := store.ScopeKey("set/prefix-a", model.KindEIP, "100.64.0.30")
	if _, ok := cp[lostKey]; !ok {
		t.Fatalf("no copy %s", lostKey)
	}
	if _, err := c2.store.Client.Delete(ctx, lostKey); err != nil {
		t.Fatal(err)
	}
	stop2()
	c3, stop3 := openEmptyCore(t, dir)
	waitFor(t, func() bool { return metricValue(t, c3, `azgate_controller_scope_repairs_total{result="ok"}`) >= 1 })
	checkCopies(t, c3, "mended in the background")
	if w, d := metricValue(t, c3, `azgate_controller_scope_copies_total{by="repair",op="put"}`),
		metricValue(t, c3, `azgate_controller_scope_copies_total{by="repair",op="delete"}`); w != 1 || d != 0 {
		t.Errorf("the background repair wrote %v and deleted %v copies, want 1 and 0", w, d)
	}
	stop3()

	// Nothing to repair: nothing written.
	c4, _ := openEmptyCore(t, dir)
	waitFor(t, func() bool { return metricValue(t, c4, `azgate_controller_scope_repairs_total{result="ok"}`) >= 1 })
	if w, d := metricValue(t, c4, `azgate_controller_scope_copies_total{by="repair",op="put"}`),
		metricValue(t, c4, `azgate_controller_scope_copies_total{by="repair",op="delete"}`); w != 0 || d != 0 {
		t.Errorf("a repair of intact copies wrote %v and deleted %v", w, d)
	}
	checkCopies(t, c4, "intact")
	expectCurrent(t, c4.store, "intact", true)
}

// TestPartialCommitRepaired: a commit the store took only part of (its
// copies, not the object) is refused to the client, and the repair
// takes the copies without their primary write back out.
func TestPartialCommitRepaired(t *testing.T) {
	c, _ := openEmptyCore(t, "")
	ctx := context.Background()
	if _, err := c.Apply(ctx, scopeRegion(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	checkCopies(t, c, "apply")
	const eip = "198.51.100.7"
	o, _, _, err := c.Get(model.KindEIP, eip)
	if err != nil {
		t.Fatal(err)
	}
	pulled := cloneEIP(o.(*model.EIP))
	pulled.Set = "dedicated"

	// A store that fails before anything: nothing is written.
	c.commitHook = func(ctx context.Context, rev int64, ops []store.Op) (int64, error) {
		return rev, errors.New("injected: the store is away")
	}
	if _, err := c.Replace(ctx, eip, IfMatch{}, pulled); err == nil {
		t.Fatal("the failed commit succeeded")
	}
	// The repair (asked for by the failure) runs under the write lock:
	// checkCopies waits for it.
	waitFor(t, func() bool { return metricValue(t, c, `azgate_controller_scope_repairs_total{result="ok"}`) >= 2 })
	checkCopies(t, c, "failed commit")

	// A store that takes the first transaction (the new copies) and
	// fails the next (the object).
	var sent []store.Op
	c.commitHook = func(ctx context.Context, rev int64, ops []store.Op) (int64, error) {
		sent = slices.Clone(ops)
		n := 0
		for n < len(ops) && ops[n].Scope != "" {
			n++
		}
		if n == 0 {
			return rev, errors.New("injected: no copies to commit first")
		}
		rev, err := c.store.Commit(ctx, rev, ops[:n])
		if err != nil {
			return rev, err
		}
		return rev, errors.New("injected: the store went away after the first transaction")
	}
	if _, err := c.Replace(ctx, eip, IfMatch{}, pulled); err == nil {
		t.Fatal("the partly written commit succeeded")
	}
	c.commitHook = nil
	if !slices.ContainsFunc(sent, func(o store.Op) bool { return o.Scope == "set/dedicated" && o.Key == eip && o.Value != nil }) {
		t.Fatalf("the pull-out's commit had no copy for the dedicated set: %+v", sent)
	}
	waitFor(t, func() bool { return metricValue(t, c, `azgate_controller_scope_repairs_total{result="ok"}`) >= 3 })
	cp := checkCopies(t, c, "partial commit")
	expectScopes(t, "partial commit", cp, model.KindEIP, eip, "set/prefix-a", "host/h1")
	if o, _, _, err := c.Get(model.KindEIP, eip); err != nil || o.(*model.EIP).Set != "" {
		t.Errorf("EIP after the failed pull-out: %+v, %v", o, err)
	}

	// And the pull-out goes through once the store is back.
	if _, err := c.Replace(ctx, eip, IfMatch{}, pulled); err != nil {
		t.Fatal(err)
	}
	cp = checkCopies(t, c, "pull out")
	expectScopes(t, "pull out", cp, model.KindEIP, eip, "set/dedicated", "set/prefix-a", "host/h1")
}

// TestCommitOps: copies put first, then the objects, then the copies
// deleted, and a primary op last.
func TestCommitOps(t *testing.T) {
	p := func(k string) store.Op { return store.Op{Kind: "eips", Key: k, Value: []byte("v")} }
	cput := func(sc string) store.Op { return store.Op{Scope: sc, Kind: "eips", Key: "a", Value: []byte("v")} }
	cdel := func(sc string) store.Op { return store.Op{Scope: sc, Kind: "eips", Key: "a"} }
	name := func(ops []store.Op) string {
		var s []string
		for _, o := range ops {
			switch {
			case o.Scope == "":
				s = append(s, o.Key)
			case o.Value != nil:
				s = append(s, "+"+o.Scope)
			default:
				s = append(s, "-"+o.Scope)
			}
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		primary, copies []store.Op
		want            string
	}{
		{[]store.Op{p("a")}, nil, "a"},
		{[]store.Op{p("a"), p("b")}, []store.Op{cput("x"), cput("y")}, "+x +y a b"},
		{[]store.Op{p("a"), p("b")}, []store.Op{cput("x"), cdel("y"), cdel("z")}, "+x a -y -z b"},
		{[]store.Op{p("a")}, []store.Op{cdel("y")}, "-y a"},
	} {
		if got := name(commitOps(c.primary, c.copies)); got != c.want {
			t.Errorf("commitOps(%s, %s) = %s, want %s", name(c.primary), name(c.copies), got, c.want)
		}
	}
}

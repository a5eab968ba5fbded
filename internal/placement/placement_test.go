package placement

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mustPut(t testing.TB, st *model.State, objs ...model.Object) {
	t.Helper()
	for _, o := range objs {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("put %s %s: %v", model.KindOf(o), o.Key(), err)
		}
	}
}

func host(name string, n int, guests ...string) *model.Host {
	h := &model.Host{Name: name, AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 1, byte(n)})}
	for i, g := range guests {
		h.Guests = append(h.Guests, model.Guest{Name: g, Address: netip.AddrFrom4([4]byte{198, 19, byte(n), byte(i + 1)}), VSID: 5000 + uint32(n)})
	}
	return h
}

// encap returns an encap service with one pool of backends ("host/guest").
func encap(name, vip, set string, backends ...string) *model.Service {
	v := &model.Service{Name: name, VIP: addr(vip), Mode: model.ModeEncap, Set: set,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web"}}}
	for _, b := range backends {
		h, g, _ := strings.Cut(b, "/")
		v.Pools[0].Backends = append(v.Pools[0].Backends, model.Backend{Host: h, Guest: g})
	}
	return v
}

// region: two prefix sets splitting 198.51.100.0/24, two dedicated sets, a
// quarantine set, three hosts with guests.
func region(t testing.TB) *model.State {
	t.Helper()
	st := model.NewState()
	mustPut(t, st,
		&model.AZ{Name: "az1"},
		host("h1", 1, "g1", "g2", "g3"),
		host("h2", 2, "g1", "g2"),
		host("h3", 3, "g1"),
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/25")}, Edges: []model.EdgeNode{{Name: "a1", Underlay: addr("198.18.0.1")}}},
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.51.100.128/25")}, Edges: []model.EdgeNode{{Name: "b1", Underlay: addr("198.18.0.2")}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, Edges: []model.EdgeNode{{Name: "d1", Underlay: addr("198.18.0.3")}}},
		&model.EdgeSet{Name: "hot2", Role: model.RoleDedicated},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "q1", Underlay: addr("198.18.0.4")}}},
	)
	return st
}

func eip(a, set, hostGuest string) *model.EIP {
	e := &model.EIP{Address: addr(a), Set: set}
	if hostGuest != "" {
		h, g, _ := strings.Cut(hostGuest, "/")
		e.Binding = &model.Binding{Host: h, Guest: g}
	}
	return e
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []model.Object
		ref  Ref
		want []string
	}{
		{"EIP in a prefix set", []model.Object{eip("198.51.100.10", "", "")},
			Ref{model.KindEIP, "198.51.100.10"}, []string{"set/pop-a"}},
		{"EIP in the other prefix set", []model.Object{eip("198.51.100.200", "", "")},
			Ref{model.KindEIP, "198.51.100.200"}, []string{"set/pop-b"}},
		{"EIP pulled out: the dedicated set and the prefix set", []model.Object{eip("198.51.100.10", "hot", "")},
			Ref{model.KindEIP, "198.51.100.10"}, []string{"set/hot", "set/pop-a"}},
		{"EIP quarantined: the quarantine set too", []model.Object{eip("198.51.100.10", "", ""), &model.Quarantine{Address: addr("198.51.100.10")}},
			Ref{model.KindEIP, "198.51.100.10"}, []string{"set/pop-a", "set/quar"}},
		{"EIP pulled out and quarantined", []model.Object{eip("198.51.100.10", "hot", ""), &model.Quarantine{Address: addr("198.51.100.10")}},
			Ref{model.KindEIP, "198.51.100.10"}, []string{"set/hot", "set/pop-a", "set/quar"}},
		{"bound EIP: its host", []model.Object{eip("198.51.100.10", "", "h2/g1")},
			Ref{model.KindEIP, "198.51.100.10"}, []string{"host/h2", "set/pop-a"}},
		{"service: its VIP's carriers and its backends' hosts", []model.Object{encap("web", "198.51.100.200", "", "h1/g2", "h2/g1", "h1/g3")},
			Ref{model.KindService, "web"}, []string{"host/h1", "host/h2", "set/pop-b"}},
		{"service pulled out and quarantined", []model.Object{encap("web", "198.51.100.200", "hot2", "h3/g1"), &model.Quarantine{Address: addr("198.51.100.200")}},
			Ref{model.KindService, "web"}, []string{"host/h3", "set/hot2", "set/pop-b", "set/quar"}},
		{"nat service: no hosts", []model.Object{&model.Service{Name: "dmz", VIP: addr("198.51.100.30"), Mode: model.ModeNAT,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "tls"}},
			Pools:     []model.Pool{{Name: "tls", Backends: []model.Backend{{Address: addr("198.19.11.1"), Port: 8443}}}}}},
			Ref{model.KindService, "dmz"}, []string{"set/pop-a"}},
		{"health: its service's sets", []model.Object{encap("web", "198.51.100.200", "hot", "h1/g1"), &model.Health{Service: "web"}},
			Ref{model.KindHealth, "web"}, []string{"set/hot", "set/pop-b"}},
		{"health of no service", []model.Object{&model.Health{Service: "gone"}},
			Ref{model.KindHealth, "gone"}, nil},
		{"host: its own scope only", []model.Object{
			eip("198.51.100.10", "hot", "h1/g1"), eip("198.51.100.11", "", "h2/g1"),
			encap("web", "198.51.100.200", "", "h1/g2", "h1/g3"), encap("api", "198.51.100.201", "hot2", "h2/g2")},
			Ref{model.KindHost, "h1"}, []string{"host/h1"}},
		{"guest: its EIP's sets", []model.Object{eip("198.51.100.10", "hot", "h1/g1"), eip("198.51.100.11", "", "h2/g1")},
			Ref{model.KindGuestCopy, "h1/g1"}, []string{"set/hot", "set/pop-a"}},
		{"guest: its EIP's and its services' sets", []model.Object{eip("198.51.100.11", "", "h1/g2"),
			encap("web", "198.51.100.200", "", "h1/g2", "h1/g3"), encap("api", "198.51.100.201", "hot2", "h1/g2")},
			Ref{model.KindGuestCopy, "h1/g2"}, []string{"set/hot2", "set/pop-a", "set/pop-b"}},
		{"guest with a quarantined EIP", []model.Object{eip("198.51.100.10", "", "h1/g1"), &model.Quarantine{Address: addr("198.51.100.10")}},
			Ref{model.KindGuestCopy, "h1/g1"}, []string{"set/pop-a", "set/quar"}},
		{"guest with nothing", []model.Object{eip("198.51.100.10", "", "h1/g1")},
			Ref{model.KindGuestCopy, "h1/g2"}, nil},
		{"guest of no host", nil, Ref{model.KindGuestCopy, "h9/g1"}, nil},
		{"guest the host does not run", []model.Object{eip("198.51.100.10", "", "h1/g1")}, Ref{model.KindGuestCopy, "h3/g2"}, nil},
		{"host with nothing", []model.Object{eip("198.51.100.10", "", "h1/g1")},
			Ref{model.KindHost, "h3"}, []string{"host/h3"}},
		{"absent EIP", nil, Ref{model.KindEIP, "198.51.100.10"}, nil},
		{"absent host", nil, Ref{model.KindHost, "h9"}, nil},
		{"an edge set has no copies", nil, Ref{model.KindEdgeSet, "pop-a"}, nil},
		{"a quarantine has no copies", []model.Object{eip("198.51.100.10", "", ""), &model.Quarantine{Address: addr("198.51.100.10")}},
			Ref{model.KindQuarantine, "198.51.100.10"}, nil},
		{"an AZ has no copies", nil, Ref{model.KindAZ, "az1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := region(t)
			for _, o := range tc.objs {
				if h, ok := o.(*model.Health); ok {
					st.Set(h)
					continue
				}
				mustPut(t, st, o)
			}
			if got := Of(st, tc.ref); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Of(%v) = %q, want %q", tc.ref, got, tc.want)
			}
			// All agrees with Of.
			snap, err := All(st)
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.Scopes[tc.ref]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("All: %v in %q, want %q", tc.ref, got, tc.want)
			}
		})
	}
}

func TestAffected(t *testing.T) {
	st := region(t)
	mustPut(t, st,
		eip("198.51.100.10", "", "h1/g1"), eip("198.51.100.11", "", ""),
		encap("web", "198.51.100.200", "", "h1/g2", "h2/g1"),
		&model.Quarantine{Address: addr("198.51.100.10")},
	)
	st.Set(&model.Health{Service: "web"})
	r := func(kind, key string) Ref { return Ref{kind, key} }
	for _, tc := range []struct {
		name    string
		changed []Ref
		want    []Ref
	}{
		{"bound EIP: its guest", []Ref{r(model.KindEIP, "198.51.100.10")},
			[]Ref{r(model.KindEIP, "198.51.100.10"), r(model.KindGuestCopy, "h1/g1")}},
		{"unbound EIP", []Ref{r(model.KindEIP, "198.51.100.11")}, []Ref{r(model.KindEIP, "198.51.100.11")}},
		{"absent EIP", []Ref{r(model.KindEIP, "198.51.100.99")}, []Ref{r(model.KindEIP, "198.51.100.99")}},
		{"service: its backends' guests and health", []Ref{r(model.KindService, "web")},
			[]Ref{r(model.KindGuestCopy, "h1/g2"), r(model.KindGuestCopy, "h2/g1"), r(model.KindHealth, "web"), r(model.KindService, "web")}},
		{"quarantine of an EIP", []Ref{r(model.KindQuarantine, "198.51.100.10")},
			[]Ref{r(model.KindEIP, "198.51.100.10"), r(model.KindGuestCopy, "h1/g1"), r(model.KindQuarantine, "198.51.100.10")}},
		{"quarantine of a VIP", []Ref{r(model.KindQuarantine, "198.51.100.200")},
			[]Ref{r(model.KindGuestCopy, "h1/g2"), r(model.KindGuestCopy, "h2/g1"), r(model.KindHealth, "web"), r(model.KindQuarantine, "198.51.100.200"), r(model.KindService, "web")}},
		{"host: itself and its guests", []Ref{r(model.KindHost, "h2")}, []Ref{r(model.KindGuestCopy, "h2/g1"), r(model.KindGuestCopy, "h2/g2"), r(model.KindHost, "h2")}},
		{"health: itself", []Ref{r(model.KindHealth, "web")}, []Ref{r(model.KindHealth, "web")}},
		{"AZ, firewall rule, bandwidth package, DNS, GSLB: themselves", []Ref{r(model.KindAZ, "az1"), r(model.KindFirewallRule, "fw"),
			r(model.KindBandwidthPackage, "bw"), r(model.KindDNSZone, "z"), r(model.KindGSLBRecord, "g")},
			[]Ref{r(model.KindAZ, "az1"), r(model.KindBandwidthPackage, "bw"), r(model.KindDNSZone, "z"), r(model.KindFirewallRule, "fw"), r(model.KindGSLBRecord, "g")}},
		{"edge set: every scoped object", []Ref{r(model.KindEdgeSet, "pop-a")},
			[]Ref{r(model.KindEIP, "198.51.100.10"), r(model.KindEIP, "198.51.100.11"), r(model.KindEdgeSet, "pop-a"),
				r(model.KindGuestCopy, "h1/g1"), r(model.KindGuestCopy, "h1/g2"), r(model.KindGuestCopy, "h1/g3"),
				r(model.KindGuestCopy, "h2/g1"), r(model.KindGuestCopy, "h2/g2"), r(model.KindGuestCopy, "h3/g1"),
				r(model.KindHealth, "web"), r(model.KindService, "web")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Affected(st, tc.changed)
			slices.SortFunc(tc.want, compareRef)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Affected(%v) =\n%v, want\n%v", tc.changed, got, tc.want)
			}
		})
	}
}

// copies applies copy ops to a map of scope key -> value.
type copies map[string]string

func (c copies) apply(ops []store.Op) error {
	for _, o := range ops {
		if o.Scope == "" {
			return fmt.Errorf("op %s/%s has no scope", o.Kind, o.Key)
		}
		k := store.ScopeKey(o.Scope, o.Kind, o.Key)
		if o.Value == nil {
			if _, ok := c[k]; !ok {
				return fmt.Errorf("delete of %s, which is not there", k)
			}
			delete(c, k)
		} else {
			c[k] = string(o.Value)
		}
	}
	return nil
}

func allCopies(t testing.TB, st *model.State) copies {
	t.Helper()
	ops, err := AllOps(st)
	if err != nil {
		t.Fatal(err)
	}
	c := copies{}
	if err := c.apply(ops); err != nil {
		t.Fatal(err)
	}
	return c
}

// compare says how two sets of copies differ ("" if not).
func compare(got, want copies) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			fmt.Fprintf(&b, "missing %s\n", k)
		} else if g != want[k] {
			fmt.Fprintf(&b, "stale %s: %s, want %s\n", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "extra %s\n", k)
		}
	}
	return b.String()
}

// checkOrder: puts, then deletes, each sorted.
func checkOrder(ops []store.Op) error {
	deleting := false
	for i, o := range ops {
		if o.Value == nil {
			deleting = true
		} else if deleting {
			return fmt.Errorf("op %d puts %s %s/%s after a delete", i, o.Scope, o.Kind, o.Key)
		}
		if i > 0 && (ops[i-1].Value == nil) == (o.Value == nil) {
			p := ops[i-1]
			if p.Scope > o.Scope || p.Scope == o.Scope && (p.Kind > o.Kind || p.Kind == o.Kind && p.Key >= o.Key) {
				return fmt.Errorf("ops %d and %d out of order: %s %s/%s, %s %s/%s", i-1, i, p.Scope, p.Kind, p.Key, o.Scope, o.Kind, o.Key)
			}
		}
	}
	return nil
}

func TestDiffMovePrefix(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"), eip("198.51.100.11", "", ""))
	have := allCopies(t, st)
	changed := []Ref{{model.KindEdgeSet, "pop-a"}, {model.KindEdgeSet, "pop-b"}}
	before, err := Take(st, changed)
	if err != nil {
		t.Fatal(err)
	}
	// Move 198.51.100.0/25 to pop-b (Set: Put refuses either half alone).
	st.Set(&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("203.0.113.0/24")}})
	st.Set(&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}})
	after, err := Take(st, changed, before)
	if err != nil {
		t.Fatal(err)
	}
	ops := Diff(before, after, changed)
	var got []string
	for _, o := range ops {
		verb := "put"
		if o.Value == nil {
			verb = "delete"
		}
		got = append(got, verb+" "+store.ScopeKey(o.Scope, o.Kind, o.Key))
	}
	want := []string{
		"put /azgate/scope/set/pop-b/eips/198.51.100.10",
		"put /azgate/scope/set/pop-b/eips/198.51.100.11",
		"put /azgate/scope/set/pop-b/guests/h1/g1",
		"delete /azgate/scope/set/pop-a/eips/198.51.100.10",
		"delete /azgate/scope/set/pop-a/eips/198.51.100.11",
		"delete /azgate/scope/set/pop-a/guests/h1/g1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := have.apply(ops); err != nil {
		t.Fatal(err)
	}
	if d := compare(have, allCopies(t, st)); d != "" {
		t.Error(d)
	}
}

func TestDiffRebindAndValue(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"), eip("198.51.100.150", "", "h1/g2"))
	have := allCopies(t, st)
	changed := []Ref{{model.KindEIP, "198.51.100.10"}}
	before, err := Take(st, changed)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, eip("198.51.100.10", "", "h2/g1"))
	after, err := Take(st, changed, before)
	if err != nil {
		t.Fatal(err)
	}
	ops := Diff(before, after, changed)
	if err := checkOrder(ops); err != nil {
		t.Error(err)
	}
	if err := have.apply(ops); err != nil {
		t.Fatal(err)
	}
	if d := compare(have, allCopies(t, st)); d != "" {
		t.Error(d)
	}
	// The EIP's new value in its unchanged scope, h1/g1 leaves pop-a,
	// h2/g1 enters it, h1/g2 stays in pop-b; no host is in a set.
	for _, k := range []string{"/azgate/scope/set/pop-a/eips/198.51.100.10", "/azgate/scope/host/h2/eips/198.51.100.10"} {
		if !strings.Contains(have[k], `"host":"h2"`) {
			t.Errorf("%s = %q, want the new binding", k, have[k])
		}
	}
	if _, ok := have["/azgate/scope/host/h1/eips/198.51.100.10"]; ok {
		t.Error("the EIP is still in h1's scope")
	}
	if v, ok := have["/azgate/scope/set/pop-a/guests/h2/g1"]; !ok || !strings.Contains(v, `"underlay":"198.18.1.2"`) {
		t.Errorf("h2/g1 is not in pop-a with h2's underlay: %q", v)
	}
	if _, ok := have["/azgate/scope/set/pop-a/guests/h1/g1"]; ok {
		t.Error("h1/g1 is still in pop-a")
	}
	if _, ok := have["/azgate/scope/set/pop-b/guests/h1/g2"]; !ok {
		t.Error("h1/g2 left pop-b")
	}
	for k := range have {
		if strings.HasPrefix(k, "/azgate/scope/set/") && strings.Contains(k, "/hosts/") {
			t.Errorf("%s: a host in a set scope", k)
		}
	}
}

// TestDiffRebindToHostInSet: a rebind to a host already in the EIP's set
// (another of its EIPs is there) writes the copy of the new guest only,
// and no host, when the snapshot before is taken with the objects Related
// after the change, as the controller does.
func TestDiffRebindToHostInSet(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"), eip("198.51.100.11", "", "h2/g2"))
	have := allCopies(t, st)
	changed := []Ref{{model.KindEIP, "198.51.100.10"}}
	after := st.Clone()
	mustPut(t, after, eip("198.51.100.10", "", "h2/g1"))
	b, err := Take(st, changed, Related(after, changed))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Take(after, changed, b)
	if err != nil {
		t.Fatal(err)
	}
	ops := Diff(b, a, changed)
	want := []string{"put host/h2/eips/198.51.100.10", "put set/pop-a/eips/198.51.100.10", "put set/pop-a/guests/h2/g1",
		"delete host/h1/eips/198.51.100.10", "delete set/pop-a/guests/h1/g1"}
	if got := opNames(ops); !slices.Equal(got, want) {
		t.Errorf("ops %v, want %v", got, want)
	}
	if err := have.apply(ops); err != nil {
		t.Fatal(err)
	}
	if d := compare(have, allCopies(t, after)); d != "" {
		t.Error(d)
	}
}

// TestDiffNeedsAlso: without the before snapshot the after one misses the
// host an EIP was unbound from, and Diff says so rather than guess.
func TestDiffNeedsAlso(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"))
	changed := []Ref{{model.KindEIP, "198.51.100.10"}}
	before, _ := Take(st, changed)
	mustPut(t, st, eip("198.51.100.10", "", ""))
	after, _ := Take(st, changed)
	defer func() {
		if recover() == nil {
			t.Error("Diff did not panic on a host in the snapshot before only")
		}
	}()
	Diff(before, after, changed)
}

// takeFunc is Take, or a broken one.
type takeFunc func(st *model.State, changed []Ref, also ...Snapshot) (Snapshot, error)

// randomChanges applies steps random changes to a region, keeping copies
// by Take and Diff, and returns how the copies first differ from AllOps
// ("" if never) and how many changes were applied.
func randomChanges(t testing.TB, seed uint64, steps int, take takeFunc) (string, int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	st := region(t)
	change := changer(rng, st)
	have := allCopies(t, st)
	applied := 0
	for step := range steps {
		changed, ok := changeSome(rng, step, change)
		before, err := take(st, changed)
		if err != nil {
			t.Fatal(err)
		}
		if !ok() {
			continue
		}
		applied++
		after, err := take(st, changed, before)
		if err != nil {
			t.Fatal(err)
		}
		ops := Diff(before, after, changed)
		if err := checkOrder(ops); err != nil {
			return fmt.Sprintf("step %d (%v): %v", step, changed, err), applied
		}
		if err := have.apply(ops); err != nil {
			return fmt.Sprintf("step %d (%v): %v", step, changed, err), applied
		}
		if d := compare(have, allCopies(t, st)); d != "" {
			return fmt.Sprintf("step %d (%v):\n%s", step, changed, d), applied
		}
	}
	return "", applied
}

// changeSome picks one change, or a few for one commit; ok applies them
// and says whether any went in.
func changeSome(rng *rand.Rand, step int, change func(step int) ([]Ref, func() error)) (changed []Ref, ok func() bool) {
	n := 1
	if rng.IntN(4) == 0 {
		n += 1 + rng.IntN(3)
	}
	var applies []func() error
	for range n {
		c, a := change(step)
		changed, applies = append(changed, c...), append(applies, a)
	}
	return changed, func() bool {
		ok := false
		for _, a := range applies {
			if a() == nil {
				ok = true
			}
		}
		return ok
	}
}

// changer returns a generator of random changes of st (set up here: its
// prefix sets split into four blocks that move between them): what a
// change touches, and a function that applies it to st (an error: the
// model refused it, st is unchanged).
func changer(rng *rand.Rand, st *model.State) func(step int) (changed []Ref, apply func() error) {
	// Four /26 blocks, moved between the two prefix sets.
	blocks := []netip.Prefix{prefix("198.51.100.0/26"), prefix("198.51.100.64/26"), prefix("198.51.100.128/26"), prefix("198.51.100.192/26")}
	owner := []string{"pop-a", "pop-a", "pop-b", "pop-b"}
	st.Set(&model.EdgeSet{Name: "pop-a", Prefixes: blocks[:2], Edges: st.EdgeSets["pop-a"].Edges})
	st.Set(&model.EdgeSet{Name: "pop-b", Prefixes: blocks[2:], Edges: st.EdgeSets["pop-b"].Edges})
	var addrs []string
	for _, b := range []int{1, 2, 3, 70, 71, 130, 131, 200, 201, 202} {
		addrs = append(addrs, fmt.Sprintf("198.51.100.%d", b))
	}
	vips := []string{"198.51.100.20", "198.51.100.90", "198.51.100.140", "198.51.100.250"}
	services := []string{"web", "api", "dns"}
	guests := []string{"h1/g1", "h1/g2", "h1/g3", "h2/g1", "h2/g2", "h3/g1"}
	sets := []string{"", "", "hot", "hot2"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	return func(step int) (changed []Ref, apply func() error) {
		switch rng.IntN(9) {
		case 0, 1: // add, bind, unbind, rebind, pull out, release
			a := pick(addrs)
			g := pick(guests)
			if rng.IntN(3) == 0 {
				g = ""
			}
			changed = []Ref{{model.KindEIP, a}}
			apply = func() error { _, err := st.Put(eip(a, pick(sets), g)); return err }
		case 2:
			a := pick(addrs)
			changed = []Ref{{model.KindEIP, a}}
			apply = func() error { _, err := st.Delete(model.KindEIP, a); return err }
		case 3: // quarantine, release
			a := pick(append(addrs[:len(addrs):len(addrs)], vips...))
			changed = []Ref{{model.KindQuarantine, a}}
			if _, ok := st.Quarantines[a]; ok {
				apply = func() error { _, err := st.Delete(model.KindQuarantine, a); return err }
			} else {
				apply = func() error { _, err := st.Put(&model.Quarantine{Address: addr(a)}); return err }
			}
		case 4: // a service's backends, set or VIP
			name := pick(services)
			var backends []string
			for _, g := range guests {
				if rng.IntN(3) == 0 {
					backends = append(backends, g)
				}
			}
			if len(backends) == 0 {
				backends = []string{pick(guests)}
			}
			changed = []Ref{{model.KindService, name}}
			apply = func() error { _, err := st.Put(encap(name, pick(vips), pick(sets), backends...)); return err }
		case 5:
			name := pick(services)
			changed = []Ref{{model.KindService, name}}
			apply = func() error { _, err := st.Delete(model.KindService, name); return err }
		case 6: // the controller's health verdict
			name := pick(services)
			changed = []Ref{{model.KindHealth, name}}
			if _, ok := st.Health[name]; ok && rng.IntN(2) == 0 {
				apply = func() error { st.Remove(model.KindHealth, name); return nil }
			} else {
				apply = func() error {
					st.Set(&model.Health{Service: name, Down: map[string][]string{"web": {fmt.Sprint(step)}}})
					return nil
				}
			}
		case 7: // move a block between the prefix sets
			i := rng.IntN(len(blocks))
			to := "pop-a"
			if owner[i] == "pop-a" {
				to = "pop-b"
			}
			changed = []Ref{{model.KindEdgeSet, "pop-a"}, {model.KindEdgeSet, "pop-b"}}
			apply = func() error {
				next := slices.Clone(owner)
				next[i] = to
				var pa, pb []netip.Prefix
				for j, o := range next {
					if o == "pop-a" {
						pa = append(pa, blocks[j])
					} else {
						pb = append(pb, blocks[j])
					}
				}
				if len(pa) == 0 || len(pb) == 0 {
					return fmt.Errorf("a set would have no prefix")
				}
				owner = next
				st.Set(&model.EdgeSet{Name: "pop-a", Prefixes: pa, Edges: st.EdgeSets["pop-a"].Edges})
				st.Set(&model.EdgeSet{Name: "pop-b", Prefixes: pb, Edges: st.EdgeSets["pop-b"].Edges})
				return nil
			}
		case 8: // a host gains or loses an unused guest, or moves
			name := pick([]string{"h1", "h2", "h3"})
			changed = []Ref{{model.KindHost, name}}
			move := rng.IntN(2) == 0
			apply = func() error {
				h := *st.Hosts[name]
				if move { // its guests' copies get the new underlay
					u := h.Underlay.As4()
					u[2] ^= 3 // 198.18.1.n <-> 198.18.2.n
					h.Underlay = netip.AddrFrom4(u)
				} else if i := slices.IndexFunc(h.Guests, func(g model.Guest) bool { return g.Name == "spare" }); i >= 0 {
					h.Guests = slices.Delete(slices.Clone(h.Guests), i, i+1)
				} else {
					h.Guests = append(slices.Clone(h.Guests), model.Guest{Name: "spare", Address: netip.AddrFrom4([4]byte{198, 19, 9, byte(h.Underlay.As4()[3])}), VSID: 9000})
				}
				_, err := st.Put(&h)
				return err
			}
		}
		return changed, apply
	}
}

func TestRandomChanges(t *testing.T) {
	for seed := range uint64(8) {
		d, applied := randomChanges(t, seed, 300, Take)
		if d != "" {
			t.Fatalf("seed %d: the copies kept by Diff differ from AllOps at %s", seed, d)
		}
		if applied < 100 {
			t.Errorf("seed %d: only %d of 300 changes applied", seed, applied)
		}
	}
}

// TestRandomChangesCatchesOmissions: the property test fails when Take
// misses an object whose scopes change.
func TestRandomChangesCatchesOmissions(t *testing.T) {
	for _, tc := range []struct {
		name string
		omit func(changed []Ref, r Ref) bool
	}{
		{"an EIP's host", func(changed []Ref, r Ref) bool { return r.Kind == model.KindHost && changed[0].Kind == model.KindEIP }},
		{"a service's backends' hosts", func(changed []Ref, r Ref) bool {
			return r.Kind == model.KindHost && changed[0].Kind == model.KindService
		}},
		{"a service's health", func(changed []Ref, r Ref) bool {
			return r.Kind == model.KindHealth && changed[0].Kind == model.KindService
		}},
		{"an edge set's hosts", func(changed []Ref, r Ref) bool {
			return r.Kind == model.KindHost && changed[0].Kind == model.KindEdgeSet
		}},
		{"a quarantined address's EIP", func(changed []Ref, r Ref) bool {
			return r.Kind == model.KindEIP && len(changed) == 1 && changed[0].Kind == model.KindQuarantine
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := func(st *model.State, changed []Ref, also ...Snapshot) (Snapshot, error) {
				var refs []Ref
				for _, r := range Affected(st, changed) {
					if !tc.omit(changed, r) {
						refs = append(refs, r)
					}
				}
				for _, a := range also {
					refs = append(refs, a.Refs()...)
				}
				return take(st, refs, changed)
			}
			for seed := range uint64(8) {
				if d, _ := randomChanges(t, seed, 300, broken); d != "" {
					t.Logf("seed %d fails as it should: %s", seed, strings.SplitN(d, "\n", 3)[:2])
					return
				}
			}
			t.Error("no seed found the omission")
		})
	}
}

// big is a region of n EIPs, half of them bound, a tenth pulled out and a
// few quarantined, on 1000 hosts, with 100 services.
func big(b testing.TB, n int) *model.State {
	st := model.NewState()
	mustPut(b, st,
		&model.AZ{Name: "az1"},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("11.0.0.0/12")}},
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("11.16.0.0/12")}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine},
	)
	const hosts = 1000
	per := (n + hosts - 1) / hosts
	for h := range hosts {
		hh := &model.Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})}
		for g := range per {
			hh.Guests = append(hh.Guests, model.Guest{Name: fmt.Sprintf("g%d", g), Address: netip.AddrFrom4([4]byte{100, 64, byte(g >> 8), byte(g)}), VSID: uint32(5000 + h)})
		}
		mustPut(b, st, hh)
	}
	for i := range n {
		a := netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)})
		e := &model.EIP{Address: a}
		if i%2 == 0 {
			e.Binding = &model.Binding{Host: fmt.Sprintf("h%d", (i/2)%hosts), Guest: fmt.Sprintf("g%d", (i/2)/hosts)}
		}
		if i%10 == 3 {
			e.Set = "hot"
		}
		mustPut(b, st, e)
		if i%1000 == 7 {
			mustPut(b, st, &model.Quarantine{Address: a})
		}
	}
	for i := range 100 {
		mustPut(b, st, encap(fmt.Sprintf("svc%d", i), fmt.Sprintf("11.31.255.%d", i), "",
			fmt.Sprintf("h%d/g%d", i, per-1), fmt.Sprintf("h%d/g%d", i+100, per-1)))
	}
	return st
}

// BenchmarkAll: at 100k EIPs (BenchmarkAll/1M, run on its own, takes a
// few GB and a minute to build its state).
func BenchmarkAll(b *testing.B) {
	for _, n := range []struct {
		name string
		eips int
	}{{"100k", 100000}, {"1M", 1000000}} {
		b.Run(n.name, func(b *testing.B) {
			st := big(b, n.eips)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for range b.N {
				if _, err := All(st); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// cpuTime is the process's CPU time: on a shared machine the benchmarks
// report it per op as well as the wall time (it includes the GC's work on
// other threads and the rebind benchmark's setup outside the timer).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime()-since)/float64(b.N), "cpu-ns/op")
}

func BenchmarkTakeDiffRebind(b *testing.B) {
	st := big(b, 100000)
	changed := []Ref{{model.KindEIP, "11.0.0.2"}}
	e := *st.EIPs["11.0.0.2"]
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	defer reportCPU(b, cpu)
	for i := range b.N {
		before, err := Take(st, changed)
		if err != nil {
			b.Fatal(err)
		}
		e.Binding = &model.Binding{Host: "h999", Guest: fmt.Sprintf("g%d", 99-i%2)}
		if i%2 == 1 {
			e.Binding = &model.Binding{Host: "h1", Guest: "g0"}
		}
		b.StopTimer()
		st.Set(&e)
		b.StartTimer()
		after, err := Take(st, changed, before)
		if err != nil {
			b.Fatal(err)
		}
		if len(Diff(before, after, changed)) == 0 {
			b.Fatal("no ops")
		}
	}
}

func TestTakeValues(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"), &model.Quarantine{Address: addr("198.51.100.10")})
	changed := []Ref{{model.KindQuarantine, "198.51.100.10"}, {model.KindEdgeSet, "hot"}}
	snap, err := Take(st, changed)
	if err != nil {
		t.Fatal(err)
	}
	var got []Ref
	for r := range snap.Values {
		got = append(got, r)
	}
	slices.SortFunc(got, compareRef)
	// The changed objects and those in a scope (the EIP's guest; an edge
	// set change takes every guest, the unbound ones are in no scope).
	want := []Ref{{model.KindEdgeSet, "hot"}, {model.KindEIP, "198.51.100.10"}, {model.KindGuestCopy, "h1/g1"},
		{model.KindQuarantine, "198.51.100.10"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values of %v, want %v", got, want)
	}
	if s := string(snap.Values[Ref{model.KindEIP, "198.51.100.10"}]); !strings.Contains(s, `"host":"h1"`) {
		t.Errorf("EIP encoded as %s", s)
	}
	if got := snap.Scopes[Ref{model.KindQuarantine, "198.51.100.10"}]; got != nil {
		t.Errorf("a quarantine in scopes %q", got)
	}
	if got, want := snap.Refs(), Affected(st, changed); !reflect.DeepEqual(got, want) {
		t.Errorf("Refs() = %v, want Affected %v", got, want)
	}
}

func BenchmarkAllOps(b *testing.B) {
	st := big(b, 100000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		if _, err := AllOps(st); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// TestOfCost: the scopes of one object cost the same in a small region and
// in one of 20,000 EIPs (no setplan.FromState, no walk over the region).
func TestOfCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a region of 20,000 EIPs")
	}
	small, large := big(t, 2000), big(t, 20000)
	for _, r := range []Ref{
		{model.KindEIP, "11.0.0.2"},  // bound
		{model.KindEIP, "11.0.0.3"},  // pulled out
		{model.KindEIP, "11.0.0.7"},  // quarantined
		{model.KindService, "svc1"},  // two backends
		{model.KindHost, "h1"},       // its guests' EIPs and a backend
		{model.KindHealth, "absent"}, // none
	} {
		if got, want := Of(large, r), Of(small, r); !reflect.DeepEqual(got, want) {
			t.Fatalf("%v: %q in the large region, %q in the small one", r, got, want)
		}
		if r.Kind == model.KindHost {
			// h1 has 20 guests in the large region, 2 in the small one.
			continue
		}
		a := testing.AllocsPerRun(20, func() { Of(small, r) })
		b := testing.AllocsPerRun(20, func() { Of(large, r) })
		if b > a || b > 12 {
			t.Errorf("%v: %v allocations in a region of 20,000 EIPs, %v in one of 2,000", r, b, a)
		}
	}
	// A host costs per guest: h1 has ten times the guests in the large
	// region.
	a := testing.AllocsPerRun(20, func() { Of(small, Ref{model.KindHost, "h1"}) })
	b := testing.AllocsPerRun(20, func() { Of(large, Ref{model.KindHost, "h1"}) })
	if b > 10*a+10 {
		t.Errorf("host h1: %v allocations with 20 guests, %v with 2", b, a)
	}
}

package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// record applies a write's LingerChange to l.
func (l Lingering) record(lc LingerChange) {
	for c, v := range lc.Start {
		l.Set(c, v)
	}
	for c, v := range lc.Update {
		l.Set(c, v)
	}
	for _, c := range lc.End {
		l.Delete(c)
	}
}

// lingerWant is what the copies must be with l lingering in st: every
// copy of st (AllOps) and each lingering one with the object's current
// value. It also checks that each lingering copy is of an object still
// placed somewhere, in a set scope it is no longer placed in.
func lingerWant(t testing.TB, st *model.State, l Lingering) (copies, error) {
	want := allCopies(t, st)
	for r, scopes := range l {
		o, ok := object(st, r)
		if !ok {
			return nil, fmt.Errorf("%s %s lingers but is gone", r.Kind, r.Key)
		}
		placed := Of(st, r)
		if len(placed) == 0 {
			return nil, fmt.Errorf("%s %s lingers but is in no scope", r.Kind, r.Key)
		}
		cur, err := store.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		for sc, v := range scopes {
			switch {
			case !IsSetScope(sc):
				return nil, fmt.Errorf("%s %s lingers in %s, not a set scope", r.Kind, r.Key, sc)
			case slices.Contains(placed, sc):
				return nil, fmt.Errorf("%s %s lingers in %s, where it is placed", r.Kind, r.Key, sc)
			case string(v) != string(cur):
				return nil, fmt.Errorf("%s %s lingers in %s with %s, its value is %s", r.Kind, r.Key, sc, v, cur)
			}
			want[store.ScopeKey(sc, r.Kind, r.Key)] = string(v)
		}
	}
	return want, nil
}

// TestRandomLinger is the property test of Linger and Expired: random
// writes (those of TestRandomChanges) with the copies leaving set scopes
// kept, and random expiries. After every step the copies are those of
// the state plus the lingering ones, each holding its object's current
// value, and every op applies (no delete of a copy that is not there).
func TestRandomLinger(t *testing.T) {
	var started, updated, back, gone, expired, stayed int
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, seed^0x51ed27a7))
		st := region(t)
		change := changer(rng, st)
		have := allCopies(t, st)
		ling := Lingering{}
		fail := func(step int, what string, err error) {
			t.Helper()
			t.Fatalf("seed %d step %d (%s): %v", seed, step, what, err)
		}
		for step := range 400 {
			if ling.Len() > 0 && rng.IntN(5) == 0 {
				// Some lingering copies' grace ends.
				var cs []Copy
				for r, scopes := range ling {
					for sc := range scopes {
						if rng.IntN(2) == 0 {
							cs = append(cs, Copy{sc, r})
						}
					}
				}
				slices.SortFunc(cs, compareCopy)
				ops := Expired(st, cs)
				expired += len(ops)
				stayed += len(cs) - len(ops)
				if err := have.apply(ops); err != nil {
					fail(step, "expiry", err)
				}
				for _, c := range cs {
					ling.Delete(c)
				}
			} else {
				changed, ok := changeSome(rng, step, change)
				before, err := Take(st, changed)
				if err != nil {
					t.Fatal(err)
				}
				if !ok() {
					continue
				}
				after, err := Take(st, changed, before)
				if err != nil {
					t.Fatal(err)
				}
				ops, lc := Linger(before, after, changed, Diff(before, after, changed), ling, true)
				what := fmt.Sprint(changed)
				if err := checkOrder(ops); err != nil {
					fail(step, what, err)
				}
				if err := have.apply(ops); err != nil {
					fail(step, what, err)
				}
				started += len(lc.Start)
				updated += len(lc.Update)
				for _, c := range lc.End {
					if _, ok := object(st, c.Ref); ok {
						back++
					} else {
						gone++
					}
				}
				ling.record(lc)
			}
			want, err := lingerWant(t, st, ling)
			if err != nil {
				fail(step, "lingering", err)
			}
			if d := compare(have, want); d != "" {
				fail(step, "copies", fmt.Errorf("\n%s", d))
			}
		}
	}
	t.Logf("started %d, updated %d, back in their scope %d, deleted with their object %d; expired %d, back at expiry %d",
		started, updated, back, gone, expired, stayed)
	for name, n := range map[string]int{"started": started, "updated": updated, "back": back, "gone": gone, "expired": expired} {
		if n == 0 {
			t.Errorf("no lingering copy %s: the test does not exercise it", name)
		}
	}
}

// TestLingerRelease: an EIP released from a pull-out keeps its copy (with
// its new value) and its guest's in the dedicated set; without start the
// ops are Diff's.
func TestLingerRelease(t *testing.T) {
	st := region(t)
	mustPut(t, st, eip("198.51.100.10", "hot", "h1/g1"))
	have := allCopies(t, st)
	changed := []Ref{{model.KindEIP, "198.51.100.10"}}
	before, _ := Take(st, changed)
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"))
	after, _ := Take(st, changed, before)
	diff := Diff(before, after, changed)

	if ops, lc := Linger(before, after, changed, diff, Lingering{}, false); !slices.Equal(opNames(ops), opNames(diff)) || !lc.Empty() {
		t.Errorf("Linger without start: %v, %+v; want Diff's %v", opNames(ops), lc, opNames(diff))
	}
	ops, lc := Linger(before, after, changed, diff, Lingering{}, true)
	want := []string{
		"put host/h1/eips/198.51.100.10",
		"put set/hot/eips/198.51.100.10",
		"put set/pop-a/eips/198.51.100.10",
	}
	if got := opNames(ops); !slices.Equal(got, want) {
		t.Errorf("ops %v, want %v (Diff: %v)", got, want, opNames(diff))
	}
	if len(lc.Start) != 2 || lc.Start[Copy{"set/hot", Ref{model.KindEIP, "198.51.100.10"}}] == nil ||
		lc.Start[Copy{"set/hot", Ref{model.KindGuestCopy, "h1/g1"}}] == nil || len(lc.Update) != 0 || len(lc.End) != 0 {
		t.Errorf("change %+v: want the EIP and its guest to start lingering in set/hot", lc)
	}
	if err := have.apply(ops); err != nil {
		t.Fatal(err)
	}
	if v := have["/azgate/scope/set/hot/eips/198.51.100.10"]; strings.Contains(v, `"set"`) {
		t.Errorf("the lingering copy holds the old value %s", v)
	}

	// The grace ends: both go; unless the EIP was pulled out again in
	// between by a write that did not know of them (another controller).
	cs := []Copy{{"set/hot", Ref{model.KindEIP, "198.51.100.10"}}, {"set/hot", Ref{model.KindGuestCopy, "h1/g1"}}}
	if got := opNames(Expired(st, cs)); !slices.Equal(got, []string{"delete set/hot/eips/198.51.100.10", "delete set/hot/guests/h1/g1"}) {
		t.Errorf("Expired: %v, want both deleted", got)
	}
	mustPut(t, st, eip("198.51.100.10", "hot", "h1/g1"))
	if got := Expired(st, cs); len(got) != 0 {
		t.Errorf("Expired after a new pull-out: %v, want nothing deleted", opNames(got))
	}
}

func opNames(ops []store.Op) []string {
	var out []string
	for _, o := range ops {
		verb := "put "
		if o.Value == nil {
			verb = "delete "
		}
		out = append(out, verb+o.Scope+"/"+o.Kind+"/"+o.Key)
	}
	return out
}

// TestLingerRebind: an EIP rebound while its copy lingers in the dedicated
// set it was released from brings its new guest's copy into that set (the
// set's edges still receive its traffic: a route without the guest's
// tunnel would drop it), lingering from this write; the guest it left
// goes at once when nothing points to it any more. At the end of the
// graces every kept copy is deleted.
func TestLingerRebind(t *testing.T) {
	st := region(t)
	const a = "198.51.100.10"
	er := Ref{model.KindEIP, a}
	step := func(e *model.EIP, ling Lingering) ([]string, LingerChange) {
		t.Helper()
		changed := []Ref{er}
		before, err := Take(st, changed)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, st, e)
		after, err := Take(st, changed, before)
		if err != nil {
			t.Fatal(err)
		}
		ops, lc := Linger(before, after, changed, Diff(before, after, changed), ling, true)
		if err := checkOrder(ops); err != nil {
			t.Fatal(err)
		}
		ling.record(lc)
		if _, err := lingerWant(t, st, ling); err != nil {
			t.Fatal(err)
		}
		return opNames(ops), lc
	}
	ling := Lingering{}
	mustPut(t, st, eip(a, "hot", "h1/g1"))
	step(eip(a, "", "h1/g1"), ling) // released: the EIP and h1/g1 linger in set/hot
	if !ling.Has(Copy{"set/hot", er}) || !ling.Has(Copy{"set/hot", Ref{model.KindGuestCopy, "h1/g1"}}) {
		t.Fatalf("after the release lingering %v, want the EIP and h1/g1 in set/hot", ling)
	}

	ops, lc := step(eip(a, "", "h1/g2"), ling)
	for _, want := range []string{"put set/hot/eips/" + a, "put set/hot/guests/h1/g2", "delete set/hot/guests/h1/g1"} {
		if !slices.Contains(ops, want) {
			t.Errorf("rebind to h1/g2: ops %v, want %q among them", ops, want)
		}
	}
	if _, ok := lc.Start[Copy{"set/hot", Ref{model.KindGuestCopy, "h1/g2"}}]; !ok {
		t.Errorf("rebind to h1/g2: change %+v, want h1/g2's copy to start lingering in set/hot", lc)
	}
	if ling.Has(Copy{"set/hot", Ref{model.KindGuestCopy, "h1/g1"}}) {
		t.Errorf("h1/g1, which no EIP points to any more, still lingers: %v", ling)
	}

	// Rebound to a guest of another host, then the graces end.
	ops, _ = step(eip(a, "", "h2/g1"), ling)
	for _, want := range []string{"put set/hot/guests/h2/g1", "delete set/hot/guests/h1/g2"} {
		if !slices.Contains(ops, want) {
			t.Errorf("rebind to h2/g1: ops %v, want %q among them", ops, want)
		}
	}
	var cs []Copy
	for r, scopes := range ling {
		for sc := range scopes {
			cs = append(cs, Copy{sc, r})
		}
	}
	slices.SortFunc(cs, compareCopy)
	want := []string{"delete set/hot/eips/" + a, "delete set/hot/guests/h2/g1"}
	if got := opNames(Expired(st, cs)); !slices.Equal(got, want) {
		t.Errorf("Expired: %v, want %v", got, want)
	}
}

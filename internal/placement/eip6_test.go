package placement

import (
	"reflect"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// region6 is region with an IPv6 prefix on each prefix set and h1's and
// h2's first guests dual-stack.
func region6(t *testing.T) *model.State {
	t.Helper()
	st := region(t)
	a, b := *st.EdgeSets["pop-a"], *st.EdgeSets["pop-b"]
	a.Prefixes = append(a.Prefixes, prefix("2001:db8:a::/48"))
	b.Prefixes = append(b.Prefixes, prefix("2001:db8:b::/48"))
	h1, h2 := host("h1", 1, "g1", "g2", "g3"), host("h2", 2, "g1", "g2")
	h1.Guests[0].Address6 = addr("2001:db8:1::1")
	h2.Guests[0].Address6 = addr("2001:db8:2::1")
	mustPut(t, st, &a, &b, h1, h2)
	return st
}

// An IPv6 EIP is placed as an IPv4 one: the carriers of its address (its
// /48's set, its pull-out) and its host; a guest holding one EIP of each
// family is copied to the sets of both.
func TestIPv6EIPPlacement(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []model.Object
		ref  Ref
		want []string
	}{
		{"IPv6 EIP in its prefix's set", []model.Object{eip("2001:db8:b::7", "", "")},
			Ref{model.KindEIP, "2001:db8:b::7"}, []string{"set/pop-b"}},
		{"bound IPv6 EIP: its host", []model.Object{eip("2001:db8:b::7", "", "h2/g1")},
			Ref{model.KindEIP, "2001:db8:b::7"}, []string{"host/h2", "set/pop-b"}},
		{"IPv6 EIP pulled out", []model.Object{eip("2001:db8:b::7", "hot", "h2/g1")},
			Ref{model.KindEIP, "2001:db8:b::7"}, []string{"host/h2", "set/hot", "set/pop-b"}},
		{"IPv6 EIP quarantined", []model.Object{eip("2001:db8:b::7", "", ""), &model.Quarantine{Address: addr("2001:db8:b::7")}},
			Ref{model.KindEIP, "2001:db8:b::7"}, []string{"set/pop-b", "set/quar"}},
		{"guest of an IPv6 EIP", []model.Object{eip("2001:db8:b::7", "", "h1/g1")},
			Ref{model.KindGuestCopy, "h1/g1"}, []string{"set/pop-b"}},
		{"guest of an IPv4 and an IPv6 EIP: both sets", []model.Object{eip("198.51.100.10", "", "h1/g1"), eip("2001:db8:b::7", "hot", "h1/g1")},
			Ref{model.KindGuestCopy, "h1/g1"}, []string{"set/hot", "set/pop-a", "set/pop-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := region6(t)
			for _, o := range tc.objs {
				mustPut(t, st, o)
			}
			if got := Of(st, tc.ref); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Of(%v) = %q, want %q", tc.ref, got, tc.want)
			}
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

// Moving an IPv6 EIP to a guest of another host (eip bind: the drift)
// moves the guest copies as for IPv4: the new guest enters the EIP's set,
// the old one leaves it but stays where its IPv4 EIP needs it.
func TestIPv6EIPMove(t *testing.T) {
	st := region6(t)
	mustPut(t, st, eip("2001:db8:b::7", "", "h1/g1"))
	mustPut(t, st, eip("198.51.100.10", "", "h1/g1"))
	have := allCopies(t, st)
	changed := []Ref{{model.KindEIP, "2001:db8:b::7"}}
	before, err := Take(st, changed)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, eip("2001:db8:b::7", "", "h2/g1"))
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
	for _, k := range []string{"/azgate/scope/set/pop-b/eips/2001:db8:b::7", "/azgate/scope/host/h2/eips/2001:db8:b::7"} {
		if !strings.Contains(have[k], `"host":"h2"`) {
			t.Errorf("%s = %q, want the new binding", k, have[k])
		}
	}
	if _, ok := have["/azgate/scope/host/h1/eips/2001:db8:b::7"]; ok {
		t.Error("the IPv6 EIP is still in h1's scope")
	}
	if v := have["/azgate/scope/set/pop-b/guests/h2/g1"]; !strings.Contains(v, `"address6":"2001:db8:2::1"`) {
		t.Errorf("h2/g1 is not in pop-b with its IPv6 address: %q", v)
	}
	if _, ok := have["/azgate/scope/set/pop-b/guests/h1/g1"]; ok {
		t.Error("h1/g1 is still in pop-b")
	}
	if _, ok := have["/azgate/scope/set/pop-a/guests/h1/g1"]; !ok {
		t.Error("h1/g1 left pop-a, where its IPv4 EIP needs it")
	}
}

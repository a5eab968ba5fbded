package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// hostShare is the state an agent's share holds for a host of n guests
// with an EIP bound to each (as the fleet bench's hosts: 1,000 EIPs).
func hostShare(tb testing.TB, n int) *model.State {
	st := model.NewState()
	h := &model.Host{Name: "h0", AZ: "az1", Underlay: a("198.18.0.10")}
	objs := []model.Object{&model.AZ{Name: "az1"},
		&model.EdgeSet{Name: "set0", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.19.128.0/17")},
			Edges: []model.EdgeNode{{Name: "s0-e0", Underlay: a("198.18.128.1")}}}}
	var eips []model.Object
	for i := range n {
		g := model.Guest{Name: fmt.Sprintf("g%d", i), Address: netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), VSID: uint32(model.VSIDMin + i)}
		h.Guests = append(h.Guests, g)
		eips = append(eips, &model.EIP{Address: netip.AddrFrom4([4]byte{198, 19, 128 + byte(i>>8), byte(i)}), Binding: &model.Binding{Host: h.Name, Guest: g.Name}})
	}
	for _, o := range append(append(objs, h), eips...) {
		if _, err := st.Put(o); err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

// BenchmarkHandleFirstLoad1k: an agent's first full state of a
// 1,000-EIP host (Desired, the plan, the diff and the writes to the fake
// maps), with what it allocates (B/op): the garbage of a full load,
// which sets much of the process's peak RSS (docs/scale.md).
func BenchmarkHandleFirstLoad1k(b *testing.B) {
	st := hostShare(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		r, err := NewReconciler(Config{NoRetry: true, Name: "h0", Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), newFakeLinks())
		if err != nil {
			b.Fatal(err)
		}
		r.Handle(st, 10, nil, true)
		if n := r.ProgrammedCount(); n != 1000 {
			b.Fatalf("%d EIPs programmed, want 1000: %v", n, r.Status(time.Time{}, nil).Errors)
		}
		r.Stop()
	}
}

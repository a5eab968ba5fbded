package edge

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestIndexBytesPerEIP: the index of an edge's share (EIPs bound to
// guests, one guest copy each, byGuest built) stays under 120 bytes of
// heap per EIP (90 when written). It holds bindings as the IDs of
// interned names (8 bytes each, in eips and in byGuest); with the two
// strings a binding was, it took 182 bytes per EIP here (docs/scale.md,
// "The load's GC percent, a compact index, and a binary per role").
// Guest names repeat from host to host, as a region's do.
func TestIndexBytesPerEIP(t *testing.T) {
	const hosts, guests = 100, 1000
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// The objects first, so that only the index is counted.
	var eips []*model.EIP
	var copies []*model.GuestCopy
	for h := range hosts {
		host := fmt.Sprintf("host-%04d", h)
		under := netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})
		for g := range guests {
			i := h*guests + g
			name := fmt.Sprintf("vm-%04d", g)
			copies = append(copies, &model.GuestCopy{Host: host, Underlay: under,
				Guest: model.Guest{Name: name, Address: netip.AddrFrom4([4]byte{10, byte(g >> 8), byte(g), 1}), VSID: uint32(5000 + g)}})
			eips = append(eips, &model.EIP{Address: netip.AddrFrom4([4]byte{100, byte(64 + i>>16), byte(i >> 8), byte(i)}),
				Binding: &model.Binding{Host: host, Guest: name}})
		}
	}
	before := heap()
	x := newIndex()
	for _, c := range copies {
		x.put(model.KindGuestCopy, model.GuestCopyKey(c.Host, c.Guest.Name), c)
	}
	for _, e := range eips {
		x.put(model.KindEIP, e.Address.String(), e)
	}
	x.ensureByGuest()
	after := heap()
	n := hosts * guests
	if len(x.eips) != n || len(x.byGuest) != n {
		t.Fatalf("index holds %d EIPs and %d byGuest entries, want %d", len(x.eips), len(x.byGuest), n)
	}
	if w, ok := x.want(eips[n-1].Address.As4()); !ok || w.VSID != 5000+guests-1 {
		t.Fatalf("the last EIP's route %+v %v", w, ok)
	}
	per := float64(after-before) / float64(n)
	t.Logf("index: %.0f bytes of heap per EIP (%d EIPs, %d hosts)", per, n, hosts)
	if per > 120 {
		t.Errorf("index: %.0f bytes of heap per EIP, want at most 120", per)
	}
	runtime.KeepAlive(x)
	runtime.KeepAlive(eips)
	runtime.KeepAlive(copies)
}

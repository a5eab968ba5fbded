package model

import (
	"fmt"
	"net/netip"
	"testing"
)

// loadWorld is the control-plane benchmark's region (internal/bench:
// 1,000 hosts of 1,000 guests, one edge set, 1,000,000 bound EIPs), in
// the registry's dependency order.
func loadWorld() []Object {
	objs := []Object{&AZ{Name: "az1"}}
	for h := range 1000 {
		host := &Host{Name: fmt.Sprintf("h%d", h), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, byte(h >> 8), byte(h)})}
		for g := range 1000 {
			host.Guests = append(host.Guests, Guest{Name: fmt.Sprintf("g%d", g),
				Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(VSIDMin + g)})
		}
		objs = append(objs, host)
	}
	objs = append(objs, &EdgeSet{Name: "load", Prefixes: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")},
		Edges: []EdgeNode{{Name: "load-edge", Underlay: netip.MustParseAddr("198.19.255.1")}}})
	for i := range 1_000_000 {
		a := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)})
		objs = append(objs, &EIP{Address: a, Binding: &Binding{Host: fmt.Sprintf("h%d", i/1000), Guest: fmt.Sprintf("g%d", i%1000)}})
	}
	return objs
}

// BenchmarkLoadSet and BenchmarkLoadPut measure a full load of the
// million-EIP region into a State: Set (no checks: what the roles' load
// paths do, after DecodeStored's per-object Validate) against Put (the
// referential checks the API applies: Validate again, then the
// cross-object rules). The difference is what checking the cross-object
// rules on load would cost. Run with -benchtime 1x.
func BenchmarkLoadSet(b *testing.B) {
	objs := loadWorld()
	b.ResetTimer()
	for range b.N {
		s := NewState()
		for _, o := range objs {
			s.Set(o)
		}
	}
}

func BenchmarkLoadPut(b *testing.B) {
	objs := loadWorld()
	b.ResetTimer()
	for range b.N {
		s := NewState()
		for _, o := range objs {
			if _, err := s.Put(o); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkLoadValidate is DecodeStored's per-object Validate alone, for
// comparison (Put runs it again).
func BenchmarkLoadValidate(b *testing.B) {
	objs := loadWorld()
	b.ResetTimer()
	for range b.N {
		for _, o := range objs {
			if es := o.Validate(); len(es) > 0 {
				b.Fatal(es)
			}
		}
	}
}

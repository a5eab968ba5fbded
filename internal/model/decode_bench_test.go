package model

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
)

// benchHost is a host of n guests as the control benchmark's region has
// them (loadWorld); 1,000 guests are ~52 kB of JSON.
func benchHost(n int) *Host {
	h := &Host{Name: "h7", AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 0, 7})}
	for g := range n {
		h.Guests = append(h.Guests, Guest{Name: fmt.Sprintf("g%d", g),
			Address: netip.AddrFrom4([4]byte{198, 19, byte(g >> 8), byte(g)}), VSID: uint32(VSIDMin + g)})
	}
	return h
}

func benchEIP() *EIP {
	return &EIP{Address: netip.AddrFrom4([4]byte{100, 64, 3, 7}), Binding: &Binding{Host: "h7", Guest: "g7"}}
}

// benchService is an encap service of two listeners and two pools of 16
// backends, one with an HTTP health check.
func benchService() *Service {
	s := &Service{Name: "web", VIP: netip.MustParseAddr("198.51.100.20"), Mode: ModeEncap,
		Listeners: []Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "udp", Port: 53, Pool: "dns"}},
		Pools: []Pool{{Name: "web", Health: &HealthCheck{Type: "http", Path: "/healthz", Interval: Duration(2e9), Rise: 2, Fall: 3}},
			{Name: "dns"}}}
	for i := range 16 {
		s.Pools[0].Backends = append(s.Pools[0].Backends, Backend{Host: fmt.Sprintf("h%d", i), Guest: "g1", Port: 8080})
		s.Pools[1].Backends = append(s.Pools[1].Backends, Backend{Host: fmt.Sprintf("h%d", i), Guest: "g2", Weight: w(2)})
	}
	return s
}

func benchDecodeStored(b *testing.B, kind string, o Object) {
	data, err := json.Marshal(o) // what store.Encode writes
	if err != nil {
		b.Fatal(err)
	}
	if _, err := DecodeStored(kind, o.Key(), data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := DecodeStored(kind, o.Key(), data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeStoredHost1000Guests(b *testing.B) {
	benchDecodeStored(b, KindHost, benchHost(1000))
}

func BenchmarkDecodeStoredEIP(b *testing.B) { benchDecodeStored(b, KindEIP, benchEIP()) }

func BenchmarkDecodeStoredService(b *testing.B) { benchDecodeStored(b, KindService, benchService()) }

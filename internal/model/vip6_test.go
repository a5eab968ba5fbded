package model

import (
	"net/netip"
	"testing"
)

// web6 is an encap service with an IPv6 VIP in pop-a's IPv6 prefix
// (region6), its one backend h1/g1, the dual-stack guest.
func web6() *Service {
	return &Service{
		Name: "web6", VIP: addr("2001:db8:a::80"), Mode: ModeEncap,
		Listeners: []Listener{{Protocol: "tcp", Port: 443, Pool: "web"}},
		Pools:     []Pool{{Name: "web", Backends: []Backend{{Host: "h1", Guest: "g1", Port: 8443}}}},
	}
}

// toNAT6 makes s a nat service whose backends are IPv6 (2001:db8:be::n).
func toNAT6(s *Service) {
	toNAT(s)
	n := 0
	for i := range s.Pools {
		for j := range s.Pools[i].Backends {
			n++
			s.Pools[i].Backends[j].Address = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0xbe, 15: byte(n)})
		}
	}
}

// A service's VIP may be IPv6 in mode encap or nat (issue 21): the address
// rules of an IPv6 EIP. A nat backend's address is of its VIP's family
// (the edge translates IPv6 to IPv6), refused under its own field.
func TestValidateIPv6VIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		vip  string
		nat  bool
		want []string
	}{
		{"encap", "2001:db8:a::80", false, nil},
		{"nat, IPv4 backends", "2001:db8:a::80", true, []string{
			"pools[0].backends[0].address~198.19.201.1 is IPv4 and the VIP 2001:db8:a::80 IPv6: a nat backend's address is of its VIP's family"}},
		{"unique local", "fd00::80", false, []string{"vip~fd00::80 lies in fc00::/7"}},
		{"outside 2000::/3", "4000::80", false, []string{"vip~outside 2000::/3"}},
		{"reserved", "2001::80", false, []string{"vip~cannot be announced"}},
		{"link-local", "fe80::1", false, []string{"vip~not a global unicast address"}},
		{"mapped", "::ffff:198.51.100.1", false, []string{"vip~IPv4-mapped"}},
		{"multicast", "ff02::1", false, []string{"vip~not a global unicast address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := web6()
			v.VIP = addr(tc.vip)
			if tc.nat {
				toNAT(v)
			}
			checkErrors(t, v.Validate(), tc.want)
		})
	}
}

// An IPv6 VIP is checked against the state as an IPv4 one (a prefix of an
// edge set covers it, no EIP, one service per VIP), and every backend
// guest has an IPv6 address (address6) to translate it to; a guest keeps
// its address6 while it is a backend of an IPv6 VIP.
func TestIPv6VIPState(t *testing.T) {
	s := region6(t)
	if _, err := s.Put(&EIP{Address: addr("2001:db8:a::7")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(v *Service)
		field  string
		text   string
	}{
		{"ok", func(v *Service) {}, "", ""},
		{"outside every prefix", func(v *Service) { v.VIP = addr("2001:db8:b::80") }, "vip", "2001:db8:b::80 is not inside a prefix of any edge set"},
		{"an EIP", func(v *Service) { v.VIP = addr("2001:db8:a::7") }, "vip", "2001:db8:a::7 is an EIP; a VIP must not be one"},
		{"backend without address6", func(v *Service) {
			v.Pools[0].Backends = append(v.Pools[0].Backends, Backend{Host: "h1", Guest: "g2", Port: 8443})
		}, "pools[0].backends[1].guest", "guest h1/g2 has no IPv6 address (address6) to translate the IPv6 VIP 2001:db8:a::80 to"},
		{"nat", toNAT6, "", ""},
		{"nat, an IPv4 backend", func(v *Service) { toNAT(v) }, "pools[0].backends[0].address", "198.19.201.1 is IPv4 and the VIP 2001:db8:a::80 IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := web6()
			tc.change(v)
			undo, err := s.Put(v)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("a valid IPv6 VIP service refused: %v", err)
				}
				if n, ok := s.ServiceOfVIP(v.VIP); !ok || n != "web6" {
					t.Fatalf("ServiceOfVIP = %q %v", n, ok)
				}
				undo()
				return
			}
			wantErr(t, err, tc.field, tc.text)
			if _, ok := s.Services[v.Name]; ok {
				t.Fatalf("refused service stored")
			}
		})
	}

	if _, err := s.Put(web6()); err != nil {
		t.Fatal(err)
	}
	// One service per VIP; an EIP may not take it.
	other := web6()
	other.Name = "other"
	_, err := s.Put(other)
	wantErr(t, err, "vip", "2001:db8:a::80 is already the VIP of service web6")
	_, err = s.Put(&EIP{Address: addr("2001:db8:a::80")})
	wantErr(t, err, "address", "2001:db8:a::80 is the VIP of service web6")
	// h1/g1 keeps its address6 while it is a backend of web6.
	h := *s.Hosts["h1"]
	h.Guests = append([]Guest(nil), h.Guests...)
	h.Guests[0].Address6 = netip.Addr{}
	_, err = s.Put(&h)
	wantErr(t, err, "guests", `guest "g1" is a backend of service web6, whose IPv6 VIP is translated to its address6`)
	h.Guests[0].Address6 = addr("2001:db8:1::9") // changed, not removed: the agent follows
	if _, err := s.Put(&h); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindService, "web6"); err != nil {
		t.Fatal(err)
	}
	h = *s.Hosts["h1"]
	h.Guests = append([]Guest(nil), h.Guests...)
	h.Guests[0].Address6 = netip.Addr{}
	if _, err := s.Put(&h); err != nil {
		t.Fatalf("address6 of a guest no IPv6 VIP uses: %v", err)
	}
}

// An IPv6 VIP is pulled out (the service's set) and quarantined as an
// IPv6 EIP is: the set's BGP edges need their IPv6 next hop, and then
// the /128 is theirs to announce (a set announcing it keeps its
// nextHop6).
func TestIPv6VIPPullOutQuarantine(t *testing.T) {
	s := region6(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	nb := func(nh6 string) *NodeBGP {
		n := &NodeBGP{RouterID: addr("192.0.2.2"), NextHop: addr("192.0.2.2"), Peers: []BGPPeer{{Address: addr("192.0.2.1"), ASN: 64501}}}
		if nh6 != "" {
			n.NextHop6 = addr(nh6)
		}
		return n
	}
	set := func(name, role, nh6 string) *EdgeSet {
		return &EdgeSet{Name: name, Role: role, BGP: &SetBGP{ASN: 64500},
			Edges: []EdgeNode{{Name: "edge-" + name, Underlay: addr("198.18.0." + map[string]string{"hot": "9", "quar": "10"}[name]), BGP: nb(nh6)}}}
	}
	for _, o := range []Object{set("hot", RoleDedicated, ""), set("quar", RoleQuarantine, "")} {
		if err := put(o); err != nil {
			t.Fatal(err)
		}
	}
	v := web6()
	v.Set = "hot"
	wantErr(t, put(v), "set", `edge edge-hot of set "hot" has no bgp.nextHop6: the set's edges announce 2001:db8:a::80's /128`)
	if err := put(set("hot", RoleDedicated, "2001:db8:ff::9")); err != nil {
		t.Fatal(err)
	}
	if err := put(v); err != nil {
		t.Fatalf("an IPv6 VIP pulled out into a set with IPv6 next hops: %v", err)
	}
	wantErr(t, put(set("hot", RoleDedicated, "")), "edges[0].bgp.nextHop6", "announces the IPv6 address 2001:db8:a::80")
	wantErr(t, put(&Quarantine{Address: v.VIP}), "address", `edge edge-quar of the quarantine set "quar" has no bgp.nextHop6`)
	if err := put(set("quar", RoleQuarantine, "2001:db8:ff::10")); err != nil {
		t.Fatal(err)
	}
	if err := put(&Quarantine{Address: v.VIP}); err != nil {
		t.Fatalf("quarantine of an IPv6 VIP: %v", err)
	}
}

// An IPv6 nat VIP's backends: IPv6 addresses the edge routes to (unique
// local or global unicast outside the reserved blocks), each refused under
// its own field; an IPv4 VIP's nat backend may not be IPv6.
func TestValidateNAT6Backends(t *testing.T) {
	for _, tc := range []struct {
		name string
		vip  string
		be   string
		want []string
	}{
		{"global", "2001:db8:a::80", "2001:db8:be::1", nil},
		{"unique local", "2001:db8:a::80", "fd12:3456::1", nil},
		{"link-local", "2001:db8:a::80", "fe80::1", []string{"pools[0].backends[0].address~fe80::1"}},
		{"loopback", "2001:db8:a::80", "::1", []string{"pools[0].backends[0].address~::1"}},
		{"multicast", "2001:db8:a::80", "ff02::1", []string{"pools[0].backends[0].address~ff02::1"}},
		{"IPv4-mapped", "2001:db8:a::80", "::ffff:198.51.100.1", []string{"pools[0].backends[0].address"}},
		{"IPv4 backend of an IPv6 VIP", "2001:db8:a::80", "198.51.100.1", []string{
			"pools[0].backends[0].address~198.51.100.1 is IPv4 and the VIP 2001:db8:a::80 IPv6: a nat backend's address is of its VIP's family"}},
		{"IPv6 backend of an IPv4 VIP", "198.51.100.20", "2001:db8:be::1", []string{
			"pools[0].backends[0].address~2001:db8:be::1 is IPv6 and the VIP 198.51.100.20 IPv4: a nat backend's address is of its VIP's family"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := web6()
			toNAT(v)
			v.VIP = addr(tc.vip)
			v.Pools[0].Backends[0].Address = netip.MustParseAddr(tc.be)
			checkErrors(t, v.Validate(), tc.want)
		})
	}
}

// An IPv6 nat backend's key writes its address in brackets before a port
// (2001:db8:be::1:8080 is another address, with no port): the keys of
// the two backends differ, and a pool may hold both.
func TestBackendKey6(t *testing.T) {
	for _, tc := range []struct {
		b    Backend
		want string
	}{
		{Backend{Address: netip.MustParseAddr("2001:db8:be::1"), Port: 8080}, "[2001:db8:be::1]:8080"},
		{Backend{Address: netip.MustParseAddr("2001:db8:be::1:8080")}, "2001:db8:be::1:8080"},
		{Backend{Address: netip.MustParseAddr("198.19.1.1"), Port: 8080}, "198.19.1.1:8080"},
		{Backend{Host: "h1", Guest: "g1", Port: 8443}, "h1/g1:8443"},
	} {
		if got := tc.b.Key(); got != tc.want {
			t.Errorf("Key of %+v = %q, want %q", tc.b, got, tc.want)
		}
	}
	v := web6()
	toNAT6(v)
	v.Pools[0].Backends = []Backend{{Address: netip.MustParseAddr("2001:db8:be::1"), Port: 8080},
		{Address: netip.MustParseAddr("2001:db8:be::1:8080")}}
	checkErrors(t, v.Validate(), nil)
}

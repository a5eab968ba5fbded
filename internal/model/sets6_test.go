package model

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// An edge set's IPv6 prefixes: every reserved block refused with its
// reason, the bounds, mapped and unmasked prefixes; documentation and
// benchmarking space allowed, as in IPv4.
func TestValidateEdgeSetIPv6(t *testing.T) {
	set := func(ps ...string) EdgeSet {
		s := EdgeSet{Name: "pop-a"}
		for _, p := range ps {
			s.Prefixes = append(s.Prefixes, prefix(p))
		}
		return s
	}
	for _, tc := range []struct {
		name string
		s    EdgeSet
		want []string
	}{
		{"documentation", set("2001:db8::/32"), nil},
		{"documentation /48", set("2001:db8:1::/48"), nil},
		{"documentation /64", set("2001:db8:1:2::/64"), nil},
		{"documentation RFC 9637", set("3fff::/20"), nil},
		{"benchmarking inside 2001::/23", set("2001:2::/48"), nil},
		{"global unicast", set("2a00:1450::/32"), nil},
		{"both families", set("198.51.100.0/24", "2001:db8::/32"), nil},
		{"unspecified", set("::/64"), []string{"prefixes[0]~unspecified address, RFC 4291"}},
		{"NAT64", set("64:ff9b::/64"), []string{"prefixes[0]~NAT64 well-known prefix), RFC 6052"}},
		{"local-use NAT64", set("64:ff9b:1::/48"), []string{"prefixes[0]~local-use IPv4/IPv6 translation, RFC 8215"}},
		{"discard-only", set("100::/64"), []string{"prefixes[0]~discard-only, RFC 6666"}},
		{"IETF protocol assignments (Teredo)", set("2001::/32"), []string{"prefixes[0]~IETF protocol assignments"}},
		{"covering benchmarking", set("2001::/16"), []string{"prefixes[0]~IETF protocol assignments"}},
		{"6to4", set("2002::/16"), []string{"prefixes[0]~6to4, RFC 3056"}},
		{"ULA", set("fd00:1::/48"), []string{"prefixes[0]~unique local addresses, RFC 4193"}},
		{"link-local", set("fe80::/64"), []string{"prefixes[0]~link-local unicast, RFC 4291"}},
		{"multicast", set("ff02::/16"), []string{"prefixes[0]~multicast, RFC 4291"}},
		{"outside global unicast", set("4000::/16"), []string{"prefixes[0]~outside 2000::/3"}},
		{"site-local (deprecated)", set("fec0::/16"), []string{"prefixes[0]~outside 2000::/3"}},
		{"too short", set("2000::/12"), []string{"prefixes[0]~shorter than /16"}},
		{"too long", set("2001:db8::/96"), []string{"prefixes[0]~longer than /64"}},
		{"host route", set("2001:db8::7/128"), []string{"prefixes[0]~longer than /64"}},
		{"host bits", set("2001:db8::1/48"), []string{"prefixes[0]~did you mean 2001:db8::/48"}},
		{"IPv4-mapped", set("::ffff:198.51.100.0/120"), []string{"prefixes[0]~IPv4-mapped"}},
		{"dedicated with an IPv6 prefix", EdgeSet{Name: "hot", Role: RoleDedicated, Prefixes: []netip.Prefix{prefix("2001:db8::/32")}}, []string{"prefixes~no prefixes"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.s.Validate(), tc.want) })
	}
	// The table is reachable: every entry refuses a prefix of the
	// allowed lengths that names it.
	for _, r := range ReservedRanges6 {
		p := netip.PrefixFrom(r.Prefix.Addr(), max(r.Prefix.Bits(), MinPrefix6Bits)).Masked()
		if p.Bits() > MaxPrefix6Bits {
			p = netip.PrefixFrom(p.Addr(), MaxPrefix6Bits).Masked()
		}
		got, ok := ReservedRange(p)
		if !ok || got.Prefix.Addr().Is4() {
			t.Errorf("%v (for %v): not refused", p, r.Prefix)
			continue
		}
		s := set(p.String())
		if es := s.Validate(); len(es) != 1 || !strings.Contains(es[0].Msg, got.Name) {
			t.Errorf("%v: %v, want one error naming %q", p, es, got.Name)
		}
	}
}

// An edge of a set with IPv6 prefixes needs an IPv6 next hop, a global
// one.
func TestNextHop6(t *testing.T) {
	peer := BGPPeer{Address: addr("192.0.2.1"), ASN: 64501}
	node := func(nh6 string) *NodeBGP {
		n := &NodeBGP{RouterID: addr("192.0.2.2"), NextHop: addr("192.0.2.2"), Peers: []BGPPeer{peer}}
		if nh6 != "" {
			n.NextHop6 = netip.MustParseAddr(nh6)
		}
		return n
	}
	set := func(nh6 string, ps ...string) EdgeSet {
		s := EdgeSet{Name: "pop-a", BGP: &SetBGP{ASN: 64500}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), BGP: node(nh6)}}}
		for _, p := range ps {
			s.Prefixes = append(s.Prefixes, prefix(p))
		}
		return s
	}
	for _, tc := range []struct {
		name string
		s    EdgeSet
		want []string
	}{
		{"IPv4 only, none", set("", "198.51.100.0/24"), nil},
		{"IPv4 only, one anyway", set("2001:db8:ff::2", "198.51.100.0/24"), nil},
		{"IPv6 prefix", set("2001:db8:ff::2", "198.51.100.0/24", "2001:db8::/48"), nil},
		{"IPv6 prefix, no next hop", set("", "198.51.100.0/24", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~required: the set owns IPv6 prefixes (prefixes[1] 2001:db8::/48)"}},
		{"IPv4 next hop", set("192.0.2.9", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~an IPv6 address is required"}},
		{"mapped", set("::ffff:192.0.2.9", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~IPv4-mapped"}},
		{"link-local", set("fe80::1", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~not a global unicast"}},
		{"zone", set("2001:db8:ff::2%eth0", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~zone"}},
		{"multicast", set("ff02::2", "2001:db8::/48"), []string{"edges[0].bgp.nextHop6~not a global unicast"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.s.Validate(), tc.want) })
	}
	// A peer over IPv6: a global address.
	for _, tc := range []struct {
		name string
		peer string
		want []string
	}{
		{"IPv6 peer", "2001:db8:ff::1", nil},
		{"link-local peer", "fe80::1", []string{"edges[0].bgp.peers[0].address~not a global unicast"}},
		{"mapped peer", "::ffff:192.0.2.1", []string{"edges[0].bgp.peers[0].address~IPv4-mapped"}},
	} {
		s := set("2001:db8:ff::2", "2001:db8::/48")
		s.Edges[0].BGP.Peers[0].Address = addr(tc.peer)
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, s.Validate(), tc.want) })
	}
}

// Two sets' IPv6 prefixes may not overlap, nor contain another edge's
// IPv6 next hop; IPv4 and IPv6 prefixes never clash.
func TestEdgeSetOverlap6(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	nb := func(nh6 string) *NodeBGP {
		return &NodeBGP{RouterID: addr("192.0.2.2"), NextHop: addr("192.0.2.2"), NextHop6: addr(nh6), Peers: []BGPPeer{{Address: addr("192.0.2.1"), ASN: 64501}}}
	}
	a := &EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24"), prefix("2001:db8:a::/48")}, BGP: &SetBGP{ASN: 64500},
		Edges: []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1"), BGP: nb("2001:db8:ff::2")}}}
	if err := put(a); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8:a::/48")}}), "prefixes[0]", `2001:db8:a::/48 is already announced by set "pop-a"`)
	wantErr(t, put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8::/32")}}), "prefixes[0]", `overlaps 2001:db8:a::/48 announced by set "pop-a"`)
	wantErr(t, put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8:a:1::/64")}}), "prefixes[0]", `overlaps 2001:db8:a::/48`)
	// The edges' own IPv6 next hop is not announced, by either side.
	wantErr(t, put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8:ff::/48")}}), "prefixes[0]", "the BGP IPv6 next hop of edge pop-a/edge-a1")
	wantErr(t, put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8:b::/48")}, BGP: &SetBGP{ASN: 64500},
		Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.18.0.2"), BGP: nb("2001:db8:a::9")}}}), "edges[0].bgp.nextHop6", `lies in 2001:db8:a::/48 announced by set "pop-a"`)
	// Disjoint: fine.
	if err := put(&EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("2001:db8:b::/48")}}); err != nil {
		t.Fatal(err)
	}
	// An IPv6 EIP in the set's IPv6 prefix is taken; a quarantine of an
	// IPv6 address names an IPv6 EIP (VIPs are IPv4) and needs the
	// quarantine set.
	if err := put(&EIP{Address: addr("2001:db8:a::7")}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(&Quarantine{Address: addr("2001:db8:a::8")}), "address", "2001:db8:a::8 is neither an EIP nor a VIP")
	wantErr(t, put(&Quarantine{Address: addr("2001:db8:a::7")}), "address", "the region has no quarantine set")
}

// A document stored before IPv6 (no nextHop6, IPv4 prefixes) loads, and
// an IPv4-only set writes no nextHop6 key: stored documents are
// unchanged.
func TestEdgeSetDocumentCompat(t *testing.T) {
	old := `{"name":"pop-a","prefixes":["198.51.100.0/24"],"edges":[{"name":"edge-a1","underlay":"198.18.0.1",` +
		`"bgp":{"routerID":"192.0.2.2","nextHop":"192.0.2.2","peers":[{"address":"192.0.2.1","asn":64501}]}}],"bgp":{"asn":64500}}`
	o, err := Decode(KindEdgeSet, []byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if es := o.Validate(); len(es) > 0 {
		t.Fatal(es)
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != old {
		t.Errorf("re-encoded\n%s\nwant\n%s", b, old)
	}
	// Dual-stack: both families in the one prefixes list.
	dual := strings.Replace(old, `"nextHop":"192.0.2.2"`, `"nextHop":"192.0.2.2","nextHop6":"2001:db8:ff::2"`, 1)
	dual = strings.Replace(dual, `["198.51.100.0/24"]`, `["198.51.100.0/24","2001:db8::/48"]`, 1)
	o, err = Decode(KindEdgeSet, []byte(dual))
	if err != nil {
		t.Fatal(err)
	}
	if es := o.Validate(); len(es) > 0 {
		t.Fatal(es)
	}
	if b, _ := json.Marshal(o); string(b) != dual {
		t.Errorf("re-encoded\n%s\nwant\n%s", b, dual)
	}
	// A zone is refused where it is written.
	zoned := strings.Replace(old, `["198.51.100.0/24"]`, `["198.51.100.0/24","fe80::%eth0/64"]`, 1)
	if _, err := Decode(KindEdgeSet, []byte(zoned)); err == nil || !strings.Contains(err.Error(), "prefixes[1]") || !strings.Contains(err.Error(), "zone") {
		t.Errorf("zoned prefix: %v", err)
	}
}

// The rule held for IPv6 EIPs: a dedicated or quarantine set announces an IPv6
// address's /128 only if each of its BGP edges has an IPv6 next hop.
func TestIPv6HostRoutesNeedNextHop6(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	a := *s.EdgeSets["pop-a"]
	a.Prefixes = []netip.Prefix{prefix("198.51.100.0/24"), prefix("2001:db8:a::/48")}
	if err := put(&a); err != nil {
		t.Fatal(err)
	}
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
	if err := put(set("hot", RoleDedicated, "")); err != nil {
		t.Fatal(err)
	}
	if err := put(set("quar", RoleQuarantine, "")); err != nil {
		t.Fatal(err)
	}
	v6 := &EIP{Address: addr("2001:db8:a::7"), Set: "hot"}
	checkErrors(t, s.checkEIP(v6, nil, false), []string{`set~edge edge-hot of set "hot" has no bgp.nextHop6`})
	checkErrors(t, s.checkEIP(&EIP{Address: addr("198.51.100.9"), Set: "hot"}, nil, false), nil) // IPv4: no need
	s.EIPs[v6.Key()] = v6
	checkErrors(t, s.checkQuarantine(&Quarantine{Address: v6.Address}, nil, false), []string{`address~edge edge-quar of the quarantine set "quar" has no bgp.nextHop6`})

	// With the next hops, both are fine; taking one away is refused while
	// the set announces the address.
	if err := put(set("hot", RoleDedicated, "2001:db8:ff::9")); err != nil {
		t.Fatal(err)
	}
	if err := put(set("quar", RoleQuarantine, "2001:db8:ff::10")); err != nil {
		t.Fatal(err)
	}
	checkErrors(t, s.checkEIP(v6, nil, false), nil)
	checkErrors(t, s.checkQuarantine(&Quarantine{Address: v6.Address}, nil, false), nil)
	wantErr(t, put(set("hot", RoleDedicated, "")), "edges[0].bgp.nextHop6", "announces the IPv6 address 2001:db8:a::7")
	s.Quarantines[v6.Key()] = &Quarantine{Address: v6.Address}
	wantErr(t, put(set("quar", RoleQuarantine, "")), "edges[0].bgp.nextHop6", "announces the IPv6 address 2001:db8:a::7")
}

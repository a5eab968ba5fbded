package model

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// A guest's private IPv6 address (Guest.Address6): a unique local
// address of fd00::/8 or a global unicast one, unique on its host.
func TestValidateGuestAddress6(t *testing.T) {
	host := func(a6 ...string) Host {
		h := Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1")}
		for i, a := range a6 {
			g := Guest{Name: "g" + string(rune('1'+i)), Address: netip.AddrFrom4([4]byte{198, 19, 1, byte(1 + i)}), VSID: 5001}
			if a != "" {
				g.Address6 = netip.MustParseAddr(a)
			}
			h.Guests = append(h.Guests, g)
		}
		return h
	}
	for _, tc := range []struct {
		name string
		h    Host
		want []string
	}{
		{"none", host(""), nil},
		{"documentation", host("2001:db8:1::10"), nil},
		{"unique local fd00::/8", host("fd00:1::10"), nil},
		{"two guests", host("2001:db8:1::10", "2001:db8:1::11"), nil},
		{"one of two", host("", "2001:db8:1::11"), nil},
		{"twice", host("2001:db8:1::10", "2001:db8:1::10"), []string{"guests[1].address6~2001:db8:1::10 is used by another guest on this host"}},
		{"fc00::/8", host("fc00::10"), []string{"guests[0].address6~neither a unique local address (fd00::/8, RFC 4193) nor a global unicast one (2000::/3)"}},
		{"outside 2000::/3", host("4000::10"), []string{"guests[0].address6~neither a unique local address"}},
		{"6to4", host("2002:c633:6401::10"), []string{"guests[0].address6~lies in 2002::/16 (6to4, RFC 3056)"}},
		{"link-local", host("fe80::10"), []string{"guests[0].address6~not a global unicast address"}},
		{"multicast", host("ff02::1"), []string{"guests[0].address6~not a global unicast address"}},
		{"loopback", host("::1"), []string{"guests[0].address6~not a global unicast address"}},
		{"unspecified", host("::"), []string{"guests[0].address6~not a global unicast address"}},
		{"IPv4-mapped", host("::ffff:198.19.1.1"), []string{"guests[0].address6~IPv4-mapped"}},
		{"zoned", host("2001:db8:1::10%eth0"), []string{"guests[0].address6~has a zone"}},
		{"IPv4", host("198.19.1.9"), []string{"guests[0].address6~is an IPv4 address: an IPv6 address is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, tc.h.Validate(), tc.want)
			// A guest copy says the same of its guest.
			if len(tc.h.Guests) == 1 {
				var want []string
				for _, w := range tc.want {
					want = append(want, strings.Replace(w, "guests[0].", "guest.", 1))
				}
				checkErrors(t, NewGuestCopy(&tc.h, tc.h.Guests[0]).Validate(), want)
			}
		})
	}
}

// region6 is region with an IPv6 prefix on pop-a and h1/g1 dual-stack.
func region6(t *testing.T) *State {
	t.Helper()
	s := region(t)
	a := *s.EdgeSets["pop-a"]
	a.Prefixes = []netip.Prefix{prefix("198.51.100.0/24"), prefix("2001:db8:a::/48")}
	h := *s.Hosts["h1"]
	h.Guests = append([]Guest(nil), h.Guests...)
	h.Guests[0].Address6 = addr("2001:db8:1::1")
	for _, o := range []Object{&a, &h} {
		if _, err := s.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// An IPv6 EIP is checked in full against the state and written when it
// passes (issue 21: the model takes IPv6 EIPs).
func TestIPv6EIPState(t *testing.T) {
	s := region6(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	v6 := func(a string, host, guest string) *EIP {
		e := &EIP{Address: addr(a)}
		if host != "" {
			e.Binding = &Binding{Host: host, Guest: guest}
		}
		return e
	}
	for _, tc := range []struct {
		name string
		e    *EIP
		want []string // checkEIP's errors: the state's rules
	}{
		{"unbound", v6("2001:db8:a::7", "", ""), nil},
		{"bound", v6("2001:db8:a::7", "h1", "g1"), nil},
		{"outside every prefix", v6("2001:db8:b::7", "", ""), []string{"address~2001:db8:b::7 is not inside a prefix of any edge set"}},
		{"guest without address6", v6("2001:db8:a::7", "h1", "g2"), []string{`binding.guest~guest h1/g2 has no IPv6 address (address6) to translate the IPv6 EIP to: set the guest's address6 in host h1`}},
		{"no such guest", v6("2001:db8:a::7", "h1", "g9"), []string{`binding.guest~host "h1" has no guest "g9"`}},
		{"pulled into a prefix set", &EIP{Address: addr("2001:db8:a::7"), Set: "pop-a"}, []string{`set~edge set "pop-a" is not a dedicated set`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, s.checkEIP(tc.e, nil, false), tc.want)
			// A write says the same, or stores the EIP; the test's
			// writes are undone.
			undo, err := s.Put(tc.e)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("a valid IPv6 EIP refused: %v", err)
				}
				if got := s.EIPs[tc.e.Key()]; got != tc.e {
					t.Fatalf("stored %+v", got)
				}
				undo()
				return
			}
			f, text, _ := strings.Cut(tc.want[0], "~")
			wantErr(t, err, f, text)
			if _, ok := s.EIPs[tc.e.Key()]; ok {
				t.Fatalf("refused EIP %s stored", tc.e.Key())
			}
		})
	}

	// One EIP of each family per guest: an IPv6 EIP and an IPv4 one
	// share h1/g1; a second IPv6 EIP is refused for its own reason.
	if err := put(v6("2001:db8:a::7", "h1", "g1")); err != nil {
		t.Fatal(err)
	}
	if v4, v6 := s.BoundEIPs("h1", "g1"); v4 != "198.51.100.7" || v6 != "2001:db8:a::7" {
		t.Fatalf("BoundEIPs = %q, %q", v4, v6)
	}
	if e, ok := s.BoundEIP("h1", "g1"); !ok || e != "198.51.100.7" {
		t.Fatalf("BoundEIP = %q %v, want the IPv4 one", e, ok)
	}
	wantErr(t, put(v6("2001:db8:a::8", "h1", "g1")), "binding.guest", "guest h1/g1 is already bound to EIP 2001:db8:a::7 (a guest holds one EIP of each family, IPv4 and IPv6)")
	// Moved (eip bind) to g2, which has no IPv6 address: refused.
	wantErr(t, put(v6("2001:db8:a::7", "h1", "g2")), "binding.guest", "guest h1/g2 has no IPv6 address (address6)")
	checkErrors(t, s.checkEIP(v6("2001:db8:a::7", "h1", "g1"), nil, false), nil) // itself
	// An IPv4 EIP moved to the guest holding an IPv6 one: only the IPv4
	// binding counts.
	if err := put(&EIP{Address: addr("198.51.100.8"), Binding: &Binding{Host: "h1", Guest: "g2"}}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(&EIP{Address: addr("198.51.100.8"), Binding: &Binding{Host: "h1", Guest: "g1"}}), "binding.guest", "already bound to EIP 198.51.100.7")
	// A clone keeps the IPv6 bindings.
	if _, v6 := s.Clone().BoundEIPs("h1", "g1"); v6 != "2001:db8:a::7" {
		t.Fatalf("clone lost the IPv6 binding: %q", v6)
	}

	// The guest keeps its address6 while the IPv6 EIP is bound, and
	// stays while either EIP is bound.
	h := *s.Hosts["h1"]
	h.Guests = append([]Guest(nil), h.Guests...)
	h.Guests[0].Address6 = netip.Addr{}
	wantErr(t, put(&h), "guests", `guest "g1" is bound to the IPv6 EIP 2001:db8:a::7, translated to its address6: unbind it before removing the guest's address6`)
	h.Guests[0].Address6 = addr("2001:db8:1::9") // a new one: the agent follows
	if err := put(&Host{Name: h.Name, AZ: h.AZ, Underlay: h.Underlay, Guests: append([]Guest(nil), h.Guests...)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(&EIP{Address: addr("198.51.100.7")}); err != nil { // unbind the IPv4 one
		t.Fatal(err)
	}
	if e, ok := s.BoundEIP("h1", "g1"); !ok || e != "2001:db8:a::7" {
		t.Fatalf("BoundEIP = %q %v, want the IPv6 one", e, ok)
	}
	h = *s.Hosts["h1"]
	h.Guests = h.Guests[1:]
	wantErr(t, put(&h), "guests", `guest "g1" is bound to EIP 2001:db8:a::7: unbind it before removing the guest`)
	if _, err := s.Delete(KindEIP, "2001:db8:a::7"); err != nil {
		t.Fatal(err)
	}
	if _, v6 := s.BoundEIPs("h1", "g1"); v6 != "" {
		t.Fatalf("deleted IPv6 EIP still bound: %q", v6)
	}
	if err := put(&h); err != nil {
		t.Fatal(err)
	}
}

// An IPv6 VIP is taken in encap mode, refused in nat mode with its
// reason.
func TestIPv6VIPRefused(t *testing.T) {
	var es Errors
	checkVIP(&es, "vip", addr("2001:db8:a::80"), ModeNAT)
	checkErrors(t, es, []string{"vip~2001:db8:a::80: IPv6 nat VIPs are not supported yet"})
	es = Errors{}
	checkVIP(&es, "vip", addr("2001:db8:a::80"), ModeEncap)
	checkErrors(t, es, nil)
	es = Errors{}
	checkVIP(&es, "vip", addr("fe80::1"), ModeEncap)
	if len(es) == 0 {
		t.Fatal("a link-local IPv6 VIP was taken")
	}
}

// Documents stored before Address6 load and encode byte for byte (no
// address6 key); a dual-stack guest's does too, through both the
// canonical and the full decoding.
func TestGuestAddress6DocumentCompat(t *testing.T) {
	old := `{"name":"h1","az":"az1","underlay":"198.18.1.1","guests":[{"name":"g1","address":"198.19.1.1","vsid":5001}]}`
	dual := `{"name":"h1","az":"az1","underlay":"198.18.1.1","guests":[{"name":"g1","address":"198.19.1.1","address6":"2001:db8:1::1","vsid":5001},{"name":"g2","address":"198.19.1.2","vsid":5001}]}`
	for _, doc := range []string{old, dual} {
		o, err := DecodeStored(KindHost, "h1", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(o); string(b) != doc {
			t.Errorf("stored host re-encoded\n%s\nwant\n%s", b, doc)
		}
		o, err = Decode(KindHost, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(o); string(b) != doc {
			t.Errorf("decoded host re-encoded\n%s\nwant\n%s", b, doc)
		}
	}
	o, _ := Decode(KindHost, []byte(dual))
	if g := o.(*Host).Guests; g[0].Address6 != addr("2001:db8:1::1") || g[1].Address6.IsValid() {
		t.Fatalf("guests %+v", g)
	}
	// A guest copy of an old guest has no address6 key either.
	c := NewGuestCopy(o.(*Host), o.(*Host).Guests[1])
	if b, _ := json.Marshal(c); strings.Contains(string(b), "address6") {
		t.Errorf("guest copy %s", b)
	}
	// An EIP document is unchanged, an IPv6 one stored (by a later
	// controller) loads.
	for _, doc := range []string{
		`{"address":"198.51.100.7","binding":{"host":"h1","guest":"g1"}}`,
		`{"address":"2001:db8:a::7","binding":{"host":"h1","guest":"g1"},"set":"hot"}`,
	} {
		o, err := DecodeStored(KindEIP, strings.Split(strings.Split(doc, `"address":"`)[1], `"`)[0], []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(o); string(b) != doc {
			t.Errorf("EIP re-encoded\n%s\nwant\n%s", b, doc)
		}
	}
	// The place of a bad address6 is named.
	bad := strings.Replace(dual, `"2001:db8:1::1"`, `"2001:db8:1::zz"`, 1)
	if _, err := Decode(KindHost, []byte(bad)); err == nil || !strings.Contains(err.Error(), "guests[0].address6") {
		t.Errorf("bad address6: %v", err)
	}
}

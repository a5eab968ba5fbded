package model

import (
	"net/netip"
	"testing"
)

// The IPv6 underlay (issue 21): a host's underlay may be IPv6, and then
// every edge (any set's addresses may be bound to the host's guests)
// needs its underlay6; underlay addresses are unique across families and
// lie in no set's prefix, as IPv4 ones.
func TestUl6State(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	h3 := &Host{Name: "h3", AZ: "az1", Underlay: addr("2001:db8:f0::21"), Guests: []Guest{{Name: "g1", Address: addr("198.19.3.1"), VSID: 5003}}}

	// pop-a's edge has no underlay6: the IPv6 host is refused, naming it.
	wantErr(t, put(h3), "underlay", "edge pop-a/edge-a1 has none")
	if _, ok := s.Hosts["h3"]; ok {
		t.Fatal("refused host stored")
	}

	// With the edge's underlay6, the host is taken.
	a := *s.EdgeSets["pop-a"]
	a.Edges = []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1"), Underlay6: addr("2001:db8:ff::1")}}
	if err := put(&a); err != nil {
		t.Fatal(err)
	}
	if err := put(h3); err != nil {
		t.Fatalf("IPv6 host refused: %v", err)
	}

	// Now every edge needs its underlay6: a new set without one, and
	// pop-a dropping its edge's, are refused.
	b := &EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{prefix("203.0.113.0/24")}, Edges: []EdgeNode{{Name: "edge-b1", Underlay: addr("198.18.0.2")}}}
	wantErr(t, put(b), "edges[0].underlay6", "host h3 has an IPv6 underlay address")
	a2 := a
	a2.Edges = []EdgeNode{{Name: "edge-a1", Underlay: addr("198.18.0.1")}}
	wantErr(t, put(&a2), "edges[0].underlay6", "required: host h3")

	// Uniqueness across hosts and edges, both families.
	b.Edges[0].Underlay6 = addr("2001:db8:f0::21") // h3's
	wantErr(t, put(b), "edges[0].underlay6", "already the underlay address of host h3")
	b.Edges[0].Underlay6 = addr("2001:db8:ff::1") // edge-a1's
	wantErr(t, put(b), "edges[0].underlay6", "already the underlay address of edge pop-a/edge-a1")
	h4 := &Host{Name: "h4", AZ: "az2", Underlay: addr("2001:db8:ff::1")}
	wantErr(t, put(h4), "underlay", "already the underlay address of edge pop-a/edge-a1")
	b.Edges[0].Underlay6 = addr("2001:db8:ff::2")
	if err := put(b); err != nil {
		t.Fatalf("set with an underlay6: %v", err)
	}

	// A set prefix may not hold an underlay address, nor an underlay
	// address lie in a set's prefix, IPv6 as IPv4.
	c := &EdgeSet{Name: "pop-c", Prefixes: []netip.Prefix{prefix("2001:db8:ff::/48")}}
	wantErr(t, put(c), "prefixes[0]", "the IPv6 underlay address of edge")
	c.Prefixes = []netip.Prefix{prefix("2001:db8:f0::/48")}
	wantErr(t, put(c), "prefixes[0]", "the underlay address of host h3")
	c.Prefixes = []netip.Prefix{prefix("2001:db8:c::/48")}
	if err := put(c); err != nil {
		t.Fatal(err)
	}
	h5 := &Host{Name: "h5", AZ: "az2", Underlay: addr("2001:db8:c::5")}
	wantErr(t, put(h5), "underlay", "lies in 2001:db8:c::/48 announced by set \"pop-c\"")
	d := &EdgeSet{Name: "pop-d", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}, Edges: []EdgeNode{{Name: "edge-d1", Underlay: addr("198.18.0.4"), Underlay6: addr("2001:db8:c::4")}}}
	wantErr(t, put(d), "edges[0].underlay6", "announced by set \"pop-c\"")

	// Once no host is of the IPv6 underlay, underlay6 is optional again.
	if _, err := s.Delete(KindHost, "h3"); err != nil {
		t.Fatal(err)
	}
	if err := put(&a2); err != nil {
		t.Fatalf("underlay6 still required with no IPv6 host: %v", err)
	}

	// The index follows: edge-a1's old underlay6 is free again.
	h6 := &Host{Name: "h6", AZ: "az1", Underlay: addr("2001:db8:ff::1")}
	wantErr(t, put(h6), "underlay", "edge pop-a/edge-a1 has none") // the rule, not the index
}

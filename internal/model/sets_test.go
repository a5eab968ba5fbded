package model

import (
	"net/netip"
	"strings"
	"testing"
)

func TestEdgeSetRoleValidation(t *testing.T) {
	bgp := &SetBGP{ASN: 64500, HoldTime: 3, Keepalive: 1}
	node := func(peers ...BGPPeer) *NodeBGP {
		return &NodeBGP{RouterID: addr("198.18.0.1"), NextHop: addr("198.18.100.1"), Peers: peers}
	}
	peer := BGPPeer{Address: addr("198.18.100.0"), ASN: 64501, Password: "s3cret"}
	for _, c := range []struct {
		name string
		set  EdgeSet
		want []string
	}{
		{"prefix set", EdgeSet{Name: "a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}}, nil},
		{"prefix set without prefixes", EdgeSet{Name: "a"}, []string{"prefixes~at least one"}},
		{"dedicated", EdgeSet{Name: "hot", Role: RoleDedicated}, nil},
		{"dedicated with prefixes", EdgeSet{Name: "hot", Role: RoleDedicated, Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}}, []string{"prefixes~no prefixes"}},
		{"unknown role", EdgeSet{Name: "x", Role: "backup"}, []string{"role~not a set role"}},
		{"bgp", EdgeSet{Name: "a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, BGP: bgp,
			Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), BGP: node(peer)}}}, nil},
		{"node bgp without set bgp", EdgeSet{Name: "a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")},
			Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), BGP: node(peer)}}}, []string{"edges[0].bgp~set bgp.asn"}},
		{"bad bgp", EdgeSet{Name: "a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, BGP: &SetBGP{ASN: 23456, HoldTime: 2, Keepalive: 9},
			Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), BGP: &NodeBGP{NextHop: addr("198.18.100.1"), Peers: []BGPPeer{
				peer, peer, {Address: addr("198.18.100.2"), ASN: 64501, Password: strings.Repeat("x", 81)}, {Address: addr("198.18.100.3"), ASN: 1, Password: "a\nb"}}}}}},
			[]string{"edges[0].bgp.routerID", "edges[0].bgp.peers[1].address~twice", "edges[0].bgp.peers[2].password~80", "edges[0].bgp.peers[3].password~control",
				"bgp.asn~AS_TRANS", "bgp.holdTime~at least 3", "bgp.keepalive~shorter"}},
	} {
		t.Run(c.name, func(t *testing.T) { checkErrors(t, c.set.Validate(), c.want) })
	}
	big := EdgeSet{Name: "big", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}}
	for i := 0; i <= MaxSetEdges; i++ {
		big.Edges = append(big.Edges, EdgeNode{Name: "e" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Underlay: netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)})})
	}
	checkErrors(t, big.Validate(), []string{"edges~at most 32"})
}

func TestPullOutAndQuarantine(t *testing.T) {
	s := region(t)
	put := func(o Object) error { _, err := s.Put(o); return err }
	// Pull-out needs a dedicated set.
	wantErr(t, put(&EIP{Address: addr("198.51.100.8"), Set: "hot"}), "set", "does not exist")
	wantErr(t, put(&EIP{Address: addr("198.51.100.8"), Set: "pop-a"}), "set", "not a dedicated set")
	if err := put(&EdgeSet{Name: "hot", Role: RoleDedicated, Edges: []EdgeNode{{Name: "edge-h1", Underlay: addr("198.18.0.9")}}}); err != nil {
		t.Fatal(err)
	}
	if err := put(&EIP{Address: addr("198.51.100.8"), Set: "hot"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEdgeSet, "hot"); err == nil || !strings.Contains(err.Error(), "EIP 198.51.100.8") {
		t.Errorf("deleting a dedicated set with a pulled-out EIP: %v", err)
	}
	wantErr(t, put(&EdgeSet{Name: "hot", Role: RoleQuarantine}), "role", "return them first")

	// Quarantine needs the quarantine set and an EIP or VIP.
	wantErr(t, put(&Quarantine{Address: addr("198.51.100.8")}), "address", "no quarantine set")
	if err := put(&EdgeSet{Name: "quar", Role: RoleQuarantine}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, put(&EdgeSet{Name: "quar2", Role: RoleQuarantine}), "role", "already the region's quarantine set")
	wantErr(t, put(&Quarantine{Address: addr("198.51.100.99")}), "address", "neither an EIP nor a VIP")
	wantErr(t, put(&Quarantine{Address: addr("198.51.100.8"), By: "robot"}), "by", "operator or ddos")
	if err := put(&Quarantine{Address: addr("198.51.100.8"), By: "ddos", Reason: "syn 2e6/s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEIP, "198.51.100.8"); err == nil || !strings.Contains(err.Error(), "quarantined") {
		t.Errorf("deleting a quarantined EIP: %v", err)
	}
	if _, err := s.Delete(KindEdgeSet, "quar"); err == nil || !strings.Contains(err.Error(), "release them first") {
		t.Errorf("deleting the quarantine set while in use: %v", err)
	}
	wantErr(t, put(&EdgeSet{Name: "quar", Role: RoleDedicated}), "role", "release them first")
	if _, err := s.Delete(KindQuarantine, "198.51.100.8"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindEdgeSet, "quar"); err != nil {
		t.Fatal(err)
	}
}

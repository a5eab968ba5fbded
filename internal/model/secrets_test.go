package model

import (
	"net/netip"
	"testing"
)

// TestRedactedCopies: Redacted hides every password in a copy and leaves
// the object it was given as it was; an object without secrets is
// returned as is.
func TestRedactedCopies(t *testing.T) {
	a := netip.MustParseAddr
	s := &EdgeSet{Name: "a", Edges: []EdgeNode{
		{Name: "e1", BGP: &NodeBGP{Peers: []BGPPeer{{Address: a("198.18.100.0"), Password: "p1"}, {Address: a("198.18.100.2")}}}},
		{Name: "e2"},
	}}
	r := Redacted(s).(*EdgeSet)
	if got := r.Edges[0].BGP.Peers; got[0].Password != RedactedSecret || got[1].Password != "" {
		t.Errorf("redacted peers: %+v", got)
	}
	if s.Edges[0].BGP.Peers[0].Password != "p1" {
		t.Errorf("Redacted changed its argument: %+v", s.Edges[0].BGP.Peers)
	}
	plain := &EdgeSet{Name: "b", Edges: []EdgeNode{{Name: "e1"}}}
	if Redacted(plain) != Object(plain) {
		t.Error("an object without secrets was copied")
	}
	// KeepSecrets matches by edge name and peer address, not position.
	o := &EdgeSet{Name: "a", Edges: []EdgeNode{
		{Name: "e1", BGP: &NodeBGP{Peers: []BGPPeer{{Address: a("198.18.100.2")}, {Address: a("198.18.100.0"), Password: RedactedSecret}}}},
	}}
	if err := KeepSecrets(o, s); err != nil || o.Edges[0].BGP.Peers[1].Password != "p1" {
		t.Errorf("KeepSecrets: %v, %+v", err, o.Edges[0].BGP.Peers)
	}
	o.Edges[0].Name = "e9"
	o.Edges[0].BGP.Peers[1].Password = RedactedSecret
	if err := KeepSecrets(o, s); err == nil {
		t.Error("KeepSecrets kept a password of another edge")
	}
}

package model

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRegistry holds every registered kind to the same contract: New makes
// an object KindOf names, Singular names it, DecodeList reads what the API
// lists, and the State's Get, Keys, Len, Set and Remove agree.
func TestRegistry(t *testing.T) {
	s := region(t)
	seen := map[string]bool{}
	for _, kind := range Kinds {
		if seen[kind] {
			t.Fatalf("kind %s registered twice", kind)
		}
		seen[kind] = true
		o, err := New(kind)
		if err != nil {
			t.Fatal(err)
		}
		if got := KindOf(o); got != kind {
			t.Errorf("KindOf(New(%q)) = %q", kind, got)
		}
		if Singular(kind) == "" {
			t.Errorf("kind %s has no name for messages", kind)
		}
		if list, err := DecodeList(kind, []byte("[{},{}]")); err != nil || len(list) != 2 || KindOf(list[0]) != kind {
			t.Errorf("DecodeList(%s) = %v, %v", kind, list, err)
		}
		if _, err := DecodeList(kind, []byte(`{"not":"a list"}`)); err == nil {
			t.Errorf("DecodeList(%s) of an object: no error", kind)
		}
		if got := len(s.Keys(kind)); got != s.Len(kind) {
			t.Errorf("%s: %d keys, Len %d", kind, got, s.Len(kind))
		}
		for _, key := range s.Keys(kind) {
			if o, ok := s.Get(kind, key); !ok || o.Key() != key || KindOf(o) != kind {
				t.Errorf("Get(%s, %s) = %v, %v", kind, key, o, ok)
			}
		}
	}
	if _, err := New("widgets"); err == nil {
		t.Error("New of an unknown kind: no error")
	}
	if _, err := s.Delete("widgets", "x"); err == nil {
		t.Error("Delete of an unknown kind: no error")
	}
	for _, k := range UserKinds {
		if !slices.Contains(Kinds, k) {
			t.Errorf("user kind %s is not a kind", k)
		}
	}
	if slices.Contains(UserKinds, KindHealth) {
		t.Error("health is written by the controller only, not a user kind")
	}
}

// TestRegistryUndo: a Put or Delete of every user kind, undone, leaves the
// state (objects and indexes) as it was.
func TestRegistryUndo(t *testing.T) {
	s := region(t)
	before := s.Clone()
	changes := []Object{
		&AZ{Name: "az3"},
		&Host{Name: "h1", AZ: "az2", Underlay: addr("198.18.9.9"), Guests: []Guest{{Name: "g1", Address: addr("198.19.1.1"), VSID: 5001}, {Name: "g2", Address: addr("198.19.1.2"), VSID: 5001}}},
		&EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"}},
		&BandwidthPackage{Name: "shop", Capacity: 1_000_000, EIPs: []PackageEIP{{Address: addr("198.51.100.8")}}},
	}
	for _, o := range changes {
		undo, err := s.Put(o)
		if err != nil {
			t.Fatalf("put %s %s: %v", KindOf(o), o.Key(), err)
		}
		undo()
		if !reflect.DeepEqual(s, before) {
			t.Fatalf("undoing the put of %s %s left the state changed", KindOf(o), o.Key())
		}
	}
	undo, err := s.Delete(KindEIP, "198.51.100.8")
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if !reflect.DeepEqual(s, before) {
		t.Fatal("undoing a delete left the state changed")
	}
	// Health is the controller's: Put and Delete refuse it.
	if _, err := s.Put(&Health{Service: "web"}); err == nil || !strings.Contains(err.Error(), "controller only") {
		t.Errorf("Put of a health object: %v, want a refusal", err)
	}
	b, _ := json.Marshal(s.Keys(KindEIP))
	if string(b) != `["198.51.100.7","198.51.100.8"]` {
		t.Errorf("EIP keys %s", b)
	}
}

package model

import (
	"slices"
	"testing"
)

// TestNamedEveryKind: a document with every list empty names every user
// kind (apply --prune relies on it: a kind added to the registry but not
// to Named could not be pruned).
func TestNamedEveryKind(t *testing.T) {
	js := "{"
	for i, k := range UserKinds {
		if i > 0 {
			js += ","
		}
		js += `"` + k + `": []`
	}
	d, err := ParseDocument([]byte(js + "}"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Named(); !slices.Equal(got, UserKinds) {
		t.Errorf("Named() = %v, want %v", got, UserKinds)
	}
	if d, _ := ParseDocument([]byte("eips: [{address: 192.0.2.1}]\nhosts: null\n")); !slices.Equal(d.Named(), []string{KindEIP}) {
		t.Errorf("Named() = %v, want only eips", d.Named())
	}
}

package store

import (
	"fmt"
	"maps"
)

// Revisions holds every object's mod revision: the store revision of the
// commit that last wrote it, which the API serves as the object's ETag.
// An object keeps its revision until it is written again, so a client that
// read revision R and sends it back with a write (If-Match) learns whether
// anyone changed the object in between, without comparing whole objects.
// Indexed kind, then key; 0 means absent.
type Revisions map[string]map[string]int64

// Get returns the mod revision of an object (0: not stored).
func (r Revisions) Get(kind, key string) int64 { return r[kind][key] }

// Set records the mod revision of an object.
func (r Revisions) Set(kind, key string, rev int64) {
	m := r[kind]
	if m == nil {
		m = map[string]int64{}
		r[kind] = m
	}
	m[key] = rev
}

// Delete forgets an object.
func (r Revisions) Delete(kind, key string) { delete(r[kind], key) }

// Clone copies the table (the maps, not shared).
func (r Revisions) Clone() Revisions {
	out := make(Revisions, len(r))
	for k, m := range r {
		out[k] = maps.Clone(m)
	}
	return out
}

// RevisionError is a conditional write (Op.IfRev) refused because the
// object is no longer at the revision the writer read: Current is the
// revision it has now (0: it was deleted). Nothing of the transaction was
// written.
type RevisionError struct {
	Kind, Key     string
	Want, Current int64
}

func (e *RevisionError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("store: %s/%s was expected at revision %d but no longer exists", e.Kind, e.Key, e.Want)
	}
	return fmt.Sprintf("store: %s/%s is at revision %d, not %d", e.Kind, e.Key, e.Current, e.Want)
}

package store

import (
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestHeldChanges: a scope follower's changes go to the sink in revision
// order once their revision was applied whole, or after heldWait; a
// key's later change never before its earlier one.
func TestHeldChanges(t *testing.T) {
	ev := func(key string, rev int64, del bool) *clientv3.Event {
		e := &clientv3.Event{Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: rev}}
		if del {
			e.Type = clientv3.EventTypeDelete
		}
		return e
	}
	rec := newScopeRec()
	var h heldChanges
	t0 := time.Now()
	// Revision 12's change of span A comes before revision 11's of span
	// B (their watches are merged), then 13's of A.
	h.add("eips", "a", ev("a", 12, false), t0)
	h.add("quarantines", "b", ev("b", 11, false), t0)
	h.add("eips", "a", ev("a", 13, true), t0)
	batch := func() []string {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		b := rec.batch
		rec.batch = nil
		return b
	}
	if h.flush(rec, 10, t0) || len(batch()) != 0 {
		t.Fatal("changes passed on before their revision was applied")
	}
	if at, ok := h.due(); !ok || !at.Equal(t0.Add(heldWait)) {
		t.Fatalf("due %v %v, want %v", at, ok, t0.Add(heldWait))
	}
	if !h.flush(rec, 12, t0) {
		t.Fatal("nothing passed at 12")
	}
	if got := batch(); !slices.Equal(got, []string{"put quarantines/b @11", "put eips/a @12"}) {
		t.Fatalf("at 12: %v", got)
	}
	if h.flush(rec, 12, t0.Add(heldWait-time.Millisecond)) {
		t.Fatal("revision 13 passed before heldWait")
	}
	if !h.flush(rec, 12, t0.Add(heldWait)) {
		t.Fatal("revision 13 held past heldWait")
	}
	if got := batch(); !slices.Equal(got, []string{"del eips/a @13"}) {
		t.Fatalf("after heldWait: %v", got)
	}
	if _, ok := h.due(); ok {
		t.Fatal("nothing held, yet due")
	}
}

package store

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/azgate/azgate/internal/model"
)

// MaxInvalidShown bounds the invalid objects a node lists in its status
// (the total is always given).
const MaxInvalidShown = 100

// Invalid tracks the stored objects a reader refused because they fail
// the model's validation (model.DecodeStored): written past the API,
// straight into etcd. A refused object counts as absent, so what replaced
// a valid one also stops being programmed, and every node (whatever it
// loaded before) agrees on what is in force; a later valid write of the
// key clears it. Safe for concurrent use.
type Invalid struct {
	Log *slog.Logger // nil: slog.Default()

	mu sync.Mutex
	m  map[invalidKey]string // -> reason
}

type invalidKey struct{ kind, key string }

// Refuse records that kind/key fails validation, logging it (once per
// distinct reason).
func (v *Invalid) Refuse(kind, key string, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[invalidKey]string{}
	}
	k, reason := invalidKey{kind, key}, err.Error()
	if v.m[k] == reason {
		return
	}
	v.m[k] = reason
	log := v.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error("ignoring an invalid object in the store: it is not programmed until a valid write replaces it",
		"kind", kind, "key", key, "reason", reason)
}

// Clear forgets kind/key (a valid write or a delete).
func (v *Invalid) Clear(kind, key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, invalidKey{kind, key})
}

// Reset forgets everything (a full reload).
func (v *Invalid) Reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m = nil
}

// List returns at most MaxInvalidShown refused objects, sorted by kind
// and key, and how many there are in all.
func (v *Invalid) List() ([]model.InvalidObject, int) {
	v.mu.Lock()
	out := make([]model.InvalidObject, 0, len(v.m))
	for k, r := range v.m {
		out = append(out, model.InvalidObject{Kind: k.kind, Key: k.key, Reason: r})
	}
	v.mu.Unlock()
	slices.SortFunc(out, func(a, b model.InvalidObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key))
	})
	n := len(out)
	if n > MaxInvalidShown {
		out = out[:MaxInvalidShown]
	}
	return out, n
}

// Into fills a node status's Invalid and InvalidTotal (ReportInvalid).
func (v *Invalid) Into(s *model.NodeStatus) { ReportInvalid(s, v.List) }

// ReportInvalid puts list's refused objects into a node status, with an
// error line saying how many there are, so `azgate status` shows them.
func ReportInvalid(s *model.NodeStatus, list func() ([]model.InvalidObject, int)) {
	l, n := list()
	if n == 0 {
		return
	}
	s.Invalid, s.InvalidTotal = l, n
	s.Errors = append(slices.Clip(s.Errors), fmt.Sprintf("%d object(s) in the store fail validation and are not programmed (see invalid)", n))
}

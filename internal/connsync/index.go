package connsync

import (
	"sync"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// backends translates between this edge's backend slots and the
// backends' identities (owner hashes), from the data plane's own
// lb_backends: the sender turns an event's (slot, generation) into the
// owner, the receiver an owner into its slot and generation. It is read
// again when a lookup misses (at most every minReload), so a backend
// added since is found, and a slot given to another backend (new
// generation) is never confused with the old one.
type backends struct {
	table     Table
	minReload time.Duration

	mu      sync.Mutex
	bySlot  map[uint32]dataplane.LBBackend
	byOwner map[uint64]uint32
	loaded  time.Time
	err     error
}

func newBackends(t Table) *backends { return &backends{table: t, minReload: 100 * time.Millisecond} }

func (b *backends) reloadLocked(force bool) {
	if !force && time.Since(b.loaded) < b.minReload {
		return
	}
	bs, err := b.table.Backends()
	b.loaded = time.Now()
	if err != nil {
		b.err = err
		return
	}
	b.err = nil
	b.bySlot = bs
	b.byOwner = make(map[uint64]uint32, len(bs))
	for idx, be := range bs {
		// A backend removed and added again holds two slots (the first
		// draining): either serves its connections; take the lower, as
		// the daemon's adoption does.
		if o, dup := b.byOwner[be.Owner]; dup && o < idx {
			continue
		}
		b.byOwner[be.Owner] = idx
	}
}

// owner returns the identity of the backend in slot idx at generation gen.
func (b *backends) owner(idx uint32, gen uint16) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if be, ok := b.bySlot[idx]; ok && be.Gen == gen {
		return be.Owner, true
	}
	b.reloadLocked(false)
	if be, ok := b.bySlot[idx]; ok && be.Gen == gen {
		return be.Owner, true
	}
	return 0, false
}

// slot returns this edge's slot of the backend owner.
func (b *backends) slot(owner uint64) (uint32, dataplane.LBBackend, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if idx, ok := b.byOwner[owner]; ok {
		return idx, b.bySlot[idx], true
	}
	b.reloadLocked(false)
	if idx, ok := b.byOwner[owner]; ok {
		return idx, b.bySlot[idx], true
	}
	return 0, dataplane.LBBackend{}, false
}

// snapshot returns the slots as last read (read them first if never).
func (b *backends) snapshot() map[uint32]dataplane.LBBackend {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloadLocked(true)
	return b.bySlot
}

package hopstore

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// Mem is an in-process Store, for tests: several pathd servers of one
// process share it, and SetDown, Flush and Put make its failures (pathd
// without --redis uses no store at all: Config.Hops nil). It keeps the
// rows encoded, as Redis does, so both go through the same decode and
// validation.
type Mem struct {
	mu   sync.Mutex
	rows map[string]memRow
	ver  uint64
	down bool
}

type memRow struct {
	v   string
	ver uint64
}

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{rows: map[string]memRow{}} }

// errDown: SetDown made the store unreachable (tests).
type errDown struct{}

func (errDown) Error() string { return "hopstore: in-process store set down" }

// SetDown makes every call fail while down (tests of pathd's failure modes).
func (m *Mem) SetDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

// Flush forgets every row and the version, as a Redis restarted without
// persistence would (tests).
func (m *Mem) Flush() {
	m.mu.Lock()
	m.rows, m.ver = map[string]memRow{}, 0
	m.mu.Unlock()
}

// Put stores a raw row, unvalidated (tests of what a reader does with a
// bad row).
func (m *Mem) Put(field, value string) {
	m.mu.Lock()
	m.ver++
	m.rows[field] = memRow{value, m.ver}
	m.mu.Unlock()
}

// Save implements Store.
func (m *Mem) Save(_ context.Context, recs []pathcomp.HopRecord) error {
	if err := checkSave(recs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return errDown{}
	}
	for _, r := range recs {
		m.ver++
		m.rows[field(r)] = memRow{encode(r), m.ver}
	}
	return nil
}

// Load implements Store.
func (m *Mem) Load(ctx context.Context) (Loaded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Loaded{}, errDown{}
	}
	l := Loaded{Cursor: m.ver, From: "memory"}
	for f, r := range m.rows {
		if rec, err := decode(f, r.v); err != nil {
			l.bad("%v", err)
		} else {
			l.Records = append(l.Records, rec)
		}
	}
	return l, nil
}

// Changes implements Store.
func (m *Mem) Changes(_ context.Context, since uint64, max int) (Loaded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Loaded{}, errDown{}
	}
	type fv struct {
		f string
		r memRow
	}
	l := Loaded{Cursor: since}
	if m.ver < since {
		since, l.Reset, l.Cursor = 0, true, 0
	}
	var out []fv
	for f, r := range m.rows {
		if r.ver > since {
			out = append(out, fv{f, r})
		}
	}
	slices.SortFunc(out, func(a, b fv) int { return cmp.Compare(a.r.ver, b.r.ver) })
	if len(out) > max {
		out, l.More = out[:max], true
	}
	for _, x := range out {
		if rec, err := decode(x.f, x.r.v); err != nil {
			l.bad("%v", err)
		} else {
			l.Records = append(l.Records, rec)
		}
		l.Cursor = x.r.ver
	}
	return l, nil
}

// Expire implements Store.
func (m *Mem) Expire(_ context.Context, before time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return 0, errDown{}
	}
	n := 0
	for f, r := range m.rows {
		rec, err := decode(f, r.v)
		if err != nil || rec.Last.Before(before) {
			delete(m.rows, f)
			n++
		}
	}
	return n, nil
}

// Ping implements Store.
func (m *Mem) Ping(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return errDown{}
	}
	return nil
}

// Close implements Store.
func (m *Mem) Close() error { return nil }

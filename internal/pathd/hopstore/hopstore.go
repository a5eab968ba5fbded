// Package hopstore persists pathd's smoothed hop figures (issue 11 part 4:
// "keeps smoothed figures per hop in Redis (one primary and its replicas
// per cluster; the in-process store by default)"). A pathd server writes
// the state of the hops it changed, loads every hop at startup (a restarted
// server, or one that joins the cluster, carries on with the cluster's
// figures) and reads what the other servers of its cluster wrote since
// (Changes), so the servers behind one VIP answer alike. Layout and
// semantics: docs/pathd.md, "Redis".
package hopstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// Store is where a cluster's hop records live. Implementations are safe
// for concurrent use.
type Store interface {
	// Save writes recs (each replaces the hop's row) and gives each a new
	// version, so Changes returns it to every reader.
	Save(ctx context.Context, recs []pathcomp.HopRecord) error
	// Load reads every row; Cursor is a version read before the rows, so
	// Changes(Cursor) misses nothing written during the Load.
	Load(ctx context.Context) (Loaded, error)
	// Changes returns rows saved with a version above since, at most max
	// of them, lowest version first; More says whether more are waiting.
	Changes(ctx context.Context, since uint64, max int) (Loaded, error)
	// Expire deletes the rows whose hop was last reported before before.
	Expire(ctx context.Context, before time.Time) (int, error)
	// Ping says whether the store can be written (pathd's /healthz).
	Ping(ctx context.Context) error
	Close() error
}

// Loaded is what a read returned. Rows that do not parse or do not
// validate (another writer's bug, a stranger in the keyspace) are skipped
// and counted in Malformed; Errs holds the first few reasons, for the log.
type Loaded struct {
	Records   []pathcomp.HopRecord
	Cursor    uint64
	More      bool
	Malformed int
	Errs      []string
	// From names where a Load read (the primary, or a replica when the
	// primary did not answer).
	From string
}

const maxErrs = 8

func (l *Loaded) bad(format string, a ...any) {
	l.Malformed++
	if len(l.Errs) < maxErrs {
		l.Errs = append(l.Errs, fmt.Sprintf(format, a...))
	}
}

// MaxSave bounds the records of one Save call (one pipeline).
const MaxSave = 4096

// ErrTooMany: a Save over MaxSave.
var ErrTooMany = errors.New("hopstore: too many records in one call")

// checkSave validates what is written: a store shared by a cluster must not
// hold rows its readers would refuse.
func checkSave(recs []pathcomp.HopRecord) error {
	if len(recs) > MaxSave {
		return fmt.Errorf("%w: %d, at most %d", ErrTooMany, len(recs), MaxSave)
	}
	for i, r := range recs {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("hopstore: save: record %d: %w", i, err)
		}
	}
	return nil
}

// field is a row's name: "FROM TO". Names are [A-Za-z0-9._-] (Validate),
// so the space cannot be part of either.
func field(r pathcomp.HopRecord) string { return r.From + " " + r.To }

// rowVersion starts every row value: a later format takes another.
const rowVersion = "1"

// encode is a row's value: "1 ORIGIN RTTMS LOSS UP LASTNS", floats in the
// shortest form that reads back to the same bits ("NaN" for no RTT), so a
// restored hop equals the saved one exactly.
func encode(r pathcomp.HopRecord) string {
	var b strings.Builder
	b.WriteString(rowVersion)
	b.WriteByte(' ')
	b.WriteString(b01(r.ToOrigin))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatFloat(r.RTTms, 'g', -1, 64))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatFloat(r.Loss, 'g', -1, 64))
	b.WriteByte(' ')
	b.WriteString(b01(r.Up))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(r.Last.UnixNano(), 10))
	return b.String()
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// maxRow bounds a row read back: two names, a version and the figures.
const maxRow = 2*pathcomp.MaxNameLen + 128

// decode parses and validates a row read back.
func decode(f, v string) (pathcomp.HopRecord, error) {
	var r pathcomp.HopRecord
	if len(f) > maxRow || len(v) > maxRow {
		return r, fmt.Errorf("row %.40q: longer than %d bytes", f, maxRow)
	}
	from, to, ok := strings.Cut(f, " ")
	if !ok {
		return r, fmt.Errorf("row %q: field: want \"FROM TO\"", f)
	}
	p := strings.Split(v, " ")
	if len(p) != 6 || p[0] != rowVersion {
		return r, fmt.Errorf("row %q: value %.60q: want \"1 ORIGIN RTT LOSS UP LAST\"", f, v)
	}
	r.From, r.To = from, to
	var err error
	if r.ToOrigin, err = parse01(p[1]); err != nil {
		return r, fmt.Errorf("row %q: origin: %w", f, err)
	}
	if r.RTTms, err = strconv.ParseFloat(p[2], 64); err != nil {
		return r, fmt.Errorf("row %q: rtt: %w", f, err)
	}
	if r.Loss, err = strconv.ParseFloat(p[3], 64); err != nil {
		return r, fmt.Errorf("row %q: loss: %w", f, err)
	}
	if r.Up, err = parse01(p[4]); err != nil {
		return r, fmt.Errorf("row %q: up: %w", f, err)
	}
	ns, err := strconv.ParseInt(p[5], 10, 64)
	if err != nil {
		return r, fmt.Errorf("row %q: last: %w", f, err)
	}
	r.Last = time.Unix(0, ns)
	if math.IsInf(r.RTTms, 0) {
		return r, fmt.Errorf("row %q: rtt: infinite", f)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("row %q: %w", f, err)
	}
	return r, nil
}

func parse01(s string) (bool, error) {
	switch s {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("%.10q: want 0 or 1", s)
}

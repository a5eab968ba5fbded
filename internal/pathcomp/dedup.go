package pathcomp

import (
	"errors"
	"fmt"
)

// ReportID names a report across regions: the sender that accepted it
// from a prober (a pathd server, "region/server"; a restarted server
// takes a new name, e.g. with a boot id, or resumes its sequence) and
// that sender's sequence number, counting from 1.
type ReportID struct {
	Source string `json:"source"`
	Seq    uint64 `json:"seq"`
}

// DedupWindow is how far behind a source's highest sequence a report may
// arrive and still be told apart (like IPsec's anti-replay window,
// RFC 4303 §3.4.3): older ones are dropped as possible duplicates.
const DedupWindow = 1024

// ErrTooManySources: the seen-set is full.
var ErrTooManySources = errors.New("too many sources")

type window struct {
	top  uint64                   // highest sequence seen
	bits [DedupWindow / 64]uint64 // bit (seq % DedupWindow) set: seen, for seq in (top-DedupWindow, top]
}

// Dedup is the bounded seen-set of report IDs: per source a sliding
// window of DedupWindow sequences (128 bytes), at most MaxSources sources.
type Dedup struct {
	maxSources int
	w          map[string]*window
}

// NewDedup returns an empty seen-set for at most maxSources sources
// (default 4,096 when ≤ 0).
func NewDedup(maxSources int) *Dedup {
	if maxSources <= 0 {
		maxSources = 4096
	}
	return &Dedup{maxSources: maxSources, w: map[string]*window{}}
}

// Decide says what a region does with a report: apply it (it was not seen
// before) and forward it to every other region (only when it was accepted
// here from a prober: local). A forwarded report is never forwarded
// again, so a report crosses each region pair at most once and cannot
// loop, whatever the topology; the seen-set drops retries and duplicate
// deliveries. Decide records the ID as seen when it returns apply.
func (d *Dedup) Decide(id ReportID, local bool) (apply, forward bool, err error) {
	if err := ValidateSource(id.Source); err != nil {
		return false, false, err
	}
	if id.Seq == 0 {
		return false, false, fmt.Errorf("report %s: seq: 0 (sequences start at 1)", id.Source)
	}
	w, ok := d.w[id.Source]
	if !ok {
		if len(d.w) >= d.maxSources {
			return false, false, fmt.Errorf("report %s/%d: source: %w (%d)", id.Source, id.Seq, ErrTooManySources, d.maxSources)
		}
		w = &window{}
		d.w[id.Source] = w
	}
	if !w.mark(id.Seq) {
		return false, false, nil
	}
	return true, local, nil
}

// mark records seq and says whether it was new.
func (w *window) mark(seq uint64) bool {
	if seq > w.top {
		shift := seq - w.top
		if shift >= DedupWindow {
			w.bits = [DedupWindow / 64]uint64{}
		} else {
			for s := w.top + 1; s <= seq; s++ { // clear the slots the window slides over
				w.bits[(s%DedupWindow)/64] &^= 1 << (s % 64)
			}
		}
		w.top = seq
		w.bits[(seq%DedupWindow)/64] |= 1 << (seq % 64)
		return true
	}
	if w.top-seq >= DedupWindow {
		return false // too old to tell: treated as seen
	}
	b := &w.bits[(seq%DedupWindow)/64]
	if *b&(1<<(seq%64)) != 0 {
		return false
	}
	*b |= 1 << (seq % 64)
	return true
}

// ValidateSource checks a report source: 1-127 characters of
// [A-Za-z0-9._-/] ("region/server").
func ValidateSource(s string) error {
	if len(s) == 0 || len(s) > 127 {
		return fmt.Errorf("report: source: %d characters, want 1-127", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/' {
			continue
		}
		return fmt.Errorf("report: source %q: character %q at %d not in [A-Za-z0-9._-/]", s, c, i)
	}
	return nil
}

// Forget drops source's window. The service forgets sources it has not
// heard from for its expiry time: a pathd server takes a new source name
// at every start, and without this the seen-set would fill
// (ErrTooManySources) after MaxSources restarts in the cluster. A late
// duplicate of a forgotten source's report is applied again, but the
// Store drops it as stale (its At is not newer than its hop's last).
func (d *Dedup) Forget(source string) { delete(d.w, source) }

// Sources returns the number of sources held.
func (d *Dedup) Sources() int { return len(d.w) }

package pathcomp

import (
	"errors"
	"fmt"
	"strings"
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

// SeqAhead is how far ahead of a source's highest sequence a report may
// be and still be taken (2^20). Without it one report with sequence
// 2^64−1 would slide the window to the end and every later report of the
// source would look old: the source muted for as long as it is not
// forgotten. A sender's sequence counts only the reports it forwards, so
// its gaps are the reports its peer queue dropped (at most QueueLen per
// outage of a peer): a jump beyond SeqAhead is refused (ErrSeqAhead) and
// the source is taken again from any sequence once forgotten (the service
// forgets a source not accepted from for its expiry time).
const SeqAhead = 1 << 20

// MaxRegions bounds the origin regions the seen-set holds (each with its
// own source table).
const MaxRegions = 256

// ErrTooManySources: the seen-set's table of the source's origin region
// is full (or the region table).
var ErrTooManySources = errors.New("too many sources")

// ErrSeqAhead: a report's sequence is more than SeqAhead beyond its
// source's highest.
var ErrSeqAhead = errors.New("sequence too far ahead")

type window struct {
	top  uint64                   // highest sequence seen
	bits [DedupWindow / 64]uint64 // bit (seq % DedupWindow) set: seen, for seq in (top-DedupWindow, top]
}

// Dedup is the bounded seen-set of report IDs: per source a sliding
// window of DedupWindow sequences (128 bytes), the sources in one table
// per origin region (SourceRegion) of at most maxSources each, so the
// reports of one region cannot fill the table of another's sources.
type Dedup struct {
	maxSources int
	regions    map[string]map[string]*window // origin region → source → window
	n          int                           // sources, all regions
}

// NewDedup returns an empty seen-set for at most maxSources sources per
// origin region (default 4,096 when ≤ 0) and MaxRegions regions.
func NewDedup(maxSources int) *Dedup {
	if maxSources <= 0 {
		maxSources = 4096
	}
	return &Dedup{maxSources: maxSources, regions: map[string]map[string]*window{}}
}

// SourceRegion is the origin region of a report source "region/server":
// the part before the first '/' (the whole source when it has none).
func SourceRegion(source string) string {
	r, _, _ := strings.Cut(source, "/")
	return r
}

// Decide says what a region does with a report: apply it (it was not seen
// before) and forward it to every other region (only when it was accepted
// here from a prober: local). A forwarded report is never forwarded
// again, so a report crosses each region pair at most once and cannot
// loop, whatever the topology; the seen-set drops retries and duplicate
// deliveries. Decide records the ID as seen when it returns apply.
// A source's first report is taken at any sequence (the receiver may
// have restarted, or forgotten the source); later ones only up to
// SeqAhead beyond the highest (ErrSeqAhead, nothing recorded).
func (d *Dedup) Decide(id ReportID, local bool) (apply, forward bool, err error) {
	if err := ValidateSource(id.Source); err != nil {
		return false, false, err
	}
	if id.Seq == 0 {
		return false, false, fmt.Errorf("report %s: seq: 0 (sequences start at 1)", id.Source)
	}
	region := SourceRegion(id.Source)
	t := d.regions[region]
	w, ok := t[id.Source]
	if !ok {
		if t == nil && len(d.regions) >= MaxRegions {
			return false, false, fmt.Errorf("report %s/%d: region %s: %w (%d regions)", id.Source, id.Seq, region, ErrTooManySources, MaxRegions)
		}
		if len(t) >= d.maxSources {
			return false, false, fmt.Errorf("report %s/%d: source: %w of region %s (%d)", id.Source, id.Seq, ErrTooManySources, region, d.maxSources)
		}
		if t == nil {
			t = map[string]*window{}
			d.regions[region] = t
		}
		w = &window{}
		t[id.Source] = w
		d.n++
	} else if id.Seq > w.top && id.Seq-w.top > SeqAhead {
		return false, false, fmt.Errorf("report %s/%d: seq: %w (highest %d, at most %d beyond)", id.Source, id.Seq, ErrSeqAhead, w.top, SeqAhead)
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
func (d *Dedup) Forget(source string) {
	region := SourceRegion(source)
	t := d.regions[region]
	if _, ok := t[source]; !ok {
		return
	}
	delete(t, source)
	d.n--
	if len(t) == 0 {
		delete(d.regions, region)
	}
}

// Sources returns the number of sources held, all regions.
func (d *Dedup) Sources() int { return d.n }

// RegionSources returns the number of sources held of one origin region.
func (d *Dedup) RegionSources(region string) int { return len(d.regions[region]) }

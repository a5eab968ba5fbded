package geo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oschwald/maxminddb-golang/v2"
)

// RegionField is the top-level string field azgate reads as the region
// name. When a record lacks it, continent.code is used (so a stock GeoIP2 /
// GeoLite2 City or Country database gives regions "EU", "NA", ...).
const RegionField = "azgate_region"

// record is what Locate decodes from a database record. Pointers tell a
// missing coordinate from a zero one.
type record struct {
	Region    string `maxminddb:"azgate_region"`
	Continent struct {
		Code string `maxminddb:"code"`
	} `maxminddb:"continent"`
	Location struct {
		Latitude  *float64 `maxminddb:"latitude"`
		Longitude *float64 `maxminddb:"longitude"`
	} `maxminddb:"location"`
}

// handle is one open database with a reference count. The DB holds one
// reference while the handle is current; each lookup holds one while it
// reads. The reader is closed (its buffer dropped) when the count reaches
// zero, so Close never races a lookup on the reader's fields, and a
// replaced database is released as soon as its last lookup ends (no grace
// period to guess).
type handle struct {
	reader *maxminddb.Reader
	meta   maxminddb.Metadata
	stat   fileID
	refs   atomic.Int64

	// cache maps a record's data offset to its decoded region and
	// coordinates: many networks share a record, and decoding allocates.
	// It is bounded (cacheMax) and dies with the handle.
	cache  sync.Map // uintptr -> *cached
	cached atomic.Int64
}

type cached struct {
	region    string
	lat, lon  float64
	hasCoords bool
}

// cacheMax bounds the decoded-record cache per database version (a city
// database has a few hundred thousand distinct records; past the bound,
// lookups decode).
var cacheMax int64 = 1 << 16 // a var for TestRecordCacheBound

func (h *handle) acquire() bool {
	for {
		n := h.refs.Load()
		if n <= 0 {
			return false // retired and closed (or closing)
		}
		if h.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (h *handle) release() {
	if h.refs.Add(-1) == 0 {
		_ = h.reader.Close()
	}
}

// fileID identifies a file version: a rename over the path changes the
// inode, an in-place rewrite changes size or mtime.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func statFile(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	return idOf(fi), nil
}

func idOf(fi os.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id
}

// DB is a MaxMind-format database that can be replaced while lookups run.
// The zero value is not usable; use Open.
type DB struct {
	path string
	cur  atomic.Pointer[handle]
	mu   sync.Mutex // serializes Reload and Close

	reloads, failures atomic.Uint64
	lastErr           atomic.Pointer[error]
}

// ErrClosed is returned by Reload after Close.
var ErrClosed = errors.New("geo: database closed")

// Open opens and verifies the database at path.
func Open(path string) (*DB, error) {
	h, err := load(path)
	if err != nil {
		return nil, err
	}
	db := &DB{path: path}
	db.cur.Store(h)
	return db, nil
}

// maxDBSize bounds what load maps; a city database is ~100 MB.
const maxDBSize = 2 << 30

// load reads path into memory and checks it fully before anyone may use
// it: metadata (format version 2, IPv4 or IPv6 tree), the whole tree and
// data section (Reader.Verify), and one lookup decoded into the record type.
// A file that fails any check is dropped and reported.
//
// The file is read, not memory-mapped: with a mapping, an update that
// rewrites the file in place (cp, or a truncate then write) changes the
// database under running lookups, and reading past a truncated end kills
// the process with SIGBUS. A read copy costs the file's size in RAM (twice
// during a reload) and makes the database in use immune to what happens to
// the file.
func load(path string) (*handle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("geo: database %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("geo: database %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("geo: database %s: not a regular file", path)
	}
	if fi.Size() > maxDBSize {
		return nil, fmt.Errorf("geo: database %s: %d bytes, over the %d limit", path, fi.Size(), maxDBSize)
	}
	st := idOf(fi)
	// Read one byte more than stat said, to notice a file growing under us.
	buf := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(f, buf)
	if err != io.ErrUnexpectedEOF {
		if err == nil {
			err = errors.New("file grew while being read")
		}
		return nil, fmt.Errorf("geo: database %s: read: %w", path, err)
	}
	if int64(n) != fi.Size() {
		return nil, fmt.Errorf("geo: database %s: read %d bytes, stat said %d (file changed while being read)", path, n, fi.Size())
	}
	buf = buf[:n]
	if n == 0 {
		return nil, fmt.Errorf("geo: database %s: file is empty", path)
	}
	r, err := openBytes(buf)
	if err != nil {
		return nil, fmt.Errorf("geo: database %s: open: %w", path, err)
	}
	if err := verify(r); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("geo: database %s: %w", path, err)
	}
	h := &handle{reader: r, meta: r.Metadata, stat: st}
	h.refs.Store(1)
	return h, nil
}

func openBytes(b []byte) (r *maxminddb.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("reader panicked: %v", p)
		}
	}()
	return maxminddb.OpenBytes(b)
}

func verify(r *maxminddb.Reader) (err error) {
	// maxminddb-golang returns errors for bad data; the recover is a last
	// line so a reader bug on a hostile file cannot take the DNS server
	// down with it (FuzzReload exercises this).
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reader panicked: %v", p)
		}
	}()
	m := r.Metadata
	if m.BinaryFormatMajorVersion != 2 {
		return fmt.Errorf("metadata: binary_format_major_version %d, want 2", m.BinaryFormatMajorVersion)
	}
	if m.IPVersion != 4 && m.IPVersion != 6 {
		return fmt.Errorf("metadata: ip_version %d, want 4 or 6", m.IPVersion)
	}
	if m.NodeCount == 0 {
		return errors.New("metadata: node_count 0")
	}
	if err := r.Verify(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	probe := netip.MustParseAddr("192.0.2.1")
	if m.IPVersion == 6 {
		probe = netip.MustParseAddr("2001:db8::1")
	}
	var rec record
	if err := r.Lookup(probe).Decode(&rec); err != nil {
		return fmt.Errorf("test lookup of %v: %w", probe, err)
	}
	return nil
}

// Path is the database file DB reloads from.
func (db *DB) Path() string { return db.path }

// Metadata returns the current database's metadata (database_type,
// build_epoch, node_count...).
func (db *DB) Metadata() (maxminddb.Metadata, bool) {
	h := db.cur.Load()
	if h == nil {
		return maxminddb.Metadata{}, false
	}
	return h.meta, true
}

// Locate implements Locator. It decodes the record covering addr: region
// from azgate_region, else continent.code; coordinates from
// location.latitude/longitude. Prefix is the record's network.
func (db *DB) Locate(addr netip.Addr) (Location, bool) {
	if !addr.IsValid() {
		return Location{}, false
	}
	addr = normalize(addr)
	var h *handle
	for {
		h = db.cur.Load()
		if h == nil {
			return Location{}, false // closed
		}
		if h.acquire() {
			break
		}
		// Lost a race with a Reload that retired h; the new handle is
		// already stored, so the next Load sees it.
	}
	defer h.release()
	if h.meta.IPVersion == 4 && addr.Is6() {
		return Location{}, false
	}
	res := h.reader.Lookup(addr)
	if res.Err() != nil {
		return Location{}, false
	}
	prefix := res.Prefix()
	if addr.Is4() && !prefix.Addr().Is4() {
		// The network covers more than the IPv4 subtree (e.g. ::/0
		// data); what applies to the client is all of IPv4.
		prefix = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	if !res.Found() {
		return Location{Prefix: prefix}, false
	}
	c, ok := h.record(res)
	if !ok {
		return Location{}, false
	}
	if c.region == "" && !c.hasCoords {
		return Location{Prefix: prefix}, false
	}
	return Location{Region: c.region, Lat: c.lat, Lon: c.lon, HasCoords: c.hasCoords, Prefix: prefix}, true
}

// record decodes res's record, or finds it in the cache.
func (h *handle) record(res maxminddb.Result) (*cached, bool) {
	off := res.Offset()
	if v, ok := h.cache.Load(off); ok {
		return v.(*cached), true
	}
	var rec record
	if err := res.Decode(&rec); err != nil {
		return nil, false
	}
	c := &cached{region: rec.Region}
	if c.region == "" {
		c.region = rec.Continent.Code
	}
	if la, lo := rec.Location.Latitude, rec.Location.Longitude; la != nil && lo != nil && validCoords(*la, *lo) {
		c.lat, c.lon, c.hasCoords = *la, *lo, true
	}
	if h.cached.Load() < cacheMax {
		if _, loaded := h.cache.LoadOrStore(off, c); !loaded {
			h.cached.Add(1)
		}
	}
	return c, true
}

func validCoords(lat, lon float64) bool {
	return !math.IsNaN(lat) && !math.IsNaN(lon) && lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180
}

// Reload opens and verifies the file at Path and, only if it is sound,
// makes it current. On any error the current database stays in use and the
// error is returned. The replaced database is closed when its last lookup
// ends.
func (db *DB) Reload() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.cur.Load() == nil {
		return ErrClosed
	}
	h, err := load(db.path)
	if err != nil {
		db.failures.Add(1)
		db.lastErr.Store(&err)
		return err
	}
	old := db.cur.Swap(h)
	db.reloads.Add(1)
	db.lastErr.Store(nil)
	old.release()
	return nil
}

// Stats are reload counters for metrics.
type Stats struct {
	Reloads, Failures uint64
	// LastError is the last failed reload's error, cleared by a successful one.
	LastError error
}

// Stats returns the reload counters.
func (db *DB) Stats() Stats {
	s := Stats{Reloads: db.reloads.Load(), Failures: db.failures.Load()}
	if e := db.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// Close retires the current database; lookups after Close find nothing,
// lookups in flight finish first.
func (db *DB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if h := db.cur.Swap(nil); h != nil {
		h.release()
	}
	return nil
}

// changed reports whether the file at Path differs from the current
// database's file (inode, size or mtime).
func (db *DB) changed() (bool, error) {
	h := db.cur.Load()
	if h == nil {
		return false, ErrClosed
	}
	st, err := statFile(db.path)
	if err != nil {
		return false, err
	}
	return !st.same(h.stat), nil
}

func (a fileID) same(b fileID) bool {
	return a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime.Equal(b.mtime)
}

// Watch polls Path every interval and reloads when the file changed (the
// expected update is write-to-temp then rename over Path). A failed reload
// is reported to onErr (may be nil) and retried only when the file changes
// again, so a bad file is not reopened every interval. Watch returns when
// ctx ends.
func (db *DB) Watch(ctx context.Context, interval time.Duration, onErr func(error)) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var failed fileID // the file version that last failed to load
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ch, err := db.changed()
		if errors.Is(err, ErrClosed) {
			return
		}
		if err != nil {
			// Missing for a moment (a non-atomic update): keep the old one.
			if onErr != nil {
				onErr(fmt.Errorf("geo: database %s: %w", db.path, err))
			}
			continue
		}
		if !ch {
			continue
		}
		st, err := statFile(db.path)
		if err == nil && st.same(failed) {
			continue
		}
		if err := db.Reload(); err != nil {
			failed = st
			if onErr != nil {
				onErr(err)
			}
			continue
		}
		failed = fileID{}
	}
}

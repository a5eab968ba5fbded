package geo

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/geo/mmdbtest"
)

// writeDB writes a test database with region name tag (so tests can tell
// versions apart) to path, by temp file and rename.
func writeDB(t testing.TB, path, tag string) {
	t.Helper()
	w := mmdbtest.New("GeoIP2-City")
	ins := func(p string, r mmdbtest.Record) {
		if err := w.Insert(netip.MustParsePrefix(p), r); err != nil {
			t.Fatal(err)
		}
	}
	ins("198.51.100.0/24", mmdbtest.City("eu-"+tag, "EU", "IE", "Dublin", 1, 53.35, -6.26))
	ins("198.51.100.128/25", mmdbtest.City("us-"+tag, "NA", "US", "Ashburn", 2, 39.04, -77.49))
	// No azgate_region: falls back to continent.code.
	ins("203.0.113.0/24", mmdbtest.City("", "AS", "SG", "", 0, 1.29, 103.85))
	ins("2001:db8:1::/48", mmdbtest.City("eu-"+tag, "EU", "IE", "", 0, 53.35, -6.26))
	// Region only, no coordinates.
	ins("2001:db8:2::/48", mmdbtest.Record{"azgate_region": "ap-" + tag})
	// Neither region nor coordinates: not located.
	ins("2001:db8:3::/48", mmdbtest.Record{"country": mmdbtest.Record{"iso_code": "ZZ"}})
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

func TestLocate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "geo.mmdb")
	writeDB(t, path, "1")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if m, ok := db.Metadata(); !ok || m.DatabaseType != "GeoIP2-City" {
		t.Fatalf("metadata %+v", m)
	}
	for _, c := range []struct {
		ip     string
		ok     bool
		region string
		coords bool
		lat    float64
		prefix string
	}{
		{"198.51.100.7", true, "eu-1", true, 53.35, "198.51.100.0/25"},
		{"198.51.100.200", true, "us-1", true, 39.04, "198.51.100.128/25"},
		{"::ffff:198.51.100.200", true, "us-1", true, 39.04, "198.51.100.128/25"}, // IPv4-mapped
		{"203.0.113.9", true, "AS", true, 1.29, "203.0.113.0/24"},                 // continent fallback
		{"2001:db8:1:2::1", true, "eu-1", true, 53.35, "2001:db8:1::/48"},
		{"fe80::1%eth0", false, "", false, 0, ""},
		{"2001:db8:2::9", true, "ap-1", false, 0, "2001:db8:2::/48"},
		{"2001:db8:3::9", false, "", false, 0, ""},
		{"192.0.2.1", false, "", false, 0, "192.0.0.0/6"}, // a miss gives the empty network
	} {
		loc, ok := db.Locate(netip.MustParseAddr(c.ip))
		if ok != c.ok || loc.Region != c.region || loc.HasCoords != c.coords || loc.Lat != c.lat {
			t.Errorf("%s: got %+v ok=%v", c.ip, loc, ok)
			continue
		}
		if (c.ok || c.prefix != "") && loc.Prefix.String() != c.prefix {
			t.Errorf("%s: prefix %v want %s", c.ip, loc.Prefix, c.prefix)
		}
	}
	if _, ok := db.Locate(netip.Addr{}); ok {
		t.Error("zero Addr located")
	}
}

func TestReloadKeepsOldOnBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "geo.mmdb")
	writeDB(t, path, "1")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	good, _ := os.ReadFile(path)
	ip := netip.MustParseAddr("198.51.100.7")
	bad := map[string][]byte{
		"empty":            {},
		"truncated half":   good[:len(good)/2],
		"no metadata":      good[:len(good)-40],
		"garbage":          []byte("this is not a database at all"),
		"corrupt tree":     corrupt(good, 0, 0xff),
		"corrupt metadata": corrupt(good, len(good)-10, 0xff),
	}
	for name, b := range bad {
		tmp := filepath.Join(dir, "new")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if err := db.Reload(); err == nil {
			t.Errorf("%s: Reload accepted it", name)
			continue
		}
		if loc, ok := db.Locate(ip); !ok || loc.Region != "eu-1" {
			t.Errorf("%s: after failed reload %+v %v", name, loc, ok)
		}
	}
	os.Remove(path)
	if err := db.Reload(); err == nil {
		t.Error("missing file: Reload accepted it")
	}
	if s := db.Stats(); s.Failures != uint64(len(bad))+1 || s.LastError == nil || s.Reloads != 0 {
		t.Errorf("stats %+v", s)
	}
	writeDB(t, path, "2")
	if err := db.Reload(); err != nil {
		t.Fatal(err)
	}
	if loc, _ := db.Locate(ip); loc.Region != "eu-2" {
		t.Errorf("after good reload %+v", loc)
	}
	if s := db.Stats(); s.Reloads != 1 || s.LastError != nil {
		t.Errorf("stats %+v", s)
	}
	db.Close()
	if _, ok := db.Locate(ip); ok {
		t.Error("located after Close")
	}
	if err := db.Reload(); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close: %v", err)
	}
}

func corrupt(b []byte, at int, v byte) []byte {
	c := append([]byte(nil), b...)
	for i := at; i < at+6 && i < len(c); i++ {
		c[i] = v
	}
	return c
}

func TestWatchPicksUpRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "geo.mmdb")
	writeDB(t, path, "1")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var errs atomic.Int64
	go func() {
		db.Watch(ctx, 10*time.Millisecond, func(error) { errs.Add(1) })
		close(done)
	}()
	defer func() { cancel(); <-done }()
	ip := netip.MustParseAddr("2001:db8:1::1")
	waitRegion := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if loc, _ := db.Locate(ip); loc.Region == want {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		loc, _ := db.Locate(ip)
		t.Fatalf("region %q, want %q", loc.Region, want)
	}
	writeDB(t, path, "2") // temp + rename: new inode
	waitRegion("eu-2")
	// A bad file renamed over: reported once, old kept, not retried while unchanged.
	tmp := filepath.Join(dir, "bad")
	os.WriteFile(tmp, []byte("garbage"), 0o644)
	os.Rename(tmp, path)
	deadline := time.Now().Add(5 * time.Second)
	for errs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := errs.Load(); n != 1 {
		t.Errorf("bad file reported %d times, want 1", n)
	}
	if s := db.Stats(); s.Failures != 1 {
		t.Errorf("bad file reloaded %d times, want 1", s.Failures)
	}
	waitRegion("eu-2")
	writeDB(t, path, "3")
	waitRegion("eu-3")
}

// Lookups run while the database is replaced many times; run with -race.
// Every lookup must see a whole database (one version's region for both
// networks it checks within one lookup is not required, but each answer must
// be a valid version), and the replaced readers must get closed.
func TestConcurrentLookupsDuringReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "geo.mmdb")
	writeDB(t, path, "a")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lookups, bad atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ips := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:1::1")}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				loc, ok := db.Locate(ips[i%2])
				if !ok || (loc.Region != "eu-a" && loc.Region != "eu-b") {
					bad.Add(1)
				}
				lookups.Add(1)
			}
		}()
	}
	handles := []*handle{db.cur.Load()}
	for i := 0; i < 50; i++ {
		tag := "a"
		if i%2 == 0 {
			tag = "b"
		}
		writeDB(t, path, tag)
		if err := db.Reload(); err != nil {
			t.Fatal(err)
		}
		handles = append(handles, db.cur.Load())
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d of %d lookups failed during reloads", bad.Load(), lookups.Load())
	}
	// Every replaced handle's count reached zero (its reader closed); the
	// current one still holds the DB's reference.
	for i, h := range handles[:len(handles)-1] {
		if n := h.refs.Load(); n != 0 {
			t.Errorf("replaced handle %d still has %d references", i, n)
		}
	}
	if n := handles[len(handles)-1].refs.Load(); n != 1 {
		t.Errorf("current handle has %d references, want 1", n)
	}
	t.Logf("%d lookups during 50 reloads", lookups.Load())
}

// Random bytes as a database file must make Reload fail, never panic, and
// leave the old database answering.
func FuzzReload(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.mmdb")
	writeDB(f, good, "1")
	gb, _ := os.ReadFile(good)
	f.Add(gb)
	f.Add(gb[:len(gb)-1])
	f.Add(corrupt(gb, 20, 0x00))
	f.Add([]byte("\xab\xcd\xefMaxMind.com"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := t.TempDir()
		path := filepath.Join(d, "geo.mmdb")
		if err := os.WriteFile(path, gb, 0o644); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- db.Reload() }()
		select {
		case err = <-errc:
		case <-time.After(10 * time.Second):
			os.WriteFile(filepath.Join(os.TempDir(), "geo-fuzz-slow.mmdb"), b, 0o644)
			t.Fatalf("Reload of a %d-byte file still running after 10s", len(b))
		}
		// Whatever happened, lookups must not panic.
		for _, ip := range []string{"198.51.100.7", "2001:db8:1::1", "192.0.2.1", "::1"} {
			db.Locate(netip.MustParseAddr(ip))
		}
		if err != nil {
			if loc, ok := db.Locate(netip.MustParseAddr("198.51.100.7")); !ok || loc.Region != "eu-1" {
				t.Fatalf("old database lost after failed reload: %+v", loc)
			}
		}
	})
}

// The decoded-record cache stops growing at its bound, and lookups past it
// still decode correctly.
func TestRecordCacheBound(t *testing.T) {
	defer func(old int64) { cacheMax = old }(cacheMax)
	cacheMax = 2
	path := filepath.Join(t.TempDir(), "geo.mmdb")
	writeDB(t, path, "1")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]string{"198.51.100.7": "eu-1", "198.51.100.200": "us-1", "203.0.113.9": "AS", "2001:db8:2::1": "ap-1"}
	for round := 0; round < 3; round++ {
		for ip, region := range want {
			if loc, ok := db.Locate(netip.MustParseAddr(ip)); !ok || loc.Region != region {
				t.Fatalf("round %d %s: %+v %v, want %s", round, ip, loc, ok, region)
			}
		}
	}
	if n := db.cur.Load().cached.Load(); n != 2 {
		t.Errorf("cache holds %d records, want the bound 2", n)
	}
}

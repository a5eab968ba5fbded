package mmdbtest

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oschwald/maxminddb-golang/v2"
)

func TestRoundTrip(t *testing.T) {
	w := New("GeoIP2-City")
	w.Description = "azgate test"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Less specific after more specific and before: both must keep longest match.
	must(w.Insert(netip.MustParsePrefix("198.51.100.128/25"), City("r-b", "NA", "US", "B", 2, 40.5, -74.25)))
	must(w.Insert(netip.MustParsePrefix("198.51.100.0/24"), City("r-a", "EU", "DE", "A", 1, 50.0, 8.5)))
	must(w.Insert(netip.MustParsePrefix("198.51.100.64/26"), City("", "AS", "JP", "", 0, 35.5, 139.75)))
	must(w.Insert(netip.MustParsePrefix("2001:db8:1::/48"), Record{"x": []any{uint64(1 << 40), int32(-5), true, float32(1.5)}, "big": strings.Repeat("z", 70000)}))
	path := filepath.Join(t.TempDir(), "t.mmdb")
	must(w.WriteFile(path))

	r, err := maxminddb.Open(path)
	must(err)
	defer r.Close()
	must(r.Verify())
	if r.Metadata.DatabaseType != "GeoIP2-City" || r.Metadata.IPVersion != 6 || r.Metadata.RecordSize != 24 {
		t.Fatalf("metadata %+v", r.Metadata)
	}
	type city struct {
		Region    string `maxminddb:"azgate_region"`
		Continent struct {
			Code string `maxminddb:"code"`
		} `maxminddb:"continent"`
		Location struct {
			Lat float64 `maxminddb:"latitude"`
			Lon float64 `maxminddb:"longitude"`
		} `maxminddb:"location"`
	}
	for _, c := range []struct {
		ip, prefix, region, cont string
		lat                      float64
	}{
		{"198.51.100.1", "198.51.100.0/26", "r-a", "EU", 50.0},
		{"198.51.100.70", "198.51.100.64/26", "", "AS", 35.5},
		{"198.51.100.200", "198.51.100.128/25", "r-b", "NA", 40.5},
		{"198.51.100.63", "198.51.100.0/26", "r-a", "EU", 50.0},
	} {
		res := r.Lookup(netip.MustParseAddr(c.ip))
		var got city
		must(res.Decode(&got))
		if !res.Found() || got.Region != c.region || got.Continent.Code != c.cont || got.Location.Lat != c.lat {
			t.Errorf("%s: found=%v %+v", c.ip, res.Found(), got)
		}
		if res.Prefix().String() != c.prefix {
			t.Errorf("%s: prefix %v want %s", c.ip, res.Prefix(), c.prefix)
		}
	}
	if res := r.Lookup(netip.MustParseAddr("192.0.2.1")); res.Found() {
		t.Errorf("192.0.2.1 found in %v", res.Prefix())
	}
	var v map[string]any
	res := r.Lookup(netip.MustParseAddr("2001:db8:1::5"))
	must(res.Decode(&v))
	if x, _ := v["x"].([]any); len(x) != 4 || x[0] != uint64(1<<40) || x[1] != int32(-5) || x[2] != true || x[3] != float32(1.5) {
		t.Errorf("array %#v", v["x"])
	}
	if s, _ := v["big"].(string); len(s) != 70000 {
		t.Errorf("big string %d bytes", len(s))
	}
	if res.Prefix().String() != "2001:db8:1::/48" {
		t.Errorf("v6 prefix %v", res.Prefix())
	}

	// mmdblookup (libmaxminddb): a second, independent reader.
	bin, err := exec.LookPath("mmdblookup")
	if err != nil {
		t.Fatal("mmdblookup is not installed: Debian package mmdb-bin (scripts/setup.sh test installs it)")
	}
	out, err := exec.Command(bin, "--file", path, "--ip", "198.51.100.70", "continent", "code").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"AS"`) {
		t.Errorf("mmdblookup: %v: %s", err, out)
	}
}

// Every record size reads back, including 28-bit records' split nibble
// (values above 2^24 need it: many nodes).
func TestRecordSizes(t *testing.T) {
	for _, size := range []int{24, 28, 32} {
		w := New("test")
		w.RecordSize = size
		if err := w.Insert(netip.MustParsePrefix("2001:db8::/32"), Record{"n": "v6"}); err != nil {
			t.Fatal(err)
		}
		if err := w.Insert(netip.MustParsePrefix("203.0.113.7/32"), Record{"n": "v4"}); err != nil {
			t.Fatal(err)
		}
		b, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		r, err := maxminddb.OpenBytes(b)
		if err != nil {
			t.Fatal(size, err)
		}
		if r.Metadata.RecordSize != uint(size) {
			t.Fatalf("record size %d want %d", r.Metadata.RecordSize, size)
		}
		if err := r.Verify(); err != nil {
			t.Fatal(size, err)
		}
		for ip, want := range map[string]string{"2001:db8::1": "v6", "203.0.113.7": "v4"} {
			var v struct {
				N string `maxminddb:"n"`
			}
			if err := r.Lookup(netip.MustParseAddr(ip)).Decode(&v); err != nil || v.N != want {
				t.Errorf("size %d %s: %q %v", size, ip, v.N, err)
			}
		}
	}
	// 28-bit with node numbers over 2^24: 2^24/128 /128 host routes would be
	// slow, so check the nibble packing through a data offset instead.
	w := New("test")
	w.RecordSize = 28
	w.Insert(netip.MustParsePrefix("2001:db8::/32"), Record{"a": strings.Repeat("y", 1<<16)})
	for i := 0; i < 300; i++ {
		w.Insert(netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32), Record{"s": strings.Repeat("x", 60000) + string(rune('a'+i%26))})
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	var v struct {
		S string `maxminddb:"s"`
	}
	if err := r.Lookup(netip.MustParseAddr("198.18.1.43")).Decode(&v); err != nil || len(v.S) != 60001 || v.S[60000] != byte('a'+299%26) {
		t.Fatalf("last record: %d bytes %v", len(v.S), err)
	}
}

package geo

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

const testMap = `
# client networks pinned to regions
198.51.100.0/24     eu-west
198.51.100.128/25   us-east  39.04 -77.49   # overrides the /24's upper half
198.51.100.200/32   ap-south
0.0.0.0/0           default
2001:db8::/32       eu-west  53.35 -6.26
2001:db8:5::/48     us-east
`

func TestPrefixMapLongestMatch(t *testing.T) {
	m, err := ParsePrefixMap(strings.NewReader(testMap), "map.txt")
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 6 {
		t.Fatalf("len %d", m.Len())
	}
	for _, c := range []struct {
		ip, region, prefix string
		coords             bool
	}{
		{"198.51.100.1", "eu-west", "198.51.100.0/24", false},
		{"198.51.100.129", "us-east", "198.51.100.128/25", true},
		{"198.51.100.200", "ap-south", "198.51.100.200/32", false},
		{"::ffff:198.51.100.200", "ap-south", "198.51.100.200/32", false},
		{"192.0.2.1", "default", "0.0.0.0/0", false},
		{"2001:db8:5:1::1", "us-east", "2001:db8:5::/48", false},
		{"2001:db8:6::1", "eu-west", "2001:db8::/32", true},
		{"2001:db8::1%eth0", "eu-west", "2001:db8::/32", true},
		{"3fff::1", "", "", false},
	} {
		loc, ok := m.Locate(netip.MustParseAddr(c.ip))
		if ok != (c.region != "") || loc.Region != c.region || loc.HasCoords != c.coords {
			t.Errorf("%s: %+v %v", c.ip, loc, ok)
			continue
		}
		if ok && loc.Prefix.String() != c.prefix {
			t.Errorf("%s: prefix %v want %s", c.ip, loc.Prefix, c.prefix)
		}
	}
	var nilMap *PrefixMap
	if _, ok := nilMap.Locate(netip.MustParseAddr("192.0.2.1")); ok {
		t.Error("nil map located")
	}
}

func TestPrefixMapValidation(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"192.0.2.0/24 a\n\n192.0.2.0/24 b", "m:3: prefix 192.0.2.0/24: duplicate of m:1"},
		{"2001:db8::/32 a\n2001:db8:0::/32 b", "m:2: prefix 2001:db8::/32: duplicate of m:1"},
		{"192.0.2.1/24 a", "m:1: prefix 192.0.2.1/24: host bits set (did you mean 192.0.2.0/24?)"},
		{"192.0.2.0/33 a", `m:1: prefix "192.0.2.0/33"`},
		{"::ffff:192.0.2.0/120 a", "IPv4-mapped IPv6, write it as IPv4"},
		{"192.0.2.0/24", "m:1: want PREFIX REGION [LAT LON], got 1 fields"},
		{"192.0.2.0/24 a 1", "got 3 fields"},
		{"192.0.2.0/24 a x 1", `m:1: latitude "x": not a number`},
		{"192.0.2.0/24 a 1 y", `m:1: longitude "y": not a number`},
		{"192.0.2.0/24 a 91 0", "m:1: coordinates 91,0"},
		{"192.0.2.0/24 a 0 -181", "m:1: coordinates 0,-181"},
		{"192.0.2.0/24 re/gion", `m:1: region "re/gion"`},
	} {
		_, err := ParsePrefixMap(strings.NewReader(c.text), "m")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.text, err, c.want)
		}
	}
	if _, err := ParsePrefixMap(strings.NewReader(strings.Repeat("x", 5000)), "m"); err == nil {
		t.Error("overlong line accepted")
	}
	// Same address, different families are different prefixes; /0 of each is fine.
	if _, err := NewPrefixMap([]PrefixEntry{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Region: "a"},
		{Prefix: netip.MustParsePrefix("::/0"), Region: "b"},
	}); err != nil {
		t.Error(err)
	}
	if _, err := NewPrefixMap([]PrefixEntry{{Region: "a"}}); err == nil || !strings.Contains(err.Error(), "entry 0: prefix: invalid") {
		t.Errorf("zero prefix: %v", err)
	}
	if _, err := NewPrefixMap([]PrefixEntry{{Prefix: netip.MustParsePrefix("192.0.2.0/24")}}); err == nil || !strings.Contains(err.Error(), "entry 0: region: empty") {
		t.Errorf("empty region: %v", err)
	}
}

func TestChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "geo.mmdb")
	writeDB(t, path, "db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err := ParsePrefixMap(strings.NewReader("198.51.100.0/26 pinned\n"), "m")
	if err != nil {
		t.Fatal(err)
	}
	var c Locator = Chain{m, db}
	for ip, want := range map[string]string{
		"198.51.100.7":   "pinned", // map first
		"198.51.100.70":  "eu-db",  // map misses, database answers
		"2001:db8:2::1":  "ap-db",
		"192.0.2.1":      "", // neither
		"2001:db8:3::77": "",
	} {
		loc, ok := c.Locate(netip.MustParseAddr(ip))
		if ok != (want != "") || loc.Region != want {
			t.Errorf("%s: %+v %v, want %q", ip, loc, ok, want)
		}
	}
	if loc, _ := c.Locate(netip.MustParseAddr("198.51.100.70")); loc.Prefix.String() != "198.51.100.0/25" {
		t.Errorf("database prefix through chain %v", loc.Prefix)
	}
	if _, ok := (Chain{nil, m}).Locate(netip.MustParseAddr("198.51.100.7")); !ok {
		t.Error("nil entry in chain stopped it")
	}
}

func BenchmarkLocate(b *testing.B) {
	path := filepath.Join(b.TempDir(), "geo.mmdb")
	writeDB(b, path, "x")
	db, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	m, _ := ParsePrefixMap(strings.NewReader(testMap), "m")
	ip := netip.MustParseAddr("198.51.100.7")
	ip6 := netip.MustParseAddr("2001:db8:1::1")
	b.Run("db-v4", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			db.Locate(ip)
		}
	})
	b.Run("db-v6", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			db.Locate(ip6)
		}
	})
	b.Run("prefixmap-v4", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			m.Locate(ip)
		}
	})
}

package geo

import (
	"fmt"
	"math/rand/v2"
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
		// The scope stops short of more specific entries inside the match.
		{"198.51.100.1", "eu-west", "198.51.100.0/25", false},
		{"198.51.100.129", "us-east", "198.51.100.128/26", true},
		{"198.51.100.200", "ap-south", "198.51.100.200/32", false},
		{"::ffff:198.51.100.200", "ap-south", "198.51.100.200/32", false},
		{"192.0.2.1", "default", "192.0.0.0/6", false},
		{"203.0.113.1", "default", "200.0.0.0/5", false},
		{"2001:db8:5:1::1", "us-east", "2001:db8:5::/48", false},
		{"2001:db8:6::1", "eu-west", "2001:db8:6::/47", true},
		{"2001:db8::1%eth0", "eu-west", "2001:db8::/46", true},
		{"2001:db8:8000::1", "eu-west", "2001:db8:8000::/33", true},
		{"3fff::1", "", "3000::/4", false}, // a miss says where the map knows nothing
	} {
		loc, ok := m.Locate(netip.MustParseAddr(c.ip))
		if ok != (c.region != "") || loc.Region != c.region || loc.HasCoords != c.coords {
			t.Errorf("%s: %+v %v", c.ip, loc, ok)
			continue
		}
		if loc.Prefix.String() != c.prefix {
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
	// The database's 198.51.100.0/25 holds the map's /26: through the
	// chain its answer only holds for the other /26.
	for ip, want := range map[string]string{
		"198.51.100.70":  "198.51.100.64/26",
		"198.51.100.7":   "198.51.100.0/26",
		"198.51.100.200": "198.51.100.128/25", // map's miss (/24 side) is wider than the record
		"192.0.2.1":      "192.0.0.0/6",       // neither knows it: a "not located" scope
		"2001:db8:2::1":  "2001:db8:2::/48",
	} {
		if loc, _ := c.Locate(netip.MustParseAddr(ip)); loc.Prefix.String() != want {
			t.Errorf("%s: prefix through chain %v, want %s", ip, loc.Prefix, want)
		}
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

// The scope property the DNS handler relies on: every address inside the
// returned Prefix gets the same answer (region and ok), for the map alone
// and for a Chain of a map and a database, on random nested maps.
func TestScopeHoldsForWholePrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "geo.mmdb")
	writeDB(t, path, "db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	base := netip.MustParseAddr("198.51.100.0").As4()
	randAddr := func() netip.Addr {
		a := base
		a[2] = byte(rng.IntN(4)) // 198.51.100.0 - 198.51.103.255
		a[2] += 100
		a[3] = byte(rng.IntN(256))
		return netip.AddrFrom4(a)
	}
	for round := 0; round < 50; round++ {
		var entries []PrefixEntry
		seen := map[netip.Prefix]bool{}
		for i := 0; i < 1+rng.IntN(12); i++ {
			p, _ := randAddr().Prefix(22 + rng.IntN(11))
			if seen[p] {
				continue
			}
			seen[p] = true
			entries = append(entries, PrefixEntry{Prefix: p, Region: fmt.Sprintf("r%d", i)})
		}
		m, err := NewPrefixMap(entries)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []Locator{m, Chain{m, db}} {
			for q := 0; q < 50; q++ {
				addr := randAddr()
				loc, ok := l.Locate(addr)
				if !loc.Prefix.IsValid() || !loc.Prefix.Contains(addr) {
					t.Fatalf("%v: prefix %v does not contain it", addr, loc.Prefix)
				}
				for s := 0; s < 20; s++ {
					other := randIn(rng, loc.Prefix)
					l2, ok2 := l.Locate(other)
					if ok2 != ok || l2.Region != loc.Region {
						t.Fatalf("map %v: %v -> %q/%v scope %v, but %v inside it -> %q/%v", entries, addr, loc.Region, ok, loc.Prefix, other, l2.Region, ok2)
					}
				}
			}
		}
	}
}

func randIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	if host := 32 - p.Bits(); host > 0 {
		v |= rng.Uint32() & (1<<uint(host) - 1)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

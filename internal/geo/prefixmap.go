package geo

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// PrefixEntry maps a client network to a region and, optionally,
// coordinates.
type PrefixEntry struct {
	Prefix    netip.Prefix
	Region    string
	Lat, Lon  float64
	HasCoords bool
	// Source names where the entry came from ("file:line") for errors.
	Source string
}

// PrefixMap is a configured prefix → region map for IPv4 and IPv6. The
// longest matching prefix wins; overlapping prefixes are allowed (a /24
// inside a /16 overrides it), the same prefix twice is refused. It is
// immutable once built and safe for concurrent lookups.
type PrefixMap struct {
	// v4/v6 hold the entries by prefix; v4len/v6len list the lengths
	// present, longest first, so a lookup tries at most 33/129 masks.
	v4, v6       map[netip.Prefix]*PrefixEntry
	v4len, v6len []int
	n            int
}

// NewPrefixMap validates entries and builds the map. Errors name the entry
// (its Source, or its index) and the field.
func NewPrefixMap(entries []PrefixEntry) (*PrefixMap, error) {
	m := &PrefixMap{v4: map[netip.Prefix]*PrefixEntry{}, v6: map[netip.Prefix]*PrefixEntry{}}
	seen4, seen6 := map[int]bool{}, map[int]bool{}
	for i := range entries {
		e := entries[i]
		where := e.Source
		if where == "" {
			where = fmt.Sprintf("entry %d", i)
		}
		if !e.Prefix.IsValid() {
			return nil, fmt.Errorf("geo: prefix map %s: prefix: invalid", where)
		}
		if e.Prefix.Addr().Is4In6() {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %v: IPv4-mapped IPv6, write it as IPv4", where, e.Prefix)
		}
		if e.Prefix.Addr().Zone() != "" {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %v: zone not allowed", where, e.Prefix)
		}
		if e.Prefix != e.Prefix.Masked() {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %v: host bits set (did you mean %v?)", where, e.Prefix, e.Prefix.Masked())
		}
		if e.Region == "" {
			return nil, fmt.Errorf("geo: prefix map %s: region: empty", where)
		}
		if !validRegion(e.Region) {
			return nil, fmt.Errorf("geo: prefix map %s: region %q: want letters, digits, '-', '_' or '.', at most 63", where, e.Region)
		}
		if e.HasCoords && !validCoords(e.Lat, e.Lon) {
			return nil, fmt.Errorf("geo: prefix map %s: coordinates %v,%v: latitude must be in [-90,90], longitude in [-180,180]", where, e.Lat, e.Lon)
		}
		tbl, seen := m.v6, seen6
		if e.Prefix.Addr().Is4() {
			tbl, seen = m.v4, seen4
		}
		if prev, dup := tbl[e.Prefix]; dup {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %v: duplicate of %s", where, e.Prefix, prev.Source)
		}
		if e.Source == "" {
			e.Source = where
		}
		tbl[e.Prefix] = &e
		seen[e.Prefix.Bits()] = true
		m.n++
	}
	m.v4len, m.v6len = lens(seen4), lens(seen6)
	return m, nil
}

func lens(seen map[int]bool) []int {
	var l []int
	for b := range seen {
		l = append(l, b)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(l)))
	return l
}

func validRegion(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Len is the number of entries.
func (m *PrefixMap) Len() int { return m.n }

// Locate implements Locator: the longest configured prefix containing addr.
// IPv4-mapped IPv6 addresses match IPv4 entries.
func (m *PrefixMap) Locate(addr netip.Addr) (Location, bool) {
	if m == nil || !addr.IsValid() {
		return Location{}, false
	}
	addr = normalize(addr)
	tbl, ls := m.v6, m.v6len
	if addr.Is4() {
		tbl, ls = m.v4, m.v4len
	}
	for _, bits := range ls {
		p, _ := addr.Prefix(bits)
		if e, ok := tbl[p]; ok {
			return Location{Region: e.Region, Lat: e.Lat, Lon: e.Lon, HasCoords: e.HasCoords, Prefix: e.Prefix}, true
		}
	}
	return Location{}, false
}

// ParsePrefixMap reads the text form, one entry a line:
//
//	# comment
//	192.0.2.0/24      eu-west
//	2001:db8:1::/48   us-east   40.7  -74.0
//
// Fields: prefix, region, then optionally latitude and longitude (both or
// neither). name is used in errors ("name:line").
func ParsePrefixMap(r io.Reader, name string) (*PrefixMap, error) {
	var entries []PrefixEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, line)
		if len(f) != 2 && len(f) != 4 {
			return nil, fmt.Errorf("geo: prefix map %s: want PREFIX REGION [LAT LON], got %d fields", where, len(f))
		}
		p, err := netip.ParsePrefix(f[0])
		if err != nil {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %q: %v", where, f[0], err)
		}
		e := PrefixEntry{Prefix: p, Region: f[1], Source: where}
		if len(f) == 4 {
			if e.Lat, err = strconv.ParseFloat(f[2], 64); err != nil {
				return nil, fmt.Errorf("geo: prefix map %s: latitude %q: not a number", where, f[2])
			}
			if e.Lon, err = strconv.ParseFloat(f[3], 64); err != nil {
				return nil, fmt.Errorf("geo: prefix map %s: longitude %q: not a number", where, f[3])
			}
			e.HasCoords = true
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("geo: prefix map %s:%d: %w", name, line+1, err)
	}
	return NewPrefixMap(entries)
}

package geo

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
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
//
// It is a binary trie per family: a lookup walks the address's bits (at most
// 32 or 128 steps, no allocation), and where the walk leaves the trie tells
// how far the answer extends, which is the ECS scope (see Locate).
type PrefixMap struct {
	v4, v6 *pmNode
	n      int
}

type pmNode struct {
	child [2]*pmNode
	entry *PrefixEntry
}

// NewPrefixMap validates entries and builds the map. Errors name the entry
// (its Source, or its index) and the field.
func NewPrefixMap(entries []PrefixEntry) (*PrefixMap, error) {
	m := &PrefixMap{v4: &pmNode{}, v6: &pmNode{}}
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
		if e.Source == "" {
			e.Source = where
		}
		n := m.v6
		if e.Prefix.Addr().Is4() {
			n = m.v4
		}
		a := e.Prefix.Addr().AsSlice()
		for i := 0; i < e.Prefix.Bits(); i++ {
			b := bit(a, i)
			if n.child[b] == nil {
				n.child[b] = &pmNode{}
			}
			n = n.child[b]
		}
		if n.entry != nil {
			return nil, fmt.Errorf("geo: prefix map %s: prefix %v: duplicate of %s", where, e.Prefix, n.entry.Source)
		}
		n.entry = &e
		m.n++
	}
	return m, nil
}

func bit(a []byte, i int) int { return int(a[i/8]>>(7-uint(i%8))) & 1 }

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

// Locate implements Locator: the region of the longest configured prefix
// containing addr. IPv4-mapped IPv6 addresses match IPv4 entries.
//
// Location.Prefix is the largest network around addr with the same answer:
// the matched entry's prefix, lengthened past any more specific entry inside
// it (with 198.51.100.0/24 and 198.51.100.128/25 configured, 198.51.100.1
// gets 198.51.100.0/25, not the /24, because the /24 answer does not hold
// for the /25). On a miss, ok is false and Prefix is the network around
// addr the map knows nothing about, which a Chain uses to narrow the next
// locator's prefix.
func (m *PrefixMap) Locate(addr netip.Addr) (Location, bool) {
	if m == nil || !addr.IsValid() {
		return Location{}, false
	}
	addr = normalize(addr)
	n := m.v6
	if addr.Is4() {
		n = m.v4
	}
	a := addr.AsSlice()
	max := addr.BitLen()
	best := n.entry
	depth := 0
	for depth < max {
		c := n.child[bit(a, depth)]
		if c == nil {
			break
		}
		n = c
		depth++
		if n.entry != nil {
			best = n.entry
		}
	}
	// Addresses sharing addr's first depth bits reach n. If n has a
	// child on the other side, they split there, one bit deeper.
	if depth < max && (n.child[0] != nil || n.child[1] != nil) {
		depth++
	}
	scope, _ := addr.Prefix(depth)
	if best == nil {
		return Location{Prefix: scope}, false
	}
	return Location{Region: best.Region, Lat: best.Lat, Lon: best.Lon, HasCoords: best.HasCoords, Prefix: scope}, true
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

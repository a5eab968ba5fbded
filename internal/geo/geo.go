// Package geo locates DNS clients for the GSLB: a MaxMind-format database
// (read with maxminddb-golang, swapped atomically when the file is replaced),
// a configured prefix → region map, and a Chain that asks the map first.
//
// The GSLB's DNS handler consumes it through Locator. Location.Prefix is the
// covering network actually used for the answer, which the handler returns as
// the ECS scope.
package geo

import (
	"net/netip"
)

// Location is where a client is, as far as the GSLB is concerned.
type Location struct {
	// Region is the region name the client maps to ("" when only
	// coordinates are known).
	Region string
	// Lat and Lon are degrees; meaningful only when HasCoords is true
	// (0,0 is a real place, so it cannot mean "unknown").
	Lat, Lon float64
	// HasCoords says Lat/Lon came from the source.
	HasCoords bool
	// Prefix is the covering network actually used: the largest network
	// around the client for which the answer is the same (the database
	// record's network; the prefix map's entry, narrowed past more
	// specific entries inside it). The DNS handler returns its length as
	// the ECS scope. IPv4 clients (including IPv4-mapped IPv6 ones) get an
	// IPv4 prefix.
	Prefix netip.Prefix
}

// Locator finds a client's location. ok is false when the source knows
// nothing about addr (no record, or a record with neither region nor
// coordinates); then only Location.Prefix may be set: if valid, it is the
// network around addr the source knows nothing about (the scope of a "not
// located" answer); invalid means unknown (use the full address).
type Locator interface {
	Locate(addr netip.Addr) (Location, bool)
}

// normalize drops the zone and unmaps IPv4-mapped IPv6 addresses, so
// ::ffff:192.0.2.1 is located (and scoped) as 192.0.2.1.
func normalize(addr netip.Addr) netip.Addr {
	return addr.WithZone("").Unmap()
}

// Chain asks each locator in turn and returns the first answer: a
// configured prefix map first, then the database.
//
// The answer's Prefix is narrowed by the locators that missed before it: a
// database record 198.51.100.0/25 behind a map entry 198.51.100.0/26 must
// not tell resolvers that its answer holds for the whole /25. A locator that
// misses without saying where (invalid Prefix) narrows to the full address.
type Chain []Locator

// Locate implements Locator.
func (c Chain) Locate(addr netip.Addr) (Location, bool) {
	if !addr.IsValid() {
		return Location{}, false
	}
	addr = normalize(addr)
	minBits := 0 // the answer holds at most for addr/minBits
	for _, l := range c {
		if l == nil {
			continue
		}
		loc, ok := l.Locate(addr)
		bits := addr.BitLen()
		if loc.Prefix.IsValid() && loc.Prefix.Addr().BitLen() == addr.BitLen() {
			bits = loc.Prefix.Bits()
		}
		if bits > minBits {
			minBits = bits
		}
		if ok {
			loc.Prefix, _ = addr.Prefix(minBits)
			return loc, true
		}
	}
	if minBits == 0 && len(c) == 0 {
		return Location{}, false
	}
	p, _ := addr.Prefix(minBits)
	return Location{Prefix: p}, false
}

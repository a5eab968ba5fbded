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
	// Prefix is the covering network the answer came from: the database
	// record's network or the prefix map's entry. IPv4 clients (including
	// IPv4-mapped IPv6 ones) get an IPv4 prefix.
	Prefix netip.Prefix
}

// Locator finds a client's location. ok is false when the source knows
// nothing about addr (no record, or a record with neither region nor
// coordinates); Location is then zero.
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
type Chain []Locator

// Locate implements Locator.
func (c Chain) Locate(addr netip.Addr) (Location, bool) {
	for _, l := range c {
		if l == nil {
			continue
		}
		if loc, ok := l.Locate(addr); ok {
			return loc, true
		}
	}
	return Location{}, false
}

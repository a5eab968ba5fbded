package gslbbench

import (
	"net/netip"

	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/gslb"
)

// gslbLocator adapts a geo.Locator to gslb.Locator.
//
// TO BE REMOVED after the i11-gslbrole merge: that branch makes gslb take
// a geo.Locator directly, and this becomes `return l`.
func gslbLocator(l geo.Locator) gslb.Locator { return geoAdapter{l} }

type geoAdapter struct{ l geo.Locator }

func (g geoAdapter) Locate(a netip.Addr) gslb.Location {
	loc, ok := g.l.Locate(a)
	bits := a.Unmap().BitLen()
	if loc.Prefix.IsValid() {
		bits = loc.Prefix.Bits()
	}
	return gslb.Location{Found: ok, Region: loc.Region, HasCoords: loc.HasCoords, Lat: loc.Lat, Lon: loc.Lon, Bits: bits}
}

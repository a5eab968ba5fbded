// Command mkgeodb writes a GeoIP2-City-shaped test database (documentation
// ranges only) for gdnsd's geoip plugin and azgate's GSLB in benchmarks:
//
//	go run ./internal/geo/mmdbtest/cmd/mkgeodb -o /tmp/gslb-test.mmdb
//
// Three regions, each with an IPv4 /24 and an IPv6 /48 and distinct
// continents and coordinates, so both "map by continent/country" and
// "nearest by coordinates" configurations resolve them the same way.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"

	"github.com/azgate/azgate/internal/geo/mmdbtest"
)

// Regions are the test database's regions and their networks.
var regions = []struct {
	name, continent, country, city string
	geonameID                      uint32
	lat, lon                       float64
	nets                           []string
}{
	{"eu-west", "EU", "IE", "Dublin", 2964574, 53.35, -6.26, []string{"198.51.100.0/24", "2001:db8:1::/48"}},
	{"us-east", "NA", "US", "Ashburn", 4744870, 39.04, -77.49, []string{"203.0.113.0/24", "2001:db8:2::/48"}},
	{"ap-south", "AS", "SG", "Singapore", 1880252, 1.29, 103.85, []string{"192.0.2.0/24", "2001:db8:3::/48"}},
}

func main() {
	out := flag.String("o", "gslb-test.mmdb", "output file")
	flag.Parse()
	w := mmdbtest.New("GeoIP2-City")
	w.Description = "azgate GSLB test database (documentation ranges)"
	for _, r := range regions {
		for _, n := range r.nets {
			rec := mmdbtest.City(r.name, r.continent, r.country, r.city, r.geonameID, r.lat, r.lon)
			if err := w.Insert(netip.MustParsePrefix(n), rec); err != nil {
				fmt.Fprintln(os.Stderr, "mkgeodb:", err)
				os.Exit(1)
			}
		}
	}
	if err := w.WriteFile(*out); err != nil {
		fmt.Fprintln(os.Stderr, "mkgeodb:", err)
		os.Exit(1)
	}
	for _, r := range regions {
		fmt.Printf("%-9s %s %s %v %.2f,%.2f\n", r.name, r.continent, r.country, r.nets, r.lat, r.lon)
	}
}

// Package gslbbench is `azgate-lab bench gslb`: azgate's GSLB DNS server
// (internal/gslb/dnsserver with a geo.DB locator and probe health) next to gdnsd 3.x
// (its geoip plugin on the same MaxMind database), both serving the same
// zone on loopback in the same run. It measures queries/s, latency and CPU
// per query with dnsperf sending EDNS Client Subnet, and the failover time
// from a regional VIP dying to the answers moving, with the same probe
// settings on both sides (docs/bench-gslb.md).
package gslbbench

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/geo/mmdbtest"
	"github.com/azgate/azgate/internal/gslb"
)

// Region is one region of the benchmark: its client networks in the test
// MaxMind database, its coordinates, and the loopback address of its VIP
// (a TCP listener the bench owns, which both servers probe).
type Region struct {
	Name, Continent, Country, City string
	GeonameID                      uint32
	Lat, Lon                       float64
	Client                         netip.Prefix // IPv4 client network (documentation range)
	Client6                        netip.Prefix
	VIP                            netip.Addr
	// Next is the region the answer must move to when this one's VIP is
	// down (nearest by great-circle distance; gdnsd's map lists the same
	// order).
	Next string
}

// Regions are the three regions, the same networks and coordinates as
// internal/geo/mmdbtest/cmd/mkgeodb (docs/geo.md). VIPs are loopback
// addresses (127.0.0.0/8 is all on lo on Linux), so nothing leaves the host.
var Regions = []Region{
	{"eu-west", "EU", "IE", "Dublin", 2964574, 53.35, -6.26,
		netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:1::/48"),
		netip.MustParseAddr("127.77.0.11"), "us-east"},
	{"us-east", "NA", "US", "Ashburn", 4744870, 39.04, -77.49,
		netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:2::/48"),
		netip.MustParseAddr("127.77.0.12"), "eu-west"},
	{"ap-south", "AS", "SG", "Singapore", 1880252, 1.29, 103.85,
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:3::/48"),
		netip.MustParseAddr("127.77.0.13"), "eu-west"},
}

// Addresses of the two DNS servers (ports are picked free at run time).
var (
	OurAddr   = netip.MustParseAddr("127.77.0.2")
	GdnsdAddr = netip.MustParseAddr("127.77.0.3")
)

// Zone contents shared by both servers.
const (
	Origin   = "example."
	GSLBName = "pathd.example."
	GSLBTTL  = 30
	// SOA TTL = minimum: gdnsd (zones_strict_data) refuses a SOA TTL
	// above the negative-caching TTL.
	SOATTL    = 300
	StaticTTL = 300
	NSTTL     = 3600
)

func region(name string) *Region {
	for i := range Regions {
		if Regions[i].Name == name {
			return &Regions[i]
		}
	}
	return nil
}

// WriteMMDB writes the test MaxMind database (GeoIP2-City shape) to path.
func WriteMMDB(path string) error {
	w := mmdbtest.New("GeoIP2-City")
	w.Description = "azgate bench gslb test database (documentation ranges)"
	for _, r := range Regions {
		rec := mmdbtest.City(r.Name, r.Continent, r.Country, r.City, r.GeonameID, r.Lat, r.Lon)
		for _, p := range []netip.Prefix{r.Client, r.Client6} {
			if err := w.Insert(p, rec); err != nil {
				return fmt.Errorf("test database: %s: %w", p, err)
			}
		}
	}
	return w.WriteFile(path)
}

// OurZone is the zone azgate serves: example. with static records and
// pathd.example. as a nearest-policy GSLB record over the three VIPs.
// Order follows gdnsd's default datacenter order (used for clients in no
// known network).
func OurZone() gslb.Config {
	var ts []gslb.Target
	for i, r := range Regions {
		ts = append(ts, gslb.Target{VIP: r.VIP, Region: r.Name, Lat: r.Lat, Lon: r.Lon, Order: i})
	}
	return gslb.Config{Zones: []gslb.Zone{{
		Origin: Origin,
		SOA: gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 1,
			Refresh: 7200, Retry: 3600, Expire: 1209600, Minimum: SOATTL, TTL: SOATTL},
		NS:    []string{"ns1.example.", "ns2.example."},
		NSTTL: NSTTL,
		Records: []gslb.Record{
			{Name: "ns1", Type: "A", TTL: StaticTTL, Value: "192.0.2.53"},
			{Name: "ns2", Type: "A", TTL: StaticTTL, Value: "198.51.100.53"},
			{Name: "www", Type: "A", TTL: StaticTTL, Value: "192.0.2.80"},
			{Name: "www", Type: "TXT", TTL: StaticTTL, Value: "azgate bench"},
		},
		GSLB: []gslb.GSLBRecord{{Name: "pathd", TTL: GSLBTTL, Policy: gslb.PolicyNearest,
			Targets: ts, AllDown: gslb.AllDownFailOpenNearest}},
	}}}
}

// ProbeSettings are the health-check settings both servers use. gdnsd
// takes whole seconds, interval at least 2 and timeout below interval.
type ProbeSettings struct {
	Port     uint16
	Interval time.Duration
	Timeout  time.Duration
	Rise     int // gdnsd up_thresh
	// Fall is gdnsd's down_thresh, with ok_thresh 1: one success resets
	// gdnsd's failure counter, so it too goes down after Fall failures in
	// a row, as internal/probe does.
	Fall int
}

// Validate checks what both servers can express.
func (p ProbeSettings) Validate() error {
	whole := func(d time.Duration) bool { return d%time.Second == 0 }
	switch {
	case !whole(p.Interval) || p.Interval < 2*time.Second || p.Interval > 255*time.Second:
		return fmt.Errorf("probe interval %v: must be whole seconds, 2s..255s (gdnsd's range)", p.Interval)
	case !whole(p.Timeout) || p.Timeout < time.Second || p.Timeout >= p.Interval:
		return fmt.Errorf("probe timeout %v: must be whole seconds, at least 1s and below the interval %v (gdnsd's rule)", p.Timeout, p.Interval)
	case p.Rise < 1 || p.Rise > 65535:
		return fmt.Errorf("probe rise %d: must be 1..65535", p.Rise)
	case p.Fall < 1 || p.Fall > 65535:
		return fmt.Errorf("probe fall %d: must be 1..65535", p.Fall)
	}
	return nil
}

// WriteGdnsdConfig writes gdnsd's configuration directory under dir: the
// config (listener, one UDP and one TCP thread, run and state directories
// under dir), the zone file and the extfile heartbeat. Returns the
// config directory and the heartbeat file.
func WriteGdnsdConfig(dir string, listen netip.AddrPort, mmdb string, p ProbeSettings, threads int) (confDir, heartbeat string, err error) {
	confDir = filepath.Join(dir, "gdnsd")
	for _, d := range []string{"zones", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(confDir, d), 0o700); err != nil {
			return "", "", err
		}
	}
	heartbeat = filepath.Join(dir, "heartbeat")
	if err := WriteHeartbeat(heartbeat, nil); err != nil {
		return "", "", err
	}
	var dcs, dcmap, order []string
	for _, r := range Regions {
		dcs = append(dcs, r.Name)
		dcmap = append(dcmap, fmt.Sprintf("%s => %s", r.Name, r.VIP))
		// The continent's list: its own region, then the others by
		// distance from it (what our nearest policy does).
		list := []string{r.Name, r.Next}
		for _, o := range Regions {
			if o.Name != r.Name && o.Name != r.Next {
				list = append(list, o.Name)
			}
		}
		order = append(order, fmt.Sprintf("        %s => [ %s ]", r.Continent, strings.Join(list, ", ")))
	}
	secs := func(d time.Duration) int { return int(d / time.Second) }
	thresh := fmt.Sprintf("interval => %d, timeout => %d, up_thresh => %d, ok_thresh => 1, down_thresh => %d",
		secs(p.Interval), secs(p.Timeout), p.Rise, p.Fall)
	cfg := fmt.Sprintf(`# written by azgate bench gslb
options => {
  listen => [ %s ]
  udp_threads => %d
  tcp_threads => %d
  run_dir => %s
  state_dir => %s
  zones_strict_data => true
}
service_types => {
  vip_tcp => { plugin => tcp_connect, port => %d, %s }
  heartbeat => { plugin => extfile, file => %s, %s }
}
plugins => { geoip => {
  maps => {
    regions => {
      geoip2_db => %s
      datacenters => [ %s ]
      map => {
%s
      }
    }
  }
  resources => {
    pathd => {
      map => regions
      service_types => [ vip_tcp, heartbeat ]
      dcmap => { %s }
    }
  }
}}
`, listen, threads, threads, filepath.Join(confDir, "run"), filepath.Join(confDir, "state"),
		p.Port, thresh, heartbeat, thresh, mmdb, strings.Join(dcs, ", "), strings.Join(order, "\n"), strings.Join(dcmap, ", "))
	if err := os.WriteFile(filepath.Join(confDir, "config"), []byte(cfg), 0o600); err != nil {
		return "", "", err
	}
	zone := fmt.Sprintf(`$TTL %d
@ %d SOA ns1.example. hostmaster.example. 1 7200 3600 1209600 %d
@ %d NS ns1.example.
@ %d NS ns2.example.
ns1 A 192.0.2.53
ns2 A 198.51.100.53
www A 192.0.2.80
www TXT "azgate bench"
pathd %d DYNA geoip!pathd
`, StaticTTL, SOATTL, SOATTL, NSTTL, NSTTL, GSLBTTL)
	if err := os.WriteFile(filepath.Join(confDir, "zones", "example"), []byte(zone), 0o600); err != nil {
		return "", "", err
	}
	return confDir, heartbeat, nil
}

// WriteHeartbeat writes gdnsd's extfile heartbeat: every VIP UP except
// those in down. It writes a temporary file and renames it over the path
// so gdnsd never reads half a file.
func WriteHeartbeat(path string, down map[netip.Addr]bool) error {
	var b strings.Builder
	for _, r := range Regions {
		st := "UP"
		if down[r.VIP] {
			st = "DOWN"
		}
		fmt.Fprintf(&b, "%s => %s\n", r.VIP, st)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

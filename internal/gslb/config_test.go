package gslb

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The fixture is internal/gslb/dnsserver's handler test configuration.

var (
	vipEU  = netip.MustParseAddr("198.51.100.1")
	vipUS  = netip.MustParseAddr("198.51.100.2")
	vipAP  = netip.MustParseAddr("198.51.100.3")
	vip6EU = netip.MustParseAddr("2001:db8::1")
	vip6US = netip.MustParseAddr("2001:db8::2")
	vipW1  = netip.MustParseAddr("203.0.113.1")
	vipW3  = netip.MustParseAddr("203.0.113.2")
	vipF1  = netip.MustParseAddr("203.0.113.10")
	vipF2  = netip.MustParseAddr("203.0.113.11")
	vipF3  = netip.MustParseAddr("203.0.113.12")
)

func regionTargets() []Target {
	return []Target{
		{VIP: vipEU, Region: "eu", Lat: 50.1, Lon: 8.7, Order: 1},   // Frankfurt
		{VIP: vipUS, Region: "us", Lat: 40.7, Lon: -74.0, Order: 2}, // New York
		{VIP: vipAP, Region: "ap", Lat: 1.35, Lon: 103.8, Order: 3}, // Singapore
		{VIP: vip6EU, Region: "eu", Lat: 50.1, Lon: 8.7, Order: 1},
		{VIP: vip6US, Region: "us", Lat: 40.7, Lon: -74.0, Order: 2},
	}
}

func testConfig() Config {
	recs := []Record{
		{Name: "ns1", Type: "A", Value: "192.0.2.53"},
		{Name: "www", Type: "A", Value: "192.0.2.10"},
		{Name: "www", Type: "AAAA", Value: "2001:db8::10"},
		{Name: "alias", Type: "CNAME", Value: "www"},
		{Name: "@", Type: "MX", Value: "10 mail.example."},
		{Name: "@", Type: "TXT", Value: "v=spf1 -all"},
		{Name: "a.b", Type: "A", Value: "192.0.2.11"},
		{Name: "pathd", Type: "TXT", Value: "gslb name with a TXT too"},
	}
	for i := range 40 { // ~4 KB of TXT: over 512 and 1232 bytes
		recs = append(recs, Record{Name: "big", Type: "TXT", Value: fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 90))})
	}
	return Config{Zones: []Zone{{
		Origin: "Example.",
		SOA: SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 7,
			Refresh: 3600, Retry: 600, Expire: 86400, Minimum: 60},
		NS:      []string{"ns1.example.", "ns2.example."},
		Records: recs,
		GSLB: []GSLBRecord{
			{Name: "pathd", Policy: PolicyNearest, Targets: regionTargets()},
			{Name: "strict", Policy: PolicyNearest, AllDown: AllDownServfail, Targets: regionTargets()},
			{Name: "w", Policy: PolicyWeighted, Targets: []Target{
				{VIP: vipW1, Region: "eu", Weight: 1}, {VIP: vipW3, Region: "us", Weight: 3}}},
			{Name: "fo", Policy: PolicyFailover, TTL: 10, Targets: []Target{
				{VIP: vipF2, Region: "us", Order: 2, Lat: 40.7, Lon: -74},
				{VIP: vipF1, Region: "eu", Order: 1, Lat: 50.1, Lon: 8.7},
				{VIP: vipF3, Region: "ap", Order: 3, Lat: 1.35, Lon: 103.8}}},
			{Name: "fo-strict", Policy: PolicyFailover, AllDown: AllDownServfail, Targets: []Target{
				{VIP: vipF1, Region: "eu", Order: 1}}},
		},
	}}}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"bad origin", func(c *Config) { c.Zones[0].Origin = "exa mple..." }, "origin"},
		{"no NS", func(c *Config) { c.Zones[0].NS = nil }, "ns: at least one"},
		{"bad A", func(c *Config) { c.Zones[0].Records[0].Value = "2001:db8::1" }, `records[0] ("ns1" A): value`},
		{"bad type", func(c *Config) { c.Zones[0].Records[0].Type = "SRV" }, "type:"},
		{"outside zone", func(c *Config) { c.Zones[0].Records[0].Name = "x.example.org." }, "outside zone"},
		{"CNAME with data", func(c *Config) {
			c.Zones[0].Records = append(c.Zones[0].Records, Record{Name: "www", Type: "CNAME", Value: "x"})
		}, "already has other records"},
		{"bad MX", func(c *Config) { c.Zones[0].Records[4].Value = "mail.example." }, "PREFERENCE EXCHANGE"},
		{"bad policy", func(c *Config) { c.Zones[0].GSLB[0].Policy = "random" }, `gslb[0] ("pathd"): policy`},
		{"bad allDown", func(c *Config) { c.Zones[0].GSLB[0].AllDown = "nothing" }, "allDown"},
		{"no targets", func(c *Config) { c.Zones[0].GSLB[0].Targets = nil }, "targets: at least one"},
		{"zero weight", func(c *Config) { c.Zones[0].GSLB[2].Targets[0].Weight = 0 }, "targets[0] (203.0.113.1): weight"},
		{"bad lat", func(c *Config) { c.Zones[0].GSLB[0].Targets[1].Lat = 91 }, "targets[1] (198.51.100.2): lat"},
		{"no region", func(c *Config) { c.Zones[0].GSLB[0].Targets[1].Region = "" }, "region: required"},
		{"no VIP", func(c *Config) { c.Zones[0].GSLB[0].Targets[1].VIP = netip.Addr{} }, "targets[1]: vip"},
		{"duplicate VIP", func(c *Config) { c.Zones[0].GSLB[0].Targets[1].VIP = vipEU }, "listed twice"},
		{"GSLB over static A", func(c *Config) { c.Zones[0].GSLB[0].Name = "www" }, "static A record"},
		{"GSLB at apex", func(c *Config) { c.Zones[0].GSLB[0].Name = "@" }, "apex"},
		{"duplicate zone", func(c *Config) { c.Zones = append(c.Zones, c.Zones[0]) }, "duplicate zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			tc.edit(&c)
			_, err := Compile(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCatalogLookup: Find picks the zone with the longest origin holding a
// name, and ServedGSLB leaves out the GSLB records such a child zone
// shadows (the DNS server's fast path indexes exactly those it yields).
func TestCatalogLookup(t *testing.T) {
	cfg := testConfig()
	cfg.Zones = append(cfg.Zones, Zone{Origin: "Sub.Example.", NS: []string{"ns1.example."},
		SOA:  SOA{MName: "ns1.example.", RName: "h.example.", Serial: 99, Minimum: 30},
		GSLB: []GSLBRecord{{Name: "g", Policy: PolicyFailover, Targets: []Target{{VIP: vipF1, Region: "eu"}}}}})
	cfg.Zones[0].GSLB = append(cfg.Zones[0].GSLB, GSLBRecord{Name: "g.sub", Policy: PolicyFailover,
		Targets: []Target{{VIP: vipF2, Region: "us"}}})
	c, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"www.example.": "example.", "g.sub.example.": "sub.example.",
		"x.y.sub.example.": "sub.example.", "example.": "example."} {
		if z := c.Find(name); z == nil || z.Origin() != want {
			t.Errorf("Find(%q) = %v, want zone %q", name, z, want)
		}
	}
	if z := c.Find("example.org."); z != nil {
		t.Errorf("Find(example.org.) = zone %q, want none", z.Origin())
	}
	z := c.Find("a.b.example.")
	if !z.Exists("a.b.example.") || !z.Exists("b.example.") || z.Exists("c.example.") {
		t.Errorf("Exists: a.b %v, b (empty non-terminal) %v, c %v", z.Exists("a.b.example."), z.Exists("b.example."), z.Exists("c.example."))
	}
	if got := len(z.Static("www.example.")); got != 2 {
		t.Errorf("Static(www) holds %d records, want 2", got)
	}
	if g := z.GSLB("fo.example."); g == nil || g.TTL() != 10 {
		t.Errorf("GSLB(fo) = %v, want the record with TTL 10", g)
	}
	if s := z.NegativeSOA(); s.Header().Ttl != 60 || z.SOA().Hdr.Ttl != 3600 {
		t.Errorf("negative SOA TTL %d (want min(3600, 60)), SOA TTL %d", s.Header().Ttl, z.SOA().Hdr.Ttl)
	}
	var served []string
	for name, g := range c.ServedGSLB() {
		if g.Name() != name {
			t.Errorf("ServedGSLB: %q yields a record named %q", name, g.Name())
		}
		served = append(served, name)
	}
	slices.Sort(served)
	want := []string{"fo-strict.example.", "fo.example.", "g.sub.example.", "pathd.example.", "strict.example.", "w.example."}
	if !slices.Equal(served, want) {
		t.Errorf("ServedGSLB %v, want %v", served, want)
	}
	// g.sub.example. is the child zone's record, not the shadowed parent's.
	ch := c.Find("g.sub.example.").GSLB("g.sub.example.").Choose(false, func() *ClientLoc { return nil }, AllUp{}, 1)
	if !ch.OK || ch.Target.VIP != vipF1 {
		t.Errorf("g.sub.example. answers %+v, want the child zone's %v", ch, vipF1)
	}
}

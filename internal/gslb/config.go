// Package gslb is azgate's authoritative DNS core for global server load
// balancing (issue 11, part 1): zones with SOA, NS and static records, and
// GSLB records whose answer is chosen per query among regional VIPs by a
// policy (nearest, weighted, failover), using the client's location (EDNS
// Client Subnet, RFC 7871, else the resolver's address) and target health.
//
// The package is the catalog and the policies, with no server: config
// types are plain Go validated by Compile into a Catalog (zones, records,
// GSLB records: what gslbplan checks at write time), and CatalogGSLB.Choose
// is the policy. Two small interfaces are at its edge: geo.Locator
// (address → region, coordinates and the covering prefix, the ECS scope;
// internal/geo has the MaxMind database, the prefix map and their Chain)
// and Health (VIP → up/down; fed by internal/probe). The DNS server that
// answers from a Catalog (handler, batched UDP loop, wire fast path, TCP)
// is internal/gslb/dnsserver.
package gslb

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Config is everything the DNS server answers for.
type Config struct {
	Zones []Zone
}

// Zone is one authoritative zone.
type Zone struct {
	// Origin is the zone apex, e.g. "example." (a trailing dot is added
	// when missing; matching is case-insensitive).
	Origin  string
	SOA     SOA
	NS      []string // name servers of the zone (absolute names), at least one
	NSTTL   uint32   // TTL of the apex NS set; 0 means 3600
	Records []Record // static records
	GSLB    []GSLBRecord
}

// SOA holds the apex SOA fields (RFC 1035 §3.3.13). Minimum is also the
// negative-caching TTL (RFC 2308 §4).
type SOA struct {
	MName   string // primary name server
	RName   string // mailbox of the person responsible, as a name ("hostmaster.example.")
	Serial  uint32
	Refresh uint32
	Retry   uint32
	Expire  uint32
	Minimum uint32
	TTL     uint32 // TTL of the SOA record itself; 0 means 3600
}

// Record is one static record. Value is the RDATA in presentation form:
// "192.0.2.1" (A), "2001:db8::1" (AAAA), "target.example." (CNAME),
// free text (TXT, split into 255-byte strings), "10 mx.example." (MX).
type Record struct {
	Name  string // absolute, or relative to the origin ("www"), "@" for the apex
	Type  string // A, AAAA, CNAME, TXT, MX
	TTL   uint32 // 0 means 300
	Value string
}

// Policy chooses among a GSLB record's healthy targets.
type Policy string

const (
	// PolicyNearest: a target in the client's region first, else the one
	// nearest by great-circle distance. Depends on location.
	PolicyNearest Policy = "nearest"
	// PolicyWeighted: a target drawn by weight, deterministic per query ID.
	// Does not depend on location.
	PolicyWeighted Policy = "weighted"
	// PolicyFailover: the healthy target with the lowest Order.
	// Does not depend on location.
	PolicyFailover Policy = "failover"
)

// AllDown says what to answer when no target of a record is healthy.
type AllDown string

const (
	// AllDownFailOpenNearest answers with the nearest target, ignoring
	// health: a probe outage must not take the name down (the default).
	AllDownFailOpenNearest AllDown = "fail-open-nearest"
	// AllDownServfail answers SERVFAIL so resolvers try again later.
	AllDownServfail AllDown = "servfail"
)

// GSLBRecord is a name whose A/AAAA answer is chosen per query.
type GSLBRecord struct {
	Name    string // absolute or relative to the origin, like Record.Name
	TTL     uint32 // 0 means 30: short, so a failover reaches clients quickly
	Policy  Policy
	Targets []Target
	AllDown AllDown // "" means fail-open-nearest
}

// Target is one regional VIP of a GSLB record.
type Target struct {
	VIP    netip.Addr // IPv4 answers A queries, IPv6 answers AAAA queries
	Region string
	Weight uint32  // weighted policy: relative share, > 0
	Lat    float64 // degrees, -90..90
	Lon    float64 // degrees, -180..180
	Order  int     // failover policy: lower is preferred; also breaks ties
}

// Default TTLs for fields left at zero.
const (
	defaultSOATTL    = 3600
	defaultNSTTL     = 3600
	DefaultRecordTTL = 300 // exported: the DNS server's synthesised records use it too
	defaultGSLBTTL   = 30
	// MaxTargets bounds a GSLB record's targets: selection is linear.
	MaxTargets = 64
)

// Compile validates cfg and builds a Catalog. Errors name the zone, the
// record and the field at fault.
func Compile(cfg Config) (*Catalog, error) {
	c := &Catalog{}
	seen := map[string]bool{}
	for i, zc := range cfg.Zones {
		z, err := compileZone(zc)
		if err != nil {
			return nil, fmt.Errorf("zones[%d] (%q): %w", i, zc.Origin, err)
		}
		if seen[z.origin] {
			return nil, fmt.Errorf("zones[%d]: origin %q: duplicate zone", i, z.origin)
		}
		seen[z.origin] = true
		c.zones = append(c.zones, z)
	}
	// Longest origin first: "a.example." must win over "example." for a
	// name in both (a child zone configured on the same server).
	for i := 1; i < len(c.zones); i++ {
		for j := i; j > 0 && dns.CountLabel(c.zones[j].origin) > dns.CountLabel(c.zones[j-1].origin); j-- {
			c.zones[j], c.zones[j-1] = c.zones[j-1], c.zones[j]
		}
	}
	return c, nil
}

func canonical(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	n := dns.CanonicalName(name)
	if _, ok := dns.IsDomainName(n); !ok {
		return "", fmt.Errorf("%q is not a valid domain name", name)
	}
	return n, nil
}

// ownerName resolves a record name relative to origin and checks it is in
// the zone.
func ownerName(name, origin string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if name == "@" {
		return origin, nil
	}
	if !strings.HasSuffix(name, ".") {
		if origin == "." {
			name += "."
		} else {
			name = name + "." + origin
		}
	}
	n, err := canonical(name)
	if err != nil {
		return "", err
	}
	if !dns.IsSubDomain(origin, n) {
		return "", fmt.Errorf("%q is outside zone %q", n, origin)
	}
	return n, nil
}

func orDefault(v, d uint32) uint32 {
	if v == 0 {
		return d
	}
	return v
}

func compileZone(zc Zone) (*CatalogZone, error) {
	origin, err := canonical(zc.Origin)
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	z := &CatalogZone{origin: origin, names: map[string]bool{origin: true},
		static: map[string][]dns.RR{}, gslb: map[string]*CatalogGSLB{}}
	mname, err := canonical(zc.SOA.MName)
	if err != nil {
		return nil, fmt.Errorf("soa.mname: %w", err)
	}
	rname, err := canonical(zc.SOA.RName)
	if err != nil {
		return nil, fmt.Errorf("soa.rname: %w", err)
	}
	z.soa = &dns.SOA{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET,
		Ttl: orDefault(zc.SOA.TTL, defaultSOATTL)}, Ns: mname, Mbox: rname, Serial: zc.SOA.Serial,
		Refresh: zc.SOA.Refresh, Retry: zc.SOA.Retry, Expire: zc.SOA.Expire, Minttl: zc.SOA.Minimum}
	if len(zc.NS) == 0 {
		return nil, errors.New("ns: at least one name server is required")
	}
	for i, n := range zc.NS {
		cn, err := canonical(n)
		if err != nil {
			return nil, fmt.Errorf("ns[%d]: %w", i, err)
		}
		z.ns = append(z.ns, &dns.NS{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeNS,
			Class: dns.ClassINET, Ttl: orDefault(zc.NSTTL, defaultNSTTL)}, Ns: cn})
	}
	cnames := map[string]bool{}
	for i, rc := range zc.Records {
		rr, err := compileRecord(rc, origin)
		if err != nil {
			return nil, fmt.Errorf("records[%d] (%q %s): %w", i, rc.Name, rc.Type, err)
		}
		name := rr.Header().Name
		if rr.Header().Rrtype == dns.TypeCNAME {
			// RFC 1034 §3.6.2: a CNAME owner has no other data.
			if name == origin {
				return nil, fmt.Errorf("records[%d] (%q CNAME): name: a CNAME cannot be at the zone apex", i, rc.Name)
			}
			if len(z.static[name]) > 0 {
				return nil, fmt.Errorf("records[%d] (%q CNAME): name: %q already has other records", i, rc.Name, name)
			}
			cnames[name] = true
		} else if cnames[name] {
			return nil, fmt.Errorf("records[%d] (%q %s): name: %q already has a CNAME", i, rc.Name, rc.Type, name)
		}
		z.static[name] = append(z.static[name], rr)
		z.addName(name)
	}
	for i, gc := range zc.GSLB {
		g, err := compileGSLB(gc, origin)
		if err != nil {
			return nil, fmt.Errorf("gslb[%d] (%q): %w", i, gc.Name, err)
		}
		if g.name == origin {
			return nil, fmt.Errorf("gslb[%d] (%q): name: a GSLB record cannot be at the zone apex", i, gc.Name)
		}
		if z.gslb[g.name] != nil {
			return nil, fmt.Errorf("gslb[%d] (%q): name: duplicate GSLB record %q", i, gc.Name, g.name)
		}
		for _, rr := range z.static[g.name] {
			t := rr.Header().Rrtype
			if t == dns.TypeA || t == dns.TypeAAAA || t == dns.TypeCNAME {
				return nil, fmt.Errorf("gslb[%d] (%q): name: %q also has a static %s record", i, gc.Name, g.name, dns.TypeToString[t])
			}
		}
		z.gslb[g.name] = g
		z.addName(g.name)
	}
	return z, nil
}

// addName marks name and every ancestor up to the origin as existing.
func (z *CatalogZone) addName(name string) {
	for n := name; n != z.origin && dns.IsSubDomain(z.origin, n); {
		z.names[n] = true
		off, end := dns.NextLabel(n, 0)
		if end {
			break
		}
		n = n[off:]
	}
}

func compileRecord(rc Record, origin string) (dns.RR, error) {
	name, err := ownerName(rc.Name, origin)
	if err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: orDefault(rc.TTL, DefaultRecordTTL)}
	switch strings.ToUpper(rc.Type) {
	case "A":
		a, err := netip.ParseAddr(rc.Value)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("value: %q is not an IPv4 address", rc.Value)
		}
		hdr.Rrtype = dns.TypeA
		return &dns.A{Hdr: hdr, A: a.AsSlice()}, nil
	case "AAAA":
		a, err := netip.ParseAddr(rc.Value)
		if err != nil || !a.Is6() || a.Is4In6() {
			return nil, fmt.Errorf("value: %q is not an IPv6 address", rc.Value)
		}
		hdr.Rrtype = dns.TypeAAAA
		return &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()}, nil
	case "CNAME":
		t, err := ownerTarget(rc.Value, origin)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		hdr.Rrtype = dns.TypeCNAME
		return &dns.CNAME{Hdr: hdr, Target: t}, nil
	case "TXT":
		if len(rc.Value) > 4000 {
			return nil, fmt.Errorf("value: %d bytes of TXT, at most 4000", len(rc.Value))
		}
		var parts []string
		for s := rc.Value; ; s = s[255:] {
			if len(s) <= 255 {
				parts = append(parts, s)
				break
			}
			parts = append(parts, s[:255])
		}
		hdr.Rrtype = dns.TypeTXT
		return &dns.TXT{Hdr: hdr, Txt: parts}, nil
	case "MX":
		f := strings.Fields(rc.Value)
		if len(f) != 2 {
			return nil, fmt.Errorf("value: %q is not \"PREFERENCE EXCHANGE\"", rc.Value)
		}
		pref, err := strconv.ParseUint(f[0], 10, 16)
		if err != nil {
			return nil, fmt.Errorf("value: preference %q is not 0..65535", f[0])
		}
		t, err := ownerTarget(f[1], origin)
		if err != nil {
			return nil, fmt.Errorf("value: exchange: %w", err)
		}
		hdr.Rrtype = dns.TypeMX
		return &dns.MX{Hdr: hdr, Preference: uint16(pref), Mx: t}, nil
	default:
		return nil, fmt.Errorf("type: %q is not one of A, AAAA, CNAME, TXT, MX", rc.Type)
	}
}

// ownerTarget resolves a target name (CNAME, MX): relative names are
// relative to the origin; absolute names may be anywhere.
func ownerTarget(name, origin string) (string, error) {
	if name == "@" {
		return origin, nil
	}
	if !strings.HasSuffix(name, ".") && origin != "." {
		name = name + "." + origin
	}
	return canonical(name)
}

func compileGSLB(gc GSLBRecord, origin string) (*CatalogGSLB, error) {
	name, err := ownerName(gc.Name, origin)
	if err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	g := &CatalogGSLB{name: name, ttl: orDefault(gc.TTL, defaultGSLBTTL), policy: gc.Policy, allDown: gc.AllDown}
	switch gc.Policy {
	case PolicyNearest, PolicyWeighted, PolicyFailover:
	default:
		return nil, fmt.Errorf("policy: %q is not one of nearest, weighted, failover", gc.Policy)
	}
	switch gc.AllDown {
	case "":
		g.allDown = AllDownFailOpenNearest
	case AllDownFailOpenNearest, AllDownServfail:
	default:
		return nil, fmt.Errorf("allDown: %q is not one of fail-open-nearest, servfail", gc.AllDown)
	}
	if len(gc.Targets) == 0 {
		return nil, errors.New("targets: at least one target is required")
	}
	if len(gc.Targets) > MaxTargets {
		return nil, fmt.Errorf("targets: %d targets, at most %d", len(gc.Targets), MaxTargets)
	}
	vips := map[netip.Addr]bool{}
	for i, t := range gc.Targets {
		if !t.VIP.IsValid() || t.VIP.Zone() != "" || t.VIP.IsUnspecified() {
			return nil, fmt.Errorf("targets[%d]: vip: %v is not a unicast IPv4 or IPv6 address", i, t.VIP)
		}
		t.VIP = t.VIP.Unmap()
		if vips[t.VIP] {
			return nil, fmt.Errorf("targets[%d]: vip: %v is listed twice", i, t.VIP)
		}
		vips[t.VIP] = true
		if t.Region == "" {
			return nil, fmt.Errorf("targets[%d] (%v): region: required", i, t.VIP)
		}
		if math.IsNaN(t.Lat) || t.Lat < -90 || t.Lat > 90 {
			return nil, fmt.Errorf("targets[%d] (%v): lat: %v is not in -90..90", i, t.VIP, t.Lat)
		}
		if math.IsNaN(t.Lon) || t.Lon < -180 || t.Lon > 180 {
			return nil, fmt.Errorf("targets[%d] (%v): lon: %v is not in -180..180", i, t.VIP, t.Lon)
		}
		if gc.Policy == PolicyWeighted && t.Weight == 0 {
			return nil, fmt.Errorf("targets[%d] (%v): weight: must be > 0 for the weighted policy", i, t.VIP)
		}
		if t.Weight > 1<<20 {
			return nil, fmt.Errorf("targets[%d] (%v): weight: %d is above %d", i, t.VIP, t.Weight, 1<<20)
		}
		g.targets = append(g.targets, t)
	}
	return g, nil
}

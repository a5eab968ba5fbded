package gslb

import (
	"iter"

	"github.com/miekg/dns"
)

// Catalog is a validated, compiled Config: what the DNS server
// (internal/gslb/dnsserver) serves. It is immutable once built so the
// server can swap it atomically; its zones and records are read through
// the methods below.
type Catalog struct {
	zones []*CatalogZone // sorted longest origin first, for longest-match lookup
}

// CatalogZone is one compiled zone of a Catalog (read only).
type CatalogZone struct {
	origin string // lower-case, absolute
	soa    *dns.SOA
	ns     []dns.RR
	// names holds every name that exists in the zone (including empty
	// non-terminals, RFC 8020) so a miss is NXDOMAIN and a hit without the
	// type is NODATA.
	names  map[string]bool
	static map[string][]dns.RR // owner → records
	gslb   map[string]*CatalogGSLB
}

// CatalogGSLB is one compiled GSLB record of a zone (read only): its
// answer is chosen per query by Choose.
type CatalogGSLB struct {
	name    string
	ttl     uint32
	policy  Policy
	allDown AllDown
	targets []Target
}

// Find returns the zone with the longest origin containing name (a
// canonical, lower-case name), or nil when no zone holds it.
func (c *Catalog) Find(name string) *CatalogZone {
	for _, z := range c.zones {
		if dns.IsSubDomain(z.origin, name) {
			return z
		}
	}
	return nil
}

// ServedGSLB yields every GSLB record the catalog answers for with its
// canonical name: records of a zone that a more specific zone of the
// catalog shadows are left out.
func (c *Catalog) ServedGSLB() iter.Seq2[string, *CatalogGSLB] {
	return func(yield func(string, *CatalogGSLB) bool) {
		for _, z := range c.zones {
			for name, g := range z.gslb {
				if c.Find(name) != z {
					continue // served by a more specific zone
				}
				if !yield(name, g) {
					return
				}
			}
		}
	}
}

// Origin is the zone's origin, lower case and absolute.
func (z *CatalogZone) Origin() string { return z.origin }

// SOA is the zone's SOA record (shared: copy before changing it).
func (z *CatalogZone) SOA() *dns.SOA { return z.soa }

// NS is the zone's apex NS records (shared: copy before changing them).
func (z *CatalogZone) NS() []dns.RR { return z.ns }

// Exists reports whether name (canonical) exists in the zone: it owns
// records or is an empty non-terminal (RFC 8020). A name that does not
// exist is NXDOMAIN; one that exists without the asked type is NODATA.
func (z *CatalogZone) Exists(name string) bool { return z.names[name] }

// Static is the static records owned by name (canonical; shared: copy
// before changing them).
func (z *CatalogZone) Static(name string) []dns.RR { return z.static[name] }

// GSLB is the GSLB record at name (canonical), or nil.
func (z *CatalogZone) GSLB(name string) *CatalogGSLB { return z.gslb[name] }

// NegativeSOA is the SOA for the authority section of NXDOMAIN and NODATA
// answers, with TTL min(SOA TTL, minimum) (RFC 2308 §3).
func (z *CatalogZone) NegativeSOA() dns.RR {
	s := dns.Copy(z.soa).(*dns.SOA)
	s.Hdr.Ttl = min(s.Hdr.Ttl, s.Minttl)
	return s
}

// Name is the record's canonical owner name.
func (g *CatalogGSLB) Name() string { return g.name }

// TTL is the TTL of the record's answers.
func (g *CatalogGSLB) TTL() uint32 { return g.ttl }

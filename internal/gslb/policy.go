package gslb

import (
	"math"
	"net/netip"

	"github.com/azgate/azgate/internal/geo"
)

// ClientLoc is a client's location as the policies use it: geo's answer,
// whether the source knew the address, and the ECS scope that answer
// holds for.
type ClientLoc struct {
	geo.Location
	// Found is geo.Locator's ok: false when the address is in no known
	// network (only Prefix may be set then).
	Found bool
	// Bits is the length of the covering prefix actually used: every
	// address in client/bits gets the same answer. On a miss it is the
	// length of the uncovered range around the client, so a more
	// specific (known) client is not cached with this answer. When the
	// locator gives no prefix of the client's family (extent unknown) it
	// is the full address length (geo's contract). It becomes the ECS
	// scope of an answer that used the location (RFC 7871 §7.2.1).
	Bits int
}

// LocateClient asks loc about client (already unmapped) and derives the
// scope from geo.Location.Prefix.
func LocateClient(loc geo.Locator, client netip.Addr) *ClientLoc {
	c := new(ClientLoc)
	LocateInto(c, loc, client)
	return c
}

// LocateInto is LocateClient into c (the UDP fast path reuses one).
func LocateInto(c *ClientLoc, loc geo.Locator, client netip.Addr) {
	l, ok := loc.Locate(client)
	*c = ClientLoc{Location: l, Found: ok, Bits: client.BitLen()}
	switch {
	case !l.Prefix.IsValid():
	case l.Prefix.Addr().BitLen() == client.BitLen():
		c.Bits = l.Prefix.Bits()
	case client.Is4In6() && l.Prefix.Addr().Is4():
		// An IPv4-mapped client (ECS family 2 holding ::ffff:a.b.c.d)
		// is located as IPv4 (geo's contract); its scope is the IPv4
		// prefix inside ::ffff:0:0/96, in the option's own family.
		c.Bits = 96 + l.Prefix.Bits()
	}
}

// smallTargets is the stack space of the policies' candidate lists: no
// allocation per query for records of up to this many targets.
const smallTargets = 8

// Health reports whether a target VIP is serving. The probes (issue 11
// part 2) implement it; an unknown VIP should read as up so a record is
// served before its first probe completes.
type Health interface {
	Up(vip netip.Addr) bool
}

// AllUp is a Health with every target up (no probes configured).
type AllUp struct{}

// Up implements Health.
func (AllUp) Up(netip.Addr) bool { return true }

// Choice is the outcome of a policy for one query.
type Choice struct {
	Target   Target
	OK       bool       // false: no answer (no target of the family, or servfail)
	ServFail bool       // every target of the family down and SERVFAIL configured
	UsedLoc  *ClientLoc // the location the answer depended on, nil if none
	FailOpen bool       // every target was down; answered by fail-open
}

// Choose picks the target of g for a query of address family v6 among
// healthy targets. locate returns the client's location (nil: unknown); it
// is called only when the choice needs it, so weighted and failover
// answers cost no lookup. qid seeds the
// weighted draw so that one query always gets one answer (and retries of
// the same query over TCP get the same one).
//
// It is pure: no I/O, no clock, no global random source.
func (g *CatalogGSLB) Choose(v6 bool, locate func() *ClientLoc, health Health, qid uint16) Choice {
	// Pointers into g.targets, not copies: a Target is 72 bytes, and the
	// candidate lists are built for every query.
	var famBuf, upBuf [smallTargets]*Target
	fam, up := famBuf[:0], upBuf[:0]
	for i := range g.targets {
		t := &g.targets[i]
		if t.VIP.Is6() != v6 {
			continue
		}
		fam = append(fam, t)
		if health.Up(t.VIP) {
			up = append(up, t)
		}
	}
	if len(fam) == 0 {
		return Choice{}
	}
	if len(up) == 0 {
		if g.allDown == AllDownServfail {
			return Choice{ServFail: true}
		}
		t, used := nearest(fam, locate)
		return Choice{Target: t, OK: true, UsedLoc: used, FailOpen: true}
	}
	switch g.policy {
	case PolicyWeighted:
		return Choice{Target: weighted(up, qid), OK: true}
	case PolicyFailover:
		return Choice{Target: lowestOrder(up), OK: true}
	default:
		t, used := nearest(up, locate)
		return Choice{Target: t, OK: true, UsedLoc: used}
	}
}

// nearest picks a target in the client's region (lowest Order among
// several), else the target nearest by great-circle distance (ties: lower
// Order, then config order), else the lowest Order when the location is
// unknown. used is the location the answer depended on: nil when it could
// not have differed for another client (one candidate, or no location
// source), and the ECS scope is then 0.
func nearest(ts []*Target, locate func() *ClientLoc) (Target, *ClientLoc) {
	if len(ts) == 1 {
		return *ts[0], nil
	}
	loc := locate()
	if loc == nil || !loc.Found {
		// Unknown clients get the failover choice. The answer still
		// depends on the address (a known one could get another), so
		// the scope is the uncovered range's length when loc is set.
		return lowestOrder(ts), loc
	}
	if loc.Region != "" {
		var inBuf [smallTargets]*Target
		in := inBuf[:0]
		for _, t := range ts {
			if t.Region == loc.Region {
				in = append(in, t)
			}
		}
		if len(in) > 0 {
			return lowestOrder(in), loc
		}
	}
	if !loc.HasCoords {
		return lowestOrder(ts), loc
	}
	best, bestD := ts[0], math.Inf(1)
	for _, t := range ts {
		d := greatCircle(loc.Lat, loc.Lon, t.Lat, t.Lon)
		if d < bestD || (d == bestD && t.Order < best.Order) {
			best, bestD = t, d
		}
	}
	return *best, loc
}

func lowestOrder(ts []*Target) Target {
	best := ts[0]
	for _, t := range ts[1:] {
		if t.Order < best.Order {
			best = t
		}
	}
	return *best
}

// weighted draws a target with probability weight/sum, from a point
// derived from the query ID. Resolvers pick query IDs at random (RFC 5452),
// so the spread over many queries follows the weights; the mix below
// spreads sequential IDs too.
func weighted(ts []*Target, qid uint16) Target {
	var sum uint64
	for _, t := range ts {
		sum += uint64(t.Weight)
	}
	x := uint64(qid)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	p := x % sum
	for _, t := range ts {
		if p < uint64(t.Weight) {
			return *t
		}
		p -= uint64(t.Weight)
	}
	return *ts[len(ts)-1]
}

// greatCircle is the central angle in radians between two points
// (haversine formula): distance up to the Earth's radius, which does not
// change the order.
func greatCircle(lat1, lon1, lat2, lon2 float64) float64 {
	const rad = math.Pi / 180
	φ1, φ2 := lat1*rad, lat2*rad
	dφ, dλ := (lat2-lat1)*rad, (lon2-lon1)*rad
	a := math.Sin(dφ/2)*math.Sin(dφ/2) + math.Cos(φ1)*math.Cos(φ2)*math.Sin(dλ/2)*math.Sin(dλ/2)
	return 2 * math.Atan2(math.Sqrt(a), math.Sqrt(1-a))
}

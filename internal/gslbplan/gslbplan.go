// Package gslbplan turns the desired state's DNS zones and GSLB records
// (internal/model) into what the GSLB serves and checks: a gslb.Config and
// the probe targets. The controller uses it to refuse, at write time, any
// zone or record the GSLB would not compile (CheckZone); the gslb role uses
// it to build its catalog from what it reads back (Build), skipping what
// does not compile instead of failing.
//
// It sits between the model and the cores (gslb, probe) so that the model
// stays free of miekg/dns and the probes.
package gslbplan

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/probe"
)

// Zone converts a zone and its GSLB records (in the given order) to the
// gslb core's form. Names become absolute; the record's defaults (TTL,
// all-down, weight 1) are applied as model's Defaults would, so an object
// written past the API without them is served the same way.
func Zone(z *model.DNSZone, recs []*model.GSLBRecord) gslb.Zone {
	zc := *z
	zc.Records = z.Records // read only
	zc.Defaults()
	out := gslb.Zone{
		Origin: z.Name + ".",
		SOA: gslb.SOA{MName: abs(zc.SOA.MName), RName: abs(zc.SOA.RName), Serial: zc.SOA.Serial,
			Refresh: zc.SOA.Refresh, Retry: zc.SOA.Retry, Expire: zc.SOA.Expire, Minimum: zc.SOA.Minimum, TTL: zc.TTL},
		NSTTL: zc.TTL,
	}
	for _, n := range z.NS {
		out.NS = append(out.NS, abs(n))
	}
	for _, r := range z.Records {
		ttl := r.TTL
		if ttl == 0 {
			ttl = zc.TTL
		}
		out.Records = append(out.Records, gslb.Record{Name: r.Name, Type: r.Type, TTL: ttl, Value: r.Value})
	}
	for _, r := range recs {
		out.GSLB = append(out.GSLB, Record(r))
	}
	return out
}

// Record converts one GSLB record.
func Record(r *model.GSLBRecord) gslb.GSLBRecord {
	g := gslb.GSLBRecord{Name: r.Name + ".", TTL: r.TTL, Policy: gslb.Policy(r.Policy)}
	if g.TTL == 0 {
		g.TTL = model.DefaultGSLBTTL
	}
	switch r.AllDown {
	case model.AllDownServfail:
		g.AllDown = gslb.AllDownServfail
	case "", model.AllDownFailOpen:
		g.AllDown = gslb.AllDownFailOpenNearest
	default:
		g.AllDown = gslb.AllDown(r.AllDown) // refused by Compile
	}
	for _, t := range r.Targets {
		w := t.Weight
		if w == 0 {
			w = 1
		}
		g.Targets = append(g.Targets, gslb.Target{VIP: t.VIP, Region: t.Region, Weight: w, Lat: t.Lat, Lon: t.Lon, Order: t.Order})
	}
	return g
}

func abs(n string) string {
	if strings.HasSuffix(n, ".") {
		return n
	}
	return n + "."
}

// Spec converts a record's probe block (nil: no checks).
func Spec(p *model.GSLBProbe) (probe.Spec, bool) {
	if p == nil {
		return probe.Spec{}, false
	}
	return probe.Spec{Kind: probe.Kind(p.Kind), Port: p.Port, Path: p.Path, Host: p.Host, Insecure: p.Insecure,
		Interval: time.Duration(p.Interval), Timeout: time.Duration(p.Timeout), Rise: p.Rise, Fall: p.Fall}.Normalize(), true
}

// TargetKey is the probe key of a record's target: "RECORD/REGION", with
// "/ipv6" added to an IPv6 target whose region also has an IPv4 target in
// the record (dual-stack regions), so keys stay unique.
func TargetKey(r *model.GSLBRecord, t model.GSLBTarget) string {
	k := r.Name + "/" + t.Region
	if t.VIP.Is6() {
		for _, o := range r.Targets {
			if o.Region == t.Region && o.VIP.Is4() {
				return k + "/ipv6"
			}
		}
	}
	return k
}

// Targets lists the probe targets of records (those with a probe block).
func Targets(recs []*model.GSLBRecord) []probe.Target {
	var out []probe.Target
	for _, r := range recs {
		spec, ok := Spec(r.Probe)
		if !ok {
			continue
		}
		for _, t := range r.Targets {
			out = append(out, probe.Target{Key: TargetKey(r, t), Addr: t.VIP, Spec: spec})
		}
	}
	return out
}

// checkRecordProbe is the probe core's own check of a record's targets.
func checkRecordProbe(r *model.GSLBRecord) error {
	for _, t := range Targets([]*model.GSLBRecord{r}) {
		if err := t.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// compile compiles one zone with recs.
func compile(z *model.DNSZone, recs []*model.GSLBRecord) error {
	_, err := gslb.Compile(gslb.Config{Zones: []gslb.Zone{Zone(z, recs)}})
	if err != nil {
		// "zones[0] ("example.com."): " says nothing the caller does
		// not know.
		msg := err.Error()
		if i := strings.Index(msg, "): "); strings.HasPrefix(msg, "zones[0] (") && i > 0 {
			msg = msg[i+3:]
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// CheckZone compiles zone with every GSLB record of st naming it, as the
// GSLB would serve them, and checks the records' probes with the probe
// core. The controller calls it on the candidate state after a put of a
// zone, so what the GSLB would refuse is refused at write time (422,
// naming the object). A missing zone is no error here (the model's
// references check that).
func CheckZone(st *model.State, zone string) error {
	z, ok := st.DNSZones[zone]
	if !ok {
		return nil
	}
	recs := st.ZoneRecords(zone)
	for _, r := range recs {
		if err := checkRecordProbe(r); err != nil {
			return model.Errors{{Field: "probe", Msg: fmt.Sprintf("GSLB record %s: %v", r.Name, err)}}
		}
	}
	if err := compile(z, recs); err != nil {
		return model.Errors{{Msg: fmt.Sprintf("zone %s with its %d GSLB record(s) does not compile: %v", zone, len(recs), err)}}
	}
	return nil
}

// CheckRecord is CheckZone for a put of one record: it compiles the
// record with its zone alone. GSLB records cannot conflict with each other
// (their names are their keys, and a record only conflicts with the zone's
// apex and static records), so the zone's other records need not be
// compiled again: an apply of many records stays linear.
func CheckRecord(st *model.State, r *model.GSLBRecord) error {
	z, ok := st.DNSZones[r.Zone]
	if !ok {
		return nil
	}
	if err := checkRecordProbe(r); err != nil {
		return model.Errors{{Field: "probe", Msg: err.Error()}}
	}
	if err := compile(z, []*model.GSLBRecord{r}); err != nil {
		return model.Errors{{Msg: fmt.Sprintf("does not compile with zone %s: %v", r.Zone, err)}}
	}
	return nil
}

// Skipped is an object Build left out, and why.
type Skipped struct {
	Kind, Key string
	Err       string
}

// Plan is what the GSLB serves and checks.
type Plan struct {
	Config  gslb.Config
	Targets []probe.Target
	// Records are the records served, by name (for status).
	Records []*model.GSLBRecord
	Skipped []Skipped
}

// Build converts the whole state. A zone that does not compile on its own
// is skipped with its records; a record that does not compile with its
// zone (or whose probe is invalid) is skipped alone. Records are added in
// name order, so which of two conflicting records is served does not
// depend on map order. Nothing is fatal: the rest is served.
func Build(st *model.State) Plan {
	var p Plan
	zones := st.Keys(model.KindDNSZone)
	for _, name := range zones {
		z := st.DNSZones[name]
		recs := st.ZoneRecords(name)
		if err := compile(z, nil); err != nil {
			p.Skipped = append(p.Skipped, Skipped{model.KindDNSZone, name, err.Error()})
			for _, r := range recs {
				p.Skipped = append(p.Skipped, Skipped{model.KindGSLBRecord, r.Name, "its zone " + name + " is skipped"})
			}
			continue
		}
		var ok []*model.GSLBRecord
		for _, r := range recs {
			if err := checkRecordProbe(r); err != nil {
				p.Skipped = append(p.Skipped, Skipped{model.KindGSLBRecord, r.Name, err.Error()})
				continue
			}
			ok = append(ok, r)
		}
		if compile(z, ok) != nil {
			// Find the culprits one by one (rare: the controller
			// refuses such writes; this is a store written past it).
			var kept []*model.GSLBRecord
			for _, r := range ok {
				if err := compile(z, append(kept[:len(kept):len(kept)], r)); err != nil {
					p.Skipped = append(p.Skipped, Skipped{model.KindGSLBRecord, r.Name, err.Error()})
					continue
				}
				kept = append(kept, r)
			}
			ok = kept
		}
		p.Config.Zones = append(p.Config.Zones, Zone(z, ok))
		p.Records = append(p.Records, ok...)
	}
	// Records of zones that do not exist (only a store written past the
	// API has them).
	for _, name := range st.Keys(model.KindGSLBRecord) {
		if r := st.GSLBRecords[name]; st.DNSZones[r.Zone] == nil {
			p.Skipped = append(p.Skipped, Skipped{model.KindGSLBRecord, name, "zone " + r.Zone + " does not exist"})
		}
	}
	sort.Slice(p.Records, func(i, j int) bool { return p.Records[i].Name < p.Records[j].Name })
	p.Targets = Targets(p.Records)
	return p
}

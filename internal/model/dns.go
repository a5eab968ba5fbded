package model

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Kinds of the GSLB's authoritative DNS (issue 11, docs/gslb.md "Objects").
const (
	KindDNSZone    = "dnszones"
	KindGSLBRecord = "gslbrecords"
)

// Bounds and defaults of zones and GSLB records (docs/gslb.md).
const (
	// MaxZoneRecords bounds a zone's static records: a zone is one etcd
	// value (1.5 MiB at most) and is compiled whole on every change.
	MaxZoneRecords = 2000
	// MaxZoneNS: 13 name servers is what a referral fits in 512 bytes.
	MaxZoneNS = 13
	// MaxGSLBTargets matches gslb.MaxTargets (selection is linear).
	MaxGSLBTargets = 64
	// MaxGSLBWeight matches the gslb core's bound.
	MaxGSLBWeight = 1 << 20
	// MaxDNSTTL: a day. Longer TTLs only delay fixes.
	MaxDNSTTL = 86400
	// MaxTXTValue matches the gslb core's bound.
	MaxTXTValue = 4000

	DefaultZoneTTL = 3600 // SOA, NS and static records without a TTL
	DefaultGSLBTTL = 30   // short, so a failover reaches clients quickly
	// SOA defaults (RFC 1912 §2.2 ranges).
	DefaultSOARefresh = 3600
	DefaultSOARetry   = 600
	DefaultSOAExpire  = 1209600
	DefaultSOAMinimum = 300 // the negative-caching TTL (RFC 2308)

	// Probe bounds: MinProbeInterval matches probe.Spec.Validate's
	// "at least 100ms".
	MinProbeInterval     = 100 * time.Millisecond
	MaxProbeInterval     = time.Hour
	MinProbeTimeout      = 10 * time.Millisecond
	DefaultProbeInterval = time.Second
	DefaultProbeRiseFall = 2
	MaxProbeRiseFall     = 100
)

// GSLB policies and all-down behaviours as written in objects.
const (
	GSLBNearest  = "nearest"
	GSLBWeighted = "weighted"
	GSLBFailover = "failover"

	AllDownFailOpen = "failopen" // answer the nearest target anyway (default)
	AllDownServfail = "servfail"
)

// DNSZone is a zone the GSLB serves authoritatively: the apex's SOA and
// NS, and static records. GSLB records live in their own objects
// (GSLBRecord) naming the zone.
type DNSZone struct {
	// Name is the apex, lower-case without the trailing dot:
	// "example.com". It is the key.
	Name string `json:"name"`
	// SOA fields; zero values are filled by Defaults.
	SOA ZoneSOA `json:"soa,omitzero"`
	// NS are the zone's name servers (absolute names, the trailing dot
	// optional), 1-13.
	NS []string `json:"ns"`
	// TTL of the SOA, the NS set and static records without their own
	// (default DefaultZoneTTL).
	TTL uint32 `json:"ttl,omitempty"`
	// Records are the zone's static records.
	Records []ZoneRecord `json:"records,omitempty"`
}

// ZoneSOA holds the SOA fields (RFC 1035 §3.3.13).
type ZoneSOA struct {
	// MName is the primary name server (default: NS[0]).
	MName string `json:"mname,omitempty"`
	// RName is the responsible mailbox as a name (default
	// "hostmaster.ZONE").
	RName   string `json:"rname,omitempty"`
	Serial  uint32 `json:"serial,omitempty"` // default 1
	Refresh uint32 `json:"refresh,omitempty"`
	Retry   uint32 `json:"retry,omitempty"`
	Expire  uint32 `json:"expire,omitempty"`
	// Minimum is the negative-caching TTL (RFC 2308).
	Minimum uint32 `json:"minimum,omitempty"`
}

// ZoneRecord is one static record.
type ZoneRecord struct {
	// Name is relative to the zone ("www"), "@" for the apex, or absolute
	// with a trailing dot ("www.example.com.").
	Name string `json:"name"`
	// Type is A, AAAA, CNAME, TXT or MX.
	Type string `json:"type"`
	TTL  uint32 `json:"ttl,omitempty"` // 0: the zone's TTL
	// Value is the RDATA in presentation form: "192.0.2.1",
	// "2001:db8::1", "www.example.com.", free text, "10 mx.example.com.".
	Value string `json:"value"`
}

// GSLBRecord is a name whose A/AAAA answer is chosen per query among
// regional VIPs by policy, location and health (docs/gslb.md).
type GSLBRecord struct {
	// Name is the owner name, lower-case without the trailing dot
	// ("pathd.example.com"); the key. It lies below Zone's apex.
	Name string `json:"name"`
	// Zone is the DNSZone the name belongs to (the most specific zone
	// containing it).
	Zone string `json:"zone"`
	// Policy: nearest, weighted or failover.
	Policy string `json:"policy"`
	// AllDown: what to answer when every target is down: failopen (the
	// nearest target anyway; the default) or servfail.
	AllDown string `json:"allDown,omitempty"`
	// TTL of the answers (default DefaultGSLBTTL).
	TTL     uint32       `json:"ttl,omitempty"`
	Targets []GSLBTarget `json:"targets"`
	// Probe is how every target's VIP is checked; absent: targets are
	// always up (no health checking).
	Probe *GSLBProbe `json:"probe,omitempty"`
}

// GSLBTarget is one regional VIP.
type GSLBTarget struct {
	// VIP answers A (IPv4) or AAAA (IPv6) queries; unique in the record.
	VIP netip.Addr `json:"vip"`
	// Region names the target's region ([A-Za-z0-9._-], 1-63): clients
	// located in it get it first (nearest) and it keys the target's
	// probe state ("RECORD/REGION"), so it is unique per address family.
	Region string `json:"region"`
	// Weight is the weighted policy's relative share (0 means 1).
	Weight uint32 `json:"weight,omitempty"`
	// Order: lower is preferred by failover; it also breaks ties.
	Order int `json:"order,omitempty"`
	// Lat and Lon in degrees: the nearest policy's distance.
	Lat float64 `json:"lat,omitempty"`
	Lon float64 `json:"lon,omitempty"`
}

// GSLBProbe is a record's health check, shaped like probe.Spec.
type GSLBProbe struct {
	// Kind: tcp (connect), http or https (GET Path answers 2xx/3xx).
	Kind string `json:"kind"`
	// Port: required for tcp; http and https default to 80 and 443.
	Port uint16 `json:"port,omitempty"`
	// Path of the http(s) GET (default "/").
	Path string `json:"path,omitempty"`
	// Host header and TLS server name of http(s) ("" = the VIP).
	Host string `json:"host,omitempty"`
	// Insecure: https without certificate verification.
	Insecure bool     `json:"insecure,omitempty"`
	Interval Duration `json:"interval,omitempty"` // default 1s
	Timeout  Duration `json:"timeout,omitempty"`  // default min(interval, 1s); at most the interval
	Rise     int      `json:"rise,omitempty"`     // consecutive successes to go up (default 2)
	Fall     int      `json:"fall,omitempty"`     // consecutive failures to go down (default 2)
}

// Key of a zone is its apex name.
func (z *DNSZone) Key() string { return z.Name }

// Key of a GSLB record is its owner name.
func (r *GSLBRecord) Key() string { return r.Name }

// Defaults fills the SOA and TTL so the stored zone says what is served.
func (z *DNSZone) Defaults() {
	if z.TTL == 0 {
		z.TTL = DefaultZoneTTL
	}
	s := &z.SOA
	if s.MName == "" && len(z.NS) > 0 {
		s.MName = z.NS[0]
	}
	if s.RName == "" && z.Name != "" {
		s.RName = "hostmaster." + z.Name
	}
	def := func(v *uint32, d uint32) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Serial, 1)
	def(&s.Refresh, DefaultSOARefresh)
	def(&s.Retry, DefaultSOARetry)
	def(&s.Expire, DefaultSOAExpire)
	def(&s.Minimum, DefaultSOAMinimum)
}

// Defaults fills the TTL, the all-down behaviour, weights and the probe's
// defaults, so the stored record says what the GSLB does.
func (r *GSLBRecord) Defaults() {
	if r.TTL == 0 {
		r.TTL = DefaultGSLBTTL
	}
	if r.AllDown == "" {
		r.AllDown = AllDownFailOpen
	}
	for i := range r.Targets {
		if r.Targets[i].Weight == 0 {
			r.Targets[i].Weight = 1
		}
	}
	if r.Probe != nil {
		p := *r.Probe
		p.defaults()
		r.Probe = &p
	}
}

func (p *GSLBProbe) defaults() {
	if p.Port == 0 {
		switch p.Kind {
		case "http":
			p.Port = 80
		case "https":
			p.Port = 443
		}
	}
	if p.Path == "" && (p.Kind == "http" || p.Kind == "https") {
		p.Path = "/"
	}
	if p.Interval == 0 {
		p.Interval = Duration(DefaultProbeInterval)
	}
	if p.Timeout == 0 {
		p.Timeout = Duration(min(time.Duration(p.Interval), time.Second))
	}
	if p.Rise == 0 {
		p.Rise = DefaultProbeRiseFall
	}
	if p.Fall == 0 {
		p.Fall = DefaultProbeRiseFall
	}
}

// Normalized returns the probe with its defaults filled (nil stays nil).
func (p *GSLBProbe) Normalized() *GSLBProbe {
	if p == nil {
		return nil
	}
	c := *p
	c.defaults()
	return &c
}

// checkDNSName checks a domain name in the objects' canonical form:
// lower-case, no trailing dot, labels of letters, digits, '-' and '_'
// (1-63 bytes, not starting or ending with '-'), 253 bytes at most.
func checkDNSName(es *Errors, field, name string) {
	if name == "" {
		es.add(field, "required")
		return
	}
	if strings.HasSuffix(name, ".") {
		es.add(field, "%q: write the name without the trailing dot (%q)", name, strings.TrimSuffix(name, "."))
		return
	}
	if name != strings.ToLower(name) {
		es.add(field, "%q: write the name in lower case (%q)", name, strings.ToLower(name))
		return
	}
	if msg := dnsNameProblem(name); msg != "" {
		es.add(field, "%q: %s", name, msg)
	}
}

// dnsNameProblem says what is wrong with a name written without the
// trailing dot ("" when nothing is).
func dnsNameProblem(name string) string {
	if len(name) > 253 {
		return "longer than 253 characters"
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return "empty label"
		}
		if len(l) > 63 {
			return fmt.Sprintf("label %.20q... is longer than 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Sprintf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("label %q: only letters, digits, '-' and '_' are allowed", l)
			}
		}
	}
	return ""
}

// checkAbsName checks a name server or mailbox name (absolute, the
// trailing dot optional, any case).
func checkAbsName(es *Errors, field, name string) {
	if name == "" {
		es.add(field, "required")
		return
	}
	if msg := dnsNameProblem(strings.TrimSuffix(name, ".")); msg != "" {
		es.add(field, "%q: %s", name, msg)
	}
}

// InZone reports whether name (canonical form) is zone or below it.
func InZone(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, "."+zone)
}

// Validate checks the zone on its own. The whole zone with its GSLB
// records is compiled by the controller before it is stored (gslbplan),
// which also catches conflicts between records.
func (z *DNSZone) Validate() Errors {
	var es Errors
	checkDNSName(&es, "name", z.Name)
	if len(z.NS) == 0 {
		es.add("ns", "required: at least one name server (e.g. [ns1.%s])", z.Name)
	}
	if len(z.NS) > MaxZoneNS {
		es.add("ns", "%d name servers: at most %d", len(z.NS), MaxZoneNS)
	}
	for i, n := range z.NS {
		checkAbsName(&es, fmt.Sprintf("ns[%d]", i), n)
	}
	if z.SOA.MName != "" {
		checkAbsName(&es, "soa.mname", z.SOA.MName)
	}
	if z.SOA.RName != "" {
		checkAbsName(&es, "soa.rname", z.SOA.RName)
	}
	if z.TTL > MaxDNSTTL {
		es.add("ttl", "%d: at most %d (a day)", z.TTL, MaxDNSTTL)
	}
	if z.SOA.Minimum > MaxDNSTTL {
		es.add("soa.minimum", "%d: at most %d (a day; it is the negative-caching TTL)", z.SOA.Minimum, MaxDNSTTL)
	}
	if len(z.Records) > MaxZoneRecords {
		es.add("records", "%d records: a zone has at most %d", len(z.Records), MaxZoneRecords)
		return es
	}
	for i, r := range z.Records {
		r.validate(&es, fmt.Sprintf("records[%d]", i))
	}
	return es
}

func (r *ZoneRecord) validate(es *Errors, f string) {
	switch {
	case r.Name == "":
		es.add(f+".name", "required (\"@\" for the apex)")
	case r.Name != "@":
		if msg := dnsNameProblem(strings.TrimSuffix(r.Name, ".")); msg != "" {
			es.add(f+".name", "%q: %s", r.Name, msg)
		}
	}
	if r.TTL > MaxDNSTTL {
		es.add(f+".ttl", "%d: at most %d (a day)", r.TTL, MaxDNSTTL)
	}
	switch r.Type {
	case "A":
		if a, err := netip.ParseAddr(r.Value); err != nil || !a.Is4() {
			es.add(f+".value", "%q is not an IPv4 address", r.Value)
		}
	case "AAAA":
		if a, err := netip.ParseAddr(r.Value); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			es.add(f+".value", "%q is not an IPv6 address", r.Value)
		}
	case "CNAME":
		if msg := dnsNameProblem(strings.TrimSuffix(r.Value, ".")); r.Value != "@" && msg != "" {
			es.add(f+".value", "%q: %s", r.Value, msg)
		}
		if r.Name == "@" {
			es.add(f+".name", "a CNAME cannot be at the zone apex")
		}
	case "TXT":
		if len(r.Value) > MaxTXTValue {
			es.add(f+".value", "%d bytes of TXT: at most %d", len(r.Value), MaxTXTValue)
		}
	case "MX":
		fs := strings.Fields(r.Value)
		if len(fs) != 2 {
			es.add(f+".value", "%q is not \"PREFERENCE EXCHANGE\" (e.g. \"10 mail.example.com.\")", r.Value)
			break
		}
		if _, err := strconv.ParseUint(fs[0], 10, 16); err != nil {
			es.add(f+".value", "preference %q is not 0-65535", fs[0])
		}
		if msg := dnsNameProblem(strings.TrimSuffix(fs[1], ".")); fs[1] != "@" && msg != "" {
			es.add(f+".value", "exchange %q: %s", fs[1], msg)
		}
	case "":
		es.add(f+".type", "required: A, AAAA, CNAME, TXT or MX")
	default:
		es.add(f+".type", "%q is not one of A, AAAA, CNAME, TXT, MX (upper case; SOA and NS of the apex are the zone's soa and ns)", r.Type)
	}
}

// validRegion matches geo's region names ([A-Za-z0-9._-], 1-63).
func validRegion(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Validate checks the record on its own (the zone's existence and the
// whole zone's consistency are checked against the state).
func (r *GSLBRecord) Validate() Errors {
	var es Errors
	checkDNSName(&es, "name", r.Name)
	checkDNSName(&es, "zone", r.Zone)
	if r.Name != "" && r.Zone != "" {
		switch {
		case r.Name == r.Zone:
			es.add("name", "%q is the zone's apex: a GSLB record is a name below it (e.g. \"www.%s\")", r.Name, r.Zone)
		case !InZone(r.Name, r.Zone):
			es.add("name", "%q is not inside zone %q", r.Name, r.Zone)
		}
	}
	switch r.Policy {
	case GSLBNearest, GSLBWeighted, GSLBFailover:
	case "":
		es.add("policy", "required: nearest, weighted or failover")
	default:
		es.add("policy", "%q is not one of nearest, weighted, failover", r.Policy)
	}
	switch r.AllDown {
	case "", AllDownFailOpen, AllDownServfail:
	default:
		es.add("allDown", "%q is not one of failopen, servfail", r.AllDown)
	}
	if r.TTL > MaxDNSTTL {
		es.add("ttl", "%d: at most %d (a day)", r.TTL, MaxDNSTTL)
	}
	switch {
	case len(r.Targets) == 0:
		es.add("targets", "required: at least one target")
	case len(r.Targets) > MaxGSLBTargets:
		es.add("targets", "%d targets: at most %d", len(r.Targets), MaxGSLBTargets)
	}
	vips := map[netip.Addr]int{}
	regions := map[string]int{}
	for i, t := range r.Targets {
		f := fmt.Sprintf("targets[%d]", i)
		switch {
		case !t.VIP.IsValid():
			es.add(f+".vip", "required")
		case t.VIP.Zone() != "" || t.VIP.IsUnspecified() || t.VIP.IsMulticast() || t.VIP.Is4In6():
			es.add(f+".vip", "%v is not a unicast IPv4 or IPv6 address (write IPv4 as IPv4)", t.VIP)
		default:
			if j, dup := vips[t.VIP]; dup {
				es.add(f+".vip", "%v is also targets[%d]", t.VIP, j)
			}
			vips[t.VIP] = i
		}
		if !validRegion(t.Region) {
			es.add(f+".region", "%q: want 1-63 of letters, digits, '.', '_' and '-'", t.Region)
		} else if t.VIP.IsValid() {
			// The probe state is keyed RECORD/REGION, per family.
			k := t.Region + "/" + strconv.FormatBool(t.VIP.Is4())
			if j, dup := regions[k]; dup {
				es.add(f+".region", "%q is also targets[%d]'s region with an address of the same family (one VIP per region and family)", t.Region, j)
			}
			regions[k] = i
		}
		if t.Weight > MaxGSLBWeight {
			es.add(f+".weight", "%d: at most %d", t.Weight, MaxGSLBWeight)
		}
		if math.IsNaN(t.Lat) || t.Lat < -90 || t.Lat > 90 {
			es.add(f+".lat", "%v is not in -90..90", t.Lat)
		}
		if math.IsNaN(t.Lon) || t.Lon < -180 || t.Lon > 180 {
			es.add(f+".lon", "%v is not in -180..180", t.Lon)
		}
		if t.Order < -1_000_000 || t.Order > 1_000_000 {
			es.add(f+".order", "%d: want -1000000..1000000", t.Order)
		}
	}
	if r.Probe != nil {
		r.Probe.validate(&es, "probe")
	}
	return es
}

func (p *GSLBProbe) validate(es *Errors, f string) {
	web := false
	switch p.Kind {
	case "tcp":
		if p.Port == 0 {
			es.add(f+".port", "required for a tcp probe")
		}
		if p.Path != "" || p.Host != "" || p.Insecure {
			es.add(f+".kind", "path, host and insecure are for http and https probes")
		}
	case "http", "https":
		web = true
		if p.Insecure && p.Kind == "http" {
			es.add(f+".insecure", "only for https probes")
		}
	case "":
		es.add(f+".kind", "required: tcp, http or https")
	default:
		es.add(f+".kind", "%q is not one of tcp, http, https", p.Kind)
	}
	if web && p.Path != "" {
		if !strings.HasPrefix(p.Path, "/") || len(p.Path) > 1024 || strings.ContainsAny(p.Path, " \t\r\n") {
			es.add(f+".path", "%.40q: want an absolute path (\"/healthz\"), no spaces, at most 1024 characters", p.Path)
		}
	}
	if web && p.Host != "" {
		if msg := dnsNameProblem(strings.TrimSuffix(p.Host, ".")); msg != "" {
			if _, err := netip.ParseAddr(p.Host); err != nil {
				es.add(f+".host", "%q: %s", p.Host, msg)
			}
		}
	}
	n := p.Normalized()
	iv, to := time.Duration(n.Interval), time.Duration(n.Timeout)
	if iv < MinProbeInterval || iv > MaxProbeInterval {
		es.add(f+".interval", "%v: want %v-%v", iv, MinProbeInterval, MaxProbeInterval)
	}
	switch {
	case to < MinProbeTimeout:
		es.add(f+".timeout", "%v: at least %v", to, MinProbeTimeout)
	case to > iv:
		es.add(f+".timeout", "%v is longer than the interval %v", to, iv)
	}
	if p.Rise < 0 || p.Rise > MaxProbeRiseFall {
		es.add(f+".rise", "%d: want 1-%d (absent: %d)", p.Rise, MaxProbeRiseFall, DefaultProbeRiseFall)
	}
	if p.Fall < 0 || p.Fall > MaxProbeRiseFall {
		es.add(f+".fall", "%d: want 1-%d (absent: %d)", p.Fall, MaxProbeRiseFall, DefaultProbeRiseFall)
	}
}

// checkGSLBRecord: the zone exists and is the most specific zone holding
// the name (a more specific zone would answer for it instead).
func (s *State) checkGSLBRecord(r, _ *GSLBRecord, _ bool) Errors {
	var es Errors
	if _, ok := s.DNSZones[r.Zone]; !ok {
		es.add("zone", "DNS zone %q does not exist (create it first: azgate dns zone create %s --ns ...)", r.Zone, r.Zone)
		return es
	}
	if z := s.zoneOf(r.Name); z != r.Zone {
		es.add("zone", "%q lies in zone %q, more specific than %q: name that zone", r.Name, z, r.Zone)
	}
	return es
}

// checkDNSZone: a new zone must not capture GSLB records of a less
// specific zone (they would be answered from the new zone, without them).
func (s *State) checkDNSZone(z, _ *DNSZone, had bool) Errors {
	var es Errors
	if had {
		return nil
	}
	if n, first := namedWhere(s.GSLBRecords, func(r *GSLBRecord) bool {
		return r.Zone != z.Name && InZone(r.Name, z.Name) && InZone(z.Name, r.Zone)
	}); n > 0 {
		es.add("name", "GSLB record %s%s of zone %s lies inside %q: move it first", first, more(n), s.GSLBRecords[first].Zone, z.Name)
	}
	return es
}

// checkDeleteDNSZone refuses deleting a zone GSLB records name.
func (s *State) checkDeleteDNSZone(z *DNSZone) error {
	if n, first := namedWhere(s.GSLBRecords, func(r *GSLBRecord) bool { return r.Zone == z.Name }); n > 0 {
		return &ConflictError{Msg: fmt.Sprintf("DNS zone %s has GSLB record %s%s: delete them first", z.Name, first, more(n))}
	}
	return nil
}

// zoneOf returns the most specific zone containing name ("" if none).
func (s *State) zoneOf(name string) string {
	best := ""
	for n := name; ; {
		if _, ok := s.DNSZones[n]; ok {
			best = n
			break
		}
		_, rest, ok := strings.Cut(n, ".")
		if !ok {
			break
		}
		n = rest
	}
	return best
}

// ZoneRecords lists the GSLB records of a zone, by name.
func (s *State) ZoneRecords(zone string) []*GSLBRecord {
	var out []*GSLBRecord
	for _, name := range sortedKeys(s.GSLBRecords) {
		if r := s.GSLBRecords[name]; r.Zone == zone {
			out = append(out, r)
		}
	}
	return out
}

// GSLBStatus is what a gslb node publishes about itself (NodeStatus.GSLB;
// docs/gslb.md "Status").
type GSLBStatus struct {
	Listen  string `json:"listen"`
	Vantage string `json:"vantage"`
	Zones   int    `json:"zones"`
	Records int    `json:"records"`
	// Views are the vantage points whose fresh views the verdicts
	// combine (this one included); Quorum is the number of down views
	// that take a target down (0: a majority).
	Views  []string `json:"views"`
	Quorum int      `json:"quorum"`
	// Targets are every probed target, by key ("RECORD/REGION").
	Targets []GSLBTargetStatus `json:"targets"`
	// Skipped are the zones and records read back that the node does not
	// serve (invalid, or not compiling with their zone).
	Skipped []InvalidObject `json:"skipped,omitempty"`
}

// GSLBTargetStatus is one target's health: Up is the heartbeat, 1 or 0,
// the verdict the answers use (all vantage points combined); LocalUp is
// this node's own probe.
type GSLBTargetStatus struct {
	Key      string     `json:"key"`
	VIP      netip.Addr `json:"vip"`
	Up       int        `json:"up"`
	LocalUp  int        `json:"local_up"`
	Since    time.Time  `json:"since"`
	Checks   uint64     `json:"checks"`
	Failures uint64     `json:"failures"`
	LastErr  string     `json:"last_error,omitempty"`
	RTTMS    float64    `json:"rtt_ms"`
}

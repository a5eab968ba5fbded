package model

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func dnsZone() *DNSZone {
	return &DNSZone{Name: "example.com", NS: []string{"ns1.example.com"},
		Records: []ZoneRecord{{Name: "ns1", Type: "A", Value: "192.0.2.53"}}}
}

func gslbRecord() *GSLBRecord {
	return &GSLBRecord{Name: "pathd.example.com", Zone: "example.com", Policy: GSLBNearest,
		Targets: []GSLBTarget{
			{VIP: addr("203.0.113.10"), Region: "eu-west", Lat: 53.35, Lon: -6.26},
			{VIP: addr("203.0.113.20"), Region: "us-east", Lat: 39.04, Lon: -77.49},
		},
		Probe: &GSLBProbe{Kind: "tcp", Port: 443}}
}

// TestDNSValidate: every field's check names the object's field.
func TestDNSValidate(t *testing.T) {
	if es := dnsZone().Validate(); len(es) > 0 {
		t.Fatalf("valid zone: %v", es)
	}
	if es := gslbRecord().Validate(); len(es) > 0 {
		t.Fatalf("valid record: %v", es)
	}
	// Dual-stack regions: one IPv4 and one IPv6 VIP per region.
	ds := gslbRecord()
	ds.Targets = append(ds.Targets, GSLBTarget{VIP: addr("2001:db8::10"), Region: "eu-west"}, GSLBTarget{VIP: addr("2001:db8::20"), Region: "us-east"})
	if es := ds.Validate(); len(es) > 0 {
		t.Fatalf("valid dual-stack record: %v", es)
	}
	for _, tc := range []struct {
		name   string
		change func(z *DNSZone, r *GSLBRecord) Object
		want   []string
	}{
		{"zone trailing dot", func(z *DNSZone, _ *GSLBRecord) Object { z.Name = "example.com."; return z }, []string{"name~without the trailing dot"}},
		{"zone upper case", func(z *DNSZone, _ *GSLBRecord) Object { z.Name = "Example.com"; return z }, []string{"name~lower case"}},
		{"zone bad label", func(z *DNSZone, _ *GSLBRecord) Object { z.Name = "a..b"; return z }, []string{"name~empty label"}},
		{"no ns", func(z *DNSZone, _ *GSLBRecord) Object { z.NS = nil; return z }, []string{"ns~at least one"}},
		{"bad ns", func(z *DNSZone, _ *GSLBRecord) Object { z.NS = []string{"ns 1.example.com"}; return z }, []string{"ns[0]"}},
		{"zone ttl", func(z *DNSZone, _ *GSLBRecord) Object { z.TTL = 100000; return z }, []string{"ttl"}},
		{"record type", func(z *DNSZone, _ *GSLBRecord) Object { z.Records[0].Type = "SRV"; return z }, []string{"records[0].type~not one of"}},
		{"record A value", func(z *DNSZone, _ *GSLBRecord) Object { z.Records[0].Value = "2001:db8::1"; return z }, []string{"records[0].value~IPv4"}},
		{"record MX value", func(z *DNSZone, _ *GSLBRecord) Object {
			z.Records[0] = ZoneRecord{Name: "@", Type: "MX", Value: "mail"}
			return z
		}, []string{"records[0].value~PREFERENCE"}},
		{"apex CNAME", func(z *DNSZone, _ *GSLBRecord) Object {
			z.Records[0] = ZoneRecord{Name: "@", Type: "CNAME", Value: "x"}
			return z
		}, []string{"records[0].name~apex"}},
		{"TXT too long", func(z *DNSZone, _ *GSLBRecord) Object {
			z.Records[0] = ZoneRecord{Name: "t", Type: "TXT", Value: strings.Repeat("x", 4001)}
			return z
		}, []string{"records[0].value~4000"}},
		{"record at apex", func(_ *DNSZone, r *GSLBRecord) Object { r.Name = "example.com"; return r }, []string{"name~apex"}},
		{"record outside zone", func(_ *DNSZone, r *GSLBRecord) Object { r.Name = "pathd.example.org"; return r }, []string{"name~not inside zone"}},
		{"policy", func(_ *DNSZone, r *GSLBRecord) Object { r.Policy = "random"; return r }, []string{"policy"}},
		{"allDown", func(_ *DNSZone, r *GSLBRecord) Object { r.AllDown = "fail-open"; return r }, []string{"allDown"}},
		{"no targets", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets = nil; return r }, []string{"targets"}},
		{"duplicate vip", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[1].VIP = r.Targets[0].VIP; return r }, []string{"targets[1].vip~also targets[0]"}},
		{"mapped vip", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].VIP = addr("::ffff:203.0.113.1"); return r }, []string{"targets[0].vip"}},
		{"region twice per family", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[1].Region = "eu-west"; return r }, []string{"targets[1].region"}},
		{"zoned v6 vip", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].VIP = addr("fe80::1%eth0"); return r }, []string{"targets[0].vip~not a unicast"}},
		{"multicast v6 vip", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].VIP = addr("ff02::1"); return r }, []string{"targets[0].vip~not a unicast"}},
		{"v6 twice in a region", func(_ *DNSZone, r *GSLBRecord) Object {
			r.Targets = append(r.Targets, GSLBTarget{VIP: addr("2001:db8::10"), Region: "eu-west"}, GSLBTarget{VIP: addr("2001:db8::11"), Region: "eu-west"})
			return r
		}, []string{"targets[3].region~same family"}},
		{"record AAAA value", func(z *DNSZone, _ *GSLBRecord) Object {
			z.Records[0] = ZoneRecord{Name: "www", Type: "AAAA", Value: "fe80::1%eth0"}
			return z
		}, []string{"records[0].value~IPv6"}},
		{"record AAAA mapped", func(z *DNSZone, _ *GSLBRecord) Object {
			z.Records[0] = ZoneRecord{Name: "www", Type: "AAAA", Value: "::ffff:192.0.2.1"}
			return z
		}, []string{"records[0].value~IPv6"}},
		{"bad region", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].Region = "eu west"; return r }, []string{"targets[0].region"}},
		{"lat", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].Lat = 91; return r }, []string{"targets[0].lat"}},
		{"lon", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].Lon = -181; return r }, []string{"targets[0].lon"}},
		{"weight", func(_ *DNSZone, r *GSLBRecord) Object { r.Targets[0].Weight = 1<<20 + 1; return r }, []string{"targets[0].weight"}},
		{"probe kind", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe.Kind = "icmp"; return r }, []string{"probe.kind"}},
		{"tcp probe port", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe.Port = 0; return r }, []string{"probe.port"}},
		{"probe interval", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe.Interval = Duration(50e6); return r }, []string{"probe.interval~100ms-1h0m0s"}},
		{"probe timeout", func(_ *DNSZone, r *GSLBRecord) Object {
			r.Probe.Interval, r.Probe.Timeout = Duration(5e8), Duration(6e8)
			return r
		}, []string{"probe.timeout~longer than the interval"}},
		{"probe fall", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe.Fall = -1; return r }, []string{"probe.fall"}},
		{"http path", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe = &GSLBProbe{Kind: "http", Path: "healthz"}; return r }, []string{"probe.path"}},
		{"insecure http", func(_ *DNSZone, r *GSLBRecord) Object { r.Probe = &GSLBProbe{Kind: "http", Insecure: true}; return r }, []string{"probe.insecure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.change(dnsZone(), gslbRecord())
			es := o.Validate()
			checkErrors(t, es, tc.want)
		})
	}
}

// TestDNSDefaults: what the controller stores says what is served.
func TestDNSDefaults(t *testing.T) {
	z := dnsZone()
	z.Defaults()
	want := ZoneSOA{MName: "ns1.example.com", RName: "hostmaster.example.com", Serial: 1, Refresh: 3600, Retry: 600, Expire: 1209600, Minimum: 300}
	if z.SOA != want || z.TTL != DefaultZoneTTL {
		t.Errorf("zone defaults %+v ttl %d", z.SOA, z.TTL)
	}
	r := gslbRecord()
	r.Probe = &GSLBProbe{Kind: "https", Interval: Duration(5e8)}
	orig := r.Probe
	r.Defaults()
	if r.TTL != 30 || r.AllDown != AllDownFailOpen || r.Targets[0].Weight != 1 {
		t.Errorf("record defaults %+v", r)
	}
	p := r.Probe
	if p.Port != 443 || p.Path != "/" || p.Timeout != Duration(5e8) || p.Rise != 2 || p.Fall != 2 {
		t.Errorf("probe defaults %+v", p)
	}
	if orig.Port != 0 {
		t.Error("Defaults changed the probe it was given in place (objects are shared, never modified)")
	}
	if es := r.Validate(); len(es) > 0 {
		t.Errorf("defaults make an invalid record: %v", es)
	}
}

// TestDNSState: the zone must exist and be the most specific; a zone with
// records cannot be deleted (409 naming the record); a new zone cannot
// capture another zone's records.
func TestDNSState(t *testing.T) {
	s := NewState()
	_, err := s.Put(gslbRecord())
	wantErr(t, err, "zone", `DNS zone "example.com" does not exist`)
	if _, err := s.Put(dnsZone()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(gslbRecord()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Delete(KindDNSZone, "example.com")
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "GSLB record pathd.example.com") {
		t.Fatalf("delete of a zone in use: %v, want a conflict naming the record", err)
	}
	child := &DNSZone{Name: "pathd.example.com", NS: []string{"ns1.example.com"}}
	_, err = s.Put(child)
	wantErr(t, err, "name", "GSLB record pathd.example.com of zone example.com")
	sub := &DNSZone{Name: "sub.example.com", NS: []string{"ns1.example.com"}}
	if _, err := s.Put(sub); err != nil {
		t.Fatal(err)
	}
	r := gslbRecord()
	r.Name = "x.sub.example.com"
	_, err = s.Put(r)
	wantErr(t, err, "zone", `lies in zone "sub.example.com"`)
	r.Zone = "sub.example.com"
	before := s.Clone()
	undo, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ZoneRecords("sub.example.com"); len(got) != 1 || got[0].Name != r.Name {
		t.Errorf("ZoneRecords = %v", got)
	}
	undo()
	if !reflect.DeepEqual(s, before) {
		t.Error("undoing the put left the state changed")
	}
	if _, err := s.Delete(KindGSLBRecord, "pathd.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(KindDNSZone, "example.com"); err != nil {
		t.Fatalf("zone without records: %v", err)
	}
}

// TestDNSDocument: the testdata document parses, round-trips through JSON
// and its objects are valid in a State in document order.
func TestDNSDocument(t *testing.T) {
	b, err := os.ReadFile("testdata/documents/dns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.DNSZones) != 1 || len(d.GSLBRecords) != 2 {
		t.Fatalf("document %+v", d)
	}
	js, _ := json.Marshal(d)
	d2, err := ParseDocument(js)
	if err != nil || !reflect.DeepEqual(d, d2) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, d, d2)
	}
	s := NewState()
	for _, p := range d.Placed() {
		if _, err := s.Put(p.Obj); err != nil {
			t.Fatalf("%s: %v", p.Place, err)
		}
	}
	if p := d.GSLBRecords[0].Probe; time6(p.Interval) != "500ms" || p.Fall != 3 {
		t.Errorf("probe %+v", p)
	}
	_, err = ParseDocument([]byte("gslbrecords:\n  - name: a.example.com\n    zone: example.com\n    policy: nearest\n    targets: [{vip: 192.0.2.1, region: eu, weight: -1}]\n"))
	if err == nil || !strings.Contains(err.Error(), "gslbrecords[0].targets[0].weight") {
		t.Errorf("negative weight: %v", err)
	}
}

func time6(d Duration) string { return time.Duration(d).String() }

// FuzzDNSBodies: a dnszones or gslbrecords API body never panics the
// decoder or Validate, and an accepted object (with its defaults) encodes
// to JSON that decodes and encodes to the same JSON.
func FuzzDNSBodies(f *testing.F) {
	z, _ := json.Marshal(dnsZone())
	r, _ := json.Marshal(gslbRecord())
	f.Add(true, z)
	f.Add(false, r)
	f.Add(false, []byte(`{"name":"a.b","zone":"b","policy":"weighted","targets":[{"vip":"2001:db8::1","region":"x","weight":1048576}],"probe":{"kind":"https","insecure":true,"timeout":"1ms"}}`))
	f.Add(true, []byte(`{"name":"b","ns":["x."],"records":[{"name":"@","type":"MX","value":"10 @"}]}`))
	f.Fuzz(func(t *testing.T, zone bool, data []byte) {
		kind := KindGSLBRecord
		if zone {
			kind = KindDNSZone
		}
		o, err := Decode(kind, data)
		if err != nil {
			return
		}
		if es := o.Validate(); len(es) > 0 {
			return
		}
		if d, ok := o.(interface{ Defaults() }); ok {
			d.Defaults()
		}
		if es := o.Validate(); len(es) > 0 {
			t.Fatalf("valid object invalid after Defaults: %v", es)
		}
		js, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := Decode(kind, js)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", js, err)
		}
		// Compared as JSON: an empty list and an absent one are the same.
		if js2, _ := json.Marshal(o2); string(js) != string(js2) {
			t.Fatalf("round trip changed the object:\n%s\n%s", js, js2)
		}
	})
}

package controller

import (
	"strings"
	"testing"
)

// TestDNSObjects: zones and GSLB records through the API. What the GSLB
// would not compile is refused whole at put time (422 naming the object),
// a record in a missing zone is refused, and a zone records use cannot be
// deleted (409 naming the record). Defaults are stored.
func TestDNSObjects(t *testing.T) {
	s := startServer(t, Config{})
	zone := `{"name": "example.com", "ns": ["ns1.example.com"], "records": [{"name": "www", "type": "A", "value": "192.0.2.10"}]}`
	rec := func(name string) string {
		return `{"name": "` + name + `", "zone": "example.com", "policy": "failover", "targets": [{"vip": "203.0.113.10", "region": "eu"}, {"vip": "203.0.113.20", "region": "us", "order": 1}], "probe": {"kind": "tcp", "port": 443}}`
	}
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"record before its zone", "POST", "/v1/gslbrecords", rec("pathd.example.com"), 422, `zone: DNS zone \"example.com\" does not exist`},
		{"zone", "POST", "/v1/dnszones", zone, 201, `"serial":1`},
		{"invalid zone field", "POST", "/v1/dnszones", `{"name": "Example.org", "ns": ["ns1.example.org"]}`, 422, "lower case"},
		{"record", "POST", "/v1/gslbrecords", rec("pathd.example.com"), 201, `"allDown":"failopen"`},
		// Valid on its own, refused by the compile of the whole zone:
		// www already has a static A record.
		{"record on a static A name", "POST", "/v1/gslbrecords", rec("www.example.com"), 422, `also has a static A record`},
		{"zone adding a static A at the record", "PUT", "/v1/dnszones/example.com",
			`{"name": "example.com", "ns": ["ns1.example.com"], "records": [{"name": "pathd", "type": "A", "value": "192.0.2.11"}]}`, 422, "does not compile"},
		{"zone adding a CNAME beside an A", "PUT", "/v1/dnszones/example.com",
			`{"name": "example.com", "ns": ["ns1.example.com"], "records": [{"name": "www", "type": "A", "value": "192.0.2.10"}, {"name": "www", "type": "CNAME", "value": "x"}]}`, 422, "already has other records"},
		{"delete the zone in use", "DELETE", "/v1/dnszones/example.com", "", 409, "GSLB record pathd.example.com"},
		{"edit the record", "PUT", "/v1/gslbrecords/pathd.example.com", strings.Replace(rec("pathd.example.com"), "failover", "weighted", 1), 200, `"policy":"weighted"`},
		{"delete the record", "DELETE", "/v1/gslbrecords/pathd.example.com", "", 200, "deleted"},
		{"delete the zone", "DELETE", "/v1/dnszones/example.com", "", 200, "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := call(t, s, tc.method, tc.path, body)
			if r.code != tc.code || !strings.Contains(string(r.body), tc.want) {
				t.Fatalf("HTTP %d %s, want %d saying %q", r.code, r.body, tc.code, tc.want)
			}
		})
	}
	// The refused record is not stored.
	if r := call(t, s, "GET", "/v1/gslbrecords/www.example.com", nil); r.code != 404 {
		t.Errorf("refused record stored: HTTP %d %s", r.code, r.body)
	}
}

// TestDNSApply: a document with a zone and records is applied in order,
// and one that does not compile is refused whole.
func TestDNSApply(t *testing.T) {
	s := startServer(t, Config{})
	doc := "dnszones:\n  - {name: example.com, ns: [ns1.example.com], records: [{name: www, type: A, value: 192.0.2.10}]}\n" +
		"gslbrecords:\n  - {name: pathd.example.com, zone: example.com, policy: nearest, targets: [{vip: 203.0.113.10, region: eu}]}\n"
	if r := call(t, s, "POST", "/v1/apply", doc); r.code != 200 {
		t.Fatalf("apply: HTTP %d %s", r.code, r.body)
	}
	bad := doc + "  - {name: www.example.com, zone: example.com, policy: nearest, targets: [{vip: 203.0.113.10, region: eu}]}\n"
	bad = strings.Replace(bad, "example.com", "example.net", -1)
	r := call(t, s, "POST", "/v1/apply", bad)
	if r.code != 422 || !strings.Contains(string(r.body), "static A record") {
		t.Fatalf("apply of a zone that does not compile: HTTP %d %s", r.code, r.body)
	}
	if g := call(t, s, "GET", "/v1/dnszones/example.net", nil); g.code != 404 {
		t.Errorf("a refused document left its zone: HTTP %d", g.code)
	}
}

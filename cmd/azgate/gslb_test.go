//go:build !node

package main

import (
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestDNSGSLBCLI: zones and GSLB records through the CLI and apply against
// a real controller: create, add/remove records, set, get, list; errors
// naming the flag or the field; what the GSLB would not compile refused;
// a zone in use kept from deletion.
func TestDNSGSLBCLI(t *testing.T) {
	s := startController(t)
	out := must(t, s, "dns", "zone", "create", "example.org", "--ns", "ns1.example.org", "--record", "ns1 A 192.0.2.53", "--record", "@ MX 10 mail.example.org.")
	if !strings.Contains(out, "DNS zone example.org created") {
		t.Errorf("zone create: %s", out)
	}
	must(t, s, "dns", "zone", "add-record", "example.org", "www", "TXT", "hello", "world")
	if out := must(t, s, "dns", "zone", "set", "example.org", "--serial", "7", "--negative-ttl", "60"); !strings.Contains(out, "DNS zone example.org (serial, negative-ttl set) updated") {
		t.Errorf("zone set: %s", out)
	}
	out = must(t, s, "dns", "zone", "get", "example.org")
	for _, want := range []string{"ns1.example.org hostmaster.example.org serial 7 refresh 3600 retry 600 expire 1209600 negative-ttl 60", "@     MX    zone  10 mail.example.org.", "www   TXT   zone  hello world"} {
		if !strings.Contains(out, want) {
			t.Errorf("zone get lacks %q:\n%s", want, out)
		}
	}
	out = must(t, s, "gslb", "record", "create", "pathd.example.org", "--zone", "example.org", "--policy", "nearest",
		"--target", "203.0.113.10,region=eu-west,lat=53.35,lon=-6.26,order=1", "--target", "198.51.100.10,region=us-east,lat=39.04,lon=-77.49",
		"--probe", "http:8080", "--probe-path", "/healthz", "--probe-interval", "500ms", "--probe-fall", "3")
	if !strings.Contains(out, "GSLB record pathd.example.org created") {
		t.Errorf("record create: %s", out)
	}
	must(t, s, "gslb", "record", "set", "pathd.example.org", "--policy", "failover", "--all-down", "servfail")
	out = must(t, s, "gslb", "record", "get", "pathd.example.org")
	for _, want := range []string{"failover", "servfail", "http port 8080 every 500ms, timeout 500ms, rise 2, fall 3, GET /healthz", "203.0.113.10   eu-west"} {
		if !strings.Contains(out, want) {
			t.Errorf("record get lacks %q:\n%s", want, out)
		}
	}
	out = must(t, s, "gslb", "record", "list")
	if !strings.Contains(out, "pathd.example.org  example.org  failover  servfail  30   eu-west=203.0.113.10,us-east=198.51.100.10  http:8080") {
		t.Errorf("record list:\n%s", out)
	}
	out = must(t, s, "--json", "gslb", "record", "get", "pathd.example.org")
	for _, want := range []string{`"interval": "500ms"`, `"timeout": "500ms"`, `"rise": 2`, `"weight": 1`} {
		if !strings.Contains(out, want) {
			t.Errorf("json lacks %q (defaults stored):\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gslb", "record", "create", "x.example.org", "--zone", "example.org", "--policy", "nearest", "--target", "web,region=eu"}, `"web" is not an IP address`},
		{[]string{"gslb", "record", "create", "x.example.org", "--zone", "example.org", "--policy", "nearest", "--target", "192.0.2.1,region=eu,speed=1"}, `unknown key "speed"`},
		{[]string{"gslb", "record", "create", "x.example.org", "--zone", "example.org", "--policy", "nearest", "--target", "192.0.2.1,region=eu", "--probe", "tcp"}, "probe.port: required for a tcp probe"},
		{[]string{"gslb", "record", "create", "x.example.org", "--zone", "example.org", "--policy", "nearest", "--target", "192.0.2.1,region=eu", "--probe-fall", "3"}, "the record has no probe"},
		{[]string{"gslb", "record", "create", "x.example.net", "--zone", "example.net", "--policy", "nearest", "--target", "192.0.2.1,region=eu"}, `DNS zone "example.net" does not exist`},
		// Valid alone; the zone already has a static A at ns1.
		{[]string{"gslb", "record", "create", "ns1.example.org", "--zone", "example.org", "--policy", "nearest", "--target", "192.0.2.1,region=eu"}, "also has a static A record"},
		{[]string{"dns", "zone", "add-record", "example.org", "pathd", "A", "192.0.2.9"}, "does not compile"},
		{[]string{"dns", "zone", "create", "Example.com", "--ns", "ns1.example.com"}, "name: \"Example.com\": write the name in lower case"},
		{[]string{"dns", "zone", "remove-record", "example.org", "nope", "A"}, `zone example.org has no A record "nope"`},
		{[]string{"dns", "zone", "set", "example.org"}, "nothing to change"},
		{[]string{"dns", "zone", "set", "example.org", "--ttl", "100000"}, "ttl: 100000: at most 86400"},
		{[]string{"dns", "zone", "delete", "example.org"}, "DNS zone example.org has GSLB record pathd.example.org"},
	} {
		out, err := azgate(t, s, "", tc.args...)
		if err == nil || !strings.Contains(err.Error()+out, tc.want) {
			t.Errorf("azgate %s: %v\n%s\nwant %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	must(t, s, "dns", "zone", "remove-record", "example.org", "www", "TXT")
	must(t, s, "gslb", "record", "delete", "pathd.example.org")
	must(t, s, "dns", "zone", "delete", "example.org")
	// Documents through apply.
	out = must(t, s, "apply", "-f", "testdata/dns.yaml")
	if !strings.Contains(out, "3 created") {
		t.Errorf("apply: %s", out)
	}
	out = must(t, s, "dns", "zone", "list")
	if !strings.Contains(out, "example.com  ns1.example.com,ns2.example.com.  600  2026120301  5") {
		t.Errorf("zone list:\n%s", out)
	}
	if out := must(t, s, "gslb", "status"); !strings.Contains(out, "no gslb node reports its status") {
		t.Errorf("status: %s", out)
	}
}

// TestDNSRelativeData: record data naming a host without the trailing
// dot is warned about when written and shown fully qualified.
func TestDNSRelativeData(t *testing.T) {
	s := startController(t)
	must(t, s, "dns", "zone", "create", "example.org", "--ns", "ns1.example.org", "--record", "ns1 A 192.0.2.53")
	out := must(t, s, "dns", "zone", "add-record", "example.org", "www", "CNAME", "web.example.org")
	if !strings.Contains(out, `warning: DNS zone "example.org": record www CNAME: "web.example.org" has no trailing dot: it is a name relative to the zone, "web.example.org.example.org."`) {
		t.Errorf("add-record of a relative CNAME:\n%s", out)
	}
	out = must(t, s, "dns", "zone", "add-record", "example.org", "mail", "CNAME", "mx.example.org.")
	if strings.Contains(out, "warning") {
		t.Errorf("add-record of a qualified CNAME:\n%s", out)
	}
	out = must(t, s, "dns", "zone", "get", "example.org")
	for _, want := range []string{`web.example.org.example.org.  (written "web.example.org": no trailing dot, relative to the zone)`, "mail  CNAME  zone  mx.example.org.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("zone get does not show %q:\n%s", want, out)
		}
	}
}

func TestMetricsLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:9467", "", true}, {"[::1]:9467", "", true}, {"localhost:9467", "", true}, {"", "", true},
		{"0.0.0.0:9467", "", false}, {"192.0.2.1:9467", "", false}, {":9467", "", false}, {"0.0.0.0:9467", "secret", true},
	} {
		if err := loopbackOnly(tc.addr, tc.token); (err == nil) != tc.ok {
			t.Errorf("loopbackOnly(%q, %q) = %v", tc.addr, tc.token, err)
		}
	}
}

// TestParseZoneRecord: the value is what follows the type, even when the
// name spells the type, and keeps its inner spaces.
func TestParseZoneRecord(t *testing.T) {
	for spec, want := range map[string]model.ZoneRecord{
		"www A 192.0.2.10":           {Name: "www", Type: "A", Value: "192.0.2.10"},
		"mx mx 10 mail.example.com.": {Name: "mx", Type: "MX", Value: "10 mail.example.com."},
		"  AAA  A   192.0.2.1 ":      {Name: "AAA", Type: "A", Value: "192.0.2.1"},
		"txt TXT  two  words":        {Name: "txt", Type: "TXT", Value: "two  words"},
		"@ MX 10 mail.example.com.":  {Name: "@", Type: "MX", Value: "10 mail.example.com."},
	} {
		got, err := parseZoneRecord(spec, 0)
		if err != nil || got != want {
			t.Errorf("parseZoneRecord(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	if _, err := parseZoneRecord("www A", 0); err == nil {
		t.Error("a record without a value was accepted")
	}
}

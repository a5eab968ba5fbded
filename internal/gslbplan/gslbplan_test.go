package gslbplan

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

func zone() *model.DNSZone {
	return &model.DNSZone{Name: "example.com", NS: []string{"ns1.example.com"},
		Records: []model.ZoneRecord{{Name: "www", Type: "A", Value: "192.0.2.10"}}}
}

func rec(name string, vips ...string) *model.GSLBRecord {
	r := &model.GSLBRecord{Name: name, Zone: "example.com", Policy: model.GSLBNearest,
		Probe: &model.GSLBProbe{Kind: "tcp", Port: 443}}
	for _, v := range vips {
		r.Targets = append(r.Targets, model.GSLBTarget{VIP: netip.MustParseAddr(v), Region: "eu"})
	}
	return r
}

// TestBuildSkips: a store written past the API (State.Set, no checks) is
// served minus what does not compile, each skip named.
func TestBuildSkips(t *testing.T) {
	st := model.NewState()
	st.Set(zone())
	st.Set(rec("pathd.example.com", "203.0.113.10", "2001:db8::10"))
	st.Set(rec("www.example.com", "203.0.113.11"))                                           // static A at www
	st.Set(&model.GSLBRecord{Name: "a.example.org", Zone: "example.org", Policy: "nearest"}) // no zone
	bad := zone()
	bad.Name, bad.NS = "bad.net", nil // no NS: the zone does not compile
	st.Set(bad)
	st.Set(&model.GSLBRecord{Name: "x.bad.net", Zone: "bad.net", Policy: "failover", Targets: rec("x", "192.0.2.1").Targets})
	p := Build(st)
	if len(p.Config.Zones) != 1 || len(p.Records) != 1 || p.Records[0].Name != "pathd.example.com" {
		t.Fatalf("plan %+v", p)
	}
	var skipped []string
	for _, s := range p.Skipped {
		skipped = append(skipped, s.Kind+"/"+s.Key+": "+s.Err)
	}
	got := strings.Join(skipped, "\n")
	for _, want := range []string{"dnszones/bad.net: ns: at least one", "gslbrecords/x.bad.net: its zone bad.net is skipped",
		"gslbrecords/www.example.com: gslb[1]", "also has a static A record", "gslbrecords/a.example.org: zone example.org does not exist"} {
		if !strings.Contains(got, want) {
			t.Errorf("skipped lacks %q:\n%s", want, got)
		}
	}
	// Dual-stack region: the IPv6 target's key says so.
	if len(p.Targets) != 2 || p.Targets[0].Key != "pathd.example.com/eu" || p.Targets[1].Key != "pathd.example.com/eu/ipv6" {
		t.Errorf("targets %+v", p.Targets)
	}
	if p.Targets[0].Spec.Interval == 0 || p.Targets[0].Spec.Fall != 2 {
		t.Errorf("spec not normalized: %+v", p.Targets[0].Spec)
	}
}

// TestCheckZone: the controller's check names the conflict.
func TestCheckZone(t *testing.T) {
	st := model.NewState()
	st.Set(zone())
	st.Set(rec("pathd.example.com", "203.0.113.10"))
	if err := CheckZone(st, "example.com"); err != nil {
		t.Fatal(err)
	}
	www := rec("www.example.com", "203.0.113.11")
	if err := CheckRecord(st, www); err == nil || !strings.Contains(err.Error(), `does not compile with zone example.com: gslb[0] ("www.example.com."): name: "www.example.com." also has a static A record`) {
		t.Errorf("CheckRecord: %v", err)
	}
	st.Set(www)
	err := CheckZone(st, "example.com")
	if err == nil || !strings.Contains(err.Error(), `zone example.com with its 2 GSLB record(s) does not compile: gslb[1] ("www.example.com."): name: "www.example.com." also has a static A record`) {
		t.Errorf("CheckZone: %v", err)
	}
}

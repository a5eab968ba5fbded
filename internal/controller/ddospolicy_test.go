package controller

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/ddos"
	"github.com/azgate/azgate/internal/model"
)

// TestDDoSPolicyAtRunTime: with the detector running on the flags'
// thresholds, DDoS policies written through the API change them without
// a restart: the region policy lowers the global threshold, a set policy
// raises its set's, an address entry its EIP's; an EIP is quarantined
// against the level that applies to it. Rates come as the edges publish
// them (leased rate reports in etcd).
func TestDDoSPolicyAtRunTime(t *testing.T) {
	s := startServer(t, Config{DDoS: DDoSConfig{Interval: 50 * time.Millisecond,
		Detector: ddos.Config{Threshold: ddos.Rates{PPS: 10_000, BPS: -1, SYN: -1}, Enter: 2, Cooldown: time.Hour}}})
	doc := `{"edgesets":[{"name":"p","prefixes":["198.51.100.0/25"],"edges":[{"name":"e1","underlay":"198.18.0.1"}]},
		{"name":"r","prefixes":["198.51.100.128/25"],"edges":[{"name":"e2","underlay":"198.18.0.2"}]},
		{"name":"q","role":"quarantine","prefixes":[],"edges":[{"name":"e3","underlay":"198.18.0.3"}]}],
		"eips":[{"address":"198.51.100.7"},{"address":"198.51.100.8"},{"address":"198.51.100.9"},{"address":"198.51.100.200"}]}`
	if r := call(t, s, http.MethodPost, "/v1/apply", doc); r.code != http.StatusOK {
		t.Fatalf("apply: HTTP %d %s", r.code, r.body)
	}
	ctx := context.Background()
	lease, err := s.Store().Grant(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A quiet EIP reported: the controller starts deciding, on the
	// flags' thresholds.
	publishRates(t, s, lease, "e1", model.EIPRate{Address: mustAddr("198.51.100.9"), PPS: 100})
	waitFor(t, func() bool { return ddosEvents(t, s).Acting })

	for _, p := range []string{
		`{"name":"region","thresholds":{"pps":4000},"addresses":[{"address":"198.51.100.8","thresholds":{"pps":100000}}]}`,
		`{"name":"r","thresholds":{"pps":8000}}`,
	} {
		if r := call(t, s, http.MethodPost, "/v1/ddospolicies", p); r.code != http.StatusCreated {
			t.Fatalf("POST %s: HTTP %d %s", p, r.code, r.body)
		}
	}
	// 5,000 pps each: above the region's 4,000 (not the flags' 10,000);
	// below the 8,000 of set r (.200) and the 100,000 of .8's entry.
	// They are reported together, so they are judged in the same rounds.
	flood := []model.EIPRate{{Address: mustAddr("198.51.100.7"), PPS: 5000}, {Address: mustAddr("198.51.100.8"), PPS: 5000}}
	var q *model.Quarantine
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && q == nil; time.Sleep(60 * time.Millisecond) {
		publishRates(t, s, lease, "e1", flood...)
		publishRates(t, s, lease, "e2", model.EIPRate{Address: mustAddr("198.51.100.200"), PPS: 5000})
		if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.7", nil); r.code == http.StatusOK {
			q = &model.Quarantine{}
			r.decode(t, q)
		}
	}
	if q == nil {
		t.Fatalf("198.51.100.7 (5,000 pps, region policy 4,000) not quarantined within 10 s; events %+v", ddosEvents(t, s).Events)
	}
	if q.By != "ddos" || !strings.Contains(q.Reason, "pps 5000 > 4000") {
		t.Errorf("quarantine %+v: want the region policy's 4,000 in the reason", q)
	}
	for _, e := range ddosEvents(t, s).Events {
		if e.Address != mustAddr("198.51.100.7") {
			t.Errorf("event %+v: only 198.51.100.7 is above the level that applies to it", e)
		}
	}

	// Set r's policy lowered at run time: .200 is quarantined against it.
	if r := call(t, s, http.MethodPut, "/v1/ddospolicies/r", `{"name":"r","thresholds":{"pps":4500}}`); r.code != http.StatusOK {
		t.Fatalf("PUT r: HTTP %d %s", r.code, r.body)
	}
	q = nil
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && q == nil; time.Sleep(60 * time.Millisecond) {
		publishRates(t, s, lease, "e1", flood...)
		publishRates(t, s, lease, "e2", model.EIPRate{Address: mustAddr("198.51.100.200"), PPS: 5000})
		if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.200", nil); r.code == http.StatusOK {
			q = &model.Quarantine{}
			r.decode(t, q)
		}
	}
	if q == nil || !strings.Contains(q.Reason, "pps 5000 > 4500") {
		t.Fatalf("198.51.100.200 after set r's policy went to 4,500: %+v", q)
	}
	if r := call(t, s, http.MethodGet, "/v1/quarantines/198.51.100.8", nil); r.code != http.StatusNotFound {
		t.Errorf("198.51.100.8 (its own 100,000): HTTP %d, want 404", r.code)
	}
	// The policy writes are audited like any other write.
	if r := call(t, s, http.MethodGet, "/v1/audit", nil); !strings.Contains(string(r.body), "/v1/ddospolicies/r") {
		t.Errorf("audit log lacks the policy write: %s", r.body)
	}
}

// TestDDoSPolicyInvalid: a policy with errors is refused whole (422),
// every error naming its field, and the stored one is unchanged; a set
// policy names an edge set that is not the quarantine set, and sets
// thresholds only; an edge set with a policy is not deleted.
func TestDDoSPolicyInvalid(t *testing.T) {
	s := startServer(t, Config{})
	doc := `{"edgesets":[{"name":"p","prefixes":["198.51.100.0/24"],"edges":[{"name":"e1","underlay":"198.18.0.1"}]},
		{"name":"q","role":"quarantine","prefixes":[],"edges":[{"name":"e3","underlay":"198.18.0.3"}]}],
		"ddospolicies":[{"name":"region","thresholds":{"pps":4000}}]}`
	if r := call(t, s, http.MethodPost, "/v1/apply", doc); r.code != http.StatusOK {
		t.Fatalf("apply: HTTP %d %s", r.code, r.body)
	}
	for _, tc := range []struct {
		method, path, body string
		fields             []string
	}{
		{http.MethodPut, "/v1/ddospolicies/region", `{"name":"region","thresholds":{"pps":-5,"bps":20000000000000},"enterRounds":-1,"cooldown":"1ms",
			"baselineWeight":2,"addresses":[{"address":"0.0.0.0","thresholds":{"pps":1}},{"address":"198.51.100.7","thresholds":{}}]}`,
			[]string{"thresholds.pps", "thresholds.bps", "enterRounds", "cooldown", "baselineWeight", "addresses[0].address", "addresses[1].thresholds"}},
		{http.MethodPut, "/v1/ddospolicies/region", `{"name":"region","thresholds":{"pps":-1,"bps":-1,"synps":-1}}`, []string{"thresholds"}},
		{http.MethodPost, "/v1/ddospolicies", `{"name":"p","cooldown":"5s","thresholds":{"pps":1}}`, []string{"cooldown"}},
		{http.MethodPost, "/v1/ddospolicies", `{"name":"q","thresholds":{"pps":1}}`, []string{"name"}},
		{http.MethodPost, "/v1/ddospolicies", `{"name":"nosuch","thresholds":{"pps":1}}`, []string{"name"}},
	} {
		r := call(t, s, tc.method, tc.path, tc.body)
		if r.code != http.StatusUnprocessableEntity {
			t.Errorf("%s %s: HTTP %d %s, want 422", tc.method, tc.body, r.code, r.body)
			continue
		}
		e := r.apiError(t)
		got := map[string]bool{}
		for _, f := range e.Fields {
			got[f.Field] = true
		}
		for _, f := range tc.fields {
			if !got[f] {
				t.Errorf("%s: no error names %q: %+v", tc.body, f, e.Fields)
			}
		}
	}
	var p model.DDoSPolicy
	call(t, s, http.MethodGet, "/v1/ddospolicies/region", nil).decode(t, &p)
	if p.Thresholds != (model.DDoSThresholds{PPS: 4000}) || p.Cooldown != 0 || len(p.Addresses) != 0 {
		t.Errorf("stored policy %+v: want it unchanged", p)
	}
	if r := call(t, s, http.MethodPost, "/v1/ddospolicies", `{"name":"p","thresholds":{"synps":100}}`); r.code != http.StatusCreated {
		t.Fatalf("set policy p: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, http.MethodDelete, "/v1/edgesets/p", nil); r.code != http.StatusConflict || !strings.Contains(string(r.body), "DDoS policy") {
		t.Errorf("deleting set p under its policy: HTTP %d %s, want 409", r.code, r.body)
	}
}

// TestPolicyConfig: precedence of the flags and the policies.
func TestPolicyConfig(t *testing.T) {
	base, err := ddos.Config{Threshold: ddos.Rates{PPS: 10_000, BPS: 1e9, SYN: 500}, Cooldown: time.Minute,
		Override: map[netip.Addr]ddos.Rates{mustAddr("198.51.100.7"): {PPS: 1}, mustAddr("198.51.100.8"): {PPS: 2}}}.Check()
	if err != nil {
		t.Fatal(err)
	}
	c, err := policyConfig(base, map[string]*model.DDoSPolicy{
		"region": {Name: "region", Thresholds: model.DDoSThresholds{PPS: 4000, SYNPS: -1}, Cooldown: model.Duration(5 * time.Second),
			Addresses: []model.DDoSAddress{{Address: mustAddr("198.51.100.8"), Thresholds: model.DDoSThresholds{BPS: 7}}}},
		"p": {Name: "p", Thresholds: model.DDoSThresholds{PPS: 9}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Threshold != (ddos.Rates{PPS: 4000, BPS: 1e9, SYN: -1}) || c.Cooldown != 5*time.Second || c.Enter != base.Enter {
		t.Errorf("region: %+v (cooldown %v)", c.Threshold, c.Cooldown)
	}
	if c.Override[mustAddr("198.51.100.7")] != (ddos.Rates{PPS: 1}) || c.Override[mustAddr("198.51.100.8")] != (ddos.Rates{BPS: 7}) {
		t.Errorf("overrides %+v: want the flag's for .7, the policy's for .8", c.Override)
	}
	if c.SetThreshold["p"] != (ddos.Rates{PPS: 9}) || base.Override[mustAddr("198.51.100.8")] != (ddos.Rates{PPS: 2}) {
		t.Errorf("set thresholds %+v; the base changed: %+v", c.SetThreshold, base.Override)
	}
	// The whole is checked: the flags turn bps off, the policy the rest.
	off, _ := ddos.Config{Threshold: ddos.Rates{BPS: -1}}.Check()
	if _, err := policyConfig(off, map[string]*model.DDoSPolicy{"region": {Name: "region", Thresholds: model.DDoSThresholds{PPS: -1, SYNPS: -1}}}); err == nil {
		t.Error("every threshold off between the flags and the policy: accepted")
	}
}

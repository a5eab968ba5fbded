package controller

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/api"
)

// TestDryRunShowsRefusals: a dry run of a change the guards refuse
// answers with its plan (the diff) and the refusals the write would hit,
// instead of stopping at the refusal; the write itself is still a 409,
// and nothing is written either way.
func TestDryRunShowsRefusals(t *testing.T) {
	s := startServer(t, Config{})
	c := s.Core
	doc := readDoc(t)
	if _, err := newClient(s).Apply(t.Context(), doc); err != nil {
		t.Fatal(err)
	}
	before := c.Revision()

	// One object: a global allow rule.
	rule := map[string]any{"name": "office", "action": "allow", "sources": []string{"192.0.2.0/24"}}
	r := call(t, s, "POST", "/v1/firewallrules?dryRun=true", rule)
	var w api.Write
	if err := json.Unmarshal(r.body, &w); r.code != 200 || err != nil || !w.DryRun || w.Action != api.Created ||
		len(w.Refusals) != 1 || !strings.Contains(w.Refusals[0], "global allow rule") {
		t.Errorf("dry run of a refused create: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "POST", "/v1/firewallrules", rule); r.code != 409 {
		t.Errorf("the write itself: HTTP %d, want 409", r.code)
	}
	// A dry run with force has no refusals.
	r = call(t, s, "POST", "/v1/firewallrules?dryRun=true&force=true", rule)
	if w = (api.Write{}); json.Unmarshal(r.body, &w) != nil || !w.DryRun || len(w.Refusals) != 0 {
		t.Errorf("dry run with force: HTTP %d %s", r.code, r.body)
	}

	// An apply: the diff of every object and both refusals (the allow
	// rule, the prune of every EIP).
	body := `{"azs":[{"name":"az1","region":"r1","description":"changed"},{"name":"az2","region":"r1"}],"eips":[],
		"firewallrules":[{"name":"office","action":"allow","sources":["192.0.2.0/24"]}]}`
	r = call(t, s, "POST", "/v1/apply?dryRun=true&prune=true&diff=true", body)
	var res api.ApplyResult
	if err := json.Unmarshal(r.body, &res); r.code != 200 || err != nil || !res.DryRun || res.Updated != 1 || res.Created != 1 || res.Deleted != 3 ||
		len(res.Refusals) != 2 || !strings.Contains(strings.Join(res.Refusals, ";"), "global allow rule") ||
		!strings.Contains(strings.Join(res.Refusals, ";"), "prune would delete every EIP (3)") {
		t.Errorf("dry run of a refused apply: HTTP %d %s", r.code, r.body)
	}
	if len(res.Objects) == 0 || res.Objects[0].Key != "az1" || len(res.Objects[0].Changes) != 1 || res.Objects[0].Changes[0].Field != "description" {
		t.Errorf("the plan lacks the diff of az1: %+v", res.Objects)
	}
	if r := call(t, s, "POST", "/v1/apply?prune=true", body); r.code != 409 || !r.apiError(t).Force {
		t.Errorf("the apply itself: HTTP %d %s, want 409 with force", r.code, r.body)
	}
	if c.Revision() != before {
		t.Errorf("revision moved from %d to %d", before, c.Revision())
	}
}

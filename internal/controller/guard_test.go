package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

var forced = WithWriteOptions(context.Background(), WriteOptions{Force: true})

// refused asserts err is a ForceError saying want, and that nothing was
// written (the revision did not move).
func refused(t *testing.T, c *Core, before int64, err error, want string) {
	t.Helper()
	var fe *ForceError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was written") {
		t.Errorf("error %v, want a refusal saying %q", err, want)
	}
	if c.Revision() != before {
		t.Errorf("revision moved from %d to %d: a refused change was written", before, c.Revision())
	}
}

func TestGuards(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()

	t.Run("global allow rule", func(t *testing.T) {
		r := &model.FirewallRule{Name: "office", Action: model.FirewallAllow, Sources: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
		before := c.Revision()
		_, err := c.Create(ctx, r)
		refused(t, c, before, err, `firewall rule "office" is a global allow rule: every EIP (3) and VIP (1) of the region`)
		// Scoped to one address it passes; forced, the global one too.
		scoped := *r
		scoped.Name, scoped.Address = "office-one", netip.MustParseAddr("198.51.100.7")
		if _, err := c.Create(ctx, &scoped); err != nil {
			t.Fatal(err)
		}
		if w, err := c.Create(forced, r); err != nil || w.Action != api.Created {
			t.Fatalf("forced: %+v, %v", w, err)
		}
		// Replacing it with itself is not a new global allow rule.
		if _, err := c.Replace(ctx, "office", IfMatch{}, r); err != nil {
			t.Errorf("replacing the rule unchanged: %v", err)
		}
		c.Delete(ctx, model.KindFirewallRule, "office", IfMatch{})
		c.Delete(ctx, model.KindFirewallRule, "office-one", IfMatch{})
	})

	t.Run("duplicate and contradictory rules", func(t *testing.T) {
		// everykind.yaml holds "block": deny tcp from 203.0.113.0/24, global.
		dup := &model.FirewallRule{Name: "block2", Action: model.FirewallDeny, Protocol: "tcp", Sources: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
		w, err := c.Create(ctx, dup)
		if err != nil || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], `"block2" duplicates rule "block"`) {
			t.Errorf("duplicate: %+v, %v", w, err)
		}
		allow := &model.FirewallRule{Name: "let-in", Action: model.FirewallAllow, Protocol: "tcp", Port: 443, Address: netip.MustParseAddr("198.51.100.7"),
			Sources: []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")}}
		deny := &model.FirewallRule{Name: "keep-out", Action: model.FirewallDeny, Address: netip.MustParseAddr("198.51.100.7"),
			Sources: []netip.Prefix{netip.MustParsePrefix("203.0.0.0/16")}}
		if _, err := c.Create(ctx, allow); err != nil {
			t.Fatal(err)
		}
		w, err = c.Create(ctx, deny)
		if err != nil || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], `"keep-out" (deny) and "let-in" (allow) contradict each other for sources in 203.0.113.128/25 to 198.51.100.7`) {
			t.Errorf("contradiction: %+v, %v", w, err)
		}
		for _, n := range []string{"block2", "let-in", "keep-out"} {
			c.Delete(ctx, model.KindFirewallRule, n, IfMatch{})
		}
	})

	t.Run("last serving edge", func(t *testing.T) {
		o, _, _, _ := c.Get(model.KindEdgeSet, "pop-a")
		set := *o.(*model.EdgeSet)
		set.Edges = []model.EdgeNode{set.Edges[0]}
		set.Edges[0].Drained = true
		before := c.Revision()
		_, err := c.Replace(ctx, "pop-a", IfMatch{}, &set)
		refused(t, c, before, err, `edge set "pop-a" would have no serving edge`)
		// A second edge serving: draining the first one is fine.
		two := set // stored: a copy changed from here on
		two.Edges = []model.EdgeNode{set.Edges[0], {Name: "edge-a2", Underlay: netip.MustParseAddr("198.18.0.2")}}
		if _, err := c.Replace(ctx, "pop-a", IfMatch{}, &two); err != nil {
			t.Fatal(err)
		}
		none := two
		none.Edges = []model.EdgeNode{two.Edges[0], two.Edges[1]}
		none.Edges[1].Drained = true
		before = c.Revision()
		_, err = c.Replace(ctx, "pop-a", IfMatch{}, &none)
		refused(t, c, before, err, "no serving edge")
		if _, err := c.Replace(forced, "pop-a", IfMatch{}, &none); err != nil {
			t.Errorf("forced: %v", err)
		}
	})

	t.Run("last backend", func(t *testing.T) {
		before := c.Revision()
		_, err := c.SetWeight(ctx, "web", IfMatch{}, "web", "az1-h1/g1:8080", 0)
		refused(t, c, before, err, `pool "web" of service "web" would have no serving backend`)
		_, err = c.RemoveBackend(ctx, "web", IfMatch{}, "web", "az1-h1/g1:8080")
		if err == nil || !strings.Contains(err.Error(), "no serving backend") && !strings.Contains(err.Error(), "backend") {
			t.Errorf("removing the last backend: %v", err)
		}
		if w, err := c.SetWeight(forced, "web", IfMatch{}, "web", "az1-h1/g1:8080", 0); err != nil || w.Action != api.Updated {
			t.Errorf("forced drain: %+v, %v", w, err)
		}
	})

	t.Run("VIP a GSLB record targets", func(t *testing.T) {
		o, _, _, _ := c.Get(model.KindService, "web")
		svc := o.(*model.Service).Clone()
		svc.Name, svc.VIP = "geo", netip.MustParseAddr("198.51.100.10")
		if _, err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		before := c.Revision()
		_, err := c.Delete(ctx, model.KindService, "geo", IfMatch{})
		refused(t, c, before, err, `the VIP 198.51.100.10 of service "geo" is a target of GSLB record(s) w.example.com`)
		if _, err := c.Delete(forced, model.KindService, "geo", IfMatch{}); err != nil {
			t.Errorf("forced: %v", err)
		}
	})

	t.Run("DNS data not fully qualified", func(t *testing.T) {
		w, err := c.AddZoneRecord(ctx, "example.com", IfMatch{}, model.ZoneRecord{Name: "www", Type: "CNAME", Value: "web.example.com"})
		if err != nil || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], `"web.example.com" has no trailing dot: it is a name relative to the zone, "web.example.com.example.com."`) {
			t.Errorf("relative CNAME: %+v, %v", w, err)
		}
		w, err = c.AddZoneRecord(ctx, "example.com", IfMatch{}, model.ZoneRecord{Name: "www2", Type: "CNAME", Value: "web.example.com."})
		if err != nil || len(w.Warnings) != 0 {
			t.Errorf("qualified CNAME: %+v, %v", w, err)
		}
	})
}

func TestApplyDryRunPruneDiff(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	dry := WithWriteOptions(ctx, WriteOptions{DryRun: true})
	doc := func(y string) *model.Document {
		t.Helper()
		d, err := model.ParseDocument([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	before := c.Revision()
	d := doc("eips: [{address: 198.51.100.7, description: changed}, {address: 198.51.100.30}]\n")
	res, err := c.Apply(dry, d, ApplyOptions{Diff: true})
	if err != nil || !res.DryRun || res.Created != 1 || res.Updated != 1 || res.Revision != before || c.Revision() != before {
		t.Fatalf("dry run: %+v, %v (revision %d, before %d)", res, err, c.Revision(), before)
	}
	if ch := res.Objects[0].Changes; len(ch) != 1 || ch[0].Field != "description" || ch[0].Old != nil || string(ch[0].New) != `"changed"` {
		t.Errorf("diff of the updated EIP: %+v", res.Objects[0])
	}
	if _, _, _, err := c.Get(model.KindEIP, "198.51.100.30"); err == nil {
		t.Error("the dry run wrote an EIP")
	}
	// A dry run of an invalid document fails as the apply would.
	if _, err := c.Apply(dry, doc("eips: [{address: 192.0.2.99}]\n"), ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "eips[0]") {
		t.Errorf("invalid dry run: %v", err)
	}

	// Prune: the EIPs the document does not hold go (8 and 9); 8 is
	// quarantined and in a package... only the ones nothing refers to.
	d = doc("eips: [{address: 198.51.100.7}, {address: 198.51.100.8}]\n")
	res, err = c.Apply(dry, d, ApplyOptions{Prune: true})
	if err != nil || res.Deleted != 1 || res.Objects[len(res.Objects)-1].Key != "198.51.100.9" {
		t.Fatalf("prune dry run: %+v, %v", res, err)
	}
	// Pruning every object of a kind is refused without force.
	before = c.Revision()
	_, err = c.Apply(ctx, doc("gslbrecords: []\n"), ApplyOptions{Prune: true})
	refused(t, c, before, err, "prune would delete every GSLB record (1)")
	res, err = c.Apply(forced, doc("gslbrecords: []\n"), ApplyOptions{Prune: true})
	if err != nil || res.Deleted != 1 || c.Revision() == before {
		t.Errorf("forced prune: %+v, %v", res, err)
	}
	// A kind the document does not name is not pruned.
	res, err = c.Apply(ctx, doc("azs: [{name: az1}, {name: az2}]\n"), ApplyOptions{Prune: true})
	if err != nil || res.Deleted != 0 || res.Unchanged != 2 {
		t.Errorf("prune of azs: %+v, %v", res, err)
	}
	// A prune that breaks a reference fails naming it, writing nothing.
	before = c.Revision()
	_, err = c.Apply(ctx, doc("hosts: []\n"), ApplyOptions{Prune: true})
	if err == nil || !strings.Contains(err.Error(), `pruning host "az1-h1"`) || c.Revision() != before {
		t.Errorf("prune of a host in use: %v", err)
	}
}

// TestGuardsHTTP: a refusal is a 409 with "force": true; force=true and
// dryRun=true are query parameters of every write; bad values are 400.
func TestGuardsHTTP(t *testing.T) {
	s := startServer(t, Config{})
	rule := map[string]any{"name": "office", "action": "allow", "sources": []string{"192.0.2.0/24"}}
	r := call(t, s, "POST", "/v1/firewallrules", rule)
	if e := r.apiError(t); r.code != 409 || !e.Force || !strings.Contains(e.Error, "global allow rule") {
		t.Errorf("global allow rule: HTTP %d %s", r.code, r.body)
	}
	r = call(t, s, "POST", "/v1/firewallrules?force=true&dryRun=true", rule)
	var w api.Write
	if err := json.Unmarshal(r.body, &w); r.code != 200 || err != nil || !w.DryRun || w.Action != api.Created {
		t.Errorf("dry run: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "GET", "/v1/firewallrules/office", nil); r.code != 404 {
		t.Errorf("the dry run stored the rule: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "POST", "/v1/firewallrules?force=yes", rule); r.code != 400 || !strings.Contains(r.apiError(t).Error, `force="yes"`) {
		t.Errorf("force=yes: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "POST", "/v1/firewallrules?force=true", rule); r.code != 201 {
		t.Errorf("forced: HTTP %d %s", r.code, r.body)
	}
	for _, q := range []string{"limit=-1", "limit=x", "prefix=nope"} {
		if r := call(t, s, "GET", "/v1/eips?"+q, nil); r.code != 400 {
			t.Errorf("GET /v1/eips?%s: HTTP %d %s", q, r.code, r.body)
		}
	}
	if r := call(t, s, "GET", "/v1/azs?host=h1", nil); r.code != 422 {
		t.Errorf("an EIP filter on azs: HTTP %d %s", r.code, r.body)
	}
}

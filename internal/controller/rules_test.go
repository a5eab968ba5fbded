package controller

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// The rules are pure: these tables need no store and no HTTP server.

// everyKind is the state of testdata/everykind.yaml.
func everyKind(t *testing.T) *model.State {
	t.Helper()
	b, err := os.ReadFile("testdata/everykind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	st := model.NewState()
	for _, p := range d.Placed() {
		defaults(p.Obj)
		if _, err := st.Put(p.Obj); err != nil {
			t.Fatalf("%s: %v", p.Place, err)
		}
	}
	return st
}

// kindOf names the type of a rule's error ("" for none).
func kindOf(err error) string {
	var (
		nf  *NotFoundError
		ce  *ConflictError
		mce *model.ConflictError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &nf):
		return "not found"
	case errors.As(err, &ce), errors.As(err, &mce):
		return "conflict"
	}
	return "other: " + err.Error()
}

func TestRules(t *testing.T) {
	weight := func(v *model.Service, key string) *uint32 {
		p, i, err := findBackend(v, "web", key)
		if err != nil {
			t.Fatal(err)
		}
		return p.Backends[i].Weight
	}
	for _, c := range []struct {
		name string
		rule func(st *model.State) error
		want string // kindOf the error
		msg  string // the error's text
		then func(t *testing.T, st *model.State)
	}{
		{name: "add guest",
			rule: func(st *model.State) error {
				return addGuestTo(cloneHost(st.Hosts["az1-h1"]), model.Guest{Name: "g2", Address: mustAddr("198.19.1.2"), VSID: 5001})
			}},
		{name: "add guest twice", want: "conflict", msg: `host "az1-h1" already has a guest "g1"`,
			rule: func(st *model.State) error {
				return addGuestTo(cloneHost(st.Hosts["az1-h1"]), model.Guest{Name: "g1"})
			}},
		{name: "remove missing guest", want: "not found", msg: `host "az1-h1" has no guest "g9"`,
			rule: func(st *model.State) error { return removeGuestFrom(st, cloneHost(st.Hosts["az1-h1"]), "g9") }},
		{name: "remove a backend guest", want: "conflict", msg: "guest az1-h1/g1 is a backend of service web: remove it from the pools first",
			rule: func(st *model.State) error { return removeGuestFrom(st, cloneHost(st.Hosts["az1-h1"]), "g1") }},
		{name: "remove a bound guest", want: "conflict", msg: "guest az1-h1/g1 is bound to EIP 198.51.100.9: unbind it first",
			rule: func(st *model.State) error {
				e := cloneEIP(st.EIPs["198.51.100.9"])
				e.Binding = &model.Binding{Host: "az1-h1", Guest: "g1"}
				if _, err := st.Put(e); err != nil {
					t.Fatal(err)
				}
				return removeGuestFrom(st, cloneHost(st.Hosts["az1-h1"]), "g1")
			}},
		{name: "remove a free guest",
			rule: func(st *model.State) error {
				v := cloneService(st.Services["web"])
				v.Pools[0].Backends = []model.Backend{{Address: mustAddr("198.19.9.9")}}
				st.Set(v)
				h := cloneHost(st.Hosts["az1-h1"])
				if err := removeGuestFrom(st, h, "g1"); err != nil {
					return err
				}
				if len(h.Guests) != 0 || len(st.Hosts["az1-h1"].Guests) != 1 {
					t.Errorf("copy has %d guests, stored %d: want 0 and 1", len(h.Guests), len(st.Hosts["az1-h1"].Guests))
				}
				return nil
			}},
		{name: "backend of a missing pool", want: "not found", msg: `service "web" has no pool "api" (pools: web)`,
			rule: func(st *model.State) error {
				return addBackendTo(cloneService(st.Services["web"]), "api", model.Backend{Address: mustAddr("198.19.9.9")})
			}},
		{name: "backend twice", want: "conflict", msg: `pool "web" of service "web" already has backend az1-h1/g1:8080 (POST .../backends/KEY/weight changes its weight)`,
			rule: func(st *model.State) error {
				return addBackendTo(cloneService(st.Services["web"]), "web", model.Backend{Host: "az1-h1", Guest: "g1", Port: 8080})
			}},
		{name: "remove missing backend", want: "not found", msg: `pool "web" of service "web" has no backend "az1-h1/g1" (keys are host/guest[:port] or address[:port])`,
			rule: func(st *model.State) error {
				return removeBackendFrom(cloneService(st.Services["web"]), "web", "az1-h1/g1")
			}},
		{name: "remove backend",
			rule: func(st *model.State) error {
				v := cloneService(st.Services["web"])
				if err := removeBackendFrom(v, "web", "az1-h1/g1:8080"); err != nil {
					return err
				}
				if len(v.Pools[0].Backends) != 0 || len(st.Services["web"].Pools[0].Backends) != 1 {
					t.Error("the backend is not removed from the copy alone")
				}
				return nil
			}},
		{name: "drain",
			rule: func(st *model.State) error {
				v := cloneService(st.Services["web"])
				if err := setBackendWeight(v, "web", "az1-h1/g1:8080", 0); err != nil {
					return err
				}
				if w := weight(v, "az1-h1/g1:8080"); w == nil || *w != 0 {
					t.Errorf("weight %v, want 0", w)
				}
				if w := weight(st.Services["web"], "az1-h1/g1:8080"); w != nil && *w == 0 {
					t.Error("the stored service was drained")
				}
				return nil
			}},
		{name: "package member twice", want: "conflict", msg: `bandwidth package "shop" already has EIP 198.51.100.7`,
			rule: func(st *model.State) error {
				return addPackageMember(clonePackage(st.BandwidthPackages["shop"]), model.PackageEIP{Address: mustAddr("198.51.100.7")})
			}},
		{name: "remove missing package member", want: "not found", msg: `bandwidth package "shop" has no EIP 198.51.100.9`,
			rule: func(st *model.State) error {
				return removePackageMember(clonePackage(st.BandwidthPackages["shop"]), mustAddr("198.51.100.9"))
			}},
		{name: "zone record twice", want: "conflict", msg: `DNS zone "example.com" already has the record ns1 A 192.0.2.53`,
			rule: func(st *model.State) error {
				return addZoneRecordTo(cloneZone(st.DNSZones["example.com"]), model.ZoneRecord{Name: "ns1", Type: "A", Value: "192.0.2.53"})
			}},
		{name: "GSLB target twice", want: "conflict", msg: `GSLB record "w.example.com" already has a target 198.51.100.10`,
			rule: func(st *model.State) error {
				return addGSLBTargetTo(cloneGSLBRecord(st.GSLBRecords["w.example.com"]), model.GSLBTarget{VIP: mustAddr("198.51.100.10")})
			}},
		{name: "remove missing GSLB target", want: "not found", msg: `GSLB record "w.example.com" has no target 198.51.100.11`,
			rule: func(st *model.State) error {
				return removeGSLBTargetFrom(cloneGSLBRecord(st.GSLBRecords["w.example.com"]), mustAddr("198.51.100.11"))
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := everyKind(t)
			err := c.rule(st)
			if got := kindOf(err); got != c.want {
				t.Fatalf("error %q (%v), want %q", got, err, c.want)
			}
			if err != nil && err.Error() != c.msg {
				t.Errorf("message %q, want %q", err.Error(), c.msg)
			}
		})
	}
}

// TestMergeServiceStatus: per pool, the edges listed are the expected ones
// and any other reporting the table; the pool agrees when every one of
// them holds a table with one checksum.
func TestMergeServiceStatus(t *testing.T) {
	svc := &model.Service{Name: "web", Pools: []model.Pool{
		{Name: "a", Backends: []model.Backend{{Address: mustAddr("198.19.0.1")}, {Address: mustAddr("198.19.0.2")}}},
		{Name: "b", Backends: []model.Backend{}},
	}}
	h := &model.Health{Service: "web", Down: map[string][]string{"a": {"198.19.0.2"}}}
	table := func(sum string) map[string]model.TableStatus {
		return map[string]model.TableStatus{model.TableKey("web", "a"): {Checksum: sum}}
	}
	edge := func(name string, tables map[string]model.TableStatus, errs ...string) edgeStatus {
		return edgeStatus{name: name, status: model.NodeStatus{Name: name, AppliedRevision: 7, Tables: tables, Errors: errs}}
	}
	type pool struct {
		agree  bool
		tables []string // edge: missing or checksum
	}
	for _, c := range []struct {
		name     string
		expected []string
		edges    []edgeStatus
		errors   []string // the status's
		pools    []pool
	}{
		{name: "agree", expected: []string{"e1", "e2"},
			edges: []edgeStatus{edge("e2", table("aa")), edge("e1", table("aa"))},
			pools: []pool{{true, []string{"e1:aa", "e2:aa"}}, {false, []string{"e1:no table", "e2:no table"}}}},
		{name: "checksums differ", expected: []string{"e1", "e2"},
			edges: []edgeStatus{edge("e1", table("aa")), edge("e2", table("bb"))},
			pools: []pool{{false, []string{"e1:aa", "e2:bb"}}, {false, []string{"e1:no table", "e2:no table"}}}},
		{name: "an expected edge without status", expected: []string{"e1", "e2"},
			edges: []edgeStatus{edge("e1", table("aa"))},
			pools: []pool{{false, []string{"e1:aa", "e2:no status"}}, {false, []string{"e1:no table", "e2:no status"}}}},
		{name: "another edge holds the table", expected: []string{"e1"},
			edges: []edgeStatus{edge("e1", table("aa")), edge("x9", table("aa")), edge("x8", nil)},
			pools: []pool{{true, []string{"e1:aa", "x9:aa"}}, {false, []string{"e1:no table"}}}},
		{name: "nobody expected, nobody holds",
			edges: []edgeStatus{edge("x8", nil)},
			pools: []pool{{false, nil}, {false, nil}}},
		{name: "edge errors about the service", expected: []string{"e1"},
			edges: []edgeStatus{
				edge("e1", table("aa"), "service web pool a: health check command \"x\" is not listed", "service webx pool a: other", "bgp: down"),
				{name: "bad", err: errors.New("status key bad: malformed")},
			},
			errors: []string{"edge e1: service web pool a: health check command \"x\" is not listed", "status key bad: malformed"},
			pools:  []pool{{true, []string{"e1:aa"}}, {false, []string{"e1:no table"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reports := map[string]map[string][]edgeReport{"a": {"198.19.0.2": {{"e1", model.HealthReport{Up: false, Detail: "refused"}}, {"e2", model.HealthReport{Up: true}}}}}
			out := mergeServiceStatus(statusInput{svc: svc, health: h, rev: 42, expected: c.expected, reports: reports, edges: c.edges})
			if out.Revision != 42 || out.Service != svc || out.Health != h {
				t.Errorf("revision %d service %p health %p", out.Revision, out.Service, out.Health)
			}
			if !reflect.DeepEqual(out.Errors, c.errors) {
				t.Errorf("errors %q, want %q", out.Errors, c.errors)
			}
			if len(out.Pools) != 2 {
				t.Fatalf("%d pools", len(out.Pools))
			}
			all := true
			for i, want := range c.pools {
				ps := out.Pools[i]
				var got []string
				for _, et := range ps.Tables {
					s := et.Edge + ":" + et.Checksum
					if et.Missing != "" {
						s = et.Edge + ":" + et.Missing
					} else if et.AppliedRevision != 7 {
						t.Errorf("pool %s edge %s: applied revision %d, want 7", ps.Name, et.Edge, et.AppliedRevision)
					}
					got = append(got, s)
				}
				if ps.Agree != want.agree || !reflect.DeepEqual(got, want.tables) {
					t.Errorf("pool %s: agree %v tables %q, want %v %q", ps.Name, ps.Agree, got, want.agree, want.tables)
				}
				all = all && want.agree
			}
			if out.Agree != all {
				t.Errorf("agree %v, want %v", out.Agree, all)
			}
			wantA := []api.BackendStatus{
				{Key: "198.19.0.1", Weight: 1},
				{Key: "198.19.0.2", Weight: 1, Down: true, UpVotes: 1, DownVotes: 1, Reports: []api.EdgeReport{
					{Edge: "e1", HealthReport: model.HealthReport{Detail: "refused"}}, {Edge: "e2", HealthReport: model.HealthReport{Up: true}}}},
			}
			if !reflect.DeepEqual(out.Pools[0].Backends, wantA) {
				t.Errorf("pool a backends %+v, want %+v", out.Pools[0].Backends, wantA)
			}
			if out.Pools[1].Backends == nil || len(out.Pools[1].Backends) != 0 {
				t.Errorf("pool b backends %#v, want an empty list", out.Pools[1].Backends)
			}
		})
	}
}

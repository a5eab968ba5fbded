package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
	"github.com/azgate/azgate/internal/store"
)

// webJSON is a service on testdata/region.yaml's hosts, as a user writes
// it (no defaults).
const webJSON = `{"name": "web", "vip": "198.51.100.20", "mode": "encap",
 "listeners": [{"protocol": "tcp", "port": 80, "pool": "web"}],
 "pools": [{"name": "web", "backends": [{"host": "az1-h1", "guest": "g1", "port": 8080}, {"host": "az2-h1", "guest": "g1", "port": 8080}],
            "health": {"type": "http", "path": "/healthz"}}]}`

func regionServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s := startServer(t, cfg)
	if _, err := newClient(s).Apply(context.Background(), readDoc(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServices(t *testing.T) {
	s := regionServer(t, Config{})
	ctx := context.Background()
	c := newClient(s)

	r := call(t, s, "POST", "/v1/services", webJSON)
	if r.code != 201 {
		t.Fatalf("create: HTTP %d: %s", r.code, r.body)
	}
	var wr struct {
		Action string        `json:"action"`
		Object model.Service `json:"object"`
	}
	r.decode(t, &wr)
	v := wr.Object
	h := v.Pools[0].Health
	if v.TableSize != model.DefaultTableSize || *v.Pools[0].Backends[0].Weight != 1 || h.Status != 200 ||
		h.Interval != model.Duration(2*time.Second) || h.Timeout != model.Duration(time.Second) || h.Rise != 2 || h.Fall != 3 {
		t.Errorf("stored without its defaults: %s", r.body)
	}
	if r := call(t, s, "POST", "/v1/services", webJSON); r.code != 409 {
		t.Errorf("second create: HTTP %d", r.code)
	}
	if r := call(t, s, "PUT", "/v1/services/web", webJSON); r.code != 200 || !strings.Contains(string(r.body), `"unchanged"`) {
		t.Errorf("same service without defaults: HTTP %d %s, want unchanged", r.code, r.body)
	}
	got, err := c.GetService(ctx, "web")
	if err != nil || got.Pools[0].Backends[1].Key() != "az2-h1/g1:8080" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if l, err := c.Services(ctx); err != nil || len(l) != 1 {
		t.Errorf("list: %v %v", l, err)
	}

	t.Run("backends", func(t *testing.T) {
		res, err := c.AddBackend(ctx, "web", "web", model.Backend{Host: "az1-h1", Guest: "g2"})
		if err != nil || res.Action != api.Updated {
			t.Fatalf("add: %+v %v", res, err)
		}
		var stored model.Service
		json.Unmarshal(res.Object, &stored)
		if n := len(stored.Pools[0].Backends); n != 3 || stored.Pools[0].Backends[2].Weight == nil {
			t.Errorf("after add: %s", res.Object)
		}
		if _, err := c.AddBackend(ctx, "web", "web", model.Backend{Host: "az1-h1", Guest: "g2"}); !isStatus(err, 409) {
			t.Errorf("duplicate add: %v", err)
		}
		if _, err := c.AddBackend(ctx, "web", "api", model.Backend{Host: "az1-h1", Guest: "g2"}); !isStatus(err, 404) || !strings.Contains(err.Error(), `no pool "api" (pools: web)`) {
			t.Errorf("add to a missing pool: %v", err)
		}
		if _, err := c.AddBackend(ctx, "web", "web", model.Backend{Host: "az9-h1", Guest: "g1"}); !isStatus(err, 422) || !strings.Contains(err.Error(), `pools[0].backends[3].host: host "az9-h1" does not exist`) {
			t.Errorf("add a missing host: %v", err)
		}
		if _, err := c.AddBackend(ctx, "web", "web", model.Backend{Address: mustAddr("198.19.9.9")}); !isStatus(err, 422) || !strings.Contains(err.Error(), "an encap backend is a guest") {
			t.Errorf("add an address to an encap service: %v", err)
		}
		r := call(t, s, "POST", "/v1/services/web/pools/web/backends", `{"host": "az1-h1", "guest": "g2", "wieght": 3}`)
		if r.code != 400 || !strings.Contains(string(r.body), "wieght: unknown field") {
			t.Errorf("unknown field: HTTP %d %s", r.code, r.body)
		}

		// Weight and drain, by the escaped key.
		if res, err := c.SetBackendWeight(ctx, "web", "web", "az1-h1/g1:8080", 5); err != nil || res.Action != api.Updated {
			t.Fatalf("weight: %+v %v", res, err)
		}
		if res, err := c.SetBackendWeight(ctx, "web", "web", "az1-h1/g1:8080", 5); err != nil || res.Action != api.Unchanged {
			t.Errorf("same weight: %+v %v", res, err)
		}
		if _, err := c.SetBackendWeight(ctx, "web", "web", "az1-h1/g2", 0); err != nil {
			t.Fatal(err)
		}
		got, _ := c.GetService(ctx, "web")
		if *got.Pools[0].Backends[0].Weight != 5 || *got.Pools[0].Backends[2].Weight != 0 || *got.Pools[0].Backends[1].Weight != 1 {
			t.Errorf("weights %d %d %d", *got.Pools[0].Backends[0].Weight, *got.Pools[0].Backends[1].Weight, *got.Pools[0].Backends[2].Weight)
		}
		if _, err := c.SetBackendWeight(ctx, "web", "web", "az1-h1/g1:8080", model.MaxWeight+1); !isStatus(err, 422) || !strings.Contains(err.Error(), "weight: 1000001 is above the maximum") {
			t.Errorf("weight too large: %v", err)
		}
		if _, err := c.SetBackendWeight(ctx, "web", "web", "az1-h1/g9", 1); !isStatus(err, 404) || !strings.Contains(err.Error(), `no backend "az1-h1/g9"`) {
			t.Errorf("weight of a missing backend: %v", err)
		}
		if r := call(t, s, "POST", "/v1/services/web/pools/web/backends/"+url.PathEscape("az1-h1/g2")+"/weight", `{}`); r.code != 400 || !strings.Contains(string(r.body), "weight: required") {
			t.Errorf("no weight: HTTP %d %s", r.code, r.body)
		}

		// A guest in use cannot go, nor its host.
		if _, err := c.RemoveGuest(ctx, "az1-h1", "g1"); !isStatus(err, 409) || !strings.Contains(err.Error(), "guest az1-h1/g1 is a backend of service web") {
			t.Errorf("remove a backend guest: %v", err)
		}
		if _, err := c.Delete(ctx, model.KindHost, "az2-h1"); !isStatus(err, 409) {
			t.Errorf("delete a host with bound EIPs and backends: %v", err)
		}
		if _, err := c.BindEIP(ctx, "198.51.100.8", "az1-h1", "g1"); err != nil {
			t.Errorf("a backend guest may also have an EIP: %v", err)
		}

		if res, err := c.RemoveBackend(ctx, "web", "web", "az1-h1/g2"); err != nil || res.Action != api.Updated {
			t.Fatalf("remove: %+v %v", res, err)
		}
		if _, err := c.RemoveBackend(ctx, "web", "web", "az1-h1/g2"); !isStatus(err, 404) {
			t.Errorf("remove again: %v", err)
		}
		if _, err := c.RemoveBackend(ctx, "web", "web", "az1-h1/g1:8080"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RemoveBackend(ctx, "web", "web", "az2-h1/g1:8080"); !isStatus(err, 422) || !strings.Contains(err.Error(), "pools[0].backends: at least one backend is required") {
			t.Errorf("removing the last backend: %v", err)
		}
		if _, err := c.AddBackend(ctx, "nope", "web", model.Backend{Host: "az1-h1", Guest: "g2"}); !client.IsNotFound(err) {
			t.Errorf("backend of a missing service: %v", err)
		}
	})

	t.Run("references", func(t *testing.T) {
		for _, tc := range []struct {
			name, body, want string
			code             int
		}{
			{"VIP outside the sets", strings.Replace(webJSON, `"web", "vip": "198.51.100.20"`, `"web2", "vip": "192.0.2.20"`, 1), "vip: 192.0.2.20 is not inside a prefix", 422},
			{"VIP of an EIP", strings.Replace(webJSON, `"web", "vip": "198.51.100.20"`, `"web2", "vip": "198.51.100.8"`, 1), "vip: 198.51.100.8 is an EIP", 422},
			{"VIP of another service", strings.Replace(webJSON, `"name": "web"`, `"name": "web2"`, 1), "vip: 198.51.100.20 is already the VIP of service web", 422},
			{"invalid", strings.Replace(webJSON, `"encap"`, `"dsr"`, 1), `mode: "dsr": want encap or nat`, 422},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := call(t, s, "POST", "/v1/services", tc.body)
				if r.code != tc.code || !strings.Contains(r.apiError(t).Error, tc.want) {
					t.Errorf("HTTP %d %s, want %d saying %q", r.code, r.body, tc.code, tc.want)
				}
			})
		}
		if _, err := c.Create(ctx, &model.EIP{Address: mustAddr("198.51.100.20")}); !isStatus(err, 422) || !strings.Contains(err.Error(), "is the VIP of service web") {
			t.Errorf("EIP on a VIP: %v", err)
		}
		r := call(t, s, "PUT", "/v1/edgesets/pop-a", `{"name": "pop-a", "prefixes": ["198.51.100.0/28"], "edges": [{"name": "edge-a1", "underlay": "198.18.0.1"}]}`)
		if r.code != 422 || !strings.Contains(string(r.body), "198.51.100.20") {
			t.Errorf("shrinking a set under the VIP: HTTP %d %s", r.code, r.body)
		}
	})

	t.Run("apply", func(t *testing.T) {
		doc := `services:
  - name: dmz
    vip: 198.51.100.30
    mode: nat
    listeners: [{protocol: tcp, port: 443, pool: tls}]
    pools: [{name: tls, backends: [{address: 198.19.11.1, port: 8443}], health: {type: tcp}}]
`
		r := call(t, s, "POST", "/v1/apply", doc)
		if r.code != 200 || !strings.Contains(string(r.body), `{"kind":"services","key":"dmz","action":"created"}`) {
			t.Fatalf("apply: HTTP %d %s", r.code, r.body)
		}
		if r := call(t, s, "POST", "/v1/apply", doc); !strings.Contains(string(r.body), `"unchanged":1`) {
			t.Errorf("apply again: %s", r.body)
		}
		v, _ := c.GetService(ctx, "dmz")
		if v.Pools[0].Health.Timeout != model.Duration(time.Second) || *v.Pools[0].Backends[0].Weight != 1 {
			t.Errorf("applied without defaults: %+v", v.Pools[0])
		}
		bad := strings.Replace(doc, "port: 443", "port: 443, portEnd: 80", 1)
		if r := call(t, s, "POST", "/v1/apply", bad); r.code != 422 || !strings.Contains(string(r.body), "services[0].listeners[0].portEnd: 80 is below port 443") {
			t.Errorf("bad apply: HTTP %d %s", r.code, r.body)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if _, err := c.DeleteService(ctx, "dmz"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetService(ctx, "dmz"); !client.IsNotFound(err) {
			t.Errorf("get after delete: %v", err)
		}
	})
}

func isStatus(err error, code int) bool {
	ae, ok := err.(*client.APIError)
	return ok && ae.Status == code
}

// report writes an edge's health report on a backend of web's pool web,
// with the edge's lease.
func report(t *testing.T, cli *clientv3.Client, leases map[string]clientv3.LeaseID, edge, backend string, up bool) {
	t.Helper()
	b, _ := json.Marshal(model.HealthReport{Up: up, Since: time.Now().UTC().Truncate(time.Second), Detail: fmt.Sprintf("up=%v", up)})
	if _, err := cli.Put(context.Background(), model.HealthReportKey(edge, "web", "web", backend), string(b), clientv3.WithLease(leases[edge])); err != nil {
		t.Fatal(err)
	}
}

// waitHealth waits until web's Health object says want ("" for none).
func waitHealth(t *testing.T, s *Server, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		s.view.mu.RLock()
		h := s.view.st.Health["web"]
		s.view.mu.RUnlock()
		got = ""
		if h != nil {
			b, _ := json.Marshal(h.Down)
			got = string(b)
		}
		if got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("health of web: %s, want %s", got, want)
}

// TestHealthMajority: three edges report on web's backends; the Health
// object follows the majority, through etcd.
func TestHealthMajority(t *testing.T) {
	s := regionServer(t, Config{HealthDebounce: 50 * time.Millisecond})
	ctx := context.Background()
	c := newClient(s)
	if r := call(t, s, "POST", "/v1/services", webJSON); r.code != 201 {
		t.Fatalf("HTTP %d %s", r.code, r.body)
	}
	cli := s.Store().Client
	// Each edge's reports live with its lease, kept alive while it runs.
	leases := map[string]clientv3.LeaseID{}
	stop := map[string]func(){}
	for _, e := range []string{"edge-a1", "edge-a2", "edge-b1"} {
		l, err := cli.Grant(ctx, 2) // the shortest TTL etcd grants
		if err != nil {
			t.Fatal(err)
		}
		leases[e] = l.ID
		stop[e] = keepAlive(t, cli, l.ID)
		t.Cleanup(stop[e])
	}
	const b1, b2 = "az1-h1/g1:8080", "az2-h1/g1:8080"

	// 1 of 3 down: up.
	report(t, cli, leases, "edge-a1", b1, false)
	report(t, cli, leases, "edge-a2", b1, true)
	report(t, cli, leases, "edge-b1", b1, true)
	time.Sleep(300 * time.Millisecond)
	waitHealth(t, s, "")

	// 2 of 3 down: down, in a Health object stored in etcd.
	report(t, cli, leases, "edge-a2", b1, false)
	waitHealth(t, s, `{"web":["az1-h1/g1:8080"]}`)
	resp, err := cli.Get(ctx, store.Key(model.KindHealth, "web"))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), b1) {
		t.Fatalf("health in etcd: %v %v", resp, err)
	}
	if h, err := c.GetHealth(ctx, "web"); err != nil || !h.IsDown("web", b1) {
		t.Errorf("GetHealth: %+v %v", h, err)
	}

	// A backend only one edge reports on, down: 1 of 1 is a majority.
	report(t, cli, leases, "edge-b1", b2, false)
	waitHealth(t, s, `{"web":["az1-h1/g1:8080","az2-h1/g1:8080"]}`)

	// Reports on things the service does not have count for nothing.
	report(t, cli, leases, "edge-a1", "az1-h1/g2", false)
	if _, err := cli.Put(ctx, model.HealthReportKey("edge-a1", "api", "web", b1), `{"up": false}`, clientv3.WithLease(leases["edge-a1"])); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, model.HealthRoot+"edge-a1/web/web", `{"up": false}`, clientv3.WithLease(leases["edge-a1"])); err != nil {
		t.Fatal(err)
	}

	st, err := c.ServiceStatus(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	bs := st.Pools[0].Backends
	if !bs[0].Down || bs[0].DownVotes != 2 || bs[0].UpVotes != 1 || len(bs[0].Reports) != 3 || bs[0].Reports[0].Edge != "edge-a1" || bs[0].Reports[0].Detail != "up=false" {
		t.Errorf("status of %s: %+v", b1, bs[0])
	}
	m := string(call(t, s, "GET", "/metrics", nil).body)
	promcheck.Lint(t, []byte(m))
	if !strings.Contains(m, `azgate_controller_backends_down{service="web"} 2`) {
		t.Errorf("metrics:\n%s", grep(m, "backends_down"))
	}

	// edge-b1 goes away: its lease expires, its reports vanish. b1 is 2 of 2
	// down still; b2 has no report left: up.
	stop["edge-b1"]()
	waitHealth(t, s, `{"web":["az1-h1/g1:8080"]}`)
	if resp, err := cli.Get(ctx, model.HealthReportEdgePrefix("edge-b1"), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Errorf("edge-b1's reports after its lease: %v %v", resp.Count, err)
	}

	// edge-a2 says up again: 1 of 2 is not a majority.
	report(t, cli, leases, "edge-a2", b1, true)
	waitHealth(t, s, "")
	if r := call(t, s, "GET", "/v1/health/web", nil); r.code != 404 {
		t.Errorf("health of a service with nothing down: HTTP %d %s", r.code, r.body)
	}

	// Down again, then the service goes: so does its Health object.
	report(t, cli, leases, "edge-a2", b1, false)
	waitHealth(t, s, `{"web":["az1-h1/g1:8080"]}`)
	if _, err := c.DeleteService(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, s, "")

	// A stray Health object (a service deleted by another controller's
	// older version, say) is removed too.
	if _, err := s.Store().Commit(ctx, s.view.revision(), []store.Op{{Kind: model.KindHealth, Key: "web", Value: []byte(`{"service":"web","down":{"web":["x"]}}`)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(ctx, store.Key(model.KindHealth, "web"))
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Health object of a missing service stays")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keepAlive keeps a lease alive until the returned function is called.
func keepAlive(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) func() {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := cli.KeepAlive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ch {
		}
	}()
	return cancel
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServiceStatus: per pool, the tables the edges report and whether
// they agree.
func TestServiceStatus(t *testing.T) {
	s := regionServer(t, Config{})
	ctx := context.Background()
	c := newClient(s)
	if r := call(t, s, "POST", "/v1/services", webJSON); r.code != 201 {
		t.Fatalf("HTTP %d %s", r.code, r.body)
	}
	kv := s.Store().Client.KV
	put := func(edge string, tables map[string]model.TableStatus) {
		b, _ := json.Marshal(model.NodeStatus{Role: "edge", Name: edge, AppliedRevision: 9, Tables: tables})
		if _, err := kv.Put(ctx, store.StatusRoot+"edge/"+edge, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	tab := model.TableStatus{Checksum: "00000000deadbeef", Backends: 2, Healthy: 2, M: 65537}

	// No edge publishes: edge-a1 and edge-a2 cover the VIP, neither has a status.
	st, err := c.ServiceStatus(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if st.Agree || len(st.Pools) != 1 || len(st.Pools[0].Tables) != 2 || st.Pools[0].Tables[0].Missing != "no status" || st.Service.Name != "web" || st.Health != nil {
		t.Errorf("without edges: %+v", st)
	}

	put("edge-a1", map[string]model.TableStatus{"web/web": tab})
	put("edge-a2", map[string]model.TableStatus{})
	st, _ = c.ServiceStatus(ctx, "web")
	if p := st.Pools[0]; st.Agree || p.Tables[0].Checksum != tab.Checksum || p.Tables[0].AppliedRevision != 9 || p.Tables[1].Missing != "no table" {
		t.Errorf("one table: %+v", st.Pools[0])
	}

	put("edge-a2", map[string]model.TableStatus{"web/web": tab})
	st, _ = c.ServiceStatus(ctx, "web")
	if !st.Agree || !st.Pools[0].Agree {
		t.Errorf("same tables: %+v", st.Pools[0])
	}

	// An edge of another set that holds the table counts too.
	other := tab
	other.Checksum = "0000000000000001"
	put("edge-b1", map[string]model.TableStatus{"web/web": other})
	st, _ = c.ServiceStatus(ctx, "web")
	if st.Agree || len(st.Pools[0].Tables) != 3 || st.Pools[0].Tables[2].Edge != "edge-b1" {
		t.Errorf("a different table: %+v", st.Pools[0])
	}
	if _, err := c.ServiceStatus(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("status of a missing service: %v", err)
	}
}

func TestVerdict(t *testing.T) {
	v := &model.Service{Name: "web", Pools: []model.Pool{
		{Name: "web", Health: &model.HealthCheck{Type: "tcp"}, Backends: []model.Backend{
			{Host: "h1", Guest: "g1"}, {Host: "h2", Guest: "g1"}, {Host: "h3", Guest: "g1"}, {Host: "h4", Guest: "g1"}}},
		{Name: "unchecked", Backends: []model.Backend{{Host: "h1", Guest: "g1"}}},
	}}
	tallies := map[string]map[string]tally{
		"web": {
			"h1/g1": {up: 1, down: 2}, // 2 of 3: down
			"h2/g1": {up: 1, down: 1}, // 1 of 2: up
			"h3/g1": {down: 1},        // 1 of 1: down
			"h9/g1": {down: 3},        // not a backend
			// h4/g1: nobody reports: up
		},
		"unchecked": {"h1/g1": {down: 3}}, // no check: up
		"gone":      {"h1/g1": {down: 3}}, // no such pool
	}
	h := verdict(v, tallies)
	if h == nil || h.Service != "web" || fmt.Sprint(h.Down) != "map[web:[h1/g1 h3/g1]]" {
		t.Errorf("verdict %+v", h)
	}
	if h := verdict(v, map[string]map[string]tally{"web": {"h1/g1": {up: 2, down: 1}}}); h != nil {
		t.Errorf("nothing down: %+v", h)
	}
	if h := verdict(v, nil); h != nil {
		t.Errorf("no reports: %+v", h)
	}
}

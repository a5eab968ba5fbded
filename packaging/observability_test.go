package packaging

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
	"github.com/azgate/azgate/internal/gslbrole"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/health/healthtest"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/promcheck"
)

// TestPrometheusRules: the alert rules pass "promtool check rules" and
// their unit tests (synthetic series, each alert firing and not firing:
// prometheus/azgate-rules_test.yml) pass "promtool test rules".
func TestPrometheusRules(t *testing.T) {
	pt := promcheck.Promtool(t)
	for _, args := range [][]string{{"check", "rules", "azgate-rules.yml"}, {"test", "rules", "azgate-rules_test.yml"}} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// scrapeOnly are series the dashboard and rules use that a scrape holds
// only once something happens which this test does not stage, with why.
var scrapeOnly = map[string]string{
	"azgate_controller_backends_down": "exported per service with a backend down (the majority of the edges' health reports): needs edges reporting; internal/controller's TestHealthMajority scrapes it from a real controller",
}

// TestDashboardQueries: every metric the Grafana dashboard's queries (and
// its variables) name appears in a real scrape of the roles, run in
// process: an edge's and an agent's /metrics (their status from a fake
// data plane, the health checks' figures faked too), a controller (embedded etcd, after an API write) and a
// GSLB instance serving a record from it; and the same for the alert
// rules. The metric names are the identifiers starting "azgate_" outside
// label matchers and strings; each query must name one.
func TestDashboardQueries(t *testing.T) {
	promcheck.Promtool(t) // the scrapes are linted too
	have := map[string]bool{}
	add := func(body []byte) {
		promcheck.Lint(t, body)
		for _, n := range promcheck.Names(body) {
			have[n] = true
		}
	}
	for _, role := range []string{"edge", "agent"} {
		add(promcheck.Scrape(t, nodemetrics.Handler(nodemetrics.Registry(role, role+"-1", fakeStatus, health.Collector(fakeChecks, healthtest.Durations),
			edge.BackendCollector(fakeBackends), edge.OccupancyCollector(fakeOccupancy)), "")))
	}
	ctrl, gslb := startRoles(t)
	add(promcheck.ScrapeURL(t, ctrl.URL()+"/metrics", ctrl.Token()))
	add(promcheck.Scrape(t, promhttp.HandlerFor(gslb, promhttp.HandlerOpts{})))

	b, err := os.ReadFile("grafana/azgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/azgate.json: %v", err)
	}
	queries := map[string]string{}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			queries[p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			queries["variable "+v.Name] = v.Definition
		}
	}
	if len(queries) < 10 {
		t.Fatalf("%d queries in the dashboard: the parse found too few", len(queries))
	}
	rules, err := os.ReadFile("prometheus/azgate-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := regexp.MustCompile(`(?m)^\s+expr: (\|\n(?:\s{10}.*\n)+|.*)`).FindAllStringSubmatch(string(rules), -1)
	if n := strings.Count(string(rules), "- alert: "); len(exprs) != n || n < 6 {
		t.Fatalf("%d expressions found for %d alerts in prometheus/azgate-rules.yml", len(exprs), n)
	}
	for i, m := range exprs {
		queries["rule "+string(rune('0'+i))] = m[1]
	}
	for where, q := range queries {
		names := promcheck.QueryNames(q)
		if len(names) == 0 {
			t.Errorf("%s: %q names no azgate metric", where, q)
		}
		for _, n := range names {
			if !have[n] && !have[n+"_bucket"] && scrapeOnly[n] == "" {
				t.Errorf("%s: %s is in no role's scrape (query %q)", where, n, q)
			}
		}
	}
	for n, why := range scrapeOnly {
		if have[n] {
			t.Errorf("%s is in the scrape now: drop it from scrapeOnly (%s)", n, why)
		}
	}
}

// TestMetricNames: the extraction keeps names and drops label values.
func TestMetricNames(t *testing.T) {
	got := promcheck.QueryNames(`sum by (x) (rate(azgate_a_total{node=~"azgate_not"}[5m])) / azgate_b and on() label_values(azgate_c, node)`)
	if strings.Join(got, ",") != "azgate_a_total,azgate_b,azgate_c" {
		t.Errorf("QueryNames = %v", got)
	}
}

// fakeChecks are an edge's health checks: one backend up, one down.
func fakeChecks() []health.TargetStats {
	return []health.TargetStats{
		{Service: "web", Pool: "main", Backend: "az1-h1/g1:80", Known: true, Up: true, OK: 3, LastDuration: 2 * time.Millisecond},
		{Service: "web", Pool: "main", Backend: "az1-h2/g1:80", Known: true, Up: false, Failed: 3, LastDuration: time.Second}}
}

// fakeOccupancy is an edge's last walk of its connection table.
func fakeOccupancy() (*edge.Occupancy, uint64) {
	return &edge.Occupancy{Total: 3, Capacity: 1024, Walk: time.Millisecond,
		VIPs:     map[netip.Addr]uint32{netip.MustParseAddr("198.51.100.7"): 3},
		Backends: []edge.BackendEntries{{Service: "web", Pool: "main", Backend: "az1-h1/g1:80", Entries: 3}}}, 0
}

// fakeBackends are an edge's load-balanced backends' counters.
func fakeBackends() []edge.BackendCount {
	return []edge.BackendCount{{Service: "web", Pool: "main", Backend: "az1-h1/g1:80", LBCounters: dataplane.LBCounters{Packets: 10, Bytes: 1500, Conns: 2}}}
}

// fakeStatus is what a node's data plane reports, every part filled in.
func fakeStatus() model.NodeStatus {
	rate := uint64(7_600_000)
	return model.NodeStatus{
		AppliedRevision: 42, Routes: 3,
		Counters:   map[string]model.Count{"encap_tx": {Packets: 10, Bytes: 1000}, "drop_ip_csum": {Packets: 1, Bytes: 60}},
		EIPs:       map[string]model.EIPCounters{"198.51.100.7": {RxPackets: 5, TxPackets: 6}},
		LimitDrops: map[string]model.LimitDrops{"198.51.100.8": {Source: 1, SYN: 2}},
		Firewall:   map[string]model.Count{"block-ssh": {Packets: 7, Bytes: 420}},
		Tables:     map[string]model.TableStatus{"web/main": {Checksum: "0123456789abcdef", Backends: 3, Healthy: 2, M: 65537}},
		BGP: &model.BGPStatus{Announcing: true, Advertised: []string{"198.51.100.0/24"}, Failing: []string{"drained"},
			Sessions: []model.BGPSession{{Peer: "192.0.2.1", State: "established"}}},
		Sync: &model.SyncStatus{Ready: true, LagP50MS: 1, LagP99MS: 2, LagMaxMS: 3, Peers: []model.SyncPeerStatus{{Name: "edge-b", Connected: true}}},
		Bandwidth: &model.BandwidthStatus{Mode: "managed", LimitsAgeMS: 1500, Reports: 9,
			EIPs: map[string]model.BandwidthEIP{"198.51.100.7": {Mode: "managed", Limit: 8_000_000, DroppedBytes: 3000, DroppedPackets: 2, Rate: &rate}}},
	}
}

// startRoles starts a controller (embedded etcd) with a DNS zone and a
// GSLB record written through its API, and a GSLB instance serving them
// on loopback; it returns the controller and the GSLB's registry once the
// GSLB has probed the record's target (a closed port: down).
func startRoles(t *testing.T) (*controller.Server, *prometheus.Registry) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctrl, err := controller.Start(ctx, controller.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // the target's port is closed: its probe fails
	cl := client.New(ctrl.URL(), ctrl.Token())
	if _, err := cl.Create(ctx, &model.DNSZone{Name: "example", NS: []string{"ns1.example"},
		Records: []model.ZoneRecord{{Name: "ns1", Type: "A", Value: "192.0.2.53"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Create(ctx, &model.GSLBRecord{Name: "www.example", Zone: "example", Policy: model.GSLBNearest,
		Targets: []model.GSLBTarget{{VIP: netip.MustParseAddr("127.0.0.1"), Region: "eu", Lat: 53.35, Lon: -6.26, Order: 1}},
		Probe:   &model.GSLBProbe{Kind: "tcp", Port: port, Interval: model.Duration(100 * time.Millisecond), Rise: 1, Fall: 1}}); err != nil {
		t.Fatal(err)
	}
	g, err := gslbrole.New(ctrl.Store(), gslbrole.Config{Name: "gslb-1", Log: quiet, Server: dnsserver.ServerConfig{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector(nil))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "azgate_gslb_target_up" {
				return ctrl, reg
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the GSLB never exported azgate_gslb_target_up for its record's target")
		}
	}
}

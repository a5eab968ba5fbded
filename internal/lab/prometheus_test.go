package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/azgate/azgate/internal/promcheck"
	"github.com/azgate/azgate/packaging"
)

// testLab is a lab's description without anything running: its topology
// and a bandwidth manager in a host's namespace and one in the machine's.
func testLab(t *testing.T) *Lab {
	l := &Lab{Cfg: Config{Prefix: "azt-", StateDir: t.TempDir()}, Topo: Build("azt-", 3, 2, 2)}
	l.bw.Managers = []BWManager{
		{Name: "region-1", Netns: "", Args: []string{"bwmgr", "--metrics-listen", "127.0.0.1:40001"}},
		{Name: "zone-az1", Netns: "azt-az1-h1", Args: []string{"bwmgr", "--metrics-listen", "127.0.0.1:9471"}},
	}
	return l
}

// TestScrapeConfig: the generated Prometheus configuration passes
// "promtool check config" (which checks the alert rules it loads too),
// scrapes every edge and agent, the controller and the bandwidth managers
// through the proxy, and labels each target with its node.
func TestScrapeConfig(t *testing.T) {
	pt := promcheck.Promtool(t)
	l := testLab(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "azgate-rules.yml")
	if err := os.WriteFile(rules, packaging.AlertRules, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := l.scrapeConfig("127.0.0.1:9492", rules)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "check", "config", conf).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, b)
	}
	var c struct {
		ScrapeConfigs []struct {
			Job           string `yaml:"job_name"`
			HonorLabels   bool   `yaml:"honor_labels"`
			ProxyURL      string `yaml:"proxy_url"`
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // target -> job/node
	for _, j := range c.ScrapeConfigs {
		if !j.HonorLabels || j.ProxyURL != "http://127.0.0.1:9492" {
			t.Errorf("job %s: honor_labels %v, proxy_url %q", j.Job, j.HonorLabels, j.ProxyURL)
		}
		for _, s := range j.StaticConfigs {
			for _, tg := range s.Targets {
				got[tg] = j.Job + "/" + s.Labels["node"]
			}
		}
	}
	want := map[string]string{"controller:80": "controller/controller", "edge-a1:9464": "edge/edge-a1", "edge-q1:9464": "edge/edge-q1",
		"az3-h2:9465": "agent/az3-h2", "bwmgr-region-1:40001": "bwmgr/bwmgr-region-1", "bwmgr-zone-az1:9471": "bwmgr/bwmgr-zone-az1"}
	for tg, jn := range want {
		if got[tg] != jn {
			t.Errorf("target %s: %q, want %q", tg, got[tg], jn)
		}
	}
	if n := len(l.Topo.NodesByRole("edge")) + len(l.Topo.NodesByRole("host")) + 3; len(got) != n {
		t.Errorf("%d targets, want %d: %v", len(got), n, got)
	}
}

// TestMetricsProxy: the proxy relays a target's /metrics (the
// controller's, on its API's unix socket, with the lab's token) and
// refuses anything else: another path, a host that is no target, a
// method other than GET.
func TestMetricsProxy(t *testing.T) {
	l := testLab(t)
	if err := os.MkdirAll(l.dataDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.tokenFile(), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", l.apiSock())
	if err != nil {
		t.Fatal(err)
	}
	api := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, "azgate_controller_objects{kind=\"eip\"} 3\n")
	})}
	go api.Serve(ln)
	t.Cleanup(func() { api.Close() })

	srv := httptest.NewServer(l.NewMetricsProxy())
	defer srv.Close()
	pu, _ := url.Parse(srv.URL)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	get := func(method, u string) (int, string) {
		req, _ := http.NewRequest(method, u, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "http://controller:80/metrics"); code != 200 || !strings.Contains(body, "azgate_controller_objects") {
		t.Errorf("controller's /metrics through the proxy: %d %q", code, body)
	}
	for _, tc := range []struct{ method, url string }{
		{"GET", "http://controller:80/api/v1/eips"},
		{"GET", "http://example.com:80/metrics"},
		{"GET", "http://edge-a1:9999/metrics"},
		{"POST", "http://controller:80/metrics"},
	} {
		if code, body := get(tc.method, tc.url); code == 200 {
			t.Errorf("%s %s through the proxy: %d %q, want refused", tc.method, tc.url, code, body)
		}
	}
	if err := loopbackAddr("0.0.0.0:9492"); err == nil {
		t.Error("the proxy would listen on every address")
	}
}

// TestRenderDashboard: the renderer runs every panel's queries with the
// template variables substituted against a Prometheus API (a fake one
// here, answering from canned series), and writes HTML with an SVG
// polyline per series, the stat panels' numbers, the panels' titles
// escaped.
func TestRenderDashboard(t *testing.T) {
	var queries []string
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		queries = append(queries, q)
		if r.URL.Path != "/api/v1/query_range" || r.URL.Query().Get("step") == "" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		res := []map[string]any{}
		if strings.Contains(q, "broken") {
			json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data", "error": "parse error"})
			return
		}
		res = append(res, map[string]any{"metric": map[string]string{"node": "edge-<a1>", "eip": "198.51.100.7"},
			"values": [][2]any{{1e9, "1"}, {1e9 + 5, "NaN"}, {1e9 + 10, "2500"}}})
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": res}})
	}))
	defer prom.Close()
	d, err := ParseDashboard([]byte(`{"title": "t<script>", "templating": {"list": [{"name": "datasource", "type": "datasource"},
	  {"name": "node", "type": "query", "includeAll": true, "allValue": ".*"}]},
	  "panels": [{"type": "row", "title": "Edges"},
	    {"type": "stat", "title": "Announcing", "gridPos": {"w": 8}, "targets": [{"expr": "azgate_bgp_announcing{node=~\"$node\"}", "legendFormat": "{{node}}"}]},
	    {"type": "timeseries", "title": "EIPs <b>", "gridPos": {"w": 12}, "targets": [{"expr": "rate(azgate_eip_packets_total{node=~\"${node}\"}[$__rate_interval])", "legendFormat": "{{eip}}"}]},
	    {"type": "timeseries", "title": "Broken", "targets": [{"expr": "broken"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	end := time.Unix(1e9+10, 0)
	data, err := QueryDashboard(context.Background(), d, DashboardOptions{Prometheus: prom.URL, Window: 10 * time.Minute, End: end, Vars: map[string]string{"node": "edge-a.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`azgate_bgp_announcing{node=~"edge-a.*"}`, `rate(azgate_eip_packets_total{node=~"edge-a.*"}[20s])`, "broken"}; strings.Join(queries, "\n") != strings.Join(want, "\n") {
		t.Errorf("queries %q, want %q", queries, want)
	}
	p, _ := data.Panel("EIPs <b>")
	if len(p.Series) != 1 || p.Series[0].Name != "198.51.100.7" || p.Series[0].Max() != 2500 || len(p.Series[0].Values) != 2 {
		t.Errorf("series %+v, want 198.51.100.7 with 1 and 2500 (NaN dropped)", p.Series)
	}
	if p, _ := data.Panel("Broken"); len(p.Errors) != 1 || !strings.Contains(p.Errors[0], "parse error") {
		t.Errorf("a failing query's panel errors %q", p.Errors)
	}
	var buf bytes.Buffer
	if err := RenderDashboard(&buf, data); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{"<title>t&lt;script&gt; (azgate lab)</title>", "<h2>EIPs &lt;b&gt;</h2>", `<div class="row">Edges</div>`,
		`<div>edge-&lt;a1&gt;</div>`, ">2.5k</div>", "not Grafana", "parse error"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(html, "<script>") || strings.Contains(html, "<b>") {
		t.Error("a title reached the page unescaped")
	}
	if n := len(regexp.MustCompile(`<polyline [^>]*points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+"`).FindAllString(html, -1)); n != 1 {
		t.Errorf("%d two-point polylines, want 1 (the EIP's series):\n%s", n, html)
	}
}

// TestMetricsProxyNoRedirects: a target answering its /metrics with a
// redirect (to another path of its own, or to another target) gets the
// redirect relayed, not followed: the proxy fetches /metrics of the
// listed targets and nothing else, whatever a target (or a process that
// took a stopped target's loopback port) answers.
func TestMetricsProxyNoRedirects(t *testing.T) {
	var hits []string
	tgt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path)
		switch r.URL.Path {
		case "/metrics":
			http.Redirect(w, r, "/debug/secret", http.StatusFound)
		default:
			io.WriteString(w, "not-metrics-42\n")
		}
	}))
	defer tgt.Close()
	_, port, _ := net.SplitHostPort(tgt.Listener.Addr().String())
	l := &Lab{Cfg: Config{Prefix: "azt-", StateDir: t.TempDir()}, Topo: Build("azt-", 1, 1, 1)}
	l.bw.Managers = []BWManager{{Name: "m", Args: []string{"bwmgr", "--metrics-listen", tgt.Listener.Addr().String()}}}
	srv := httptest.NewServer(l.NewMetricsProxy())
	defer srv.Close()
	pu, _ := url.Parse(srv.URL)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get("http://bwmgr-m:" + port + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || strings.Contains(string(b), "not-metrics-42") || len(hits) != 1 {
		t.Errorf("a redirecting target: HTTP %d %q, the target saw %q; want the redirect relayed and only /metrics fetched", resp.StatusCode, b, hits)
	}
}

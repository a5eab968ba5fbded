package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
	"github.com/azgate/azgate/packaging"
)

// notInLab are the dashboard's series the lab's scrape cannot have, with
// why; packaging's TestDashboardQueries finds them in a real role's
// scrape in process.
var notInLab = map[string]string{
	"azgate_gslb_target_up":     "the GSLB runs in its own lab (azgate-lab lab gslb), not the edge lab",
	"azgate_gslb_queries_total": "the GSLB runs in its own lab (azgate-lab lab gslb), not the edge lab",
	"azgate_gslb_answers_total": "the GSLB runs in its own lab (azgate-lab lab gslb), not the edge lab",
}

// TestLabDashboard (issue 20): the dashboard's queries resolve against a
// real scrape of the lab and the dashboard shows live lab traffic. The
// lab comes up, its Prometheus (Debian's) scrapes every role through the
// metrics proxy, an EIP and a service carry traffic from the Internet
// client for 40 s (with a firewall rule, rate limits, a bandwidth package,
// a backend down and a drained edge, so that every panel has series); then every metric
// the dashboard's queries name has a series in Prometheus, the traffic
// panels' queries give non-zero rates for the EIP and the service, and the
// dashboard rendered from the same JSON is screenshotted by headless
// Chromium (the PNG is logged, and must decode and not be blank).
func TestLabDashboard(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus is not installed (Debian's prometheus; scripts/setup.sh installs it)")
	}
	chromium := chromiumOrSkip(t)
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	cli := labCLI(ctx, t, l)

	// An EIP with a firewall rule, rate limits and a bandwidth package,
	// none of which drops this test's traffic.
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if err := waitGet(ctx, l, "http://"+eip+"/", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	cli("firewall", "add", "lab-clients", "--action", "allow", "--source", lab.ClientNet, "--address", eip)
	cli("eip", "limits", eip, "--syn-rate", "100000")
	cli("bandwidth", "create", "dash", "--capacity", "200M", "--eip", eip)
	// A service: three health-checked backends, one of them stopped.
	web := &model.Service{Name: "web", VIP: netip.MustParseAddr(vipWeb), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools: []model.Pool{{Name: "web", Backends: encapBackends("g2", "az1-h2", "az2-h2", "az3-h2"),
			Health: &model.HealthCheck{Type: "tcp", Interval: model.Duration(300 * time.Millisecond), Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 2}}}}
	if _, err := c.PutService(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := l.StopServer("az3-h2-g2"); err != nil {
		t.Fatal(err)
	}
	waitDown(t, ctx, c, "web", "web", "az3-h2/g2")
	waitServing(t, ctx, l, "http://"+vipWeb+"/")
	// A drained edge (the dedicated set's, which carries none of this
	// test's traffic; --force: it is the set's only edge): a condition
	// keeps it from announcing.
	cli("edge", "drain", "edge-d1", "--force")

	promListen, proxyListen := freeLoopback(t), freeLoopback(t)
	st, err := l.PrometheusUp(ctx, lab.PrometheusConfig{Listen: promListen, ProxyListen: proxyListen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.PrometheusDown(l.Cfg); err != nil {
			t.Errorf("prometheus down: %v", err)
		}
	})
	t.Logf("prometheus %s (pid %d), metrics proxy %s (pid %d), %d targets", st.URL(), st.PID, st.ProxyListen, st.ProxyPID, len(l.MetricsTargets()))

	// Every target is scraped and up.
	if err := poll(30*time.Second, func() bool { return len(downTargets(ctx, t, st.URL())) == 0 }); err != nil {
		t.Fatalf("targets not up after 30 s: %v", downTargets(ctx, t, st.URL()))
	}

	// The traffic: UDP to the EIP at 20 Mbit/s and HTTP requests to the
	// service, for 40 s.
	const trafficFor = 40 * time.Second
	ld, err := l.StartLoad([]lab.LoadTarget{{EIP: eip, Guest: "az1-h1-g1", Rate: 20e6}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	requests, failed := 0, 0
	for time.Since(t0) < trafficFor {
		if _, err := l.Get(ctx, "inet", "http://"+vipWeb+"/", 2*time.Second); err != nil {
			failed++
		}
		requests++
		time.Sleep(20 * time.Millisecond)
	}
	ld.Stop()
	got := ld.Received(t0.Add(5*time.Second), t0.Add(trafficFor-5*time.Second))
	t.Logf("traffic for %v: %d HTTP requests to the service (%d failed), the EIP's load received %.1f Mbit/s", trafficFor, requests, failed, got[eip]/1e6)
	// Two more scrapes after the traffic.
	time.Sleep(2 * lab.ScrapeInterval)

	// Every metric a dashboard query names has a series from the lab.
	d, err := lab.ParseDashboard(packaging.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	have := metricNamesIn(ctx, t, st.URL())
	names := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			ns := promcheck.QueryNames(tg.Expr)
			if len(ns) == 0 {
				t.Errorf("panel %q: %q names no azgate metric", p.Title, tg.Expr)
			}
			for _, n := range ns {
				names[n] = append(names[n], p.Title)
			}
		}
	}
	var checked []string
	for n, panels := range names {
		switch {
		case notInLab[n] != "":
			t.Logf("%s: not in the lab's scrape: %s", n, notInLab[n])
			if have[n] {
				t.Errorf("%s is in the lab's scrape now: drop it from notInLab", n)
			}
		case !have[n] && !have[n+"_bucket"]:
			t.Errorf("%s (panels %q) has no series in the lab's Prometheus", n, panels)
		default:
			checked = append(checked, n)
		}
	}
	sort.Strings(checked)
	t.Logf("%d metrics the dashboard names have series from the lab's scrape: %s", len(checked), strings.Join(checked, " "))

	// The traffic panels show the traffic.
	data, err := lab.QueryDashboard(ctx, d, lab.DashboardOptions{Prometheus: st.URL(), Window: time.Since(t0) + 30*time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range data.Panels {
		for _, e := range p.Errors {
			t.Errorf("panel %q: %s", p.Title, e)
		}
	}
	for _, want := range []struct{ panel, series string }{
		{"Top 10 EIPs by packets", eip},
		{"Traffic per service (VIP) to its backends", "web"},
		{"Data-plane packets by outcome", ""},
		{"Firewall rules", "lab-clients"},
	} {
		p, ok := data.Panel(want.panel)
		if !ok {
			t.Errorf("no panel %q in the dashboard", want.panel)
			continue
		}
		found := false
		for _, s := range p.Series {
			if want.series == "" || s.Name == want.series {
				found = found || s.Max() > 0
			}
		}
		if !found {
			var seen []string
			for _, s := range p.Series {
				seen = append(seen, fmt.Sprintf("%s (max %g)", s.Name, s.Max()))
			}
			t.Errorf("panel %q (%q): no non-zero rate for %q; series: %v", want.panel, p.Queries, want.series, seen)
		}
	}

	// The rendered dashboard, screenshotted.
	dir := artifactDir(t)
	var page bytes.Buffer
	if err := lab.RenderDashboard(&page, data); err != nil {
		t.Fatal(err)
	}
	htmlPath := filepath.Join(dir, "lab-dashboard.html")
	if err := os.WriteFile(htmlPath, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	pngPath := filepath.Join(dir, "lab-dashboard.png")
	os.Remove(pngPath)
	sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
	defer scancel()
	shot := exec.CommandContext(sctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--screenshot="+pngPath, "--window-size=1400,2400", (&url.URL{Scheme: "file", Path: htmlPath}).String())
	shot.Env = append(os.Environ(), "HOME="+t.TempDir())
	if out, err := shot.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", chromium, err, out)
	}
	t.Logf("dashboard: %s, screenshot: %s", htmlPath, pngPath)
	checkScreenshot(t, pngPath, 1400, 2400)

	// The status page of the same lab: its service with a backend down
	// and its bandwidth package.
	t.Run("status page", func(t *testing.T) { labStatusPage(t, l, chromium, "web", "az3-h2", "dash") })
}

// chromiumOrSkip is the headless Chromium the screenshots use, or skips
// the test without one.
func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	for _, c := range []string{"chromium-headless-shell", "chromium"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Skip("chromium-headless-shell is not installed (scripts/setup.sh installs it)")
	return ""
}

// artifactDir is where the tests leave their screenshots:
// $AZGATE_TEST_ARTIFACTS, else /tmp/azgate-artifacts.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("AZGATE_TEST_ARTIFACTS"), "/tmp/azgate-artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freeLoopback is a free 127.0.0.1 port.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promGet GETs a Prometheus API path and decodes its data.
func promGet(ctx context.Context, t *testing.T, base, path string, data any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   any    `json:"data"`
	}{Data: data}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("%s: %s %v %s", path, resp.Status, err, body.Error)
	}
}

// downTargets are the targets whose last scrape failed (or never ran).
func downTargets(ctx context.Context, t *testing.T, base string) []string {
	var data struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	promGet(ctx, t, base, "/api/v1/targets?state=active", &data)
	var down []string
	for _, tg := range data.ActiveTargets {
		if tg.Health != "up" {
			down = append(down, fmt.Sprintf("%s/%s: %s %s", tg.Labels["job"], tg.Labels["node"], tg.Health, tg.LastError))
		}
	}
	if len(data.ActiveTargets) == 0 {
		down = append(down, "no targets")
	}
	return down
}

// metricNamesIn are the metric names with series in Prometheus.
func metricNamesIn(ctx context.Context, t *testing.T, base string) map[string]bool {
	var names []string
	promGet(ctx, t, base, "/api/v1/label/__name__/values", &names)
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// checkScreenshot fails t unless the PNG decodes, has the window's size
// and is not blank: most of it is not the page's background, and it has
// the colours of text and chart lines.
func checkScreenshot(t *testing.T, path string, w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		t.Errorf("%s: %dx%d, want %dx%d", path, b.Dx(), b.Dy(), w, h)
	}
	colours := map[[3]uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	top, total := 0, 0
	for _, n := range colours {
		total += n
		top = max(top, n)
	}
	t.Logf("screenshot %s: %dx%d, %d colours, the commonest %.0f%% of the pixels", path, b.Dx(), b.Dy(), len(colours), 100*float64(top)/float64(total))
	if len(colours) < 20 || float64(top) > 0.97*float64(total) {
		t.Errorf("%s looks blank: %d colours, the commonest %d of %d pixels", path, len(colours), top, total)
	}
}

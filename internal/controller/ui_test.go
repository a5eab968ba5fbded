package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// uiDoc reads testdata/uiregion.yaml.
func uiDoc(t testing.TB) *model.Document {
	t.Helper()
	b, err := os.ReadFile("testdata/uiregion.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// uiNodes are the nodes' statuses the page tests show: edge-a1
// announcing, edge-a2 not (its data plane failing, an error carrying
// markup), edge-q1 without a BGP speaker, edge-d1 silent; one agent.
func uiNodes() map[string][]model.NodeStatus {
	return map[string][]model.NodeStatus{
		"edge": {
			{Role: "edge", Name: "edge-a1", AppliedRevision: 9, BGP: &model.BGPStatus{Announcing: true,
				Advertised: []string{"198.51.100.0/24", "203.0.113.0/25"},
				Sessions:   []model.BGPSession{{Peer: "198.18.0.254", ASN: 65000, State: "established"}}}},
			{Role: "edge", Name: "edge-a2", AppliedRevision: 8, Errors: []string{"maps: <script>alert('err')</script>"},
				BGP: &model.BGPStatus{Failing: []string{"dataplane"}, Sessions: []model.BGPSession{{Peer: "198.18.0.254", State: "active"}}}},
			{Role: "edge", Name: "edge-q1", AppliedRevision: 9},
		},
		"agent": {{Role: "agent", Name: "az1-h1", Routes: 1}},
	}
}

// uiState is the state of testdata/uiregion.yaml, with web's first
// backend found down.
func uiState(t testing.TB) *model.State {
	t.Helper()
	st := model.NewState()
	for _, o := range uiDoc(t).Objects() {
		if _, err := st.Put(o); err != nil {
			t.Fatalf("%s %s: %v", model.KindOf(o), o.Key(), err)
		}
	}
	st.Set(&model.Health{Service: "web", Down: map[string][]string{"web": {"az1-h1/g1:8080"}}})
	return st
}

// TestStatusPageModel: what the page says of each set, edge, service,
// quarantine and package of a known region.
func TestStatusPageModel(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	p := statusPage(PageInput{State: uiState(t), Revision: 42, Version: "v1", Store: "embedded", Nodes: uiNodes(), Now: now})
	if p.Revision != 42 || !p.Generated.Equal(now) {
		t.Errorf("header %d %v", p.Revision, p.Generated)
	}
	sets := map[string]SetView{}
	for _, s := range p.Sets {
		sets[s.Name] = s
	}
	if len(p.Sets) != 3 || p.Sets[0].Name != "ded-1" {
		t.Fatalf("sets %+v", p.Sets)
	}
	check := func(what string, got any, want string) {
		t.Helper()
		if g := fmt.Sprint(got); g != want {
			t.Errorf("%s: %s, want %s", what, g, want)
		}
	}
	check("pop-a announces", sets["pop-a"].Announces.Items, "[198.51.100.0/24 203.0.113.0/25]")
	check("pop-a pulled out", sets["pop-a"].PulledOut.Items, "[198.51.100.8/32 → quarantine (quarantined) 198.51.100.9/32 → ded-1 (pulled out)]")
	check("ded-1 announces", sets["ded-1"].Announces.Items, "[198.51.100.9/32]")
	check("quarantine announces", sets["quarantine"].Announces.Items, "[198.51.100.8/32]")
	check("quarantine role", sets["quarantine"].Role, "quarantine")
	check("pop-a role", sets["pop-a"].Role, "prefix")
	edges := map[string]EdgeView{}
	for _, s := range p.Sets {
		for _, e := range s.Edges.Items {
			edges[e.Name] = e
		}
	}
	check("edge-a1", []any{edges["edge-a1"].Class, edges["edge-a1"].State, edges["edge-a1"].Sessions, edges["edge-a1"].Advertised}, "[ok announcing 1/1 established 2]")
	check("edge-a2", []any{edges["edge-a2"].Class, edges["edge-a2"].State, edges["edge-a2"].Sessions, len(edges["edge-a2"].Errors.Items)}, "[bad not announcing: dataplane 0/1 established 1]")
	check("edge-q1", []any{edges["edge-q1"].Class, edges["edge-q1"].State}, "[ok running (no BGP speaker)]")
	check("edge-d1", edges["edge-d1"].Class, "unknown")
	check("set classes", []string{sets["pop-a"].Class, sets["ded-1"].Class, sets["quarantine"].Class}, "[bad unknown ok]")
	check("EIPs", p.EIPs, "{3 2 1 0 1 1}")
	check("backends", []int{p.BackendsUp, p.BackendsDown}, "[2 1]")
	if len(p.Services.Items) != 2 {
		t.Fatalf("services %+v", p.Services)
	}
	web, dns := p.Services.Items[0], p.Services.Items[1]
	check("web first (unhealthy)", []any{web.Name, web.Class, web.ServedBy, web.Why, web.Up, web.Down}, "[web warn pop-a prefix 1 1]")
	check("web backends", web.Pools.Items[0].Backends.Items, "[{az1-h1/g1:8080 1 down bad} {az1-h2/g1:8080 1 up ok}]")
	check("web check", web.Pools.Items[0].Check, "http")
	check("dns", []any{dns.Name, dns.Class, dns.Pools.Items[0].Backends.Items[0].Health}, "[dns ok unchecked]")
	check("quarantines", p.Quarantines.Items, `[{198.51.100.8 operator flood <b>1 Mpps</b> "quoted"}]`)
	check("packages", p.Packages.Items, "[{shop 100 Mbit/s 20ms gold tier <style>body{display:none}</style> 1}]")
	// The picture: three sets, three AZs, every edge and host drawn, in
	// their classes.
	rects := map[string]string{}
	for _, r := range p.Picture.Rects {
		rects[strings.SplitN(r.Title, ":", 2)[0]] = r.Class
	}
	for title, class := range map[string]string{
		"edge edge-a1 (198.18.0.1)": "ok", "edge edge-a2 (198.18.0.2)": "bad", "edge edge-d1 (198.18.0.5)": "unknown",
		"host az1-h1 (198.18.1.1), 2 guests": "ok", "host az1-h2 (198.18.1.2), 1 guest": "unknown", "host az3-h1 (198.18.3.1), 0 guests": "unknown",
		"AZ az1 in region r1": "az", "AZ az3 in region r1": "az",
	} {
		if rects[title] != class {
			t.Errorf("picture: %q is %q, want %q (have %v)", title, rects[title], class, rects)
		}
	}
	if p.Picture.W != 1200 || p.Picture.H < 300 || p.Picture.H > 1000 {
		t.Errorf("picture %dx%d", p.Picture.W, p.Picture.H)
	}
}

// renderPage renders p as GET /ui does.
func renderPage(t testing.TB, p Page) string {
	t.Helper()
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestStatusPageEscapes: markup in any field the page shows — free text
// (descriptions, reasons), what a node publishes (errors), and names,
// which the API validates but the page does not rely on — comes out as
// text: the page has no element but its own.
func TestStatusPageEscapes(t *testing.T) {
	st := uiState(t)
	evil := `<script>alert("set")</script>`
	// Past validation, as an object written straight into etcd would be
	// if it were read: a name with markup.
	st.EdgeSets[evil] = &model.EdgeSet{Name: evil, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		Edges: []model.EdgeNode{{Name: `e"><script>x()</script>`, Underlay: netip.MustParseAddr("198.18.0.77")}}}
	st.Services[evil] = &model.Service{Name: evil, VIP: netip.MustParseAddr("192.0.2.80"), Mode: `<b onmouseover=x()>`, Description: "]]><script>y()</script>"}
	st.AZs["evil"] = &model.AZ{Name: "evil", Region: `"/><script>z()</script>`}
	nodes := uiNodes()
	nodes["edge"][1].BGP.Failing = append(nodes["edge"][1].BGP.Failing, `</text><script>w()</script>`)
	out := renderPage(t, statusPage(PageInput{State: st, Nodes: nodes, Errors: []string{"<iframe src=x>"}, Now: time.Now()}))
	low := strings.ToLower(out)
	for _, bad := range []string{"<script", "<img", "<iframe", "<b onmouseover", "<b>1 mpps", "onerror=alert"} {
		if strings.Contains(low, bad) {
			i := strings.Index(low, bad)
			t.Errorf("page contains %q: ...%s...", bad, out[max(0, i-80):min(len(out), i+80)])
		}
	}
	if n := strings.Count(low, "<style"); n != 1 {
		t.Errorf("%d <style elements, want the page's own one", n)
	}
	// The page's own elements only: each tag is one the template writes.
	own := map[string]bool{}
	for _, m := range regexp.MustCompile(`<([a-zA-Z]+)`).FindAllStringSubmatch(pageHTML, -1) {
		own[strings.ToLower(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`<([a-zA-Z]+)`).FindAllStringSubmatch(out, -1) {
		if !own[strings.ToLower(m[1])] {
			t.Errorf("page has a <%s> element the template does not write", m[1])
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(&#34;set&#34;)&lt;/script&gt;", "flood &lt;b&gt;1 Mpps&lt;/b&gt;",
		"gold tier &lt;style&gt;", "&lt;iframe src=x&gt;", "&lt;/text&gt;&lt;script&gt;w()"} {
		if !strings.Contains(out, want) && !strings.Contains(out, strings.ReplaceAll(want, "&#34;", "&quot;")) {
			t.Errorf("page lacks the escaped %q", want)
		}
	}
}

// TestStatusPageBounded: a region of 100,000 EIPs pulled out into a
// dedicated set, 2,000 quarantines, 500 services of 100 backends and 300
// packages renders counts and the first rows, not every object.
func TestStatusPageBounded(t *testing.T) {
	st := uiState(t)
	base := netip.MustParseAddr("198.18.0.0").As4()
	addr := func(i int) netip.Addr {
		b := base
		b[1] |= byte(i >> 16)
		b[2], b[3] = byte(i>>8), byte(i)
		return netip.AddrFrom4(b)
	}
	// 198.18.0.0/15 holds 131,072 addresses: the EIPs are the first
	// 100,000, the other objects' addresses follow.
	// Filled straight into the maps: statusPage only reads them.
	st.EdgeSets["pop-b"] = &model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	for i := range 100_000 {
		a := addr(i)
		st.EIPs[a.String()] = &model.EIP{Address: a, Set: "ded-1"}
	}
	for i := range 2000 {
		a := addr(100_000 + i)
		st.Quarantines[a.String()] = &model.Quarantine{Address: a}
	}
	for i := range 500 {
		svc := &model.Service{Name: fmt.Sprintf("svc-%03d", i), VIP: addr(102_000 + i), Mode: "encap"}
		pl := model.Pool{Name: "p"}
		for j := range 100 {
			pl.Backends = append(pl.Backends, model.Backend{Address: addr(103_000 + j), Port: uint16(j + 1)})
		}
		svc.Pools = []model.Pool{pl}
		st.Services[svc.Name] = svc
	}
	for i := range 300 {
		st.BandwidthPackages[fmt.Sprintf("pk-%03d", i)] = &model.BandwidthPackage{Name: fmt.Sprintf("pk-%03d", i), Capacity: 1e9}
	}
	for i := range 40 {
		h := &model.Host{Name: fmt.Sprintf("az2-x%02d", i), AZ: "az2", Underlay: addr(104_000 + i)}
		st.Hosts[h.Name] = h
	}
	start := time.Now()
	p := statusPage(PageInput{State: st, Now: time.Now()})
	t.Logf("built in %v", time.Since(start))
	out := renderPage(t, p)
	if len(out) > 400<<10 {
		t.Errorf("page of %d bytes for 100k EIPs", len(out))
	}
	for _, want := range []string{
		"100003 EIPs", "100001 pulled out",
		fmt.Sprintf("and %d more", 100_001-pageRows), // ded-1's /32s
		fmt.Sprintf("and %d more", 102_000-pageRows), // pop-b's, pulled out
		fmt.Sprintf("and %d more quarantines", 2001-pageRows),
		fmt.Sprintf("and %d more services", 502-pageRows),
		fmt.Sprintf("and %d more packages", 301-pageRows),
		fmt.Sprintf("and %d more", 100-pageInner), // a pool's backends
		fmt.Sprintf("and %d more hosts", 41-picHosts),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	t.Logf("100k EIPs, 2k quarantines, 500 services x 100 backends: a page of %d KiB", len(out)>>10)
}

// basic is an Authorization header of HTTP Basic credentials.
func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// get sends a request with the Authorization header auth ("": none).
func uiCall(t *testing.T, s *Server, method, path, auth string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

// TestStatusPageAuth: GET /ui answers with a token as a Basic password or
// a bearer, 401 asking for Basic credentials without one; the page's
// headers forbid scripts, framing, sniffing and caching; Basic
// credentials authorize nothing else.
func TestStatusPageAuth(t *testing.T) {
	tf := writeTokens(t, t.TempDir(), "reader read-only reader-token-0123456789\nops operator operator-token-0123456789\n")
	s := startServer(t, Config{TokensFile: tf})
	if _, err := newClient(s).Apply(context.Background(), uiDoc(t)); err != nil {
		t.Fatal(err)
	}
	const reader = "reader-token-0123456789"
	for _, c := range []struct {
		name, auth string
		code       int
	}{
		{"none", "", 401},
		{"basic, wrong token", basic("x", "wrong-token-0123456789"), 401},
		{"basic, token as the user", basic(reader, ""), 401},
		{"basic, not base64", "Basic !!!", 401},
		{"basic, read-only", basic("anyone", reader), 200},
		{"basic, operator", basic("", "operator-token-0123456789"), 200},
		{"basic, admin", basic("admin", s.Token()), 200},
		{"bearer, read-only", "Bearer " + reader, 200},
	} {
		resp, body := uiCall(t, s, "GET", "/ui", c.auth)
		if resp.StatusCode != c.code {
			t.Errorf("%s: HTTP %d, want %d: %.200s", c.name, resp.StatusCode, c.code, body)
			continue
		}
		h := resp.Header
		if h.Get("Content-Security-Policy") != uiCSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", c.name, h)
		}
		if c.code == 401 {
			if h.Get("WWW-Authenticate") != `Basic realm="azgate", charset="UTF-8"` || strings.Contains(body, reader) {
				t.Errorf("%s: WWW-Authenticate %q, body %s", c.name, h.Get("WWW-Authenticate"), body)
			}
			continue
		}
		if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" || !strings.Contains(body, "edge-a1") || !strings.Contains(body, "<svg") {
			t.Errorf("%s: %s %.300s", c.name, ct, body)
		}
	}
	if resp, body := uiCall(t, s, "HEAD", "/ui", basic("", reader)); resp.StatusCode != 200 || body != "" {
		t.Errorf("HEAD /ui: HTTP %d %q", resp.StatusCode, body)
	}
	if resp, _ := uiCall(t, s, "POST", "/ui", basic("", s.Token())); resp.StatusCode != 405 {
		t.Errorf("POST /ui: HTTP %d, want 405", resp.StatusCode)
	}
	// Basic credentials, even the admin's, open no other route: a
	// browser's cached credentials cannot write (nor read the API).
	for _, route := range []struct{ method, path string }{
		{"GET", "/v1/status"}, {"GET", "/v1/azs"}, {"POST", "/v1/azs"}, {"DELETE", "/v1/quarantines/198.51.100.8"}, {"POST", "/v1/apply"},
	} {
		resp, body := uiCall(t, s, route.method, route.path, basic("admin", s.Token()))
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s with Basic credentials: HTTP %d %q: %s", route.method, route.path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	if _, err := newClient(s).Get(context.Background(), model.KindQuarantine, "198.51.100.8"); err != nil {
		t.Errorf("the quarantine is gone: %v", err)
	}
}

package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// The read-only status page: GET /ui (docs/observability.md, "Status
// page"). A browser cannot send a bearer header, so the /ui routes also
// take HTTP Basic credentials whose password is an API token (the user
// name is ignored); no other route does, so credentials a browser caches
// for the page never authorize a write (no cross-site request forgery of
// the API). The page holds no script and loads nothing: its
// Content-Security-Policy forbids both.

// uiCSP is the page's Content-Security-Policy: nothing loads, nothing
// runs; the page's own <style> and inline SVG are all it has.
const uiCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// isUIRequest: a request the Basic scheme may authenticate (a read of a
// /ui route).
func isUIRequest(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/"))
}

// bearerOf is the Authorization header as tokenSet.lookup reads it: the
// header itself, or for a /ui read with Basic credentials, their password
// as a bearer token.
func bearerOf(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if !isUIRequest(r) {
		return h
	}
	enc, ok := strings.CutPrefix(h, "Basic ")
	if !ok {
		return h
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	_, pw, ok := strings.Cut(string(b), ":")
	if !ok || pw == "" {
		return ""
	}
	return "Bearer " + pw
}

// uiAuthorized is authorized for the /ui routes: a request without a
// valid token (bearer or Basic) gets a 401 asking for Basic credentials,
// so that a browser prompts for them.
func (s *Server) uiAuthorized(h handlerFunc) http.Handler {
	inner := s.authorized(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setUIHeaders(w)
		if whoami(r).role == RoleNone {
			w.Header().Set("WWW-Authenticate", `Basic realm="azgate", charset="UTF-8"`)
			msg := "sign in with an API token as the password (any user name)"
			if r.Header.Get("Authorization") != "" {
				msg = "wrong credentials: the password must be one of the controller's API tokens"
			}
			s.writeError(w, r, &httpError{status: http.StatusUnauthorized, msg: msg})
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// setUIHeaders: the page may not run or load anything, be framed, be
// sniffed as another type, or be kept by a cache (it needs credentials).
func setUIHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// ui: GET /ui, the status page.
func (s *Server) ui(w http.ResponseWriter, r *http.Request) error {
	p := s.Core.StatusPage(r.Context())
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, p); err != nil {
		return fmt.Errorf("rendering the status page: %w", err)
	}
	if d := s.cfg.WriteTimeout; d > 0 {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(buf.Bytes())
	}
	return nil
}

// StatusPage is the status page's content: the view's state and the
// nodes' published statuses (statusPage).
func (c *Core) StatusPage(ctx context.Context) Page {
	in := PageInput{Version: c.cfg.Version, Store: c.storeKind(), Nodes: map[string][]model.NodeStatus{}, Now: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, c.store, "")
	if err != nil {
		in.Errors = append(in.Errors, err.Error())
	}
	for _, n := range nodes {
		if n.Err != nil {
			in.Errors = append(in.Errors, n.Err.Error())
			continue
		}
		in.Nodes[n.Role] = append(in.Nodes[n.Role], n.Status)
	}
	// As /v1/status: objects in the store that fail validation.
	if inv, n := c.store.Invalid(); n > 0 {
		for _, o := range inv {
			in.Errors = append(in.Errors, fmt.Sprintf("store: %s %q is invalid and ignored: %s", o.Kind, o.Key, o.Reason))
		}
		if n > len(inv) {
			in.Errors = append(in.Errors, fmt.Sprintf("store: and %d more invalid objects", n-len(inv)))
		}
	}
	v := c.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	in.State, in.Revision = v.st, v.rev
	return statusPage(in)
}

var pageTemplate = template.Must(template.New("ui").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
}).Parse(pageHTML))

// pageHTML is the page. Every value in it comes from the Page, escaped by
// html/template for where it stands (text, attribute); classes are the
// fixed ones of statuspage.go.
const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>azgate region status</title>
<style>
body{font:14px/1.4 sans-serif;margin:16px;color:#212121;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:20px 0 6px;border-bottom:1px solid #bdbdbd}
table{border-collapse:collapse;background:#fff;margin-bottom:4px} td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eeeeee} .meta{color:#616161} .more{color:#616161;font-style:italic}
.ok{background:#c8e6c9} .warn{background:#ffe082} .bad{background:#ef9a9a} .unknown{background:#e0e0e0}
svg text{font:13px sans-serif;fill:#212121} svg text.b{font-weight:bold} svg text.s{font-size:11px}
svg line{stroke:#757575;stroke-width:2}
rect.ok{fill:#c8e6c9;stroke:#2e7d32} rect.warn{fill:#ffe082;stroke:#ff8f00} rect.bad{fill:#ef9a9a;stroke:#c62828}
rect.unknown{fill:#e0e0e0;stroke:#757575} rect.set{fill:#e3f2fd;stroke:#1565c0} rect.az{fill:#f3e5f5;stroke:#6a1b9a}
rect.region{fill:#cfd8dc;stroke:#455a64}
ul{margin:0;padding-left:18px} code{font-size:12px} td:first-child{white-space:nowrap}
</style></head><body>
<h1>azgate region status</h1>
<p class="meta">Revision {{.Revision}} &middot; {{.Store}} store &middot; controller {{.Version}} &middot; generated {{.Generated.Format "2006-01-02 15:04:05 MST"}} &middot; read-only; reload to refresh</p>
<p class="meta">{{range $i, $k := .Objects}}{{if $i}}, {{end}}{{$k.N}} {{$k.Kind}}{{end}}</p>
{{with .Errors.Items}}<h2>Errors</h2><ul>{{range .}}<li class="bad">{{.}}</li>{{end}}{{if $.Errors.More}}<li class="more">and {{$.Errors.More}} more</li>{{end}}</ul>{{end}}

<h2>Region</h2>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Picture.W}}" height="{{.Picture.H}}" viewBox="0 0 {{.Picture.W}} {{.Picture.H}}" role="img" aria-label="the region: edge sets and their edges, the underlay, AZs and their hosts">
{{range .Picture.Lines}}<line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}"/>
{{end}}{{range .Picture.Rects}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" rx="4" class="{{.Class}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Picture.Texts}}<text x="{{.X}}" y="{{.Y}}"{{if .Bold}} class="b"{{else if .Small}} class="s"{{end}}>{{.Text}}</text>
{{end}}</svg>

<h2>Edge sets</h2>
<table><tr><th>set</th><th>role</th><th>announces</th><th>pulled out /32s</th><th>edges</th></tr>
{{range .Sets}}<tr><td class="{{.Class}}"><b>{{.Name}}</b></td><td>{{.Role}}</td>
<td>{{range .Announces.Items}}<code>{{.}}</code><br>{{else}}nothing{{end}}{{if .Announces.More}}<span class="more">and {{.Announces.More}} more</span>{{end}}</td>
<td>{{range .PulledOut.Items}}<code>{{.}}</code><br>{{else}}none{{end}}{{if .PulledOut.More}}<span class="more">and {{.PulledOut.More}} more</span>{{end}}</td>
<td><table>{{range .Edges.Items}}<tr><td class="{{.Class}}">{{.Name}}</td><td>{{.Underlay}}</td><td>{{.State}}{{if .Sessions}}; BGP {{.Sessions}}, {{.Advertised}} advertised{{end}}{{if .Applied}}; at revision {{.Applied}}{{end}}
{{with .Errors.Items}}<ul>{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}{{if .Errors.More}}<span class="more">and {{.Errors.More}} more errors</span>{{end}}</td></tr>
{{else}}<tr><td class="bad">no edges</td></tr>{{end}}</table>{{if .Edges.More}}<span class="more">and {{.Edges.More}} more edges</span>{{end}}</td></tr>
{{else}}<tr><td colspan="5">no edge sets</td></tr>{{end}}</table>
{{if .SetsMore}}<p class="more">and {{.SetsMore}} more sets</p>{{end}}

<h2>EIPs</h2>
<p>{{.EIPs.Total}} EIPs: {{.EIPs.Bound}} bound, {{.EIPs.PulledOut}} pulled out into dedicated sets, {{.EIPs.Quarantined}} quarantined, {{.EIPs.Limited}} with rate limits, {{.EIPs.InPackages}} in bandwidth packages.</p>

<h2>Services</h2>
<p>{{.BackendsUp}} backends up, {{.BackendsDown}} down (the controller's verdict from the edges' health checks); unhealthy services first.</p>
<table><tr><th>service</th><th>VIP</th><th>mode</th><th>served by</th><th>backends</th><th>description</th></tr>
{{range .Services.Items}}<tr><td class="{{.Class}}"><b>{{.Name}}</b></td><td><code>{{.VIP}}</code></td><td>{{.Mode}}</td><td>{{if .ServedBy}}{{.ServedBy}} ({{.Why}}){{else}}no set{{end}}</td>
<td>{{range .Pools.Items}}<div>pool <b>{{.Name}}</b>{{if .Check}} ({{.Check}} check){{else}} (no health check){{end}}:
{{range .Backends.Items}}<span class="{{.Class}}">&nbsp;{{.Key}} w{{.Weight}} {{.Health}}&nbsp;</span> {{end}}{{if .Backends.More}}<span class="more">and {{.Backends.More}} more</span>{{end}}</div>{{end}}{{if .Pools.More}}<span class="more">and {{.Pools.More}} more pools</span>{{end}}</td>
<td>{{.Description}}</td></tr>
{{else}}<tr><td colspan="6">no services</td></tr>{{end}}</table>
{{if .Services.More}}<p class="more">and {{.Services.More}} more services</p>{{end}}

<h2>Quarantines</h2>
<table><tr><th>address</th><th>by</th><th>reason</th></tr>
{{range .Quarantines.Items}}<tr><td><code>{{.Address}}</code></td><td>{{.By}}</td><td>{{.Reason}}</td></tr>
{{else}}<tr><td colspan="3">none</td></tr>{{end}}</table>
{{if .Quarantines.More}}<p class="more">and {{.Quarantines.More}} more quarantines</p>{{end}}

<h2>Bandwidth packages</h2>
<table><tr><th>package</th><th>capacity</th><th>burst</th><th>EIPs</th><th>description</th></tr>
{{range .Packages.Items}}<tr><td><b>{{.Name}}</b></td><td>{{.Capacity}}</td><td>{{.Burst}}</td><td>{{.EIPs}}</td><td>{{.Description}}</td></tr>
{{else}}<tr><td colspan="5">none</td></tr>{{end}}</table>
{{if .Packages.More}}<p class="more">and {{.Packages.More}} more packages</p>{{end}}
</body></html>
`

package controller

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestEveryRouteNeedsToken calls every route the handler registered (not
// a hand-kept list: a route added later is covered) without a token and
// with a wrong one. Each but /healthz must answer 401 (/metrics too, with
// MetricsAuth) without naming the token's file or directory, and a write
// carrying a valid object must store nothing.
func TestEveryRouteNeedsToken(t *testing.T) {
	s := startServer(t, Config{MetricsAuth: true})
	open := map[string]bool{"GET /healthz": true}
	if len(s.routes) < 5*len(model.UserKinds) {
		t.Fatalf("only %d routes recorded: %v", len(s.routes), s.routes)
	}
	wild := regexp.MustCompile(`\{[a-z]+\}`)
	body := map[string]any{"kind": "azs", "name": "az-x"}
	for _, pattern := range s.routes {
		if open[pattern] {
			continue
		}
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Fatalf("route %q has no method", pattern)
		}
		path = wild.ReplaceAllString(path, "x")
		for _, tok := range []string{"", strings.Repeat("0", len(s.Token()))} {
			var b any
			if method != "GET" && method != "DELETE" {
				b = body
			}
			r := call(t, s, method, path, b, tok)
			if r.code != 401 {
				t.Errorf("%s %s with token %q: HTTP %d, want 401: %s", method, path, tok, r.code, r.body)
				continue
			}
			if e := r.apiError(t); strings.Contains(e.Error, s.cfg.DataDir) || strings.Contains(e.Error, "/") {
				t.Errorf("%s %s: unauthenticated error %q names a path", method, path, e.Error)
			}
		}
	}
	if r := call(t, s, "GET", "/v1/azs", nil); r.code != 200 || strings.Contains(string(r.body), "az-x") {
		t.Errorf("an unauthenticated write stored something: HTTP %d %s", r.code, r.body)
	}
	t.Logf("%d routes, each refused without a token and with a wrong one", len(s.routes))
}

// TestEveryRouteChecksRole calls every route the handler registered with
// a read-only, an operator and an admin token from a tokens file: reads
// are open to all three (the audit log to the admin only; the status
// page also with the token as a Basic password, no other route), writes refused (403, naming the role needed) to
// the read-only one and stored nothing, forced writes refused to the
// operator.
func TestEveryRouteChecksRole(t *testing.T) {
	dir := t.TempDir()
	tf := writeTokens(t, dir, "reader read-only reader-token-0123456789\n"+
		"ops operator operator-token-0123456789\n"+
		"boss admin admin-token-0123456789abc\n")
	s := startServer(t, Config{MetricsAuth: true, TokensFile: tf})
	wild := regexp.MustCompile(`\{[a-z]+\}`)
	body := map[string]any{"kind": "azs", "name": "az-x"}
	const reader, ops, boss = "reader-token-0123456789", "operator-token-0123456789", "admin-token-0123456789abc"
	writes := 0
	for _, pattern := range s.routes {
		if pattern == "GET /healthz" {
			continue
		}
		method, path, _ := strings.Cut(pattern, " ")
		path = wild.ReplaceAllString(path, "x")
		var b any
		if method != "GET" && method != "DELETE" {
			b = body
		}
		if pattern == "GET /v1/audit" { // admin only
			for _, tok := range []string{reader, ops} {
				if r := call(t, s, method, path, b, tok); r.code != 403 || !strings.Contains(r.apiError(t).Error, "needs role admin") {
					t.Errorf("%s %s as %s: HTTP %d, want 403 naming admin: %s", method, path, tok, r.code, r.body)
				}
			}
			if r := call(t, s, method, path, b, boss); r.code != 200 {
				t.Errorf("%s %s as admin: HTTP %d: %s", method, path, r.code, r.body)
			}
			continue
		}
		// HTTP Basic credentials (the token as the password) open the
		// status page, to the read-only role, and nothing else: cached
		// by a browser, they must not authorize a write.
		for _, tok := range []string{reader, boss} {
			code := callBasic(t, s, method, path, tok)
			if strings.HasPrefix(pattern, "GET /ui") {
				if code != 200 {
					t.Errorf("%s %s with Basic credentials of a %s token: HTTP %d, want 200", method, path, tok, code)
				}
			} else if code != 401 {
				t.Errorf("%s %s with Basic credentials: HTTP %d, want 401", method, path, code)
			}
		}
		if method == "GET" {
			for _, tok := range []string{reader, ops, boss} {
				if r := call(t, s, method, path, b, tok); r.code == 401 || r.code == 403 {
					t.Errorf("%s %s with a %s token: HTTP %d: %s", method, path, tok, r.code, r.body)
				}
			}
			continue
		}
		writes++
		r := call(t, s, method, path, b, reader)
		if r.code != 403 {
			t.Errorf("%s %s as read-only: HTTP %d, want 403: %s", method, path, r.code, r.body)
		} else if e := r.apiError(t); !strings.Contains(e.Error, "needs role operator") || !strings.Contains(e.Error, `"reader"`) {
			t.Errorf("%s %s as read-only: error %q does not name the token and the role needed", method, path, e.Error)
		}
		r = call(t, s, method, path+"?force=true", b, ops)
		if r.code != 403 {
			t.Errorf("%s %s?force=true as operator: HTTP %d, want 403: %s", method, path, r.code, r.body)
		} else if e := r.apiError(t); !strings.Contains(e.Error, "needs role admin") {
			t.Errorf("%s %s?force=true as operator: error %q does not name the role needed", method, path, e.Error)
		}
	}
	if writes < 3*len(model.UserKinds) {
		t.Fatalf("only %d write routes", writes)
	}
	if r := call(t, s, "GET", "/v1/azs", nil); r.code != 200 || strings.Contains(string(r.body), "az-x") {
		t.Errorf("a refused write stored something: HTTP %d %s", r.code, r.body)
	}
	// The operator writes; a dry run with force is no forced write.
	for _, q := range []string{"?force=true&dryRun=true", ""} {
		if r := call(t, s, "POST", "/v1/azs"+q, map[string]any{"name": "az-x"}, ops); r.code != 201 && r.code != 200 {
			t.Errorf("POST /v1/azs%s as operator: HTTP %d: %s", q, r.code, r.body)
		}
	}
	if r := call(t, s, "DELETE", "/v1/azs/az-x?force=true", nil, boss); r.code != 200 && r.code != 204 {
		t.Errorf("forced DELETE as admin: HTTP %d: %s", r.code, r.body)
	}
}

// callBasic sends a request with tok as the password of HTTP Basic
// credentials and returns the status code.
func callBasic(t *testing.T, s *Server, method, path, tok string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, strings.NewReader(`{"kind": "azs", "name": "az-x"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("user", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

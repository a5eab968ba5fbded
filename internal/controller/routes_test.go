package controller

import (
	"regexp"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestEveryRouteNeedsToken calls every route the handler registered (not
// a hand-kept list: a route added later is covered) without a token and
// with a wrong one. Each but /healthz must answer 401 naming the token
// file (/metrics too, with MetricsAuth), and a write carrying a valid
// object must store nothing.
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
			if e := r.apiError(t); !strings.Contains(e.Error, s.TokenFile()) {
				t.Errorf("%s %s: error %q does not say where the token is", method, path, e.Error)
			}
		}
	}
	if r := call(t, s, "GET", "/v1/azs", nil); r.code != 200 || strings.Contains(string(r.body), "az-x") {
		t.Errorf("an unauthenticated write stored something: HTTP %d %s", r.code, r.body)
	}
	t.Logf("%d routes, each refused without a token and with a wrong one", len(s.routes))
}

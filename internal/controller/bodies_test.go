package controller

import (
	"strings"
	"testing"
)

// TestMalformedBodies: a body with a duplicate key (at any depth), a key
// matching a field only without case, trailing data, or above the size
// limit gets a 4xx naming the problem, and nothing is stored.
func TestMalformedBodies(t *testing.T) {
	s := startServer(t, Config{MaxBodyBytes: 4096})
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"duplicate key", "/v1/azs", `{"name": "azx1", "name": "azx2"}`, 400, "name: duplicate key"},
		{"case-only key", "/v1/azs", `{"NAME": "azx1"}`, 400, `key \"NAME\" differs from field \"name\" only by case`},
		{"trailing data", "/v1/azs", `{"name": "azx1"} {"name": "azx2"}`, 400, "trailing data"},
		{"trailing brace", "/v1/azs", `{"name": "azx1"} }`, 400, "trailing data"},
		{"apply: nested duplicate", "/v1/apply", `{"azs": [{"name": "azx1", "region": "r", "region": "q"}]}`, 400, "azs[0].region: duplicate key"},
		{"apply: case-only key", "/v1/apply", `{"AZs": [{"name": "azx1"}]}`, 400, `differs from field \"azs\" only by case`},
		{"apply YAML: duplicate", "/v1/apply", "azs:\n- name: azx1\n  name: azx2\n", 400, "name"},
		{"apply YAML: case-only key", "/v1/apply", "azs:\n- Name: azx1\n", 400, `azs[0].Name: key \"Name\" differs from field \"name\"`},
		{"oversize", "/v1/apply", `{"azs": [{"name": "azx1", "description": "` + strings.Repeat("x", 5000) + `"}]}`, 413, "larger than 4096 bytes"},
		{"malformed", "/v1/azs", `{"name": "azx1"`, 400, "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", tc.path, tc.body)
			if r.code != tc.code || !strings.Contains(string(r.body), tc.want) {
				t.Errorf("HTTP %d %s, want %d saying %q", r.code, r.body, tc.code, tc.want)
			}
			for _, name := range []string{"azx1", "azx2"} {
				if g := call(t, s, "GET", "/v1/azs/"+name, nil); g.code != 404 {
					t.Errorf("after a refused body, GET az %s: HTTP %d %s", name, g.code, g.body)
				}
			}
		})
	}
}

// TestMetricsAuth: /metrics is open by default and needs the token with
// Config.MetricsAuth; /healthz stays open either way.
func TestMetricsAuth(t *testing.T) {
	for _, auth := range []bool{false, true} {
		s := startServer(t, Config{MetricsAuth: auth})
		noToken := 200
		if auth {
			noToken = 401
		}
		if r := call(t, s, "GET", "/metrics", nil, ""); r.code != noToken {
			t.Errorf("MetricsAuth %v, no token: HTTP %d, want %d", auth, r.code, noToken)
		}
		if r := call(t, s, "GET", "/metrics", nil, "wrong"); r.code != noToken {
			t.Errorf("MetricsAuth %v, wrong token: HTTP %d, want %d", auth, r.code, noToken)
		}
		if r := call(t, s, "GET", "/metrics", nil); r.code != 200 || !strings.Contains(string(r.body), "azgate_controller_") {
			t.Errorf("MetricsAuth %v, token: HTTP %d", auth, r.code)
		}
		if r := call(t, s, "GET", "/healthz", nil, ""); r.code != 200 {
			t.Errorf("MetricsAuth %v, /healthz: HTTP %d", auth, r.code)
		}
	}
}

package controller

import (
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestSecretsWriteOnly writes an edge set with BGP MD5 passwords: no
// answer (the write's, GET, the list, apply's diff) carries them, the
// controller stores them, a write that gives model.RedactedSecret keeps
// the stored one (so what a GET returns, or azgate export writes, applies
// back to no change), a new password replaces it, and RedactedSecret for
// a peer without a stored password is refused naming the field.
func TestSecretsWriteOnly(t *testing.T) {
	s := startServer(t, Config{})
	const pw1, pw2 = "md5-first-secret", "md5-second-secret"
	set := func(pw string, peers ...string) map[string]any {
		var ps []map[string]any
		for _, p := range peers {
			ps = append(ps, map[string]any{"address": p, "asn": 64501, "password": pw})
		}
		return map[string]any{"name": "pop-s", "prefixes": []string{"203.0.113.0/24"}, "bgp": map[string]any{"asn": 64500},
			"edges": []map[string]any{{"name": "e1", "underlay": "198.18.0.1",
				"bgp": map[string]any{"routerID": "198.18.0.1", "nextHop": "198.18.100.1", "peers": ps}}}}
	}
	stored := func() string {
		t.Helper()
		o, _, _, err := s.Core.Get(model.KindEdgeSet, "pop-s")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*model.EdgeSet).Edges[0].BGP.Peers[0].Password
	}
	noSecret := func(what string, r reply) {
		t.Helper()
		if strings.Contains(string(r.body), "md5-") {
			t.Errorf("%s: answer carries a password: %s", what, r.body)
		}
	}
	r := call(t, s, "POST", "/v1/edgesets", set(pw1, "198.18.100.0"))
	if r.code != 201 {
		t.Fatalf("create: HTTP %d: %s", r.code, r.body)
	}
	noSecret("create", r)
	if !strings.Contains(string(r.body), model.RedactedSecret) {
		t.Errorf("create answer does not show the password as %q: %s", model.RedactedSecret, r.body)
	}
	if got := stored(); got != pw1 {
		t.Fatalf("stored password %q, want %q", got, pw1)
	}
	get := call(t, s, "GET", "/v1/edgesets/pop-s", nil)
	noSecret("get", get)
	list := call(t, s, "GET", "/v1/edgesets", nil)
	noSecret("list", list)
	if !strings.Contains(string(list.body), model.RedactedSecret) {
		t.Errorf("list does not show the password as %q: %s", model.RedactedSecret, list.body)
	}

	// What GET answered, written back: no change, the password kept.
	r = call(t, s, "PUT", "/v1/edgesets/pop-s", get.body)
	if r.code != 200 || !strings.Contains(string(r.body), `"unchanged"`) {
		t.Errorf("PUT of the GET answer: HTTP %d, want unchanged: %s", r.code, r.body)
	}
	doc := `{"edgesets": [` + string(get.body) + `]}`
	r = call(t, s, "POST", "/v1/apply", doc)
	if r.code != 200 || !strings.Contains(string(r.body), `"unchanged":1`) {
		t.Errorf("apply of the exported set: HTTP %d, want 1 unchanged: %s", r.code, r.body)
	}
	if got := stored(); got != pw1 {
		t.Errorf("after re-applying the redacted set: stored password %q, want %q", got, pw1)
	}

	// A new password replaces the stored one; the diff hides both.
	r = call(t, s, "POST", "/v1/apply?diff=true", map[string]any{"edgesets": []any{set(pw2, "198.18.100.0")}})
	if r.code != 200 || !strings.Contains(string(r.body), "password") {
		t.Errorf("apply of a new password with diff: HTTP %d: %s", r.code, r.body)
	}
	noSecret("apply diff", r)
	if got := stored(); got != pw2 {
		t.Errorf("after a new password: stored %q, want %q", got, pw2)
	}

	// RedactedSecret for a peer with no stored password.
	r = call(t, s, "PUT", "/v1/edgesets/pop-s", set(model.RedactedSecret, "198.18.100.0", "198.18.100.2"))
	if r.code != 422 {
		t.Fatalf("redacted password of a new peer: HTTP %d, want 422: %s", r.code, r.body)
	}
	if e := r.apiError(t); len(e.Fields) != 1 || e.Fields[0].Field != "edges[0].bgp.peers[1].password" || !strings.Contains(e.Fields[0].Msg, "198.18.100.2") {
		t.Errorf("redacted password of a new peer: %+v", e)
	}
	if got := stored(); got != pw2 {
		t.Errorf("after a refused write: stored %q, want %q", got, pw2)
	}
}

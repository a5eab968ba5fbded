package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTokens writes a tokens file (mode 0600) in dir, by rename over
// the previous one, as a rotation would.
func writeTokens(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "tokens")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseTokens(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := "# comment\n\nalice admin alice-token-0123456789\nbob read-only sha256:" + sum + "\n  carol operator carol-token-0123456789  \n"
	es, err := parseTokens([]byte(good), "f")
	if err != nil || len(es) != 3 || es[0].role != RoleAdmin || es[1].role != RoleReadOnly || es[2].role != RoleOperator || es[2].name != "carol" {
		t.Fatalf("good file: %+v, %v", es, err)
	}
	for _, c := range []struct{ in, want string }{
		{"alice admin", "line 1: 2 fields"},
		{"al/ce admin alice-token-0123456789", `name "al/ce"`},
		{"alice root alice-token-0123456789", `role "root"`},
		{"alice admin short", "at least 16"},
		{"alice admin sha256:abc", "64 hex digits"},
		{"alice admin alice-token-0123456789\nalice operator other-token-0123456789", `line 2: name "alice" given twice (line 1)`},
		{"alice admin alice-token-0123456789\nbob operator alice-token-0123456789", "line 2: same token as line 1"},
		{DataDirTokenName + " admin alice-token-0123456789", "data directory"},
	} {
		_, err := parseTokens([]byte(c.in), "f")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		} else if strings.Contains(err.Error(), "token-0123456789") {
			t.Errorf("%q: error %q quotes a token", c.in, err)
		}
	}
}

// TestTokensRotateWithoutRestart changes the tokens file under a running
// controller: a token added works at once, one removed is refused, a role
// changed takes effect, a file that no longer reads (mode opened) leaves
// none of its tokens valid but the data directory's, and fixing it
// brings them back. A tokens file that does not read at start is an
// error.
func TestTokensRotateWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	const a, b = "first-token-0123456789", "second-token-0123456789"
	tf := writeTokens(t, dir, "one operator "+a+"\n")
	s := startServer(t, Config{TokensFile: tf})
	body := map[string]any{"name": "az-r"}
	code := func(method, path, tok string) int {
		var bd any
		if method == "POST" {
			bd = body
		}
		return call(t, s, method, path, bd, tok).code
	}
	if c := code("GET", "/v1/azs", a); c != 200 {
		t.Fatalf("first token: HTTP %d", c)
	}
	if c := code("GET", "/v1/azs", b); c != 401 {
		t.Fatalf("second token before it is added: HTTP %d", c)
	}
	writeTokens(t, dir, "two read-only "+b+"\n")
	if c := code("GET", "/v1/azs", b); c != 200 {
		t.Errorf("second token after rotation: HTTP %d", c)
	}
	if c := code("GET", "/v1/azs", a); c != 401 {
		t.Errorf("first token after its removal: HTTP %d", c)
	}
	if c := code("POST", "/v1/azs", b); c != 403 {
		t.Errorf("read-only write: HTTP %d", c)
	}
	// A change in place (same inode) of the role, same size.
	if err := os.WriteFile(tf, []byte("two operator  "+b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := code("POST", "/v1/azs", b); c != 201 {
		t.Errorf("write after the role became operator: HTTP %d", c)
	}
	if err := os.Chmod(tf, 0o644); err != nil {
		t.Fatal(err)
	}
	if c := code("GET", "/v1/azs", b); c != 401 {
		t.Errorf("token of a tokens file others may read: HTTP %d, want 401", c)
	}
	if c := code("GET", "/v1/azs", s.Token()); c != 200 {
		t.Errorf("data directory token with a broken tokens file: HTTP %d", c)
	}
	if err := os.Chmod(tf, 0o600); err != nil {
		t.Fatal(err)
	}
	if c := code("GET", "/v1/azs", b); c != 200 {
		t.Errorf("token after the file was fixed: HTTP %d", c)
	}
	if err := os.Remove(tf); err != nil {
		t.Fatal(err)
	}
	if c := code("GET", "/v1/azs", b); c != 401 {
		t.Errorf("token of a removed tokens file: HTTP %d, want 401", c)
	}

	open := filepath.Join(t.TempDir(), "open")
	os.WriteFile(open, []byte("x admin x-token-0123456789abcdef\n"), 0o644)
	os.Chmod(open, 0o644)
	if _, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TokensFile: open, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Errorf("start with a tokens file others may read: %v", err)
	}
}

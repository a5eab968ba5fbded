//go:build !node

package main

import (
	"strings"
	"testing"
)

// TestCLIAudit: azgate audit lists the changes the CLI made, newest
// first, with the token's name, and pages with --limit/--continue.
func TestCLIAudit(t *testing.T) {
	s := startController(t)
	must(t, s, "az", "create", "az-audit-1")
	must(t, s, "az", "create", "az-audit-2")
	out := must(t, s, "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "local-admin") || !strings.Contains(lines[1], "put azs/az-audit-2") ||
		!strings.Contains(lines[2], "put azs/az-audit-1") || !strings.Contains(lines[1], "POST /v1/azs") {
		t.Fatalf("azgate audit:\n%s", out)
	}
	out = must(t, s, "audit", "--limit", "1")
	i := strings.Index(out, "--continue ")
	if i < 0 || strings.Contains(out, "az-audit-1") {
		t.Fatalf("azgate audit --limit 1:\n%s", out)
	}
	next := strings.TrimSuffix(strings.TrimSpace(out[i+len("--continue "):]), ")")
	if out := must(t, s, "audit", "--limit", "1", "--continue", next); !strings.Contains(out, "az-audit-1") || strings.Contains(out, "--continue") {
		t.Errorf("azgate audit --continue %s:\n%s", next, out)
	}
}

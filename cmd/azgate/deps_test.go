//go:build !node

package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// labOnly are the packages that serve only the lab, the benchmarks and the
// tests (cmd/azgate-lab links them); the shipped binary links none of
// them, nor any of this module's test helpers (packages named *test) or
// the standard library's testing.
var labOnly = []string{
	"internal/lab",
	"internal/bench",
	"internal/bench/fleetnode",
	"internal/bwsim",
	"internal/gslbbench",
	"internal/netlab",
	"internal/store/etcdproc",
	"internal/dataplane/dptest",
}

// labOnlyAllowed are lab-only packages cmd/azgate may still link: none
// (the daemons' next-hop resolver moved from internal/netlab to
// internal/nexthop).
var labOnlyAllowed = []string{}

const module = "github.com/azgate/azgate/"

// TestShippedDeps: `go list -deps ./cmd/azgate` names no lab-only package
// and no test helper, so the binary shipped to the nodes carries neither.
func TestShippedDeps(t *testing.T) {
	deps := goListDeps(t, ".")
	if !slices.Contains(deps, module+"internal/edge") {
		t.Fatalf("go list -deps lacks internal/edge: %v", deps)
	}
	for _, d := range shippedViolations(deps) {
		t.Errorf("cmd/azgate links %s: lab, benchmark and test code belongs in cmd/azgate-lab", d)
	}
	// The check itself: azgate-lab links them all, and is refused.
	got := shippedViolations(goListDeps(t, "../azgate-lab"))
	for _, want := range []string{"internal/lab", "internal/bench", "internal/bwsim", "internal/gslbbench", "internal/store/etcdproc"} {
		if !slices.Contains(got, module+want) {
			t.Errorf("the check passes azgate-lab's %s (flagged: %v)", want, got)
		}
	}
	if !slices.ContainsFunc(got, func(p string) bool { return strings.HasSuffix(p, "test") }) {
		t.Errorf("the check passes azgate-lab's test helpers (flagged: %v)", got)
	}
}

// shippedViolations are the packages of deps the shipped binary must not
// link.
func shippedViolations(deps []string) []string {
	var bad []string
	for _, d := range deps {
		if d == "testing" || strings.HasPrefix(d, "testing/") {
			bad = append(bad, d)
			continue
		}
		rel, ok := strings.CutPrefix(d, module)
		if !ok || slices.Contains(labOnlyAllowed, rel) {
			continue
		}
		if slices.Contains(labOnly, rel) || strings.HasSuffix(rel, "test") || strings.Contains(rel, "test/") {
			bad = append(bad, d)
		}
	}
	return bad
}

func goListDeps(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", dir, err, out)
	}
	return strings.Fields(string(out))
}

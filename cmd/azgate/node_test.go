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

// nodeForbidden are the packages (prefixes) azgate-node must not link:
// the controller, its embedded etcd server, and the DNS of the GSLB and
// pathd roles. GoBGP (the edge announces), gRPC (etcd's client) and
// go-redis (the edge's --bw-store) the edge itself needs.
var nodeForbidden = []string{
	"go.etcd.io/etcd/server/",
	"github.com/miekg/dns",
	module + "internal/controller",
	module + "internal/store/etcdembed",
	module + "internal/gslb",
	module + "internal/pathd",
	module + "internal/bwmgr",
	module + "internal/prober",
}

func nodeViolations(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, f := range nodeForbidden {
			if d == strings.TrimSuffix(f, "/") || strings.HasPrefix(d, f) || strings.HasPrefix(d, f+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

// TestNodeDeps: `go list -deps -tags node ./cmd/azgate` (azgate-node,
// the binary of the edge and agent roles) links the edge and the agent
// and none of the controller, the etcd server, miekg/dns, the other
// roles, nor lab or test code.
func TestNodeDeps(t *testing.T) {
	deps := goListDepsArgs(t, "-tags", "node", ".")
	for _, want := range []string{"internal/edge", "internal/agent", "internal/dataplane"} {
		if !slices.Contains(deps, module+want) {
			t.Errorf("azgate-node does not link %s", want)
		}
	}
	for _, d := range nodeViolations(deps) {
		t.Errorf("azgate-node links %s: its file is missing //go:build !node", d)
	}
	for _, d := range shippedViolations(deps) {
		t.Errorf("azgate-node links %s: lab, benchmark and test code", d)
	}
	// The check itself: azgate links what azgate-node must not.
	got := nodeViolations(goListDeps(t, "."))
	for _, want := range []string{"go.etcd.io/etcd/server/v3/embed", "github.com/miekg/dns", module + "internal/controller"} {
		if !slices.Contains(got, want) {
			t.Errorf("the check passes azgate's %s (flagged: %d packages)", want, len(got))
		}
	}
}

// TestNodeBinary: azgate-node, built as `make build` builds it, has the
// node roles with azgate's flags (--help, --check-config) and no
// controller, no CLI noun.
func TestNodeBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds azgate-node")
	}
	bin := filepath.Join(t.TempDir(), "azgate-node")
	if out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", "node", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags node: %v\n%s", err, out)
	}
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	out, err := run("edge", "--help")
	if err != nil || !strings.Contains(out, "azgate-node edge [flags]") || !strings.Contains(out, "--attach") {
		t.Errorf("azgate-node edge --help: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"edge", "--name", "e1", "--attach", "eth0", "--etcd-endpoints", "http://127.0.0.1:1"},
		{"agent", "--name", "h1", "--underlay-if", "eth1", "--etcd-endpoints", "http://127.0.0.1:1"},
	} {
		if out, err := run(append(args, "--check-config", "--log-level", "error")...); err != nil || out != "ok\n" {
			t.Errorf("azgate-node %v --check-config: %q, %v", args, out, err)
		}
	}
	// A bad configuration is refused, naming the cause.
	if out, err := run("edge", "--check-config", "--log-level", "error"); err == nil || !strings.Contains(out, "--name is required") {
		t.Errorf("azgate-node edge --check-config without --name: %q, %v", out, err)
	}
	for _, args := range [][]string{{"controller"}, {"eip", "list"}, {"docs", "config"}} {
		if out, err := run(args...); err == nil || !strings.Contains(out, "unknown command") {
			t.Errorf("azgate-node %v: %q, %v (a command of azgate, not of the node binary)", args, out, err)
		}
	}
	if out, err := run("--version"); err != nil || !strings.HasPrefix(out, "azgate-node version ") {
		t.Errorf("azgate-node --version: %q, %v", out, err)
	}
}

func goListDepsArgs(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-deps"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// TestFleetNodeDeps: azgate-fleetnode (`go build -tags node,fleetnode`,
// cmd/azgate/fleetnode.go), the fleet bench's edge and agent processes,
// links what azgate-node links and, beyond the standard library, only
// the children's code (internal/bench/fleetnode, with the data-plane
// fakes of internal/dataplane) and etcdproc's /proc reader: none of the
// controller, the etcd server, miekg/dns, the lab or the rest of
// internal/bench. So its memory is that of a process of the node binary
// (docs/scale.md, "The bench's children").
func TestFleetNodeDeps(t *testing.T) {
	deps := goListDepsArgs(t, "-tags", "node,fleetnode", ".")
	node := goListDepsArgs(t, "-tags", "node", ".")
	own := []string{module + "internal/bench/fleetnode", module + "internal/store/etcdproc"}
	for _, want := range append([]string{module + "internal/edge", module + "internal/agent", module + "internal/store", module + "internal/dataplane"}, own...) {
		if !slices.Contains(deps, want) {
			t.Errorf("azgate-fleetnode does not link %s", want)
		}
	}
	for _, d := range nodeViolations(deps) {
		t.Errorf("azgate-fleetnode links %s", d)
	}
	for _, d := range deps {
		std := !strings.Contains(strings.Split(d, "/")[0], ".")
		if d == "testing" || strings.HasPrefix(d, "testing/") || !std && !slices.Contains(own, d) && !slices.Contains(node, d) {
			t.Errorf("azgate-fleetnode links %s, which azgate-node does not", d)
		}
	}
	for _, d := range node {
		if !slices.Contains(deps, d) {
			t.Errorf("azgate-fleetnode does not link azgate-node's %s", d)
		}
	}
	// The check itself: azgate-lab, which ran the children before, links
	// lab and benchmark packages that azgate-node does not.
	var extra []string
	for _, d := range goListDeps(t, "../azgate-lab") {
		if strings.HasPrefix(d, module) && !slices.Contains(own, d) && !slices.Contains(node, d) {
			extra = append(extra, d)
		}
	}
	for _, want := range []string{module + "internal/lab", module + "internal/bench", module + "internal/controller"} {
		if !slices.Contains(extra, want) {
			t.Errorf("the check passes azgate-lab's %s (flagged: %v)", want, extra)
		}
	}
}

//go:build !node

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLILimits: an EIP's and a service's rate limits through the CLI and
// apply, shown by get, refused with the field named, cleared.
func TestCLILimits(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	must(t, s, "eip", "create", "198.51.100.31")
	must(t, s, "eip", "limits", "198.51.100.31", "--source-pps", "1000", "--syn-rate", "200", "--syn-burst", "50")
	if out := must(t, s, "eip", "get", "198.51.100.31"); !strings.Contains(out, "1000 pps per source (burst 1000), 200 SYN/s (burst 50)") {
		t.Errorf("eip get after limits:\n%s", out)
	}
	if out := must(t, s, "--json", "eip", "get", "198.51.100.31"); !strings.Contains(out, `"sourcePps": 1000`) || !strings.Contains(out, `"synBurst": 50`) {
		t.Errorf("eip get --json:\n%s", out)
	}
	if out, err := azgate(t, s, "", "eip", "limits", "198.51.100.31", "--syn-burst", "5"); err == nil || !strings.Contains(out+err.Error(), "limits.synBurst") {
		t.Errorf("a burst without its rate: %v\n%s", err, out)
	}
	if out, err := azgate(t, s, "", "eip", "limits", "198.51.100.31"); err == nil || !strings.Contains(out+err.Error(), "--clear") {
		t.Errorf("limits without a setting: %v\n%s", err, out)
	}
	must(t, s, "eip", "limits", "198.51.100.31", "--clear")
	if out := must(t, s, "eip", "get", "198.51.100.31"); strings.Contains(out, "rate limits") {
		t.Errorf("eip get after --clear:\n%s", out)
	}

	// apply: a limits block in YAML.
	f := filepath.Join(t.TempDir(), "eip.yaml")
	if err := os.WriteFile(f, []byte("eips:\n  - address: 198.51.100.32\n    limits: {sourcePps: 10, sourceBurst: 20}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, s, "apply", "-f", f)
	if out := must(t, s, "eip", "get", "198.51.100.32"); !strings.Contains(out, "10 pps per source (burst 20)") {
		t.Errorf("eip get after apply:\n%s", out)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/api"
)

// TestApplyPreview: apply --dry-run writes nothing, diff shows the
// fields that change, --prune deletes what the file does not hold (and is
// refused without --force past its bounds), large documents print a
// summary, and export re-applies to no change.
func TestApplyPreview(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	changed := write("changed.yaml", "eips:\n  - {address: 198.51.100.8, description: used}\n  - {address: 198.51.100.40}\n")
	rev := s.Core.Revision()
	out := must(t, s, "apply", "--dry-run", "-f", changed)
	if !strings.Contains(out, "dry run at revision") || !strings.Contains(out, "1 created, 1 updated, 0 unchanged") || s.Core.Revision() != rev {
		t.Errorf("apply --dry-run (revision %d, was %d):\n%s", s.Core.Revision(), rev, out)
	}
	if _, err := azgate(t, s, "", "eip", "get", "198.51.100.40"); err == nil {
		t.Error("apply --dry-run created an EIP")
	}
	out = must(t, s, "diff", "-f", changed)
	for _, want := range []string{"+ EIP 198.51.100.40 (created)", "~ EIP 198.51.100.8 (changed)", `description: "spare" -> "used"`, "1 to create, 1 to change, 0 to delete, 0 unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff does not say %q:\n%s", want, out)
		}
	}

	// Prune: the EIPs the file does not hold go (7 and 9, bound, are
	// unbound first by nothing: an EIP may be deleted while bound).
	out = must(t, s, "diff", "--prune", "-f", changed)
	if !strings.Contains(out, "- EIP 198.51.100.7 (deleted)") || !strings.Contains(out, "- EIP 198.51.100.9 (deleted)") {
		t.Errorf("diff --prune:\n%s", out)
	}
	_, err := azgate(t, s, "", "apply", "--prune", "-f", write("none.yaml", "eips: []\n"))
	if err == nil || !strings.Contains(err.Error(), "prune would delete every EIP (3)") {
		t.Errorf("pruning every EIP: %v", err)
	}
	out = must(t, s, "apply", "--prune", "-f", changed)
	if !strings.Contains(out, "1 created, 1 updated, 0 unchanged, 2 deleted") {
		t.Errorf("apply --prune:\n%s", out)
	}

	// A large document prints a line per kind (--verbose: every object).
	var b strings.Builder
	b.WriteString("eips:\n")
	for i := 100; i < 160; i++ {
		fmt.Fprintf(&b, "  - {address: 198.51.100.%d}\n", i)
	}
	big := write("big.yaml", b.String())
	out = must(t, s, "apply", "-f", big)
	if n := strings.Count(out, "\n"); n != 4 || !strings.Contains(out, "eips  60       0        0          0") {
		t.Errorf("apply of 60 EIPs printed %d lines:\n%s", n, out)
	}
	if out := must(t, s, "apply", "--verbose", "-f", big); strings.Count(out, "unchanged") != 61 {
		t.Errorf("apply --verbose:\n%s", out)
	}

	// Export re-applies to no change.
	exported := write("export.yaml", must(t, s, "export"))
	out = must(t, s, "diff", "-f", exported)
	if !strings.Contains(out, "no changes:") {
		t.Errorf("diff of the export:\n%s", out)
	}
	rev = s.Core.Revision()
	var res api.ApplyResult
	if err := json.Unmarshal([]byte(must(t, s, "apply", "--json", "-f", exported)), &res); err != nil || res.Created+res.Updated+res.Deleted != 0 || res.Unchanged < 60 || s.Core.Revision() != rev {
		t.Errorf("apply of the export: %+v, %v", res, err)
	}
}

// TestForce: the controller's guards refuse without --force, saying
// what the change would do; --force does it.
func TestForce(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	_, err := azgate(t, s, "", "firewall", "add", "office", "--action", "allow", "--source", "192.0.2.0/24")
	if err == nil || !strings.Contains(err.Error(), "global allow rule: every EIP (3) and VIP (0)") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("global allow rule: %v", err)
	}
	if out := must(t, s, "firewall", "add", "office", "--action", "allow", "--source", "192.0.2.0/24", "--force"); !strings.Contains(out, "created") {
		t.Errorf("forced: %s", out)
	}
}

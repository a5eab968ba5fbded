//go:build !node

package main

import (
	"bytes"
	"encoding/json"
	"errors"
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

// TestListFilters: eip list filters on the controller and pages with
// --limit/--continue; delete-matching deletes a selection all or nothing.
func TestListFilters(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	var b strings.Builder
	b.WriteString("eips:\n")
	for i := 100; i < 250; i++ {
		fmt.Fprintf(&b, "  - {address: 198.51.100.%d}\n", i)
	}
	if _, err := azgate(t, s, b.String(), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	out := must(t, s, "eip", "list", "--host", "az2-h1")
	if !strings.Contains(out, "198.51.100.7 ") || strings.Count(out, "\n") != 2 {
		t.Errorf("eip list --host az2-h1:\n%s", out)
	}
	// Pages of 64 in address order: .7 .8 .9 .100 ... .160, then on.
	var seen []string
	cont := ""
	for page := 0; page < 10; page++ {
		args := []string{"eip", "list", "--json", "--limit", "64", "--prefix", "198.51.100.0/24"}
		if cont != "" {
			args = append(args, "--continue", cont)
		}
		var p struct {
			Items []struct {
				Address string `json:"address"`
			} `json:"items"`
			Continue string `json:"continue"`
		}
		if err := json.Unmarshal([]byte(must(t, s, args...)), &p); err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Items {
			seen = append(seen, e.Address)
		}
		if cont = p.Continue; cont == "" {
			break
		}
	}
	if len(seen) != 153 || seen[0] != "198.51.100.7" || seen[3] != "198.51.100.100" || seen[152] != "198.51.100.249" {
		t.Errorf("paged list: %d EIPs: %v ... ", len(seen), seen[:min(5, len(seen))])
	}
	if out := must(t, s, "eip", "list", "--prefix", "198.51.100.96/27", "--limit", "3"); !strings.Contains(out, "(more: --continue 198.51.100.102)") {
		t.Errorf("eip list --limit 3:\n%s", out)
	}
	if _, err := azgate(t, s, "", "az", "list", "--prefix", "198.51.100.0/24"); err == nil {
		t.Error("az list --prefix: no error")
	}

	// delete-matching: more than 100 needs --force; a /27 does not.
	_, err := azgate(t, s, "", "eip", "delete-matching", "--prefix", "198.51.100.128/25")
	if err == nil || !strings.Contains(err.Error(), "the selection deletes 122 EIPs, more than 100") {
		t.Errorf("deleting 122 EIPs without --force: %v", err)
	}
	out = must(t, s, "eip", "delete-matching", "--prefix", "198.51.100.96/27", "--dry-run")
	if !strings.Contains(out, "EIP 198.51.100.100 would be deleted") || strings.Contains(out, "100 deleted") || !strings.Contains(out, "nothing was written") {
		t.Errorf("delete-matching --prefix 198.51.100.96/27 --dry-run:\n%s", out)
	}
	out = must(t, s, "eip", "delete-matching", "--prefix", "198.51.100.96/27")
	if !strings.Contains(out, "EIP 198.51.100.100 deleted") || !strings.Contains(out, "28 deleted") {
		t.Errorf("delete-matching --prefix 198.51.100.96/27:\n%s", out)
	}
	out = must(t, s, "eip", "delete-matching", "--prefix", "198.51.100.128/25", "--force", "--dry-run")
	if !strings.Contains(out, "dry run") || !strings.Contains(out, "122 deleted") {
		t.Errorf("delete-matching --dry-run:\n%s", out)
	}
	if _, err := azgate(t, s, "", "eip", "delete-matching"); err == nil {
		t.Error("delete-matching without a selector: no error")
	}
}

// TestDryRunRefusals: diff and --dry-run print the plan and the guard
// refusals the change would hit, not the refusal alone.
func TestDryRunRefusals(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	f := filepath.Join(t.TempDir(), "doc.yaml")
	doc := "eips: [{address: 198.51.100.8, description: used}]\nfirewallrules: [{name: office, action: allow, sources: [192.0.2.0/24]}]\n"
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// A dry run the guards would refuse prints the plan and the
	// refusals, and fails (exit 1): a script gating on it must not take
	// the change for a good one.
	refused := func(args ...string) string {
		t.Helper()
		out, err := azgate(t, s, "", args...)
		var rd *refusedDryRun
		if !errors.As(err, &rd) || rd.n != 1 {
			t.Errorf("azgate %s: %v, want the dry run refused (1 refusal)\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	out := refused("diff", "-f", f)
	for _, want := range []string{"+ firewall rule office (created)", "~ EIP 198.51.100.8 (changed)", "refused without --force", "! firewall rule \"office\" is a global allow rule"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff does not say %q:\n%s", want, out)
		}
	}
	out = refused("firewall", "add", "office", "--action", "allow", "--source", "192.0.2.0/24", "--dry-run")
	if !strings.Contains(out, "would be created") || !strings.Contains(out, "global allow rule") {
		t.Errorf("firewall add --dry-run:\n%s", out)
	}
	refused("apply", "-f", f, "--dry-run")
	// Under --json: one JSON document (the answer, with its refusals) on
	// stdout, exit 1.
	var stdout, stderr bytes.Buffer
	code := execute(newRoot(), []string{"--api", s.URL(), "--token-file", s.TokenFile(), "--json", "diff", "-f", f}, &stdout, &stderr)
	var answer struct {
		DryRun   bool     `json:"dryRun"`
		Refusals []string `json:"refusals"`
	}
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&answer); err != nil || code != exitError || len(answer.Refusals) != 1 || dec.More() {
		t.Errorf("--json diff: exit %d, answer %+v (%v), more documents %v; stderr %q", code, answer, err, dec.More(), stderr.String())
	}
	globals.json = false
	// Without refusals a dry run succeeds.
	must(t, s, "firewall", "add", "office", "--action", "allow", "--source", "192.0.2.0/24", "--address", "198.51.100.8", "--dry-run")
	if _, err := azgate(t, s, "", "apply", "-f", f); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("the apply itself: %v, want the refusal", err)
	}
}

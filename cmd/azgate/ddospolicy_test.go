package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDDoSPolicyCLI: ddos policy set creates and then changes only the
// fields given; list and get show them; an invalid value is refused with
// the field named; the policies round trip through export, diff and
// apply.
func TestDDoSPolicyCLI(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	if out := must(t, s, "ddos", "policy", "set", "--pps", "4000", "--cooldown", "30s", "--address", "198.51.100.7:pps=100000,syn=-1"); !strings.Contains(out, "DDoS policy region created") {
		t.Errorf("set: %s", out)
	}
	if out := must(t, s, "ddos", "policy", "set", "region", "--bps", "-1"); !strings.Contains(out, "DDoS policy region updated") {
		t.Errorf("set again: %s", out)
	}
	must(t, s, "ddos", "policy", "set", "pop-a", "--syn", "700")
	out := must(t, s, "ddos", "policy", "get", "region")
	for _, want := range []string{"pps: 4000", "bps: -1", "cooldown: 30s", "address: 198.51.100.7", "pps: 100000", "synps: -1"} {
		if !strings.Contains(out, want) {
			t.Errorf("get region lacks %q:\n%s", want, out)
		}
	}
	out = must(t, s, "ddos", "policy", "list")
	if !strings.Contains(out, "pop-a") || !strings.Contains(out, "off") || !strings.Contains(out, "700") {
		t.Errorf("list:\n%s", out)
	}
	_, err := azgate(t, s, "", "ddos", "policy", "set", "pop-a", "--enter", "3")
	if err == nil || !strings.Contains(err.Error(), "enterRounds") || !strings.Contains(err.Error(), `only in the "region" policy`) {
		t.Errorf("enter on a set policy: %v", err)
	}
	_, err = azgate(t, s, "", "ddos", "policy", "set", "--pps", "-7")
	if err == nil || !strings.Contains(err.Error(), "thresholds.pps") {
		t.Errorf("pps -7: %v", err)
	}
	must(t, s, "ddos", "policy", "set", "--unset", "cooldown", "--remove-address", "198.51.100.7")
	if out := must(t, s, "ddos", "policy", "get", "region"); strings.Contains(out, "cooldown") || strings.Contains(out, "addresses") {
		t.Errorf("after --unset cooldown --remove-address:\n%s", out)
	}

	exp := must(t, s, "export")
	if !strings.Contains(exp, "ddospolicies:") || !strings.Contains(exp, "synps: 700") {
		t.Fatalf("export lacks the policies:\n%s", exp)
	}
	f := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(f, []byte(exp), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := must(t, s, "diff", "-f", f); !strings.Contains(out, "no changes:") {
		t.Errorf("diff of the export:\n%s", out)
	}
	must(t, s, "ddos", "policy", "delete", "pop-a")
	if out := must(t, s, "diff", "-f", f); !strings.Contains(out, "+ DDoS policy pop-a (created)") {
		t.Errorf("diff after deleting pop-a's policy:\n%s", out)
	}
	must(t, s, "apply", "-f", f)
	if out := must(t, s, "ddos", "policy", "get", "pop-a"); !strings.Contains(out, "synps: 700") {
		t.Errorf("pop-a after apply of the export:\n%s", out)
	}
}

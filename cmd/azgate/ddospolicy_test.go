//go:build !node

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/controller"
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

// TestListFollowsPages: the controller cuts a list at its cap; `list`
// without --limit follows the continue tokens to every object.
func TestListFollowsPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MaxListPage: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	must(t, s, "apply", "-f", "testdata/region.yaml")
	out := must(t, s, "host", "list")
	for _, h := range []string{"az1-h1", "az2-h1", "az2-h2"} {
		if !strings.Contains(out, h) {
			t.Errorf("host list (pages of 2) lacks %s:\n%s", h, out)
		}
	}
	if out := must(t, s, "host", "list", "--limit", "5"); !strings.Contains(out, "(more: --continue az2-h1)") {
		t.Errorf("host list --limit 5 (capped at 2):\n%s", out)
	}
}

//go:build !node

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFirewallCLI: add, list, get and delete rules, errors naming the
// flag or field, a destination a rule names kept from deletion, and
// rules through apply.
func TestFirewallCLI(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")

	out := must(t, s, "firewall", "add", "office-only", "--action", "allow", "--source", "203.0.113.0/25,192.0.2.7",
		"--address", "198.51.100.7", "--protocol", "tcp", "--port", "8000-8100", "--description", "the office")
	if !strings.Contains(out, "firewall rule office-only created") {
		t.Errorf("add: %s", out)
	}
	must(t, s, "firewall", "add", "no-ssh", "--action", "deny", "--source", "0.0.0.0/0", "--protocol", "tcp", "--port", "22")
	out = must(t, s, "firewall", "list")
	for _, want := range []string{"office-only  allow   203.0.113.0/25,192.0.2.7/32  198.51.100.7  tcp       8000-8100",
		"no-ssh       deny    0.0.0.0/0", "global"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	out = must(t, s, "firewall", "get", "office-only")
	if !strings.Contains(out, "203.0.113.0/25, 192.0.2.7/32") || !strings.Contains(out, "the office") {
		t.Errorf("get:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"firewall", "add", "x", "--action", "drop", "--source", "203.0.113.0/24"}, "action"},
		{[]string{"firewall", "add", "x", "--action", "deny", "--source", "203.0.113.1/24"}, "sources[0]: 203.0.113.1/24 has host bits set"},
		{[]string{"firewall", "add", "x", "--action", "deny", "--source", "nope"}, `--source "nope"`},
		{[]string{"firewall", "add", "x", "--action", "deny", "--source", "203.0.113.0/24", "--port", "22"}, "ports need protocol tcp or udp"},
		{[]string{"firewall", "add", "x", "--action", "deny", "--source", "203.0.113.0/24", "--address", "198.51.100.99"}, "neither an EIP nor a VIP"},
		{[]string{"firewall", "add", "x", "--action", "deny", "--source", "203.0.113.0/24", "--set", "pop-z"}, `edge set "pop-z" does not exist`},
		{[]string{"firewall", "add", "no-ssh", "--action", "deny", "--source", "203.0.113.0/24"}, "exists"},
		{[]string{"eip", "delete", "198.51.100.7"}, "destination of 1 firewall rule(s), the first office-only"},
	} {
		out, err := azgate(t, s, "", tc.args...)
		if err == nil || !strings.Contains(err.Error()+out, tc.want) {
			t.Errorf("azgate %s: err %v, want %q\n%s", strings.Join(tc.args, " "), err, tc.want, out)
		}
	}
	must(t, s, "firewall", "delete", "office-only")
	if out := must(t, s, "firewall", "list"); strings.Contains(out, "office-only") {
		t.Errorf("deleted rule listed:\n%s", out)
	}

	doc := filepath.Join(t.TempDir(), "fw.yaml")
	if err := os.WriteFile(doc, []byte("firewallrules:\n- name: set-deny\n  action: deny\n  set: pop-a\n  sources: [198.18.0.0/15]\n  protocol: udp\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, s, "apply", "-f", doc)
	if out := must(t, s, "firewall", "list"); !strings.Contains(out, "set-deny") || !strings.Contains(out, "set pop-a") {
		t.Errorf("applied rule:\n%s", out)
	}
	if out := must(t, s, "--json", "firewall", "get", "set-deny"); !strings.Contains(out, `"set": "pop-a"`) || strings.Contains(out, `"address"`) {
		t.Errorf("json:\n%s", out)
	}
}

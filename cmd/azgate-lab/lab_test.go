package main

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/lab"
)

// TestLabAzgateFlag: --azgate names the binary the lab's roles run; a
// missing one is refused by path, before anything is built, by every
// command that starts roles, and the help says where it is looked for.
func TestLabAzgateFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "azgate")
	state := t.TempDir()
	for _, args := range [][]string{
		{"lab", "up"},
		{"lab", "demo"},
		{"lab", "gslb", "up"},
		{"lab", "gslb", "demo"},
		{"bench", "lab"},
		{"bench", "control"},
		{"bench", "firewall-lab"},
		{"bench", "fleet", "--only", "failover"},
	} {
		root := newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetErr(new(bytes.Buffer))
		// A prefix and state of the test's own, should the check ever
		// let a lab start.
		argv := append([]string{"--azgate", missing}, args...)
		if args[0] == "lab" {
			argv = append(argv, "--prefix", "azgt-flag-", "--state-dir", state)
		}
		root.SetArgs(argv)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), missing+": no such file") || !strings.Contains(err.Error(), "--azgate PATH") {
			t.Errorf("%v: %v, want the missing azgate named", args, err)
		}
	}

	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"lab", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage:\n  azgate-lab lab [command]", "--azgate string", "azgate in azgate-lab's directory", "gslb", "up"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lab --help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLabStatusNamesStatusPage: lab status says how to fetch the
// controller's status page through the API's unix socket.
func TestLabStatusNamesStatusPage(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	printLabStatus(root, lab.View{API: "unix:///var/lib/azgate-lab/api.sock", TokenFile: "/var/lib/azgate-lab/controller/token"})
	want := `status page: curl -su lab:"$(cat /var/lib/azgate-lab/controller/token)" --unix-socket /var/lib/azgate-lab/api.sock http://lab/ui > status.html`
	if !strings.Contains(out.String(), want) {
		t.Errorf("lab status:\n%s\nlacks %s", out.String(), want)
	}
}

// TestLabStatusShowsRoutes: lab status prints rtr's routes to the prefix
// set's prefixes, IPv4 then IPv6, each with its edges, and the nodes'
// IPv6 addresses beside their IPv4 ones.
func TestLabStatusShowsRoutes(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	n := &lab.Node{Name: "edge-a1", Role: "edge", Addresses: map[string]string{"ext0": "198.18.100.1/31"},
		Addresses6: map[string]string{"ext0": "2001:db8:100::2/64"}}
	printLabStatus(root, lab.View{
		Routes: map[netip.Prefix][]string{
			netip.MustParsePrefix(lab.EIPPrefix6): {"edge-a1", "edge-b1"},
			netip.MustParsePrefix(lab.EIPPrefix):  {"edge-a1", "edge-a2", "edge-b1", "edge-b2"},
		},
		Nodes: []lab.NodeView{{Node: n}},
	})
	s := out.String()
	v4 := strings.Index(s, "rtr route 198.51.100.0/24 via edge-a1, edge-a2, edge-b1, edge-b2\n")
	v6 := strings.Index(s, "rtr route 2001:db8:e1::/48 via edge-a1, edge-b1\n")
	if v4 < 0 || v6 < v4 {
		t.Errorf("lab status lacks the IPv4 then the IPv6 route:\n%s", s)
	}
	if !strings.Contains(s, "ext0=198.18.100.1/31 ext0=2001:db8:100::2/64") {
		t.Errorf("lab status lacks edge-a1's IPv6 address:\n%s", s)
	}
}

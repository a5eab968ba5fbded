//go:build !node

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/model"
)

// TestCLISets: dedicated and quarantine sets, BGP settings, pull-out and
// return, quarantine and release, through the CLI against a controller.
func TestCLISets(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	must(t, s, "eip", "create", "198.51.100.30")

	must(t, s, "set", "create", "hot", "--role", "dedicated", "--edge", "name=edge-h1,underlay=198.18.0.31", "--asn", "64512", "--hold-time", "3")
	pw := filepath.Join(t.TempDir(), "md5")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, s, "set", "edge-bgp", "hot", "edge-h1", "--router-id", "198.18.0.31", "--next-hop", "198.18.101.1",
		"--peer", "address=198.18.101.0,asn=64501,password-file="+pw)
	out := must(t, s, "set", "get", "hot")
	for _, w := range []string{"role:", "dedicated", "AS 64512, hold 3 s, keepalive 1 s", "198.18.101.0/AS64501+md5"} {
		if !strings.Contains(out, w) {
			t.Errorf("set get hot: no %q in\n%s", w, out)
		}
	}
	if got := storedPassword(t, s, "hot"); got != "s3cret" {
		t.Errorf("the password read from the file is not stored: %q", got)
	}
	if out := must(t, s, "--json", "set", "get", "hot"); strings.Contains(out, "s3cret") || !strings.Contains(out, `"password": "(redacted)"`) {
		t.Errorf("set get shows the password:\n%s", out)
	}
	if out, err := azgate(t, s, "", "set", "create", "bad", "--role", "dedicated", "--prefix", "192.0.2.0/24"); err == nil || !strings.Contains(out+err.Error(), "has no prefixes") {
		t.Errorf("a dedicated set with a prefix: %v\n%s", err, out)
	}

	must(t, s, "eip", "pullout", "198.51.100.30", "--set", "hot")
	if out := must(t, s, "eip", "get", "198.51.100.30"); !strings.Contains(out, "pulled out into:") {
		t.Errorf("eip get after pullout:\n%s", out)
	}
	if out, err := azgate(t, s, "", "set", "delete", "hot"); err == nil || !strings.Contains(out+err.Error(), "return them first") {
		t.Errorf("deleting a set with a pulled-out EIP: %v\n%s", err, out)
	}
	must(t, s, "eip", "return", "198.51.100.30")

	if out, err := azgate(t, s, "", "quarantine", "add", "198.51.100.30"); err == nil || !strings.Contains(out+err.Error(), "no quarantine set") {
		t.Errorf("quarantine without a quarantine set: %v\n%s", err, out)
	}
	must(t, s, "set", "create", "quar", "--role", "quarantine", "--edge", "name=edge-q1,underlay=198.18.0.32")
	must(t, s, "quarantine", "add", "198.51.100.30", "--reason", "test flood")
	if out := must(t, s, "quarantine", "list"); !strings.Contains(out, "198.51.100.30") || !strings.Contains(out, "test flood") {
		t.Errorf("quarantine list:\n%s", out)
	}
	must(t, s, "quarantine", "release", "198.51.100.30")
	if out := must(t, s, "quarantine", "list"); !strings.Contains(out, "no quarantined") {
		t.Errorf("quarantine list after release:\n%s", out)
	}
}

// TestCLIEdgeBGPPasswordFile: the MD5 password file is held to the rules
// of --etcd-password-file: an empty file is refused (not a session
// without MD5), so is one that others may read or write, and only its
// first line counts.
func TestCLIEdgeBGPPasswordFile(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	must(t, s, "set", "create", "hot", "--role", "dedicated", "--edge", "name=edge-h1,underlay=198.18.0.31", "--asn", "64512")
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	edgeBGP := func(pw string) (string, error) {
		return azgate(t, s, "", "set", "edge-bgp", "hot", "edge-h1", "--router-id", "198.18.0.31", "--next-hop", "198.18.101.1",
			"--peer", "address=198.18.101.0,asn=64501,password-file="+pw)
	}
	for _, c := range []struct{ name, path, want string }{
		{"empty", file("empty", "", 0o600), "empty"},
		{"blank line", file("blank", "\n", 0o600), "empty"},
		{"world-readable", file("open", "s3cret\n", 0o644), "chmod 600"},
		{"a directory", dir, "not a regular file"},
	} {
		out, err := edgeBGP(c.path)
		if err == nil || !strings.Contains(out+err.Error(), c.want) {
			t.Errorf("%s password file: %v, want an error saying %q\n%s", c.name, err, c.want, out)
		}
		if strings.Contains(out, "s3cret") || err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s password file: the password is in the output: %v\n%s", c.name, err, out)
		}
	}
	if out := must(t, s, "--json", "set", "get", "hot"); strings.Contains(out, `"bgp": {`+"\n"+`          "routerID"`) || strings.Contains(out, "password") {
		t.Errorf("a refused password file changed the set:\n%s", out)
	}
	must(t, s, "set", "edge-bgp", "hot", "edge-h1", "--router-id", "198.18.0.31", "--next-hop", "198.18.101.1",
		"--peer", "address=198.18.101.0,asn=64501,password-file="+file("two", "s3cret\r\nsecond line\n", 0o400))
	if got := storedPassword(t, s, "hot"); got != "s3cret" {
		t.Errorf("the first line of the file is not the password: %q", got)
	}
}

// storedPassword is the password the controller stores for the first
// peer of the first edge of set (the API answers only "(redacted)").
func storedPassword(t *testing.T, s *controller.Server, set string) string {
	t.Helper()
	o, _, _, err := s.Core.Get(model.KindEdgeSet, set)
	if err != nil {
		t.Fatal(err)
	}
	es := o.(*model.EdgeSet)
	if len(es.Edges) == 0 || es.Edges[0].BGP == nil || len(es.Edges[0].BGP.Peers) == 0 {
		t.Fatalf("set %s has no BGP peer: %+v", set, es)
	}
	return es.Edges[0].BGP.Peers[0].Password
}

// TestCLISetsIPv6: a dual-stack prefix set through the CLI: its IPv6
// prefix shown where the IPv4 one is, an edge's IPv6 next hop required
// and shown, reserved IPv6 space refused with its RFC, an IPv6 EIP in the
// IPv6 prefix taken.
func TestCLISetsIPv6(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")
	if out, err := azgate(t, s, "", "set", "create", "ula", "--prefix", "fd00:1::/48"); err == nil || !strings.Contains(out+err.Error(), "RFC 4193") {
		t.Errorf("a ULA prefix: %v\n%s", err, out)
	}
	must(t, s, "set", "create", "pop-b", "--prefix", "203.0.113.0/24", "--prefix", "2001:db8:b::/48",
		"--edge", "name=edge-b1,underlay=198.18.0.41", "--asn", "64512")
	if out, err := azgate(t, s, "", "set", "edge-bgp", "pop-b", "edge-b1", "--router-id", "198.18.0.41", "--next-hop", "192.0.2.41",
		"--peer", "address=192.0.2.1,asn=64501"); err == nil || !strings.Contains(out+err.Error(), "edges[0].bgp.nextHop6") {
		t.Errorf("edge-bgp without --next-hop6 on a set with an IPv6 prefix: %v\n%s", err, out)
	}
	must(t, s, "set", "edge-bgp", "pop-b", "edge-b1", "--router-id", "198.18.0.41", "--next-hop", "192.0.2.41",
		"--next-hop6", "2001:db8:ff::41", "--peer", "address=192.0.2.1,asn=64501")
	out := must(t, s, "set", "get", "pop-b")
	for _, w := range []string{"203.0.113.0/24,2001:db8:b::/48", "192.0.2.41,2001:db8:ff::41"} {
		if !strings.Contains(out, w) {
			t.Errorf("set get pop-b: no %q in\n%s", w, out)
		}
	}
	if out := must(t, s, "set", "list"); !strings.Contains(out, "203.0.113.0/24,2001:db8:b::/48") {
		t.Errorf("set list:\n%s", out)
	}
	if out := must(t, s, "--json", "set", "get", "pop-b"); !strings.Contains(out, `"nextHop6": "2001:db8:ff::41"`) {
		t.Errorf("set get --json:\n%s", out)
	}
	must(t, s, "eip", "create", "2001:db8:b::7")
}

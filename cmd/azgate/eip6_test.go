//go:build !node

package main

import (
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/controller"
)

// ipv6Region is testdata/region.yaml with a set owning an IPv6 prefix and
// a dual-stack guest (az2-h2/g6), written through the CLI.
func ipv6Region(t *testing.T, s *controller.Server) {
	t.Helper()
	must(t, s, "apply", "-f", "testdata/region.yaml")
	must(t, s, "set", "create", "pop-b", "--prefix", "203.0.113.0/24", "--prefix", "2001:db8:b::/48", "--edge", "name=edge-b1,underlay=198.18.0.41")
	must(t, s, "host", "guest", "add", "az2-h2", "--name", "g6", "--address", "198.19.2.6", "--address6", "2001:db8:2::6", "--vsid", "5002")
}

// TestCLIIPv6EIPRefused: what the CLI refuses of IPv6 and why: a guest's
// IPv6 address is taken and shown, a malformed or misplaced IPv6 EIP gets
// its own reason; VIPs and bandwidth packages refuse IPv6 with theirs.
func TestCLIIPv6EIPRefused(t *testing.T) {
	s := startController(t)
	ipv6Region(t, s)
	out := must(t, s, "host", "get", "az2-h2")
	for _, w := range []string{"ADDRESS6", "g6", "2001:db8:2::6"} {
		if !strings.Contains(out, w) {
			t.Errorf("host get az2-h2: no %q in\n%s", w, out)
		}
	}
	must(t, s, "host", "create", "az1-h9", "--az", "az1", "--underlay", "198.18.1.9",
		"--guest", "name=g1,address=198.19.9.1,address6=2001:db8:9::1,vsid=5009", "--guest", "name=g2,address=198.19.9.2,vsid=5009")
	if out := must(t, s, "--json", "host", "get", "az1-h9"); !strings.Contains(out, `"address6": "2001:db8:9::1"`) || strings.Count(out, "address6") != 1 {
		t.Errorf("host create --guest address6=:\n%s", out)
	}
	if out, err := azgate(t, s, "", "host", "create", "az1-h8", "--az", "az1", "--underlay", "198.18.1.8",
		"--guest", "name=g1,address=198.19.8.1,address6=fc00::1,vsid=5008"); err == nil || !strings.Contains(out+err.Error(), "guests[0].address6: fc00::1 is neither a unique local address (fd00::/8, RFC 4193) nor a global unicast one") {
		t.Errorf("a guest's fc00::/8 address: %v\n%s", err, out)
	}
	if out := must(t, s, "host", "get", "az1-h1"); strings.Contains(out, "ADDRESS6") {
		t.Errorf("host get of an IPv4-only host shows ADDRESS6:\n%s", out)
	}
	if out := must(t, s, "--json", "host", "get", "az1-h1"); strings.Contains(out, "address6") {
		t.Errorf("an IPv4-only guest has an address6 key:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"host", "guest", "add", "az2-h2", "--name", "g7", "--address", "198.19.2.7", "--address6", "fe80::7", "--vsid", "5002"},
			"address6: fe80::7 is not a global unicast address"},
		{[]string{"host", "guest", "add", "az2-h2", "--name", "g7", "--address", "198.19.2.7", "--address6", "2001:db8:2::6", "--vsid", "5002"},
			"2001:db8:2::6 is used by another guest on this host"},
		{[]string{"host", "guest", "add", "az2-h2", "--name", "g7", "--address", "198.19.2.7", "--address6", "2001:db8:2::zz", "--vsid", "5002"},
			`--address6 "2001:db8:2::zz" is not an IP address`},
		{[]string{"eip", "create", "[2001:db8:b::7]"}, "write an IPv6 address without brackets (2001:db8:b::7)"},
		{[]string{"eip", "create", "fe80::7"}, "fe80::7 is not a global unicast address"},
		{[]string{"eip", "create", "::ffff:203.0.113.7"}, "IPv4-mapped"},
		{[]string{"eip", "create", "2001:db8:c::7"}, "2001:db8:c::7 is not inside a prefix of any edge set"},
		// A key in the path is read in its canonical spelling.
		{[]string{"eip", "get", "2001:DB8:b:0::7"}, `EIP "2001:db8:b::7" not found`},
		{[]string{"service", "create", "web6", "--vip", "2001:db8:b::80", "--mode", "nat", "--listener", "tcp:80=p", "--backend", "p=198.19.9.1:80"},
			"pools[0].backends[0].address: 198.19.9.1 is IPv4 and the VIP 2001:db8:b::80 IPv6: a nat backend's address is of its VIP's family"},
		{[]string{"bandwidth", "create", "shop6", "--capacity", "100M", "--eip", "2001:db8:b::7,max=10M"},
			"2001:db8:b::7 is not an EIP (create it first)"},
	} {
		out, err := azgate(t, s, "", tc.args...)
		if err == nil || !strings.Contains(out+err.Error(), tc.want) {
			t.Errorf("azgate %s: %v\n%s\nwant %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	if out := must(t, s, "eip", "list"); strings.Contains(out, "2001:db8") {
		t.Errorf("a refused IPv6 EIP is listed:\n%s", out)
	}
}

// TestCLIIPv6EIP: an IPv6 EIP's life through the CLI against a
// controller: created (no brackets), read in any spelling, bound to a
// dual-stack guest, moved to another host's guest (the drift), beside
// the guest's IPv4 EIP, listed and filtered, unbound and deleted; a
// guest without an IPv6 address and a second IPv6 EIP on one guest are
// refused with their reasons.
func TestCLIIPv6EIP(t *testing.T) {
	s := startController(t)
	ipv6Region(t, s)
	must(t, s, "host", "guest", "add", "az2-h1", "--name", "g7", "--address", "198.19.2.7", "--address6", "2001:db8:2::7", "--vsid", "5002")
	if out := must(t, s, "eip", "create", "2001:db8:b::7", "--description", "v6 web"); !strings.Contains(out, "EIP 2001:db8:b::7 created") {
		t.Errorf("eip create: %s", out)
	}
	out := must(t, s, "eip", "get", "2001:DB8:b:0::7")
	for _, w := range []string{"2001:db8:b::7", "v6 web", "(unbound)"} {
		if !strings.Contains(out, w) {
			t.Errorf("eip get: no %q in\n%s", w, out)
		}
	}
	if out := must(t, s, "eip", "bind", "2001:db8:b::7", "--host", "az2-h2", "--guest", "g6"); !strings.Contains(out, "bound to az2-h2/g6") {
		t.Errorf("eip bind: %s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"eip", "bind", "2001:db8:b::7", "--host", "az1-h1", "--guest", "g1"},
			"binding.guest: guest az1-h1/g1 has no IPv6 address (address6) to translate the IPv6 EIP to"},
		{[]string{"eip", "create", "2001:db8:b::8"}, ""},
		{[]string{"eip", "bind", "2001:db8:b::8", "--host", "az2-h2", "--guest", "g6"},
			"guest az2-h2/g6 is already bound to EIP 2001:db8:b::7 (a guest holds one EIP of each family, IPv4 and IPv6)"},
		{[]string{"host", "guest", "remove", "az2-h2", "g6"}, "guest az2-h2/g6 is bound to EIP 2001:db8:b::7: unbind it first"},
	} {
		out, err := azgate(t, s, "", tc.args...)
		if tc.want == "" {
			if err != nil {
				t.Errorf("azgate %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(out+err.Error(), tc.want) {
			t.Errorf("azgate %s: %v\n%s\nwant %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}

	// The drift: to a guest of another host; the guest there holds an
	// IPv4 EIP beside it.
	must(t, s, "eip", "create", "203.0.113.7")
	must(t, s, "eip", "bind", "203.0.113.7", "--host", "az2-h1", "--guest", "g7")
	if out := must(t, s, "eip", "bind", "2001:DB8:B::7", "--host", "az2-h1", "--guest", "g7"); !strings.Contains(out, "bound to az2-h1/g7") {
		t.Errorf("eip bind (move): %s", out)
	}
	if out := must(t, s, "--json", "eip", "get", "2001:db8:b::7"); !strings.Contains(out, `"host": "az2-h1"`) || !strings.Contains(out, `"guest": "g7"`) {
		t.Errorf("after the move:\n%s", out)
	}
	out = must(t, s, "eip", "list")
	if !strings.Contains(out, "2001:db8:b::7") || !strings.Contains(out, "2001:db8:b::8") || strings.Index(out, "203.0.113.7") > strings.Index(out, "2001:db8:b::7") {
		t.Errorf("eip list (IPv4 first, then IPv6):\n%s", out)
	}
	out = must(t, s, "eip", "list", "--prefix", "2001:db8:b::/64", "--host", "az2-h1")
	if !strings.Contains(out, "2001:db8:b::7") || strings.Contains(out, "2001:db8:b::8") || strings.Contains(out, "203.0.113.7") {
		t.Errorf("eip list --prefix 2001:db8:b::/64 --host az2-h1:\n%s", out)
	}
	if out := must(t, s, "eip", "list", "--set", "pop-b", "--host", "az2-h1"); !strings.Contains(out, "2001:db8:b::7") || !strings.Contains(out, "203.0.113.7") {
		t.Errorf("eip list --set pop-b --host az2-h1:\n%s", out)
	}
	if out := must(t, s, "eip", "list", "--limit", "1", "--continue", "203.0.113.7"); !strings.Contains(out, "2001:db8:b::7") || strings.Contains(out, "2001:db8:b::8") {
		t.Errorf("eip list --limit 1 --continue 203.0.113.7:\n%s", out)
	}

	// A bandwidth package holds it beside an IPv4 EIP (issue 21); while
	// listed it is not deleted.
	if out := must(t, s, "bandwidth", "create", "shop6", "--capacity", "100M", "--eip", "2001:db8:b::7,max=10M", "--eip", "203.0.113.7"); !strings.Contains(out, "shop6") {
		t.Errorf("bandwidth create with an IPv6 EIP: %s", out)
	}
	if out := must(t, s, "--json", "bandwidth", "get", "shop6"); !strings.Contains(out, "2001:db8:b::7") {
		t.Errorf("bandwidth get shop6:\n%s", out)
	}
	if out, err := azgate(t, s, "", "eip", "delete", "2001:db8:b::7"); err == nil || !strings.Contains(out+err.Error(), "belongs to bandwidth package shop6") {
		t.Errorf("deleting an IPv6 EIP a package lists: %v\n%s", err, out)
	}
	must(t, s, "bandwidth", "delete", "shop6")

	// Its guest keeps its address6 while it is bound.
	if out, err := azgate(t, s, "", "host", "guest", "remove", "az2-h1", "g7"); err == nil || !strings.Contains(out+err.Error(), "unbind it first") {
		t.Errorf("removing a guest bound to an IPv6 EIP: %v\n%s", err, out)
	}
	if out := must(t, s, "eip", "unbind", "2001:db8:b::7"); !strings.Contains(out, "unbound") {
		t.Errorf("eip unbind: %s", out)
	}
	if out := must(t, s, "eip", "delete", "2001:DB8:B::7"); !strings.Contains(out, "deleted") {
		t.Errorf("eip delete: %s", out)
	}
	if out, err := azgate(t, s, "", "eip", "get", "2001:db8:b::7"); err == nil || !strings.Contains(out+err.Error(), "not found") {
		t.Errorf("a deleted IPv6 EIP: %v\n%s", err, out)
	}
}

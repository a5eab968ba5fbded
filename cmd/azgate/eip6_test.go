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

// TestCLIIPv6EIPRefused: what the CLI says of IPv6 EIPs while the model
// refuses them: a guest's IPv6 address is taken and shown, a malformed or
// misplaced IPv6 EIP gets its own reason, a well-formed one the refusal;
// VIPs and bandwidth packages refuse IPv6 with theirs.
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
		{[]string{"eip", "create", "2001:db8:b::7"}, "2001:db8:b::7: IPv6 EIPs are not supported yet (the edge has no IPv6 data path)"},
		// A key in the path is read in its canonical spelling.
		{[]string{"eip", "get", "2001:DB8:b:0::7"}, `EIP "2001:db8:b::7" not found`},
		{[]string{"service", "create", "web6", "--vip", "2001:db8:b::80", "--mode", "nat", "--listener", "tcp:80=p", "--backend", "p=198.19.9.1:80"},
			"IPv6 VIPs are not supported yet"},
		{[]string{"bandwidth", "create", "shop6", "--capacity", "100M", "--eip", "2001:db8:b::7,max=10M"},
			"bandwidth packages cannot hold IPv6 EIPs yet"},
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

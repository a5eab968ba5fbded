package main

import (
	"strings"
	"testing"
)

// TestCLIUl6: the IPv6 underlay on the command line (issue 21): an edge's
// underlay6 (--edge ...,underlay6=), a host whose underlay is IPv6, and
// the model's rule between them, named in the errors.
func TestCLIUl6(t *testing.T) {
	s := startController(t)
	must(t, s, "az", "create", "az1")
	must(t, s, "set", "create", "p", "--prefix", "198.51.100.0/24", "--edge", "name=edge-a1,underlay=198.18.0.1")
	if out, err := azgate(t, s, "", "host", "create", "h6", "--az", "az1", "--underlay", "2001:db8:f0::21"); err == nil ||
		!strings.Contains(out+err.Error(), "every edge needs an underlay6 to reach the host, and edge p/edge-a1 has none") {
		t.Errorf("an IPv6 host with an edge without underlay6: %v\n%s", err, out)
	}
	if out, err := azgate(t, s, "", "set", "create", "q", "--prefix", "203.0.113.0/24", "--edge", "name=edge-b1,underlay=2001:db8:ff::2"); err == nil ||
		!strings.Contains(out+err.Error(), "its IPv6 underlay address is underlay6") {
		t.Errorf("an edge's IPv6 underlay: %v\n%s", err, out)
	}
	must(t, s, "set", "delete", "p")
	must(t, s, "set", "create", "p", "--prefix", "198.51.100.0/24", "--edge", "name=edge-a1,underlay=198.18.0.1,underlay6=2001:db8:ff::1")
	if out := must(t, s, "set", "get", "p"); !strings.Contains(out, "198.18.0.1,2001:db8:ff::1") {
		t.Errorf("set get: no underlay6 in\n%s", out)
	}
	if out := must(t, s, "--json", "set", "get", "p"); !strings.Contains(out, `"underlay6": "2001:db8:ff::1"`) {
		t.Errorf("set get --json: no underlay6 in\n%s", out)
	}
	must(t, s, "host", "create", "h6", "--az", "az1", "--underlay", "2001:db8:f0::21")
	if out := must(t, s, "--json", "host", "get", "h6"); !strings.Contains(out, `"underlay": "2001:db8:f0::21"`) {
		t.Errorf("host get --json:\n%s", out)
	}
	if out, err := azgate(t, s, "", "set", "create", "q", "--prefix", "203.0.113.0/24", "--edge", "name=edge-b1,underlay=198.18.0.2"); err == nil ||
		!strings.Contains(out+err.Error(), "edges[0].underlay6: required: host h6 has an IPv6 underlay address") {
		t.Errorf("a set without underlay6 beside an IPv6 host: %v\n%s", err, out)
	}
	if out, err := azgate(t, s, "", "host", "create", "h7", "--az", "az1", "--underlay", "fe80::7"); err == nil ||
		!strings.Contains(out+err.Error(), "not a global unicast") {
		t.Errorf("a link-local host underlay: %v\n%s", err, out)
	}
}

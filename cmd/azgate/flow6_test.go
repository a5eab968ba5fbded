package main

import (
	"net/netip"
	"strings"
	"testing"
)

// parseFlow takes an IPv6 VIP's flow in brackets beside IPv4 ones, and
// refuses mixed families, mapped and zoned addresses.
func TestParseFlowIPv6(t *testing.T) {
	tu, proto, err := parseFlow("tcp:[2001:db8:c::10]:40000-[2001:db8:a::80]:443")
	if err != nil || proto != "tcp" || tu.Src != netip.MustParseAddr("2001:db8:c::10") || tu.Dst != netip.MustParseAddr("2001:db8:a::80") ||
		tu.SrcPort != 40000 || tu.DstPort != 443 || tu.Proto != 6 {
		t.Fatalf("parseFlow = %+v %q %v", tu, proto, err)
	}
	if _, _, err := parseFlow("udp:203.0.113.10:5353-198.51.100.20:53"); err != nil {
		t.Fatalf("IPv4 flow: %v", err)
	}
	for in, want := range map[string]string{
		"tcp:203.0.113.10:1-[2001:db8:a::80]:443":      "different families",
		"tcp:[::ffff:203.0.113.10]:1-198.51.100.20:80": "is not IPv4:PORT or [IPv6]:PORT",
		"tcp:[fe80::1%eth0]:1-[2001:db8:a::80]:443":    "is not IPv4:PORT or [IPv6]:PORT",
		"tcp:2001:db8:c::10:1-[2001:db8:a::80]:443":    "is not IPv4:PORT or [IPv6]:PORT",
	} {
		if _, _, err := parseFlow(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlow(%q) = %v, want %q", in, err, want)
		}
	}
}

// TestCLIIPv6VIP: an encap service with an IPv6 VIP is created through
// the CLI (its backend a dual-stack guest), read back, and looked up with
// an IPv6 flow (the flow hash is flowhash.Hash6); a backend without an
// address6 is refused naming it; mode nat is refused with its reason.
func TestCLIIPv6VIP(t *testing.T) {
	s := startController(t)
	ipv6Region(t, s)
	out, err := azgate(t, s, "", "service", "create", "web6", "--vip", "2001:db8:b::80", "--mode", "encap",
		"--listener", "tcp:443=web", "--backend", "web=az2-h2/g6", "--backend", "web=az1-h1/g1")
	if err == nil || !strings.Contains(out+err.Error(), "pools[0].backends[1].guest: guest az1-h1/g1 has no IPv6 address (address6)") {
		t.Errorf("a backend without address6: %v\n%s", err, out)
	}
	must(t, s, "service", "create", "web6", "--vip", "2001:db8:b::80", "--mode", "encap", "--listener", "tcp:443=web", "--backend", "web=az2-h2/g6")
	if out := must(t, s, "service", "get", "web6"); !strings.Contains(out, "2001:db8:b::80") {
		t.Errorf("service get web6:\n%s", out)
	}
	out = must(t, s, "service", "lookup", "web6", "--flow", "tcp:[2001:db8:c::10]:40000-[2001:db8:b::80]:443")
	if !strings.Contains(out, "tcp:443 -> pool web") || !strings.Contains(out, "az2-h2/g6") {
		t.Errorf("lookup of an IPv6 flow:\n%s", out)
	}
}

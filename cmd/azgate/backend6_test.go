package main

import (
	"net/netip"
	"strconv"
	"testing"
)

// TestParseBackend6: an IPv6 nat backend on the command line, bare or in
// brackets before its port (as model.Backend.Key writes it); the IPv4
// and encap forms as before; a bracket without its end refused.
func TestParseBackend6(t *testing.T) {
	for _, tc := range []struct {
		in, addr string
		port     uint16
		weight   uint32
		err      bool
	}{
		{in: "[2001:db8:be::1]:8080", addr: "2001:db8:be::1", port: 8080},
		{in: "[2001:db8:be::1]:8080@3", addr: "2001:db8:be::1", port: 8080, weight: 3},
		{in: "[2001:db8:be::1]", addr: "2001:db8:be::1"},
		{in: "2001:db8:be::1", addr: "2001:db8:be::1"},
		{in: "198.19.1.1:8080", addr: "198.19.1.1", port: 8080},
		{in: "[2001:db8:be::1:8080", err: true},
		{in: "[2001:db8:be::1]8080", err: true},
	} {
		b, err := parseBackend(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%q: parsed as %+v, want an error", tc.in, b)
			}
			continue
		}
		if err != nil || b.Address != netip.MustParseAddr(tc.addr) || b.Port != tc.port ||
			(tc.weight != 0 && (b.Weight == nil || *b.Weight != tc.weight)) {
			t.Errorf("%q: %+v %v, want %s port %d weight %d", tc.in, b, err, tc.addr, tc.port, tc.weight)
		}
		if b.Address.Is6() && tc.port != 0 && b.Key() != "["+tc.addr+"]:"+strconv.Itoa(int(tc.port)) {
			t.Errorf("%q: key %q, want the address in brackets", tc.in, b.Key())
		}
	}
	b, err := parseBackend("az1-h1/g1:8443")
	if err != nil || b.Host != "az1-h1" || b.Guest != "g1" || b.Port != 8443 {
		t.Errorf("encap backend: %+v %v", b, err)
	}
}

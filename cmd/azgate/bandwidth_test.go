//go:build !node

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBandwidthCLI: create, list, get, add-eip, set-eip, remove-eip, set
// and delete packages against a real controller; human units parsed
// strictly; errors naming the flag or field; an EIP in one package only;
// an EIP a package lists kept from deletion; packages through apply.
func TestBandwidthCLI(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/region.yaml")

	out := must(t, s, "bandwidth", "create", "shop", "--capacity", "100M", "--description", "the shop",
		"--eip", "198.51.100.7,min=20M,weight=2", "--eip", "198.51.100.8,max=50Mbit")
	if !strings.Contains(out, "bandwidth package shop created") {
		t.Errorf("create: %s", out)
	}
	out = must(t, s, "bandwidth", "list")
	if !strings.Contains(out, "shop  100Mbit/s  20ms   2     20Mbit/s    the shop") {
		t.Errorf("list:\n%s", out)
	}
	if out := must(t, s, "bandwidth", "add-eip", "shop", "198.51.100.9", "--min", "1.5M", "--max", "1G"); !strings.Contains(out, "bandwidth package shop (EIP 198.51.100.9 added) updated (revision") {
		t.Errorf("add-eip: %s", out)
	}
	must(t, s, "bandwidth", "set-eip", "shop", "198.51.100.8", "--weight", "5", "--max", "0")
	out = must(t, s, "bandwidth", "get", "shop")
	for _, want := range []string{"100Mbit/s (100000000 bit/s)", "21.5Mbit/s of the capacity",
		"198.51.100.7  20Mbit/s   -        2", "198.51.100.8  -          -        5", "198.51.100.9  1.5Mbit/s  1Gbit/s  1"} {
		if !strings.Contains(out, want) {
			t.Errorf("get lacks %q:\n%s", want, out)
		}
	}
	// JSON: integers in bit/s, defaults stored.
	out = must(t, s, "--json", "bandwidth", "get", "shop")
	for _, want := range []string{`"capacity": 100000000`, `"burst": "20ms"`, `"min": 1500000`, `"max": 1000000000`, `"weight": 5`} {
		if !strings.Contains(out, want) {
			t.Errorf("json lacks %q:\n%s", want, out)
		}
	}
	must(t, s, "bandwidth", "create", "other", "--capacity", "1G", "--burst", "100ms")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bandwidth", "create", "x", "--capacity", "100MB"}, "--capacity: rate \"100MB\": bytes?"},
		{[]string{"bandwidth", "create", "x", "--capacity", "1.5"}, "not a whole number"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100Mi"}, "binary prefixes"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--burst", "1h"}, "burst: 1h0m0s: want 1ms-10s"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--burst", "soon"}, `--burst "soon"`},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "198.51.100.7,min=60M", "--eip", "198.51.100.20,min=50M"},
			"eips: the EIPs' guaranteed minimums add up to 110Mbit/s (110000000 bit/s), more than the capacity 100Mbit/s (100000000 bit/s)"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "198.51.100.7,speed=5"}, `unknown key "speed"`},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "web,min=5M"}, `"web" is not an IP address`},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "198.51.100.7,weight=0"}, "eips[0].weight: 0: want 1-10000"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "198.51.100.7,min=5M,max=1M"}, "eips[0].min: 5Mbit/s is above the EIP's max 1Mbit/s"},
		{[]string{"bandwidth", "create", "x", "--capacity", "100M", "--eip", "198.51.100.99"}, "eips[0].address: 198.51.100.99 is not an EIP"},
		{[]string{"bandwidth", "create", "shop", "--capacity", "100M"}, "already exists"},
		{[]string{"bandwidth", "add-eip", "other", "198.51.100.7"}, "EIP 198.51.100.7 already belongs to bandwidth package shop"},
		{[]string{"bandwidth", "add-eip", "shop", "198.51.100.7"}, "already has EIP 198.51.100.7"},
		{[]string{"bandwidth", "add-eip", "nope", "198.51.100.7"}, `bandwidth package "nope" not found`},
		{[]string{"bandwidth", "set-eip", "shop", "198.51.100.7", "--min", "99M"}, "add up to 100.5Mbit/s"},
		{[]string{"bandwidth", "set-eip", "other", "198.51.100.7", "--min", "1M"}, "has no EIP 198.51.100.7"},
		{[]string{"bandwidth", "set-eip", "shop", "198.51.100.7"}, "give at least one of"},
		{[]string{"bandwidth", "set", "shop", "--capacity", "20M"}, "more than the capacity 20Mbit/s"},
		{[]string{"bandwidth", "set", "shop", "--capacity", "0"}, "capacity: required"},
		{[]string{"bandwidth", "remove-eip", "other", "198.51.100.7"}, "has no EIP"},
		{[]string{"eip", "delete", "198.51.100.7"}, "belongs to bandwidth package shop: remove it from the package first"},
	} {
		out, err := azgate(t, s, "", tc.args...)
		if err == nil || !strings.Contains(err.Error()+out, tc.want) {
			t.Errorf("azgate %s: err %v, want %q\n%s", strings.Join(tc.args, " "), err, tc.want, out)
		}
	}

	must(t, s, "bandwidth", "set", "shop", "--capacity", "1G", "--burst", "50ms")
	must(t, s, "bandwidth", "remove-eip", "shop", "198.51.100.7")
	must(t, s, "bandwidth", "add-eip", "other", "198.51.100.7", "--weight", "3")
	out = must(t, s, "bandwidth", "list")
	if !strings.Contains(out, "shop   1Gbit/s   50ms   2     1.5Mbit/s") || !strings.Contains(out, "other  1Gbit/s   100ms  1     0bit/s") {
		t.Errorf("list after changes:\n%s", out)
	}
	must(t, s, "bandwidth", "delete", "other")
	must(t, s, "eip", "delete", "198.51.100.7")

	doc := filepath.Join(t.TempDir(), "bw.yaml")
	if err := os.WriteFile(doc, []byte(`eips:
  - address: 198.51.100.30
bandwidthpackages:
  - name: lab
    capacity: 100000000
    eips:
      - {address: 198.51.100.30, min: 10000000, weight: 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, s, "apply", "-f", doc)
	if out := must(t, s, "bandwidth", "get", "lab"); !strings.Contains(out, "198.51.100.30  10Mbit/s") {
		t.Errorf("applied package:\n%s", out)
	}
	// The same document again: unchanged (the defaults were stored).
	if out := must(t, s, "apply", "-f", doc); !strings.Contains(out, "0 created, 0 updated, 2 unchanged") {
		t.Errorf("second apply:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bandwidthpackages:\n- name: bad\n  capacity: 100M\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := azgate(t, s, "", "apply", "-f", bad); err == nil || !strings.Contains(err.Error()+out, "bandwidthpackages[0].capacity") {
		t.Errorf("apply with capacity 100M (a string): %v\n%s", err, out)
	}
	if err := os.WriteFile(bad, []byte("bandwidthpackages:\n- name: bad\n  capacity: 100000000\n  eips: [{address: 198.51.100.77}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := azgate(t, s, "", "apply", "-f", bad); err == nil || !strings.Contains(err.Error()+out, "bandwidthpackages[0].eips[0].address: 198.51.100.77 is not an EIP") {
		t.Errorf("apply with a missing EIP: %v\n%s", err, out)
	}
}

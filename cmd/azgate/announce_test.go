//go:build !node

package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/probe"
)

// announceArgs is a valid command line with some flags replaced ("":
// left out) or added.
func announceArgs(repl map[string]string) []string {
	flags := [][2]string{
		{"--vip", "192.0.2.200"}, {"--asn", "64700"}, {"--peer", "198.18.250.1:64512"},
		{"--next-hop", "198.18.250.11"}, {"--check", "http://127.0.0.1:8080/healthz"}, {"--check", "tcp://127.0.0.1:6379"},
	}
	repl2 := map[string]string{}
	for k, v := range repl {
		repl2[k] = v
	}
	var out []string
	for _, f := range flags {
		if v, ok := repl2[f[0]]; ok {
			if f[0] == "--check" {
				continue // replaced as a whole below
			}
			delete(repl2, f[0])
			if v == "" {
				continue
			}
			f[1] = v
		}
		out = append(out, f[0], f[1])
	}
	for k, v := range repl2 {
		if v != "" {
			out = append(out, k, v)
		}
	}
	return out
}

func parseAnnounce(t *testing.T, args []string) (*announceFlags, error) {
	t.Helper()
	var f announceFlags
	c := &cobra.Command{Use: "announce"}
	f.add(c)
	if err := c.Flags().Parse(args); err != nil {
		return nil, err
	}
	return &f, nil
}

func TestAnnounceFlags(t *testing.T) {
	f, err := parseAnnounce(t, announceArgs(nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.VIPs) != 1 || cfg.VIPs[0] != netip.MustParsePrefix("192.0.2.200/32") || cfg.BGP.NextHop6.IsValid() || cfg.BGP.ASN != 64700 || cfg.BGP.RouterID != netip.MustParseAddr("198.18.250.11") ||
		cfg.BGP.HoldTime != 9*time.Second || len(cfg.BGP.Peers) != 1 || cfg.BGP.Peers[0].ASN != 64512 || cfg.BGP.Peers[0].Port != 0 {
		t.Fatalf("config: %+v", cfg)
	}
	want := []probe.Target{
		{Key: "http://127.0.0.1:8080/healthz", Addr: netip.MustParseAddr("127.0.0.1"),
			Spec: probe.Spec{Kind: probe.HTTP, Port: 8080, Path: "/healthz", Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}},
		{Key: "tcp://127.0.0.1:6379", Addr: netip.MustParseAddr("127.0.0.1"),
			Spec: probe.Spec{Kind: probe.TCP, Port: 6379, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 2}},
	}
	if len(cfg.Checks) != 2 || cfg.Checks[0] != want[0] || cfg.Checks[1] != want[1] {
		t.Fatalf("checks: %+v", cfg.Checks)
	}

	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ = parseAnnounce(t, announceArgs(map[string]string{"--peer": "198.18.250.1,port=1179,password-file=" + pw,
		"--router-id": "198.18.250.99", "--hold": "3s", "--local-address": "198.18.250.11"}))
	cfg, err = f.config()
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.BGP.Peers[0]; p.ASN != 64700 || p.Port != 1179 || p.Password != "s3cret" || cfg.BGP.RouterID != netip.MustParseAddr("198.18.250.99") ||
		cfg.BGP.HoldTime != 3*time.Second || cfg.BGP.LocalAddress != netip.MustParseAddr("198.18.250.11") {
		t.Fatalf("config: %+v", cfg.BGP)
	}

	// A dual-stack pair: one v4 and one v6 VIP, both next hops, an
	// IPv4 and an IPv6 peer (in brackets, with and without an ASN).
	args := append(announceArgs(map[string]string{"--peer": "[2001:db8:250::1]:64513"}),
		"--vip", "2001:db8::53/128", "--next-hop6", "2001:db8:250::11", "--peer", "198.18.250.1", "--peer", "[2001:db8:250::2]",
		"--local-address6", "2001:db8:250::11")
	f, err = parseAnnounce(t, args)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = f.config(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.VIPs) != 2 || cfg.VIPs[0] != netip.MustParsePrefix("192.0.2.200/32") || cfg.VIPs[1] != netip.MustParsePrefix("2001:db8::53/128") ||
		cfg.BGP.NextHop != netip.MustParseAddr("198.18.250.11") || cfg.BGP.NextHop6 != netip.MustParseAddr("2001:db8:250::11") ||
		cfg.BGP.LocalAddress6 != netip.MustParseAddr("2001:db8:250::11") || len(cfg.BGP.Peers) != 3 ||
		cfg.BGP.Peers[0].Address != netip.MustParseAddr("2001:db8:250::1") || cfg.BGP.Peers[0].ASN != 64513 ||
		cfg.BGP.Peers[1].Address != netip.MustParseAddr("198.18.250.1") || cfg.BGP.Peers[1].ASN != 64700 ||
		cfg.BGP.Peers[2].Address != netip.MustParseAddr("2001:db8:250::2") || cfg.BGP.Peers[2].ASN != 64700 {
		t.Fatalf("dual-stack config: %+v", cfg)
	}
	f, _ = parseAnnounce(t, append(announceArgs(nil), "--vip", "192.0.2.200/32"))
	if _, err := f.config(); err == nil || !strings.Contains(err.Error(), `--vip "192.0.2.200/32": given twice`) {
		t.Errorf("a VIP given twice: %v", err)
	}
	// IPv6 only: the router ID is given; the speaker's IPv4 next hop,
	// never announced, is the router ID.
	f, _ = parseAnnounce(t, announceArgs(map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--next-hop6": "2001:db8:250::11",
		"--router-id": "198.18.250.11", "--peer": "[2001:db8:250::1]:64512"}))
	if cfg, err = f.config(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.VIPs) != 1 || cfg.VIPs[0] != netip.MustParsePrefix("2001:db8::53/128") || cfg.BGP.RouterID != netip.MustParseAddr("198.18.250.11") {
		t.Fatalf("IPv6-only config: %+v", cfg)
	}

	for _, tc := range []struct {
		repl map[string]string
		err  string
	}{
		{map[string]string{"--vip": ""}, "--vip is required"},
		{map[string]string{"--vip": "192.0.2.0/24"}, `--vip "192.0.2.0/24": 192.0.2.0/24: an IPv4 VIP is a /32`},
		{map[string]string{"--vip": "192.0.2.200/33"}, `--vip "192.0.2.200/33": invalid Prefix: not a prefix`},
		{map[string]string{"--vip": "vip.example"}, `--vip "vip.example": "vip.example" is not an IP address`},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": ""}, "--next-hop6 is required with an IPv6 --vip"},
		{map[string]string{"--vip": "2001:db8::53/64", "--next-hop6": "2001:db8:250::11"}, `--vip "2001:db8::53/64": 2001:db8::53/64: an IPv6 VIP is a /128`},
		{map[string]string{"--vip": "::ffff:192.0.2.200"}, `--vip "::ffff:192.0.2.200": ::ffff:192.0.2.200/128: an IPv4-mapped IPv6 address: give the IPv4 address (192.0.2.200)`},
		{map[string]string{"--vip": "fe80::53%eth0"}, `--vip "fe80::53%eth0": an address with a zone (%eth0)`},
		{map[string]string{"--vip": "fe80::53", "--next-hop6": "2001:db8:250::11"}, `--vip "fe80::53": fe80::53/128: a link-local address`},
		{map[string]string{"--vip": "ff02::1", "--next-hop6": "2001:db8:250::11"}, `--vip "ff02::1": ff02::1/128: not a global unicast address`},
		{map[string]string{"--next-hop6": "2001:db8:250::11"}, "--next-hop6 2001:db8:250::11: no --vip is IPv6"},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop6": "2001:db8:250::11"}, "--next-hop 198.18.250.11: no --vip is IPv4"},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--next-hop6": "2001:db8:250::11"}, "--router-id is required without --next-hop"},
		{map[string]string{"--next-hop": "2001:db8:250::11"}, `--next-hop "2001:db8:250::11": an IPv6 address: give it as --next-hop6`},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--router-id": "198.18.250.11", "--next-hop6": "198.18.250.11"}, `--next-hop6 "198.18.250.11": an IPv4 address: give it as --next-hop`},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--router-id": "198.18.250.11", "--next-hop6": "fe80::11"}, `--next-hop6 "fe80::11": a link-local address`},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--router-id": "198.18.250.11", "--next-hop6": "fe80::11%eth0"}, `--next-hop6 "fe80::11%eth0": an address with a zone`},
		{map[string]string{"--vip": "2001:db8::53", "--next-hop": "", "--router-id": "198.18.250.11", "--next-hop6": "::ffff:198.18.250.11"}, `--next-hop6 "::ffff:198.18.250.11": an IPv4-mapped address`},
		{map[string]string{"--next-hop": "::ffff:198.18.250.11"}, `--next-hop "::ffff:198.18.250.11": an IPv4-mapped IPv6 address`},
		{map[string]string{"--router-id": "2001:db8::1"}, `--router-id "2001:db8::1": not an IPv4 address`},
		{map[string]string{"--local-address": "2001:db8:250::11"}, `--local-address "2001:db8:250::11": an IPv6 address: give it as --local-address6`},
		{map[string]string{"--local-address6": "198.18.250.11"}, `--local-address6 "198.18.250.11": an IPv4 address: give it as --local-address`},
		{map[string]string{"--peer": "2001:db8:250::1:64512"}, `--peer "2001:db8:250::1:64512": an IPv6 address goes in brackets`},
		{map[string]string{"--peer": "[2001:db8:250::1"}, `--peer "[2001:db8:250::1": want [IPv6 ADDR]`},
		{map[string]string{"--peer": "[198.18.250.1]:64512"}, `--peer "[198.18.250.1]:64512": brackets are for IPv6 addresses`},
		{map[string]string{"--peer": "[fe80::1]:64512"}, `--peer "[fe80::1]:64512": address --peer "fe80::1": a link-local address`},
		{map[string]string{"--peer": "[2001:db8:250::1]x"}, `want [IPv6 ADDR] or [IPv6 ADDR]:ASN`},
		{map[string]string{"--asn": ""}, "--asn is required"},
		{map[string]string{"--next-hop": ""}, "--next-hop is required"},
		{map[string]string{"--next-hop": "fe80::1"}, `--next-hop "fe80::1": an IPv6 address: give it as --next-hop6`},
		{map[string]string{"--router-id": "x"}, `--router-id "x"`},
		{map[string]string{"--peer": ""}, "--peer is required"},
		{map[string]string{"--peer": "router:64512"}, `--peer "router:64512": address "router" is not an IP address`},
		{map[string]string{"--peer": "198.18.250.1:0"}, `ASN "0"`},
		{map[string]string{"--peer": "198.18.250.1:64512,port=0"}, `port "0" is not a port`},
		{map[string]string{"--peer": "198.18.250.1:64512,color=red"}, `unknown key "color"`},
		{map[string]string{"--peer": "198.18.250.1:64512,password-file=/nonexistent"}, "/nonexistent"},
		{map[string]string{"--check": ""}, "--check is required"},
		{map[string]string{"--check": "udp://127.0.0.1:53"}, `scheme "udp"`},
		{map[string]string{"--check": "http://localhost:8080/"}, `host "localhost": must be an IP address`},
		{map[string]string{"--check": "tcp://127.0.0.1"}, "a tcp check needs a port"},
		{map[string]string{"--check": "tcp://127.0.0.1:99999"}, `port "99999"`},
		{map[string]string{"--interval": "10ms"}, "--interval 10ms"},
		{map[string]string{"--timeout": "2s"}, "--timeout 2s"},
		{map[string]string{"--rise": "0"}, "--rise 0"},
		{map[string]string{"--fall": "101"}, "probe fall 101"},
		{map[string]string{"--hold": "2s"}, "--hold 2s"},
		{map[string]string{"--hold": "3500ms"}, "--hold 3.5s"},
		{map[string]string{"--keepalive": "9s"}, "--keepalive 9s"},
		{map[string]string{"--withdraw-wait": "0s"}, "--withdraw-wait 0s"},
	} {
		args := announceArgs(tc.repl)
		if v, ok := tc.repl["--check"]; ok && v != "" {
			args = append(args, "--check", v)
		}
		f, err := parseAnnounce(t, args)
		if err == nil {
			_, err = f.config()
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want an error containing %q", args, err, tc.err)
		}
	}
}

// The command itself rejects bad flags before starting anything, and a
// status listener off loopback.
func TestAnnounceCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{announceArgs(map[string]string{"--vip": ""}), "--vip is required"},
		{announceArgs(map[string]string{"--status-listen": "0.0.0.0:9465"}), "must be a loopback address"},
		{announceArgs(map[string]string{"--status-listen": "localhost:9465"}), "want a loopback IP and port"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"announce", "--log-level", "error"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("azgate announce %v: %v, want %q", tc.args, err, tc.err)
		}
	}
}

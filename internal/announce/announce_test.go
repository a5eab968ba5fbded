package announce

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/probe"
)

func TestParseCheck(t *testing.T) {
	base := probe.Spec{Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		in   string
		want probe.Target
		err  string
	}{
		{in: "tcp://127.0.0.1:6379", want: probe.Target{Key: "tcp://127.0.0.1:6379", Addr: lo, Spec: probe.Spec{Kind: probe.TCP, Port: 6379, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}}},
		{in: "http://127.0.0.1:8080/healthz?deep=1", want: probe.Target{Key: "http://127.0.0.1:8080/healthz?deep=1", Addr: lo, Spec: probe.Spec{Kind: probe.HTTP, Port: 8080, Path: "/healthz?deep=1", Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}}},
		{in: "https://[::1]", want: probe.Target{Key: "https://[::1]", Addr: netip.MustParseAddr("::1"), Spec: probe.Spec{Kind: probe.HTTPS, Path: "/", Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}}},
		{in: "tcp://127.0.0.1", err: "a tcp check needs a port"},
		{in: "tcp://127.0.0.1:6379/x", err: "a tcp check has no path"},
		{in: "icmp://127.0.0.1", err: `scheme "icmp"`},
		{in: "127.0.0.1:6379", err: "127.0.0.1:6379"},
		{in: "http://redis.internal:80/", err: `host "redis.internal": must be an IP address`},
		{in: "http://u:p@127.0.0.1/", err: "no user"},
		{in: "http://127.0.0.1:0/", err: `port "0"`},
	} {
		got, err := ParseCheck(tc.in, base)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCheck(%q): %v, want an error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCheck(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	chk, err := ParseCheck("tcp://127.0.0.1:6379", probe.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{VIP: netip.MustParsePrefix("192.0.2.200/32"), Checks: []probe.Target{chk},
			BGP: bgp.Config{RouterID: netip.MustParseAddr("198.18.250.11"), ASN: 64700, NextHop: netip.MustParseAddr("198.18.250.11"),
				Peers: []bgp.Peer{{Address: netip.MustParseAddr("198.18.250.1"), ASN: 64512}}}}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		err  string
	}{
		{func(c *Config) { c.VIP = netip.MustParsePrefix("192.0.2.0/24") }, "vip 192.0.2.0/24: must be an IPv4 /32"},
		{func(c *Config) { c.VIP = netip.Prefix{} }, "vip invalid Prefix"},
		{func(c *Config) { c.BGP.ASN = 0 }, "asn: must be set"},
		{func(c *Config) { c.BGP.Peers = nil }, "peers: at least one"},
		{func(c *Config) { c.Checks = nil }, "checks: at least one"},
		{func(c *Config) { c.Checks = append(c.Checks, chk) }, `check "tcp://127.0.0.1:6379": listed twice`},
		{func(c *Config) { c.Checks[0].Spec.Fall = -1 }, `probe target "tcp://127.0.0.1:6379": probe fall -1`},
		{func(c *Config) { c.WithdrawWait = -time.Second }, "withdraw wait -1s"},
	} {
		c := good()
		c.Checks = append([]probe.Target(nil), c.Checks...)
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Validate: %v, want %q", err, tc.err)
		}
		if _, err := New(c, nil); err == nil {
			t.Errorf("New accepted an invalid config (%q)", tc.err)
		}
	}
}

func TestListenLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:9465", "localhost:9465", ":9465", "[::]:0"} {
		if ln, err := ListenLoopback(addr); err == nil {
			ln.Close()
			t.Errorf("ListenLoopback(%q) accepted", addr)
		}
	}
	ln, err := ListenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

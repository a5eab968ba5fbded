package announce

import (
	"context"
	"fmt"
	"github.com/azgate/azgate/internal/promcheck"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/model"
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
		// IPv6: brackets, no zone, not IPv4-mapped.
		{in: "http://[2001:db8::1]:8080/healthz", want: probe.Target{Key: "http://[2001:db8::1]:8080/healthz", Addr: netip.MustParseAddr("2001:db8::1"), Spec: probe.Spec{Kind: probe.HTTP, Port: 8080, Path: "/healthz", Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}}},
		{in: "tcp://[2001:db8::53]:53", want: probe.Target{Key: "tcp://[2001:db8::53]:53", Addr: netip.MustParseAddr("2001:db8::53"), Spec: probe.Spec{Kind: probe.TCP, Port: 53, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3}}},
		{in: "tcp://2001:db8::1:80", err: "write it in brackets, e.g. tcp://[2001:db8::1]:PORT"},
		{in: "http://2001:db8::1/", err: "invalid port"},
		{in: "tcp://[2001:db8::1]", err: "a tcp check needs a port"},
		{in: "http://[fe80::1%25eth0]:80/", err: "no IPv6 zone (%eth0)"},
		{in: "tcp://[::ffff:192.0.2.1]:80", err: "write IPv4 as IPv4 (192.0.2.1)"},
		{in: "http://[2001:db8::zz]/", err: "invalid host"},
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
		return Config{VIPs: []netip.Prefix{netip.MustParsePrefix("192.0.2.200/32")}, Checks: []probe.Target{chk},
			BGP: bgp.Config{RouterID: netip.MustParseAddr("198.18.250.11"), ASN: 64700, NextHop: netip.MustParseAddr("198.18.250.11"),
				Peers: []bgp.Peer{{Address: netip.MustParseAddr("198.18.250.1"), ASN: 64512}}}}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	dual := good()
	dual.VIPs = append(dual.VIPs, netip.MustParsePrefix("2001:db8::53/128"))
	dual.BGP.NextHop6 = netip.MustParseAddr("2001:db8:250::11")
	if err := dual.Validate(); err != nil {
		t.Fatalf("a dual-stack pair: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		err  string
	}{
		{func(c *Config) { c.VIPs = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} }, "vip 192.0.2.0/24: an IPv4 VIP is a /32"},
		{func(c *Config) { c.VIPs = []netip.Prefix{{}} }, "vip invalid Prefix: not a prefix"},
		{func(c *Config) { c.VIPs = nil }, "vips: at least one"},
		{func(c *Config) { c.VIPs = append(c.VIPs, c.VIPs[0]) }, "vip 192.0.2.200/32: listed twice"},
		{func(c *Config) { c.VIPs = append(c.VIPs, netip.MustParsePrefix("2001:db8::53/128")) }, "vip 2001:db8::53/128: an IPv6 VIP needs an IPv6 next hop (next_hop6)"},
		{func(c *Config) {
			c.BGP.NextHop6 = netip.MustParseAddr("2001:db8:250::11")
			c.VIPs = append(c.VIPs, netip.MustParsePrefix("2001:db8::/64"))
		}, "vip 2001:db8::/64: an IPv6 VIP is a /128"},
		{func(c *Config) {
			c.BGP.NextHop6 = netip.MustParseAddr("2001:db8:250::11")
			c.VIPs = append(c.VIPs, netip.MustParsePrefix("::ffff:192.0.2.201/128"))
		}, "vip ::ffff:192.0.2.201/128: an IPv4-mapped IPv6 address: give the IPv4 address (192.0.2.201)"},
		{func(c *Config) {
			c.BGP.NextHop6 = netip.MustParseAddr("2001:db8:250::11")
			c.VIPs = append(c.VIPs, netip.MustParsePrefix("fe80::53/128"))
		}, "vip fe80::53/128: a link-local address"},
		{func(c *Config) { c.BGP.NextHop6 = netip.MustParseAddr("fe80::11") }, "next_hop6 fe80::11: must be a global IPv6 unicast address"},
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

// TestAnnouncedNeedsSession: every check up but no BGP session (the peer's
// port has no listener): the announcer wants the VIP announced, yet no
// peer has it, so azgate_announce_announced reads 0 and
// azgate_announce_wanted 1. (That the gauge reads 1 once a session
// carries the route is TestBIRD's, with a real router.)
func TestAnnouncedNeedsSession(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	check, err := ParseCheck("tcp://"+up.Addr().String(), probe.Spec{Interval: 200 * time.Millisecond,
		Timeout: 150 * time.Millisecond, Rise: 1, Fall: 2})
	if err != nil {
		t.Fatal(err)
	}
	nobody := freePort(t) // closed again: connections to it are refused
	ap := netip.MustParseAddrPort(nobody)
	lo := netip.MustParseAddr("127.0.0.1")
	cfg := Config{VIPs: []netip.Prefix{netip.MustParsePrefix("198.18.77.1/32")}, Checks: []probe.Target{check}, WithdrawWait: time.Second, Node: "a1",
		Resync: 200 * time.Millisecond,
		BGP: bgp.Config{RouterID: lo, ASN: 64600, NextHop: lo, LocalAddress: lo, HoldTime: 3 * time.Second,
			Keepalive: time.Second, Peers: []bgp.Peer{{Address: ap.Addr(), Port: ap.Port(), ASN: 64601}}}}
	a, err := New(cfg, bgp.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !a.Announced() {
		if time.Now().After(deadline) {
			t.Fatal("the check never came up: the announcer never wanted the VIP announced")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := status(t, a)
	if len(st.BGP.Sessions) != 1 || st.BGP.Sessions[0].State == "established" {
		t.Fatalf("sessions: %+v", st.BGP.Sessions)
	}
	m := get(t, a, "/metrics")
	promcheck.Lint(t, []byte(m))
	for _, want := range []string{
		`azgate_announce_announced{node="a1",vip="198.18.77.1/32"} 0`,
		`azgate_announce_wanted{node="a1",vip="198.18.77.1/32"} 1`,
		fmt.Sprintf(`azgate_announce_bgp_session_established{node="a1",peer="%v"} 0`, ap.Addr()),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
}

// TestPeersHave: the gauge's rule, session by session.
func TestPeersHave(t *testing.T) {
	sess := func(state string, adv uint64) model.BGPSession {
		return model.BGPSession{Peer: "198.18.0.1", State: state, Advertised: adv}
	}
	for _, tc := range []struct {
		name     string
		wanted   bool
		sessions []model.BGPSession
		want     bool
	}{
		{"no sessions", true, nil, false},
		{"session down", true, []model.BGPSession{sess("active", 0)}, false},
		{"established, not advertised yet", true, []model.BGPSession{sess("established", 0)}, false},
		{"established and advertised", true, []model.BGPSession{sess("established", 1)}, true},
		{"one of two", true, []model.BGPSession{sess("idle", 0), sess("established", 1)}, true},
		{"not wanted", false, []model.BGPSession{sess("established", 1)}, false},
	} {
		st := Status{Announced: tc.wanted, BGP: &model.BGPStatus{Sessions: tc.sessions}}
		if got := st.PeersHave(); got != tc.want {
			t.Errorf("%s: PeersHave %v, want %v", tc.name, got, tc.want)
		}
	}
}

package probe

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestNormalize(t *testing.T) {
	got := Spec{Kind: HTTP}.Normalize()
	want := Spec{Kind: HTTP, Port: 80, Path: "/", Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 2}
	if got != want {
		t.Fatalf("Normalize: %+v, want %+v", got, want)
	}
	got = Spec{Kind: HTTPS, Interval: 200 * time.Millisecond}.Normalize()
	if got.Port != 443 || got.Timeout != 200*time.Millisecond {
		t.Fatalf("Normalize https 200ms: %+v", got)
	}
	got = Spec{Kind: TCP, Port: 6379}.Normalize()
	if got.Path != "" || got.Port != 6379 {
		t.Fatalf("Normalize tcp: %+v", got)
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Spec
		err  string // "" valid; else a substring naming the field
	}{
		{"tcp", Spec{Kind: TCP, Port: 6379}, ""},
		{"http defaults", Spec{Kind: HTTP}, ""},
		{"https insecure", Spec{Kind: HTTPS, Insecure: true, Host: "pathd.example", Path: "/healthz?full=1"}, ""},
		{"host ip", Spec{Kind: HTTP, Host: "192.0.2.1"}, ""},
		{"no kind", Spec{Port: 1}, "probe kind"},
		{"bad kind", Spec{Kind: "icmp", Port: 1}, "probe kind \"icmp\""},
		{"tcp no port", Spec{Kind: TCP}, "probe port 0"},
		{"interval short", Spec{Kind: TCP, Port: 1, Interval: 50 * time.Millisecond}, "probe interval 50ms: must be at least 100ms"},
		{"interval negative", Spec{Kind: TCP, Port: 1, Interval: -time.Second}, "probe interval -1s"},
		{"interval long", Spec{Kind: TCP, Port: 1, Interval: 2 * time.Hour}, "probe interval 2h0m0s"},
		{"timeout over interval", Spec{Kind: TCP, Port: 1, Interval: time.Second, Timeout: 2 * time.Second}, "probe timeout 2s"},
		{"timeout tiny", Spec{Kind: TCP, Port: 1, Timeout: time.Millisecond}, "probe timeout 1ms"},
		{"rise negative", Spec{Kind: TCP, Port: 1, Rise: -1}, "probe rise -1"},
		{"fall huge", Spec{Kind: TCP, Port: 1, Fall: 1000}, "probe fall 1000"},
		{"tcp path", Spec{Kind: TCP, Port: 1, Path: "/x"}, "probe path \"/x\": only for http"},
		{"tcp host", Spec{Kind: TCP, Port: 1, Host: "a.example"}, "probe host \"a.example\": only for http"},
		{"relative path", Spec{Kind: HTTP, Path: "healthz"}, "probe path \"healthz\": must start with /"},
		{"path space", Spec{Kind: HTTP, Path: "/a b"}, "probe path \"/a b\""},
		{"path crlf", Spec{Kind: HTTP, Path: "/a\r\nX: y"}, "probe path"},
		{"path long", Spec{Kind: HTTP, Path: "/" + strings.Repeat("a", 2000)}, "probe path: 2001 bytes"},
		{"bad host", Spec{Kind: HTTP, Host: "a b.example"}, "probe host \"a b.example\""},
		{"host header injection", Spec{Kind: HTTP, Host: "a.example\r\nX: y"}, "probe host"},
		{"insecure http", Spec{Kind: HTTP, Insecure: true}, "probe insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestTargetValidate(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	tcp := Spec{Kind: TCP, Port: 1}
	for _, tc := range []struct {
		name string
		t    Target
		err  string
	}{
		{"ok", Target{Key: "k", Addr: a, Spec: tcp}, ""},
		{"no key", Target{Addr: a, Spec: tcp}, "key must not be empty"},
		{"no addr", Target{Key: "k", Spec: tcp}, "probe target \"k\": addr invalid IP"},
		{"unspecified", Target{Key: "k", Addr: netip.MustParseAddr("0.0.0.0"), Spec: tcp}, "probe target \"k\": addr 0.0.0.0"},
		{"multicast", Target{Key: "k", Addr: netip.MustParseAddr("224.0.0.1"), Spec: tcp}, "addr 224.0.0.1"},
		{"bad spec", Target{Key: "eu-1", Addr: a, Spec: Spec{Kind: TCP, Port: 1, Rise: 500}}, "probe target \"eu-1\": probe rise 500"},
		{"ipv6", Target{Key: "k", Addr: netip.MustParseAddr("2001:db8::1"), Spec: Spec{Kind: HTTP, Path: "/healthz"}}, ""},
		{"ipv6 zone", Target{Key: "k", Addr: netip.MustParseAddr("fe80::1%eth0"), Spec: tcp}, "addr fe80::1%eth0: no IPv6 zone (%eth0)"},
		{"ipv6 multicast", Target{Key: "k", Addr: netip.MustParseAddr("ff02::1"), Spec: tcp}, "addr ff02::1: must be a unicast"},
		{"ipv6 unspecified", Target{Key: "k", Addr: netip.IPv6Unspecified(), Spec: tcp}, "addr ::: must be a unicast"},
		{"ipv4-mapped", Target{Key: "k", Addr: netip.MustParseAddr("::ffff:192.0.2.1"), Spec: tcp}, "write IPv4 as IPv4 (192.0.2.1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.t.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

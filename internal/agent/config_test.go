package agent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// TestConfigCheck: each setting that cannot work is refused with an error
// naming it; the defaults are filled in and a setting given is kept.
func TestConfigCheck(t *testing.T) {
	ok := func() Config { return Config{Name: "h1", Underlay: "ul0", ICMPRate: 100, ICMPBurst: 50} }
	rule := func(p string) LocalAllow {
		return LocalAllow{Prefix: netip.MustParsePrefix(p), Rule: dataplane.LocalRule{Proto: 6, Lo: 80, Hi: 80}}
	}
	var nine []LocalAllow // nine rules for one prefix: more than it holds
	for i := range dataplane.MaxLocalRules + 1 {
		a := rule("169.254.169.254/32")
		a.Rule.Lo, a.Rule.Hi = uint16(80+i), uint16(80+i)
		nine = append(nine, a)
	}
	for _, c := range []struct {
		name   string
		change func(*Config)
		err    string // "": valid
		check  func(Config) bool
	}{
		{"valid, defaults", func(*Config) {}, "", func(c Config) bool { return c.Status.Interval == DefaultStatusInterval && c.Log != nil }},
		{"status interval kept", func(c *Config) { c.Status.Interval = time.Second }, "", func(c Config) bool { return c.Status.Interval == time.Second }},
		{"local rules", func(c *Config) { c.LocalAllow = []LocalAllow{rule("169.254.169.254/32")} }, "", nil},
		{"no name", func(c *Config) { c.Name = "" }, "--name", nil},
		{"no underlay", func(c *Config) { c.Underlay = "" }, "--underlay-if", nil},
		{"ICMP rate too high", func(c *Config) { c.ICMPRate = dataplane.MaxICMPRate + 1 }, "--icmp-rate", nil},
		{"ICMPv6 source", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("2001:db8::9") }, "", nil},
		{"ICMPv6 source IPv4", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("198.18.0.9") }, "--icmp-source6 198.18.0.9", nil},
		{"ICMPv6 source link-local", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("fe80::9") }, "--icmp-source6 fe80::9", nil},
		{"too many local rules", func(c *Config) { c.LocalAllow = nine }, "--local-allow", nil},
		{"negative status interval", func(c *Config) { c.Status.Interval = -time.Second }, "status interval", nil},
		{"EIPs at the ceiling", func(c *Config) { c.EIPMax = dataplane.AgentEIPMaxDefault }, "", func(c Config) bool { return c.EIPMax == dataplane.AgentEIPMaxDefault }},
		{"small EIP maps", func(c *Config) { c.EIPMax = 2048 }, "", func(c Config) bool { return c.EIPMax == 2048 }},
		{"EIPs above the ceiling", func(c *Config) { c.EIPMax = dataplane.AgentEIPMaxDefault + 1 }, "--eip-max 65537: above the compiled capacity 65536", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok()
			c.change(&cfg)
			err := cfg.Check()
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one naming %q", err, c.err)
			case c.check != nil && !c.check(cfg):
				t.Fatalf("after Check: %+v", cfg)
			}
		})
	}
}

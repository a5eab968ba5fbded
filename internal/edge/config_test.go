package edge

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

type fakeSecrets struct{}

func (fakeSecrets) Secret(context.Context, string, int) ([]byte, error) { return make([]byte, 32), nil }

// validConfig is the smallest configuration Check accepts.
func validConfig() Config {
	return Config{Name: "edge-a1", Interfaces: []string{"eth0", "eth1"}}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" valid; else a part of the error
	}{
		{"minimal", func(*Config) {}, ""},
		{"everything set", func(c *Config) {
			c.ICMPSource = netip.MustParseAddr("192.0.2.1")
			c.HealthSource = netip.MustParseAddr("198.18.0.9")
			c.HealthSource6 = netip.MustParseAddr("2001:db8:ffff::9")
			c.StoreGrace, c.AnnounceSettle, c.StatusInterval = time.Minute, time.Second, time.Second
			c.HealthCommandConcurrency = 4
			c.LB = dataplane.LBConfig{SYN: time.Second, Established: time.Hour, FIN: time.Second, UDP: time.Second}
			c.Rates = RateConfig{Interval: -1, FloorPPS: 1, FloorBPS: 1, FloorSYN: 1, TopN: 1}
			c.ARP = ARPConfig{Ifaces: []string{"eth1"}, Gateway: netip.MustParseAddr("10.0.0.1"), TTL: 5 * time.Second, Margin: time.Second}
			c.Sync = SyncConfig{Port: 7946, Secrets: fakeSecrets{}, Refresh: time.Second, JoinTimeout: time.Second}
			c.Bandwidth = BandwidthConfig{Interval: time.Second, Grace: time.Minute}
			c.Conditions = []Condition{{Name: "x", OK: func() bool { return true }}}
		}, ""},
		{"no name", func(c *Config) { c.Name = "" }, "--name is required"},
		{"no interfaces", func(c *Config) { c.Interfaces = nil }, "--attach"},
		{"empty interface", func(c *Config) { c.Interfaces = []string{"eth0", ""} }, "empty interface name"},
		{"interface twice", func(c *Config) { c.Interfaces = []string{"eth0", "eth1", "eth0"} }, "--attach eth0: given twice"},
		{"IPv6 ICMP source", func(c *Config) { c.ICMPSource = netip.MustParseAddr("2001:db8::1") }, "--icmp-source"},
		{"IPv4 ICMPv6 source", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("192.0.2.1") }, "--icmp-source6 192.0.2.1"},
		{"link-local ICMPv6 source", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("fe80::1") }, "--icmp-source6 fe80::1"},
		{"mapped ICMPv6 source", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("::ffff:192.0.2.1") }, "--icmp-source6 ::ffff:192.0.2.1"},
		{"ICMPv6 source set", func(c *Config) { c.ICMPSource6 = netip.MustParseAddr("2001:db8::1") }, ""},
		{"IPv6 health source", func(c *Config) { c.HealthSource = netip.MustParseAddr("2001:db8::1") }, "--health-source"},
		{"IPv4 health source6", func(c *Config) { c.HealthSource6 = netip.MustParseAddr("198.18.0.9") }, "--health-source6"},
		{"unique-local health source6", func(c *Config) { c.HealthSource6 = netip.MustParseAddr("fd00::9") }, "--health-source6"},
		{"link-local health source6", func(c *Config) { c.HealthSource6 = netip.MustParseAddr("fe80::9") }, "--health-source6"},
		{"negative status interval", func(c *Config) { c.StatusInterval = -time.Second }, "status interval"},
		{"negative command concurrency", func(c *Config) { c.HealthCommandConcurrency = -1 }, "--health-command-concurrency -1"},
		{"negative store grace", func(c *Config) { c.StoreGrace = -time.Second }, "--store-grace -1s"},
		{"negative settle", func(c *Config) { c.AnnounceSettle = -time.Second }, "--announce-settle -1s"},
		{"negative SYN timeout", func(c *Config) { c.LB.SYN = -time.Second }, "--ct-syn-timeout"},
		{"negative established timeout", func(c *Config) { c.LB.Established = -time.Second }, "--ct-established-timeout"},
		{"negative FIN timeout", func(c *Config) { c.LB.FIN = -time.Second }, "--ct-fin-timeout"},
		{"negative UDP timeout", func(c *Config) { c.LB.UDP = -time.Second }, "--ct-udp-timeout"},
		{"sizes at the ceiling", func(c *Config) {
			c.EIPMax, c.ConnMax, c.ListenerMax = dataplane.EIPMaxDefault, dataplane.ConnMaxDefault, dataplane.ListenerMaxDefault
			c.BackendMax = dataplane.BackendMaxDefault
		}, ""},
		{"small sizes", func(c *Config) { c.EIPMax, c.ConnMax, c.ListenerMax, c.BackendMax = 100_000, 256<<10, 4096, 1024 }, ""},
		{"listeners above the ceiling", func(c *Config) { c.ListenerMax = dataplane.ListenerMaxDefault + 1 }, "--listener-max 262145: above the compiled capacity 262144"},
		{"backends above the ceiling", func(c *Config) { c.BackendMax = dataplane.BackendMaxDefault + 1 }, "--backend-max 65537: above the compiled capacity 65536"},
		{"EIPs above the ceiling", func(c *Config) { c.EIPMax = dataplane.EIPMaxDefault + 1 }, "--eip-max 1048577: above the compiled capacity 1048576"},
		{"connections above the ceiling", func(c *Config) { c.ConnMax = 1 << 21 }, "--ct-size 2097152: above the compiled capacity 1048576"},
		{"drift flows at the ceiling, the longest drift delay", func(c *Config) { c.DriftFlows, c.DriftDelay = dataplane.DriftFlowsMax, MaxDriftDelay }, ""},
		{"drift flows above the ceiling", func(c *Config) { c.DriftFlows = dataplane.DriftFlowsMax + 1 }, "--drift-flows 1048577: above the compiled capacity 1048576"},
		{"drift delay too long", func(c *Config) { c.DriftDelay = MaxDriftDelay + 1 }, "--drift-delay 5.000000001s: must be between 0 (none) and 5s"},
		{"negative drift delay", func(c *Config) { c.DriftDelay = -1 }, "--drift-delay -1ns: must be between 0 (none) and 5s"},
		{"negative rate floor", func(c *Config) { c.Rates.FloorPPS = -1 }, "--rate-floor-pps"},
		{"negative rate top", func(c *Config) { c.Rates.TopN = -1 }, "--rate-top"},
		{"ARP interface not attached", func(c *Config) { c.ARP.Ifaces = []string{"eth9"} }, "--arp-iface eth9: not an --attach interface"},
		{"ARP gateway without interface", func(c *Config) { c.ARP.Gateway = netip.MustParseAddr("10.0.0.1") }, "--arp-gateway needs --arp-iface"},
		{"IPv6 ARP gateway", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway: netip.MustParseAddr("2001:db8::1")}
		}, "--arp-gateway 2001:db8::1: not an IPv4 address (an IPv6 gateway is --arp-gateway6)"},
		{"IPv6 gateway, link-local", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway6: netip.MustParseAddr("fe80::1"), TTL: 5 * time.Second, Margin: time.Second}
		}, ""},
		{"IPv6 gateway, global", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway6: netip.MustParseAddr("2001:db8::1"), TTL: 5 * time.Second, Margin: time.Second}
		}, ""},
		{"IPv6 gateway without interface", func(c *Config) { c.ARP.Gateway6 = netip.MustParseAddr("2001:db8::1") }, "--arp-gateway6 needs --arp-iface"},
		{"IPv4 address as the IPv6 gateway", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway6: netip.MustParseAddr("10.0.0.1")}
		}, "--arp-gateway6 10.0.0.1: not a unicast IPv6 address"},
		{"mapped address as the IPv6 gateway", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway6: netip.MustParseAddr("::ffff:10.0.0.1")}
		}, "--arp-gateway6 ::ffff:10.0.0.1: not a unicast IPv6 address"},
		{"multicast IPv6 gateway", func(c *Config) {
			c.ARP = ARPConfig{Ifaces: []string{"eth0"}, Gateway6: netip.MustParseAddr("ff02::2")}
		}, "--arp-gateway6 ff02::2: not a unicast IPv6 address"},
		{"ARP lease under a second", func(c *Config) { c.ARP.TTL = 500 * time.Millisecond }, "--arp-lease-ttl"},
		{"ARP margin over the lease", func(c *Config) { c.ARP.TTL, c.ARP.Margin = 2*time.Second, 3*time.Second }, "--arp-lease-margin"},
		{"sync without a store", func(c *Config) { c.Sync.Port = 7946 }, "connection sync needs a store"},
		{"sync with a store", func(c *Config) { c.Sync = SyncConfig{Port: 7946, Secrets: fakeSecrets{}} }, ""},
		{"sync settings unused while sync is off", func(c *Config) { c.Sync.Refresh = -time.Second }, ""},
		{"negative sync refresh", func(c *Config) { c.Sync = SyncConfig{Port: 7946, Secrets: fakeSecrets{}, Refresh: -time.Second} }, "--sync-refresh"},
		{"negative sync join timeout", func(c *Config) {
			c.Sync = SyncConfig{Port: 7946, Secrets: fakeSecrets{}, JoinTimeout: -time.Second}
		}, "--sync-join-timeout"},
		{"negative bandwidth interval", func(c *Config) { c.Bandwidth.Interval = -time.Second }, "--bw-interval"},
		{"negative bandwidth grace", func(c *Config) { c.Bandwidth.Grace = -time.Second }, "--bw-grace"},
		{"condition without a function", func(c *Config) { c.Conditions = []Condition{{Name: "x"}} }, `announce condition "x"`},
		{"condition without a name", func(c *Config) { c.Conditions = []Condition{{OK: func() bool { return true }}} }, "announce condition"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := validConfig()
			c.edit(&cfg)
			err := cfg.withDefaults().Check()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check: %v, want nil", err)
			case c.want != "" && err == nil:
				t.Fatalf("Check: nil, want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("Check: %v, want an error with %q", err, c.want)
			case err != nil && !strings.HasPrefix(err.Error(), "edge: "):
				t.Fatalf("Check: %v, want it to name the edge", err)
			}
		})
	}
	// Every fault is named, not only the first.
	cfg := Config{StoreGrace: -1, Rates: RateConfig{TopN: -1}}
	err := cfg.withDefaults().Check()
	for _, want := range []string{"--name", "--attach", "--store-grace", "--rate-top"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check of a config with four faults: %v, want %q named", err, want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	d := validConfig().withDefaults()
	if d.Log == nil || d.IfindexOf == nil {
		t.Fatalf("Log %v, IfindexOf set %v: want both set", d.Log, d.IfindexOf != nil)
	}
	if d.StatusInterval != DefaultStatusInterval || d.StoreGrace != DefaultStoreGrace || d.AnnounceSettle != DefaultSettle {
		t.Errorf("status interval %v, store grace %v, settle %v: want %v, %v, %v", d.StatusInterval, d.StoreGrace,
			d.AnnounceSettle, DefaultStatusInterval, DefaultStoreGrace, DefaultSettle)
	}
	if d.LB != DefaultLB {
		t.Errorf("LB %+v, want DefaultLB %+v", d.LB, DefaultLB)
	}
	if want := (RateConfig{DefaultRateInterval, DefaultRateFloorPPS, DefaultRateFloorBPS, DefaultRateFloorSYN, DefaultRateTopN}); d.Rates != want {
		t.Errorf("rates %+v, want %+v", d.Rates, want)
	}
	if d.Bandwidth.Zone != DefaultBandwidthZone {
		t.Errorf("bandwidth zone %q, want %q", d.Bandwidth.Zone, DefaultBandwidthZone)
	}
	if d.ICMPSource.IsValid() || d.LB.HZ != 0 {
		t.Errorf("ICMP source %v, HZ %d: withDefaults must leave them to the data plane's start", d.ICMPSource, d.LB.HZ)
	}

	// What is set is kept; a zero timeout beside set ones takes its
	// default; a zero insert rate beside set fields stays "no cap".
	c := validConfig()
	c.StatusInterval, c.StoreGrace, c.AnnounceSettle = time.Second, time.Minute, 3*time.Second
	c.LB = dataplane.LBConfig{HZ: 250, SYN: 5 * time.Second, InsertBurst: 7}
	c.Rates = RateConfig{Interval: -1, TopN: 3}
	c.Bandwidth.Zone = "z"
	d = c.withDefaults()
	if d.StatusInterval != time.Second || d.StoreGrace != time.Minute || d.AnnounceSettle != 3*time.Second {
		t.Errorf("set durations changed: %v %v %v", d.StatusInterval, d.StoreGrace, d.AnnounceSettle)
	}
	want := dataplane.LBConfig{HZ: 250, SYN: 5 * time.Second, Established: DefaultLB.Established, FIN: DefaultLB.FIN,
		UDP: DefaultLB.UDP, InsertRate: 0, InsertBurst: 7}
	if d.LB != want {
		t.Errorf("LB %+v, want %+v", d.LB, want)
	}
	if d.Rates.Interval != -1 || d.Rates.TopN != 3 || d.Rates.FloorPPS != DefaultRateFloorPPS {
		t.Errorf("rates %+v: want the interval -1 (off) and top 3 kept, the floors defaulted", d.Rates)
	}
	if d.Bandwidth.Zone != "z" {
		t.Errorf("bandwidth zone %q, want z", d.Bandwidth.Zone)
	}
	// withDefaults of a completed config changes nothing.
	if dd := d.withDefaults(); dd.LB != d.LB || dd.Rates != d.Rates || dd.StoreGrace != d.StoreGrace {
		t.Errorf("withDefaults is not idempotent: %+v, then %+v", d.LB, dd.LB)
	}
}

// TestRunChecksBeforeStarting: Run refuses a configuration Check refuses
// before it loads anything: no data plane pinned, no store touched (it
// is nil here, so any use would panic), at once.
func TestRunChecksBeforeStarting(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no interfaces", func(c *Config) { c.Interfaces = nil }, "--attach"},
		{"sync without a store", func(c *Config) { c.Sync.Port = 7946 }, "connection sync needs a store"},
		{"negative store grace", func(c *Config) { c.StoreGrace = -time.Second }, "--store-grace"},
		{"ARP interface not attached", func(c *Config) { c.ARP.Ifaces = []string{"eth9"} }, "--arp-iface eth9"},
		{"EIPs above the ceiling", func(c *Config) { c.EIPMax = 1 << 21 }, "--eip-max 2097152: above the compiled capacity"},
		{"listeners above the ceiling", func(c *Config) { c.ListenerMax = 1 << 19 }, "--listener-max 524288: above the compiled capacity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Log = quiet
			c.edit(&cfg)
			pins := filepath.Join(t.TempDir(), "pins")
			start := time.Now()
			err := Run(context.Background(), cfg, nil, dataplane.LoadOptions{PinDir: pins}, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want the check's error with %q", err, c.want)
			}
			if _, serr := os.Stat(pins); !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("pin directory %s exists (%v): Run loaded the data plane before checking", pins, serr)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("Run took %v to refuse the configuration", d)
			}
		})
	}
}

// fakePart records its start and stop into a shared log.
type fakePart struct {
	name string
	fail error
	log  *[]string
}

func (f *fakePart) Name() string { return f.name }

func (f *fakePart) Start(context.Context) error {
	*f.log = append(*f.log, "start "+f.name)
	return f.fail
}

func (f *fakePart) Stop() { *f.log = append(*f.log, "stop "+f.name) }

func TestComponentsStopInReverse(t *testing.T) {
	var events []string
	parts := func(failing string) []component {
		var cs []component
		for _, n := range []string{"a", "b", "c", "d"} {
			p := &fakePart{name: n, log: &events}
			if n == failing {
				p.fail = errors.New("no such device")
			}
			cs = append(cs, p)
		}
		return cs
	}

	r := &runner{log: quiet}
	if err := r.Start(context.Background(), parts("")...); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	want := []string{"start a", "start b", "start c", "start d", "stop d", "stop c", "stop b", "stop a"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	r.Stop() // a second Stop stops nothing again
	if len(events) != len(want) {
		t.Fatalf("a second Stop stopped again: %q", events[len(want):])
	}

	// c fails: d never starts; c (which may have done part of its
	// start), b and a stop, in that order; the cause is logged and
	// returned.
	events = nil
	var logged bytes.Buffer
	r = &runner{log: slog.New(slog.NewTextHandler(&logged, nil))}
	err := r.Start(context.Background(), parts("c")...)
	if err == nil || err.Error() != "no such device" {
		t.Fatalf("Start: %v, want c's error", err)
	}
	want = []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	if l := logged.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "part=c") || !strings.Contains(l, "no such device") {
		t.Fatalf("log %q: want an error naming the part and the cause", l)
	}
	r.Stop() // Run's deferred Stop is not reached, but a Stop after a failed Start stops nothing
	if len(events) != len(want) {
		t.Fatalf("Stop after a failed Start stopped again: %q", events[len(want):])
	}
}

// TestICMPSource6Written: the edge's ICMPv6 source (--icmp-source6)
// reaches the data plane's configuration with the IPv4 one; unset, it
// stays unset (the program then sends no ICMPv6 errors).
func TestICMPSource6Written(t *testing.T) {
	for _, src := range []string{"2001:db8:100::1", ""} {
		var want netip.Addr
		if src != "" {
			want = netip.MustParseAddr(src)
		}
		fake := dataplane.NewFakeEdge()
		r := NewReconciler(Config{Name: "edge-a1", Log: quiet, ICMPSource: a("192.0.2.1"), ICMPSource6: want}, fake)
		load(t, r, 10, region()...)
		if got := fake.Config.ICMPSource6; got != want || fake.Config.ICMPSource != a("192.0.2.1") {
			t.Errorf("ICMPv6 source %v (ICMP source %v), want %v (192.0.2.1)", got, fake.Config.ICMPSource, want)
		}
	}
}

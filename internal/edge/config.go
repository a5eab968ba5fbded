package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/store"
)

// The edge's defaults live here, beside the Config they complete: the
// command line takes them as its flags' defaults (cmd/azgate/roles.go)
// and a zero field of a Config means the same default (withDefaults).

// DefaultLB is the connection-table configuration of an edge that sets
// none (HZ is measured when the data plane loads).
var DefaultLB = dataplane.LBConfig{SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second,
	UDP: time.Minute, InsertRate: 100_000, InsertBurst: 200_000}

// DefaultStatusInterval is how often the edge publishes its status.
const DefaultStatusInterval = 2 * time.Second

// withDefaults returns the configuration with every zero field that has
// a default set to it. It does no I/O: what must be read from the
// machine (the ICMP source, HZ) is found when the data plane loads
// (plane.Start).
//
// Zero means the default throughout: StoreGrace and AnnounceSettle 0 are
// DefaultStoreGrace and DefaultSettle (the command line refused 0 for
// them before). The connection-table timeouts each default when zero; the
// insert rate and burst keep 0 as "no cap" (dataplane.LBConfig), so they
// take DefaultLB's only when the whole table configuration is unset.
func (c Config) withDefaults() Config {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.IfindexOf == nil {
		c.IfindexOf = ifindexOf
	}
	lb := c.LB
	if lb.SYN == 0 && lb.Established == 0 && lb.FIN == 0 && lb.UDP == 0 && lb.InsertRate == 0 && lb.InsertBurst == 0 {
		lb.InsertRate, lb.InsertBurst = DefaultLB.InsertRate, DefaultLB.InsertBurst
	}
	for _, d := range []struct{ v, def *time.Duration }{{&lb.SYN, &DefaultLB.SYN}, {&lb.Established, &DefaultLB.Established},
		{&lb.FIN, &DefaultLB.FIN}, {&lb.UDP, &DefaultLB.UDP}} {
		if *d.v == 0 {
			*d.v = *d.def
		}
	}
	c.LB = lb
	if c.StoreGrace == 0 {
		c.StoreGrace = DefaultStoreGrace
	}
	if c.AnnounceSettle == 0 {
		c.AnnounceSettle = DefaultSettle
	}
	c.Rates.defaults()
	if c.Bandwidth.Zone == "" {
		c.Bandwidth.Zone = DefaultBandwidthZone
	}
	return c
}

// Check validates the configuration before anything starts (after
// withDefaults); its errors name the flag at fault. It does no I/O:
// whether an interface exists is found when the edge attaches to it.
func (c Config) Check() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Name == "" {
		bad("--name is required")
	}
	if len(c.Interfaces) == 0 {
		bad("no interfaces to attach to (--attach)")
	}
	for i, n := range c.Interfaces {
		if n == "" {
			bad("--attach: an empty interface name")
		} else if slices.Contains(c.Interfaces[:i], n) {
			bad("--attach %s: given twice", n)
		}
	}
	if c.ICMPSource.IsValid() && !c.ICMPSource.Is4() {
		bad("--icmp-source %v: not an IPv4 address", c.ICMPSource)
	}
	if a := c.ICMPSource6; a.IsValid() && (!a.Is6() || a.Is4In6() || a.Zone() != "" || !a.IsGlobalUnicast()) {
		bad("--icmp-source6 %v: not a global unicast IPv6 address", a)
	}
	if c.HealthSource.IsValid() && !c.HealthSource.Is4() {
		bad("--health-source %v: not an IPv4 address", c.HealthSource)
	}
	if a := c.HealthSource6; a.IsValid() && (!a.Is6() || a.Is4In6() || a.Zone() != "" || !a.IsGlobalUnicast() || a.IsPrivate()) {
		bad("--health-source6 %v: not a global unicast IPv6 address outside fc00::/7", a)
	}
	if c.StatusInterval < 0 {
		bad("status interval %v: must be positive", c.StatusInterval)
	}
	if c.HealthCommandConcurrency < 0 {
		bad("--health-command-concurrency %d: must be positive (0: twice the CPUs)", c.HealthCommandConcurrency)
	}
	if c.StoreGrace < 0 {
		bad("--store-grace %v: must be positive (0: %v)", c.StoreGrace, DefaultStoreGrace)
	}
	if c.AnnounceSettle < 0 {
		bad("--announce-settle %v: must be positive (0: %v)", c.AnnounceSettle, DefaultSettle)
	}
	for _, t := range []struct {
		flag string
		v    time.Duration
	}{{"--ct-syn-timeout", c.LB.SYN}, {"--ct-established-timeout", c.LB.Established}, {"--ct-fin-timeout", c.LB.FIN}, {"--ct-udp-timeout", c.LB.UDP}} {
		if t.v < 0 {
			bad("%s %v: must be positive", t.flag, t.v)
		}
	}
	for _, s := range []struct {
		flag     string
		v, limit uint32
	}{{"--eip-max", c.EIPMax, dataplane.EIPMaxDefault}, {"--ct-size", c.ConnMax, dataplane.ConnMaxDefault}, {"--ct-size6", c.ConnMax6, dataplane.ConnMaxDefault},
		{"--listener-max", c.ListenerMax, dataplane.ListenerMaxDefault}, {"--backend-max", c.BackendMax, dataplane.BackendMaxDefault},
		{"--drift-flows", c.DriftFlows, dataplane.DriftFlowsMax}} {
		if s.v > s.limit {
			bad("%s %d: above the compiled capacity %d, the most an edge holds (0: %d)", s.flag, s.v, s.limit, s.limit)
		}
	}
	if c.DriftDelay < 0 || c.DriftDelay > MaxDriftDelay {
		bad("--drift-delay %v: must be between 0 (none) and %v", c.DriftDelay, MaxDriftDelay)
	}
	if c.Rates.FloorPPS < 0 || c.Rates.FloorBPS < 0 || c.Rates.FloorSYN < 0 || c.Rates.TopN < 0 {
		bad("--rate-floor-pps, --rate-floor-bps, --rate-floor-syn and --rate-top must be positive")
	}
	if err := c.ARP.check(c.Interfaces); err != nil {
		errs = append(errs, err)
	}
	if err := c.Sync.check(); err != nil {
		errs = append(errs, err)
	}
	if c.Bandwidth.Interval < 0 || c.Bandwidth.Grace < 0 {
		bad("--bw-interval %v and --bw-grace %v must be positive", c.Bandwidth.Interval, c.Bandwidth.Grace)
	}
	for _, cond := range c.Conditions {
		if cond.Name == "" || cond.OK == nil {
			bad("announce condition %q: needs a name and a function", cond.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	return nil
}

// check validates the ARP settings against the --attach interfaces.
func (c ARPConfig) check(attached []string) error {
	if err := c.checkGateways(); err != nil {
		return err
	}
	for _, n := range c.Ifaces {
		if !slices.Contains(attached, n) {
			return fmt.Errorf("--arp-iface %s: not an --attach interface (the XDP program answers ARP)", n)
		}
	}
	if _, err := (store.ClaimOptions{TTL: c.TTL, Margin: c.Margin}).Check(); err != nil {
		return fmt.Errorf("--arp-lease-ttl, --arp-lease-margin: %w", err)
	}
	return nil
}

// check validates the connection sync settings: sync needs the store
// that holds the shared secret.
func (c SyncConfig) check() error {
	if c.Port == 0 {
		return nil
	}
	if c.Secrets == nil {
		return errors.New("--sync-listen: connection sync needs a store for the shared secret (SyncConfig.Secrets)")
	}
	if c.Refresh < 0 || c.JoinTimeout < 0 {
		return fmt.Errorf("--sync-refresh %v and --sync-join-timeout %v must be positive", c.Refresh, c.JoinTimeout)
	}
	return nil
}

// limitsMax is how many addresses with rate limits the edge's data plane
// holds: dataplane.LimitsMax, or --eip-max when below it (it caps
// edge_limits, dataplane.LoadOptions.EIPMax).
func (c Config) limitsMax() int {
	if c.EIPMax > 0 && c.EIPMax < dataplane.LimitsMax {
		return int(c.EIPMax)
	}
	return dataplane.LimitsMax
}

// CheckFlags is Check before the store is connected, with the defaults
// filled in: what the flags give, the sync secret's source (the store,
// given at start) taken as present. `azgate edge --check-config` and the
// start run it.
func (c Config) CheckFlags() error {
	c = c.withDefaults()
	if c.Sync.Port != 0 && c.Sync.Secrets == nil {
		c.Sync.Secrets = storeAtStart{}
	}
	return c.Check()
}

// storeAtStart stands for the store CheckFlags does not have yet.
type storeAtStart struct{}

func (storeAtStart) Secret(context.Context, string, int) ([]byte, error) {
	return nil, errors.New("edge: no store yet")
}

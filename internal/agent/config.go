package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/monitor"
)

// DefaultStatusInterval is how often the agent publishes its status.
const DefaultStatusInterval = 2 * time.Second

// Config of an agent.
type Config struct {
	Name     string // host name
	Underlay string // underlay interface
	// LocalAllow: what guests may send to their host's kernel
	// (--local-allow, local.go); nil: nothing.
	LocalAllow []LocalAllow
	HashSeed   uint32
	ICMPRate   uint32
	ICMPBurst  uint32
	// ICMPSource6: the source of the ICMPv6 packets too big sent to IPv6
	// guests (--icmp-source6); not valid: the host's IPv6 underlay
	// address, and a host of the IPv4 underlay sends none.
	ICMPSource6 netip.Addr
	// Monitor: what the programs write events for (`azgate monitor`,
	// docs/observability.md).
	Monitor dataplane.MonitorConfig
	// MonitorSwitch, when set, is attached to the loaded data plane: the
	// SIGHUP reload sets the monitor's mode through it.
	MonitorSwitch *monitor.Switch
	Version       string
	Log           *slog.Logger
	NoRetry       bool // tests: no background retries
	// Status: where the agent's status goes.
	Status StatusConfig
	// Bandwidth: shared bandwidth reporting and enforcement (bandwidth.go).
	Bandwidth BandwidthConfig
	// EIPMax sizes the data plane's maps with an entry per EIP of the
	// host's guests (dataplane.LoadOptions.AgentEIPMax, --eip-max); 0: the
	// compiled default, also the ceiling (dataplane.AgentEIPMaxDefault).
	EIPMax uint32
	// Now is the clock a drain's end (EIP.Previous.Until, a wall-clock
	// time) is compared with; nil: time.Now. Tests inject theirs.
	Now func() time.Time
}

// StatusConfig is where the agent's status goes: the store (every
// Interval) and the metrics listener.
type StatusConfig struct {
	Interval time.Duration // 0: DefaultStatusInterval
	// MetricsListen is the /metrics address ("": off); MetricsToken, if
	// set, is required on it.
	MetricsListen string
	MetricsToken  string
}

// Check validates the configuration (each error names the setting at
// fault, as its flag) and fills in the defaults.
func (c *Config) Check() error {
	if c.Name == "" {
		return fmt.Errorf("agent: no host name (--name)")
	}
	if c.Underlay == "" {
		return fmt.Errorf("agent: no underlay interface (--underlay-if)")
	}
	if c.ICMPRate > dataplane.MaxICMPRate {
		return fmt.Errorf("agent: --icmp-rate %d: at most %d", c.ICMPRate, dataplane.MaxICMPRate)
	}
	if a := c.ICMPSource6; a.IsValid() && (!a.Is6() || a.Is4In6() || a.Zone() != "" || !a.IsGlobalUnicast()) {
		return fmt.Errorf("agent: --icmp-source6 %v: not a global unicast IPv6 address", a)
	}
	if c.EIPMax > dataplane.AgentEIPMaxDefault {
		return fmt.Errorf("agent: --eip-max %d: above the compiled capacity %d, the most an agent holds (0: %d)", c.EIPMax, dataplane.AgentEIPMaxDefault, dataplane.AgentEIPMaxDefault)
	}
	if _, err := PlanLocal(c.LocalAllow); err != nil {
		return err
	}
	if c.Status.Interval < 0 {
		return fmt.Errorf("agent: status interval %v: want a positive duration", c.Status.Interval)
	}
	if c.Status.Interval == 0 {
		c.Status.Interval = DefaultStatusInterval
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

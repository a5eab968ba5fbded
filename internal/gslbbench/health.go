package gslbbench

import (
	"context"
	"net/netip"

	"github.com/azgate/azgate/internal/probe"
)

// health is the serving child's gslb.Health: an internal/probe Monitor
// with a TCP check of every VIP, initially up (what the GSLB role does).
type health struct{ m *probe.Monitor }

func newHealth(p ProbeSettings, vips []netip.Addr) (*health, error) {
	m := probe.NewMonitor(probe.Options{InitialUp: true})
	spec := probe.Spec{Kind: probe.TCP, Port: p.Port, Interval: p.Interval, Timeout: p.Timeout, Rise: p.Rise, Fall: p.Fall}
	var ts []probe.Target
	for _, v := range vips {
		ts = append(ts, probe.Target{Key: "pathd.example/" + v.String(), Addr: v, Spec: spec})
	}
	if err := m.Set(ts); err != nil {
		return nil, err
	}
	return &health{m}, nil
}

func (h *health) Up(a netip.Addr) bool    { return h.m.Up(a) }
func (h *health) Run(ctx context.Context) { h.m.Run(ctx) }

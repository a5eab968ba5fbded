package gslbbench

import (
	"net/netip"

	"github.com/azgate/azgate/internal/probe"
)

// newHealth is the serving child's gslb.Health: an internal/probe Monitor
// (itself a gslb.Health) with a TCP check of every VIP, initially up
// (what the GSLB role does).
func newHealth(p ProbeSettings, vips []netip.Addr) (*probe.Monitor, error) {
	m := probe.NewMonitor(probe.Options{InitialUp: true})
	spec := probe.Spec{Kind: probe.TCP, Port: p.Port, Interval: p.Interval, Timeout: p.Timeout, Rise: p.Rise, Fall: p.Fall}
	var ts []probe.Target
	for _, v := range vips {
		ts = append(ts, probe.Target{Key: "pathd.example/" + v.String(), Addr: v, Spec: spec})
	}
	if err := m.Set(ts); err != nil {
		return nil, err
	}
	return m, nil
}

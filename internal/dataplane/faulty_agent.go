package dataplane

import "net/netip"

// The agent's maps with faults injected (like the load balancer's,
// faulty.go): each write goes through Faults, which may fail it before it
// reaches the map; reads fail only when named by FailNth.

// FaultyAgentConfig injects faults into an AgentConfigMap.
type FaultyAgentConfig struct {
	AgentConfigMap
	F *Faults
}

func (f FaultyAgentConfig) SetConfig(c AgentConfig) error {
	return f.F.write("SetConfig", func() error { return f.AgentConfigMap.SetConfig(c) })
}

// FaultyAgentGroups injects faults into an AgentGroupMap.
type FaultyAgentGroups struct {
	AgentGroupMap
	F *Faults
}

func (f FaultyAgentGroups) SetGroup(idx uint16, g AgentGroup) error {
	return f.F.write("SetGroup", func() error { return f.AgentGroupMap.SetGroup(idx, g) })
}
func (f FaultyAgentGroups) Groups() (map[uint16]AgentGroup, error) {
	if err := f.F.check("Groups", false); err != nil {
		return nil, err
	}
	return f.AgentGroupMap.Groups()
}

// FaultyAgentLocal injects faults into an AgentLocalMap.
type FaultyAgentLocal struct {
	AgentLocalMap
	F *Faults
}

func (f FaultyAgentLocal) SetLocalAllow(p map[netip.Prefix][]LocalRule) error {
	return f.F.write("SetLocalAllow", func() error { return f.AgentLocalMap.SetLocalAllow(p) })
}

// FaultyAgentGuests injects faults into an AgentGuestMap and the health
// checks' guest ports (HealthGuests).
type FaultyAgentGuests struct {
	Inner interface {
		AgentGuestMap
		HealthGuests
	}
	F *Faults
}

func (f FaultyAgentGuests) SetIfAddrs(a []IfAddr) error {
	return f.F.write("SetIfAddrs", func() error { return f.Inner.SetIfAddrs(a) })
}
func (f FaultyAgentGuests) SetHealthGuests(g []HealthGuest) error {
	return f.F.write("SetHealthGuests", func() error { return f.Inner.SetHealthGuests(g) })
}

// FaultyAgentEIPs injects faults into an AgentEIPMap.
type FaultyAgentEIPs struct {
	AgentEIPMap
	F *Faults
}

func (f FaultyAgentEIPs) PutEIP(e AgentEIP) error {
	return f.F.write("PutEIP", func() error { return f.AgentEIPMap.PutEIP(e) })
}
func (f FaultyAgentEIPs) DeleteEIP(a netip.Addr) error {
	return f.F.write("DeleteEIP", func() error { return f.AgentEIPMap.DeleteEIP(a) })
}
func (f FaultyAgentEIPs) ResetEIPStats(idx uint32) error {
	return f.F.write("ResetEIPStats", func() error { return f.AgentEIPMap.ResetEIPStats(idx) })
}
func (f FaultyAgentEIPs) EIPs() (map[netip.Addr]AgentEIP, error) {
	if err := f.F.check("EIPs", false); err != nil {
		return nil, err
	}
	return f.AgentEIPMap.EIPs()
}

// FaultyAgentServices injects faults into an AgentServiceMap.
type FaultyAgentServices struct {
	AgentServiceMap
	F *Faults
}

func (f FaultyAgentServices) PutService(s AgentService) error {
	return f.F.write("PutService", func() error { return f.AgentServiceMap.PutService(s) })
}
func (f FaultyAgentServices) DeleteService(s AgentService) error {
	return f.F.write("DeleteService", func() error { return f.AgentServiceMap.DeleteService(s) })
}
func (f FaultyAgentServices) Services() ([]AgentService, error) {
	if err := f.F.check("Services", false); err != nil {
		return nil, err
	}
	return f.AgentServiceMap.Services()
}

// FaultyAgent is an AgentMaps (and HealthGuests) whose writes fail as F
// says: every map of inner wrapped in its faulty form.
type FaultyAgent struct {
	FaultyAgentConfig
	FaultyAgentGroups
	FaultyAgentLocal
	FaultyAgentGuests
	FaultyAgentEIPs
	FaultyAgentServices
	inner AgentMaps
	F     *Faults
}

var (
	_ AgentMaps    = (*FaultyAgent)(nil)
	_ HealthGuests = (*FaultyAgent)(nil)
)

// NewFaultyAgent wraps an agent data plane (a FakeAgent, or an *Agent in
// privileged tests).
func NewFaultyAgent(inner interface {
	AgentMaps
	HealthGuests
}, f *Faults) *FaultyAgent {
	return &FaultyAgent{FaultyAgentConfig: FaultyAgentConfig{inner, f}, FaultyAgentGroups: FaultyAgentGroups{inner, f},
		FaultyAgentLocal: FaultyAgentLocal{inner, f}, FaultyAgentGuests: FaultyAgentGuests{inner, f},
		FaultyAgentEIPs: FaultyAgentEIPs{inner, f}, FaultyAgentServices: FaultyAgentServices{inner, f}, inner: inner, F: f}
}

// Stats reads the inner data plane's counters (never failed).
func (f *FaultyAgent) Stats() (map[string]Count, error) { return f.inner.Stats() }

package model

import (
	"fmt"
	"net/netip"
	"time"
)

// KindDDoSPolicy is the kind of DDoSPolicy objects.
const KindDDoSPolicy = "ddospolicies"

// DDoSPolicyRegion names the region-wide DDoS policy.
const DDoSPolicyRegion = "region"

// Bounds of a DDoS policy.
const (
	MaxDDoSPPS       = 10_000_000_000     // packets/s and SYN/s
	MaxDDoSBPS       = 10_000_000_000_000 // bit/s (10 Tbit/s)
	MaxDDoSAddresses = 4096               // per-address entries of the region policy
	MaxDDoSEnter     = 1000               // rounds
	MaxDDoSCooldown  = 24 * time.Hour
	MaxDDoSFactor    = 1000
)

// DDoSPolicy sets the controller's DDoS detection (docs/ddos.md) at run
// time. The policy named "region" is the region-wide one; a policy named
// after an edge set (a prefix or a dedicated set) overrides the thresholds
// of the EIPs that set serves (a quarantined EIP is judged by the policy of
// the set it came from). A field left out inherits: a set policy's from
// the region policy, the region policy's from the controller's --ddos-*
// flags. Later fields (per-address cool-downs, baselines: issue 22) are
// added to DDoSThresholds and DDoSAddress without changing these.
type DDoSPolicy struct {
	Name string `json:"name"`
	// Thresholds: the absolute trigger levels.
	Thresholds DDoSThresholds `json:"thresholds,omitzero"`

	// The rest is the region policy's only (one detector judges every
	// address by them).

	// BaselineFactor: the trigger level is max(threshold, this × the
	// EIP's baseline); at least 1.
	BaselineFactor float64 `json:"baselineFactor,omitempty"`
	// BaselineWeight: the weight of one round in the baseline's moving
	// average, (0, 1].
	BaselineWeight float64 `json:"baselineWeight,omitempty"`
	// EnterRounds: consecutive rounds above the trigger level before a
	// quarantine.
	EnterRounds int `json:"enterRounds,omitempty"`
	// ReleaseFraction: every rate must stay below this fraction of its
	// trigger level for the cool-down before a release, (0, 1].
	ReleaseFraction float64 `json:"releaseFraction,omitempty"`
	// Cooldown: how long a quarantined EIP must stay calm.
	Cooldown Duration `json:"cooldown,omitempty"`
	// Addresses: thresholds of single EIPs, over their set's and the
	// region's.
	Addresses []DDoSAddress `json:"addresses,omitempty"`
	// Description is free text (why these levels).
	Description string `json:"description,omitempty"`
}

// DDoSThresholds are trigger levels per rate: 0 (left out) inherits, -1
// turns the rate's check off, anything else is the level.
type DDoSThresholds struct {
	// PPS in packets/s, BPS in bit/s, SYNPS in TCP SYNs (without ACK)/s.
	PPS   int64 `json:"pps,omitempty"`
	BPS   int64 `json:"bps,omitempty"`
	SYNPS int64 `json:"synps,omitempty"`
}

// DDoSAddress is one EIP's entry of the region policy.
type DDoSAddress struct {
	Address    netip.Addr     `json:"address"`
	Thresholds DDoSThresholds `json:"thresholds"`
}

func (p *DDoSPolicy) Key() string { return p.Name }

// IsZero: no threshold set (all inherited).
func (t DDoSThresholds) IsZero() bool { return t == DDoSThresholds{} }

// AllOff: every rate's check is off.
func (t DDoSThresholds) AllOff() bool { return t.PPS == -1 && t.BPS == -1 && t.SYNPS == -1 }

func (t DDoSThresholds) validate(es *Errors, f string) {
	one := func(name string, v, maxV int64, unit string) {
		switch {
		case v == 0 || v == -1:
		case v < 0:
			es.add(f+"."+name, "%d: a threshold is a positive number of %s, -1 (not checked) or left out (inherited)", v, unit)
		case v > maxV:
			es.add(f+"."+name, "%d %s: at most %d", v, unit, maxV)
		}
	}
	one("pps", t.PPS, MaxDDoSPPS, "packets/s")
	one("bps", t.BPS, MaxDDoSBPS, "bit/s")
	one("synps", t.SYNPS, MaxDDoSPPS, "SYN/s")
	if t.AllOff() {
		es.add(f, "every threshold is -1 (off): nothing could trigger a quarantine")
	}
}

// Validate checks the policy on its own: every error names its field.
func (p *DDoSPolicy) Validate() Errors {
	var es Errors
	checkName(&es, "name", p.Name)
	p.Thresholds.validate(&es, "thresholds")
	if len(p.Description) > 1024 {
		es.add("description", "%d bytes: at most 1024", len(p.Description))
	}
	region := p.Name == DDoSPolicyRegion
	regionOnly := func(field string, set bool) {
		if set && !region {
			es.add(field, "set only in the %q policy (a set policy overrides thresholds only)", DDoSPolicyRegion)
		}
	}
	regionOnly("baselineFactor", p.BaselineFactor != 0)
	regionOnly("baselineWeight", p.BaselineWeight != 0)
	regionOnly("enterRounds", p.EnterRounds != 0)
	regionOnly("releaseFraction", p.ReleaseFraction != 0)
	regionOnly("cooldown", p.Cooldown != 0)
	regionOnly("addresses", len(p.Addresses) > 0)
	if p.BaselineFactor != 0 && (p.BaselineFactor < 1 || p.BaselineFactor > MaxDDoSFactor) {
		es.add("baselineFactor", "%v: want 1..%d", p.BaselineFactor, MaxDDoSFactor)
	}
	if p.BaselineWeight != 0 && (p.BaselineWeight < 0 || p.BaselineWeight > 1) {
		es.add("baselineWeight", "%v: want a fraction in (0, 1]", p.BaselineWeight)
	}
	if p.EnterRounds != 0 && (p.EnterRounds < 1 || p.EnterRounds > MaxDDoSEnter) {
		es.add("enterRounds", "%d: want 1..%d rounds", p.EnterRounds, MaxDDoSEnter)
	}
	if p.ReleaseFraction != 0 && (p.ReleaseFraction < 0 || p.ReleaseFraction > 1) {
		es.add("releaseFraction", "%v: want a fraction in (0, 1]", p.ReleaseFraction)
	}
	if c := time.Duration(p.Cooldown); c != 0 && (c < time.Second || c > MaxDDoSCooldown) {
		es.add("cooldown", "%v: want 1s..%v", c, MaxDDoSCooldown)
	}
	if len(p.Addresses) > MaxDDoSAddresses {
		es.add("addresses", "%d entries: at most %d", len(p.Addresses), MaxDDoSAddresses)
		return es
	}
	seen := make(map[netip.Addr]int, len(p.Addresses))
	for i, a := range p.Addresses {
		f := fmt.Sprintf("addresses[%d]", i)
		if !isUnicast4(a.Address) {
			es.add(f+".address", "%v is not a usable IPv4 unicast address", a.Address)
		} else if j, dup := seen[a.Address]; dup {
			es.add(f+".address", "%v is listed twice (addresses[%d])", a.Address, j)
		} else {
			seen[a.Address] = i
		}
		if a.Thresholds.IsZero() {
			es.add(f+".thresholds", "sets nothing: give pps, bps or synps (or leave the address out)")
		}
		a.Thresholds.validate(&es, f+".thresholds")
	}
	return es
}

// checkDDoSPolicy: a set policy names an edge set that exists and is not
// the quarantine set.
func (s *State) checkDDoSPolicy(p, _ *DDoSPolicy, _ bool) Errors {
	if p.Name == DDoSPolicyRegion {
		return nil
	}
	var es Errors
	set, ok := s.EdgeSets[p.Name]
	switch {
	case !ok:
		es.add("name", "no edge set %q: a DDoS policy is named %q or after an edge set", p.Name, DDoSPolicyRegion)
	case set.Role == RoleQuarantine:
		es.add("name", "%q is the quarantine set: a quarantined EIP is judged by the policy of the set it came from", p.Name)
	}
	return es
}

// checkDDoSPolicyRefs refuses to delete an edge set a DDoS policy is named
// after.
func (s *State) checkDDoSPolicyRefs(set string) error {
	if _, ok := s.DDoSPolicies[set]; ok {
		return &ConflictError{Msg: fmt.Sprintf("edge set %s has a DDoS policy: delete it first (azgate ddos policy delete %s)", set, set)}
	}
	return nil
}

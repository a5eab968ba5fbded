package edge

import (
	"fmt"
	"net/netip"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/fwplan"
	"github.com/azgate/azgate/internal/model"
)

// putFirewall records (o != nil) or forgets a firewall rule.
func (x *index) putFirewall(name string, o *model.FirewallRule) {
	if old, ok := x.fw[name]; ok {
		if old.Address.IsValid() {
			if x.fwAddrs[old.Address]--; x.fwAddrs[old.Address] <= 0 {
				delete(x.fwAddrs, old.Address)
			}
		}
		if old.Set != "" {
			x.fwSets--
		}
		delete(x.fw, name)
	}
	if o == nil {
		return
	}
	x.fw[name] = o
	if o.Address.IsValid() {
		x.fwAddrs[o.Address]++
	}
	if o.Set != "" {
		x.fwSets++
	}
}

// fwTouches reports whether a change of EIP a may change the firewall's
// plan: a rule names it, or a set rule may now reach it.
func (x *index) fwTouches(a netip.Addr) bool { return x.fwSets > 0 || x.fwAddrs[a] > 0 }

// fwInput is the planner's input: every rule, and the destinations set
// and address rules may reach (every routed EIP and VIP when set rules
// exist, else only the addresses rules name).
func (x *index) fwInput(slots map[string]uint32) fwplan.Input {
	in := fwplan.Input{Slots: slots, Rules: make([]*model.FirewallRule, 0, len(x.fw))}
	for _, r := range x.fw {
		in.Rules = append(in.Rules, r)
	}
	vips := map[netip.Addr]*model.Service{}
	for _, v := range x.services {
		if v.VIP.IsValid() {
			vips[v.VIP] = v // IPv4 and IPv6 VIPs (issue 21)
		}
	}
	if x.fwSets > 0 {
		for k := range x.eips {
			in.Dests = append(in.Dests, netip.AddrFrom4(k))
		}
		for k := range x.eips6 {
			in.Dests = append(in.Dests, netip.AddrFrom16(k))
		}
		for a := range vips {
			in.Dests = append(in.Dests, a)
		}
	} else {
		for a := range x.fwAddrs {
			if vips[a] != nil {
				in.Dests = append(in.Dests, a)
				continue
			}
			if a.Is6() {
				if _, eip := x.eips6[a.As16()]; eip {
					in.Dests = append(in.Dests, a)
				}
				continue
			}
			if _, eip := x.eips[a.As4()]; eip {
				in.Dests = append(in.Dests, a)
			}
		}
	}
	in.Serves = func(name string, a netip.Addr) bool {
		set, ok := x.sets[name]
		if !ok {
			return false
		}
		if a.Is6() {
			// An IPv6 EIP or VIP (issue 21): as an IPv4 one.
			switch set.Role {
			case model.RoleDedicated:
				if v := vips[a]; v != nil {
					return v.Set == name
				}
				return x.pulled6[a.As16()] == name
			case model.RoleQuarantine:
				return x.quarantined6[a.As16()]
			}
			return set.Contains(a)
		}
		switch set.Role {
		case model.RoleDedicated:
			if v := vips[a]; v != nil {
				return v.Set == name
			}
			return x.pulled[a.As4()] == name
		case model.RoleQuarantine:
			return x.quarantined[a.As4()]
		}
		return set.Contains(a)
	}
	return in
}

// syncFirewall programs the firewall (docs/dataplane.md, "Firewall") when
// something it depends on changed, by the diff from the plan last
// programmed (none after a start or a failed write: everything is written
// and the rest pruned). A plan the maps cannot hold (too many rules
// overlapping at a source) is reported in the status and the firewall
// programmed before stays: it is not a failure of the data plane. Only
// with a data plane that has the firewall (dataplane.FirewallMaps).
func (r *Reconciler) syncFirewall() error {
	fm, ok := r.maps.(dataplane.FirewallMaps)
	if !ok || !r.fwDirty {
		return nil
	}
	var slots map[string]uint32
	if r.fwPlan != nil {
		slots = r.fwPlan.Slots
	}
	p, err := fwplan.Build(r.idx.fwInput(slots))
	if err != nil {
		r.fwErr = err.Error()
		r.fwDirty = false
		r.log.Warn("firewall not programmed: the rules do not fit the data plane; the previous firewall stays", "err", err)
		return nil
	}
	r.fwErr = ""
	d := p.Compare(r.fwPlan)
	if d.Empty() {
		r.fwDirty = false
		return nil
	}
	if err := fm.ApplyFirewall(d); err != nil {
		r.fwPlan = nil // the maps hold part of it: write all next time
		return fmt.Errorf("firewall: %w", err)
	}
	r.fwPlan, r.fwDirty = p, false
	return nil
}

// maxStatusRules bounds the firewall counters in the status (one map
// read per rule).
const maxStatusRules = 4096

// firewallStatus reads each rule's counters (nil above maxStatusRules).
func (r *Reconciler) firewallStatus() map[string]model.Count {
	fm, ok := r.maps.(dataplane.FirewallMaps)
	if !ok || r.fwPlan == nil || len(r.fwPlan.Slots) == 0 || len(r.fwPlan.Slots) > maxStatusRules {
		return nil
	}
	out := make(map[string]model.Count, len(r.fwPlan.Slots))
	for name, i := range r.fwPlan.Slots {
		if c, err := fm.FirewallStats(i); err == nil {
			out[name] = model.Count(c)
		}
	}
	return out
}

package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// Rules: pure functions of model values that decide the narrow edits and
// build the answers the Core returns. They take no lock and do no I/O
// (rules_test.go tests them by table); the Core calls them on copies of
// the stored objects inside a write (modify) or on what it read.

// addGuestTo adds guest g to host h unless h has one of that name.
func addGuestTo(h *model.Host, g model.Guest) error {
	if _, dup := h.Guest(g.Name); dup {
		return &ConflictError{Msg: fmt.Sprintf("host %q already has a guest %q", h.Name, g.Name)}
	}
	h.Guests = append(h.Guests, g)
	return nil
}

// removeGuestFrom removes guest name from host h: not while an EIP is
// bound to it nor while it is a backend of a service of st.
func removeGuestFrom(st *model.State, h *model.Host, name string) error {
	if _, ok := h.Guest(name); !ok {
		return &NotFoundError{Msg: fmt.Sprintf("host %q has no guest %q", h.Name, name)}
	}
	if eip, bound := st.BoundEIP(h.Name, name); bound {
		return &model.ConflictError{Msg: fmt.Sprintf("guest %s/%s is bound to EIP %s: unbind it first", h.Name, name, eip)}
	}
	if svcs := st.BackendOf(h.Name, name); len(svcs) > 0 {
		return &model.ConflictError{Msg: fmt.Sprintf("guest %s/%s is a backend of service %s: remove it from the pools first", h.Name, name, strings.Join(svcs, ", "))}
	}
	h.Guests = slices.DeleteFunc(h.Guests, func(g model.Guest) bool { return g.Name == name })
	return nil
}

// findPool finds pool name of service v.
func findPool(v *model.Service, name string) (*model.Pool, error) {
	p, _ := v.Pool(name)
	if p == nil {
		var names []string
		for _, p := range v.Pools {
			names = append(names, p.Name)
		}
		return nil, &NotFoundError{Msg: fmt.Sprintf("service %q has no pool %q (pools: %s)", v.Name, name, strings.Join(names, ", "))}
	}
	return p, nil
}

// findBackend finds the backend of pool with key.
func findBackend(v *model.Service, pool, key string) (*model.Pool, int, error) {
	p, err := findPool(v, pool)
	if err != nil {
		return nil, 0, err
	}
	i, ok := p.Backend(key)
	if !ok {
		return nil, 0, &NotFoundError{Msg: fmt.Sprintf("pool %q of service %q has no backend %q (keys are host/guest[:port] or address[:port])", p.Name, v.Name, key)}
	}
	return p, i, nil
}

// addBackendTo adds backend b to pool of service v unless the pool has
// one with its key.
func addBackendTo(v *model.Service, pool string, b model.Backend) error {
	p, err := findPool(v, pool)
	if err != nil {
		return err
	}
	if _, dup := p.Backend(b.Key()); dup {
		return &ConflictError{Msg: fmt.Sprintf("pool %q of service %q already has backend %s (POST .../backends/KEY/weight changes its weight)", p.Name, v.Name, b.Key())}
	}
	p.Backends = append(p.Backends, b)
	return nil
}

// removeBackendFrom removes the backend with key from pool of service v.
func removeBackendFrom(v *model.Service, pool, key string) error {
	p, i, err := findBackend(v, pool, key)
	if err != nil {
		return err
	}
	p.Backends = slices.Delete(p.Backends, i, i+1)
	return nil
}

// setBackendWeight sets the weight of a backend (0 drains it).
func setBackendWeight(v *model.Service, pool, key string, w uint32) error {
	p, i, err := findBackend(v, pool, key)
	if err != nil {
		return err
	}
	p.Backends[i].Weight = &w // a new pointer: the stored service shares the old one
	return nil
}

// addPackageMember adds EIP pe to bandwidth package p unless it is one.
func addPackageMember(p *model.BandwidthPackage, pe model.PackageEIP) error {
	if slices.ContainsFunc(p.EIPs, func(e model.PackageEIP) bool { return e.Address == pe.Address }) {
		return &ConflictError{Msg: fmt.Sprintf("bandwidth package %q already has EIP %v", p.Name, pe.Address)}
	}
	p.EIPs = append(p.EIPs, pe)
	return nil
}

// removePackageMember removes EIP addr from bandwidth package p.
func removePackageMember(p *model.BandwidthPackage, addr netip.Addr) error {
	n := len(p.EIPs)
	p.EIPs = slices.DeleteFunc(p.EIPs, func(e model.PackageEIP) bool { return e.Address == addr })
	if len(p.EIPs) == n {
		return &NotFoundError{Msg: fmt.Sprintf("bandwidth package %q has no EIP %v", p.Name, addr)}
	}
	return nil
}

// addZoneRecordTo adds a static record to zone z unless it has the same
// name, type and value.
func addZoneRecordTo(z *model.DNSZone, rec model.ZoneRecord) error {
	if slices.ContainsFunc(z.Records, func(o model.ZoneRecord) bool {
		return o.Name == rec.Name && o.Type == rec.Type && o.Value == rec.Value
	}) {
		return &ConflictError{Msg: fmt.Sprintf("DNS zone %q already has the record %s %s %s", z.Name, rec.Name, rec.Type, rec.Value)}
	}
	z.Records = append(z.Records, rec)
	return nil
}

// addGSLBTargetTo adds target tg to GSLB record g unless it has its VIP.
func addGSLBTargetTo(g *model.GSLBRecord, tg model.GSLBTarget) error {
	if slices.ContainsFunc(g.Targets, func(o model.GSLBTarget) bool { return o.VIP == tg.VIP }) {
		return &ConflictError{Msg: fmt.Sprintf("GSLB record %q already has a target %v", g.Name, tg.VIP)}
	}
	g.Targets = append(g.Targets, tg)
	return nil
}

// removeGSLBTargetFrom removes the target with vip from GSLB record g.
func removeGSLBTargetFrom(g *model.GSLBRecord, vip netip.Addr) error {
	n := len(g.Targets)
	g.Targets = slices.DeleteFunc(g.Targets, func(o model.GSLBTarget) bool { return o.VIP == vip })
	if len(g.Targets) == n {
		return &NotFoundError{Msg: fmt.Sprintf("GSLB record %q has no target %v", g.Name, vip)}
	}
	return nil
}

// edgeStatus is an edge's published status, by name, or why it could not
// be read.
type edgeStatus struct {
	name   string
	status model.NodeStatus
	err    error
}

// statusInput is what a service's status is merged from: the view's
// objects at rev, the edges expected to serve it (those of the sets
// covering its VIP), the edges' health reports on it (by pool and
// backend, each list ordered by edge) and their published statuses (in
// the store's order), and the errors met reading the reports and
// statuses.
type statusInput struct {
	svc      *model.Service
	health   *model.Health
	rev      int64
	expected []string
	reports  map[string]map[string][]edgeReport
	edges    []edgeStatus
	errors   []string
}

// mergeServiceStatus builds a service's status: per backend its weight,
// the verdict and every edge's report; per pool the table each edge
// reports (model.NodeStatus.Tables) and whether they agree. The edges
// listed for a pool are the expected ones and any other that reports a
// table for it; one without a status or without the table disagrees, and
// a pool nobody holds a table for does not agree either. An edge's errors
// about the service ("service NAME ...") are passed on, named by edge.
func mergeServiceStatus(in statusInput) api.ServiceStatus {
	name, svc, h := in.svc.Name, in.svc, in.health
	out := api.ServiceStatus{Revision: in.rev, Service: svc, Health: h, Errors: in.errors, Pools: []api.PoolStatus{}}
	edges := map[string]model.NodeStatus{}
	for _, e := range in.edges {
		if e.err != nil {
			out.Errors = append(out.Errors, e.err.Error())
			continue
		}
		for _, msg := range e.status.Errors { // e.g. a health command the edge does not list
			if strings.HasPrefix(msg, "service "+name+" ") {
				out.Errors = append(out.Errors, "edge "+e.name+": "+msg)
			}
		}
		edges[e.name] = e.status
	}

	out.Agree = true
	for _, p := range svc.Pools {
		ps := api.PoolStatus{Name: p.Name, Backends: []api.BackendStatus{}, Tables: []api.EdgeTable{}}
		for _, b := range p.Backends {
			k := b.Key()
			bs := api.BackendStatus{Key: k, Weight: b.W(), Down: h.IsDown(p.Name, k)}
			for _, er := range in.reports[p.Name][k] {
				if er.r.Up {
					bs.UpVotes++
				} else {
					bs.DownVotes++
				}
				bs.Reports = append(bs.Reports, api.EdgeReport{Edge: er.edge, HealthReport: er.r})
			}
			ps.Backends = append(ps.Backends, bs)
		}
		tk := model.TableKey(name, p.Name)
		names := map[string]bool{}
		for _, e := range in.expected {
			names[e] = true
		}
		for e, ns := range edges {
			if _, has := ns.Tables[tk]; has {
				names[e] = true
			}
		}
		order := make([]string, 0, len(names))
		for e := range names {
			order = append(order, e)
		}
		sort.Strings(order)
		agree, held, first := true, 0, ""
		for _, e := range order {
			et := api.EdgeTable{Edge: e}
			ns, has := edges[e]
			if !has {
				et.Missing = "no status"
				agree = false
				ps.Tables = append(ps.Tables, et)
				continue
			}
			et.AppliedRevision, et.Updated = ns.AppliedRevision, ns.Updated
			ts, has := ns.Tables[tk]
			switch {
			case !has:
				et.Missing = "no table"
				agree = false
			default:
				et.TableStatus = ts
				if held == 0 {
					first = ts.Checksum
				} else if ts.Checksum != first {
					agree = false
				}
				held++
			}
			ps.Tables = append(ps.Tables, et)
		}
		ps.Agree = agree && held > 0
		out.Agree = out.Agree && ps.Agree
		out.Pools = append(out.Pools, ps)
	}
	return out
}

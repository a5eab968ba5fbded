package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/azgate/azgate/internal/model"
)

// Guards: changes that take the whole region, a whole kind or a last unit
// out of service are refused unless the writer says force (the API's
// force=true, the CLI's --force). The checks live here, in the
// transaction every write goes through (txn.put and txn.delete), so the
// API enforces them for every client and every path (create, replace,
// narrow edits, apply). The refusal (a ForceError, 409) says what the
// change would do. Warnings (duplicate and contradictory firewall rules,
// DNS data not fully qualified) never refuse; they come back with the
// write's answer.

// WriteOptions are a write's options, carried by its context (every
// write method of the Core takes one).
type WriteOptions struct {
	// Force does what the guards refuse.
	Force bool
	// DryRun checks everything a write checks (validation, the state's
	// references, the guards) and writes nothing; the answer says what
	// the write would have done at the view's revision.
	DryRun bool
}

type writeOptsKey struct{}

// WithWriteOptions returns ctx carrying o for the writes made with it.
func WithWriteOptions(ctx context.Context, o WriteOptions) context.Context {
	return context.WithValue(ctx, writeOptsKey{}, o)
}

func writeOptions(ctx context.Context) WriteOptions {
	o, _ := ctx.Value(writeOptsKey{}).(WriteOptions)
	return o
}

// Bounds of the guards' reports.
const (
	maxRefusals = 20
	maxWarnings = 100
	// maxRuleWork bounds the firewall duplicate checks of one write (a
	// document may hold MaxFirewallRules rules of MaxFirewallSources
	// sources): every rule looked at and every pair of source prefixes
	// compared is one unit.
	maxRuleWork = 1 << 24
)

// refuse records what the change would do, refused without force.
func (t *txn) refuse(format string, args ...any) {
	t.refusals = append(t.refusals, fmt.Sprintf(format, args...))
}

// warn records a warning, up to maxWarnings.
func (t *txn) warn(format string, args ...any) {
	switch n := len(t.warnings); {
	case n < maxWarnings:
		t.warnings = append(t.warnings, fmt.Sprintf(format, args...))
	case n == maxWarnings:
		t.warnings = append(t.warnings, fmt.Sprintf("more warnings not listed (at most %d are)", maxWarnings))
	}
}

// guardPut checks a put of o over old (nil: o is new); called by put
// before o is in the state.
func (t *txn) guardPut(old, o model.Object) {
	switch n := o.(type) {
	case *model.FirewallRule:
		o, _ := old.(*model.FirewallRule)
		if n.Action == model.FirewallAllow && n.Global() && (o == nil || o.Action != model.FirewallAllow || !o.Global()) {
			t.refuse("firewall rule %q is a global allow rule: every EIP (%d) and VIP (%d) of the region gets an allow list, and those without one become private, reachable only from %s",
				n.Name, len(t.st.EIPs), len(t.st.Services), prefixList(n.Sources))
		}
		t.checkRule(n)
	case *model.EdgeSet:
		o, _ := old.(*model.EdgeSet)
		if o != nil && serving(o) > 0 && serving(n) == 0 {
			t.refuse("edge set %q would have no serving edge (every edge drained or removed): it announces nothing and the addresses it serves become unreachable through it",
				n.Name)
		}
	case *model.Service:
		o, _ := old.(*model.Service)
		if o == nil {
			return
		}
		if o.VIP != n.VIP {
			// Moving off the VIP leaves it serving nothing, as a delete.
			t.guardVIP(o.VIP, n.Name)
		}
		for _, p := range n.Pools {
			op, _ := o.Pool(p.Name)
			if op != nil && servingBackends(op) > 0 && servingBackends(&p) == 0 {
				t.refuse("pool %q of service %q would have no serving backend (the last one drained or removed): new connections to its listeners fail", p.Name, n.Name)
			}
		}
	case *model.DNSZone:
		o, _ := old.(*model.DNSZone)
		for _, r := range n.Records {
			if notQualified(r) && (o == nil || !slices.Contains(o.Records, r)) {
				t.warn("DNS zone %q: record %s %s: %q has no trailing dot: it is a name relative to the zone, %q", n.Name, r.Name, r.Type, r.Value, r.Value+"."+strings.TrimSuffix(n.Name, ".")+".")
			}
		}
	}
}

// guardDelete checks the deletion of an object of the state.
func (t *txn) guardDelete(kind, key string) {
	if kind != model.KindService {
		return
	}
	svc, ok := t.st.Services[key]
	if !ok {
		return
	}
	t.guardVIP(svc.VIP, key)
}

// guardVIP refuses taking the VIP of a service out of service (deleting
// the service or moving it to another VIP) while GSLB records target it.
func (t *txn) guardVIP(vip netip.Addr, service string) {
	var recs []string
	for _, r := range t.st.GSLBRecords {
		for _, tg := range r.Targets {
			if tg.VIP == vip {
				recs = append(recs, r.Name)
				break
			}
		}
	}
	if len(recs) > 0 {
		slices.Sort(recs)
		t.refuse("the VIP %v of service %q is a target of GSLB record(s) %s: they would answer with an address that serves nothing", vip, service, strings.Join(firstN(recs, 5), ", "))
	}
}

// checkRefusals fails with a ForceError when the change was refused and
// the writer did not say force.
func (t *txn) checkRefusals() error {
	if len(t.refusals) == 0 || t.force {
		return nil
	}
	return &ForceError{Reasons: t.refusals}
}

func serving(s *model.EdgeSet) int {
	n := 0
	for _, e := range s.Edges {
		if !e.Drained {
			n++
		}
	}
	return n
}

func servingBackends(p *model.Pool) int {
	n := 0
	for _, b := range p.Backends {
		if b.W() > 0 {
			n++
		}
	}
	return n
}

// notQualified: a record whose data is a name (CNAME, NS, MX, SRV, PTR)
// without the trailing dot.
func notQualified(r model.ZoneRecord) bool {
	switch strings.ToUpper(r.Type) {
	case "CNAME", "NS", "PTR", "MX", "SRV":
	default:
		return false
	}
	f := strings.Fields(r.Value)
	return len(f) > 0 && f[len(f)-1] != "@" && !strings.HasSuffix(f[len(f)-1], ".")
}

// checkRule warns about rules of the same destination that duplicate or
// contradict r (deny wins over allow whatever the prefixes).
func (t *txn) checkRule(r *model.FirewallRule) {
	if t.ruleWork > maxRuleWork {
		return
	}
	for _, o := range t.st.FirewallRules {
		if !t.ruleSpend(1) {
			return
		}
		if o.Name == r.Name || o.Set != r.Set || o.Address != r.Address {
			continue
		}
		olo, ohi := o.Ports()
		rlo, rhi := r.Ports()
		if !(olo <= rhi && rlo <= ohi) || !(o.IPProto() == 0 || r.IPProto() == 0 || o.IPProto() == r.IPProto()) {
			continue
		}
		if !t.ruleSpend(len(o.Sources) * len(r.Sources)) {
			return
		}
		src, ok := overlap(o.Sources, r.Sources)
		if !ok {
			continue
		}
		switch {
		case o.Action == r.Action && o.IPProto() == r.IPProto() && olo == rlo && ohi == rhi && samePrefixes(o.Sources, r.Sources):
			t.warn("firewall rule %q duplicates rule %q (same action, destination, protocol, ports and sources)", r.Name, o.Name)
		case o.Action != r.Action:
			t.warn("firewall rules %q (%s) and %q (%s) contradict each other for sources in %v to %s: the deny rule wins", r.Name, r.Action, o.Name, o.Action, src, dest(r))
		}
	}
}

// ruleSpend takes n units of the checks' budget; false once it is spent
// (the first time with a warning saying so).
func (t *txn) ruleSpend(n int) bool {
	t.ruleWork += n
	if t.ruleWork <= maxRuleWork {
		return true
	}
	if !t.ruleStopped {
		t.ruleStopped = true
		t.warn("firewall: duplicate and contradiction checks stopped after %d units of work (rules looked at, source prefix pairs compared): the rules after that were not checked", maxRuleWork)
	}
	return false
}

// overlap finds a prefix of a that overlaps one of b (the smaller one).
func overlap(a, b []netip.Prefix) (netip.Prefix, bool) {
	for _, x := range a {
		for _, y := range b {
			if x.Overlaps(y) {
				if x.Bits() >= y.Bits() {
					return x, true
				}
				return y, true
			}
		}
	}
	return netip.Prefix{}, false
}

func samePrefixes(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	set := make(map[netip.Prefix]bool, len(a))
	for _, p := range a {
		set[p.Masked()] = true
	}
	for _, p := range b {
		if !set[p.Masked()] {
			return false
		}
	}
	return true
}

func dest(r *model.FirewallRule) string {
	switch {
	case r.Address.IsValid():
		return r.Address.String()
	case r.Set != "":
		return "edge set " + r.Set
	}
	return "every EIP and VIP"
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, 0, len(ps))
	for _, p := range firstN(ps, 5) {
		s = append(s, p.String())
	}
	if len(ps) > 5 {
		s = append(s, fmt.Sprintf("and %d more", len(ps)-5))
	}
	return strings.Join(s, ", ")
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

package edge

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// Rate limits (docs/dataplane.md, "Rate limits"): every EIP's and
// service VIP's limits from the model, programmed into the data plane's
// per-address table. plan and diff are pure; syncLimits applies.

// limitsOf turns the model's limits into the data plane's, normalised.
func limitsOf(l *model.Limits) dataplane.Limits {
	if l == nil {
		return dataplane.Limits{}
	}
	return dataplane.Limits{SourcePPS: l.SourcePPS, SourceBurst: l.SourceBurst, SYNRate: l.SYNRate, SYNBurst: l.SYNBurst}.Normal()
}

// planLimits is what the tables must hold: the limits of every EIP that
// has some (IPv4 and IPv6: edge_limits, edge_limits6), then of every
// service VIP (a VIP's win should an EIP have the same address, which
// validation of the state refuses; IPv6 VIPs' go to edge_limits6).
func planLimits(eips map[[4]byte]model.Limits, eips6 map[[16]byte]model.Limits, services map[string]*model.Service) map[netip.Addr]dataplane.Limits {
	want := make(map[netip.Addr]dataplane.Limits, len(eips)+len(eips6))
	for k, l := range eips {
		if dl := limitsOf(&l); !dl.IsZero() {
			want[netip.AddrFrom4(k)] = dl
		}
	}
	for k, l := range eips6 {
		if dl := limitsOf(&l); !dl.IsZero() {
			want[netip.AddrFrom16(k)] = dl
		}
	}
	for _, s := range services {
		if dl := limitsOf(s.Limits); !dl.IsZero() && s.VIP.IsValid() {
			want[s.VIP] = dl
		}
	}
	return want
}

// diffLimits is what turns have into want: the entries to write (new or
// changed) and the addresses to clear, sorted.
func diffLimits(want, have map[netip.Addr]dataplane.Limits) (put map[netip.Addr]dataplane.Limits, del []netip.Addr) {
	put = map[netip.Addr]dataplane.Limits{}
	for a, l := range want {
		if h, ok := have[a]; !ok || h.Normal() != l {
			put[a] = l
		}
	}
	for a := range have {
		if _, ok := want[a]; !ok {
			del = append(del, a)
		}
	}
	slices.SortFunc(del, func(x, y netip.Addr) int { return x.Compare(y) })
	return put, del
}

// syncLimits programs the rate limits when they differ from what was
// programmed (read back from the data plane after a restart or a failed
// write). Only with a data plane that has the table (dataplane.LimitMaps).
func (r *Reconciler) syncLimits() error {
	lm, ok := r.maps.(dataplane.LimitMaps)
	if !ok {
		return nil
	}
	want := planLimits(r.idx.limits, r.idx.limits6, r.idx.services)
	if r.limits != nil && maps.Equal(want, r.limits) {
		return nil
	}
	have := r.limits
	if have == nil {
		var err error
		if have, err = lm.Limits(); err != nil {
			return fmt.Errorf("read rate limits: %w", err)
		}
	}
	// More addresses than the table holds: refused before any write, so
	// the table keeps the limits it had rather than a part of the plan.
	if n := r.cfg.limitsMax(); len(want) > n {
		return fmt.Errorf("rate limits: %d addresses have limits, the edge holds %d", len(want), n)
	}
	put, del := diffLimits(want, have)
	r.limits = nil // unknown until every write succeeded
	// Removals first: with a full table, the new addresses need the room
	// the removed ones leave (put first, each commit would fail on the
	// same write and never get to the removals).
	for _, a := range del {
		if err := lm.DeleteLimits(a); err != nil {
			return fmt.Errorf("remove the rate limits of %v: %w", a, err)
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(put), func(x, y netip.Addr) int { return x.Compare(y) }) {
		if err := lm.PutLimits(a, put[a]); err != nil {
			return fmt.Errorf("rate limits of %v: %w", a, err)
		}
	}
	r.limits = want
	return nil
}

// LimitedAddrs lists the addresses with rate limits as last programmed
// (for the status: what each one's limits dropped).
func (r *Reconciler) LimitedAddrs() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.SortedFunc(maps.Keys(r.limits), func(x, y netip.Addr) int { return x.Compare(y) })
}

package model

import (
	"fmt"
	"net/netip"
)

// Budgets of Maglev tables (issue 17). Every edge of a set builds and holds
// the tables of the services its set serves: TableSize 4-byte slots per
// pool in the data plane, and while building several times that in the
// edge's heap (maglev's permutation walk). One service of 4 pools at
// MaxTableSize took every edge from 0.85 GB to 2 GB and 56 s of CPU, so
// the sum is bounded, per set and per region, against the whole State.
const (
	// MaxSetTableSlots bounds the slots of the services one edge set
	// builds (its prefix set's services, or those pulled out into it):
	// 8,388,608 slots, 32 MiB of tables in each of its edges' data plane.
	MaxSetTableSlots = 1 << 23
	// MaxRegionTableSlots bounds the slots of every service of the
	// region: 33,554,432 slots (128 MiB).
	MaxRegionTableSlots = 1 << 25
	// TableSlotBytes is what a slot costs in the data plane's table map.
	TableSlotBytes = 4
)

// budgetSets are the sets whose edges build v's tables and whose budget
// it counts against: the prefix set that covers its VIP (the longest
// prefix, as upstream routes it) and the dedicated set it is pulled out
// into. (A quarantined VIP is also built by the quarantine set's edges
// while quarantined; quarantine is an emergency measure and is not
// refused for a budget.)
func (s *State) budgetSets(v *Service) []string {
	var out []string
	if home := s.prefixSetOf(v.VIP); home != "" {
		out = append(out, home)
	}
	if v.Set != "" && (len(out) == 0 || out[0] != v.Set) {
		out = append(out, v.Set)
	}
	return out
}

// prefixSetOf is the prefix set whose longest prefix covers a ("": none).
func (s *State) prefixSetOf(a netip.Addr) string {
	set, best := "", -1
	for name, es := range s.EdgeSets {
		if es.Role != RolePrefix {
			continue
		}
		for _, p := range es.Prefixes {
			if p.Contains(a) && (p.Bits() > best || p.Bits() == best && name < set) {
				set, best = name, p.Bits()
			}
		}
	}
	return set
}

// checkTableBudget: v's slots, with every other service's, stay within
// its sets' budgets and the region's. The error names the field and gives
// the figures: asked, in use (by the other services), limit.
func (s *State) checkTableBudget(es *Errors, v *Service) {
	asked := v.TableSlots()
	var region uint64
	perSet := map[string]uint64{}
	mine := s.budgetSets(v)
	for name, o := range s.Services {
		if name == v.Name {
			continue // replaced by v
		}
		n := o.TableSlots()
		region += n
		for _, set := range s.budgetSets(o) {
			perSet[set] += n
		}
	}
	for _, set := range mine {
		if used := perSet[set]; used+asked > MaxSetTableSlots {
			es.add("tableSize", "%s: asks %d Maglev slots (%d pools x %d; %s of tables), edge set %s has %d in use by other services, its limit is %d (%s)",
				budgetWhy, asked, len(v.Pools), asked/max(1, uint64(len(v.Pools))), mib(asked), set, used, uint64(MaxSetTableSlots), mib(MaxSetTableSlots))
		}
	}
	if region+asked > MaxRegionTableSlots {
		es.add("tableSize", "%s: asks %d Maglev slots (%d pools x %d; %s of tables), the region has %d in use by other services, its limit is %d (%s)",
			budgetWhy, asked, len(v.Pools), asked/max(1, uint64(len(v.Pools))), mib(asked), region, uint64(MaxRegionTableSlots), mib(MaxRegionTableSlots))
	}
}

const budgetWhy = "over the table budget"

func mib(slots uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(slots*TableSlotBytes)/(1<<20))
}

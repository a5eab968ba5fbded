package dataplane

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// MapMemory is the memory the kernel accounts to each of the edge's maps
// (its memlock figure, in bytes), by map name. It covers the maps the
// program declares; the inner maps of lb_tables, created per LB table,
// are not included. A map that allocates per entry (an LPM trie) counts
// what it holds now; a preallocated one its full capacity.
func (e *Edge) MapMemory() (map[string]uint64, error) { return mapMemory(e.Maps()) }

// MapMemory is the memory the kernel accounts to each of the agent's
// maps, as Edge.MapMemory.
func (a *Agent) MapMemory() (map[string]uint64, error) { return mapMemory(a.Maps()) }

func mapMemory(maps map[string]*ebpf.Map) (map[string]uint64, error) {
	out := make(map[string]uint64, len(maps))
	for name, m := range maps {
		info, err := m.Info()
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", name, err)
		}
		// 0 (not reported) is a map that allocates per entry and
		// holds none yet, an empty LPM trie.
		n, _ := info.Memlock()
		out[name] = n
	}
	return out, nil
}

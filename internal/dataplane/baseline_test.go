package dataplane

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoadObjectFiles: the committed objects load through the baseline
// loader with nothing missing; an object without one of the maps this
// version expects loads with that map named in Missing (and left nil).
func TestLoadObjectFiles(t *testing.T) {
	requireRoot(t)
	e, missing, err := LoadEdgeObject("edge_bpfel.o", LoadOptions{ConnMax: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 || e.Program() == nil {
		t.Errorf("edge object: missing %v, program %v", missing, e.Program())
	}
	if got := e.objs.LbConns.MaxEntries(); got != 4096 {
		t.Errorf("connection table of %d entries, want the ConnMax 4096", got)
	}
	e.Close()
	a, missing, err := LoadAgentObject("agent_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 || a.UnderlayProgram() == nil {
		t.Errorf("agent object: missing %v", missing)
	}
	a.Close()

	// An "older" object: the bench object has none of the edge's maps.
	e, missing, err = LoadEdgeObject("bench_bpfel.o", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !slices.Contains(missing, "xdp_edge") || !slices.Contains(missing, "lb_conns") || e.objs.LbConns != nil {
		t.Errorf("bench object loaded as an edge: missing %v", missing)
	}

	if _, _, err := LoadEdgeObject(filepath.Join(t.TempDir(), "none.o"), LoadOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

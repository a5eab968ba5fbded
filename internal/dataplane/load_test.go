package dataplane

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: loading BPF programs needs root")
	}
}

func TestLoadVerifies(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// TestStatNamesMatchEnum holds the Go counter names to enum azg_stat of
// the edge and agent objects: every name, in order (STAT_X is "x").
func TestStatNamesMatchEnum(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"edge": loadEdge, "agent": loadAgent} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		var enum *btf.Enum
		if err := spec.Types.TypeByName("azg_stat", &enum); err != nil {
			t.Fatalf("%s: enum azg_stat: %v", name, err)
		}
		var c []string
		for _, v := range enum.Values {
			if v.Name != "STAT_MAX" {
				c = append(c, strings.ToLower(strings.TrimPrefix(v.Name, "STAT_")))
			}
			if int(v.Value) != len(c)-1 && v.Name != "STAT_MAX" {
				t.Fatalf("%s: %s = %d, not in sequence", name, v.Name, v.Value)
			}
		}
		if !slices.Equal(c, statNames[:]) {
			t.Fatalf("%s: enum azg_stat is %v,\nGo's names are %v: keep types.go in step with bpf/lib/structs.h", name, c, statNames)
		}
	}
}

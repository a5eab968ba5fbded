package dataplane

import (
	"os"
	"testing"
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

// TestStatNamesMatchEnum holds the Go counter names to enum azg_stat.
func TestStatNamesMatchEnum(t *testing.T) {
	if len(statNames) != int(edgeAzgStatSTAT_MAX) {
		t.Fatalf("%d stat names, enum azg_stat has %d: keep types.go in step with bpf/lib/structs.h", len(statNames), edgeAzgStatSTAT_MAX)
	}
	if i, _ := StatIndex("drop_lb_no_port"); i != int(edgeAzgStatSTAT_DROP_LB_NO_PORT) {
		t.Fatalf("drop_lb_no_port is %d in Go, %d in C", i, edgeAzgStatSTAT_DROP_LB_NO_PORT)
	}
}

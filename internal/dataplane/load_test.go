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

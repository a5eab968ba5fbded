package dptest

import (
	"os"
	"slices"
	"testing"
)

// Only beds (azgt-PID-SEQ{n,p}) whose creator's pid residue no longer
// runs are swept; other azgt- namespaces (the lab tests', the nexthop
// tests') never are.
func TestDeadBeds(t *testing.T) {
	names := []string{"azgt-28283-1n", "azgt-28283-1p", "azgt-4242-12n", "azgt-arpe-77-x", "azgt-mp-n", "azgt-28283-1q", "azgt-123456-1n"}
	got := deadBeds(names, map[int]bool{4242: true})
	want := []string{"azgt-28283-1n", "azgt-28283-1p"}
	if !slices.Equal(got, want) {
		t.Fatalf("deadBeds = %v, want %v", got, want)
	}
	live := liveResidues()
	if live == nil || !live[os.Getpid()%100000] {
		t.Fatalf("liveResidues does not hold this process: %v", live != nil)
	}
}

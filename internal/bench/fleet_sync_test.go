package bench

import (
	"os"
	"testing"
)

// TestFleetSyncRuns runs the sync benchmark briefly: both members on the
// kernel's clock, the receiver serving the sender as a member of its set
// (a receiver that listed no member refused every session, and the
// benchmark failed at "the sender did not connect"). Figures are not
// judged here: they are the benchmark's.
func TestFleetSyncRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads BPF maps and the bench program")
	}
	rs, err := FleetSync(SyncOptions{Duration: 200e6, Rate: 20_000, ConnMax: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range rs {
		got[r.Name] = r.Value
	}
	for _, name := range []string{"sync_apply_encap", "sync_pipeline_max", "sync_lag_p50", "sync_bytes_per_entry"} {
		if v, ok := got[name]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want a positive figure; results %+v", name, v, ok, rs)
		}
	}
}

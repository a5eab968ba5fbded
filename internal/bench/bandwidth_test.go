package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwsim"
)

// TestBandwidthChecks: every figure with a target is checked; a missed
// one says FAIL in its target and note, a met one does not, and the
// convergence target is 3 s + 4 intervals.
func TestBandwidthChecks(t *testing.T) {
	r := &bwsim.Result{Scenario: "x", Config: bwsim.DefaultConfig, OvershootMax: 1.01, LimitsMax: 1.2, ManagedFrom: 2 * time.Second,
		LimitsMaxManaged: 1, OvershootMaxManaged: 1.0, Measured: 1, ConvMax: 8 * time.Second, ConvMean: 8 * time.Second,
		Events: []time.Duration{time.Second}, EventConv: []time.Duration{8 * time.Second}}
	got := map[string]Result{}
	for _, x := range BandwidthResults(r) {
		got[x.Name] = x
	}
	for name, fail := range map[string]bool{"x/overshoot-max": false, "x/limits-max": true, "x/limits-max-managed": false,
		"x/overshoot-max-managed": false, "x/convergence-max": true, "x/unconverged-events": false} {
		x, ok := got[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if Missed(x) != fail || strings.HasPrefix(x.Note, "FAIL") != fail {
			t.Errorf("%s = %v (target %q, note %q): want FAIL %v", name, x.Value, x.Target, x.Note, fail)
		}
	}
	if c := got["x/convergence-max"].Target; c != "<= 7 FAIL" {
		t.Errorf("convergence target %q, want <= 7 (3 s + 4 rounds of 1 s), FAIL at 8 s", c)
	}
}

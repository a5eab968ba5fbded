package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
)

// TestGSLBLab runs the GSLB lab's scenario (docs/lab.md, "The GSLB lab";
// issue 11 part 5): three regions, each a BIRD router with ECMP over three
// pathd servers that run the announcer, a Redis primary and replicas, a
// gslb instance and a prober. Every prober resolves pathd.example to its
// own region and reports there; eu-s1's pathd killed → its announcer
// withdraws it within the check's fall time (2 × 500 ms) and some
// margin; every pathd of eu killed → the GSLB answers eu's prober with
// us within the probes' fall time and margin, and the prober reports
// there; no report lost through either. Dual-stack (issue 21): every
// prober's AAAA query, over IPv6 to its region's gslb, answers the
// region's v6 VIP (routed over the same servers by MP-BGP), ap's prober
// reports over IPv6; an IPv6 ECS query gets the prefix map's /48 scope;
// eu's v6 VIP failing its probes moves AAAA to us while A stays in eu;
// eu dying moves both.
func TestGSLBLab(t *testing.T) {
	cfg := lab.Config{Prefix: "azeg-", StateDir: t.TempDir() + "/lab", Binary: labBinary(t), LabBinary: azgateLabBinary(t), Out: testWriter{t}}
	lab.DownGSLB(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g, err := lab.UpGSLB(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.DownGSLB(cfg); err != nil {
			t.Errorf("lab gslb down: %v", err)
		}
		if left, _ := netns.List(cfg.Prefix); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
		if pins, _ := filepath.Glob("/sys/fs/bpf/azgate/" + cfg.Prefix + "*"); len(pins) > 0 {
			t.Errorf("pins left behind: %v", pins)
		}
	})
	res, err := g.DemoGSLB(ctx)
	t.Logf("measured: %+v", res)
	if err != nil {
		t.Fatal(err)
	}
	// Checks every 500 ms, down at the 2nd failure: the first failing
	// check comes up to one interval after the kill, the 2nd one interval
	// later; then one BGP UPDATE, or one query of the GSLB's. The
	// margins are for a loaded two-core machine.
	if res.ServerWithdrawn > 2500*time.Millisecond {
		t.Errorf("eu-s1's route withdrawn %v after its pathd died, want at most 2.5 s", res.ServerWithdrawn)
	}
	if res.RegionAnswer > 3*time.Second {
		t.Errorf("the GSLB moved eu's prober %v after eu died, want at most 3 s", res.RegionAnswer)
	}
	if res.V6Answer > 3*time.Second {
		t.Errorf("the GSLB moved eu's AAAA %v after eu's v6 VIP failed, want at most 3 s", res.V6Answer)
	}
	if res.ECSScope6 != 48 {
		t.Errorf("IPv6 ECS answer scope %d, want 48 (the prefix map's 2001:db8:201::/48)", res.ECSScope6)
	}
	if res.Lost != 0 {
		t.Errorf("%v reports lost", res.Lost)
	}
}

package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/model"
)

// TestEdgeProcessMemoryFollowsItsShare is issue 19's proof in processes:
// two edge processes (the bench's edge child, this test binary run as
// `fleet-edge`, TestMain), one of each of two sets, and the agent of
// host h0 (`fleet-agent`) follow their shares from a real etcd. Ten times
// set0's EIPs are then added to set1, on hosts of their own. set0's edge
// must end with the same routes and the same memory (VmRSS after a
// forced GC, within 1.5 MB), and so must h0's agent, while set1's edge,
// which holds them, must grow by at least 4 MB: the control that shows
// the measure sees a node holding what is not its share.
func TestEdgeProcessMemoryFollowsItsShare(t *testing.T) {
	const (
		first  = 8000           // EIPs 0..first-1, half in each set (EIP i's set is i mod 2)
		added  = 10 * first / 2 // to set1: ten times set0's
		bound  = 1.5            // MB set0's edge may differ by
		growth = 4.0            // MB set1's edge must grow by at least
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl, admin := oneMember(t, ctx)
	o := FleetOptions{Sets: 2, EdgesPerSet: 1, EIPs: first}
	var region fleetRegion
	if _, err := region.writeAll(ctx, admin, fleetObjects(o, first, false)); err != nil {
		t.Fatal(err)
	}

	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var ps fleetProcs
	defer ps.killAll()
	var specs []fleetChildSpec
	for _, name := range []string{"s0-e0", "s1-e0"} {
		specs = append(specs, fleetChildSpec{name: name, args: []string{fleetnode.EdgeArg, "--etcd-endpoints", cl.Endpoints()[0], "--name", name}})
	}
	specs = append(specs, fleetChildSpec{name: "h0", args: []string{fleetnode.AgentArg, "--etcd-endpoints", cl.Endpoints()[0], "--host", "h0"}})
	nodes, err := ps.startLoaded(ctx, bin, specs, 0)
	if err != nil {
		t.Fatal(err)
	}
	edges, h0 := nodes[:2], nodes[2]
	if h0.load.EIPs != fleetGuestsPerHost {
		t.Fatalf("h0's agent loaded %d EIPs, want %d", h0.load.EIPs, fleetGuestsPerHost)
	}
	// await asks each edge for rev with its routes and waits for the
	// agent to apply rev, then asks each node for its memory at rest (the
	// second of two asks: the first touches the GC's own pages).
	await := func(rev int64, routes ...int) []fleetnode.Event {
		t.Helper()
		for i, p := range edges {
			if ev, err := p.ask(ctx, fmt.Sprintf("await %d %v", rev, fleetnode.Cond{Kind: "routes", N: routes[i]}), time.Minute); err != nil || ev.Event != "done" {
				t.Fatalf("%s: await revision %d with %d routes: %+v %v", p.name, rev, routes[i], ev, err)
			}
		}
		for deadline := time.Now().Add(time.Minute); h0.rev.Load() < rev; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("h0's agent applied revision %d, not %d, in a minute", h0.rev.Load(), rev)
			}
		}
		var out []fleetnode.Event
		for _, p := range nodes {
			var ev fleetnode.Event
			for range 2 {
				if ev, err = p.askUsage(ctx); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, ev)
		}
		return out
	}
	before := await(region.rev, first/2, first/2)

	var more []model.Object
	for h := first / fleetGuestsPerHost; h < (first+2*added)/fleetGuestsPerHost; h++ {
		more = append(more, fleetHost(h))
	}
	for i := first + 1; i < first+2*added; i += 2 {
		more = append(more, fleetEIP(i, i/fleetGuestsPerHost))
	}
	if _, err := region.write(ctx, admin, more...); err != nil {
		t.Fatal(err)
	}
	// A change both edges read, after set1's: once set0's edge applied
	// it, it has seen every change before it.
	marker, err := region.write(ctx, admin, &model.AZ{Name: "az2"})
	if err != nil {
		t.Fatal(err)
	}
	after := await(marker, first/2, first/2+added)

	for i, p := range nodes {
		t.Logf("%s: VmRSS after a forced GC %.1f -> %.1f MB (RssAnon %.1f -> %.1f, RssFile %.1f -> %.1f)", p.name,
			before[i].RSSGCMB, after[i].RSSGCMB, before[i].AnonMB, after[i].AnonMB, before[i].FileMB, after[i].FileMB)
	}
	if d := after[0].RSSGCMB - before[0].RSSGCMB; d > bound || d < -bound {
		t.Errorf("set0's edge: %+.1f MB after %d EIPs were added to set1 (want within %.1f MB: its share did not change)", d, added, bound)
	}
	if d := after[2].RSSGCMB - before[2].RSSGCMB; d > bound || d < -bound {
		t.Errorf("h0's agent: %+.1f MB after %d EIPs were added to other hosts (want within %.1f MB: its share did not change)", d, added, bound)
	}
	if d := after[1].RSSGCMB - before[1].RSSGCMB; d < growth {
		t.Errorf("set1's edge grew %.1f MB with %d more EIPs in its share (want >= %.1f MB): the measure cannot tell a share from a region", d, added, growth)
	}
}

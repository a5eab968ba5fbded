package bench

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// FirewallLab measures the packets per second one edge drops for a flood
// of denied traffic (64-byte UDP from the Internet client, its source
// ports cycling over o.Flows, to a bound EIP, denied by a rule of the EIP
// with 100k global rules loaded through the API), next to the bare
// count-and-drop XDP program (bench.c's xdp_sink) in the edge's place on
// the same link, in the same run, round by round. Generator and edge
// share one core, as in the lab suite.
func FirewallLab(ctx context.Context, o LabOptions) ([]Result, error) {
	t, err := openLabBed(ctx, o, 5*time.Second, 1024)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	const eip = "198.51.100.7"
	if _, err := t.c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		return nil, err
	}
	if _, err := t.lab.WaitAnswer(ctx, "http://"+eip+"/", "hello from az1-h1-g1", 10*time.Second); err != nil {
		return nil, fmt.Errorf("the lab does not forward: %w", err)
	}
	doc := &model.Document{}
	for _, r := range fwRules("global", FirewallRules, netip.Addr{}) {
		doc.FirewallRules = append(doc.FirewallRules, *r)
	}
	doc.FirewallRules = append(doc.FirewallRules, model.FirewallRule{Name: "flood", Action: model.FirewallDeny,
		Sources: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, Address: netip.MustParseAddr(eip), Protocol: model.ProtoUDP})
	t0 := time.Now()
	res, err := t.c.Apply(ctx, doc)
	if err != nil {
		return nil, fmt.Errorf("apply %d firewall rules: %w", len(doc.FirewallRules), err)
	}
	if err := t.waitApplied(ctx, res.Revision, time.Minute); err != nil {
		return nil, err
	}
	t.say("%d firewall rules stored and programmed in %v", len(doc.FirewallRules), time.Since(t0).Round(time.Millisecond))

	frame, err := t.udpToEdge(lab.ClientAddr, eip, 64)
	if err != nil {
		return nil, err
	}
	edgeDrops := func() (uint64, error) {
		var n uint64
		err := t.edge.Do(func() error {
			e, err := dataplane.LoadEdge(dataplane.LoadOptions{PinDir: t.edgePin})
			if err != nil {
				return err
			}
			defer e.Close()
			st, err := e.Stats()
			n = st["drop_fw_deny"].Packets
			return err
		})
		return n, err
	}
	var fw, bare []float64
	for r := 0; r < t.o.Rounds; r++ {
		pps, err := t.measureCounted(frame, edgeDrops)
		if err != nil {
			return nil, fmt.Errorf("edge firewall: %w", err)
		}
		t.say("round %d: edge firewall drops %.2f Mpps", r+1, pps/1e6)
		fw = append(fw, pps)

		if err := t.edge.Do(func() error { return dataplane.AttachPinned(t.b.Sink(), "ext0", t.edgePin) }); err != nil {
			return nil, err
		}
		pps, err = t.measure(frame)
		if rerr := t.reattachEdge(); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return nil, fmt.Errorf("bare XDP drop: %w", err)
		}
		t.say("round %d: bare XDP drop %.2f Mpps", r+1, pps/1e6)
		bare = append(bare, pps)
	}
	fv, bv := median(fw), median(bare)
	return []Result{
		{Suite: "firewall-lab", Name: "xdp_drop (bare count and drop, the ceiling)", Value: bv, Unit: "packets/s"},
		{Suite: "firewall-lab", Name: "edge_firewall_drop (64B UDP flood, denied, 100k rules)", Value: fv, Unit: "packets/s",
			Baseline: "xdp_drop", BaselineValue: bv, Ratio: fv / bv, Target: ">= 0.9"},
	}, nil
}

// waitApplied waits until the lab's edge-a1 reports revision rev applied.
func (t *labBed) waitApplied(ctx context.Context, rev int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		st, err := t.c.Status(ctx)
		if err == nil {
			for _, ns := range st.Nodes {
				for _, n := range ns {
					if n.Role == "edge" && n.Name == "edge-a1" && n.AppliedRevision >= rev {
						return nil
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("edge-a1 did not apply revision %d within %v", rev, limit)
}

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netlab"
)

// natBackends is the number of backends of the lab suite's nat VIP: they
// only need to be routed (through the underlay router, where the sink
// counts what reaches them).
const natBackends = 10

// LBLab measures the packets per second one edge forwards for a nat-mode
// VIP (64-byte UDP, flows cycling over o.Flows source ports, DNAT to 10
// backends), next to an nftables DNAT load balancer (jhash over the same
// backends, conntrack) in the same namespace, same generator and sink.
func LBLab(ctx context.Context, o LabOptions) ([]Result, error) {
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Flows == 0 {
		o.Flows = 10000
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	cfg := benchLab(o.Binary)
	lab.Down(cfg)
	say("bringing up a lab (prefix %s)", cfg.Prefix)
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer lab.Down(cfg)
	c, err := l.Client()
	if err != nil {
		return nil, err
	}
	const vip = "198.51.100.40"
	svc := &model.Service{Name: "natbench", VIP: netip.MustParseAddr(vip), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "udp", Port: 9, Pool: "p"}}, Pools: []model.Pool{{Name: "p"}}}
	var backends []string
	for i := 1; i <= natBackends; i++ {
		a := netip.AddrFrom4([4]byte{198, 19, 201, byte(i)})
		backends = append(backends, a.String())
		svc.Pools[0].Backends = append(svc.Pools[0].Backends, model.Backend{Address: a})
	}
	if _, err := c.PutService(ctx, svc); err != nil {
		return nil, err
	}
	edgePin := dataplane.NodePinDir(cfg.Prefix + "edge-a1")
	// Wait until the edge holds the listener.
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := l.NodeStatuses(ctx)
		if err == nil {
			if e, ok := st["edge-a1"]; ok && e.Tables[model.TableKey("natbench", "p")].Backends == natBackends {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the edge did not program the nat service")
		}
		time.Sleep(200 * time.Millisecond)
	}

	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	rtr, err := netlab.OpenNode(cfg.Prefix + "rtr")
	if err != nil {
		return nil, err
	}
	defer rtr.Close()
	fab, err := netlab.OpenNode(cfg.Prefix + "fab")
	if err != nil {
		return nil, err
	}
	defer fab.Close()
	edgeNode, err := netlab.OpenNode(cfg.Prefix + "edge-a1")
	if err != nil {
		return nil, err
	}
	defer edgeNode.Close()
	if err := fab.Do(func() error { return dataplane.AttachPinned(b.Sink(), "edge-a1", l.PassPinDir("fab")) }); err != nil {
		return nil, err
	}
	src, err := rtr.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	dst, err := edgeNode.MAC("ext0")
	if err != nil {
		return nil, err
	}
	frame := udpFrame(src.String(), dst.String(), lab.ClientAddr, vip, 1024, 9, 64)
	measure := func() (float64, error) {
		g, err := NewGenerator(b, rtr, "edge-a1", frame, o.Flows, 1024)
		if err != nil {
			return 0, err
		}
		before, err := b.SinkCount()
		if err != nil {
			return 0, err
		}
		// Warm up: the first packet of every flow creates its state.
		if _, err := g.Run(200 * time.Millisecond); err != nil {
			return 0, err
		}
		mid, err := b.SinkCount()
		if err != nil {
			return 0, err
		}
		if mid.Packets == before.Packets {
			return 0, fmt.Errorf("nothing reached the sink: the path does not forward")
		}
		t0 := time.Now()
		if _, err := g.Run(o.Duration); err != nil {
			return 0, err
		}
		el := time.Since(t0)
		time.Sleep(100 * time.Millisecond)
		after, err := b.SinkCount()
		if err != nil {
			return 0, err
		}
		return float64(after.Packets-mid.Packets) / el.Seconds(), nil
	}
	nft := nftRules(vip, backends)
	var xdp, kernel []float64
	for r := 0; r < o.Rounds; r++ {
		pps, err := measure()
		if err != nil {
			return nil, err
		}
		say("round %d: edge XDP nat %.2f Mpps", r+1, pps/1e6)
		xdp = append(xdp, pps)

		if err := detachEdge(edgeNode, edgePin, "ext0"); err != nil {
			return nil, err
		}
		load := edgeNode.Cmd("nft", "-f", "-")
		load.Stdin = strings.NewReader(nft)
		if out, err := load.CombinedOutput(); err != nil {
			reattachEdge(edgeNode, edgePin, "ext0")
			return nil, fmt.Errorf("nft: %v: %s", err, out)
		}
		pps, err = measure()
		edgeNode.Cmd("nft", "delete", "table", "ip", "azbench").Run()
		if rerr := reattachEdge(edgeNode, edgePin, "ext0"); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
		say("round %d: nftables DNAT %.2f Mpps", r+1, pps/1e6)
		kernel = append(kernel, pps)
	}
	kv, xv := median(kernel), median(xdp)
	return []Result{
		{Suite: "lb", Name: fmt.Sprintf("nftables_dnat_lb (64B UDP, %d flows, %d backends)", o.Flows, natBackends), Value: kv, Unit: "packets/s"},
		{Suite: "lb", Name: fmt.Sprintf("edge_xdp_nat_vip (64B UDP, %d flows, %d backends)", o.Flows, natBackends), Value: xv, Unit: "packets/s",
			Baseline: "nftables_dnat_lb", BaselineValue: kv, Ratio: xv / kv, Target: ">= 4x"},
	}, nil
}

// nftRules is an nftables DNAT load balancer over the backends: a jhash
// of the client's address and port picks one (so a flow keeps its
// backend, as the edge's table does), conntrack does the rest.
func nftRules(vip string, backends []string) string {
	var m []string
	for i, b := range backends {
		m = append(m, fmt.Sprintf("%d : %s", i, b))
	}
	return fmt.Sprintf(`table ip azbench {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s udp dport 9 dnat to jhash ip saddr . udp sport mod %d map { %s }
	}
}
`, vip, len(backends), strings.Join(m, ", "))
}

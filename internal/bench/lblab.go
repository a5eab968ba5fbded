package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
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
	t, err := openLabBed(ctx, o, 3*time.Second, 10000)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	const vip = "198.51.100.40"
	svc := &model.Service{Name: "natbench", VIP: netip.MustParseAddr(vip), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "udp", Port: 9, Pool: "p"}}, Pools: []model.Pool{{Name: "p"}}}
	var backends []string
	for i := 1; i <= natBackends; i++ {
		a := netip.AddrFrom4([4]byte{198, 19, 201, byte(i)})
		backends = append(backends, a.String())
		svc.Pools[0].Backends = append(svc.Pools[0].Backends, model.Backend{Address: a})
	}
	if _, err := t.c.PutService(ctx, svc); err != nil {
		return nil, err
	}
	// Wait until the edge holds the listener.
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := t.lab.NodeStatuses(ctx)
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
	if err := t.attachSink(); err != nil {
		return nil, err
	}
	frame, err := t.udpToEdge(lab.ClientAddr, vip, 64)
	if err != nil {
		return nil, err
	}
	nft := nftRules(vip, backends)
	var xdp, kernel []float64
	for r := 0; r < t.o.Rounds; r++ {
		pps, err := t.measure(frame)
		if err != nil {
			return nil, fmt.Errorf("edge XDP nat: %w", err)
		}
		t.say("round %d: edge XDP nat %.2f Mpps", r+1, pps/1e6)
		xdp = append(xdp, pps)

		err = t.withoutEdge(func() error {
			load := t.edge.Cmd("nft", "-f", "-")
			load.Stdin = strings.NewReader(nft)
			if out, err := load.CombinedOutput(); err != nil {
				return fmt.Errorf("nft: %v: %s", err, out)
			}
			defer t.edge.Cmd("nft", "delete", "table", "ip", "azbench").Run()
			var err error
			pps, err = t.measure(frame)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("nftables DNAT: %w", err)
		}
		t.say("round %d: nftables DNAT %.2f Mpps", r+1, pps/1e6)
		kernel = append(kernel, pps)
	}
	kv, xv := median(kernel), median(xdp)
	return []Result{
		{Suite: "lb", Name: fmt.Sprintf("nftables_dnat_lb (64B UDP, %d flows, %d backends)", t.o.Flows, natBackends), Value: kv, Unit: "packets/s"},
		{Suite: "lb", Name: fmt.Sprintf("edge_xdp_nat_vip (64B UDP, %d flows, %d backends)", t.o.Flows, natBackends), Value: xv, Unit: "packets/s",
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

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netlab"
)

// LabOptions tune the lab suite.
type LabOptions struct {
	Binary   string        // azgate binary for the lab's roles (default: this one)
	Duration time.Duration // per measurement
	Rounds   int
	Flows    uint32
	Out      func(format string, a ...any)
}

// benchLab is the lab the suites build for themselves, apart from the
// README's lab so both can be up at once.
func benchLab(binary string) lab.Config {
	return lab.Config{Prefix: "azb-", StateDir: "/run/azgate-bench", Binary: binary}
}

// Lab measures the packets per second one edge forwards from the Internet
// side to the underlay (64-byte UDP to a bound EIP, NVGRE-encapsulated
// toward its host), next to plain kernel IP forwarding through the same
// namespaces and links in the same run, and to the simplest XDP forwarder
// (MAC rewrite and redirect) in the edge's place: the ceiling of the
// method. Traffic comes from the live-frames generator in the upstream
// router's namespace and is counted by an XDP sink on the underlay
// router's side of the edge's underlay link, so generator and sink cost
// the same in every measurement. Generator, edge and sink share one core:
// frames a program transmits into a veth are processed by the peer's NAPI
// on the sending core. (Threaded NAPI moves the edge to the other core
// but makes every figure slower and noisier.)
func Lab(ctx context.Context, o LabOptions) ([]Result, error) {
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Flows == 0 {
		o.Flows = 1024
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
	const eip = "198.51.100.7"
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		return nil, err
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", "hello from az1-h1-g1", 10*time.Second); err != nil {
		return nil, fmt.Errorf("the lab does not forward: %w", err)
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

	// The sink replaces the lab's XDP_PASS program on the underlay
	// router's side of the edge's underlay link (the lab goes afterwards).
	if err := fab.Do(func() error { return dataplane.AttachPinned(b.Sink(), "edge-a1", l.PassPinDir("fab")) }); err != nil {
		return nil, fmt.Errorf("attach the sink: %w", err)
	}

	src, err := rtr.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	dst, err := edgeNode.MAC("ext0")
	if err != nil {
		return nil, err
	}
	toEIP := udpFrame(src.String(), dst.String(), lab.ClientAddr, eip, 1024, 9, 64)
	// Not an EIP: the edge's kernel routes it to the underlay like any
	// router would.
	toKernel := udpFrame(src.String(), dst.String(), lab.ClientAddr, "198.19.11.1", 1024, 9, 64)

	edgePin := dataplane.NodePinDir(cfg.Prefix + "edge-a1")
	measure := func(frame []byte) (float64, error) {
		g, err := NewGenerator(b, rtr, "edge-a1", frame, o.Flows, 1024)
		if err != nil {
			return 0, err
		}
		before, err := b.SinkCount()
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if _, err := g.Run(o.Duration); err != nil {
			return 0, err
		}
		el := time.Since(t0)
		time.Sleep(100 * time.Millisecond) // let the last frames drain
		after, err := b.SinkCount()
		if err != nil {
			return 0, err
		}
		return float64(after.Packets-before.Packets) / el.Seconds(), nil
	}
	ulIdx, err := edgeNode.Ifindex("ul0")
	if err != nil {
		return nil, err
	}
	ulMAC, err := edgeNode.MAC("ul0")
	if err != nil {
		return nil, err
	}
	fabMAC, err := fab.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	if err := b.SetFwd(ulIdx, ulMAC, fabMAC); err != nil {
		return nil, err
	}
	var xdp, kernel, fwd []float64
	for r := 0; r < o.Rounds; r++ {
		pps, err := measure(toEIP)
		if err != nil {
			return nil, err
		}
		say("round %d: edge XDP %.2f Mpps", r+1, pps/1e6)
		xdp = append(xdp, pps)

		// Baseline: the edge program off ext0, the kernel forwards.
		if err := detachEdge(edgeNode, edgePin, "ext0"); err != nil {
			return nil, err
		}
		pps, err = measure(toKernel)
		if rerr := reattachEdge(edgeNode, edgePin, "ext0"); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
		say("round %d: kernel forwarding %.2f Mpps", r+1, pps/1e6)
		kernel = append(kernel, pps)

		// Ceiling: the simplest XDP forwarder in the edge's place.
		if err := edgeNode.Do(func() error { return dataplane.AttachPinned(b.Fwd(), "ext0", edgePin) }); err != nil {
			return nil, err
		}
		pps, err = measure(toEIP)
		if rerr := reattachEdge(edgeNode, edgePin, "ext0"); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
		say("round %d: minimal XDP forwarder %.2f Mpps", r+1, pps/1e6)
		fwd = append(fwd, pps)
	}
	kv, xv, fv := median(kernel), median(xdp), median(fwd)
	return []Result{
		{Suite: "lab", Name: "kernel_forwarding (64B UDP, edge namespace)", Value: kv, Unit: "packets/s"},
		{Suite: "lab", Name: "edge_xdp_eip_encap (64B UDP to an EIP)", Value: xv, Unit: "packets/s",
			Baseline: "kernel_forwarding", BaselineValue: kv, Ratio: xv / kv, Target: ">= 3x"},
		{Suite: "lab", Name: "xdp_fwd (MAC rewrite + redirect, the ceiling)", Value: fv, Unit: "packets/s",
			Baseline: "kernel_forwarding", BaselineValue: kv, Ratio: fv / kv},
	}, nil
}

func detachEdge(node *netlab.Node, pin, dev string) error {
	return dataplane.DetachPinned(pin, dev)
}

// reattachEdge puts the edge program back on dev: it loads the program
// against the node's pinned maps (so it shares their state) and attaches
// it through a new pinned link, as the edge daemon does on start.
func reattachEdge(node *netlab.Node, pin, dev string) error {
	return node.Do(func() error {
		e, err := dataplane.LoadEdge(dataplane.LoadOptions{PinDir: pin})
		if err != nil {
			return err
		}
		defer e.Close()
		return e.Attach(dev)
	})
}

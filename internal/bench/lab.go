package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/lab"
)

// LabOptions tune the lab suite.
type LabOptions struct {
	Binary   string        // azgate binary for the lab's roles (default: lab.DefaultBinary)
	Duration time.Duration // per measurement
	Rounds   int
	Flows    uint32
	Out      func(format string, a ...any)
}

// benchLab is the lab the suites build for themselves, apart from the
// README's lab so both can be up at once. DDoS detection is off: the
// suites send millions of packets a second to one EIP on purpose, and an
// automatic quarantine would move it mid-measurement (docs/ddos.md).
func benchLab(binary string) lab.Config {
	return lab.Config{Prefix: "azb-", StateDir: "/run/azgate-bench", Binary: binary, ControllerArgs: []string{"--ddos=false"}}
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
	if err := t.attachSink(); err != nil {
		return nil, err
	}
	toEIP, err := t.udpToEdge(lab.ClientAddr, eip)
	if err != nil {
		return nil, err
	}
	// Not an EIP: the edge's kernel routes it to the underlay like any
	// router would.
	toKernel, err := t.udpToEdge(lab.ClientAddr, "198.19.11.1")
	if err != nil {
		return nil, err
	}
	ulIdx, err := t.edge.Ifindex("ul0")
	if err != nil {
		return nil, err
	}
	ulMAC, err := t.edge.MAC("ul0")
	if err != nil {
		return nil, err
	}
	fabMAC, err := t.fab.MAC("edge-a1")
	if err != nil {
		return nil, err
	}
	if err := t.b.SetFwd(ulIdx, ulMAC, fabMAC); err != nil {
		return nil, err
	}
	var xdp, kernel, fwd []float64
	for r := 0; r < t.o.Rounds; r++ {
		pps, err := t.measure(toEIP)
		if err != nil {
			return nil, fmt.Errorf("edge XDP: %w", err)
		}
		t.say("round %d: edge XDP %.2f Mpps", r+1, pps/1e6)
		xdp = append(xdp, pps)

		// Baseline: the edge program off ext0, the kernel forwards.
		if err := t.withoutEdge(func() (err error) { pps, err = t.measure(toKernel); return err }); err != nil {
			return nil, fmt.Errorf("kernel forwarding: %w", err)
		}
		t.say("round %d: kernel forwarding %.2f Mpps", r+1, pps/1e6)
		kernel = append(kernel, pps)

		// Ceiling: the simplest XDP forwarder in the edge's place.
		if err := t.edge.Do(func() error { return dataplane.AttachPinned(t.b.Fwd(), "ext0", t.edgePin) }); err != nil {
			return nil, err
		}
		pps, err = t.measure(toEIP)
		if rerr := t.reattachEdge(); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return nil, fmt.Errorf("minimal XDP forwarder: %w", err)
		}
		t.say("round %d: minimal XDP forwarder %.2f Mpps", r+1, pps/1e6)
		fwd = append(fwd, pps)
	}
	kv, xv, fv := median(kernel), median(xdp), median(fwd)
	return []Result{
		{Suite: "lab", Name: "kernel_forwarding (64B UDP, edge namespace)", Value: kv, Unit: "packets/s"},
		{Suite: "lab", Name: "edge_xdp_eip_encap (64B UDP to an EIP)", Value: xv, Unit: "packets/s",
			Baseline: "kernel_forwarding", BaselineValue: kv, Ratio: xv / kv, Target: ">= 3x"},
		{Suite: "lab", Name: "xdp_fwd (MAC rewrite + redirect, the ceiling)", Value: fv, Unit: "packets/s",
			Baseline: "kernel_forwarding", BaselineValue: kv, Ratio: fv / kv},
		// The same as time per packet: the minimal forwarder is this
		// method's floor (it carries the generator's and the sink's cost,
		// on the same core), and the edge's cost above it is its own.
		{Suite: "lab", Name: "edge_xdp_eip_encap per packet", Value: 1e9 / xv, Unit: "ns/packet",
			Baseline: "xdp_fwd", BaselineValue: 1e9 / fv, Ratio: fv / xv, PerPacket: true, Floor: 1e9 / fv, AboveFloor: 1e9/xv - 1e9/fv,
			Note: "1e9 / packets/s; the floor is the minimal XDP forwarder measured the same way (it includes the generator's and the sink's cost: no separate harness figure)"},
	}, nil
}

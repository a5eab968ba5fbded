package bench

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/netlab"
)

// bpfFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: BPF_PROG_TEST_RUN
// really transmits what the program returns XDP_TX for (Linux 5.18+).
const bpfFTestXDPLiveFrames = 1 << 1

type xdpMd struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// Generator is a traffic generator built on BPF_PROG_TEST_RUN live-frames
// mode (the technique of xdp-trafficgen): xdp_gen writes a header template
// over every frame and returns XDP_TX, so the frames leave through dev
// into its veth peer at several Mpps from one core.
type Generator struct {
	b     *dataplane.Bench
	node  *netlab.Node
	dev   string
	frame []byte
}

// NewGenerator prepares a generator sending frame (at least 64 bytes, UDP
// checksum zero) out of dev in node, cycling the UDP source port over
// flows values from sportBase.
func NewGenerator(b *dataplane.Bench, node *netlab.Node, dev string, frame []byte, flows uint32, sportBase uint16) (*Generator, error) {
	if len(frame) < 64 {
		return nil, fmt.Errorf("generator frame is %d bytes, at least 64 needed", len(frame))
	}
	if err := b.SetGen(frame[:64], flows, sportBase); err != nil {
		return nil, err
	}
	return &Generator{b: b, node: node, dev: dev, frame: frame}, nil
}

// Run sends for about d and returns the number of frames the program
// handed to the kernel.
func (g *Generator) Run(d time.Duration) (uint64, error) {
	idx, err := g.node.Ifindex(g.dev)
	if err != nil {
		return 0, err
	}
	const chunk = 1_000_000
	var sent uint64
	deadline := time.Now().Add(d)
	err = g.node.Do(func() error {
		// One core for the generator; the others are the forwarding's.
		var one unix.CPUSet
		one.Set(0)
		unix.SchedSetaffinity(0, &one)
		for time.Now().Before(deadline) {
			_, err := g.b.Gen().Run(&ebpf.RunOptions{
				Data:      g.frame,
				Repeat:    chunk,
				Flags:     bpfFTestXDPLiveFrames,
				BatchSize: 64,
				Context:   xdpMd{DataEnd: uint32(len(g.frame)), IngressIfindex: uint32(idx)},
			})
			if err != nil {
				return fmt.Errorf("live-frames run: %w", err)
			}
			sent += chunk
		}
		return nil
	})
	return sent, err
}

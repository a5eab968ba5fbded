package dataplane

import (
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// TestPinnedStats: the per-reason counters of a pinned edge and agent are
// read from their pins, by a reader that did not load them (how the lab
// snapshots a running daemon's drops): a frame cut off in its VLAN tag is
// one drop_eth_trunc.
func TestPinnedStats(t *testing.T) {
	requireRoot(t)
	cut := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x00}
	for _, kind := range []string{"edge", "agent"} {
		t.Run(kind, func(t *testing.T) {
			dir := NodePinDir(fmt.Sprintf("azgt-pinstats-%s-%d", kind, os.Getpid()))
			t.Cleanup(func() { RemovePins(dir) })
			var prog *ebpf.Program
			switch kind {
			case "edge":
				e, err := LoadEdge(LoadOptions{PinDir: dir, EIPMax: 1024})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				prog = e.Program()
			case "agent":
				a, err := LoadAgent(LoadOptions{PinDir: dir})
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				prog = a.UnderlayProgram()
			}
			before, err := PinnedStats(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prog.Run(&ebpf.RunOptions{Data: cut, DataOut: make([]byte, 64)}); err != nil {
				t.Fatal(err)
			}
			after, err := PinnedStats(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(statNames) {
				t.Errorf("%d counters read, want %d", len(after), len(statNames))
			}
			if d := after["drop_eth_trunc"].Packets - before["drop_eth_trunc"].Packets; d != 1 {
				t.Errorf("drop_eth_trunc grew by %d, want 1", d)
			}
			if _, err := PinnedStats(NodePinDir("azgt-pinstats-none")); err == nil {
				t.Error("no pins: no error")
			}
		})
	}
}

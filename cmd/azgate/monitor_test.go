//go:build !node

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/monitor"
)

// TestMonitorFlag: a bad --monitor or --monitor-rate stops an edge or an
// agent with an error naming the flag.
func TestMonitorFlag(t *testing.T) {
	for args, msg := range map[string]string{
		"--monitor loud":          `--monitor "loud": want off, drops or trace`,
		"--monitor-rate 0":        "--monitor-rate 0",
		"--monitor-rate 2000000":  "--monitor-rate 2000000",
		"--monitor-burst 2000000": "--monitor-burst 2000000",
		// A burst below what one tick of the coarse clock adds.
		"--monitor-rate 1000000":                   "--monitor-burst 100: at least --monitor-rate / 100 (10000)",
		"--monitor-rate 20000 --monitor-burst 199": "--monitor-burst 199: at least --monitor-rate / 100 (200)",
	} {
		for _, role := range [][]string{{"agent", "--underlay-if", "ul0"}, {"edge", "--attach", "ext0"}} {
			root := newRoot()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(append(role, "--name", "h1", "--etcd-endpoints", "bogus://x"), strings.Fields(args)...))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("%s %s: error %v, want one saying %q", role[0], args, err, msg)
			}
		}
	}
}

// TestMonitorCommand: a drop in a node's pinned data plane is shown by
// azgate monitor (reason, kind) and written by azgate capture (pcapng),
// both reading the pins as a node-local command does.
func TestMonitorCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: loading BPF programs needs root")
	}
	node := fmt.Sprintf("azgt-monitor-%d", os.Getpid())
	dir := dataplane.NodePinDir(node)
	t.Cleanup(func() { dataplane.RemovePins(dir) })
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{PinDir: dir, EIPMax: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.SetMonitor(dataplane.MonitorConfig{Drops: true}); err != nil {
		t.Fatal(err)
	}
	cut := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00, 0x00} // a VLAN tag cut off
	run := func() {
		if _, err := e.Program().Run(&ebpf.RunOptions{Data: cut, DataOut: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	// cli runs the command while drops keep coming (it shows only what
	// happens after it started).
	cli := func(args ...string) (string, string) {
		root := newRoot()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(args)
		done := make(chan error, 1)
		go func() { done <- root.Execute() }()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", strings.Join(args, " "), err)
				}
				return out.String(), errOut.String()
			case <-time.After(20 * time.Millisecond):
				run()
			}
		}
	}

	// A drop from before the command started is not shown (the ring's
	// backlog is its oldest events, not its latest).
	old := append([]byte{2, 0, 0, 0, 0, 9}, cut[6:]...)
	if _, err := e.Program().Run(&ebpf.RunOptions{Data: old, DataOut: make([]byte, 64)}); err != nil {
		t.Fatal(err)
	}
	out, errOut := cli("monitor", node, "--count", "1", "--duration", "10s")
	if !strings.Contains(out, " drop drop_eth_trunc - len 15 | 020000000001020000000002810000") {
		t.Errorf("monitor printed %q, want the drop_eth_trunc drop (of after it started)", out)
	}
	if !strings.Contains(errOut, "1 events shown") {
		t.Errorf("monitor reported %q", errOut)
	}

	// Filtered out by reason: nothing shown within the duration.
	out, _ = cli("monitor", node, "--reason", "drop_ip_csum", "--duration", "300ms")
	if out != "" {
		t.Errorf("monitor --reason drop_ip_csum printed %q", out)
	}

	file := filepath.Join(t.TempDir(), "c.pcapng")
	cli("capture", node, "-w", file, "--count", "1", "--duration", "10s")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 12 || !bytes.Equal(b[:4], []byte{0x0a, 0x0d, 0x0d, 0x0a}) || !bytes.Contains(b, []byte("drop drop_eth_trunc")) || !bytes.Contains(b, cut) {
		t.Errorf("capture wrote %d bytes without a pcapng header, the drop's comment or its frame", len(b))
	}
}

// TestCaptureFileMode: the capture file is 0600 (packet data) also when
// it existed before, world-readable.
func TestCaptureFileMode(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcapng")
	if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := createCapture(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != 0 {
		t.Errorf("mode %v, %d bytes: want 0600, truncated", st.Mode().Perm(), st.Size())
	}
}

// TestCaptureBadFlagsKeepFile: capture refuses bad filter flags before
// it truncates the file it would write.
func TestCaptureBadFlagsKeepFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcapng")
	if err := os.WriteFile(file, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"capture", "no-such-node", "-w", file, "--count", "-1"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--count -1") {
		t.Fatalf("capture --count -1: error %v, want one naming --count", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "old" {
		t.Errorf("the existing file after a refused capture: %q, %v; want it untouched", b, err)
	}
}

// TestIfNamerLooksUpOnce: an interface is looked up once however many
// events name it (a lookup dumps every link of the namespace).
func TestIfNamerLooksUpOnce(t *testing.T) {
	calls := 0
	name := ifNamer(func(i int) (*net.Interface, error) {
		calls++
		if i == 7 {
			return &net.Interface{Index: 7, Name: "ext0"}, nil
		}
		return nil, errors.New("no such interface")
	})
	for i := 0; i < 3; i++ {
		if n := name(7); n != "ext0" {
			t.Errorf("ifindex 7: %q, want ext0", n)
		}
		if n := name(9); n != "if9" {
			t.Errorf("ifindex 9: %q, want if9", n)
		}
	}
	if calls != 2 {
		t.Errorf("%d lookups for two interfaces, want 2", calls)
	}
}

// TestReloadMonitor: SIGHUP's reload sets a running edge's monitor mode
// from its config file: drops from a frame the program drops (run through
// BPF_PROG_TEST_RUN) are written, then not once the file says off, then
// again once it says trace, the rate and burst kept; --monitor on the
// command line wins, and a bad mode leaves the running one.
func TestReloadMonitor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: loading BPF programs needs root")
	}
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.SetMonitor(dataplane.MonitorConfig{Drops: true, Rate: 1000, Burst: 500}); err != nil {
		t.Fatal(err)
	}
	old := roleMonitor
	roleMonitor = &monitor.Switch{}
	defer func() { roleMonitor = old }()
	roleMonitor.Attach(e)
	root := newRoot()
	c, _, err := root.Find([]string{"edge"})
	if err != nil {
		t.Fatal(err)
	}
	fs, o := c.Flags(), configOptions(c)
	p := writeTemp(t, "edge.yaml", "name: e1\n", 0o644)
	cut := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00, 0x00} // a VLAN tag cut off: dropped
	// sent runs the frame and returns how many events were written for it.
	sent := func() uint64 {
		before, err := e.MonitorCounts()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Program().Run(&ebpf.RunOptions{Data: cut, DataOut: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
		after, err := e.MonitorCounts()
		if err != nil {
			t.Fatal(err)
		}
		return after.Sent - before.Sent
	}
	step := func(file string, cli map[string]bool, mode string, events uint64) {
		t.Helper()
		if err := os.WriteFile(p, []byte("name: e1\n"+file), 0o644); err != nil {
			t.Fatal(err)
		}
		reload(p, fs, o, cli)
		got, err := e.Monitor()
		if err != nil {
			t.Fatal(err)
		}
		if got.Mode() != mode || got.Rate != 1000 || got.Burst != 500 {
			t.Errorf("file %q: monitor %+v, want %s at rate 1000, burst 500", file, got, mode)
		}
		if n := sent(); n != events {
			t.Errorf("file %q: %d events for a drop, want %d", file, n, events)
		}
	}
	step("", nil, "drops", 1) // no key: the default
	step("monitor: off\n", nil, "off", 0)
	step("monitor: loud\n", nil, "off", 0)    // refused: the running mode stays
	step("monitor: trace\n", nil, "trace", 2) // the frame in, and its drop
	step("monitor: off\n", map[string]bool{"monitor": true}, "trace", 2)
	step("monitor: drops\n", nil, "drops", 1)
}

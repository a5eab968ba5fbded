package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/monitor"
)

// monitorFlags are the flags azgate monitor and azgate capture share.
type monitorFlags struct {
	pinDir    string
	reasons   []string
	addrs     []string
	dropsOnly bool
	count     int
	dur       time.Duration
}

func (m *monitorFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&m.pinDir, "pin-dir", "", "the node's bpffs pin directory (default /sys/fs/bpf/azgate/NODE)")
	f.StringSliceVar(&m.reasons, "reason", nil, "only events counted under these reasons (counter names as in azgate status, e.g. drop_ip_csum; a trailing * matches a prefix: drop_spoof*), comma-separated or repeated")
	f.StringSliceVar(&m.addrs, "addr", nil, "only frames from or to these addresses or prefixes (IPv4 header within the first 128 bytes), comma-separated or repeated")
	f.BoolVar(&m.dropsOnly, "drops-only", false, "only drop events (not the trace of --monitor trace)")
	f.IntVar(&m.count, "count", 0, "stop after this many events (0: until interrupted)")
	f.DurationVar(&m.dur, "duration", 0, "stop after this long (0: until interrupted)")
}

func (m *monitorFlags) options() (monitor.Options, error) {
	var o monitor.Options
	var err error
	if o.Filter.Reasons, err = monitor.ParseReasons(m.reasons); err != nil {
		return o, fmt.Errorf("--reason %w", err)
	}
	if o.Filter.Prefixes, err = monitor.ParsePrefixes(m.addrs); err != nil {
		return o, fmt.Errorf("--addr %w", err)
	}
	if m.count < 0 || m.dur < 0 {
		return o, fmt.Errorf("--count %d, --duration %v: want 0 or more", m.count, m.dur)
	}
	o.Filter.DropsOnly, o.Count, o.For = m.dropsOnly, m.count, m.dur
	return o, nil
}

func (m *monitorFlags) dir(node string) string {
	if m.pinDir != "" {
		return m.pinDir
	}
	return dataplane.NodePinDir(node)
}

// ifNamer names the ifindexes of this network namespace (the number when
// one has none), each looked up once: net.InterfaceByIndex dumps every
// link of the namespace (RTM_GETLINK), too much to do for every event on
// a host with a tap per guest.
func ifNamer(lookup func(int) (*net.Interface, error)) func(uint32) string {
	names := map[uint32]string{}
	return func(i uint32) string {
		if n, ok := names[i]; ok {
			return n
		}
		n := fmt.Sprintf("if%d", i)
		if ifc, err := lookup(int(i)); err == nil {
			n = ifc.Name
		}
		names[i] = n
		return n
	}
}

// runMonitor opens the node's ring, reads until interrupted or bounded,
// and reports the events the data plane lost meanwhile on errOut.
func runMonitor(m *monitorFlags, node string, errOut io.Writer, fn func(*dataplane.MonitorEvent, dataplane.Tuple) error) error {
	o, err := m.options()
	if err != nil {
		return err
	}
	// Only what happens from now on: the ring's backlog is its oldest
	// events, not its latest.
	o.Since = monotonicNow()
	dir := m.dir(node)
	r, err := dataplane.OpenMonitor(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	before, err := dataplane.PinnedMonitorCounts(dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, rerr := monitor.Read(ctx, r, o, fn)
	after, err := dataplane.PinnedMonitorCounts(dir)
	if err == nil {
		fmt.Fprintf(errOut, "%d events shown; the data plane wrote %d meanwhile and lost %d to the rate limit (--monitor-rate), %d to a full ring\n",
			n, after.Sent-before.Sent, after.LostRate-before.LostRate, after.LostFull-before.LostFull)
	}
	if rerr != nil {
		return rerr
	}
	return err
}

func init() {
	register(func() *cobra.Command {
		var m monitorFlags
		var hexBytes int
		c := &cobra.Command{
			Use:   "monitor NODE",
			Short: "Stream the data plane's drop (and trace) events of this node: reason, interface, 5-tuple, first bytes (root)",
			Long: `Streams the events the node's XDP programs write to their monitor ring
buffer (pinned in the node's pin directory): every drop with the counter it
was counted under, the interface it came in on, the CPU, the 5-tuple and the
first bytes of the frame; with the role's --monitor trace also every frame
as it came in and every other verdict. The role's --monitor (default drops)
turns the events on, --monitor-rate bounds them per CPU; events over the
rate or with no room in the ring are counted and shown at the end.

Run it on the node, in its network namespace, as root: the pins are root's
and reading a ring buffer takes CAP_BPF. The filters (--reason, --addr) run
here, after the data plane. One reader at a time: two would share the events.
docs/observability.md.`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				out := cmd.OutOrStdout()
				ifName := ifNamer(net.InterfaceByIndex)
				return runMonitor(&m, args[0], cmd.ErrOrStderr(), func(ev *dataplane.MonitorEvent, t dataplane.Tuple) error {
					_, err := fmt.Fprintln(out, monitor.Line(ev, t, ifName(ev.Ifindex), hexBytes))
					return err
				})
			},
		}
		m.add(c)
		c.Flags().IntVar(&hexBytes, "hex", 32, "bytes of each frame to print in hex (at most 128; 0: none)")
		return c
	})
	register(func() *cobra.Command {
		var m monitorFlags
		var file string
		c := &cobra.Command{
			Use:   "capture NODE -w FILE",
			Short: "Write what the node's XDP programs decided on to pcapng: input frame, verdict, output frame (root)",
			Long: `Writes the node's monitor events (see azgate monitor) to a pcapng file:
each event a packet (its first 128 bytes) with its verdict as the packet
comment ("in cpu 0 seq 7", "drop drop_ip_csum cpu 0 seq 7", "out encap_tx
cpu 0 seq 8"). The frames as they came in and as they were sent need the
role's --monitor trace; with --monitor drops only the drops are there.
tcpdump cannot show this: it sees no frame XDP dropped or redirected.
Read it with tshark -r FILE -T fields -e frame.comment, or Wireshark.`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if file == "" {
					return fmt.Errorf("-w FILE: where to write the capture")
				}
				// Bad flags leave an existing file as it was.
				if _, err := m.options(); err != nil {
					return err
				}
				f, err := createCapture(file)
				if err != nil {
					return err
				}
				defer f.Close()
				w, err := monitor.NewPcapWriter(f, monotonicEpoch(), ifNamer(net.InterfaceByIndex))
				if err != nil {
					return err
				}
				err = runMonitor(&m, args[0], cmd.ErrOrStderr(), func(ev *dataplane.MonitorEvent, _ dataplane.Tuple) error {
					return w.Write(ev)
				})
				if ferr := w.Flush(); err == nil {
					err = ferr
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			},
		}
		m.add(c)
		c.Flags().StringVarP(&file, "write", "w", "", "the pcapng file to write (mode 0600)")
		return c
	})
}

// createCapture creates or truncates the capture file, mode 0600 also
// when it was there before with another mode: it holds packet data.
func createCapture(file string) (*os.File, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return f, nil
}

// monotonicNow is CLOCK_MONOTONIC now (the data plane's bpf_ktime_get_ns);
// 0 if it cannot be read.
func monotonicNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// monotonicEpoch is the wall time at which CLOCK_MONOTONIC (the data
// plane's bpf_ktime_get_ns) was 0.
func monotonicEpoch() time.Time {
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return now
	}
	return now.Add(-time.Duration(ts.Nano()))
}

package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netlab"
)

// EIPRxByEdge returns, by edge, how many packets from the Internet each
// edge has forwarded to eip (its per-EIP rx counter in node status), and
// the oldest status update it read.
func (l *Lab) EIPRxByEdge(ctx context.Context, eip string) (map[string]uint64, time.Time, error) {
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := map[string]uint64{}
	var oldest time.Time
	for _, n := range l.Topo.NodesByRole("edge") {
		s, ok := st[n.Name]
		if !ok {
			continue
		}
		out[n.Name] = s.EIPs[eip].RxPackets
		if oldest.IsZero() || s.Updated.Before(oldest) {
			oldest = s.Updated
		}
	}
	return out, oldest, nil
}

// SpreadByEdge fetches url from the Internet node n times (a new TCP
// connection, so a new source port, each) and returns how many of the
// EIP's packets each edge forwarded meanwhile: the router's ECMP at work.
// It waits for every edge to publish a status newer than the last request
// (edges publish every 2 s).
func (l *Lab) SpreadByEdge(ctx context.Context, eip, url string, n int) (map[string]uint64, int, error) {
	before, _, err := l.EIPRxByEdge(ctx, eip)
	if err != nil {
		return nil, 0, err
	}
	failed := 0
	for i := 0; i < n; i++ {
		if _, err := l.Get(ctx, "inet", url, 2*time.Second); err != nil {
			failed++
		}
	}
	done := time.Now()
	deadline := done.Add(10 * time.Second)
	for {
		after, oldest, err := l.EIPRxByEdge(ctx, eip)
		if err != nil {
			return nil, failed, err
		}
		if oldest.After(done) {
			out := map[string]uint64{}
			for e, v := range after {
				if d := v - before[e]; d > 0 {
					out[e] = d
				}
			}
			return out, failed, nil
		}
		if time.Now().After(deadline) {
			return nil, failed, fmt.Errorf("edges did not publish their counters within 10s")
		}
		select {
		case <-ctx.Done():
			return nil, failed, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// FormatSpread prints a per-edge count map in the edges' order.
func FormatSpread(m map[string]uint64) string {
	var names []string
	for e := range m {
		names = append(names, e)
	}
	sort.Strings(names)
	s := ""
	for i, e := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", e, m[e])
	}
	if s == "" {
		return "none"
	}
	return s
}

// SetDrained drains or undrains an edge through the API (what `azgate
// edge drain|undrain` does): a drained edge withdraws its routes and
// keeps forwarding what still reaches it.
func (l *Lab) SetDrained(ctx context.Context, edge string, drained bool) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	n := l.Topo.Node(edge)
	if n == nil || n.Role != "edge" {
		return fmt.Errorf("%q is not a lab edge", edge)
	}
	o, err := c.Get(ctx, model.KindEdgeSet, n.Set)
	if err != nil {
		return err
	}
	set := o.(*model.EdgeSet)
	for i := range set.Edges {
		if set.Edges[i].Name == edge {
			set.Edges[i].Drained = drained
		}
	}
	_, err = c.Put(ctx, set)
	return err
}

// SignalRole sends sig to a node's role process (the edge or agent
// daemon; its pinned data plane stays unless the daemon removes it).
func (l *Lab) SignalRole(name string, sig syscall.Signal) (pid int, err error) {
	n := l.Topo.Node(name)
	if n == nil || n.Process == nil || !alive(n.Process.PID) {
		return 0, fmt.Errorf("no running role process on %q", name)
	}
	return n.Process.PID, syscall.Kill(n.Process.PID, sig)
}

// WaitGone waits for a process to end (a zombie counts as gone).
func WaitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still runs after %v", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// SetEdgeLinks takes all of an edge's links (Internet side, underlay,
// DMZ segment) down or up, from the edge's side: its peers see the carrier go, as when
// a cable is pulled or the machine loses power. Taking them up restores
// the edge's routes, which the kernel removed with the links.
func (l *Lab) SetEdgeLinks(edge string, up bool) error {
	n := l.Topo.Node(edge)
	if n == nil || n.Role != "edge" {
		return fmt.Errorf("%q is not a lab edge", edge)
	}
	devs := []string{"ext0", "ul0"}
	if _, ok := n.Addresses["dmz0"]; ok {
		devs = append(devs, "dmz0")
	}
	nn, err := netlab.OpenNode(n.Netns)
	if err != nil {
		return err
	}
	defer nn.Close()
	// All at once: the failover's clock starts at the first link, and a
	// process spawn per link put ~100 ms between the first and the DMZ
	// segment's on a loaded machine (a CI run's nat VIP "gap").
	if err := nn.SetLinks(up, devs...); err != nil {
		return fmt.Errorf("%s: %w", edge, err)
	}
	if !up {
		return nil
	}
	for _, r := range l.Topo.routes {
		if r.node == edge {
			if err := nn.Route(r.dst, r.gw, r.dev); err != nil {
				return err
			}
		}
	}
	return nil
}

// PulledOut and quarantined addresses are announced as /32s.
func host32(a string) netip.Prefix {
	return netip.PrefixFrom(netip.MustParseAddr(a), 32)
}

// PullOut moves an EIP into a set ("" returns it to its prefix set).
func (l *Lab) PullOut(ctx context.Context, eip, set string) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	o, err := c.Get(ctx, model.KindEIP, eip)
	if err != nil {
		return err
	}
	o.(*model.EIP).Set = set
	_, err = c.Put(ctx, o)
	return err
}

// Quarantine puts an address in the quarantine set, or releases it.
func (l *Lab) Quarantine(ctx context.Context, addr string, on bool) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	if !on {
		_, err = c.Delete(ctx, model.KindQuarantine, addr)
		return err
	}
	_, err = c.Create(ctx, &model.Quarantine{Address: netip.MustParseAddr(addr), Reason: "lab demo", By: "operator"})
	return err
}

// LogTimes returns the times of a node's log lines (its role process's
// slog text output) whose message is msg, from since on.
func (l *Lab) LogTimes(node, msg string, since time.Time) ([]time.Time, error) {
	n := l.Topo.Node(node)
	if n == nil || n.Process == nil {
		return nil, fmt.Errorf("no role process on %q", node)
	}
	b, err := os.ReadFile(n.Process.Log)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	want := "msg=" + strconv.Quote(msg)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "time=") || !strings.Contains(line, want) {
			continue
		}
		f := strings.SplitN(strings.TrimPrefix(line, "time="), " ", 2)
		t, err := time.Parse(time.RFC3339Nano, f[0])
		if err == nil && !t.Before(since) {
			out = append(out, t)
		}
	}
	return out, nil
}

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
)

// TestFirewallAndLimits drives issue 9's firewall and rate limits through
// the lab's controller (the CLI, as an operator would), in one lab:
//
//  1. a deny rule for the attacker's /24 to one EIP: the attacker's TCP
//     and UDP to it fail, the Internet client's keep working, the
//     attacker still reaches another EIP; the rule's counter shows drops;
//  2. an allow rule for the attacker's address on that other EIP makes it
//     private: the client is refused there, the attacker gets through;
//  3. deleting both restores access;
//  4. a SYN guard (`eip limits --syn-rate`) on the first EIP: a bounded
//     SYN flood from the attacker is mostly dropped (drop_rl_syn on the
//     edges), while the client's established connection keeps ≥ 99 % of
//     its requests; cleared, the guard drops nothing more.
//
// Every wait for the edges is a poll with a deadline.
func TestFirewallAndLimits(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	const open, private = "198.51.100.7", "198.51.100.8"
	if _, err := c.BindEIP(ctx, open, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BindEIP(ctx, private, "az2-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{open, private} {
		if err := waitGet(ctx, l, "http://"+a+"/", 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cli := labCLI(ctx, t, l)
	// write runs a CLI write and waits until every edge applied its
	// revision (the edges apply it at different moments: a flow the
	// router hashes to one edge may see the change before another's).
	write := func(args ...string) {
		t.Helper()
		out := cli(args...)
		m := revisionRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("azgate %s: no revision in %q", strings.Join(args, " "), out)
		}
		rev, _ := strconv.ParseInt(m[1], 10, 64)
		t0 := time.Now()
		if err := poll(10*time.Second, func() bool { return edgesApplied(ctx, l, rev) }); err != nil {
			t.Fatalf("azgate %s: revision %d not applied by every edge: %v", strings.Join(args, " "), rev, err)
		}
		t.Logf("azgate %s: revision %d applied by every edge within %v", strings.Join(args, " "), rev, time.Since(t0).Round(time.Millisecond))
	}
	const inet, atk = "inet", lab.AttackerNode
	tcpOK := func(node, addr string) bool {
		_, err := l.Get(ctx, node, "http://"+addr+"/", 600*time.Millisecond)
		return err == nil
	}
	// expect checks TCP (HTTP on 80, three connections: three source
	// ports, which the router may hash to different edges) and UDP (the
	// echo on 7000) from node to addr, all answered or none.
	expect := func(node, addr string, answered bool) {
		t.Helper()
		for i := 0; i < 3; i++ {
			if got := tcpOK(node, addr); got != answered {
				t.Errorf("TCP %s -> %s (connection %d) answered: %v, want %v", node, addr, i+1, got, answered)
				break
			}
		}
		if got := udpEcho(ctx, l, node, addr); got != answered {
			t.Errorf("UDP %s -> %s answered: %v, want %v", node, addr, got, answered)
		}
	}

	t.Run("deny", func(t *testing.T) {
		write("firewall", "add", "atk-deny", "--action", "deny", "--source", lab.AttackerNet, "--address", open)
		expect(atk, open, false)
		expect(inet, open, true)
		expect(atk, private, true) // the rule names one EIP
		var n uint64
		err := poll(8*time.Second, func() bool { n = ruleCount(cli("firewall", "get", "atk-deny"), "dropped"); return n >= 2 })
		if err != nil {
			t.Errorf("firewall get atk-deny: %d packets dropped, want the attacker's TCP and UDP (>= 2): %v", n, err)
		}
		t.Logf("atk-deny dropped %d packets", n)
	})

	t.Run("allow list makes an EIP private", func(t *testing.T) {
		before := edgeCounter(ctx, t, l, "drop_fw_private")
		write("firewall", "add", "atk-only", "--action", "allow", "--source", lab.AttackerAddr, "--address", private)
		expect(inet, private, false)
		expect(atk, private, true)
		expect(inet, open, true)
		expect(atk, open, false) // the deny rule still holds there
		var n uint64
		err := poll(8*time.Second, func() bool { n = ruleCount(cli("firewall", "get", "atk-only"), "allowed"); return n >= 2 })
		if err != nil {
			t.Errorf("firewall get atk-only: %d packets allowed, want >= 2: %v", n, err)
		}
		var after uint64
		poll(8*time.Second, func() bool { after = edgeCounter(ctx, t, l, "drop_fw_private"); return after > before })
		t.Logf("atk-only allowed %d packets; drop_fw_private %d -> %d over the edges", n, before, after)
		if after <= before {
			t.Errorf("drop_fw_private did not move on the edges (%d)", after)
		}
		list := cli("firewall", "list")
		for _, r := range []string{"atk-deny", "atk-only"} {
			if !strings.Contains(list, r) {
				t.Errorf("firewall list has no %s:\n%s", r, list)
			}
		}
	})

	t.Run("delete restores access", func(t *testing.T) {
		write("firewall", "delete", "atk-deny")
		write("firewall", "delete", "atk-only")
		expect(atk, open, true)
		expect(inet, private, true)
		if out := cli("firewall", "list"); !strings.Contains(out, "(no firewall rules)") {
			t.Errorf("firewall list after delete:\n%s", out)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("SYN guard", func(t *testing.T) {
		const synRate = 20
		edges := lab.EdgesOf(lab.PrefixSet)
		write("eip", "limits", open, "--syn-rate", strconv.Itoa(synRate))
		// Programmed: every edge's status lists the address's limits.
		if err := poll(10*time.Second, func() bool { return limitsOnEdges(ctx, l, open, edges, true) }); err != nil {
			t.Fatalf("limits on %s not reported by %v: %v", open, edges, err)
		}
		synBefore, rlBefore := edgeCounter(ctx, t, l, "drop_rl_syn"), limitDrops(ctx, l, open)

		// The client: requests on one established connection (the echo
		// port), opened before the flood.
		cl, err := dialEcho(ctx, l, inet, open)
		if err != nil {
			t.Fatal(err)
		}
		var ok, failed atomic.Int64
		cctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if cl != nil {
					cl.Close()
				}
			}()
			for i := 0; cctx.Err() == nil; i++ {
				if err := cl.roundTrip(fmt.Sprintf("req %d", i), time.Second); err != nil {
					if cctx.Err() != nil {
						return
					}
					failed.Add(1)
					t.Logf("client request %d: %v", i, err)
					cl.Close()
					if cl, err = dialEcho(cctx, l, inet, open); err != nil {
						failed.Add(1)
						t.Logf("client reconnect: %v", err)
						return
					}
				} else {
					ok.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		spec := lab.FloodSpec{Kind: lab.FloodSYN, Dst: netip.MustParseAddr(open), Port: 81, PPS: 3000, Duration: 2 * time.Second}
		st, ferr := l.Flood(ctx, atk, spec)
		time.Sleep(300 * time.Millisecond)
		stop()
		wg.Wait()
		if ferr != nil {
			t.Fatal(ferr)
		}
		n, f := ok.Load(), failed.Load()
		t.Logf("flood: %d SYNs in %v (%d send errors); client: %d requests on its connection, %d failed",
			st.Sent, st.Ended.Sub(st.Started).Round(time.Millisecond), st.Errors, n+f, f)
		if n+f < 100 || float64(n) < 0.99*float64(n+f) {
			t.Errorf("client kept %d of %d requests, want at least 99 %%", n, n+f)
		}
		// The guard's bucket is shared by an edge's CPUs: each edge lets
		// through at most a burst (synRate) and synRate/s. Read the
		// counters once every edge published a status after the flood.
		floodEnd := time.Now()
		if err := poll(6*time.Second, func() bool { return statusesAfter(ctx, l, edges, floodEnd) }); err != nil {
			t.Fatalf("no status after the flood: %v", err)
		}
		syn, rl := edgeCounter(ctx, t, l, "drop_rl_syn")-synBefore, limitDrops(ctx, l, open)-rlBefore
		secs := uint64(st.Ended.Sub(st.Started)/time.Second) + 1
		allowance := 2 * uint64(len(edges)) * synRate * (secs + 1) // twice the bound: CAS losses pass uncharged
		t.Logf("drop_rl_syn +%d over the edges, limit_drops[%s].syn +%d, of %d SYNs sent (at most %d may pass)", syn, open, rl, st.Sent, allowance)
		if st.Sent <= allowance {
			// Fewer SYNs than may pass: the check below could not fail.
			t.Errorf("the flood sent %d SYNs (%d send errors), no more than the %d the guard may pass", st.Sent, st.Errors, allowance)
		}
		if syn+allowance < st.Sent || rl+allowance < st.Sent {
			t.Errorf("the SYN guard dropped %d (stats) / %d (limit_drops) of %d SYNs: %d passed, want at most %d",
				syn, rl, st.Sent, st.Sent-min(syn, rl), allowance)
		}

		// Cleared: the edges drop the limits, and a SYN burst passes.
		write("eip", "limits", open, "--clear")
		if err := poll(10*time.Second, func() bool { return !limitsOnEdges(ctx, l, open, edges, false) }); err != nil {
			t.Fatalf("limits on %s still reported after --clear: %v", open, err)
		}
		synBefore = edgeCounter(ctx, t, l, "drop_rl_syn")
		spec.PPS, spec.Duration = 500, time.Second
		st, ferr = l.Flood(ctx, atk, spec)
		if ferr != nil {
			t.Fatal(ferr)
		}
		end := time.Now()
		// Wait for a status published after the burst by every edge.
		if err := poll(6*time.Second, func() bool { return statusesAfter(ctx, l, edges, end) }); err != nil {
			t.Fatalf("no status after the burst: %v", err)
		}
		if st.Sent == 0 {
			t.Errorf("the burst after --clear sent no SYN (%d send errors)", st.Errors)
		}
		if d := edgeCounter(ctx, t, l, "drop_rl_syn") - synBefore; d != 0 {
			t.Errorf("drop_rl_syn +%d for a burst of %d SYNs after the limits were cleared", d, st.Sent)
		}
		if !tcpOK(inet, open) {
			t.Errorf("%s does not answer after the limits were cleared", open)
		}
	})
}

// poll calls cond every 100 ms until it holds or timeout passes.
func poll(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var revisionRe = regexp.MustCompile(`\(revision (\d+)\)`)

// edgesApplied reports whether every lab edge's status says it applied
// revision rev (statuses are published every 2 s).
func edgesApplied(ctx context.Context, l *lab.Lab, rev int64) bool {
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		return false
	}
	for _, e := range lab.Edges {
		if s, ok := st[e.Name]; !ok || s.AppliedRevision < rev {
			return false
		}
	}
	return true
}

var ruleCountRe = regexp.MustCompile(`(dropped|allowed):\s+(\d+) packets`)

// ruleCount reads the "dropped:" or "allowed:" packets of `azgate
// firewall get` (0 when absent: no edge reports the rule yet).
func ruleCount(out, what string) uint64 {
	for _, m := range ruleCountRe.FindAllStringSubmatch(out, -1) {
		if m[1] == what {
			n, _ := strconv.ParseUint(m[2], 10, 64)
			return n
		}
	}
	return 0
}

// edgeCounter sums a data-plane counter over the edges' statuses.
func edgeCounter(ctx context.Context, t *testing.T, l *lab.Lab, name string) uint64 {
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		t.Errorf("node statuses: %v", err)
		return 0
	}
	var n uint64
	for _, s := range st {
		if s.Role == "edge" {
			n += s.Counters[name].Packets
		}
	}
	return n
}

// limitDrops sums addr's SYN-guard drops over the edges' statuses.
func limitDrops(ctx context.Context, l *lab.Lab, addr string) uint64 {
	st, _ := l.NodeStatuses(ctx)
	var n uint64
	for _, s := range st {
		n += s.LimitDrops[addr].SYN
	}
	return n
}

// limitsOnEdges reports whether every one of edges lists addr's limits in
// its status (all), or whether any does (!all).
func limitsOnEdges(ctx context.Context, l *lab.Lab, addr string, edges []string, all bool) bool {
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		return !all
	}
	for _, e := range edges {
		_, has := st[e].LimitDrops[addr]
		if has != all {
			return !all
		}
	}
	return all
}

// statusesAfter reports whether every one of edges published a status
// after t.
func statusesAfter(ctx context.Context, l *lab.Lab, edges []string, t time.Time) bool {
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		return false
	}
	for _, e := range edges {
		if s, ok := st[e]; !ok || !s.Updated.After(t) {
			return false
		}
	}
	return true
}

// udpEcho sends a datagram from node to addr's echo port and reports
// whether the answer came (three tries, 400 ms each).
func udpEcho(ctx context.Context, l *lab.Lab, node, addr string) bool {
	conn, err := lab.Dialer(l.Topo.Node(node).Netns)(ctx, "udp", net.JoinHostPort(addr, strconv.Itoa(int(lab.ServePorts.Echo))))
	if err != nil {
		return false
	}
	defer conn.Close()
	buf := make([]byte, 512)
	for i := 0; i < 3; i++ {
		conn.Write([]byte("ping"))
		conn.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
		if n, err := conn.Read(buf); err == nil && strings.Contains(string(buf[:n]), "ping") {
			return true
		}
	}
	return false
}

// lineConn is a TCP connection to a lab server's line echo.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

// dialEcho connects from node to addr's echo port and reads its greeting.
func dialEcho(ctx context.Context, l *lab.Lab, node, addr string) (*lineConn, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := lab.Dialer(l.Topo.Node(node).Netns)(dctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(int(lab.ServePorts.Echo))))
	if err != nil {
		return nil, err
	}
	e := &lineConn{conn, bufio.NewReader(conn)}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := e.r.ReadString('\n'); err != nil {
		conn.Close()
		return nil, fmt.Errorf("echo greeting: %w", err)
	}
	return e, nil
}

// roundTrip sends one line and waits for it back.
func (e *lineConn) roundTrip(line string, timeout time.Duration) error {
	e.SetDeadline(time.Now().Add(timeout))
	if _, err := e.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := e.r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != line {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

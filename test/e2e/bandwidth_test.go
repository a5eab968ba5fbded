package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
)

// The shared-bandwidth scenario (issue 10; docs/lab.md "Shared
// bandwidth"): three EIPs bound in three AZs share one 100 Mbit/s package
// with weights 1, 1, 2. The Internet client sends each a UDP load (64
// flows, so rtr's ECMP spreads it over the prefix set's four edges), more
// than the package; the guests count what arrives. Internet -> EIP is
// the ingress direction, enforced by the edges (zone "edge").
const (
	bwCapacity = 100e6 // bit/s
	// bwGrace is the managers' and roles' grace period: the default, so
	// that a takeover (the lease's 3 s and a round) fits well inside the
	// TTL of the limits the deposed manager wrote last.
	bwGrace = 10 * time.Second
	bwFlows = 64
	// bwStallTolerance: a window in which the load's sender was not
	// scheduled for longer than this (summed) may fall short of the
	// capacity through the lab's own fault (checkWindows).
	bwStallTolerance = 20 * time.Millisecond
)

var bwEIPs = []struct {
	addr, host, guest string
	weight            float64
}{
	{"198.51.100.7", "az1-h1", "az1-h1-g1", 1},
	{"198.51.100.8", "az2-h2", "az2-h2-g1", 1},
	{"198.51.100.9", "az3-h1", "az3-h1-g1", 2},
}

// TestSharedBandwidth: once converged the receivers get the package's
// capacity (the mean ±5 %, no 1 s window over +5 % or under -10 %)
// shared by weight (±10 % of each share); a demand step hands the spare to the others; killing the active region manager
// changes nothing (the standby takes over); with no region manager the
// edges keep their limits for the grace period and then fall to the
// static split (capacity × weight share, divided over the edges carrying
// the EIP); a region manager restarted brings the fair shares back with
// no 1 s window over 1.05 × capacity. Then a short reverse check
// (iperf3 -R, guest -> Internet, enforced by the agents). The figures go
// to the log (BENCHMARKS.md, "Shared bandwidth in the lab").
func TestSharedBandwidth(t *testing.T) {
	l := upLabWith(t, func(c *lab.Config) { c.BWGrace = bwGrace })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range bwEIPs {
		if _, err := c.BindEIP(ctx, e.addr, e.host, "g1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range bwEIPs {
		if err := waitGet(ctx, l, "http://"+e.addr+"/", 20*time.Second); err != nil {
			t.Fatalf("%s: %v", e.addr, err)
		}
	}
	cli := labCLI(ctx, t, l)
	args := []string{"bandwidth", "create", "shared", "--capacity", "100M"}
	for _, e := range bwEIPs {
		args = append(args, "--eip", fmt.Sprintf("%s,weight=%g", e.addr, e.weight))
	}
	cli(args...)
	t.Logf("package: %s", strings.TrimSpace(cli("bandwidth", "get", "shared")))

	var targets []lab.LoadTarget
	offered := map[string]uint64{bwEIPs[0].addr: 70e6, bwEIPs[1].addr: 70e6, bwEIPs[2].addr: 140e6}
	for _, e := range bwEIPs {
		targets = append(targets, lab.LoadTarget{EIP: e.addr, Guest: e.guest, Rate: offered[e.addr], Flows: bwFlows})
	}
	ld, err := l.StartLoad(targets)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Stop()
	t0 := time.Now()
	logWindows := func(what string, from, to time.Time) {
		for _, w := range ld.Windows(from, to, time.Second) {
			st := ""
			if d := ld.Stalled(w.Start, w.Start.Add(time.Second)); d > 0 {
				st = fmt.Sprintf("  (sender stalled %v)", d.Round(time.Millisecond))
			}
			t.Logf("  %s +%4.1fs: total %6.2f Mbit/s  %s%s", what, w.Start.Sub(from).Seconds(), w.Total/1e6, fmtRates(w.Rates), st)
		}
	}
	defer func() {
		if t.Failed() {
			logBWState(ctx, t, l)
		}
	}()

	// Fair shares by weight: every EIP wants more than its share.
	fair := map[string]float64{}
	for _, e := range bwEIPs {
		fair[e.addr] = bwCapacity * e.weight / 4
	}
	conv, err := waitShares(ctx, ld, fair, 45*time.Second)
	logWindows("converge", t0, time.Now())
	if err != nil {
		t.Fatalf("not converged to %s: %v", fmtRates(fair), err)
	}
	// The edges start from the static split, which is the weighted share
	// when every EIP wants more than it: the shares hold from the start.
	t.Logf("the weighted shares %v after the load started", max(conv.Sub(t0), 0).Round(100*time.Millisecond))
	// Converged means the managers' limits, not the static split the
	// edges start from (which happens to give the same shares here): the
	// steady windows are measured once every edge runs managed limits
	// and the shares have settled under them.
	if err := waitModes(ctx, l, "managed", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	managed := time.Now()
	if _, err := waitSharesAfter(ctx, ld, fair, managed, 30*time.Second); err != nil {
		logWindows("managed", managed, time.Now())
		t.Fatalf("not converged to %s under the managers' limits: %v", fmtRates(fair), err)
	}
	t.Logf("managed limits on every edge %v after the load started, shares settled %v later",
		managed.Sub(t0).Round(100*time.Millisecond), time.Since(managed).Round(100*time.Millisecond))
	t.Run("steady: capacity shared by weight", func(t *testing.T) {
		from := time.Now()
		sleep(ctx, 10*time.Second)
		logWindows("steady", from, time.Now())
		checkWindows(t, ld, from, time.Now(), fair, 0.05, 0.10)
		if err := waitModes(ctx, l, "managed", 5*time.Second); err != nil {
			t.Error(err)
		}
	})

	// A demand step: .7 drops to 10 Mbit/s; its limit follows its demand
	// (its estimate is the recent peak × 1.1) and the rest goes to the
	// others by weight.
	low := bwEIPs[0].addr
	ld.SetRate(low, 10e6)
	stepped := map[string]float64{low: 10e6}
	rest := bwCapacity - 11e6
	stepped[bwEIPs[1].addr], stepped[bwEIPs[2].addr] = rest/3, 2*rest/3
	tStep := time.Now()
	conv, err = waitShares(ctx, ld, stepped, 30*time.Second)
	logWindows("step", tStep, time.Now())
	if err != nil {
		t.Fatalf("not converged to %s after %s dropped to 10 Mbit/s: %v", fmtRates(stepped), low, err)
	}
	t.Logf("after the step (%s 70 -> 10 Mbit/s) converged to %s in %v", low, fmtRates(stepped), conv.Sub(tStep).Round(100*time.Millisecond))
	// With the spare handed out the receivers get 10 + 89 Mbit/s.
	stepTotal := 10e6 + rest

	active, err := l.BWActive(ctx, lab.BWRegionTier)
	if err != nil || active == "" {
		t.Fatalf("no active region manager (%q, %v)", active, err)
	}
	standby := "region-1"
	if active == standby {
		standby = "region-2"
	}
	t.Run("active region manager killed: the standby takes over", func(t *testing.T) {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch() // a t.Fatal below leaves the watchers polling through the later subtests otherwise
		watched := make(chan []string, 1)
		go func() { watched <- watchLimits(wctx, l, lab.BWRegionTier, lab.BWEdgeZone) }()
		edgeWatch := map[string]chan []string{}
		for _, e := range lab.EdgesOf(lab.PrefixSet) {
			ch := make(chan []string, 1)
			edgeWatch[e] = ch
			go func() { ch <- watchLimits(wctx, l, lab.BWEdgeZone, e) }()
		}
		tKill := time.Now()
		if err := l.KillBWManager(active, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var took time.Duration
		err := poll(20*time.Second, func() bool {
			h, err := l.BWActive(ctx, lab.BWRegionTier)
			took = time.Since(tKill)
			return err == nil && h == standby
		})
		if err != nil {
			t.Fatalf("%s did not take the region over: %v", standby, err)
		}
		t.Logf("%s (SIGKILL) -> %s active after %v", active, standby, took.Round(10*time.Millisecond))
		sleep(ctx, time.Until(tKill.Add(took+10*time.Second)))
		stopWatch()
		logWindows("takeover", tKill, time.Now())
		t.Logf("the region's limits for zone %s meanwhile (killed at %s):", lab.BWEdgeZone, tKill.Format("15:04:05.000"))
		for _, line := range <-watched {
			t.Log("  " + line)
		}
		checkWindows(t, ld, tKill, time.Now(), stepped, 0.05*bwCapacity/stepTotal, 0.10)
		for _, e := range lab.EdgesOf(lab.PrefixSet) {
			lines := <-edgeWatch[e]
			if t.Failed() {
				t.Logf("zone %s's limits for %s meanwhile:", lab.BWEdgeZone, e)
				for _, line := range lines {
					t.Log("  " + line)
				}
			}
		}
		if t.Failed() {
			logZone(ctx, t, l, lab.BWEdgeZone)
		}
	})

	t.Run("no region manager: limits held, then the static split", func(t *testing.T) {
		tKill := time.Now()
		if err := l.KillBWManager(standby, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The static split: capacity × weight share per EIP (divided by
		// the edges carrying it, each enforcing its part of the flows
		// rtr hashes to it); .7 still wants only 10 Mbit/s.
		static := map[string]float64{low: 10e6}
		for _, e := range bwEIPs[1:] {
			static[e.addr] = bwCapacity * e.weight / 4
		}
		fell, err := waitSharesAfter(ctx, ld, static, tKill, 3*bwGrace+10*time.Second)
		logWindows("fallback", tKill, time.Now())
		if err != nil {
			t.Fatalf("no static split %s: %v", fmtRates(static), err)
		}
		t.Logf("both region managers killed: the static split %s from %v after the kill (grace %v)", fmtRates(static), fell.Sub(tKill).Round(100*time.Millisecond), bwGrace)
		// For the grace period the last limits hold.
		held := tKill.Add(bwGrace - time.Second)
		sleep(ctx, time.Until(held))
		checkWindows(t, ld, tKill, held, stepped, 0.05*bwCapacity/stepTotal, 0.10)
		if fell.Before(held) {
			t.Errorf("the static split came %v after the kill, within the grace period %v", fell.Sub(tKill), bwGrace)
		}
		if err := waitModes(ctx, l, "static", 5*time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			logZone(ctx, t, l, lab.BWEdgeZone)
		}
		from := time.Now()
		sleep(ctx, 4*time.Second)
		checkWindows(t, ld, from, time.Now(), static, 0.05*bwCapacity/(10e6+75e6), 0.10)
	})

	t.Run("region manager restarted: fair shares without a burst", func(t *testing.T) {
		tStart := time.Now()
		if err := l.StartBWManager(active); err != nil {
			t.Fatal(err)
		}
		back, err := waitShares(ctx, ld, stepped, 40*time.Second)
		if err == nil {
			sleep(ctx, 3*time.Second)
		}
		logWindows("return", tStart, time.Now())
		if err != nil {
			t.Fatalf("not back to %s: %v", fmtRates(stepped), err)
		}
		peak, at := maxWindow(ld, tStart, time.Now(), time.Second)
		t.Logf("%s restarted: fair shares %v later; the highest 1 s window since %6.2f Mbit/s (at +%v)", active, back.Sub(tStart).Round(100*time.Millisecond), peak/1e6, at.Sub(tStart).Round(100*time.Millisecond))
		if peak > 1.05*bwCapacity {
			t.Errorf("a 1 s window of %.2f Mbit/s at +%v after the restart: over 1.05 × capacity", peak/1e6, at.Sub(tStart))
		}
		if err := waitModes(ctx, l, "managed", 5*time.Second); err != nil {
			t.Error(err)
		}
	})
	ld.Stop()

	// Guest -> Internet, enforced by the agents (each EIP's egress in its
	// own AZ's zone), with TCP. The package's default burst (20 ms) is
	// hostile to TCP: a policer that drops whatever exceeds 20 ms of an
	// EIP's share makes TCP back off to about a third of its limit
	// (docs/lab.md, "Shared bandwidth"); at 100 ms it fills the package.
	t.Run("reverse: guests to the Internet through the agents", func(t *testing.T) {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 45*time.Second {
			// A failure, not a skip: the phases before normally leave
			// about 3 minutes of the 5, and step 6 is part of the test.
			t.Fatalf("only %v left of the test's 5 min for the reverse check (needs 45 s): the phases before took too long", time.Until(dl).Round(time.Second))
		}
		sum, per := iperfReverse(ctx, t, l, 8*time.Second)
		t.Logf("iperf3 -R, burst 20ms (TCP, 4 streams per EIP, 8 s, first 3 s omitted): total %.2f Mbit/s  %s", sum/1e6, fmtRates(per))
		if sum > 1.05*bwCapacity {
			t.Errorf("egress total %.2f Mbit/s over 1.05 × capacity", sum/1e6)
		}
		cli("bandwidth", "set", "shared", "--burst", "100ms")
		sleep(ctx, 2*time.Second)
		sum, per = iperfReverse(ctx, t, l, 8*time.Second)
		t.Logf("iperf3 -R, burst 100ms: total %.2f Mbit/s  %s", sum/1e6, fmtRates(per))
		// TCP goodput: the limits count IP bytes, about 3.7 % more than
		// the payload iperf3 counts with the guests' 1,458-byte MTU, and
		// TCP under a policer (no queue) runs below the limit by a margin
		// that varies by run: 79.98-94 Mbit/s measured (a CI run's 79.98
		// failed a floor of 80). The floor of 70 still tells a 100 ms
		// burst (most of the package) from a 20 ms one (about a third).
		if sum > 1.05*bwCapacity || sum < 0.7*bwCapacity {
			t.Errorf("egress total %.2f Mbit/s with a 100 ms burst, want 70-105 Mbit/s", sum/1e6)
		}
		// What got through is shared by weight: each EIP's part of the
		// total within 25 % of its weight's part. Looser than the ingress
		// check's 10 %, which asserts the allocation: here TCP's own
		// shortfall under a policer differs by stream and run (21.2 % for
		// a 25 % weight in one run of four with the limits by weight).
		for _, e := range bwEIPs {
			if got, want := per[e.addr]/sum, e.weight/4; math.Abs(got-want) > 0.25*want {
				t.Errorf("%s: %.1f %% of the egress total, want %.1f %% (its weight) ± 25 %%", e.addr, 100*got, 100*want)
			}
		}
	})
}

// waitModes waits until every edge of the prefix set says (in its
// published status) that its bandwidth limits are in mode.
func waitModes(ctx context.Context, l *lab.Lab, mode string, timeout time.Duration) error {
	var last map[string]string
	err := poll(timeout, func() bool {
		st, err := l.NodeStatuses(ctx)
		if err != nil {
			return false
		}
		last = map[string]string{}
		ok := true
		for _, e := range lab.EdgesOf(lab.PrefixSet) {
			m := "-"
			if b := st[e].Bandwidth; b != nil {
				m = b.Mode
			}
			last[e] = m
			ok = ok && m == mode
		}
		return ok
	})
	if err != nil {
		return fmt.Errorf("edges' bandwidth mode %v, want all %s: %v", last, mode, err)
	}
	return nil
}

// waitShares waits until the last 2 s received match want: each EIP
// within 10 % of its figure and the total within 5 % of theirs; it returns
// the start of the first such window.
func waitShares(ctx context.Context, ld *lab.Load, want map[string]float64, timeout time.Duration) (time.Time, error) {
	return waitSharesAfter(ctx, ld, want, time.Time{}, timeout)
}

// waitSharesAfter is waitShares counting only what arrived after
// notBefore (at least 1 s of it).
func waitSharesAfter(ctx context.Context, ld *lab.Load, want map[string]float64, notBefore time.Time, timeout time.Duration) (time.Time, error) {
	var total float64
	for _, v := range want {
		total += v
	}
	deadline := time.Now().Add(timeout)
	var last map[string]float64
	for {
		now := time.Now()
		from := now.Add(-2 * time.Second)
		if from.Before(notBefore) {
			from = notBefore
		}
		if now.Sub(from) < time.Second {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		if ld.Stalled(from, now) > bwStallTolerance {
			// A stalled sender offers less than it should: its window can
			// look like smaller shares (a loaded run took a stall for
			// the static split 10 s early). Not evidence either way.
			if now.After(deadline) || ctx.Err() != nil {
				return time.Time{}, fmt.Errorf("not within %v: the load's sender stalled", timeout)
			}
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		got := ld.Received(from, now)
		last = got
		ok := true
		var sum float64
		for a, w := range want {
			sum += got[a]
			if math.Abs(got[a]-w) > 0.10*w {
				ok = false
			}
		}
		if ok && math.Abs(sum-total) <= 0.05*total {
			return from, nil
		}
		if now.After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("not within %v: last 2 s %s", timeout, fmtRates(last))
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// checkWindows checks every whole 1 s window of [from, to): the total
// within aggTol of the wanted total (a fraction), and each EIP's mean
// over the windows counted (not excused by a stalled sender) within
// shareTol of its figure.
func checkWindows(t *testing.T, ld *lab.Load, from, to time.Time, want map[string]float64, aggTol, shareTol float64) {
	t.Helper()
	var total float64
	for _, v := range want {
		total += v
	}
	ws := ld.Windows(from, to, time.Second)
	if len(ws) == 0 {
		t.Fatalf("no whole window in [%v, %v)", from, to)
	}
	// The upper bound holds in every 1 s window: going over the package
	// is what the managers must never let happen. Under it, the limiter
	// is one of several places a packet can be lost: 280 Mbit/s of UDP
	// through four edges and three agents on two shared cores also
	// overflow veth queues and socket buffers downstream of the buckets,
	// a few % in a window on a loaded machine (a CI run saw 93.1 Mbit/s
	// with 99 Mbit/s of limits in force and unchanged). So the ±aggTol
	// bound is on the phase's mean, and a single window may fall to
	// twice aggTol under: still a failure if the limits starve the EIPs.
	floor := 1 - 2*aggTol
	stalled := 0
	shares := map[string]float64{} // summed over the windows counted
	var sum float64
	counted := 0
	for _, w := range ws {
		at := w.Start.Sub(from).Round(100 * time.Millisecond)
		if w.Total > (1+aggTol)*total {
			t.Errorf("window +%v: total %.2f Mbit/s, want at most %.2f + %.0f %%", at, w.Total/1e6, total/1e6, aggTol*100)
		}
		if w.Total < floor*total {
			// A sender not scheduled offers nothing meanwhile, and the
			// edges' buckets keep only their burst for when it resumes:
			// a window it stalled in is the lab's own shortfall, as far
			// as the stall explains it: a stall of tens of ms explains a
			// few %, not a collapse (review); one of 492 ms (a CI dry
			// run's, beside other work) explains half the window.
			if st := ld.Stalled(w.Start, w.Start.Add(time.Second)); st > bwStallTolerance && w.Total >= (floor-st.Seconds())*total {
				t.Logf("window +%v: total %.2f Mbit/s, under %.2f - %.0f %%, but the load's sender stalled %v in it: not counted", at, w.Total/1e6, total/1e6, 2*aggTol*100, st.Round(time.Millisecond))
				stalled++
				continue
			}
			t.Errorf("window +%v: total %.2f Mbit/s, want at least %.2f - %.0f %% in any window", at, w.Total/1e6, total/1e6, 2*aggTol*100)
		}
		sum += w.Total
		counted++
		for a, r := range w.Rates {
			shares[a] += r
		}
	}
	if 2*stalled > len(ws) {
		t.Errorf("the load's sender stalled in %d of %d windows: the machine is too loaded to measure", stalled, len(ws))
	}
	if counted > 0 {
		if m := sum / float64(counted); math.Abs(m-total) > aggTol*total {
			t.Errorf("mean of %d windows: total %.2f Mbit/s, want %.2f ± %.0f %%", counted, m/1e6, total/1e6, aggTol*100)
		}
	}
	// Each EIP's share over the windows counted (a window the sender
	// stalled in starves every EIP alike, and says nothing of shares).
	for a, v := range want {
		if counted == 0 {
			break
		}
		if m := shares[a] / float64(counted); math.Abs(m-v) > shareTol*v {
			t.Errorf("%s: %.2f Mbit/s over the %d windows counted, want %.2f ± %.0f %%", a, m/1e6, counted, v/1e6, shareTol*100)
		}
	}
}

// maxWindow is the highest total of any width window starting in [from,
// to - width], in steps of 100 ms (sliding, not only aligned windows).
func maxWindow(ld *lab.Load, from, to time.Time, width time.Duration) (float64, time.Time) {
	var peak float64
	var at time.Time
	for s := from; !s.Add(width).After(to); s = s.Add(100 * time.Millisecond) {
		var sum float64
		for _, v := range ld.Received(s, s.Add(width)) {
			sum += v
		}
		if sum > peak {
			peak, at = sum, s
		}
	}
	return peak, at
}

func fmtRates(r map[string]float64) string {
	var keys []string
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s %6.2f", k, r[k]/1e6)
	}
	return b.String() + " Mbit/s"
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// logBWState logs what the stores hold (each zone's limits per node and
// the region's per zone) and who is active: what a failure needs.
func logBWState(ctx context.Context, t *testing.T, l *lab.Lab) {
	for _, z := range []string{lab.BWEdgeZone, "az1", "az2", "az3", lab.BWRegionTier} {
		logZone(ctx, t, l, z)
	}
	for _, m := range l.BWManagers() {
		b, _ := os.ReadFile(m.Log)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("bandwidth manager %s: pid %d, log %s, last lines:\n%s", m.Name, m.PID, m.Log, strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
}

// logZone logs a zone's reports and limits and its active manager.
func logZone(ctx context.Context, t *testing.T, l *lab.Lab, z string) {
	if a, err := l.BWActive(ctx, z); err == nil {
		t.Logf("bandwidth %s: active manager %q", z, a)
	}
	s, err := l.BWStore(z)
	if err != nil {
		t.Logf("bandwidth store %s: %v", z, err)
		return
	}
	snap, err := s.ReadReports(ctx, z)
	if err != nil {
		t.Logf("bandwidth store %s: reports: %v", z, err)
	}
	hosts := map[string]bool{}
	for _, r := range snap.Reports {
		hosts[r.Reporter] = true
		t.Logf("  %s report %s: %s %v %.2f Mbit/s (drops %.2f) age %v", z, r.Reporter, r.EIP, r.Dir, float64(r.BytesPerSec)*8/1e6, float64(r.DropBytesPerSec)*8/1e6, r.Age)
	}
	if z == lab.BWRegionTier {
		hosts = map[string]bool{lab.BWEdgeZone: true, "az1": true, "az2": true, "az3": true}
	}
	for h := range hosts {
		hl, ok, err := s.ReadLimits(ctx, z, h)
		if err != nil || !ok {
			t.Logf("  %s limits of %s: none (%v)", z, h, err)
			continue
		}
		var ls []string
		for _, x := range hl.Limits.Limits {
			ls = append(ls, fmt.Sprintf("%s/%v %.2f Mbit/s burst %d", x.EIP, x.Dir, float64(x.RateBytes)*8/1e6, x.BurstBytes))
		}
		t.Logf("  %s limits of %s: gen %d age %v: %s", z, h, hl.Generation, hl.Age, strings.Join(ls, ", "))
	}
	s.Close()
}

// iperfReverse runs iperf3 -R from the Internet client to each EIP at
// once (the guests send) and returns the received bits/s, total and per
// EIP, as the clients (the receivers) measured them.
func iperfReverse(ctx context.Context, t *testing.T, l *lab.Lab, d time.Duration) (float64, map[string]float64) {
	t.Helper()
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			s.Process.Kill()
			s.Wait()
		}
	}()
	for _, e := range bwEIPs {
		s := netns.Command(l.Topo.Node(e.guest).Netns, "iperf3", "-s", "-1", "-p", "5201")
		if err := s.Start(); err != nil {
			t.Fatalf("iperf3 server in %s: %v", e.guest, err)
		}
		servers = append(servers, s)
	}
	time.Sleep(300 * time.Millisecond)
	type res struct {
		eip string
		bps float64
		err error
	}
	ch := make(chan res, len(bwEIPs))
	for _, e := range bwEIPs {
		go func() {
			cmd := netns.Command(l.Topo.Node("inet").Netns, "iperf3", "-c", e.addr, "-p", "5201", "-R", "-P", "4", "-O", "3",
				"-t", fmt.Sprint(int(d.Seconds())), "--connect-timeout", "3000", "-J")
			// Bounded: a client stuck past its run (and the warm-up it
			// omits) is killed, not waited for until go test's timeout.
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			err := cmd.Start()
			if err == nil {
				stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
				timer := time.AfterFunc(d+3*time.Second+20*time.Second, func() { cmd.Process.Kill() })
				err = cmd.Wait()
				timer.Stop()
				stop()
			}
			out := stdout.Bytes()
			if err != nil {
				ch <- res{e.addr, 0, fmt.Errorf("iperf3 -c %s: %v: %s", e.addr, err, out)}
				return
			}
			var j struct {
				End struct {
					SumReceived struct {
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out, &j); err != nil {
				ch <- res{e.addr, 0, fmt.Errorf("iperf3 -c %s: %v", e.addr, err)}
				return
			}
			ch <- res{e.addr, j.End.SumReceived.BitsPerSecond, nil}
		}()
	}
	per := map[string]float64{}
	var sum float64
	for range bwEIPs {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		per[r.eip] = r.bps
		sum += r.bps
	}
	return sum, per
}

// watchLimits polls a host's limits in a zone's store every 100 ms until
// ctx ends and returns a line per new generation (or disappearance).
func watchLimits(ctx context.Context, l *lab.Lab, zone, host string) []string {
	s, err := l.BWStore(zone)
	if err != nil {
		return []string{err.Error()}
	}
	defer s.Close()
	var out []string
	var last uint64
	had := true
	for ctx.Err() == nil {
		hl, ok, err := s.ReadLimits(ctx, zone, host)
		now := time.Now().Format("15:04:05.000")
		switch {
		case err != nil:
			if len(out) == 0 || !strings.HasSuffix(out[len(out)-1], err.Error()) {
				out = append(out, now+": "+err.Error())
			}
		case !ok && had:
			out = append(out, now+": none")
			had = false
		case ok && hl.Generation != last:
			var ls []string
			for _, x := range hl.Limits.Limits {
				ls = append(ls, fmt.Sprintf("%s/%v %.2f", x.EIP, x.Dir, float64(x.RateBytes)*8/1e6))
			}
			sort.Strings(ls)
			out = append(out, fmt.Sprintf("%s: gen %d: %s Mbit/s", now, hl.Generation, strings.Join(ls, ", ")))
			last, had = hl.Generation, true
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return out
}

package lab

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbesMeasureAGap runs probe flows against a loopback UDP echo that
// answers like the lab's servers ("NAME: " + datagram) and drops
// everything for a while: every flow sees one hole as long as the outage,
// counted by send times; a target that stops answering for good is
// counted unrecovered, its gap at least the time since its last reply;
// every reply is counted by the server that sent it.
func TestProbesMeasureAGap(t *testing.T) {
	var dropping, dead atomic.Bool
	echo := func(stop *atomic.Bool) string {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if dropping.Load() || stop.Load() {
					continue
				}
				pc.WriteTo(append([]byte("srv: "), buf[:n]...), from)
			}
		}()
		return pc.LocalAddr().String()
	}
	var never atomic.Bool
	gapTarget, deadTarget := echo(&never), echo(&dead)
	dial := func(ua *net.UDPAddr) (*net.UDPConn, error) { return net.DialUDP("udp4", nil, ua) }
	p, err := startProbes(dial, []string{gapTarget, deadTarget}, 4, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	dropping.Store(true)
	time.Sleep(200 * time.Millisecond)
	dropping.Store(false)
	time.Sleep(300 * time.Millisecond)
	dead.Store(true)
	time.Sleep(1500 * time.Millisecond)
	stats := p.Stop()
	if len(stats) != 2 {
		t.Fatalf("stats for %d targets, want 2", len(stats))
	}
	g, d := stats[0], stats[1]
	if g.Target != gapTarget {
		g, d = d, g
	}
	t.Logf("gap target: %+v", g)
	t.Logf("dead target: %+v", d)
	if g.Flows != 4 || g.FlowsHit != 4 || g.Unrecovered != 0 {
		t.Errorf("gap target: %d flows, %d hit, %d unrecovered; want 4, 4, 0", g.Flows, g.FlowsHit, g.Unrecovered)
	}
	// 200 ms of drops: a hole of about 200 ms in send times (one interval
	// more at most, and the scheduling of a loaded machine).
	if g.Gap < 180*time.Millisecond || g.Gap > 400*time.Millisecond {
		t.Errorf("gap target: gap %v, want about 200ms", g.Gap)
	}
	// About 40 lost per flow (200 ms / 5 ms); as few as 16 when a loaded
	// machine schedules each flow's sender every 10-12 ms (a CI dry run
	// beside a saturating benchmark lost 23 per flow in a 240 ms hole).
	if perFlow := g.Lost / 4; perFlow < 16 || perFlow > 80 {
		t.Errorf("gap target: %d lost per flow, want about 40 (200ms / 5ms), at least 16", perFlow)
	}
	// Every reply is counted by who sent it.
	if a, ok := g.Servers["srv"]; len(g.Servers) != 1 || !ok || a.Replies != g.Sent-g.Lost || !a.Last.After(a.First) {
		t.Errorf("gap target: answered by %+v, want srv alone with %d replies (sent %d, lost %d)", g.Servers, g.Sent-g.Lost, g.Sent, g.Lost)
	}
	if d.Unrecovered != 4 || d.Gap < 1400*time.Millisecond {
		t.Errorf("dead target: %d unrecovered, gap %v; want 4 and at least 1.4s", d.Unrecovered, d.Gap)
	}
	if d.FirstLoss.IsZero() || !d.LastLoss.After(d.FirstLoss) {
		t.Errorf("dead target: losses from %v to %v", d.FirstLoss, d.LastLoss)
	}
}

// TestProbedGapSkipsSenderStalls: a hole's gap counts the time the flows
// were probed; a sender starved between two rounds counts four intervals
// at most (a CI run's sender stalled 250 ms around one lost datagram and
// the link-down failover read it as a 260 ms outage).
func TestProbedGapSkipsSenderStalls(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	p := &Probes{interval: 10 * ms}
	for _, at := range []time.Duration{0, 10 * ms, 20 * ms, 270 * ms, 280 * ms, 292 * ms, 302 * ms} {
		p.rounds = append(p.rounds, t0.Add(at))
	}
	for _, c := range []struct {
		a, b uint64
		want time.Duration
	}{
		{0, 2, 20 * ms},  // steady
		{1, 4, 60 * ms},  // 10 + the 250 ms stall counted as 40 + 10
		{4, 6, 22 * ms},  // a late tick counts whole
		{5, 99, 10 * ms}, // past the last round sent: what was sent
	} {
		if got := p.probedGap(c.a, c.b); got != c.want {
			t.Errorf("probedGap(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

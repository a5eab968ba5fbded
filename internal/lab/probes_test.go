package lab

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbesMeasureAGap runs probe flows against a loopback UDP echo that
// answers like the lab's servers ("NAME: " + datagram) and drops rounds
// 40 to 79 of every flow (by their sequence numbers, so the count does not
// depend on how promptly a loaded machine runs the sender): every flow
// sees one hole of 40 datagrams whose gap is the probed time between the
// rounds around it; a target that stops answering for good is counted
// unrecovered, its gap at least the time since its last reply; every
// reply is counted by the server that sent it.
func TestProbesMeasureAGap(t *testing.T) {
	const holeFrom, holeTo = 40, 80 // rounds dropped: [holeFrom, holeTo)
	var dead atomic.Bool
	echo := func(drop func(seq uint64) bool) string {
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
				if n < 16 || drop(binary.BigEndian.Uint64(buf[:8])) {
					continue
				}
				pc.WriteTo(append([]byte("srv: "), buf[:n]...), from)
			}
		}()
		return pc.LocalAddr().String()
	}
	gapTarget := echo(func(seq uint64) bool { return seq >= holeFrom && seq < holeTo })
	deadTarget := echo(func(uint64) bool { return dead.Load() })
	dial := func(ua *net.UDPAddr) (*net.UDPConn, error) { return net.DialUDP("udp4", nil, ua) }
	const interval = 5 * time.Millisecond
	p, err := startProbes(dial, []string{gapTarget, deadTarget}, 4, interval)
	if err != nil {
		t.Fatal(err)
	}
	// Past the hole (120 rounds take 600 ms on an idle machine; wait for
	// them however long a loaded one takes, bounded).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.rounds)
		p.mu.Unlock()
		if n > holeTo+40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sender sent %d rounds in 30 s", n)
		}
	}
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
	// The hole runs from the last round answered before it to the first
	// after it, counted in probed time; about 41 intervals when the
	// sender kept its pace.
	if want := p.probedGap(holeFrom-1, holeTo); g.Gap != want || want < 20*interval {
		t.Errorf("gap target: gap %v, want %v (the probed time from round %d to %d)", g.Gap, want, holeFrom-1, holeTo)
	}
	if g.Lost != 4*(holeTo-holeFrom) {
		t.Errorf("gap target: %d lost, want %d (rounds %d to %d of 4 flows)", g.Lost, 4*(holeTo-holeFrom), holeFrom, holeTo-1)
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

package pathd

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// regionReports posts rounds of reports of region r's own hops (its
// probers' names start with r) to n, and returns how many it posted.
func regionReports(t *testing.T, n *node, r string, rounds int, base time.Time, rng *rand.Rand) int {
	t.Helper()
	total := 0
	for k := range rounds {
		var ms []pathcomp.Measurement
		for i := range 1 + rng.IntN(8) {
			from := fmt.Sprintf("%s-p%d", r, i%3)
			to, origin := fmt.Sprintf("relay%d", i%4), false
			if i%2 == 1 {
				to, origin = fmt.Sprintf("origin%d", i%5), true
			}
			at := base.Add(time.Duration(k)*time.Millisecond + time.Duration(i)*time.Microsecond)
			hopSet.Store(from+" "+to, true)
			ms = append(ms, m(from, to, origin, time.Duration(1+rng.IntN(50))*ms1, rng.Float64()/10, at))
		}
		rep := n.post(ms...)
		if rep.Applied != len(ms) {
			t.Errorf("%s: round %d: %+v", r, k, rep)
		}
		total += len(ms)
	}
	return total
}

const ms1 = time.Millisecond

// hopSet holds every hop the test posted.
var hopSet sync.Map

func hopCount() int {
	n := 0
	hopSet.Range(func(any, any) bool { n++; return true })
	return n
}

func waitConverged(t *testing.T, nodes []*node, hops int, d time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("regions converge on %d identical hops", hops), d, func() bool {
		first := nodes[0].records()
		if len(first) != hops {
			return false
		}
		for _, n := range nodes[1:] {
			if !maps.Equal(first, n.records()) {
				return false
			}
		}
		return true
	})
}

// TestThreeRegions: three regions, each with its own probers, forward to
// each other. They converge on bit-identical hop figures; every report is
// applied exactly once per region (no duplicates) and forwarded only by
// the region that took it from a prober (no loops); a duplicate delivery
// is dropped; a region down for a while gets the queued reports in order
// when it is back.
func TestThreeRegions(t *testing.T) {
	regions := []string{"eu", "us", "ap"}
	nodes := startRegions(t, regions...)
	base := time.Now().Add(-time.Minute)
	posted := make([]int, 3)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			posted[i] = regionReports(t, n, regions[i], 30, base, rand.New(rand.NewPCG(uint64(i), 1)))
		}()
	}
	wg.Wait()
	waitConverged(t, nodes, hopCount(), 5*time.Second)
	total := posted[0] + posted[1] + posted[2]
	check := func(stage string, wantDup uint64) {
		t.Helper()
		for i, n := range nodes {
			c := n.counters()
			if c.local.applied != uint64(posted[i]) || c.fwd.applied != uint64(total-posted[i]) || c.fwd.stale != 0 || c.fwd.rejected != 0 || c.fwd.duplicate != wantDup*uint64(i%2) {
				t.Errorf("%s: %s: local %+v forward %+v (posted here %d, elsewhere %d)", stage, regions[i], c.local, c.fwd, posted[i], total-posted[i])
			}
			for _, p := range n.s.peers {
				p.mu.Lock()
				sent := p.sent
				p.mu.Unlock()
				if sent != uint64(posted[i]) { // its own reports only: forwards are never forwarded again
					t.Errorf("%s: %s sent %d to %s, want %d (its own reports only)", stage, regions[i], sent, p.region, posted[i])
				}
			}
		}
	}
	waitFor(t, "forward counters settle", 2*time.Second, func() bool {
		for _, n := range nodes {
			for _, p := range n.s.peers {
				if p.depth() != 0 {
					return false
				}
			}
		}
		return true
	})
	check("converged", 0)

	// A duplicate delivery (a retry after a lost reply): dropped.
	dup := []fwdReport{{ID: pathcomp.ReportID{Source: nodes[0].s.Source(), Seq: 1}, M: m("eu-p0", "relay0", false, ms1, 0, base)}}
	code, b := do(t, "POST", nodes[1].url+"/v1/forward", peerTok, mustJSON(t, dup))
	if code != 200 || string(b) != "{\"applied\":0,\"stale\":0,\"rejected\":0,\"duplicate\":1}\n" {
		t.Errorf("duplicate forward: %d %s", code, b)
	}
	check("after a duplicate", 1)

	// ap goes dark; eu and us go on; ap comes back and catches up in order.
	ap := nodes[2]
	ap.closeListener()
	more := make([]int, 2)
	for i := range 2 {
		more[i] = regionReports(t, nodes[i], regions[i], 20, base.Add(time.Second), rand.New(rand.NewPCG(uint64(i), 2)))
		posted[i] += more[i]
	}
	total = posted[0] + posted[1] + posted[2]
	waitFor(t, "eu's forwards to ap fail and queue", 5*time.Second, func() bool {
		p := nodes[0].s.peers[1] // eu's peers: us, ap
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.region == "ap" && p.errors > 0 && len(p.q)-p.head+p.inflight > 0
	})
	if l := metricLine(nodes[0].metrics(), `azgate_pathd_forward_queue_depth{peer="ap"}`); l == "" || l == `azgate_pathd_forward_queue_depth{peer="ap"} 0` {
		t.Errorf("queue depth metric: %q", l)
	}
	ap.listen(ap.addr)
	t.Cleanup(ap.closeListener)
	waitConverged(t, nodes, hopCount(), 15*time.Second) // backoff up to 5 s
	waitFor(t, "queues drain", 5*time.Second, func() bool {
		for _, n := range nodes {
			for _, p := range n.s.peers {
				if p.depth() != 0 {
					return false
				}
			}
		}
		return true
	})
	check("after ap's outage", 1)
	for _, n := range nodes {
		if d := n.s.peers[0].dropped + n.s.peers[1].dropped; d != 0 {
			t.Errorf("%s dropped %d", n.s.cfg.Region, d)
		}
	}
}

// TestQueueDropsOldest: a full queue drops the oldest report and counts it.
func TestQueueDropsOldest(t *testing.T) {
	p := newPeer(Peer{Region: "us", URL: "http://192.0.2.1"}, Config{QueueLen: 3, Batch: 2})
	for i := range 5 {
		p.push(fwdReport{ID: pathcomp.ReportID{Source: "eu/a", Seq: uint64(i + 1)}})
	}
	if p.dropped != 2 || p.depth() != 3 {
		t.Fatalf("dropped %d, depth %d; want 2, 3", p.dropped, p.depth())
	}
	b := p.take()
	if len(b) != 2 || b[0].ID.Seq != 3 || b[1].ID.Seq != 4 {
		t.Errorf("first batch %+v, want seqs 3, 4 (oldest dropped)", b)
	}
	if p.depth() != 3 { // in flight counts until acknowledged
		t.Errorf("depth with a batch in flight: %d", p.depth())
	}
}

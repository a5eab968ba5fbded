package pathd

import (
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// TestRegionsOverIPv6: two regions' servers listening on [::1], each the
// other's peer by an IPv6 URL (http://[::1]:PORT): the reports each
// takes from its probers are forwarded over IPv6, both converge on the
// same hops, and each answers the same paths for the other's edges.
func TestRegionsOverIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): the servers listen on [::1]", err)
	}
	ln.Close()
	nodes := startRegionsOn(t, "::1", "eu", "us")
	for _, n := range nodes {
		if !strings.HasPrefix(n.url, "http://[::1]:") {
			t.Fatalf("server at %s, want http://[::1]:PORT", n.url)
		}
		for _, p := range n.s.peers {
			if !strings.HasPrefix(p.url, "http://[::1]:") {
				t.Fatalf("peer %s at %s, want http://[::1]:PORT/v1/forward", p.region, p.url)
			}
		}
	}
	hopSet.Clear() // the hops this test posts only; and none left for the next test
	t.Cleanup(hopSet.Clear)
	base := time.Now() // fresh: the path graph takes recent hops only
	posted := []int{
		regionReports(t, nodes[0], "eu", 10, base, rand.New(rand.NewPCG(6, 1))),
		regionReports(t, nodes[1], "us", 10, base, rand.New(rand.NewPCG(6, 2))),
	}
	waitConverged(t, nodes, hopCount(), 5*time.Second)
	for i, n := range nodes {
		c := n.counters()
		if c.local.applied != uint64(posted[i]) || c.fwd.applied != uint64(posted[1-i]) || c.fwd.rejected != 0 {
			t.Errorf("%s: local %+v forward %+v, want %d local and %d forwarded over IPv6", n.s.cfg.Region, c.local, c.fwd, posted[i], posted[1-i])
		}
	}
	// An eu edge's hop to an origin (reported to eu only): us answers
	// its path too, the same as eu.
	var edge, origin string
	for k, v := range nodes[0].records() {
		if f := strings.Fields(k); strings.HasPrefix(f[0], "eu-") && strings.HasPrefix(v, "true ") {
			edge, origin = f[0], f[1]
			break
		}
	}
	if edge == "" {
		t.Fatal("no eu edge reported a hop to an origin")
	}
	waitFor(t, "us answers "+edge+"'s path to "+origin+" as eu does", 2*time.Second, func() bool {
		pe, ce := nodes[0].path(edge, origin)
		pu, cu := nodes[1].path(edge, origin)
		return ce == 200 && cu == 200 && len(pe.Path) >= 2 && strings.Join(pe.Path, ",") == strings.Join(pu.Path, ",")
	})
}

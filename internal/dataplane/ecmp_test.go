package dataplane

import (
	"fmt"
	"net"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// A second underlay router, for a destination with two next hops.
const (
	fab2Addr = "198.18.0.252"
	fab2MAC  = "02:bb:00:00:00:03"
	ecmpNet  = "198.19.100.0/24" // the nat backends' network
	ecmpHost = "198.19.100.200"  // a host an EIP is bound to, in it
	ecmpEIP  = "198.51.100.40"
)

// ecmpBed is the services bed with ecmpNet reachable through two next hops
// (FabAddr and fab2Addr) with the given multipath hash policy.
func ecmpBed(t *testing.T, policy string) *lbBed {
	t.Helper()
	b := newLBBed(t)
	n := b.env.Node
	if err := n.Neigh(dptest.UlDev, fab2Addr, fab2MAC); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Cmd("ip", "route", "add", ecmpNet, "nexthop", "via", dptest.FabAddr, "dev", dptest.UlDev,
		"nexthop", "via", fab2Addr, "dev", dptest.UlDev).CombinedOutput(); err != nil {
		t.Fatalf("multipath route: %v: %s", err, out)
	}
	if err := n.Sysctl("net.ipv4.fib_multipath_hash_policy", policy); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(ecmpEIP): {Host: addr(ecmpHost), VSID: vsid, StatsIdx: 11}}); err != nil {
		t.Fatal(err)
	}
	return b
}

// nextHopOf runs f in from the Internet and returns the destination MAC
// it left with (which next hop it took).
func nextHopOf(t *testing.T, b *lbBed, f flow) string {
	t.Helper()
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != xdpRedirect {
		t.Fatalf("%s:%d -> %s:%d: action %s", f.src, f.sport, f.dst, f.dport, actionNames[res.Action])
	}
	return net.HardwareAddr(res.Out[:6]).String()
}

// spread sends n flows made by mk twice each and checks that both next
// hops get flows and that a flow keeps its next hop.
func spread(t *testing.T, b *lbBed, n int, mk func(i int) flow) {
	t.Helper()
	count := map[string]int{}
	for i := 0; i < n; i++ {
		f := mk(i)
		first := nextHopOf(t, b, f)
		if again := nextHopOf(t, b, f); again != first {
			t.Fatalf("flow %d moved from %s to %s", i, first, again)
		}
		count[first]++
	}
	if count[dptest.FabMAC] == 0 || count[fab2MAC] == 0 || len(count) != 2 {
		t.Fatalf("%d flows over two next hops: %v", n, count)
	}
	t.Logf("%d flows: %v", n, count)
}

// TestNextHopECMP: flows to one destination with two next hops spread over
// both (the next-hop cache is keyed by flow-hash bucket and asks the FIB
// with the flow's fields), and each flow stays on its next hop.
func TestNextHopECMP(t *testing.T) {
	t.Run("EIP tunnels to one host, L4 hash policy", func(t *testing.T) {
		b := ecmpBed(t, "1")
		spread(t, b, 64, func(i int) flow {
			return flow{src: client, dst: ecmpEIP, proto: layers.IPProtocolTCP, sport: uint16(20000 + i), dport: 443, ttl: 64}
		})
	})
	t.Run("nat flows from many clients, L3 hash policy", func(t *testing.T) {
		b := ecmpBed(t, "0")
		spread(t, b, 64, func(i int) flow {
			f := tcpTo(vipNAT, 80, "syn")
			f.src = fmt.Sprintf("203.0.113.%d", 20+i)
			return f
		})
	})
	t.Run("nat flows of one client, L4 hash policy", func(t *testing.T) {
		b := ecmpBed(t, "1")
		spread(t, b, 64, func(i int) flow {
			f := tcpTo(vipNAT, 80, "syn")
			f.sport = uint16(30000 + i)
			return f
		})
	})
}

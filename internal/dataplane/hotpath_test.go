package dataplane

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// runEdge sends one frame in from the Internet side and returns the action
// and output.
func runEdge(t *testing.T, b *edgeBed, f flow) (uint32, []byte) {
	t.Helper()
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
	if err != nil {
		t.Fatal(err)
	}
	return res.Action, res.Out
}

// outerDst is the outer IPv4 destination of an encapsulated frame.
func outerDst(t *testing.T, out []byte) string {
	t.Helper()
	ip, _ := decode(out).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil {
		t.Fatal("no IPv4 header in the output")
	}
	return ip.DstIP.String()
}

// The per-CPU route cache (eip_cache) serves a route until the route
// generation moves, and every route write through Edge moves it: a rebind,
// an unbind and a new bind are seen by the next packet.
func TestRouteCacheFollowsRouteWrites(t *testing.T) {
	b := newEdgeBed(t)
	f := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, ttl: 64}
	expect := func(what string, action uint32, host string) {
		t.Helper()
		act, out := runEdge(t, b, f)
		if act != action {
			t.Fatalf("%s: action %s, want %s", what, actionNames[act], actionNames[action])
		}
		if host != "" {
			if got := outerDst(t, out); got != host {
				t.Fatalf("%s: tunnelled to %s, want %s", what, got, host)
			}
		}
	}
	expect("bound", xdpRedirect, hostAddr)
	expect("bound, cached", xdpRedirect, hostAddr)

	// Written behind the daemon's back (no generation bump): the cache
	// still answers, which shows it is what the packet used ...
	k, err := keyOf(addr(eip))
	if err != nil {
		t.Fatal(err)
	}
	moved, err := b.edge.routeTo(Route{Host: addr(otherHost), VSID: 6000, StatsIdx: eipIdx})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.edge.objs.EipRoutes.Update(&k, &moved, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	expect("rewritten without a bump", xdpRedirect, hostAddr)
	// ... and a bump makes the next packet read the map again.
	if err := b.edge.bumpRouteGen(); err != nil {
		t.Fatal(err)
	}
	expect("after the bump", xdpRedirect, otherHost)

	// Through the Edge API.
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eip): {Host: addr(hostAddr), VSID: vsid, StatsIdx: eipIdx}}); err != nil {
		t.Fatal(err)
	}
	expect("rebound", xdpRedirect, hostAddr)
	if err := b.edge.DeleteRoutes([]netipAddr{addr(eip)}); err != nil {
		t.Fatal(err)
	}
	expect("unbound", xdpPass, "")
	if err := b.edge.PutRoutes(map[netipAddr]Route{addr(eip): {Host: addr(otherHost), VSID: 6000, StatsIdx: eipIdx}}); err != nil {
		t.Fatal(err)
	}
	expect("bound again", xdpRedirect, otherHost)
	// An EIP address turned VIP (no listener): the route's VIP mark is seen.
	if err := b.edge.DeleteRoutes([]netipAddr{addr(eip)}); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.PutVIP(addr(eip)); err != nil {
		t.Fatal(err)
	}
	expect("now a VIP without listeners", xdpDrop, "")
}

// A connection-table hit skips the listener lookup only while the VIP's
// listener generation is the entry's: a removed listener drops its
// established flows as before, a listener that is back serves them again
// from their entries, and a flow still matched by another listener (the
// any-port one) keeps its backend.
func TestListenerRemovalEndsHits(t *testing.T) {
	b := newLBBed(t)
	expect := func(what string, f flow, action uint32) []byte {
		t.Helper()
		act, out := runEdge(t, b.edgeBed, f)
		if act != action {
			t.Fatalf("%s: action %s, want %s", what, actionNames[act], actionNames[action])
		}
		return out
	}
	// encap VIP, one listener (tcp:443).
	syn, ack := tcpTo(vipEncap, 443, "syn"), tcpTo(vipEncap, 443, "ack")
	expect("encap SYN", syn, xdpRedirect)
	expect("encap ACK (hit)", ack, xdpRedirect)
	l := Listener{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}
	if err := b.edge.DeleteListener(l); err != nil {
		t.Fatal(err)
	}
	before, err := b.edge.Stats()
	if err != nil {
		t.Fatal(err)
	}
	expect("ACK after the listener's removal", ack, xdpDrop)
	after, err := b.edge.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after["drop_lb_no_port"].Packets != before["drop_lb_no_port"].Packets+1 {
		t.Fatalf("drop_lb_no_port %d -> %d", before["drop_lb_no_port"].Packets, after["drop_lb_no_port"].Packets)
	}
	if err := b.edge.PutListener(l, ListenerValue{Table: 2}); err != nil {
		t.Fatal(err)
	}
	expect("ACK with the listener back", ack, xdpRedirect)
	expect("ACK again (hit under the new generation)", ack, xdpRedirect)

	// nat VIP: tcp:80 to table 0 (A), any port to table 1 (B). Removing
	// tcp:80 leaves its flows to the any-port listener's VIP, but an
	// established flow keeps its entry's backend.
	nsyn, nack := tcpTo(vipNAT, 80, "syn"), tcpTo(vipNAT, 80, "ack")
	if got := natBackendOf(t, b, nsyn); got != beA {
		t.Fatalf("SYN to %s", got)
	}
	if err := b.edge.DeleteListener(Listener{VIP: addr(vipNAT), Proto: ProtoTCP, Port: 80}); err != nil {
		t.Fatal(err)
	}
	if got := natBackendOf(t, b, nack); got != beA {
		t.Fatalf("established flow moved to %s after its port listener went (any-port still there)", got)
	}
	other := nsyn
	other.sport = 40100
	if got := natBackendOf(t, b, other); got != beB {
		t.Fatalf("new flow went to %s, want the any-port pool's %s", got, beB)
	}
}

// A VIP route of an earlier version (listener generation 0, its former
// padding) gets generation 1 when the edge is loaded, so connection
// entries of that version (generation 0) have their listener checked once.
func TestListenerGenerationOfEarlierVIPs(t *testing.T) {
	b := newEdgeBed(t)
	k, err := keyOf(addr(vipNAT))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.edge.objs.EipRoutes.Update(&k, &edgeEipRoute{Flags: routeVIP, Family: 2}, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.startListenerGens(); err != nil {
		t.Fatal(err)
	}
	var r edgeEipRoute
	if err := b.edge.objs.EipRoutes.Lookup(&k, &r); err != nil {
		t.Fatal(err)
	}
	if r.Lgen != 1 || r.Flags != routeVIP {
		t.Fatalf("VIP route after load: %+v, want listener generation 1", r)
	}
	// A VIP put by this version never has generation 0.
	if err := b.edge.PutVIP(addr(vipEncap)); err != nil {
		t.Fatal(err)
	}
	k2, _ := keyOf(addr(vipEncap))
	if err := b.edge.objs.EipRoutes.Lookup(&k2, &r); err != nil || r.Lgen == 0 {
		t.Fatalf("new VIP: %+v %v", r, err)
	}
}

package connsync

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// loadVIP6Edge loads an edge program with an IPv6 VIP (tcp 443, encap)
// whose Maglev table holds only the backend owned by pick; both backends
// are in the slots and generations given (one edge's numbering).
func loadVIP6Edge(t *testing.T, env *dptest.Env, slots map[uint64]uint32, gens map[uint64]uint16, hosts map[uint64]netip.Addr, pick uint64) *dataplane.Edge {
	t.Helper()
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: 1 << 16, EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ul, err := env.Node.Ifindex(dptest.UlDev)
	must(err)
	gw, _ := net.ParseMAC("02:00:00:00:00:fe")
	must(e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.ExtAddr),
		HashSeed: 0x5eed1234, GatewayMAC: gw, UnderlayIfindex: uint32(ul)}))
	must(e.SetLBConfig(dataplane.LBConfig{HZ: kernelClock(t).HZ(), SYN: 30 * time.Second, Established: time.Hour, FIN: 30 * time.Second, UDP: time.Minute}))
	for o, slot := range slots {
		must(e.SetBackend(slot, dataplane.LBBackend{Mode: dataplane.ModeEncap, Addr: hosts[o], Guest: netip.MustParseAddr("198.19.11.1"),
			VSID: 100, Gen: gens[o], Owner: o}))
	}
	table := make([]uint32, 307)
	for i := range table {
		table[i] = slots[pick]
	}
	must(e.SetTable(0, table))
	must(e.PutListener(dataplane.Listener{VIP: vip6, Proto: dataplane.ProtoTCP, Port: 443}, dataplane.ListenerValue{Table: 0}))
	must(e.PutVIP(vip6))
	return e
}

// tcp6Frame is a TCP segment from client6:sport to the IPv6 VIP's port 443.
func tcp6Frame(t *testing.T, sport uint16, syn bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.RtrMAC), DstMAC: dptest.MustMAC(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: client6.AsSlice(), DstIP: vip6.AsSlice()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 443, SYN: syn, ACK: !syn, Seq: 1, Window: 1000}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// outerHost runs frame through e's program and returns the host it was
// encapsulated to (the outer IPv4 destination), or the action's number.
func outerHost(t *testing.T, env *dptest.Env, e *dataplane.Edge, frame []byte) string {
	t.Helper()
	res, err := env.Run(e.Program(), dptest.ExtDev, frame)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != 4 || len(res.Out) < 14+20 { // XDP_REDIRECT
		return fmt.Sprintf("action %d (%d bytes)", res.Action, len(res.Out))
	}
	a, _ := netip.AddrFromSlice(res.Out[14+16 : 14+20])
	return a.String()
}

// TestProgramToPeer6: an IPv6 VIP's connection, end to end on one
// machine. A SYN runs through edge A's real program (lb6_ingress), whose
// ring-buffer event (ct_emit6) A's Syncer reads and sends to B; B writes
// it into its lb_conns6 in its own slot of the same backend. The flow's
// next packet through B's real program goes to the backend A chose,
// although B's Maglev table sends new flows to the other backend.
func TestProgramToPeer6(t *testing.T) {
	requireRoot(t)
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	const own1, own2 = uint64(0xaaaa_0001), uint64(0xaaaa_0002)
	hosts := map[uint64]netip.Addr{own1: netip.MustParseAddr("198.18.21.1"), own2: netip.MustParseAddr("198.18.31.1")}
	aSlots, aGens := map[uint64]uint32{own1: 3, own2: 4}, map[uint64]uint16{own1: 2, own2: 1}
	bSlots, bGens := map[uint64]uint32{own1: 21, own2: 12}, map[uint64]uint16{own1: 5, own2: 9}
	ea := loadVIP6Edge(t, env, aSlots, aGens, hosts, own1)
	eb := loadVIP6Edge(t, env, bSlots, bGens, hosts, own2)
	if err := ea.SetConnSync(true); err != nil {
		t.Fatal(err)
	}
	rd, err := ea.OpenConnEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })

	c := newCluster(t)
	a := &member{name: "a", edge: ea, ev: newChanEvents(), slots: aSlots, gens: aGens}
	b := &member{name: "b", edge: eb, ev: newChanEvents(), slots: bSlots, gens: bGens}
	c.mu.Lock()
	c.members["a"], c.members["b"] = a, b
	c.mu.Unlock()
	c.tweak = func(cfg *Config) {
		if cfg.Name == "a" {
			cfg.Events = rd
		}
	}
	c.start(a, c.secret)
	c.tweak = nil
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })
	waitFor(t, "a connected to b", 5*time.Second, func() bool {
		ps := a.s.Status().Peers
		return len(ps) == 1 && ps[0].Connected && ps[0].Addr == b.s.Addr().String()
	})

	if got := outerHost(t, env, eb, tcp6Frame(t, 52000, true)); got != "198.18.31.1" {
		t.Fatalf("a new flow through b went to %s, want b's table's 198.18.31.1", got)
	}
	if got := outerHost(t, env, ea, tcp6Frame(t, 52001, true)); got != "198.18.21.1" {
		t.Fatalf("the SYN through a went to %s, want a's table's 198.18.21.1", got)
	}
	k := dataplane.MakeConnKey(client6, vip6, 52001, 443, dataplane.ProtoTCP)
	onA, err := ea.LookupConn(k)
	if err != nil || onA.Backend != 3 || onA.Gen != 2 {
		t.Fatalf("a's entry %+v (%v): want slot 3 generation 2", onA, err)
	}
	var got dataplane.ConnEntry
	waitFor(t, "the entry on b", 3*time.Second, func() bool {
		got, err = eb.LookupConn(k)
		return err == nil
	})
	if got.Backend != 21 || got.Gen != 5 || got.State != dataplane.ConnSYN || got.FID != onA.FID {
		t.Fatalf("b's entry %+v, want slot 21 generation 5, SYN, FlowID %d", got, onA.FID)
	}
	if got := outerHost(t, env, eb, tcp6Frame(t, 52001, false)); got != "198.18.21.1" {
		t.Fatalf("the flow's ACK through b went to %s, want a's backend 198.18.21.1", got)
	}
	if m := a.s.Status().Metrics; m.Events6 < 1 || m.Sent6 < 1 {
		t.Fatalf("a's metrics %+v: want the IPv6 event read and sent", m)
	}
}

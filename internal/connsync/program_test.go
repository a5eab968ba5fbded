package connsync

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestProgramToPeer: end to end on one machine. A SYN to a VIP runs
// through edge A's real program (BPF_PROG_TEST_RUN in a test namespace);
// the program's ring-buffer event is read by A's Syncer, sent to B over
// TCP and written into B's maps in B's slot for the same backend.
func TestProgramToPeer(t *testing.T) {
	requireRoot(t)
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	ea, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: 1 << 16, EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() }) // after the Syncers stop (cleanups run last first)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ea.SetLBConfig(dataplane.LBConfig{HZ: kernelClock(t).HZ(), SYN: 30 * time.Second, Established: time.Hour, FIN: 30 * time.Second, UDP: time.Minute, NAT: true}))
	must(ea.SetBackend(2, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: natAddr, Port: 8080, Gen: 1, Owner: ownerNAT}))
	table := make([]uint32, 307)
	for i := range table {
		table[i] = 2
	}
	must(ea.SetTable(0, table))
	must(ea.PutVIP(vip))
	must(ea.PutListener(dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 80}, dataplane.ListenerValue{Table: 0}))
	must(ea.SetConnSync(true))
	rd, err := ea.OpenConnEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })

	c := newCluster(t)
	a := &member{name: "a", edge: ea, slots: map[uint64]uint32{ownerNAT: 2}, gens: map[uint64]uint16{ownerNAT: 1}}
	c.mu.Lock()
	c.members["a"] = a
	c.mu.Unlock()
	b := c.add("b", 40, 9)
	// a's events are the program's ring.
	c.tweak = func(cfg *Config) {
		if cfg.Name == "a" {
			cfg.Events = rd
			cfg.Table = ea
		}
	}
	a.ev = newChanEvents()
	c.start(a, c.secret)
	c.tweak = nil
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })

	eth := &layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.RtrMAC), DstMAC: dptest.MustMAC(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: client.AsSlice(), DstIP: vip.AsSlice()}
	tcp := &layers.TCP{SrcPort: 51000, DstPort: 80, SYN: true, Seq: 1, Window: 1000}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	must(gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp))
	if _, err := env.Run(ea.Program(), dptest.ExtDev, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	onA, err := ea.LookupConn(key(51000))
	if err != nil || onA.Backend != 2 {
		t.Fatalf("a's own entry %+v (%v): want slot 2", onA, err)
	}
	var got dataplane.ConnEntry
	waitFor(t, "the entry on b", 3*time.Second, func() bool {
		got, err = b.edge.LookupConn(key(51000))
		return err == nil
	})
	if got.Backend != 40 || got.Gen != 9 || got.State != dataplane.ConnSYN || got.FID != onA.FID {
		t.Fatalf("b's entry %+v, want slot 40 generation 9, SYN, FlowID %d", got, onA.FID)
	}
	cl, _ := key(51000).Addrs()
	if v, err := b.edge.LookupNATConn(netip.AddrPortFrom(natAddr, 8080), cl, dataplane.ProtoTCP); err != nil || v.Addr() != vip {
		t.Fatalf("b's reverse entry %v %v", v, err)
	}
}

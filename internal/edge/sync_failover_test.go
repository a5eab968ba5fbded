package edge

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/connsync"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// syncEdge is one member of a set as the daemon runs it, but for the
// interfaces: a real data plane, its reconciler following the store and
// its connection sync.
type syncEdge struct {
	name   string
	dp     *dataplane.Edge
	rec    *Reconciler
	syncer atomic.Pointer[connsync.Syncer]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startSyncEdge loads a new data plane (empty maps: a new machine) and
// runs the reconciler and connection sync on it.
func startSyncEdge(t *testing.T, st *store.Store, cfg Config) *syncEdge {
	t.Helper()
	dp, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: 1 << 16, EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	e := &syncEdge{name: cfg.Name, dp: dp, rec: NewReconciler(cfg, dp)}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(2)
	go func() { defer e.wg.Done(); st.FollowSink(ctx, e.rec) }()
	go func() {
		defer e.wg.Done()
		if err := runSync(ctx, cfg, e.rec, dp, func(s *connsync.Syncer) { e.syncer.Store(s) }); err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	}()
	t.Cleanup(e.stop)
	return e
}

// stop ends the edge and drops its maps.
func (e *syncEdge) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.wg.Wait()
	e.rec.Stop()
	e.dp.Close()
	e.cancel = nil
}

func (e *syncEdge) ready() bool {
	s := e.syncer.Load()
	return s != nil && s.Ready()
}

const syncTableSize = 1009

var (
	syncEncapVIP = netip.MustParseAddr("198.51.100.20")
	syncNATVIP   = netip.MustParseAddr("198.51.100.30")
	weight0      = uint32(0)
)

// syncWeb is an encap-mode service on hosts h1..h5 (198.18.30.N), one
// of them drained ("": none).
func syncWeb(hs []string, drained string) *model.Service {
	s := &model.Service{Name: "web", VIP: syncEncapVIP, Mode: model.ModeEncap, TableSize: syncTableSize,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: []model.Pool{{Name: "web"}}}
	for _, h := range hs {
		b := model.Backend{Host: h, Guest: "g1"}
		if h == drained {
			b.Weight = &weight0
		}
		s.Pools[0].Backends = append(s.Pools[0].Backends, b)
	}
	return s
}

// syncDMZ is a nat-mode service on 198.19.200.N:8443, one of them with
// weight 0 (0: none).
func syncDMZ(last []byte, zero byte) *model.Service {
	s := &model.Service{Name: "dmz", VIP: syncNATVIP, Mode: model.ModeNAT, TableSize: syncTableSize,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "q"}}, Pools: []model.Pool{{Name: "q"}}}
	for _, x := range last {
		b := model.Backend{Address: netip.AddrFrom4([4]byte{198, 19, 200, x}), Port: 8443}
		if x == zero {
			b.Weight = &weight0
		}
		s.Pools[0].Backends = append(s.Pools[0].Backends, b)
	}
	return s
}

// syncWorld: a set of two members (edge-a1, edge-a2), five hosts and the
// two services.
func syncWorld() []model.Object {
	set := &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: a("198.18.0.1")}, {Name: "edge-a2", Underlay: a("198.18.0.2")}}}
	objs := []model.Object{&model.AZ{Name: "az1"}, set,
		syncWeb([]string{"h1", "h2", "h3", "h4"}, ""),
		syncDMZ([]byte{1, 2, 3, 4, 9}, 9)} // .9 has weight 0 from the start: no flows
	for i := 1; i <= 5; i++ {
		objs = append(objs, &model.Host{Name: fmt.Sprintf("h%d", i), AZ: "az1", Underlay: netip.AddrFrom4([4]byte{198, 18, 30, byte(i)}),
			Guests: []model.Guest{{Name: "g1", Address: netip.AddrFrom4([4]byte{198, 19, 30, byte(i)}), VSID: uint32(7000 + i)}}})
	}
	return objs
}

// syncConfigs returns the members' configurations: sync on a free port,
// their underlay addresses on loopback.
func syncConfigs(t *testing.T, st store.Secrets, hz uint32) func(name string) Config {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	loop := func(u netip.Addr) netip.Addr { b := u.As4(); return netip.AddrFrom4([4]byte{127, 0, 0, b[3]}) }
	return func(name string) Config {
		return Config{Name: name, Log: quiet, HashSeed: 7,
			LB:   dataplane.LBConfig{HZ: hz, SYN: 30 * time.Second, Established: time.Hour, FIN: 30 * time.Second, UDP: time.Minute},
			Sync: SyncConfig{Port: port, Secrets: st, JoinTimeout: time.Second, underlayAddr: loop}}
	}
}

// waitLong waits up to 20 s (loading programs on a loaded machine).
func waitLong(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 20 s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// frameTo is a TCP segment from the Internet side to a VIP.
func frameTo(t *testing.T, src, dst netip.Addr, sport, dport uint16, syn bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.RtrMAC), DstMAC: dptest.MustMAC(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: syn, ACK: !syn, Seq: 1, Ack: 1, Window: 1000}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sentTo runs a frame through an edge's program and says which backend
// it went to: an encap-mode backend by its host's underlay address (the
// outer destination), a nat-mode one by address and port.
func sentTo(t *testing.T, env *dptest.Env, dp *dataplane.Edge, frame []byte) string {
	t.Helper()
	res, err := env.Run(dp.Program(), dptest.ExtDev, frame)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != 3 && res.Action != 4 { // XDP_TX, XDP_REDIRECT
		return fmt.Sprintf("action %d", res.Action)
	}
	p := gopacket.NewPacket(res.Out, layers.LayerTypeEthernet, gopacket.NoCopy)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil {
		return "not IPv4"
	}
	if tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok && ip.Protocol == layers.IPProtocolTCP {
		return fmt.Sprintf("%v:%d", ip.DstIP, tcp.DstPort)
	}
	return ip.DstIP.String()
}

// TestSyncMemberReturnsAfterBackendChange (issue 8: "a backend changes
// while a member is down, and the member returns: no established
// connection moves"). Two members of a set, real data planes, the
// reconcilers following a real store, connection sync on. Flows are made
// through A's program (a SYN and an ACK each) to an encap-mode and a
// nat-mode service. B goes down and loses its maps (a new machine). While
// it is down the services change on the store: a backend is added to
// each (Maglev moves slots), one is drained (it keeps its connections),
// one without flows is removed; A makes more flows under the new tables.
// B comes back: it is not ready before it pulled a full copy from A, and
// then every flow's next packet (an ACK) through B's program goes to the
// backend A chose. A new flow (SYN) on B goes where the new Maglev table
// says.
func TestSyncMemberReturnsAfterBackendChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the edge program")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	hz, err := measureHZ()
	if err != nil {
		t.Fatal(err)
	}
	st := embeddedtest.Store(t)
	ctx := context.Background()

	web, dmz := syncWeb, syncDMZ
	encapVIP, natVIP := syncEncapVIP, syncNATVIP
	if _, err := commitObjs(ctx, st, syncWorld()...); err != nil {
		t.Fatal(err)
	}
	cfgOf := syncConfigs(t, st, hz)
	ea := startSyncEdge(t, st, cfgOf("edge-a1"))
	eb := startSyncEdge(t, st, cfgOf("edge-a2"))
	waitLong(t, "both members ready", func() bool { return ea.ready() && eb.ready() })

	// Flows through A: a SYN, then an ACK (established).
	type flow struct {
		client netip.Addr
		sport  uint16
		vip    netip.Addr
		vport  uint16
		to     string // where A sent it
	}
	var flows []flow
	mk := func(e *syncEdge, n int, base byte) {
		for i := 0; i < n; i++ {
			for _, svc := range []struct {
				vip  netip.Addr
				port uint16
			}{{encapVIP, 80}, {natVIP, 443}} {
				f := flow{client: netip.AddrFrom4([4]byte{203, 0, 113, base + byte(i/10000)}), sport: uint16(10000 + i%10000), vip: svc.vip, vport: svc.port}
				f.to = sentTo(t, env, e.dp, frameTo(t, f.client, f.vip, f.sport, f.vport, true))
				if ack := sentTo(t, env, e.dp, frameTo(t, f.client, f.vip, f.sport, f.vport, false)); ack != f.to {
					t.Fatalf("flow %+v: SYN to %s, ACK to %s on %s", f, f.to, ack, e.name)
				}
				flows = append(flows, f)
			}
		}
	}
	mk(ea, 1000, 1)

	// B goes down with its maps (a new machine comes in its place).
	eb.stop()
	// The services change while it is down: h5 is added and h2 drained;
	// 198.19.200.5 is added and .9 (no flows) removed.
	rev, err := commitObjs(ctx, st, web([]string{"h1", "h2", "h3", "h4", "h5"}, "h2"), dmz([]byte{1, 2, 3, 4, 5}, 0))
	if err != nil {
		t.Fatal(err)
	}
	waitLong(t, "a applied the change", func() bool { ea.rec.mu.Lock(); defer ea.rec.mu.Unlock(); return ea.rec.rev >= rev })
	mk(ea, 200, 101) // flows made under the new tables while B is down

	// The new Maglev tables, as every node computes them.
	newTable := func(keys []string, zero string) *maglev.Table {
		var bs []maglev.Backend
		for _, k := range keys {
			w := uint32(1)
			if k == zero {
				w = 0
			}
			bs = append(bs, maglev.Backend{Key: k, Weight: w})
		}
		tb, err := maglev.Build(bs, syncTableSize, 7)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	webT := newTable([]string{"h1/g1", "h2/g1", "h3/g1", "h4/g1", "h5/g1"}, "h2/g1")
	dmzT := newTable([]string{"198.19.200.1:8443", "198.19.200.2:8443", "198.19.200.3:8443", "198.19.200.4:8443", "198.19.200.5:8443"}, "")
	where := func(f flow) string {
		h := flowhash.Hash4(flowhash.Tuple{Src: f.client, Dst: f.vip, SrcPort: f.sport, DstPort: f.vport, Proto: 6}, 7)
		if f.vip == encapVIP {
			b, _ := webT.Lookup(h)
			n := b.Key[1] - '0'
			return netip.AddrFrom4([4]byte{198, 18, 30, n}).String()
		}
		b, _ := dmzT.Lookup(h)
		return b.Key
	}
	// Without its entry, how many established flows a member would move.
	displaced, onDrained := 0, 0
	for _, f := range flows {
		if where(f) != f.to {
			displaced++
		}
		if f.to == "198.18.30.2" {
			onDrained++
		}
	}
	t.Logf("%d flows; the new tables would move %d of them, %d are on the drained backend", len(flows), displaced, onDrained)
	if displaced < len(flows)/10 || onDrained == 0 {
		t.Fatalf("the change moves %d of %d flows (%d on the drained backend): the test would prove nothing", displaced, len(flows), onDrained)
	}

	// B returns, with empty maps: not ready until it has A's table.
	var onA int
	if err := ea.dp.DumpConns(4096, func(es []dataplane.ConnEntry) error { onA += len(es); return nil }); err != nil {
		t.Fatal(err)
	}
	eb = startSyncEdge(t, st, cfgOf("edge-a2"))
	var s *connsync.Syncer
	waitLong(t, "b's sync started", func() bool { s = eb.syncer.Load(); return s != nil })
	if s.Ready() {
		t.Fatalf("b ready at once: %s", s.Reason())
	}
	waitLong(t, "b ready", s.Ready)
	if r, w := s.Reason(), fmt.Sprintf("full copy from edge-a1: %d entries", onA); r != w {
		t.Fatalf("b ready because %q, want %q", r, w)
	}

	// Every established flow's next packet through B: where A sent it.
	moved := 0
	for _, f := range flows {
		if got := sentTo(t, env, eb.dp, frameTo(t, f.client, f.vip, f.sport, f.vport, false)); got != f.to {
			if moved < 5 {
				t.Errorf("flow %v:%d -> %v:%d: A sent it to %s, B to %s", f.client, f.sport, f.vip, f.vport, f.to, got)
			}
			moved++
		}
	}
	if moved != 0 {
		t.Fatalf("%d of %d established flows moved to another backend on b", moved, len(flows))
	}
	// New flows on B follow the new tables: never the drained or the
	// removed backend.
	for i := 0; i < 300; i++ {
		for _, f := range []flow{{client: a("203.0.113.200"), sport: uint16(40000 + i), vip: encapVIP, vport: 80},
			{client: a("203.0.113.200"), sport: uint16(40000 + i), vip: natVIP, vport: 443}} {
			got := sentTo(t, env, eb.dp, frameTo(t, f.client, f.vip, f.sport, f.vport, true))
			if w := where(f); got != w {
				t.Fatalf("new flow %v:%d -> %v:%d on b went to %s, the new table says %s", f.client, f.sport, f.vip, f.vport, got, w)
			}
			if got == "198.18.30.2" || strings.HasPrefix(got, "198.19.200.9:") {
				t.Fatalf("new flow to the drained or removed backend %s", got)
			}
		}
	}
}

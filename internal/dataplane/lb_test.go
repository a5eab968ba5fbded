package dataplane

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/maglev"
)

const (
	vipNAT   = "198.51.100.20"
	vipEncap = "198.51.100.21"
	beA      = "198.19.100.1" // nat backends, behind the underlay router
	beB      = "198.19.100.2"
	beC      = "198.19.100.3"
	lbM      = 307
)

// lbBed is the edge bed with services: vipNAT tcp:80 -> pool A (nat, to
// port 8080), any tcp port -> pool B (nat, port kept); vipEncap tcp:443 ->
// one encap backend (guest 198.19.21.1 on host 198.18.21.1).
type lbBed struct {
	*edgeBed
	idx map[string]uint32 // backend slots
}

func newLBBed(t *testing.T) *lbBed { return withServices(t, newEdgeBed(t)) }

var (
	hzOnce sync.Once
	hz     uint32
	hzErr  error
)

// kernelHZ is the kernel's CONFIG_HZ, measured once: the timeouts and
// rates an LBConfig gives in time become jiffies at its HZ, and the
// program counts the kernel's (a fixed 250 would scale them by 4 on a
// 1000 Hz kernel).
func kernelHZ(t testing.TB) uint32 {
	t.Helper()
	hzOnce.Do(func() {
		b, err := LoadBench()
		if err != nil {
			hzErr = err
			return
		}
		defer b.Close()
		hz, hzErr = b.MeasureHZ()
	})
	if hzErr != nil {
		t.Fatalf("the kernel's HZ: %v", hzErr)
	}
	return hz
}

// withServices programs lbBed's services into an edge bed (newLBBed, and
// FuzzEdge's bed).
func withServices(t testing.TB, eb *edgeBed) *lbBed {
	b := &lbBed{edgeBed: eb, idx: map[string]uint32{}}
	e := b.edge
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.SetLBConfig(LBConfig{HZ: kernelHZ(t), SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second, UDP: time.Minute, NAT: true}))
	backends := []struct {
		name string
		be   LBBackend
	}{
		{"a", LBBackend{Mode: ModeNAT, Addr: addr(beA), Port: 8080, Gen: 1}},
		{"b", LBBackend{Mode: ModeNAT, Addr: addr(beB), Gen: 1}},
		{"c", LBBackend{Mode: ModeNAT, Addr: addr(beC), Port: 8080, Gen: 1}},
		{"g", LBBackend{Mode: ModeEncap, Addr: addr(hostAddr), Guest: addr("198.19.21.1"), VSID: vsid, Gen: 1}},
	}
	for i, x := range backends {
		b.idx[x.name] = uint32(i)
		must(e.SetBackend(uint32(i), x.be))
	}
	b.table(t, 0, "a")
	b.table(t, 1, "b")
	b.table(t, 2, "g")
	must(e.PutVIP(addr(vipNAT)))
	must(e.PutVIP(addr(vipEncap)))
	must(e.PutListener(Listener{VIP: addr(vipNAT), Proto: ProtoTCP, Port: 80}, ListenerValue{Table: 0}))
	must(e.PutListener(Listener{VIP: addr(vipNAT), Proto: ProtoTCP, Port: 0}, ListenerValue{Table: 1}))
	must(e.PutListener(Listener{VIP: addr(vipEncap), Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 2}))
	must(e.SetARP(mustIfindex(t, b.env, dptest.ExtDev), mac(dptest.ExtMAC)))
	must(e.SetARPOwner(time.Now().Add(24 * time.Hour))) // owner of its set's ARP scope
	return b
}

func mustIfindex(t testing.TB, env *dptest.Env, dev string) int {
	i, err := env.Node.Ifindex(dev)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// table fills a table slot with a Maglev table over the named backends.
func (b *lbBed) table(t testing.TB, slot uint32, names ...string) {
	t.Helper()
	var mb []maglev.Backend
	for _, n := range names {
		mb = append(mb, maglev.Backend{Key: n, Weight: 1})
	}
	tbl, err := maglev.Build(mb, lbM, testSeed)
	if err != nil {
		t.Fatal(err)
	}
	entries := make([]uint32, len(tbl.Entry))
	for i, e := range tbl.Entry {
		entries[i] = b.idx[tbl.Backends[e].Key]
	}
	if err := b.edge.SetTable(slot, entries); err != nil {
		t.Fatal(err)
	}
	got, err := b.edge.Table(slot)
	if err != nil || len(got) != len(entries) {
		t.Fatalf("table %d read back: %d entries, %v", slot, len(got), err)
	}
}

func tcpTo(dst string, dport uint16, flags string) flow {
	f := flow{src: client, dst: dst, proto: layers.IPProtocolTCP, sport: 40000, dport: dport, ttl: 64}
	switch flags {
	case "syn":
		f.syn = true
	case "rst":
		f.rst = true
	}
	return f
}

// natOut is what the edge sends for f after DNAT to dst:dport.
func natOut(t *testing.T, f flow, dst string, dport uint16, srcMAC, dstMAC string) []byte {
	g := f
	g.dst, g.dport = dst, dport
	g.ttl--
	return ethFrame(t, srcMAC, dstMAC, g.ip(t))
}

func TestLBFixtures(t *testing.T) {
	b := newLBBed(t)
	fromInet := func(f flow) []byte { return f.frame(t, dptest.RtrMAC, dptest.ExtMAC) }
	fromUl := func(f flow) []byte { return f.frame(t, dptest.FabMAC, dptest.UlMAC) }

	syn80 := tcpTo(vipNAT, 80, "syn")
	syn8000 := tcpTo(vipNAT, 8000, "syn")
	reply := flow{src: beA, dst: client, proto: layers.IPProtocolTCP, sport: 8080, dport: 40000, ttl: 64}
	replyAny := flow{src: beB, dst: client, proto: layers.IPProtocolTCP, sport: 8000, dport: 40000, ttl: 64}
	wantReply := func(f flow, src string, sport uint16) []byte {
		g := f
		g.src, g.sport = src, sport
		g.ttl--
		return ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, g.ip(t))
	}
	udp53 := flow{src: client, dst: vipNAT, proto: layers.IPProtocolUDP, sport: 1, dport: 53}
	ping := flow{src: client, dst: vipNAT, proto: layers.IPProtocolICMPv4}

	encap := tcpTo(vipEncap, 443, "syn")
	key := uint32(vsid<<8) | lbFlowID(client, 40000, vipEncap, 443)
	innerEncap := ethFrame(t, gwMAC, "02:01:c6:13:15:01", decTTL(encap.ip(t)))
	wantEncap := nvgre(t, dptest.UlMAC, dptest.FabMAC, dptest.UlAddr, hostAddr, key, 0, innerEncap)

	arpReq := ser(t, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(client),
			DstHwAddress: make([]byte, 6), DstProtAddress: ip4(vipNAT)})
	arpOther := ser(t, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(client),
			DstHwAddress: make([]byte, 6), DstProtAddress: ip4("198.51.100.99")})

	vlanSyn := ser(t,
		&layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac(dptest.ExtMAC), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4},
		&layersPayload{syn80.ip(t)})
	// A backend's answer to the edge's own address (a health check's).
	toEdge := flow{src: beA, dst: dptest.UlAddr, proto: layers.IPProtocolTCP, sport: 8080, dport: 41000, ttl: 64}

	fixtures := []fixture{
		{name: "a VLAN-tagged request leaves untagged", dev: dptest.ExtDev, in: vlanSyn, action: xdpRedirect,
			out: natOut(t, syn80, beA, 8080, dptest.UlMAC, dptest.FabMAC), check: checksumsOK, stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "a backend's packet to the edge itself is not a reply", dev: dptest.UlDev, in: fromUl(toEdge), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "port 80 goes to pool A with DNAT to 8080", dev: dptest.ExtDev, in: fromInet(syn80), action: xdpRedirect,
			out: natOut(t, syn80, beA, 8080, dptest.UlMAC, dptest.FabMAC), check: checksumsOK, stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "another port goes to the any-port pool, port kept", dev: dptest.ExtDev, in: fromInet(syn8000), action: xdpRedirect,
			out: natOut(t, syn8000, beB, 8000, dptest.UlMAC, dptest.FabMAC), check: checksumsOK, stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "no udp listener", dev: dptest.ExtDev, in: fromInet(udp53), action: xdpDrop, stats: map[string]uint64{"drop_lb_no_port": 1}},
		{name: "ping to a VIP", dev: dptest.ExtDev, in: fromInet(ping), action: xdpDrop, stats: map[string]uint64{"drop_lb_no_port": 1}},
		{name: "reply of backend A is translated back to the VIP", dev: dptest.UlDev, in: fromUl(reply), action: xdpRedirect,
			out: wantReply(reply, vipNAT, 80), check: checksumsOK, stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "reply of an any-port backend keeps its port", dev: dptest.UlDev, in: fromUl(replyAny), action: xdpRedirect,
			out: wantReply(replyAny, vipNAT, 8000), check: checksumsOK, stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "encap-mode VIP is tunnelled to the guest's host", dev: dptest.ExtDev, in: fromInet(encap), action: xdpRedirect,
			out: wantEncap, stats: map[string]uint64{"lb_encap_tx": 1}},
		{name: "ARP for a VIP is answered", dev: dptest.ExtDev, in: arpReq, action: xdpTX, check: arpCheck(vipNAT),
			stats: map[string]uint64{"arp_reply": 1}},
		{name: "ARP for anything else goes to the kernel", dev: dptest.ExtDev, in: arpOther, action: xdpPass,
			stats: map[string]uint64{"pass_non_ip": 1}},
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, fixtures)
}

// checksumsOK recomputes every checksum of the output with gopacket.
func checksumsOK(t *testing.T, out []byte) {
	t.Helper()
	p := decode(out)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil {
		t.Fatalf("no IPv4:\n%s", p.Dump())
	}
	if csum(out[14:14+int(ip.IHL)*4]) != 0 {
		t.Errorf("IP checksum wrong")
	}
	var l4 gopacket.SerializableLayer
	var got uint16
	switch x := p.TransportLayer().(type) {
	case *layers.TCP:
		got = x.Checksum
		x.SetNetworkLayerForChecksum(ip)
		l4 = x
	case *layers.UDP:
		got = x.Checksum
		x.SetNetworkLayerForChecksum(ip)
		l4 = x
	default:
		return
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, l4, gopacket.Payload(p.TransportLayer().LayerPayload())); err != nil {
		t.Fatal(err)
	}
	var want uint16
	switch x := p.TransportLayer().(type) {
	case *layers.TCP:
		want = x.Checksum
	case *layers.UDP:
		want = x.Checksum
	}
	if got != want {
		t.Errorf("L4 checksum %#04x, recomputed %#04x", got, want)
	}
}

func arpCheck(vip string) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		t.Helper()
		a, _ := decode(out).Layer(layers.LayerTypeARP).(*layers.ARP)
		if a == nil {
			t.Fatal("not ARP")
		}
		if a.Operation != layers.ARPReply || net.IP(a.SourceProtAddress).String() != vip ||
			net.HardwareAddr(a.SourceHwAddress).String() != dptest.ExtMAC || net.IP(a.DstProtAddress).String() != client {
			t.Errorf("ARP reply %+v", a)
		}
	}
}

// natBackendOf runs a packet of f and returns the backend it was DNATed to.
func natBackendOf(t *testing.T, b *lbBed, f flow) string {
	t.Helper()
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != xdpRedirect {
		t.Fatalf("action %s", actionNames[res.Action])
	}
	ip, _ := decode(res.Out).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	return ip.DstIP.String()
}

func TestConnTable(t *testing.T) {
	b := newLBBed(t)
	syn := tcpTo(vipNAT, 80, "syn")
	ack := tcpTo(vipNAT, 80, "ack")
	if got := natBackendOf(t, b, syn); got != beA {
		t.Fatalf("SYN went to %s", got)
	}
	// The pool changes: the table now names C only. The established flow
	// keeps A (per-connection consistency); a new flow goes to C.
	b.table(t, 0, "c")
	if got := natBackendOf(t, b, ack); got != beA {
		t.Fatalf("established flow moved to %s after a pool change", got)
	}
	other := ack
	other.sport = 40001
	if got := natBackendOf(t, b, other); got != beC {
		t.Fatalf("new flow went to %s, want the new pool's %s", got, beC)
	}
	// A SYN never reuses the old entry: the same 5-tuple starting again
	// is a new connection.
	if got := natBackendOf(t, b, syn); got != beC {
		t.Fatalf("SYN reused the old entry (%s)", got)
	}
	if got := natBackendOf(t, b, ack); got != beC {
		t.Fatalf("after the new SYN the flow goes to %s", got)
	}
	// A RST on a miss creates no entry.
	rst := tcpTo(vipNAT, 80, "rst")
	rst.sport = 40002
	before := countConns(t, b)
	natBackendOf(t, b, rst)
	if after := countConns(t, b); after != before {
		t.Fatalf("RST created an entry (%d -> %d)", before, after)
	}
	// A failed backend loses its connections: they go by the table.
	flow3 := tcpTo(vipNAT, 80, "syn")
	flow3.sport = 40003
	if got := natBackendOf(t, b, flow3); got != beC {
		t.Fatal(got)
	}
	b.table(t, 0, "a")
	if err := b.edge.SetBackend(b.idx["c"], LBBackend{Mode: ModeNAT, Addr: addr(beC), Port: 8080, Gen: 1, Down: true}); err != nil {
		t.Fatal(err)
	}
	flow3.syn = false
	if got := natBackendOf(t, b, flow3); got != beA {
		t.Fatalf("connection of a failed backend still goes to %s", got)
	}
	// A backend slot given to another backend (new generation) makes old
	// entries stale.
	flow4 := tcpTo(vipNAT, 80, "syn")
	flow4.sport = 40004
	if got := natBackendOf(t, b, flow4); got != beA {
		t.Fatal(got)
	}
	b.table(t, 0, "c")
	if err := b.edge.SetBackend(b.idx["c"], LBBackend{Mode: ModeNAT, Addr: addr(beC), Port: 8080, Gen: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.SetBackend(b.idx["a"], LBBackend{Mode: ModeNAT, Addr: addr(beA), Port: 8080, Gen: 2}); err != nil {
		t.Fatal(err)
	}
	flow4.syn = false
	if got := natBackendOf(t, b, flow4); got != beC {
		t.Fatalf("entry of a reused slot still honoured (%s)", got)
	}
	info, err := b.edge.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	if info["ct_miss"] == 0 || info["syn_repick"] == 0 || info["ct_stale"] < 2 {
		t.Fatalf("info counters %v", info)
	}
}

func countConns(t *testing.T, b *lbBed) int {
	n := 0
	if err := b.edge.Conns(func(Conn) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConnInsertCap(t *testing.T) {
	b := newLBBed(t)
	if err := b.edge.SetLBConfig(LBConfig{HZ: kernelHZ(t), SYN: 30 * time.Second, Established: time.Minute, FIN: time.Second, UDP: time.Second,
		InsertRate: 1, InsertBurst: 1, NAT: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		f := tcpTo(vipNAT, 80, "syn")
		f.sport = uint16(50000 + i)
		if got := natBackendOf(t, b, f); got != beA {
			t.Fatalf("flow %d went to %s: over the cap flows still go by the table", i, got)
		}
	}
	info, _ := b.edge.LBInfoCounters()
	if n := countConns(t, b); n != 1 || info["ct_insert_limited"] != 4 {
		t.Fatalf("%d entries, %d limited: want 1 and 4", n, info["ct_insert_limited"])
	}
}

func TestLBICMPSteering(t *testing.T) {
	b := newLBBed(t)
	syn := tcpTo(vipNAT, 80, "syn")
	if got := natBackendOf(t, b, syn); got != beA {
		t.Fatal(got)
	}
	// A router on the client's side says the reply VIP:80 -> client was
	// too big: the error goes to the flow's backend, quote translated.
	quoted := flow{src: vipNAT, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000, df: true}.ip(t)[:28]
	errPkt := icmpError(t, "203.0.113.1", vipNAT, 3, 4, 1400, quoted)
	in := ethFrame(t, dptest.RtrMAC, dptest.ExtMAC, errPkt)
	res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != xdpRedirect {
		t.Fatalf("action %s", actionNames[res.Action])
	}
	p := decode(res.Out)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	ic, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if ip == nil || ic == nil || ip.DstIP.String() != beA {
		t.Fatalf("not steered to %s:\n%s", beA, p.Dump())
	}
	icmp := res.Out[14+20 : 14+int(ip.Length)]
	if csum(icmp) != 0 || csum(res.Out[14:34]) != 0 {
		t.Fatal("checksums wrong")
	}
	q := icmp[8:]
	if net.IP(q[12:16]).String() != beA || uint16(q[20])<<8|uint16(q[21]) != 8080 || csum(q[:20]) != 0 {
		t.Fatalf("quote not translated to %s:8080: %x", beA, q)
	}
}

func TestLBDecapAntiSpoofing(t *testing.T) {
	b := newLBBed(t)
	syn := tcpTo(vipEncap, 443, "syn")
	if res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, syn.frame(t, dptest.RtrMAC, dptest.ExtMAC)); err != nil || res.Action != xdpRedirect {
		t.Fatalf("%v %v", res.Action, err)
	}
	reply := flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40000, ttl: 64}
	inner := ethFrame(t, "02:cc:00:00:00:02", gwMAC, reply.ip(t))
	fromHost := func(host string, key uint32) []byte {
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, key, 0, inner)
	}
	runFixtures(t, b.env, edgeProg{b.edge}, b.edge, []fixture{
		{name: "reply from the backend's host", dev: dptest.UlDev, in: fromHost(hostAddr, vsid<<8), action: xdpRedirect,
			out: ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, decTTL(reply.ip(t))), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "reply from another host", dev: dptest.UlDev, in: fromHost(otherHost, vsid<<8), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
		{name: "reply in another VSID", dev: dptest.UlDev, in: fromHost(hostAddr, 6000<<8), action: xdpDrop,
			stats: map[string]uint64{"drop_spoof": 1}},
	})
}

// lbFlowID is the FlowID the edge gives a TCP flow to a service: the low
// byte of the flow hash, as for EIPs.
func lbFlowID(client string, cport uint16, vip string, vport uint16) uint32 {
	return uint32(flowhash.FlowID(flowhash.Tuple{Src: addr(client), Dst: addr(vip), Proto: ProtoTCP, SrcPort: cport, DstPort: vport}, testSeed))
}

// TestLBEncapFlowID: the FlowID of encap-mode service traffic is the flow
// hash's low byte on the miss that creates the entry, on the hits that
// follow, and for flows the insert cap leaves without an entry.
func TestLBEncapFlowID(t *testing.T) {
	b := newLBBed(t)
	keyOf := func(f flow) uint32 {
		t.Helper()
		res, err := b.env.Run(b.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
		if err != nil || res.Action != xdpRedirect {
			t.Fatalf("action %v, %v", res.Action, err)
		}
		p := decode(res.Out)
		g, _ := p.Layer(layers.LayerTypeGRE).(*layers.GRE)
		if g == nil {
			t.Fatalf("not NVGRE:\n%s", p.Dump())
		}
		return g.Key
	}
	ids := map[uint32]bool{}
	for i := uint16(0); i < 16; i++ {
		syn := tcpTo(vipEncap, 443, "syn")
		syn.sport = 42000 + i
		ack := tcpTo(vipEncap, 443, "ack")
		ack.sport = syn.sport
		want := uint32(vsid<<8) | lbFlowID(client, syn.sport, vipEncap, 443)
		if got := keyOf(syn); got != want {
			t.Fatalf("flow %d SYN (miss): key %#x, want %#x", i, got, want)
		}
		if got := keyOf(ack); got != want {
			t.Fatalf("flow %d ACK (connection-table hit): key %#x, want %#x", i, got, want)
		}
		ids[want&0xff] = true
	}
	if len(ids) < 8 {
		t.Fatalf("16 flows gave only %d FlowIDs", len(ids))
	}
	// Over the insert cap: no entry, FlowID still the hash's.
	if err := b.edge.SetLBConfig(LBConfig{HZ: kernelHZ(t), SYN: 30 * time.Second, Established: time.Minute, FIN: time.Second, UDP: time.Second,
		InsertRate: 1, InsertBurst: 1, NAT: true}); err != nil {
		t.Fatal(err)
	}
	for i := uint16(0); i < 4; i++ {
		syn := tcpTo(vipEncap, 443, "syn")
		syn.sport = 43000 + i
		if got, want := keyOf(syn), uint32(vsid<<8)|lbFlowID(client, syn.sport, vipEncap, 443); got != want {
			t.Fatalf("capped flow %d: key %#x, want %#x", i, got, want)
		}
	}
}

// TestConnGenerationWide: a backend generation above 255 is kept whole in
// the connection entry: the entry is honoured while the generation stands,
// and stale once the slot moves on by 256 (which an 8-bit copy would miss).
func TestConnGenerationWide(t *testing.T) {
	b := newLBBed(t)
	setA := func(gen uint16) {
		t.Helper()
		if err := b.edge.SetBackend(b.idx["a"], LBBackend{Mode: ModeNAT, Addr: addr(beA), Port: 8080, Gen: gen}); err != nil {
			t.Fatal(err)
		}
	}
	setA(300)
	syn := tcpTo(vipNAT, 80, "syn")
	ack := tcpTo(vipNAT, 80, "ack")
	if got := natBackendOf(t, b, syn); got != beA {
		t.Fatal(got)
	}
	b.table(t, 0, "c")
	if got := natBackendOf(t, b, ack); got != beA {
		t.Fatalf("entry made at generation 300 not honoured: %s", got)
	}
	setA(300 + 256)
	if got := natBackendOf(t, b, ack); got != beC {
		t.Fatalf("entry of generation 300 honoured at generation 556: %s", got)
	}
}

// TestTableSizeTravelsWithTable: a table of another size swapped into a
// listener's slot is indexed with its own size at once (M is the inner
// map's size, one value with the table), the listener untouched.
func TestTableSizeTravelsWithTable(t *testing.T) {
	b := newLBBed(t)
	names := map[uint32]string{b.idx["a"]: beA, b.idx["c"]: beC}
	for _, m := range []int{17, 13, lbM} {
		entries := make([]uint32, m)
		for i := range entries {
			// A pattern that tells M apart: slot i's backend depends on i.
			entries[i] = b.idx["a"]
			if i%3 == 1 {
				entries[i] = b.idx["c"]
			}
		}
		if err := b.edge.SetTable(0, entries); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for i := 0; i < 24; i++ {
			f := tcpTo(vipNAT, 80, "syn")
			f.sport = uint16(41000 + 100*m + i)
			h := flowhash.Hash4(flowhash.Tuple{Src: addr(client), Dst: addr(vipNAT), Proto: ProtoTCP, SrcPort: f.sport, DstPort: 80}, testSeed)
			want := names[entries[h%uint32(m)]]
			if got := natBackendOf(t, b, f); got != want {
				t.Fatalf("M=%d flow %d: went to %s, table slot %d names %s", m, i, got, h%uint32(m), want)
			}
			seen[want]++
		}
		if len(seen) != 2 {
			t.Fatalf("M=%d: the flows did not cover both backends (%v): the test proves nothing", m, seen)
		}
	}
}

// TestListenerRanges: port ranges are one entry each whatever their
// length, match at both ends and not outside, come before the any-port
// listener and after the exact port.
func TestListenerRanges(t *testing.T) {
	b := newLBBed(t)
	e := b.edge
	b.table(t, 3, "c")
	vip := addr(vipNAT)
	put := func(l Listener, table uint32) {
		t.Helper()
		if err := e.PutListener(l, ListenerValue{Table: table}); err != nil {
			t.Fatal(err)
		}
	}
	// A 1000-port range to pool A (DNAT to 8080), a 60000-port range to
	// pool C, an exact port inside the second one to pool A.
	put(Listener{VIP: vip, Proto: ProtoTCP, Port: 2000, Last: 2999}, 0)
	put(Listener{VIP: vip, Proto: ProtoTCP, Port: 3000, Last: 62999}, 3)
	put(Listener{VIP: vip, Proto: ProtoTCP, Port: 5000}, 0)
	exact, sets, ranges, err := e.ListenerEntries()
	if err != nil {
		t.Fatal(err)
	}
	// The bed's tcp:80 and tcp:443 (on two VIPs) and 5000; one range set
	// (vipNAT tcp: the two ranges and the bed's any-port listener).
	if exact != 3 || sets != 1 || ranges != 2 {
		t.Fatalf("61,000 ports of ranges took %d exact entries, %d range sets, %d ranges: want 3, 1, 2", exact, sets, ranges)
	}
	proto := layers.IPProtocolTCP
	check := func(port uint16, want string) {
		t.Helper()
		f := tcpTo(vipNAT, port, "syn")
		f.proto = proto
		f.sport = 45000 + port%1000
		res, err := b.env.Run(e.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC))
		if err != nil {
			t.Fatal(err)
		}
		got := "drop"
		if res.Action == xdpRedirect {
			ip, _ := decode(res.Out).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			got = ip.DstIP.String()
		}
		if got != want {
			t.Fatalf("port %d went to %s, want %s", port, got, want)
		}
	}
	for _, c := range []struct {
		port uint16
		want string
	}{
		{1999, beB}, {2000, beA}, {2500, beA}, {2999, beA}, // 1000-port range, any port around it
		{3000, beC}, {33333, beC}, {62999, beC}, {63000, beB}, // 60000-port range
		{5000, beA}, {80, beA}, {65535, beB}, // exact ports first; the last port
	} {
		check(c.port, c.want)
	}
	// Without the any-port listener, ports outside every range match nothing.
	if err := e.DeleteListener(Listener{VIP: vip, Proto: ProtoTCP}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []uint16{1, 1999, 63000, 65535} {
		check(p, "drop")
	}
	check(2000, beA)
	check(62999, beC)
	// A changed range replaces the one it overlaps.
	put(Listener{VIP: vip, Proto: ProtoTCP, Port: 2000, Last: 2500}, 3)
	check(2000, beC)
	check(2501, "drop")
	ls, err := e.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ls[Listener{VIP: vip, Proto: ProtoTCP, Port: 2000, Last: 2999}]; ok {
		t.Fatal("the overlapped range is still listed")
	}
	if v, ok := ls[Listener{VIP: vip, Proto: ProtoTCP, Port: 3000, Last: 62999}]; !ok || v.Table != 3 {
		t.Fatalf("listeners read back: %v", ls)
	}
	// Deleting a range removes it; the last one gone removes the set.
	for _, l := range []Listener{{VIP: vip, Proto: ProtoTCP, Port: 2000, Last: 2500}, {VIP: vip, Proto: ProtoTCP, Port: 3000, Last: 62999}} {
		if err := e.DeleteListener(l); err != nil {
			t.Fatal(err)
		}
	}
	check(3000, "drop")
	if _, sets, _, _ := e.ListenerEntries(); sets != 0 {
		t.Fatalf("%d range sets left", sets)
	}
	// At most LBRangesMax ranges per VIP and protocol, with a clear error.
	for i := 0; i < LBRangesMax; i++ {
		put(Listener{VIP: vip, Proto: ProtoUDP, Port: uint16(10000 + 10*i), Last: uint16(10005 + 10*i)}, 3)
	}
	// The binary search finds every one of them at both ends, and not the
	// gaps between.
	proto = layers.IPProtocolUDP
	for i := 0; i < LBRangesMax; i++ {
		check(uint16(10000+10*i), beC)
		check(uint16(10005+10*i), beC)
		check(uint16(10006+10*i), "drop")
	}
	check(9999, "drop")
	err = e.PutListener(Listener{VIP: vip, Proto: ProtoUDP, Port: 20000, Last: 20001}, ListenerValue{Table: 3})
	if err == nil || !strings.Contains(err.Error(), "port ranges") {
		t.Fatalf("range %d accepted or unclear error: %v", LBRangesMax+1, err)
	}
}

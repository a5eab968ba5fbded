package dataplane

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

const vipNAT2 = "198.51.100.22" // a second VIP served by backend A:8080

// TestNATStateful: nat replies are translated by the connection they
// belong to. One backend:port serves two VIPs (each connection's replies
// leave from its own VIP and port), a backend's own connection is not
// translated, ICMP errors about a connection (from the backend or a router
// between) go back with the VIP in them, quote included, and so does the
// first fragment of a reply.
func TestNATStateful(t *testing.T) {
	b := newLBBed(t)
	e := b.edge
	if err := e.PutVIP(addr(vipNAT2)); err != nil {
		t.Fatal(err)
	}
	b.table(t, 4, "a")
	if err := e.PutListener(Listener{VIP: addr(vipNAT2), Proto: ProtoTCP, Port: 443}, ListenerValue{Table: 4}); err != nil {
		t.Fatal(err)
	}
	// client:40000 -> vipNAT:80 and client:40001 -> vipNAT2:443, both to A:8080.
	c1 := tcpTo(vipNAT, 80, "syn")
	c2 := tcpTo(vipNAT2, 443, "syn")
	c2.sport = 40001
	for _, f := range []flow{c1, c2} {
		if got := natBackendOf(t, b, f); got != beA {
			t.Fatalf("%s:%d went to %s", f.dst, f.dport, got)
		}
	}
	reply := func(dport uint16) flow {
		return flow{src: beA, dst: client, proto: layers.IPProtocolTCP, sport: 8080, dport: dport, ttl: 64}
	}
	wantReply := func(f flow, src string, sport uint16) []byte {
		g := f
		g.src, g.sport = src, sport
		g.ttl--
		return ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, g.ip(t))
	}
	fromUl := func(f flow) []byte { return f.frame(t, dptest.FabMAC, dptest.UlMAC) }
	own := reply(40002) // no connection: the backend's own
	ownOut := flow{src: beA, dst: "203.0.113.99", proto: layers.IPProtocolTCP, sport: 33333, dport: 443, syn: true, ttl: 64}

	// A reply's first fragment, and its second.
	frag1 := reply(40000)
	frag1.mf, frag1.payload = true, make([]byte, 64)
	frag2 := flow{src: beA, dst: client, proto: layers.IPProtocolTCP, fragOff: 9, payload: make([]byte, 40), ttl: 64}

	// Port unreachable from the backend about what it got from client 1.
	quoted1 := flow{src: client, dst: beA, proto: layers.IPProtocolTCP, sport: 40000, dport: 8080, ttl: 63}.ip(t)[:28]
	beErr := icmpError(t, beA, client, 3, 3, 0, quoted1)
	// Fragmentation needed from a router between, about client 2's.
	quoted2 := flow{src: client, dst: beA, proto: layers.IPProtocolTCP, sport: 40001, dport: 8080, ttl: 63, df: true}.ip(t)[:28]
	rtrErr := icmpError(t, dptest.FabAddr, client, 3, 4, 1400, quoted2)
	// ... and from the backend about a connection of its own.
	quoted3 := flow{src: client, dst: beA, proto: layers.IPProtocolTCP, sport: 40003, dport: 8080, ttl: 63}.ip(t)[:28]
	ownErr := icmpError(t, beA, client, 3, 3, 0, quoted3)

	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "A's reply to client 1 leaves from VIP 1:80", dev: dptest.UlDev, in: fromUl(reply(40000)), action: xdpRedirect,
			out: wantReply(reply(40000), vipNAT, 80), check: checksumsOK, stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "A's reply to client 2 leaves from VIP 2:443", dev: dptest.UlDev, in: fromUl(reply(40001)), action: xdpRedirect,
			out: wantReply(reply(40001), vipNAT2, 443), check: checksumsOK, stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "A's own connection from its service port is not translated", dev: dptest.UlDev, in: fromUl(own), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "A's own connection from another port is not translated", dev: dptest.UlDev, in: fromUl(ownOut), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "a reply's first fragment is translated", dev: dptest.UlDev, in: fromUl(frag1), action: xdpRedirect,
			out: wantReply(frag1, vipNAT, 80), stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "a later fragment has no ports: not translated", dev: dptest.UlDev, in: fromUl(frag2), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "A's error about client 1's connection leaves from VIP 1, quote translated", dev: dptest.UlDev,
			in: ethFrame(t, dptest.FabMAC, dptest.UlMAC, beErr), action: xdpRedirect, check: icmpBack(vipNAT, vipNAT, 80),
			stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "a router's error about client 2's connection: quote translated to VIP 2", dev: dptest.UlDev,
			in: ethFrame(t, dptest.FabMAC, dptest.UlMAC, rtrErr), action: xdpRedirect, check: icmpBack(dptest.FabAddr, vipNAT2, 443),
			stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "A's error about a connection of its own is not translated", dev: dptest.UlDev,
			in: ethFrame(t, dptest.FabMAC, dptest.UlMAC, ownErr), action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
	})

	// The backend's FIN ends the connection's entry.
	fin := reply(40000)
	fin.fin = true
	if res, err := b.env.Run(e.Program(), dptest.UlDev, fromUl(fin)); err != nil || res.Action != xdpRedirect {
		t.Fatalf("FIN reply: %v %v", res.Action, err)
	}
	found := false
	if err := e.Conns(func(c Conn) bool {
		if c.Sport == 40000 && c.Dst == addr(vipNAT) {
			found = true
			if c.State != ctFIN {
				t.Errorf("after the backend's FIN the entry is in state %d", c.State)
			}
		}
		return true
	}); err != nil || !found {
		t.Fatalf("connection entry: %v, found %v", err, found)
	}
	n := 0
	if err := e.NATConns(func(c NATConn) bool {
		n++
		if c.Backend != netip.MustParseAddrPort(beA+":8080") {
			t.Errorf("reverse entry %+v", c)
		}
		return true
	}); err != nil || n != 2 {
		t.Fatalf("%d reverse entries (%v), want 2", n, err)
	}
}

// icmpBack checks an ICMP error translated back to a client: from src, the
// quote's destination vip:vport, every checksum right.
func icmpBack(src, vip string, vport uint16) func(t *testing.T, out []byte) {
	return func(t *testing.T, out []byte) {
		t.Helper()
		p := decode(out)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil || ip.SrcIP.String() != src || ip.DstIP.String() != client {
			t.Fatalf("not %s -> %s:\n%s", src, client, p.Dump())
		}
		icmp := out[14+20 : 14+int(ip.Length)]
		if csum(out[14:34]) != 0 || csum(icmp) != 0 {
			t.Fatal("IPv4 or ICMP checksum wrong")
		}
		q := icmp[8:]
		if net.IP(q[16:20]).String() != vip || uint16(q[22])<<8|uint16(q[23]) != vport || csum(q[:20]) != 0 {
			t.Fatalf("quote not translated to %s:%d: %x", vip, vport, q)
		}
		if net.IP(q[12:16]).String() != client {
			t.Fatalf("quote source changed: %x", q)
		}
	}
}

// TestNATConnMemory reports the kernel memory per connection of the nat
// connection table (client -> VIP) and of the reverse table (backend ->
// client), both at their default 1M entries (memlock in fdinfo; run -v).
func TestNATConnMemory(t *testing.T) {
	requireRoot(t)
	e, err := LoadEdge(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fwd, err := e.ConnTableMemory()
	if err != nil {
		t.Fatal(err)
	}
	rev, err := e.NATConnMemory()
	if err != nil {
		t.Fatal(err)
	}
	n := float64(e.objs.LbConns.MaxEntries())
	t.Logf("per connection: forward %.1f B, reverse %.1f B, both %.1f B (%d entries each)", float64(fwd)/n, float64(rev)/n, float64(fwd+rev)/n, int(n))
	if fwd == 0 || rev == 0 || e.objs.LbNatConns.MaxEntries() != e.objs.LbConns.MaxEntries() {
		t.Fatal("no memory figures, or the tables differ in size")
	}
}

package dataplane

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/lbplan"
	"github.com/azgate/azgate/internal/model"
)

// TestNATReplyStateless: a backend's SYN-ACK that reaches an edge before
// the connection's reverse entry (its SYN went to another member of the
// set) is translated by the stateless fallback the plan gives
// (lb_nat_backends), counted, and installs the reverse entry; only a
// SYN-ACK (A's plain ACK, own SYN and datagram stay untranslated); a backend
// the plan shares between two VIPs, and a source that is no backend, are
// not translated; a connection's entry wins over the fallback; a forged
// reply from the wrong side is dropped and installs nothing.
func TestNATReplyStateless(t *testing.T) {
	b := newLBBed(t)
	e := b.edge
	// The fallback as the edge daemon writes it from a plan: beA:8080
	// serves only vipNAT:80; beB:8080 serves two VIPs (left out).
	pool := func(bs ...string) []model.Pool {
		p := model.Pool{Name: "p"}
		for _, x := range bs {
			p.Backends = append(p.Backends, model.Backend{Address: addr(x), Port: 8080})
		}
		return []model.Pool{p}
	}
	svc := func(name, vip string, port uint16, bs ...string) *model.Service {
		return &model.Service{Name: name, VIP: addr(vip), Mode: model.ModeNAT, TableSize: 211,
			Listeners: []model.Listener{{Protocol: "tcp", Port: port, Pool: "p"}}, Pools: pool(bs...)}
	}
	plan := lbplan.Build(lbplan.Input{Seed: 7, Services: map[string]*model.Service{
		"one": svc("one", vipNAT, 80, beA), "two": svc("two", vipNAT2, 443, beB), "three": svc("three", "198.51.100.23", 443, beB)}})
	if len(plan.NATBackends) != 1 || plan.NATLeftOut != 1 {
		t.Fatalf("plan's fallback %v, %d left out", plan.NATBackends, plan.NATLeftOut)
	}
	for k, v := range plan.NATBackends {
		if err := e.PutNATBackend(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := e.NATBackends(); err != nil || len(got) != 1 || got[NATBackend{Addr: addr(beA), Port: 8080, Proto: ProtoTCP}] != netip.MustParseAddrPort(vipNAT+":80") {
		t.Fatalf("lb_nat_backends %v %v", got, err)
	}
	// A connection whose entry says another VIP and port than the fallback.
	if err := e.PutNATConn(NATConn{Backend: netip.MustParseAddrPort(beA + ":8080"), Client: netip.MustParseAddrPort(client + ":40020"),
		VIP: netip.MustParseAddrPort(vipNAT2 + ":443"), Proto: ProtoTCP}); err != nil {
		t.Fatal(err)
	}

	synack := func(src string, dport uint16) flow {
		return flow{src: src, dst: client, proto: layers.IPProtocolTCP, sport: 8080, dport: dport, syn: true, ack: true, ttl: 64}
	}
	wantReply := func(f flow, src string, sport uint16) []byte {
		g := f
		g.src, g.sport = src, sport
		g.ttl--
		return ethFrame(t, dptest.ExtMAC, dptest.RtrMAC, g.ip(t))
	}
	fromUl := func(f flow) []byte { return f.frame(t, dptest.FabMAC, dptest.UlMAC) }
	info0, err := e.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	ack := synack(beA, 40015)
	ack.syn = false // a plain ACK
	ownSyn := synack(beA, 40016)
	ownSyn.ack = false // A opens a connection of its own from 8080
	udp := flow{src: beA, dst: client, proto: layers.IPProtocolUDP, sport: 8080, dport: 40017, ttl: 64}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "A's plain ACK with no entry is not translated (SYN-ACKs only)", dev: dptest.UlDev, in: fromUl(ack), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "A's own SYN from 8080 is not translated", dev: dptest.UlDev, in: fromUl(ownSyn), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "A's own datagram from 8080 is not translated", dev: dptest.UlDev, in: fromUl(udp), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "A's SYN-ACK with no entry leaves from vipNAT:80 (fallback)", dev: dptest.UlDev, in: fromUl(synack(beA, 40010)),
			action: xdpRedirect, out: wantReply(synack(beA, 40010), vipNAT, 80), check: checksumsOK, stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "B's SYN-ACK (B serves two VIPs) is not translated", dev: dptest.UlDev, in: fromUl(synack(beB, 40011)), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "no backend's SYN-ACK is not translated", dev: dptest.UlDev, in: fromUl(synack("198.19.100.9", 40012)), action: xdpPass,
			stats: map[string]uint64{"pass_not_ours": 1}},
		{name: "the entry wins over the fallback: A's reply to 40020 leaves from vipNAT2:443", dev: dptest.UlDev,
			in: fromUl(synack(beA, 40020)), action: xdpRedirect, out: wantReply(synack(beA, 40020), vipNAT2, 443), check: checksumsOK,
			stats: map[string]uint64{"lb_reply_tx": 1}},
		{name: "A's SYN-ACK from the client's side is forged: dropped", dev: dptest.ExtDev,
			in: synack(beA, 40013).frame(t, dptest.RtrMAC, dptest.ExtMAC), action: xdpDrop, stats: map[string]uint64{"drop_spoof": 1}},
	})
	info, err := e.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	if n := info["nat_reply_stateless"] - info0["nat_reply_stateless"]; n != 1 {
		t.Errorf("nat_reply_stateless counted %d, want 1", n)
	}
	// The fallback installed client 40010's reverse entry (and no other).
	got := map[uint16]netip.AddrPort{}
	if err := e.NATConns(func(c NATConn) bool {
		got[c.Client.Port()] = c.VIP
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[40010] != netip.MustParseAddrPort(vipNAT+":80") || got[40020] != netip.MustParseAddrPort(vipNAT2+":443") {
		t.Errorf("reverse entries %v, want 40010 -> %s:80 and 40020 (the test's)", got, vipNAT)
	}

	// Removed from the plan: A's replies without an entry are no longer
	// translated.
	if err := e.DeleteNATBackend(NATBackend{Addr: addr(beA), Port: 8080, Proto: ProtoTCP}); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "A out of the fallback: its SYN-ACK with no entry is not translated", dev: dptest.UlDev, in: fromUl(synack(beA, 40014)),
			action: xdpPass, stats: map[string]uint64{"pass_not_ours": 1}},
	})
}

package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// readEvents drains the ring: every event written so far.
func readEvents(t *testing.T, r *ConnEventReader) []ConnEvent {
	t.Helper()
	var out []ConnEvent
	for {
		r.SetDeadline(time.Now().Add(20 * time.Millisecond))
		var ev ConnEvent
		err := r.Read(&ev)
		if errors.Is(err, ErrNoEvent) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// TestConnEvents runs flows through the program (BPF_PROG_TEST_RUN) and
// reads the ring buffer: an insert writes one event naming the key, the
// backend slot and generation the entry holds; a plain hit writes none; a
// state change writes one; with sync off nothing is written.
func TestConnEvents(t *testing.T) {
	c := newCTBed(t)
	r, err := c.edge.OpenConnEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	syn := tcpTo(vipNAT, 80, "syn")
	syn.sport = 41000
	ack := syn
	ack.syn = false
	ack2 := ack
	ack2.payload = []byte("more")

	c.send(syn) // sync off: no event
	if evs := readEvents(t, r); len(evs) != 0 {
		t.Fatalf("sync off: %d events, want none", len(evs))
	}
	if err := c.edge.SetConnSync(true); err != nil {
		t.Fatal(err)
	}
	syn.sport, ack.sport, ack2.sport = 41001, 41001, 41001

	c.send(syn)
	evs := readEvents(t, r)
	if len(evs) != 1 {
		t.Fatalf("insert: %d events, want 1: %+v", len(evs), evs)
	}
	v, ok := c.entry(syn)
	if !ok {
		t.Fatal("no entry after the SYN")
	}
	want := ConnEvent{Key: MakeConnKey(addr(client), addr(vipNAT), 41001, 80, ProtoTCP), Backend: v.Backend, Gen: v.Gen,
		Last: v.Last, State: ConnSYN, FID: v.Fid, Kind: ConnEventNew}
	if evs[0] != want {
		t.Fatalf("insert event %+v, want %+v", evs[0], want)
	}
	if uint32(v.Backend) != c.idx["a"] {
		t.Fatalf("entry on backend %d, want a (%d)", v.Backend, c.idx["a"])
	}

	c.send(ack) // SYN -> EST: one state event
	evs = readEvents(t, r)
	if len(evs) != 1 || evs[0].Kind != ConnEventState || evs[0].State != ConnEST || evs[0].Key != want.Key || evs[0].Backend != want.Backend {
		t.Fatalf("state change: events %+v, want one EST event for the flow", evs)
	}
	for i := 0; i < 5; i++ { // hits: nothing
		c.send(ack2)
	}
	if evs := readEvents(t, r); len(evs) != 0 {
		t.Fatalf("hits: %d events, want none: %+v", len(evs), evs)
	}
	udp := flow{src: client, dst: vipNAT, proto: layers.IPProtocolUDP, sport: 41002, dport: 53, ttl: 64}
	c.send(udp)
	c.send(udp)
	if evs := readEvents(t, r); len(evs) != 1 || evs[0].State != ConnUDP || evs[0].Kind != ConnEventNew {
		t.Fatalf("UDP flow: events %+v, want one new UDP entry", evs)
	}
	if lost, err := c.edge.ConnEventsLost(); err != nil || lost != 0 {
		t.Fatalf("lost %d (%v), want 0", lost, err)
	}
}

// TestConnEventsRingFull: with no reader draining it, the ring fills and
// the program counts what it could not write, and keeps forwarding.
func TestConnEventsRingFull(t *testing.T) {
	if testing.Short() {
		t.Skip("fills an 8 MiB ring")
	}
	c := newCTBed(t)
	if err := c.edge.SetConnSync(true); err != nil {
		t.Fatal(err)
	}
	const perRing = (1 << 23) / 40 // records of 28 B, rounded to 32, and an 8-byte header
	n := perRing + 500
	idx, err := c.env.Node.Ifindex(dptest.ExtDev)
	if err != nil {
		t.Fatal(err)
	}
	f := tcpTo(vipNAT, 80, "syn")
	// One namespace switch for all the runs (dptest.Env.Run makes one
	// per packet): distinct flows, each one insert.
	err = c.env.Node.Do(func() error {
		for i := 0; i < n; i++ {
			f.sport = uint16(1024 + i%60000)
			f.src = netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i/60000)}).String()
			data := f.frame(t, dptest.RtrMAC, dptest.ExtMAC)
			ret, err := c.edge.Program().Run(&ebpf.RunOptions{Data: data, DataOut: make([]byte, len(data)+512),
				Context: dptest.XDPContext(len(data), idx)})
			if err != nil {
				return err
			}
			if ret != xdpRedirect {
				return fmt.Errorf("flow %d: action %s", i, actionNames[ret])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := c.edge.ConnEventsLost()
	if err != nil {
		t.Fatal(err)
	}
	if lost < 400 || lost > uint64(n) {
		t.Fatalf("lost %d events of %d, want about %d", lost, n, n-perRing)
	}
}

// TestApplyConns writes translated entries as a peer would and reads them
// back, with the nat reverse entry of a nat-mode backend; then a flow the
// entry covers goes to the entry's backend although the table says
// another.
func TestApplyConns(t *testing.T) {
	c := newCTBed(t)
	k := MakeConnKey(addr(client), addr(vipNAT), 42000, 80, ProtoTCP)
	be, err := c.edge.Backend(c.idx["c"])
	if err != nil {
		t.Fatal(err)
	}
	sc := SyncedConn{Key: k, Backend: uint16(c.idx["c"]), Gen: be.Gen, Last: 0, State: ConnEST, FID: 7,
		NAT: true, BAddr: ip4word(be.Addr), BPort: be16(be.Port)}
	// Last seen "now": the entry is live (jiffies read through a hit of
	// another flow's fresh entry).
	probe := tcpTo(vipNAT, 80, "syn")
	probe.sport = 42001
	c.send(probe)
	pv, _ := c.entry(probe)
	sc.Last = pv.Last
	if err := c.edge.ApplyConns([]SyncedConn{sc}); err != nil {
		t.Fatal(err)
	}
	got, err := c.edge.LookupConn(k)
	if err != nil {
		t.Fatal(err)
	}
	if got.Backend != sc.Backend || got.Gen != sc.Gen || got.State != ConnEST || got.FID != 7 {
		t.Fatalf("entry %+v, want %+v", got, sc)
	}
	cl, _ := k.Addrs()
	vip, err := c.edge.LookupNATConn(netip.AddrPortFrom(be.Addr, be.Port), cl, ProtoTCP)
	if err != nil || vip != netip.MustParseAddrPort(vipNAT+":80") {
		t.Fatalf("reverse entry %v (%v), want %s:80", vip, err, vipNAT)
	}
	ack := tcpTo(vipNAT, 80, "ack")
	ack.sport = 42000
	if dst := c.send(ack); dst != beC {
		t.Fatalf("synced flow went to %s, want its entry's backend %s (the table says a)", dst, beC)
	}
	n := 0
	if err := c.edge.DumpConns(1, func(es []ConnEntry) error { n += len(es); return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("dump: %d entries, want 2", n)
	}
}

// TestConnEvents6: an IPv6 VIP's flow (lb6_ingress, ct_emit6) writes its
// events into the same ring as 52-byte records: an insert one with the
// lb_conns6 entry's key, slot, generation, jiffies; a state change one;
// hits none; nothing while sync is off.
func TestConnEvents6(t *testing.T) {
	b := newVIP6Bed(t)
	r, err := b.edge.OpenConnEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const syn, ack = 0x02, 0x10
	flow := func(sport uint16, flags uint8, payload ...byte) []byte {
		return ip6Hdr(client6, vip6s, nhTCP, append(tcp6(sport, 443, flags), payload...))
	}
	if got := b.outerDst(t, flow(41000, syn)); got != hostAddr {
		t.Fatalf("sync off: SYN went to %s", got)
	}
	if evs := readEvents(t, r); len(evs) != 0 {
		t.Fatalf("sync off: %d events, want none", len(evs))
	}
	if err := b.edge.SetConnSync(true); err != nil {
		t.Fatal(err)
	}
	if got := b.outerDst(t, flow(41001, syn)); got != hostAddr {
		t.Fatalf("SYN went to %s", got)
	}
	key := MakeConnKey(addr(client6), addr(vip6s), 41001, 443, ProtoTCP)
	v, err := b.edge.LookupConn(key)
	if err != nil {
		t.Fatalf("no lb_conns6 entry after the SYN: %v", err)
	}
	evs := readEvents(t, r)
	want := ConnEvent{Key: key, Backend: uint16(b.idx["g"]), Gen: 1, Last: v.Last, State: ConnSYN, FID: v.FID, Kind: ConnEventNew}
	if len(evs) != 1 || evs[0] != want {
		t.Fatalf("insert: events %+v, want [%+v]", evs, want)
	}
	if s, d := evs[0].Key.Addrs(); s != netip.MustParseAddrPort("["+client6+"]:41001") || d != netip.MustParseAddrPort("["+vip6s+"]:443") {
		t.Fatalf("event key %v -> %v", s, d)
	}
	b.outerDst(t, flow(41001, ack)) // SYN -> EST
	evs = readEvents(t, r)
	if len(evs) != 1 || evs[0].Kind != ConnEventState || evs[0].State != ConnEST || evs[0].Key != key || evs[0].Backend != want.Backend {
		t.Fatalf("state change: events %+v, want one EST event for the flow", evs)
	}
	for i := 0; i < 5; i++ {
		b.outerDst(t, flow(41001, ack, 'x'))
	}
	if evs := readEvents(t, r); len(evs) != 0 {
		t.Fatalf("hits: %d events, want none: %+v", len(evs), evs)
	}
	if lost, err := b.edge.ConnEventsLost(); err != nil || lost != 0 {
		t.Fatalf("lost %d (%v), want 0", lost, err)
	}
}

// TestApplyConns6: an IPv6 entry written with ApplyConns lands in
// lb_conns6 and serves its flow against the VIP's table (h where the
// table says g); DumpConns returns it; a nat IPv6 entry is refused.
func TestApplyConns6(t *testing.T) {
	b := newVIP6Bed(t)
	const ack = 0x10
	flow := func(sport uint16) []byte { return ip6Hdr(client6, vip6s, nhTCP, tcp6(sport, 443, ack)) }
	if got := b.outerDst(t, flow(42000)); got != hostAddr {
		t.Fatalf("without an entry the flow went to %s, want the table's %s", got, hostAddr)
	}
	// Last seen "now": the probe flow's fresh entry tells the jiffies.
	probe, err := b.edge.LookupConn(MakeConnKey(addr(client6), addr(vip6s), 42000, 443, ProtoTCP))
	if err != nil {
		t.Fatal(err)
	}
	now := probe.Last
	key := MakeConnKey(addr(client6), addr(vip6s), 42001, 443, ProtoTCP)
	if err := b.edge.ApplyConns([]SyncedConn{{Key: key, Backend: uint16(b.idx["h"]), Gen: 1, Last: now, State: ConnEST, FID: 7}}); err != nil {
		t.Fatal(err)
	}
	if got := b.outerDst(t, flow(42001)); got != otherHost {
		t.Fatalf("the synced flow went to %s, want its entry's %s", got, otherHost)
	}
	var dumped []ConnEntry
	if err := b.edge.DumpConns(2, func(es []ConnEntry) error { dumped = append(dumped, es...); return nil }); err != nil {
		t.Fatal(err)
	}
	found := false
	if len(dumped) != 2 {
		t.Fatalf("dump: %d entries, want the probe's and the synced one", len(dumped))
	}
	for _, e := range dumped {
		if e.Key == key && e.Backend == uint16(b.idx["h"]) && e.State == ConnEST {
			found = true
		}
	}
	if !found {
		t.Fatalf("dump %+v: no IPv6 entry for %v on h", dumped, key)
	}
}

// TestApplyConnsNAT6: a synced IPv6 nat connection (issue 21) writes its
// entry and its reverse entry (lb_nat_conns6): the client's next segment
// goes to the entry's backend, DNATed, and the backend's reply (an ACK:
// not the fallback's SYN-ACK) leaves SNATed from the VIP and port.
func TestApplyConnsNAT6(t *testing.T) {
	b := newNAT6Bed(t)
	e := b.edge
	probe := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 42000, dport: 80, tcpFlags: tcpSYN}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "a probe flow: tells the jiffies", dev: dptest.ExtDev, in: inet6(probe.ip()), action: xdpRedirect,
			stats: map[string]uint64{"lb_nat_tx": 1}},
	})
	pe, err := e.LookupConn(MakeConnKey(addr(client6), addr(vipN6), 42000, 80, ProtoTCP))
	if err != nil {
		t.Fatal(err)
	}
	w, ok := AddrWords6(addr(beA6))
	if !ok {
		t.Fatal("AddrWords6 refused an IPv6 address")
	}
	key := MakeConnKey(addr(client6), addr(vipN6), 42001, 80, ProtoTCP)
	if err := e.ApplyConns([]SyncedConn{{Key: key, Backend: uint16(b.idx["a6"]), Gen: 1, Last: pe.Last, State: ConnEST, FID: 9,
		NAT: true, BAddr6: w, BPort: be16(8080)}}); err != nil {
		t.Fatal(err)
	}
	vip, err := e.LookupNATConn(netip.MustParseAddrPort("["+beA6+"]:8080"), netip.MustParseAddrPort("["+client6+"]:42001"), ProtoTCP)
	if err != nil || vip != netip.MustParseAddrPort("["+vipN6+"]:80") {
		t.Fatalf("reverse entry %v (%v), want [%s]:80", vip, err, vipN6)
	}
	ack := pkt6{src: client6, dst: vipN6, proto: nhTCP, sport: 42001, dport: 80, tcpFlags: tcpACK}
	ackOut := ack.withDst(beA6)
	ackOut.dport = 8080
	reply := pkt6{src: beA6, dst: client6, proto: nhTCP, sport: 8080, dport: 42001, tcpFlags: tcpACK}
	replyOut := reply.withSrc(vipN6)
	replyOut.sport = 80
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		{name: "the synced flow's ACK: DNAT66 to beA6:8080", dev: dptest.ExtDev, in: inet6(ack.ip()), action: xdpRedirect,
			out: toBackend6(ackOut.ip()), stats: map[string]uint64{"lb_nat_tx": 1}},
		{name: "the backend's ACK: SNAT66 by the synced reverse entry", dev: dptest.UlDev, in: ul6(reply.ip()), action: xdpRedirect,
			out: toClient6(replyOut.ip()), stats: map[string]uint64{"lb_reply_tx": 1}},
	})
}

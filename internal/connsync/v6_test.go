package connsync

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
)

// IPv6 VIPs' entries (lb_conns6, issue 21).
var (
	vip6    = netip.MustParseAddr("2001:db8:e1::81")
	client6 = netip.MustParseAddr("2001:db8:c::7")
)

func key6(port uint16) dataplane.ConnKey {
	return dataplane.MakeConnKey(client6, vip6, port, 443, dataplane.ProtoTCP)
}

// fill6 writes n IPv6 entries on the encap backend into m's lb_conns6.
func (m *member) fill6(t *testing.T, from uint16, n int) {
	t.Helper()
	var cs []dataplane.SyncedConn
	now := uint32(clock.Jiffies())
	for i := 0; i < n; i++ {
		cs = append(cs, dataplane.SyncedConn{Key: key6(from + uint16(i)), Backend: uint16(m.slots[ownerEncap]), Gen: m.gens[ownerEncap],
			Last: now - uint32(i%100), State: dataplane.ConnEST, FID: uint8(i)})
	}
	if err := m.edge.ApplyConns(cs); err != nil {
		t.Fatal(err)
	}
}

// countFamilies counts m's entries per family; bad: those not in m's own
// slot and generation of the encap backend (IPv6) or either backend.
func countFamilies(t *testing.T, m *member) (v4, v6, bad int) {
	t.Helper()
	err := m.edge.DumpConns(4096, func(es []dataplane.ConnEntry) error {
		for _, e := range es {
			enc := e.Backend == uint16(m.slots[ownerEncap]) && e.Gen == m.gens[ownerEncap]
			nat := e.Backend == uint16(m.slots[ownerNAT]) && e.Gen == m.gens[ownerNAT]
			if e.Key.V6 {
				v6++
				if !enc {
					bad++
				}
			} else {
				v4++
				if !enc && !nat {
					bad++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return v4, v6, bad
}

// TestIPv6FullCopyAndEvents: a member joining a set pulls the IPv6 VIPs'
// entries (lb_conns6) with the IPv4 ones in its full copy, in its own
// slot and generation of the same backend; then an IPv6 entry the
// sender's data plane reports (new, then a state change) appears on it,
// aged as on the sender, with its FlowID; counted per family.
func TestIPv6FullCopyAndEvents(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	const n4, n6 = 500, 700
	a.fill(t, 1000, n4)
	a.fill6(t, 2000, n6)
	c.start(a, c.secret)
	waitFor(t, "a ready as the first", 3*time.Second, a.s.Ready)
	c.start(b, c.secret)
	waitFor(t, "b ready", 10*time.Second, b.s.Ready)
	if r := b.s.Reason(); r != fmt.Sprintf("full copy from a: %d entries", n4+n6) {
		t.Fatalf("b's reason %q", r)
	}
	if v4, v6, bad := countFamilies(t, b); v4 != n4 || v6 != n6 || bad != 0 {
		t.Fatalf("b holds %d IPv4 and %d IPv6 entries (%d not in its slots), want %d and %d", v4, v6, bad, n4, n6)
	}
	onA, err := a.edge.LookupConn(key6(2005))
	if err != nil {
		t.Fatal(err)
	}
	onB, err := b.edge.LookupConn(key6(2005))
	if err != nil || onB.Backend != 13 || onB.Gen != 8 || onB.State != dataplane.ConnEST || onB.FID != onA.FID {
		t.Fatalf("b's copy %+v (%v), want slot 13 generation 8, EST, FlowID %d", onB, err, onA.FID)
	}

	// a's own session to b (a dialled b's old address until b started).
	waitFor(t, "a connected to b", 5*time.Second, func() bool {
		ps := a.s.Status().Peers
		return len(ps) == 1 && ps[0].Connected && ps[0].Addr == b.s.Addr().String()
	})
	const age = 50
	a.ev.ch <- dataplane.ConnEvent{Key: key6(3000), Backend: uint16(a.slots[ownerEncap]), Gen: a.gens[ownerEncap],
		Last: uint32(clock.Jiffies()) - age, State: dataplane.ConnSYN, FID: 0x5a, Kind: dataplane.ConnEventNew}
	var got dataplane.ConnEntry
	waitFor(t, "the new IPv6 entry on b", 3*time.Second, func() bool {
		got, err = b.edge.LookupConn(key6(3000))
		return err == nil
	})
	now := uint32(clock.Jiffies())
	if got.Backend != 13 || got.Gen != 8 || got.State != dataplane.ConnSYN || got.FID != 0x5a || now-got.Last < age-2 || now-got.Last > age+50 {
		t.Fatalf("b's entry %+v (now %d): want slot 13 generation 8, SYN, FlowID 0x5a, about %d jiffies old", got, now, age)
	}
	if _, err := b.edge.LookupConn(dataplane.ConnKey{Src: 0, Dst: 0, Sport: key6(3000).Sport, Dport: key6(3000).Dport, Proto: dataplane.ProtoTCP}); err == nil {
		t.Fatal("an IPv6 entry was written into the IPv4 table")
	}
	a.ev.ch <- dataplane.ConnEvent{Key: key6(3000), Backend: uint16(a.slots[ownerEncap]), Gen: a.gens[ownerEncap],
		Last: uint32(clock.Jiffies()), State: dataplane.ConnEST, FID: 0x5a, Kind: dataplane.ConnEventState}
	waitFor(t, "the state change on b", 3*time.Second, func() bool {
		got, _ = b.edge.LookupConn(key6(3000))
		return got.State == dataplane.ConnEST
	})
	am, bm := a.s.Status().Metrics, b.s.Status().Metrics
	if am.Events6 != 2 || am.Sent6 != n6+2 || am.Unsupported != 0 {
		t.Fatalf("a's metrics %+v: want 2 IPv6 events, %d IPv6 entries sent", am, n6+2)
	}
	if bm.Received6 != n6+2 || bm.Applied != n4+n6+2 || bm.Unmapped != 0 || bm.MalformedEntries != 0 {
		t.Fatalf("b's metrics %+v: want %d IPv6 received, %d applied", bm, n6+2, n4+n6+2)
	}
}

// TestIPv6OldPeer: rolling upgrade. A peer of the release before IPv6
// entries (it announces no features: its hello is the same, version 1)
// asks for a full copy: it gets only frames it knows (batches of 28-byte
// entries, pings, the end) with the IPv4 entries, and a count that
// matches them; the IPv6 ones are left out and counted
// (sync_drop_unsupported). A batch of IPv6 entries from a current peer
// with a malformed entry (zero client address) is refused entry by entry
// and counted, and one whose count does not match its length ends the
// session.
func TestIPv6OldPeer(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	c.add("b", 10, 7)
	const n4, n6 = 300, 400
	a.fill(t, 1000, n4)
	a.fill6(t, 2000, n6)
	c.start(a, c.secret)
	waitFor(t, "a ready", 3*time.Second, a.s.Ready)

	old := rawSession(t, a.s, "b", c.secret)
	if err := old.writeFrame([]byte{frameDumpReq}); err != nil {
		t.Fatal(err)
	}
	entries := 0
	for end := false; !end; {
		body, err := old.readFrame(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch body[0] {
		case frameBatch:
			_, es, err := parseBatch(body)
			if err != nil {
				t.Fatal(err)
			}
			entries += len(es) / entrySize
		case framePing:
		case frameDumpEnd:
			if got := binary.LittleEndian.Uint64(body[1:]); got != n4 {
				t.Fatalf("dump end says %d entries, want the %d IPv4 ones", got, n4)
			}
			end = true
		default:
			t.Fatalf("an old peer got frame type %d", body[0])
		}
	}
	if entries != n4 {
		t.Fatalf("old peer got %d entries, want %d", entries, n4)
	}
	if m := a.s.Status().Metrics; m.Unsupported != n6 || m.Sent6 != 0 {
		t.Fatalf("a's metrics %+v: want %d IPv6 entries left out, none sent", m, n6)
	}

	// A current peer's IPv6 batch: one good entry, one with no client.
	cur := rawSession(t, a.s, "b", c.secret)
	if err := cur.writeFrame(featuresFrame); err != nil {
		t.Fatal(err)
	}
	good := entryOf(&[]dataplane.ConnKey{key6(4000)}[0])
	good.kind, good.state, good.owner, good.ageMS = kindNew, dataplane.ConnEST, ownerEncap, 10
	bad := good
	bad.sport = 7
	bad.src6 = [4]uint32{}
	body := make([]byte, batchHeader+2*entry6Size)
	body[0], body[1], body[9] = frameBatch6, 1, 2
	encodeEntry6(body[batchHeader:], &good)
	encodeEntry6(body[batchHeader+entry6Size:], &bad)
	if err := cur.writeFrame(body); err != nil {
		t.Fatal(err)
	}
	for {
		ack, err := cur.readFrame(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ack[0] == frameAck {
			if applied := binary.LittleEndian.Uint32(ack[9:]); applied != 1 {
				t.Fatalf("ack says %d applied, want 1", applied)
			}
			break
		}
	}
	if e, err := a.edge.LookupConn(key6(4000)); err != nil || e.Backend != 3 || e.Gen != 2 {
		t.Fatalf("a's entry %+v (%v): want slot 3 generation 2", e, err)
	}
	if m := a.s.Status().Metrics; m.MalformedEntries != 1 || m.Received6 != 2 {
		t.Fatalf("a's metrics %+v: want 1 malformed entry of 2 IPv6 received", m)
	}
	lying := append([]byte(nil), body...)
	lying[9] = 3
	if err := cur.writeFrame(lying); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lying batch counted", 3*time.Second, func() bool { return a.s.Status().Metrics.Malformed == 1 })
}

// TestEntry6RoundTrip: an IPv6 entry's 52 bytes decode to what was
// encoded; an IPv4 entry is unchanged at 28 bytes.
func TestEntry6RoundTrip(t *testing.T) {
	e := entryOf(&[]dataplane.ConnKey{key6(4321)}[0])
	e.kind, e.state, e.fid, e.owner, e.ageMS = kindDump, dataplane.ConnFIN, 9, 0x0102030405060708, 77
	var b [entry6Size]byte
	encodeEntry6(b[:], &e)
	var d entry
	if err := decodeEntry6(b[:], &d); err != nil || d != e {
		t.Fatalf("decoded %+v (%v), want %+v", d, err, e)
	}
	if d.key() != key6(4321) {
		t.Fatalf("key %v, want %v", d.key(), key6(4321))
	}
	w := wireEntry(80, ownerNAT)
	var b4 [entrySize]byte
	encodeEntry(b4[:], &w)
	if !bytes.Equal(b4[:4], client.AsSlice()) {
		t.Fatalf("IPv4 entry starts %x, want the client %v", b4[:4], client)
	}
}

// TestIPv6ToOldServer: rolling upgrade, the other direction. A current
// member dials a peer of the release before IPv6 entries (a server by
// hand: version 1 hello, no features ping, frames 1 to 5 only). It asks
// for its copy and streams its events; the IPv4 entries arrive, the
// IPv6 ones are never sent (no frame type 6 reaches the old peer, which
// would end the session on it) and are counted.
func TestIPv6ToOldServer(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c.mu.Lock()
	c.members["b"] = &member{name: "b"}
	c.mu.Unlock()
	c.addrs.Store("b", netip.MustParseAddrPort(ln.Addr().String()))
	got := make(chan byte, 64)
	srvErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer conn.Close()
		sess, err := serverHandshake(conn, "b", c.secret, 2*time.Second)
		if err != nil {
			srvErr <- err
			return
		}
		ack := make([]byte, 1+8+4+4)
		ack[0] = frameAck
		for {
			body, err := sess.readFrame(3 * time.Second)
			if err != nil {
				srvErr <- err
				return
			}
			got <- body[0]
			switch body[0] {
			case frameDumpReq: // an empty copy from a ready peer
				end := make([]byte, 10)
				end[0], end[9] = frameDumpEnd, 1
				if err := sess.writeFrame(end); err != nil {
					srvErr <- err
					return
				}
			case frameBatch:
				copy(ack[1:9], body[1:9])
				if err := sess.writeFrame(ack); err != nil {
					srvErr <- err
					return
				}
			case framePing:
			default: // what the old release does: end the session
				srvErr <- fmt.Errorf("frame type %d", body[0])
				return
			}
		}
	}()
	c.start(a, c.secret)
	waitFor(t, "a ready with b's copy", 5*time.Second, a.s.Ready)
	a.ev.ch <- dataplane.ConnEvent{Key: key6(5000), Backend: 3, Gen: 2, Last: uint32(clock.Jiffies()), State: dataplane.ConnSYN, Kind: dataplane.ConnEventNew}
	a.emit(5001, ownerEncap, dataplane.ConnEventNew, dataplane.ConnSYN, 0)
	waitFor(t, "the IPv4 entry sent and the IPv6 one left out", 5*time.Second, func() bool {
		m := a.s.Status().Metrics
		return m.Sent == 1 && m.Unsupported == 1
	})
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-srvErr:
		t.Fatalf("the old peer's session ended: %v", err)
	default:
	}
	var types []byte
	for len(got) > 0 {
		types = append(types, <-got)
	}
	if !bytes.Contains(types, []byte{frameBatch}) || bytes.Contains(types, []byte{frameBatch6}) {
		t.Fatalf("the old peer got frame types %v: want a batch and no IPv6 batch", types)
	}
	if m := a.s.Status().Metrics; m.Sent6 != 0 || m.Events6 != 1 {
		t.Fatalf("a's metrics %+v", m)
	}
}

// TestIPv6NATInsertTranslated: an IPv6 VIP's nat connection (issue 21)
// syncs as an IPv4 one does: the entry A's data plane reports appears on
// B in B's slot and generation of the same IPv6 nat backend, with the
// reverse entry (lb_nat_conns6) rebuilt from the backend's IPv6 address
// and port, so B translates the backend's replies to the VIP and port.
func TestIPv6NATInsertTranslated(t *testing.T) {
	const ownerNAT6 = uint64(0x9999_aaaa_bbbb_cccc)
	be6 := netip.MustParseAddr("2001:db8:be::1")
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	for _, m := range []*member{a, b} {
		slot, gen := m.slots[ownerNAT]+5, m.gens[ownerNAT]+2
		if err := m.edge.SetBackend(slot, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: be6, Port: 8080, Gen: gen, Owner: ownerNAT6}); err != nil {
			t.Fatal(err)
		}
		m.slots[ownerNAT6], m.gens[ownerNAT6] = slot, gen
	}
	c.start(a, c.secret)
	c.start(b, c.secret)
	waitFor(t, "both ready", 5*time.Second, func() bool { return a.s.Ready() && b.s.Ready() })
	waitFor(t, "a connected to b", 5*time.Second, func() bool {
		ps := a.s.Status().Peers
		return len(ps) == 1 && ps[0].Connected
	})
	a.ev.ch <- dataplane.ConnEvent{Key: key6(4000), Backend: uint16(a.slots[ownerNAT6]), Gen: a.gens[ownerNAT6],
		Last: uint32(clock.Jiffies()), State: dataplane.ConnSYN, FID: 0x21, Kind: dataplane.ConnEventNew}
	var got dataplane.ConnEntry
	waitFor(t, "the IPv6 nat entry on b", 3*time.Second, func() bool {
		var err error
		got, err = b.edge.LookupConn(key6(4000))
		return err == nil
	})
	if got.Backend != uint16(b.slots[ownerNAT6]) || got.Gen != b.gens[ownerNAT6] || got.State != dataplane.ConnSYN {
		t.Fatalf("b's entry %+v: want b's slot %d generation %d, SYN", got, b.slots[ownerNAT6], b.gens[ownerNAT6])
	}
	v, err := b.edge.LookupNATConn(netip.AddrPortFrom(be6, 8080), netip.AddrPortFrom(client6, 4000), dataplane.ProtoTCP)
	if err != nil || v != netip.AddrPortFrom(vip6, 443) {
		t.Fatalf("IPv6 nat reverse entry on b: %v %v, want [%v]:443", v, err, vip6)
	}
	if bm := b.s.Status().Metrics; bm.Unmapped != 0 {
		t.Fatalf("b's metrics %+v: none unmapped", bm)
	}
}

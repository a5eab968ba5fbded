package connsync

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// cutProxy forwards TCP connections to a target and can cut all of them
// at once, or stall them (stop forwarding, as a partitioned network does)
// until released: the faults of a sync session between two members.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	stall  chan struct{} // non-nil: closed when the stall ends
	cuts   atomic.Int32
	closed atomic.Bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(p.close)
	go p.accept()
	return p
}

func (p *cutProxy) addr() netip.AddrPort { return netip.MustParseAddrPort(p.ln.Addr().String()) }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		// From 127.0.0.1: the member's address in the set, which the
		// receiver checks.
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
		u, err := d.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			st := p.stall
			p.mu.Unlock()
			if st != nil {
				<-st // hold the bytes while stalled (lost if the stall ends with a cut)
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				to.Close()
			}
			from.Close()
			return
		}
	}
}

// cut closes every connection through the proxy (mid-frame, as it
// happens), as a reset or a dead link does.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.cuts.Add(1)
}

func (p *cutProxy) startStall() {
	p.mu.Lock()
	p.stall = make(chan struct{})
	p.mu.Unlock()
}

// endStall cuts the stalled connections (their peers gave up on them or
// will) and forwards again.
func (p *cutProxy) endStall() {
	p.mu.Lock()
	st := p.stall
	p.stall = nil
	p.mu.Unlock()
	p.cut()
	if st != nil {
		close(st)
	}
}

// resume ends a stall without a cut: the held bytes go on.
func (p *cutProxy) resume() {
	p.mu.Lock()
	st := p.stall
	p.stall = nil
	p.mu.Unlock()
	if st != nil {
		close(st)
	}
}

func (p *cutProxy) close() {
	if p.closed.CompareAndSwap(false, true) {
		p.ln.Close()
		p.endStall()
	}
}

// tcpFrame is a TCP segment from the Internet side to a VIP.
func tcpFrame(t testing.TB, src, dst netip.Addr, sport, dport uint16, syn, ack bool) []byte {
	eth := &layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.RtrMAC), DstMAC: dptest.MustMAC(dptest.ExtMAC), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: syn, ACK: ack, Seq: 1, Ack: 1, Window: 1000}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestStreamFaultsUnderLoad: connections are made on A through its real
// program at a steady rate (a SYN and an ACK each: a new entry, then its
// state change) while the session A streams them to B on is cut three
// times and then stalled past the I/O timeout (a partition) and cut. Once
// the faults end, every entry A holds is on B, in B's slot of the same
// backend and in A's state, with nothing else there; what could not be
// delivered is accounted by the drop counters (no silent loss); and the
// lag of the stream after the faults is back under a bound.
func TestStreamFaultsUnderLoad(t *testing.T) {
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
	t.Cleanup(func() { ea.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// A's backends: the two every member has, in A's own slots.
	must(ea.SetLBConfig(dataplane.LBConfig{HZ: kernelClock(t).HZ(), SYN: 30 * time.Second, Established: time.Hour, FIN: 30 * time.Second, UDP: time.Minute, NAT: true}))
	must(ea.SetBackend(2, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: natAddr, Port: 8080, Gen: 1, Owner: ownerNAT}))
	must(ea.SetBackend(5, dataplane.LBBackend{Mode: dataplane.ModeEncap, Addr: hostAddr, Guest: netip.MustParseAddr("198.19.11.1"), VSID: 100, Gen: 4, Owner: ownerEncap}))
	table := make([]uint32, 307)
	for i := range table {
		table[i] = []uint32{2, 5}[i%2]
	}
	must(ea.SetTable(0, table))
	must(ea.PutVIP(vip))
	must(ea.PutListener(dataplane.Listener{VIP: vip, Proto: dataplane.ProtoTCP, Port: 80}, dataplane.ListenerValue{Table: 0}))
	rd, err := ea.OpenConnEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })

	c := newCluster(t)
	a := &member{name: "a", edge: ea, ev: newChanEvents(), slots: map[uint64]uint32{ownerNAT: 2, ownerEncap: 5}, gens: map[uint64]uint16{ownerNAT: 1, ownerEncap: 4}}
	c.mu.Lock()
	c.members["a"] = a
	c.mu.Unlock()
	b := c.add("b", 40, 9)
	c.start(b, c.secret)
	bAddr, _ := c.addrs.Load("b")
	proxy := newCutProxy(t, bAddr.(netip.AddrPort).String())
	// A's events are its program's ring; it reaches B through the proxy.
	c.tweak = func(cfg *Config) {
		cfg.Events, cfg.Table, cfg.SetEvents = rd, ea, ea.SetConnSync
		// A queue that holds the partition's batches (about 1,000 a
		// second here): nothing needs to be dropped, so nothing may be
		// missing. (A full queue's drops are TestQueueOverflow's.)
		cfg.QueueBatches = 8192
		cfg.LagHorizon = 2 * time.Second
		cfg.Peers = func() ([]Peer, bool) { return []Peer{{Name: "b", Addr: proxy.addr()}}, true }
	}
	c.start(a, c.secret)
	c.tweak = nil
	waitFor(t, "both ready, a connected", 5*time.Second, func() bool {
		p := a.s.Status().Peers
		return a.s.Ready() && b.s.Ready() && len(p) == 1 && p[0].Connected
	})

	// The load: a connection every 2 ms (500/s), each a SYN then an ACK
	// through A's program.
	var made atomic.Int32
	var stop atomic.Bool
	genDone := make(chan error, 1)
	clientOf := func(i int) (netip.Addr, uint16) {
		return netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i/30000)}), uint16(20000 + i%30000)
	}
	go func() {
		next := time.Now()
		for i := 0; !stop.Load(); i++ {
			cl, port := clientOf(i)
			for _, f := range [][]byte{tcpFrame(t, cl, vip, port, 80, true, false), tcpFrame(t, cl, vip, port, 80, false, true)} {
				if _, err := env.Run(ea.Program(), dptest.ExtDev, f); err != nil {
					genDone <- err
					return
				}
			}
			made.Add(1)
			next = next.Add(2 * time.Millisecond)
			time.Sleep(time.Until(next))
		}
		genDone <- nil
	}()
	sleep := func(d time.Duration) { time.Sleep(d) }
	sleep(500 * time.Millisecond)
	for range 3 {
		proxy.cut()
		sleep(400 * time.Millisecond)
	}
	// A partition of an established session, longer than the I/O timeout
	// (2 s): both ends give up on the session, what A wrote into it is
	// lost with it; A redials into the stalled proxy meanwhile.
	waitFor(t, "a's session back after the cuts", 5*time.Second, func() bool {
		p := a.s.Status().Peers
		return len(p) == 1 && p[0].Connected
	})
	sleep(100 * time.Millisecond)
	proxy.startStall()
	sleep(3 * time.Second)
	proxy.endStall()
	faultEnd := time.Now()
	sleep(3 * time.Second)
	stop.Store(true)
	if err := <-genDone; err != nil {
		t.Fatal(err)
	}
	n := int(made.Load())
	t.Logf("%d connections made on a; %d cuts", n, proxy.cuts.Load())

	// Everything A holds reaches B: its slots, its state.
	type want struct {
		owner uint64
		state uint8
	}
	onA := map[dataplane.ConnKey]want{}
	ownerOfA := map[uint16]uint64{2: ownerNAT, 5: ownerEncap}
	ownerOfB := map[uint16]uint64{40: ownerNAT, 43: ownerEncap}
	genOfB := map[uint16]uint16{40: 9, 43: 10}
	must(ea.DumpConns(4096, func(es []dataplane.ConnEntry) error {
		for _, e := range es {
			onA[e.Key] = want{ownerOfA[e.Backend], e.State}
		}
		return nil
	}))
	if len(onA) != n {
		t.Fatalf("a holds %d entries, %d connections were made", len(onA), n)
	}
	drops := func() uint64 {
		as, bs := a.s.Status().Metrics, b.s.Status().Metrics
		lost, _ := ea.ConnEventsLost()
		return as.QueueDrops + as.Unmapped + lost + bs.Unmapped + bs.ApplyErrors + bs.MalformedEntries
	}
	var missing, wrong int
	check := func() bool {
		missing, wrong = 0, 0
		for k, w := range onA {
			e, err := b.edge.LookupConn(k)
			switch {
			case err != nil:
				missing++
			case ownerOfB[e.Backend] != w.owner || genOfB[e.Backend] != e.Gen || e.State != w.state:
				wrong++
			}
		}
		return missing == 0 && wrong == 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for !check() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	as, bs := a.s.Status(), b.s.Status()
	t.Logf("a: %+v lag %+v; b: %+v; recovered in %v", as.Metrics, as.Lag, bs.Metrics, time.Since(faultEnd))
	if wrong != 0 {
		t.Fatalf("%d entries on b differ from a's (backend or state)", wrong)
	}
	if d := drops(); uint64(missing) > d {
		t.Fatalf("%d of %d entries never reached b, the drop counters account for %d: silent loss", missing, n, d)
	}
	if missing != 0 {
		t.Fatalf("%d entries missing on b (%d drops counted, but the queue had room for all)", missing, drops())
	}
	if got, bad := countConns(t, b); bad != 0 || got != len(onA)-missing {
		t.Fatalf("b holds %d entries (%d not in its slots), want %d", got, bad, len(onA)-missing)
	}

	// The stream after the faults: new entries arrive within a bound, and
	// the lag A reports (event to B's acknowledgement, over the last 2 s
	// here) is back under it: the backlog's lags have left the window.
	for i := range 200 {
		cl, port := clientOf(n + i)
		if _, err := env.Run(ea.Program(), dptest.ExtDev, tcpFrame(t, cl, vip, port, 80, true, false)); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for k := dataplane.MakeConnKey(cl, vip, port, 80, dataplane.ProtoTCP); ; time.Sleep(time.Millisecond) {
			if _, err := b.edge.LookupConn(k); err == nil {
				break
			}
			if time.Since(t0) > time.Second {
				t.Fatalf("a new entry %d after the faults not on b within 1 s", i)
			}
		}
	}
	// More traffic until the window holds only the present (at most the
	// horizon and a few redials).
	for i := 200; ; i++ {
		lag := a.s.Status().Lag
		if lag.P50 < 50*time.Millisecond && lag.P99 < 200*time.Millisecond {
			t.Logf("lag %+v, %v after the faults", lag, time.Since(faultEnd))
			break
		}
		if time.Since(faultEnd) > 15*time.Second {
			t.Fatalf("lag %+v 15 s after the faults: not back under 50 ms (median) and 200 ms (p99)", lag)
		}
		cl, port := clientOf(n + i)
		if _, err := env.Run(ea.Program(), dptest.ExtDev, tcpFrame(t, cl, vip, port, 80, true, false)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCatchUpAfterDrops: a peer slower than the events (its session
// stalled for less than the I/O timeout) makes its queue drop batches
// while the session lives; once the peer keeps up again, every entry
// used since the first drop is sent again on the same session, so none
// is missing.
func TestCatchUpAfterDrops(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", 0, 1)
	b := c.add("b", 10, 7)
	c.start(b, c.secret)
	bAddr, _ := c.addrs.Load("b")
	proxy := newCutProxy(t, bAddr.(netip.AddrPort).String())
	c.tweak = func(cfg *Config) {
		cfg.QueueBatches, cfg.BatchMax = 4, 10
		cfg.Peers = func() ([]Peer, bool) { return []Peer{{Name: "b", Addr: proxy.addr()}}, true }
	}
	c.start(a, c.secret)
	c.tweak = nil
	waitFor(t, "a connected to b", 5*time.Second, func() bool {
		p := a.s.Status().Peers
		return a.s.Ready() && len(p) == 1 && p[0].Connected
	})
	proxy.startStall()
	// 2,000 connections on a: in its table, and their events.
	const n = 2000
	a.fill(t, 1000, n)
	var keys []dataplane.ConnKey
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.edge.DumpConns(4096, func(es []dataplane.ConnEntry) error {
		for _, e := range es {
			keys = append(keys, e.Key)
			a.ev.ch <- dataplane.ConnEvent{Key: e.Key, Backend: e.Backend, Gen: e.Gen, Last: e.Last, State: e.State, Kind: dataplane.ConnEventNew}
		}
		return nil
	}))
	waitFor(t, "the events read, some dropped", 3*time.Second, func() bool {
		m := a.s.Status().Metrics
		return m.Events == n && m.QueueDrops > 0
	})
	time.Sleep(500 * time.Millisecond) // under the I/O timeout (2 s)
	proxy.resume()
	waitFor(t, "every entry on b", 5*time.Second, func() bool {
		for _, k := range keys {
			if _, err := b.edge.LookupConn(k); err != nil {
				return false
			}
		}
		return true
	})
	m := a.s.Status().Metrics
	if m.CaughtUp == 0 || m.Sessions != 1 {
		t.Fatalf("a: %+v: want a catch-up on the one session", m)
	}
	if _, bad := countConns(t, b); bad != 0 {
		t.Fatalf("%d entries on b in slots not its own", bad)
	}
	t.Logf("%d dropped, %d caught up", m.QueueDrops, m.CaughtUp)
}

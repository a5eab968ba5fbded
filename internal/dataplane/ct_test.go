package dataplane

import (
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// Connection-table states (bpf/lib/consts.h CT_*).
const (
	ctSYN = 1
	ctEST = 2
	ctFIN = 3
	ctUDP = 4
)

var ctStateName = map[uint8]string{0: "none", ctSYN: "SYN", ctEST: "EST", ctFIN: "FIN", ctUDP: "UDP"}

// ctBed is the services bed with the connection table's timeouts known in
// jiffies, a UDP listener on vipNAT:53 (pool A), and helpers to read and
// age entries.
type ctBed struct {
	*lbBed
	t  *testing.T
	to map[uint8]uint32 // state -> timeout in jiffies
}

func newCTBed(t *testing.T) *ctBed {
	b := newLBBed(t)
	const hz = 250
	if err := b.edge.SetLBConfig(LBConfig{HZ: hz, SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 20 * time.Second,
		UDP: time.Minute, NAT: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.edge.PutListener(Listener{VIP: addr(vipNAT), Proto: ProtoUDP, Port: 53}, ListenerValue{Table: 0}); err != nil {
		t.Fatal(err)
	}
	return &ctBed{lbBed: b, t: t, to: map[uint8]uint32{ctSYN: 30 * hz, ctEST: 15 * 60 * hz, ctFIN: 20 * hz, ctUDP: 60 * hz}}
}

func ctKeyOf(f flow) edgeCtKey {
	return edgeCtKey{Src: ip4word(addr(f.src)), Dst: ip4word(addr(f.dst)), Sport: be16(f.sport), Dport: be16(f.dport), Proto: uint8(f.proto)}
}

// entry reads f's connection entry (ok false: none).
func (c *ctBed) entry(f flow) (edgeCtEntry, bool) {
	c.t.Helper()
	k := ctKeyOf(f)
	var v edgeCtEntry
	if err := c.edge.objs.LbConns.Lookup(&k, &v); err != nil {
		return v, false
	}
	return v, true
}

// age makes f's entry last seen `by` jiffies earlier than it was.
func (c *ctBed) age(f flow, by uint32) {
	c.t.Helper()
	v, ok := c.entry(f)
	if !ok {
		c.t.Fatalf("no entry to age for port %d", f.sport)
	}
	v.Last -= by
	k := ctKeyOf(f)
	if err := c.edge.objs.LbConns.Update(&k, &v, 0); err != nil {
		c.t.Fatal(err)
	}
}

// send runs f from the Internet and returns the backend it was DNATed to.
func (c *ctBed) send(f flow) string {
	c.t.Helper()
	res, err := c.env.Run(c.edge.Program(), dptest.ExtDev, f.frame(c.t, dptest.RtrMAC, dptest.ExtMAC))
	if err != nil {
		c.t.Fatal(err)
	}
	if res.Action != xdpRedirect {
		c.t.Fatalf("port %d: action %s", f.sport, actionNames[res.Action])
	}
	ip, _ := decode(res.Out).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	return ip.DstIP.String()
}

func (c *ctBed) wantState(f flow, state uint8) {
	c.t.Helper()
	v, ok := c.entry(f)
	got := uint8(0)
	if ok {
		got = v.State
	}
	if got != state {
		c.t.Fatalf("port %d: state %s, want %s", f.sport, ctStateName[got], ctStateName[state])
	}
}

// TestConnStatesAndTimeouts walks every TCP state transition of the
// connection table and every state's timeout, through the program. Each
// case starts a flow on pool A, then repoints the pool to C: a packet that
// still reaches A was decided by its live entry, one that reaches C by the
// table (no entry, or a stale one).
func TestConnStatesAndTimeouts(t *testing.T) {
	type step struct {
		pkt   string // syn, ack, fin, rst, udp
		age   int    // before the packet: age the entry by the state's timeout plus this (jiffies; < 0 keeps it live)
		want  string // backend
		state uint8  // the entry's state after the packet (0: none)
	}
	margin := -1000 // well within a timeout whatever the kernel's HZ during the run
	cases := []struct {
		name  string
		steps []step
	}{
		{"handshake, data, close", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "fin", want: beA, state: ctFIN},
			{pkt: "ack", want: beA, state: ctFIN}, // the last ACK stays in FIN
		}},
		{"RST of an established connection", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "rst", want: beA, state: ctFIN}, // reaches its backend, ends the entry's life
		}},
		{"RST in SYN state", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "rst", want: beA, state: ctFIN},
		}},
		{"FIN in SYN state", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "fin", want: beA, state: ctFIN},
		}},
		{"RST with no entry creates none", []step{
			{pkt: "rst", want: beA, state: 0},
			{pkt: "rst", want: beC, state: 0},
		}},
		{"mid-flow packet with no entry starts in SYN state", []step{
			{pkt: "ack", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
		}},
		{"FIN with no entry", []step{
			{pkt: "fin", want: beA, state: ctFIN},
			{pkt: "ack", want: beA, state: ctFIN},
		}},
		{"SYN retransmitted in SYN state is placed afresh", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "syn", want: beC, state: ctSYN},
		}},
		{"SYN on an established 5-tuple is a new connection", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "syn", want: beC, state: ctSYN},
		}},
		{"SYN after FIN (port reuse) is a new connection", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "fin", want: beA, state: ctFIN},
			{pkt: "syn", want: beC, state: ctSYN},
		}},
		{"SYN state: live within its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", age: margin, want: beA, state: ctEST},
		}},
		{"SYN state: stale past its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", age: 1, want: beC, state: ctSYN},
		}},
		{"EST: live within its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "ack", age: margin, want: beA, state: ctEST},
		}},
		{"EST: stale past its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "ack", age: 1, want: beC, state: ctSYN},
		}},
		{"FIN: live within its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "fin", want: beA, state: ctFIN},
			{pkt: "ack", age: margin, want: beA, state: ctFIN},
		}},
		{"FIN: stale past its timeout", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "fin", want: beA, state: ctFIN},
			{pkt: "ack", age: 1, want: beC, state: ctSYN},
		}},
		{"SYN after an expired entry", []step{
			{pkt: "syn", want: beA, state: ctSYN},
			{pkt: "ack", want: beA, state: ctEST},
			{pkt: "syn", age: 1, want: beC, state: ctSYN},
			{pkt: "ack", want: beC, state: ctEST},
		}},
		{"UDP: live within its timeout", []step{
			{pkt: "udp", want: beA, state: ctUDP},
			{pkt: "udp", age: margin, want: beA, state: ctUDP},
		}},
		{"UDP: stale past its timeout", []step{
			{pkt: "udp", want: beA, state: ctUDP},
			{pkt: "udp", age: 1, want: beC, state: ctUDP},
		}},
	}
	c := newCTBed(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			c.table(t, 0, "a")
			var sport uint16 = uint16(46000 + i)
			for j, s := range tc.steps {
				var f flow
				if s.pkt == "udp" {
					f = flow{src: client, dst: vipNAT, proto: layers.IPProtocolUDP, dport: 53, ttl: 64}
				} else {
					f = tcpTo(vipNAT, 80, s.pkt)
					f.fin = s.pkt == "fin"
				}
				f.sport = sport
				if s.age != 0 {
					v, ok := c.entry(f)
					if !ok {
						t.Fatalf("step %d: no entry to age", j)
					}
					c.age(f, uint32(int(c.to[v.State])+s.age))
				}
				if got := c.send(f); got != s.want {
					t.Fatalf("step %d (%s): went to %s, want %s", j, s.pkt, got, s.want)
				}
				c.wantState(f, s.state)
				if j == 0 {
					c.table(t, 0, "c") // from now on the table says C
				}
			}
		})
	}
	info, err := c.edge.LBInfoCounters()
	if err != nil {
		t.Fatal(err)
	}
	if info["ct_stale"] < 5 || info["syn_repick"] < 3 {
		t.Fatalf("info counters %v: want at least 5 stale entries and 3 SYN re-picks", info)
	}
}

// TestConnReplyEndsEntry: an encap-mode connection's entry goes to FIN on
// a FIN or RST of its genuine reply (decapsulated from the backend's host),
// and only then.
func TestConnReplyEndsEntry(t *testing.T) {
	c := newCTBed(t)
	syn := tcpTo(vipEncap, 443, "syn")
	ack := tcpTo(vipEncap, 443, "ack")
	for _, f := range []flow{syn, ack} {
		if res, err := c.env.Run(c.edge.Program(), dptest.ExtDev, f.frame(t, dptest.RtrMAC, dptest.ExtMAC)); err != nil || res.Action != xdpRedirect {
			t.Fatalf("%v %v", res.Action, err)
		}
	}
	c.wantState(ack, ctEST)
	reply := func(fin bool, host string) uint32 {
		r := flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40000, ttl: 64, fin: fin}
		inner := ethFrame(t, "02:cc:00:00:00:02", gwMAC, r.ip(t))
		res, err := c.env.Run(c.edge.Program(), dptest.UlDev, nvgre(t, dptest.FabMAC, dptest.UlMAC, host, dptest.UlAddr, vsid<<8, 0, inner))
		if err != nil {
			t.Fatal(err)
		}
		return res.Action
	}
	if act := reply(false, hostAddr); act != xdpRedirect {
		t.Fatalf("reply: %s", actionNames[act])
	}
	c.wantState(ack, ctEST)
	if act := reply(true, otherHost); act != xdpDrop {
		t.Fatalf("forged FIN from another host: %s", actionNames[act])
	}
	c.wantState(ack, ctEST) // a forged reply moves nothing
	if act := reply(true, hostAddr); act != xdpRedirect {
		t.Fatalf("FIN reply: %s", actionNames[act])
	}
	c.wantState(ack, ctFIN)
}

package bench

import (
	"fmt"
	"github.com/cilium/ebpf"
	"net/netip"
	"strconv"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/maglev"
)

// LBOptions tune the load-balancer suite.
type LBOptions struct {
	Repeat   int
	Rounds   int
	BigTable uint32 // entries of the large connection table (0: skip)
	// BaselineObjects and Only: as DataplaneOptions'.
	BaselineObjects string
	Only            string
	Soak            time.Duration
	JITLines        string
	Out             func(format string, a ...any)
}

const (
	lbVIP     = "198.51.100.20"
	lbVIPEnc  = "198.51.100.21"
	lbBackend = "198.19.100.1"
	// The IPv6 VIP (encap, tcp:443 -> the encap VIP's guest; this build
	// only: the baseline objects may have no IPv6 VIP maps).
	lbVIP6 = "2001:db8:e1::21"
	// The IPv6 nat VIP (tcp:80 -> lbBackend6:8080; this build only) and
	// its backend, routed through the underlay router.
	lbVIP6N     = "2001:db8:e1::20"
	lbBackend6  = "2001:db8:be::1"
	lbBackNet6  = "2001:db8:be::/48"
	lbNAT6Table = 2
)

// LB measures Maglev's properties, the load balancer's per-packet costs
// next to the XDP_TX floor, and the connection table's memory and scale.
func LB(o LBOptions) ([]Result, error) {
	if o.Repeat == 0 {
		o.Repeat = 2_000_000
	}
	if o.Rounds == 0 {
		o.Rounds = 9
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	out, err := maglevResults()
	if err != nil {
		return nil, err
	}
	say("maglev done")
	rs, err := lbPackets(o)
	if err != nil {
		return nil, err
	}
	out = append(out, rs...)
	say("per-packet costs done")
	if o.BigTable > 0 {
		rs, err := bigConnTable(o.BigTable, say)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

func maglevResults() ([]Result, error) {
	var out []Result
	for _, c := range []struct {
		n int
		m uint64
	}{{10, 65537}, {100, 65537}, {1000, 655373}} {
		r, err := maglev.Measure(c.n, c.m, 0x61a9a7e5)
		if err != nil {
			return nil, err
		}
		tag := fmt.Sprintf("N=%d M=%d", c.n, c.m)
		out = append(out,
			Result{Suite: "lb", Name: "maglev_imbalance " + tag, Value: r.Imbalance, Unit: "% (max/mean-1)", Target: "<= 1 %"},
			// The baseline for a failure is what a rebuild without the
			// failed backend moves: Table.Fail moves nothing of the others.
			Result{Suite: "lb", Name: "maglev_fail_collateral " + tag, Value: r.FailMoved, Unit: "% of slots",
				Baseline: "rebuild_collateral", BaselineValue: r.RemoveCollateral, Ratio: ratio(r.FailMoved, r.RemoveCollateral), Target: "0"},
			Result{Suite: "lb", Name: "maglev_add_collateral " + tag, Value: r.AddCollateral, Unit: "% of slots", Target: "<= 1 %"},
			Result{Suite: "lb", Name: "maglev_remove_collateral " + tag, Value: r.RemoveCollateral, Unit: "% of slots", Target: "<= 1 %"},
			Result{Suite: "lb", Name: "maglev_build " + tag, Value: float64(r.BuildTime.Microseconds()) / 1000, Unit: "ms"},
		)
	}
	return out, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// The load-balancer suite's connection table for the per-packet paths:
// lbConnMax entries of capacity holding lbConnFill established flows
// (FillConns: from user space, BatchUpdate) before any path is timed.
const (
	lbConnMax  = 1 << 21
	lbConnFill = 1_000_000
	// The clients of the new-flow cases: xdp_chain gives every run its own
	// (192.0.2.0/24, ports 1024-65535), none of them among the filled
	// flows (203.0.113.0/24).
	lbNewClient = "192.0.2.1"
	// Runs per new-flow timing: the table grows to lbConnFill + this,
	// well inside its capacity, so the LRU evicts nothing meanwhile.
	lbNewFlowRuns = 500_000
	// The IPv6 new-flow case's clients (the last byte and the port vary
	// as lbNewClient's), none among FillConns6's (2001:db8:fe::/64).
	lbNewClient6 = "2001:db8:c1::1"
)

// lbPackets times the load balancer's paths in repeat mode, with the same
// accounting as the dataplane suite.
func lbPackets(o LBOptions) ([]Result, error) {
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	// The IPv6 VIP's replies route to the Internet side's IPv6 default
	// gateway (dptest.Env.InternetIPv6).
	if err := env.InternetIPv6(); err != nil {
		return nil, err
	}
	// The IPv6 nat VIP's backend, behind the underlay's IPv6 router.
	if err := env.Node.Route(lbBackNet6, dptest.FabAddr6, dptest.UlDev); err != nil {
		return nil, err
	}
	now, err := b.Jiffies()
	if err != nil {
		return nil, err
	}
	hz, err := b.MeasureHZ()
	if err != nil {
		return nil, err
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	cur, err := lbSide(env, "", "", now, hz)
	if err != nil {
		return nil, err
	}
	defer cur.Close()
	sides := []*side{cur}
	if o.BaselineObjects != "" {
		ef, _, err := baselineFiles(o.BaselineObjects)
		if err != nil {
			return nil, err
		}
		base, err := lbSide(env, "before", ef, now, hz)
		if err != nil {
			return nil, err
		}
		defer base.Close()
		sides = append(sides, base)
	}
	say("connection tables filled: %d flows each (BatchUpdate), capacity %d", lbConnFill, lbConnMax)

	const size = 128
	ack := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIP, 40000, 80, size, "ack")
	newSyn := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, lbNewClient, lbVIP, 1024, 80, size, "syn")
	reply := tcpFrameFlags(dptest.FabMAC, dptest.UlMAC, lbBackend, benchClient, 8080, 40000, size, "ack")
	encAck := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIPEnc, 40000, 443, size, "ack")
	newSynEnc := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, lbNewClient, lbVIPEnc, 1024, 443, size, "syn")
	newSyn6 := tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, lbNewClient6, lbVIP6, 1024, 443, size, "syn")
	encAck6 := tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, lbVIP6, 40000, 443, size, "ack")
	natAck6 := tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, lbVIP6N, 40000, 80, size, "ack")
	newSynNAT6 := tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, lbNewClient6, lbVIP6N, 1024, 80, size, "syn")
	reply6 := tcpFrameFlags6(dptest.FabMAC, dptest.UlMAC, lbBackend6, benchClient6, 8080, 40000, size, "ack")
	// The backend guest's answer, NVGRE from its host (the encap VIP's
	// backend: benchHost, benchVSID), to go to the Internet.
	encReply := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchHost, dptest.UlAddr, benchVSID<<8|7,
		tcpFrameFlags("02:cc:00:00:00:02", "02:00:00:00:00:fe", lbVIPEnc, benchClient, 443, 40000, size, "ack"))
	encReply6 := nvgreFrame(dptest.FabMAC, dptest.UlMAC, benchHost, dptest.UlAddr, benchVSID<<8|7,
		tcpFrameFlags6("02:cc:00:00:00:02", "02:00:00:00:00:fe", lbVIP6, benchClient6, 443, 40000, size, "ack"))

	// After a new-flow timing: every run must have inserted its flow
	// (or, capped, none may have); the entries go again, so every timing
	// starts from the same lbConnFill-entry table.
	// capSince: when the cap was last switched on. The cap refills one
	// token a second, so a timing of several seconds may insert one entry
	// per second it ran, besides the burst of one.
	var capSince time.Time
	cleanupFor := func(client, vip string, vport uint16, wantInserted bool) func(s *side, runs uint64) error {
		return func(s *side, runs uint64) error {
			if runs >= dataplane.VaryFlows {
				return fmt.Errorf("%d runs: more than the %d distinct flows the chain gives", runs, dataplane.VaryFlows)
			}
			del := s.edge.DeleteVaryConns
			if netip.MustParseAddr(vip).Is6() {
				del = s.edge.DeleteVaryConns6
			}
			n, err := del(netip.MustParseAddr(client), netip.MustParseAddr(vip), vport, uint32(runs))
			if err != nil {
				return err
			}
			// The LRU may have evicted a few of them already.
			if wantInserted && uint64(n) < runs*99/100 {
				return fmt.Errorf("%d runs inserted only %d connection entries: not the new-flow path", runs, n)
			}
			if allowed := 2 + int(time.Since(capSince)/time.Second); !wantInserted && n > allowed {
				return fmt.Errorf("%d runs over the insert cap of 1/s inserted %d entries in %v (at most %d)", runs, n, time.Since(capSince).Round(time.Millisecond), allowed)
			}
			return nil
		}
	}
	cleanup := func(wantInserted bool) func(s *side, runs uint64) error {
		return cleanupFor(lbNewClient, lbVIP, 80, wantInserted)
	}
	capOn := func(on bool) func(s *side) error {
		return func(s *side) error {
			if on {
				capSince = time.Now()
			}
			return s.edge.SetLBConfig(lbConfig(hz, on))
		}
	}
	cases := []nsCase{
		{name: "lb_ct_hit_nat (established flow, DNAT)", prog: "edge", dev: dptest.ExtDev, frame: ack, action: actRedirect, chain: true, target: "<= 6x"},
		{name: "lb_new_flow_nat (miss in a 1M-entry table, Maglev, insert)", prog: "edge", dev: dptest.ExtDev, frame: newSyn, action: actRedirect, chain: true, vary: true, repeat: lbNewFlowRuns,
			before: capOn(false), after: cleanup(true), target: "<= 12x",
			note: fmt.Sprintf("a SYN of a distinct client every run (xdp_chain), none in the table, which holds %d flows filled from user space (BatchUpdate), capacity %d; %d runs per timing, whose entries are deleted after it", lbConnFill, lbConnMax, lbNewFlowRuns)},
		{name: "lb_new_flow_insert_capped (over the insert rate: table alone, no entry)", prog: "edge", dev: dptest.ExtDev, frame: newSyn, action: actRedirect, chain: true, vary: true, repeat: lbNewFlowRuns,
			before: capOn(true), after: func(s *side, runs uint64) error {
				if err := cleanup(false)(s, runs); err != nil {
					return err
				}
				return capOn(false)(s)
			}, note: "as lb_new_flow_nat with an insert rate of 1/s: every run past the first is forwarded by the Maglev table without an entry"},
		{name: "lb_nat_reply (SNAT back to the VIP)", prog: "edge", dev: dptest.UlDev, frame: reply, action: actRedirect, chain: true},
		{name: "lb_ct_hit_nat6 (IPv6 VIP, established flow in lb_conns6, DNAT66)", prog: "edge", dev: dptest.ExtDev, frame: natAck6,
			action: actRedirect, chain: true, cur: true, twin: "lb_ct_hit_nat (established flow, DNAT)",
			note: "this version only: the baseline may have no IPv6 nat VIP"},
		{name: "lb_new_flow_nat6 (IPv6 VIP: miss in a 1M-entry lb_conns6, Maglev, insert, DNAT66)", prog: "edge", dev: dptest.ExtDev,
			frame: newSynNAT6, action: actRedirect, chain: true, vary: true, repeat: lbNewFlowRuns, before: capOn(false),
			after: cleanupFor(lbNewClient6, lbVIP6N, 80, true), cur: true,
			twin: "lb_new_flow_nat (miss in a 1M-entry table, Maglev, insert)",
			note: "as lb_new_flow_encap6, to the IPv6 nat VIP (tcp:80, one backend): its reverse entry in lb_nat_conns6 too; this version only"},
		{name: "lb_nat_reply6 (SNAT66 back to the IPv6 VIP)", prog: "edge", dev: dptest.UlDev, frame: reply6, action: actRedirect, chain: true,
			cur: true, twin: "lb_nat_reply (SNAT back to the VIP)", note: "this version only: the baseline may have no IPv6 nat VIP"},
		{name: "lb_ct_hit_encap (established flow, NVGRE)", prog: "edge", dev: dptest.ExtDev, frame: encAck, action: actRedirect, chain: true, moves: true},
		{name: "lb_ct_hit_encap6 (IPv6 VIP, established flow in lb_conns6, NVGRE over the IPv4 underlay)", prog: "edge", dev: dptest.ExtDev, frame: encAck6,
			action: actRedirect, chain: true, moves: true, cur: true, twin: "lb_ct_hit_encap (established flow, NVGRE)",
			note: "this version only: the baseline may have no IPv6 VIP"},
		{name: "lb_new_flow_encap (encap VIP: miss in a 1M-entry table, Maglev, insert, NVGRE)", prog: "edge", dev: dptest.ExtDev, frame: newSynEnc, action: actRedirect,
			chain: true, moves: true, vary: true, repeat: lbNewFlowRuns, before: capOn(false), after: cleanupFor(lbNewClient, lbVIPEnc, 443, true),
			note: "as lb_new_flow_nat, to the encap VIP (tcp:443, one guest): the IPv6 new-flow row's twin"},
		{name: "lb_new_flow_encap6 (IPv6 VIP: miss in a 1M-entry lb_conns6, Maglev, insert, NVGRE)", prog: "edge", dev: dptest.ExtDev, frame: newSyn6, action: actRedirect,
			chain: true, moves: true, vary: true, repeat: lbNewFlowRuns, before: capOn(false), after: cleanupFor(lbNewClient6, lbVIP6, 443, true), cur: true,
			twin: "lb_new_flow_encap (encap VIP: miss in a 1M-entry table, Maglev, insert, NVGRE)",
			note: fmt.Sprintf("a SYN of a distinct IPv6 client every run (xdp_chain), none in lb_conns6, which holds %d flows filled from user space (FillConns6), capacity %d; %d runs per timing, whose entries are deleted after it; this version only", lbConnFill, lbConnMax, lbNewFlowRuns)},
		{name: "lb_encap_reply (encap VIP's backend to the Internet, from its host)", prog: "edge", dev: dptest.UlDev, frame: encReply, action: actRedirect, chain: true, moves: true},
		{name: "lb_encap_reply6 (IPv6 VIP's backend to the Internet, checked against lb_conns6)", prog: "edge", dev: dptest.UlDev, frame: encReply6,
			action: actRedirect, chain: true, moves: true, cur: true, twin: "lb_encap_reply (encap VIP's backend to the Internet, from its host)",
			note: "this version only: the baseline may have no IPv6 VIP"},
	}
	n := newNSBed(env, b, o.Repeat)
	n.only, n.soak, n.lines = o.Only, o.Soak, o.JITLines
	return n.run("lb", o.Rounds, sides, cases)
}

// lbConfig is the suite's load-balancer configuration, with an insert cap
// of 1 per second and a burst of 1 (a timing inserts one entry, and one
// more per second it runs) or none. hz is the kernel's, measured
// (dataplane.Bench.MeasureHZ): the timeouts and the cap's refill are in
// jiffies.
func lbConfig(hz uint32, insertCap bool) dataplane.LBConfig {
	c := dataplane.LBConfig{HZ: hz, SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second, UDP: time.Minute, NAT: true}
	if insertCap {
		c.InsertRate, c.InsertBurst = 1, 1
	}
	return c
}

// lbSide loads an edge (this build's, or an object file's) with a nat VIP
// of 100 backends and an encap VIP, fills its connection table with
// lbConnFill flows and establishes the timed flows through the program.
// now and hz are the kernel's jiffies and HZ.
func lbSide(env *dptest.Env, name, edgeFile string, now uint64, hz uint32) (s *side, err error) {
	s = &side{name: name, progs: map[string]*ebpf.Program{}}
	built := s // what to close on an error (s is nil by then)
	defer func() {
		if err != nil {
			built.Close()
		}
	}()
	// lb_conns6 as large as lb_conns (by default it holds a quarter):
	// the IPv6 new-flow row misses in a table of 1M flows as the IPv4
	// one does.
	opts := dataplane.LoadOptions{ConnMax: lbConnMax, ConnMax6: lbConnMax}
	var e *dataplane.Edge
	if edgeFile == "" {
		if e, err = dataplane.LoadEdge(opts); err != nil {
			return nil, err
		}
	} else {
		var missing dataplane.Missing
		if e, missing, err = dataplane.LoadEdgeObject(edgeFile, opts); err != nil {
			return nil, err
		}
		defer guardMissing(missing, &err)
	}
	s.close = append(s.close, e.Close)
	s.edge = e
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.ExtAddr),
		HashSeed: 1, GatewayMAC: dptest.MustMAC("02:00:00:00:00:fe")}); err != nil {
		return nil, err
	}
	if err := setupLB(e, 100, hz); err != nil {
		return nil, err
	}
	if err := e.FillConns(lbConnFill, netip.MustParseAddr(lbVIP), 80, 100, now); err != nil {
		return nil, err
	}
	// The established flows, inserted by the program (after the fill,
	// which could otherwise overwrite them).
	syns := [][]byte{tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIP, 40000, 80, 128, "syn"),
		tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIPEnc, 40000, 443, 128, "syn")}
	if edgeFile == "" {
		if err := setupLB6(e); err != nil {
			return nil, err
		}
		syns = append(syns, tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, lbVIP6, 40000, 443, 128, "syn"),
			tcpFrameFlags6(dptest.RtrMAC, dptest.ExtMAC, benchClient6, lbVIP6N, 40000, 80, 128, "syn"))
		// The IPv6 table as full as the IPv4 one, so the new-flow row
		// misses in a table of the same size.
		if err := e.FillConns6(lbConnFill, netip.MustParseAddr(lbVIP6), 443, 100, now); err != nil {
			return nil, err
		}
		n, err := e.ConnCount6()
		if err != nil {
			return nil, err
		}
		if n < lbConnFill {
			return nil, fmt.Errorf("IPv6 connection table holds %d entries after the fill, want %d", n, lbConnFill)
		}
	}
	for _, f := range syns {
		r, err := env.Run(e.Program(), dptest.ExtDev, f)
		if err != nil {
			return nil, err
		}
		if r.Action != actRedirect {
			return nil, fmt.Errorf("the timed flows' SYN: action %d, want %d (redirect)", r.Action, actRedirect)
		}
	}
	n, err := e.ConnCount()
	if err != nil {
		return nil, err
	}
	if n < lbConnFill {
		return nil, fmt.Errorf("connection table holds %d entries after the fill, want at least %d", n, lbConnFill)
	}
	s.progs["edge"] = e.Program()
	s.maps = map[string]map[string]*ebpf.Map{"edge": e.Maps()}
	if s.specs, err = progSpecs(edgeFile, ""); err != nil {
		return nil, err
	}
	return s, nil
}

// setupLB programs one nat VIP (tcp:80 -> n backends on port 8080) and one
// encap VIP (tcp:443 -> one guest), with the kernel's hz.
func setupLB(e *dataplane.Edge, n int, hz uint32) error {
	if err := e.SetLBConfig(lbConfig(hz, false)); err != nil {
		return err
	}
	var mb []maglev.Backend
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{198, 19, 100, byte(i + 1)})
		if err := e.SetBackend(uint32(i), dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: a, Port: 8080, Gen: 1}); err != nil {
			return err
		}
		// The reverse entry the reply path measures (nat is stateful: the
		// data plane writes one per connection).
		if err := e.PutNATConn(dataplane.NATConn{Backend: netip.AddrPortFrom(a, 8080), Client: netip.MustParseAddrPort(benchClient + ":40000"),
			VIP: netip.MustParseAddrPort(lbVIP + ":80"), Proto: dataplane.ProtoTCP}); err != nil {
			return err
		}
		mb = append(mb, maglev.Backend{Key: strconv.Itoa(i), Weight: 1})
	}
	tbl, err := maglev.Build(mb, 65537, 1)
	if err != nil {
		return err
	}
	entries := make([]uint32, len(tbl.Entry))
	for i, x := range tbl.Entry {
		idx, _ := strconv.Atoi(tbl.Backends[x].Key)
		entries[i] = uint32(idx)
	}
	if err := e.SetTable(0, entries); err != nil {
		return err
	}
	g := uint32(n)
	if err := e.SetBackend(g, dataplane.LBBackend{Mode: dataplane.ModeEncap, Addr: netip.MustParseAddr(benchHost), Guest: netip.MustParseAddr("198.19.21.1"), VSID: benchVSID, Gen: 1}); err != nil {
		return err
	}
	one := make([]uint32, 307)
	for i := range one {
		one[i] = g
	}
	if err := e.SetTable(1, one); err != nil {
		return err
	}
	for _, v := range []string{lbVIP, lbVIPEnc} {
		if err := e.PutVIP(netip.MustParseAddr(v)); err != nil {
			return err
		}
	}
	if err := e.PutListener(dataplane.Listener{VIP: netip.MustParseAddr(lbVIP), Proto: dataplane.ProtoTCP, Port: 80},
		dataplane.ListenerValue{Table: 0}); err != nil {
		return err
	}
	return e.PutListener(dataplane.Listener{VIP: netip.MustParseAddr(lbVIPEnc), Proto: dataplane.ProtoTCP, Port: 443},
		dataplane.ListenerValue{Table: 1})
}

// setupLB6 programs the IPv6 VIP lbVIP6 (tcp:443 -> setupLB's encap
// table 1, its one guest) and the IPv6 nat VIP lbVIP6N (tcp:80 -> table
// lbNAT6Table, one nat backend lbBackend6:8080 in the slot after
// setupLB's 100 nat backends and guest), after setupLB.
func setupLB6(e *dataplane.Edge) error {
	v := netip.MustParseAddr(lbVIP6)
	if err := e.PutListener(dataplane.Listener{VIP: v, Proto: dataplane.ProtoTCP, Port: 443}, dataplane.ListenerValue{Table: 1}); err != nil {
		return err
	}
	if err := e.PutVIP(v); err != nil {
		return err
	}
	const slot = 101
	be := netip.MustParseAddr(lbBackend6)
	if err := e.SetBackend(slot, dataplane.LBBackend{Mode: dataplane.ModeNAT, Addr: be, Port: 8080, Gen: 1}); err != nil {
		return err
	}
	one := make([]uint32, 307)
	for i := range one {
		one[i] = slot
	}
	if err := e.SetTable(lbNAT6Table, one); err != nil {
		return err
	}
	n := netip.MustParseAddr(lbVIP6N)
	if err := e.PutListener(dataplane.Listener{VIP: n, Proto: dataplane.ProtoTCP, Port: 80}, dataplane.ListenerValue{Table: lbNAT6Table}); err != nil {
		return err
	}
	// The reverse entry the reply row measures.
	if err := e.PutNATConn(dataplane.NATConn{Backend: netip.AddrPortFrom(be, 8080), Client: netip.MustParseAddrPort("[" + benchClient6 + "]:40000"),
		VIP: netip.AddrPortFrom(n, 80), Proto: dataplane.ProtoTCP}); err != nil {
		return err
	}
	return e.PutVIP(n)
}

// bigConnTable loads an edge with an n-entry connection table, fills it,
// measures its kernel memory per entry (the map's memlock) and shows it
// serving: a flow among the entries keeps its backend.
func bigConnTable(n uint32, say func(string, ...any)) ([]Result, error) {
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
	hz, err := b.MeasureHZ()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: n})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), HashSeed: 1}); err != nil {
		return nil, err
	}
	if err := setupLB(e, 100, hz); err != nil {
		return nil, err
	}
	loadS := time.Since(t0).Seconds()
	now, err := b.Jiffies()
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	// 99 %: the kernel's LRU starts evicting just before max_entries
	// (free nodes wait in per-CPU lists).
	fill := n / 100 * 99
	if err := e.FillConns(fill, netip.MustParseAddr(lbVIP), 80, 100, now); err != nil {
		return nil, err
	}
	fillS := time.Since(t1).Seconds()
	say("connection table of %d entries: created in %.1f s, %d flows written from user space (BatchUpdate) in %.1f s", n, loadS, fill, fillS)
	mem, err := e.ConnTableMemory()
	if err != nil {
		return nil, err
	}
	// Serving: flows the fill created go to the backends their entries
	// name (i % 100), not where the Maglev table would send them.
	hits := 0
	for _, k := range []uint32{0, fill / 3, fill / 2, fill - 1} {
		c, p := dataplane.FillFlow(k)
		frame := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, c.String(), lbVIP, p, 80, 128, "ack")
		res, err := env.Run(e.Program(), dptest.ExtDev, frame)
		if err != nil {
			return nil, err
		}
		want := netip.AddrFrom4([4]byte{198, 19, 100, byte(k%100 + 1)}).As4()
		if res.Action == 4 && len(res.Out) > 34 && [4]byte(res.Out[30:34]) == want {
			hits++
		}
	}
	if hits != 4 {
		return nil, fmt.Errorf("the %d-entry table served %d of 4 flows from their entries", n, hits)
	}
	return []Result{
		{Suite: "lb", Name: fmt.Sprintf("conn_table_%d_entries_memory", n), Value: float64(mem) / float64(n), Unit: "bytes/entry", Target: "<= 100 B"},
		{Suite: "lb", Name: fmt.Sprintf("conn_table_%d_entries_create", n), Value: loadS, Unit: "s"},
		{Suite: "lb", Name: fmt.Sprintf("conn_table_%d_entries_fill_batchupdate", n), Value: fillS, Unit: "s",
			Note: fmt.Sprintf("%d flows written from user space with BatchUpdate (FillConns), not through the program; 4 of them then served by the program from their entries", fill)},
	}, nil
}

package bench

import (
	"fmt"
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
	Out      func(format string, a ...any)
}

const (
	lbVIP     = "198.51.100.20"
	lbVIPEnc  = "198.51.100.21"
	lbBackend = "198.19.100.1"
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

// lbPackets times the load balancer's paths in repeat mode, with the same
// accounting as the dataplane suite.
func lbPackets(o LBOptions) ([]Result, error) {
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.ExtAddr),
		HashSeed: 1, GatewayMAC: dptest.MustMAC("02:00:00:00:00:fe")}); err != nil {
		return nil, err
	}
	if err := setupLB(e, 100); err != nil {
		return nil, err
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()

	const size = 128
	ack := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIP, 40000, 80, size, "ack")
	syn := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIP, 40001, 80, size, "syn")
	reply := tcpFrameFlags(dptest.FabMAC, dptest.UlMAC, lbBackend, benchClient, 8080, 40000, size, "ack")
	encAck := tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIPEnc, 40000, 443, size, "ack")
	// Insert the established flows' entries.
	for _, f := range [][]byte{tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIP, 40000, 80, size, "syn"),
		tcpFrameFlags(dptest.RtrMAC, dptest.ExtMAC, benchClient, lbVIPEnc, 40000, 443, size, "syn")} {
		if _, err := env.Run(e.Program(), dptest.ExtDev, f); err != nil {
			return nil, err
		}
	}
	const tx, pass, redirect = 3, 2, 4
	cases := []struct {
		name   string
		dev    string
		frame  []byte
		action uint32
		moves  bool
		target string
	}{
		{"lb_ct_hit_nat (established flow, DNAT)", dptest.ExtDev, ack, redirect, false, "<= 6x"},
		{"lb_syn_miss_maglev_nat (new flow, table lookup, entry insert)", dptest.ExtDev, syn, redirect, false, "<= 12x"},
		{"lb_nat_reply (SNAT back to the VIP)", dptest.UlDev, reply, redirect, false, ""},
		{"lb_ct_hit_encap (established flow, NVGRE)", dptest.ExtDev, encAck, redirect, true, ""},
	}
	var floor, passNs, adj2 []float64
	samples := make([][]float64, len(cases))
	restoreNs := make([][]float64, len(cases))
	for r := 0; r < o.Rounds; r++ {
		f, err := timeProg(env, b.Floor(), dptest.ExtDev, ack, o.Repeat, tx)
		if err != nil {
			return nil, err
		}
		floor = append(floor, f)
		p, err := timeProg(env, b.Pass(), dptest.ExtDev, ack, o.Repeat, pass)
		if err != nil {
			return nil, err
		}
		passNs = append(passNs, p)
		a, err := timeProg(env, b.Adjust2(), dptest.ExtDev, ack, o.Repeat, tx)
		if err != nil {
			return nil, err
		}
		adj2 = append(adj2, a)
		for i, c := range cases {
			if err := e.SetBenchFrame(c.frame); err != nil {
				return nil, err
			}
			if err := b.SetBenchFrame(c.frame); err != nil {
				return nil, err
			}
			rr, err := timeProg(env, b.Restore(), c.dev, c.frame, o.Repeat, tx)
			if err != nil {
				return nil, err
			}
			restoreNs[i] = append(restoreNs[i], rr)
			v, err := timeProg(env, e.BenchProgram(), c.dev, c.frame, o.Repeat, c.action)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			samples[i] = append(samples[i], v)
		}
	}
	fl := minOf(floor)
	adjust := max(minOf(adj2)-minOf(passNs), 0) / 2
	out := []Result{{Suite: "lb", Name: "xdp_floor (MAC swap, XDP_TX)", Value: fl, Unit: "ns/packet"}}
	for i, c := range cases {
		v := minOf(samples[i]) - minOf(restoreNs[i]) + minOf(passNs)
		if c.moves {
			v -= adjust
		}
		out = append(out, Result{Suite: "lb", Name: c.name, Value: v, Unit: "ns/packet", Baseline: "xdp_floor", BaselineValue: fl, Ratio: v / fl, Target: c.target})
	}
	return out, nil
}

// setupLB programs one nat VIP (tcp:80 -> n backends on port 8080) and one
// encap VIP (tcp:443 -> one guest).
func setupLB(e *dataplane.Edge, n int) error {
	if err := e.SetLBConfig(dataplane.LBConfig{HZ: 250, SYN: 30 * time.Second, Established: 15 * time.Minute, FIN: 30 * time.Second, UDP: time.Minute, NAT: true}); err != nil {
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

// bigConnTable loads an edge with an n-entry connection table, fills it,
// measures its kernel memory per entry (the map's memlock) and shows it
// serving: a flow among the entries keeps its backend.
func bigConnTable(n uint32, say func(string, ...any)) ([]Result, error) {
	env, err := dptest.New()
	if err != nil {
		return nil, err
	}
	defer env.Close()
	t0 := time.Now()
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{ConnMax: n})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), HashSeed: 1}); err != nil {
		return nil, err
	}
	if err := setupLB(e, 100); err != nil {
		return nil, err
	}
	loadS := time.Since(t0).Seconds()
	b, err := dataplane.LoadBench()
	if err != nil {
		return nil, err
	}
	defer b.Close()
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
	say("connection table of %d entries: created in %.1f s, %d filled in %.1f s", n, loadS, fill, fillS)
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
		{Suite: "lb", Name: fmt.Sprintf("conn_table_%d_entries_fill", n), Value: fillS, Unit: "s"},
	}, nil
}

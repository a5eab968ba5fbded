package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/dpfuzz"
	"github.com/azgate/azgate/internal/flowhash"
)

// scaleAgentBed is newAgentBed with the guest of FuzzAgentGuest: it has an
// EIP and serves a VIP (three services, one translating its port), and
// three VIP flows are recorded through the underlay program. host is what
// the oracle knows of it.
func scaleAgentBed(t *testing.T) (*dptest.Env, *Agent, *dpfuzz.Host) {
	env, a := newAgentBed(t)
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: g1, Service: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []AgentService{
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 80, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VSID: vsid},
	} {
		if err := a.PutService(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, fl := range scaleAgentVIPFlows {
		res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, scaleFromEdge(t, edgeA, vsid, fl))
		if err != nil || res.Action != xdpRedirect {
			t.Fatalf("VIP flow %+v: action %d %v", fl, res.Action, err)
		}
	}
	host := &dpfuzz.Host{
		Underlay: addr(dptest.UlAddr),
		Edges:    map[netip.Addr]bool{addr(edgeA): true, addr(edgeB): true},
		EIPs: map[netip.Addr]dpfuzz.Binding{
			addr(eip):      {Host: addr(dptest.GuestAddr), VSID: vsid},
			addr(eipNoNbr): {Host: addr("198.19.21.3"), VSID: vsid},
		},
		VIPs:      map[netip.Addr]uint32{addr(vipEncap): vsid},
		PortAddrs: map[netip.Addr]bool{addr(dptest.GuestAddr): true, addr("198.19.21.99"): true},
	}
	scaleAgent6(t, env, a, host)
	return env, a, host
}

var scaleAgentVIPFlows = []flow{
	{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, ttl: 63, syn: true},
	{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40002, dport: 443, ttl: 63, syn: true},
	{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 63},
}

// scaleFromEdge is NVGRE from an edge to this host carrying fl, with the
// inner destination MAC the edge gives a VIP's guest (02:01 + the guest).
func scaleFromEdge(tb testing.TB, edge string, vs uint32, fl flow) []byte {
	return nvgre(tb, dptest.FabMAC, dptest.UlMAC, edge, dptest.UlAddr, vs<<8, 0, ethFrame(tb, gwMAC, "02:01:c6:13:15:01", fl.ip(tb)))
}

func newScaleAgentFuzzer(name string, seed uint64, seeds []scaleSeed, devs []string) *scaleFuzzer {
	f := newScaleFuzzer(name, seed, seeds, devs)
	f.mut.Keys = []uint32{vsid << 8, vsid<<8 | 0x33, 6000 << 8}
	f.mut.TunnelSrcs = []netip.Addr{addr(edgeA), addr(edgeB), addr(hostAddr)}
	f.mut.Endpoint = addr(dptest.UlAddr)
	f.mut.Addrs6 = scaleAddrs6()
	return f
}

// TestScaleFuzzAgentGuest fuzzes xdp_agent_guest with what a guest sends
// (tenant input): the oracle (no forged source, nothing malformed leaves;
// what is tunnelled is well-formed NVGRE with the TTL kept), and the rules
// of FuzzAgentGuest's checker (the inner source is the guest's EIP, or the
// VIP only for a recorded flow; to an edge of its group; in its VSID).
func TestScaleFuzzAgentGuest(t *testing.T) {
	n, seed := scaleFuzzPlan(t, 0.2)
	env, a, host := scaleAgentBed(t)
	flows, err := a.Flows(0)
	if err != nil || len(flows) != len(scaleAgentVIPFlows) {
		t.Fatalf("flows %+v %v", flows, err)
	}
	g := func(fl flow) scaleSeed { return scaleSeed{dptest.GuestDev, fl.frame(t, dptest.VMMAC, dptest.GuestMAC)} }
	quote := flow{src: client, dst: dptest.GuestAddr, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 62}.ip(t)[:28]
	seeds := []scaleSeed{
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 8443, dport: 40002}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 33000, dport: 443, syn: true}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 33000, dport: 53, ttl: 1}),
		g(flow{src: "198.19.21.99", dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000}),
		g(flow{src: "198.19.21.99", dst: "198.18.5.5", proto: layers.IPProtocolUDP, sport: 1, dport: 2}),
		g(flow{src: dptest.GuestAddr, dst: "198.18.5.5", proto: layers.IPProtocolTCP, sport: 1, dport: 2, syn: true}),
		g(flow{src: "198.19.21.7", dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, fragOff: 10}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000, mf: true, payload: make([]byte, 64)}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000, df: true, payload: make([]byte, 1500-28)}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolICMPv4}),
		{dptest.GuestDev, ethFrame(t, dptest.VMMAC, dptest.GuestMAC, icmpError(t, dptest.GuestAddr, client, 3, 3, 0, quote))},
	}
	for _, b := range v6SeedFrames(dptest.VMMAC, dptest.GuestMAC, true) {
		seeds = append(seeds, scaleSeed{dptest.GuestDev, b})
	}
	seeds = append(seeds, scaleAgentGuest6Seeds()...)
	f := newScaleAgentFuzzer("xdp_agent_guest", seed, seeds, []string{dptest.GuestDev})
	region := &dpfuzz.Region{NVGREEndpoint: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr)}
	f.judge = func(dev string, in []byte) dpfuzz.Verdict { return host.JudgeAgent(dpfuzz.Guest, in) }
	f.check = func(it *runItem, v dpfuzz.Verdict) error {
		if it.act == xdpPass {
			return fmt.Errorf("handed to the kernel changed")
		}
		kind, err := region.CheckOutput(v, dpfuzz.HostHop, it.out)
		if err != nil {
			return err
		}
		if v.Out6 != nil {
			// An IPv6 EIP's: the oracle checked the edge set, VSID and
			// translation; the edge and FlowID are flow_hash6's.
			if err := checkAgentEdge6(v, it.out); err != nil {
				return err
			}
			f.results.outputs[kind+"6"]++
			return nil
		}
		if err := checkAgentGuestOut(it.in, it.act, it.out, flows); err != nil {
			return err
		}
		f.results.outputs[kind]++
		return nil
	}
	f.stats = a.Stats
	f.mustDrop = func(v dpfuzz.Verdict) bool { return !strings.HasPrefix(v.Forbid, "not IPv4") }
	// The EIP's tx counter (what its tenant is billed for) moves by the
	// packets tunnelled from the EIP, and by nothing else; so do the
	// IPv6 EIPs'.
	lastTx, lastTx6 := agentEIPTx(t, a), agentEIPTx6(t, a)
	f.batch = func(items []runItem, verdicts []dpfuzz.Verdict, _ map[string]uint64) error {
		var want uint64
		want6 := map[uint32]uint64{}
		for i := range items {
			it := &items[i]
			if it.act == xdpRedirect && len(it.out) >= 56+20 && netip.AddrFrom4([4]byte(it.out[56+12:56+16])) == addr(eip) {
				want++
			}
			if v := verdicts[i]; v.Out6 != nil && it.act == xdpRedirect {
				want6[agentIdx6Of(v.Out6.Src)]++
			}
		}
		now, now6 := agentEIPTx(t, a), agentEIPTx6(t, a)
		if now-lastTx != want {
			return fmt.Errorf("the EIP's tx counter moved by %d for %d packets tunnelled from it", now-lastTx, want)
		}
		for idx, n := range now6 {
			if n-lastTx6[idx] != want6[idx] {
				return fmt.Errorf("IPv6 EIP slot %d's tx counter moved by %d for %d packets tunnelled from it", idx, n-lastTx6[idx], want6[idx])
			}
		}
		lastTx, lastTx6 = now, now6
		return nil
	}
	f.runner = startBatchRunner(t, env, a.GuestProgram(), dptest.GuestDev)
	if err := f.run(t, n); err != nil {
		t.Fatal(err)
	}
	if f.results.outputs[dpfuzz.OutEncap] == 0 || f.results.outputs[dpfuzz.OutEncap+"6"] == 0 {
		t.Error("nothing tunnelled (of one family): the run checked nothing")
	}
}

// TestScaleFuzzAgentUnderlay fuzzes xdp_agent_underlay with what arrives
// from the tunnel: only NVGRE from an edge, in the VSID of the EIP or VIP
// it is for, well formed, is delivered; it goes to the guest's address (the
// EIP translated to the guest's private one, the VIP to the guest the
// edge chose), from the inner source, TTL kept.
func TestScaleFuzzAgentUnderlay(t *testing.T) {
	n, seed := scaleFuzzPlan(t, 0.2)
	env, a, host := scaleAgentBed(t)
	ul := func(edge string, vs uint32, fl flow) scaleSeed {
		return scaleSeed{dptest.UlDev, scaleFromEdge(t, edge, vs, fl)}
	}
	toEIP := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 22, ttl: 63, syn: true}
	seeds := []scaleSeed{
		ul(edgeA, vsid, toEIP),
		ul(edgeB, vsid, flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5000, dport: 53, ttl: 1}),
		ul(edgeA, vsid, flow{src: client, dst: eip, proto: layers.IPProtocolICMPv4, ttl: 60}),
		ul(edgeA, vsid, flow{src: client, dst: eip, proto: layers.IPProtocolUDP, fragOff: 20, payload: make([]byte, 40)}),
		ul(edgeA, vsid, flow{src: client, dst: eipNoNbr, proto: layers.IPProtocolTCP, sport: 1, dport: 2}),
		ul(edgeA, 6000, toEIP),
		ul(hostAddr, vsid, toEIP),
		ul(edgeA, vsid, flow{src: client, dst: "198.51.100.99", proto: layers.IPProtocolTCP, sport: 1, dport: 2}),
		{dptest.UlDev, toEIP.frame(t, dptest.FabMAC, dptest.UlMAC)},
	}
	for _, fl := range scaleAgentVIPFlows {
		seeds = append(seeds, ul(edgeB, vsid, fl))
	}
	q := flow{src: vipEncap, dst: client, proto: layers.IPProtocolTCP, sport: 443, dport: 40002, ttl: 62}.ip(t)[:28]
	icmp := icmpError(t, "203.0.113.1", vipEncap, 3, 4, 1400, q)
	seeds = append(seeds, scaleSeed{dptest.UlDev, nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, vsid<<8, 0,
		ethFrame(t, gwMAC, "02:01:c6:13:15:01", icmp))})
	for _, b := range v6SeedFrames(dptest.FabMAC, dptest.UlMAC, true) {
		seeds = append(seeds, scaleSeed{dptest.UlDev, b})
	}
	seeds = append(seeds, scaleAgentUnderlay6Seeds(t)...)
	f := newScaleAgentFuzzer("xdp_agent_underlay", seed, seeds, []string{dptest.UlDev})
	region := &dpfuzz.Region{NVGREEndpoint: addr(dptest.UlAddr), ICMPSource: addr(dptest.UlAddr)}
	f.judge = func(dev string, in []byte) dpfuzz.Verdict { return host.JudgeAgent(dpfuzz.Underlay, in) }
	f.check = func(it *runItem, v dpfuzz.Verdict) error {
		if v.Out6 != nil {
			// An IPv6 EIP's: translated to the guest's address6,
			// delivered or handed to the kernel (neighbour unresolved).
			if it.act == xdpPass {
				if err := region.CheckPassed6(v, it.out); err != nil {
					return err
				}
				f.results.outputs["deliver-pass6"]++
				return nil
			}
			kind, err := region.CheckOutput(v, dpfuzz.HostHop, it.out)
			if err != nil {
				return err
			}
			if kind != dpfuzz.OutForward || it.act != xdpRedirect || egressOf(it.out) != dptest.GuestDev {
				return fmt.Errorf("IPv6 %s from the tunnel by %s, not delivered to the guest", kind, egressOf(it.out))
			}
			f.results.outputs["deliver6"]++
			return nil
		}
		var out []byte
		kind := "deliver"
		if it.act == xdpPass {
			// The decapsulated frame for the kernel to deliver (no
			// neighbour yet): checked as the frame it becomes.
			if v.Forbid != "" {
				return fmt.Errorf("handed to the kernel decapsulated, but: %s", v.Forbid)
			}
			out = it.out
			kind = "deliver-pass"
		} else {
			var err error
			if kind, err = region.CheckOutput(v, dpfuzz.HostHop, it.out); err != nil {
				return err
			}
			if kind != dpfuzz.OutForward {
				return fmt.Errorf("a %s from the tunnel", kind)
			}
			out = it.out
		}
		o, err := dpfuzz.ParseIPv4(out, 14)
		if err != nil {
			return fmt.Errorf("delivered: %v", err)
		}
		if v.Fwd == nil || o.Src() != v.Fwd.Src() {
			return fmt.Errorf("delivered from %v, the inner source", o.Src())
		}
		want := host.EIPs[v.Fwd.Dst()].Host
		if !want.IsValid() {
			want = addr(dptest.GuestAddr) // the VIP's guest (the inner MAC names it)
		}
		if o.Dst() != want {
			return fmt.Errorf("inner destination %v delivered to %v, want %v", v.Fwd.Dst(), o.Dst(), want)
		}
		if !bytes.Equal(o.Pkt[20:o.HL], v.Fwd.Pkt[20:v.Fwd.HL]) || o.TTL() != v.Fwd.TTL() {
			return fmt.Errorf("IP options or TTL changed in delivery")
		}
		f.results.outputs[kind]++
		return nil
	}
	f.stats = a.Stats
	f.mustDrop = func(v dpfuzz.Verdict) bool {
		// Not IPv4, or not for this host (a martian destination
		// outside a tunnel is not): the kernel's.
		return !strings.HasPrefix(v.Forbid, "not IPv4") && !strings.HasPrefix(v.Forbid, "not NVGRE to this host") &&
			!strings.HasPrefix(v.Forbid, "martian destination")
	}
	// The IPv6 EIPs' rx counters move by the packets delivered to their
	// guests (or handed to the kernel translated), and by nothing else.
	lastRx6 := agentEIPRx6(t, a)
	f.batch = func(items []runItem, verdicts []dpfuzz.Verdict, _ map[string]uint64) error {
		want := map[uint32]uint64{}
		for i := range items {
			if v, it := verdicts[i], &items[i]; v.Out6 != nil && it.act != xdpDrop && !bytes.Equal(it.in, it.out) {
				want[agentIdx6Of(v.Fwd6.Dst())]++
			}
		}
		now := agentEIPRx6(t, a)
		for idx, n := range now {
			if n-lastRx6[idx] != want[idx] {
				return fmt.Errorf("IPv6 EIP slot %d's rx counter moved by %d for %d packets delivered to its guest", idx, n-lastRx6[idx], want[idx])
			}
		}
		lastRx6 = now
		return nil
	}
	f.runner = startBatchRunner(t, env, a.UnderlayProgram(), dptest.UlDev)
	if err := f.run(t, n); err != nil {
		t.Fatal(err)
	}
	if f.results.outputs["deliver6"] == 0 || f.results.outputs["deliver-pass6"] == 0 {
		t.Error("nothing delivered to an IPv6 EIP's guest: the run checked no NAT66")
	}
	if f.results.outputs["forward"] == 0 {
		t.Error("nothing delivered: the run checked nothing")
	}
}

// agentIdx6Of is the counter slot of the bed's IPv6 EIP a (scaleAgent6).
func agentIdx6Of(a netip.Addr) uint32 {
	if a == addr(agentEip6NoNbr) {
		return agentIdx6b
	}
	return agentIdx6
}

// checkAgentEdge6: a guest's IPv6 packet goes to the edge flow_hash6
// picks of the bed's two live edges, with the hash's low byte as FlowID
// (docs: "Agent, IPv6 EIPs"), over the translated source and the upper
// layer's ports (none for a fragment or ICMPv6).
func checkAgentEdge6(v dpfuzz.Verdict, out []byte) error {
	p := v.Fwd6
	tuple := flowhash.Tuple{Src: v.Out6.Src, Dst: v.Out6.Dst, Proto: p.Proto}
	if !p.MF {
		tuple.SrcPort, tuple.DstPort = dpfuzz.Ports6(*p)
	}
	h := flowhash.Hash6(tuple, testSeed)
	edge := []string{edgeA, edgeB}[h%2]
	if got := netip.AddrFrom4([4]byte(out[30:34])); got != addr(edge) {
		return fmt.Errorf("tunnelled to %v, flow_hash6 of %+v picks %s", got, tuple, edge)
	}
	if fid := binary.BigEndian.Uint32(out[38:]) & 0xff; fid != h&0xff {
		return fmt.Errorf("FlowID %#02x, flow_hash6's low byte %#02x", fid, h&0xff)
	}
	return nil
}

// agentEIPRx6 reads the IPv6 EIPs' rx packets by slot.
func agentEIPRx6(t *testing.T, a *Agent) map[uint32]uint64 {
	m := map[uint32]uint64{}
	for _, i := range []uint32{agentIdx6, agentIdx6b} {
		c, err := a.EIPStats(i)
		if err != nil {
			t.Fatal(err)
		}
		m[i] = c.RxPackets
	}
	return m
}

// agentEIPTx6 reads the IPv6 EIPs' tx packets by slot.
func agentEIPTx6(t *testing.T, a *Agent) map[uint32]uint64 {
	m := map[uint32]uint64{}
	for _, i := range []uint32{agentIdx6, agentIdx6b} {
		c, err := a.EIPStats(i)
		if err != nil {
			t.Fatal(err)
		}
		m[i] = c.TxPackets
	}
	return m
}

func agentEIPTx(t *testing.T, a *Agent) uint64 {
	c, err := a.EIPStats(agentIdx)
	if err != nil {
		t.Fatal(err)
	}
	return c.TxPackets
}

package dataplane

import (
	"os"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// BenchmarkEIPBandwidth measures what a bandwidth limit costs the EIP
// paths, in one run: the edge's Internet -> EIP encapsulation and the
// agent's guest -> Internet one, each without a limit, with one (so high
// that nothing is dropped: checked), and without again; the edge's also
// under a per-source rate limit (bpf/lib/ratelimit.h, which reads
// bpf_ktime_get_ns) with and without the bandwidth limit, what an EIP with
// both pays; and the floor (a MAC swap and XDP_TX). Through xdp_chain as BenchmarkEdgeLimits (the
// frame restored before every run; the chain into XDP_PASS, timed right
// after, subtracted):
//
//	go test -run '^$' -bench EIPBandwidth -count 3 ./internal/dataplane
//
// ns/packet is the path's cost, above_floor_ns less the floor's.
func BenchmarkEIPBandwidth(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("BPF_PROG_TEST_RUN needs root")
	}
	var t testing.TB = b
	eb := newEdgeBed(t)
	aenv, ag := newAgentBed(t)
	bench, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()
	upad := make([]byte, 86) // frames of 128 bytes
	in := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5000, dport: 53, payload: upad}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	out := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 53, dport: 5000, payload: upad}.frame(t, dptest.VMMAC, dptest.GuestMAC)
	floor := 0.0
	type side struct {
		env  *dptest.Env
		m    BandwidthMaps
		prog func() *ebpfProgram
		dev  string
	}
	edge := side{eb.env, eb.edge, eb.edge.Program, dptest.ExtDev}
	agent := side{aenv, ag, ag.GuestProgram, dptest.GuestDev}
	run := func(name string, s side, limit, rl bool, frame []byte, floorCase bool) {
		b.Run(name, func(b *testing.B) {
			if rl {
				if err := eb.edge.PutLimits(addr(eip), Limits{SourcePPS: MaxLimitRate}); err != nil {
					b.Fatal(err)
				}
				defer eb.edge.DeleteLimits(addr(eip))
			}
			rate := uint64(0)
			if limit {
				rate = MaxBandwidthRate
			}
			if err := s.m.SetEIPBandwidth(addr(eip), rate, 1<<32-1); err != nil {
				b.Fatal(err)
			}
			if err := bench.SetBenchFrame(frame); err != nil {
				b.Fatal(err)
			}
			target, want := s.prog(), uint32(xdpRedirect)
			if floorCase {
				target, want = bench.Floor(), uint32(xdpTX)
			}
			if err := bench.SetChainTarget(target); err != nil {
				b.Fatal(err)
			}
			ns, ret, err := s.env.Time(bench.Chain(), s.dev, frame, uint32(b.N))
			if err != nil {
				b.Fatal(err)
			}
			if ret != want {
				b.Fatalf("action %d, want %d: not the measured path", ret, want)
			}
			if d, _, _ := s.m.EIPBandwidthDrops(addr(eip)); d.Packets != 0 {
				b.Fatalf("the limit dropped %d packets: not the forwarding path", d.Packets)
			}
			if c, _, _ := eb.edge.LimitCounters(addr(eip)); c != (LimitCounters{}) {
				b.Fatalf("the rate limit dropped packets (%+v): not the forwarding path", c)
			}
			if err := bench.SetChainTarget(bench.Pass()); err != nil {
				b.Fatal(err)
			}
			chain, _, err := s.env.Time(bench.Chain(), s.dev, frame, uint32(b.N))
			if err != nil {
				b.Fatal(err)
			}
			if floorCase {
				floor = ns - chain
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ns-chain, "ns/packet")
			b.ReportMetric(ns-chain-floor, "above_floor_ns")
		})
	}
	run("floor", edge, false, false, in, true)
	run("edge_in_no_limit", edge, false, false, in, false)
	run("edge_in_limit", edge, true, false, in, false)
	run("edge_in_no_limit_again", edge, false, false, in, false)
	run("edge_in_rl_no_limit", edge, false, true, in, false)
	run("edge_in_rl_limit", edge, true, true, in, false)
	run("agent_out_no_limit", agent, false, false, out, false)
	run("agent_out_limit", agent, true, false, out, false)
	run("agent_out_no_limit_again", agent, false, false, out, false)
}

package dataplane

import (
	"os"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// BenchmarkEdgeLimits measures what rate limits cost the fast path: an
// EIP's encapsulation without limits, with the SYN guard only (a packet
// that is no SYN: the limits lookup), with a per-source limit (and the
// guard), and a SYN through both; and the floor (a MAC swap and XDP_TX),
// all in one run, through xdp_chain (the frame restored before every run;
// the chain into XDP_PASS, timed right after each, is subtracted):
//
//	go test -run '^$' -bench EdgeLimits -count 5 ./internal/dataplane
//
// ns/packet is the path's cost, above_floor_ns the path's less the
// floor's of the same run. The limits are high enough that nothing is
// dropped (checked): every case is the forwarding path.
func BenchmarkEdgeLimits(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("BPF_PROG_TEST_RUN needs root")
	}
	var t testing.TB = b
	eb := newEdgeBed(t)
	bench, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()
	pad, upad := make([]byte, 74), make([]byte, 86) // frames of 128 bytes
	udp := flow{src: client, dst: eip, proto: layers.IPProtocolUDP, sport: 5000, dport: 53, payload: upad}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	syn := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, syn: true, payload: pad}.frame(t, dptest.RtrMAC, dptest.ExtMAC)
	const high = MaxLimitRate
	floor := 0.0
	run := func(name string, l Limits, frame []byte, floorCase bool) {
		b.Run(name, func(b *testing.B) {
			if err := eb.edge.PutLimits(addr(eip), l); err != nil {
				b.Fatal(err)
			}
			if err := bench.SetBenchFrame(frame); err != nil {
				b.Fatal(err)
			}
			target, want := eb.edge.Program(), uint32(xdpRedirect)
			if floorCase {
				target, want = bench.Floor(), uint32(xdpTX)
			}
			if err := bench.SetChainTarget(target); err != nil {
				b.Fatal(err)
			}
			before, _, _ := eb.edge.LimitCounters(addr(eip))
			ns, ret, err := eb.env.Time(bench.Chain(), dptest.ExtDev, frame, uint32(b.N))
			if err != nil {
				b.Fatal(err)
			}
			if ret != want {
				b.Fatalf("action %d, want %d: not the measured path", ret, want)
			}
			if after, _, _ := eb.edge.LimitCounters(addr(eip)); after != before {
				b.Fatalf("the limits dropped packets (%+v -> %+v): not the forwarding path", before, after)
			}
			if err := bench.SetChainTarget(bench.Pass()); err != nil {
				b.Fatal(err)
			}
			chain, _, err := eb.env.Time(bench.Chain(), dptest.ExtDev, frame, uint32(b.N))
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
	run("floor", Limits{}, udp, true)
	run("eip_no_limits", Limits{}, udp, false)
	run("eip_syn_guard_udp", Limits{SYNRate: high, SYNBurst: high}, udp, false)
	run("eip_source_limit_udp", Limits{SourcePPS: high, SourceBurst: high, SYNRate: high, SYNBurst: high}, udp, false)
	run("eip_source_limit_syn", Limits{SourcePPS: high, SourceBurst: high, SYNRate: high, SYNBurst: high}, syn, false)
	run("eip_no_limits_again", Limits{}, udp, false)
}

package dataplane

import (
	"os"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// BenchmarkAgentPaths measures the agent's paths in ns/packet
// (BPF_PROG_TEST_RUN repeat mode through xdp_chain, which restores the
// frame before every run and tail-calls the path; the same chain into
// XDP_PASS, timed right after, is subtracted and reported as chain_ns):
//
//	go test -run '^$' -bench AgentPaths -count 5 ./internal/dataplane
//
// Each sub-benchmark's ns/op is one packet; b.N is the repeat count of
// one BPF_PROG_TEST_RUN call.
//
//   - eip_*: a guest with an EIP that serves no VIP (no flow lookup);
//   - svc_eip_*: a guest with an EIP that serves a VIP too, on an EIP flow
//     (a flow lookup that misses, then the EIP);
//   - vip_*: a VIP flow (decap: an entry that is already right, refreshed
//     by a lookup, no write; reply: translated by its entry).
func BenchmarkAgentPaths(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("BPF_PROG_TEST_RUN needs root")
	}
	var t testing.TB = b
	env, a := newAgentBed(t)
	g1 := uint32(mustIfindex(t, env, dptest.GuestDev))
	bench, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()
	pad := make([]byte, 74) // frames of 128 bytes (guest) and more (tunnel)
	key := uint32(vsid<<8 | 0x21)
	tunnel := func(mac string, f flow) []byte {
		f.payload = pad
		return nvgre(t, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, key, 0, ethFrame(t, gwMAC, mac, f.ip(t)))
	}
	guest := func(f flow) []byte { f.payload = pad; return f.frame(t, dptest.VMMAC, dptest.GuestMAC) }
	toEIP := flow{src: client, dst: eip, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, ttl: 63}
	toVIP := flow{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40001, dport: 80, ttl: 63}
	fromEIP := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000}
	fromVIP := flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40001}

	type pathCase struct {
		name  string
		guest bool
		frame []byte
		want  uint32
	}
	measure := func(phase string, cases []pathCase) {
		for _, c := range cases {
			target, dev := a.UnderlayProgram(), dptest.UlDev
			if c.guest {
				target, dev = a.GuestProgram(), dptest.GuestDev
			}
			b.Run(phase+"/"+c.name, func(b *testing.B) {
				if err := bench.SetBenchFrame(c.frame); err != nil {
					b.Fatal(err)
				}
				if err := bench.SetChainTarget(target); err != nil {
					b.Fatal(err)
				}
				ns, ret, err := env.Time(bench.Chain(), dev, c.frame, uint32(b.N))
				if err != nil {
					b.Fatal(err)
				}
				if ret != c.want {
					b.Fatalf("%s: action %d, want %d: not the measured path", c.name, ret, c.want)
				}
				if err := bench.SetChainTarget(bench.Pass()); err != nil {
					b.Fatal(err)
				}
				chain, _, err := env.Time(bench.Chain(), dev, c.frame, uint32(b.N))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(ns-chain, "ns/packet")
				b.ReportMetric(chain, "chain_ns")
			})
		}
	}
	const redirect = 4
	measure("eip-only", []pathCase{
		{"eip_decap", false, tunnel("02:00:c6:33:64:07", toEIP), redirect},
		{"eip_reply", true, guest(fromEIP), redirect},
	})
	// The guest serves a VIP too.
	svcEIP := AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: g1}
	agentFlowBenchMarkService(&svcEIP)
	if err := a.PutEIP(svcEIP); err != nil {
		t.Fatal(err)
	}
	if err := a.PutService(agentFlowBenchService(addr(vipEncap), addr(dptest.GuestAddr), g1)); err != nil {
		t.Fatal(err)
	}
	vipIn := tunnel("02:01:c6:13:15:01", toVIP)
	if res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, vipIn); err != nil || res.Action != redirect {
		t.Fatalf("VIP flow: %v %v", res.Action, err)
	}
	measure("svc guest", []pathCase{
		{"svc_eip_decap", false, tunnel("02:00:c6:33:64:07", toEIP), redirect},
		{"svc_eip_reply", true, guest(fromEIP), redirect},
		{"vip_decap", false, vipIn, redirect},
		{"vip_reply", true, guest(fromVIP), redirect},
	})
}

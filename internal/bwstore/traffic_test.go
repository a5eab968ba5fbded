package bwstore

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Store traffic per AZ (issue 10's scale benchmark): one AZ with 100k EIPs,
// every reporter writing every interval (1 s), the AZ manager reading every
// interval and pushing limits to every host. Each sub-benchmark's op is one
// interval's worth of one kind of traffic, so its per-op figures are per
// second at a 1 s interval; the bytes and commands come from the server's
// own INFO stats (total_net_input_bytes, total_net_output_bytes,
// total_commands_processed), measured around the loop.
//
//	go test -run '^$' -bench StoreTrafficPerAZ -benchtime 20x ./internal/bwstore/
const (
	benchEIPs  = 100_000
	benchHosts = 50 // 2,000 EIPs per host
	benchEdges = 2  // each edge reports ingress of every EIP of the AZ
)

func benchEIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)}) // 198.18.0.0/15 holds 131,072
}

type redisStats struct{ in, out, cmds int64 }

func readStats(b *testing.B, r *Redis) redisStats {
	info, err := r.Client().Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s redisStats
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "total_net_input_bytes":
			s.in = n
		case "total_net_output_bytes":
			s.out = n
		case "total_commands_processed":
			s.cmds = n
		}
	}
	return s
}

func BenchmarkStoreTrafficPerAZ(b *testing.B) {
	srv := startRedis(b)
	r, err := NewRedis(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	perHost := benchEIPs / benchHosts
	agentRates := make([][]Rate, benchHosts)
	limits := make([]Limits, benchHosts)
	for h := range agentRates {
		for j := 0; j < perHost; j++ {
			e := benchEIP(h*perHost + j)
			agentRates[h] = append(agentRates[h], Rate{EIP: e, Dir: Egress, BytesPerSec: 12_500_000 + uint64(j), PacketsPerSec: 10_000 + uint64(j)})
			limits[h].Limits = append(limits[h].Limits, Limit{EIP: e, Dir: Egress, RateBytes: 12_500_000, BurstBytes: 1_250_000})
		}
	}
	edgeRates := make([]Rate, benchEIPs)
	for i := range edgeRates {
		edgeRates[i] = Rate{EIP: benchEIP(i), Dir: Ingress, BytesPerSec: 1_000_000 + uint64(i), PacketsPerSec: 900}
	}
	run := func(b *testing.B, op func(i int)) {
		op(0) // warm: keys exist, scripts loaded
		b.ResetTimer()
		before := readStats(b, r)
		for i := 0; i < b.N; i++ {
			op(i + 1)
		}
		after := readStats(b, r)
		b.StopTimer()
		n := float64(b.N)
		b.ReportMetric(float64(after.in-before.in)/n, "in-B/s")
		b.ReportMetric(float64(after.out-before.out)/n, "out-B/s")
		b.ReportMetric(float64(after.cmds-before.cmds-1)/n, "cmds/s")
	}
	writeAgents := func(b *testing.B) {
		for h := range agentRates {
			if err := r.WriteReports(ctx, "az1", "h"+strconv.Itoa(h), time.Minute, agentRates[h]); err != nil {
				b.Fatal(err)
			}
		}
	}
	writeEdges := func(b *testing.B) {
		for e := 0; e < benchEdges; e++ {
			if err := r.WriteReports(ctx, "az1", "edge"+strconv.Itoa(e), time.Minute, edgeRates); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("agents-write", func(b *testing.B) { run(b, func(int) { writeAgents(b) }) })
	b.Run("edges-write", func(b *testing.B) { run(b, func(int) { writeEdges(b) }) })
	b.Run("manager-read", func(b *testing.B) {
		writeAgents(b)
		writeEdges(b)
		run(b, func(int) {
			s, err := r.ReadReports(ctx, "az1")
			if err != nil {
				b.Fatal(err)
			}
			if len(s.Reports) != benchEIPs*(1+benchEdges) {
				b.Fatalf("%d reports", len(s.Reports))
			}
		})
	})
	gen := uint64(1) // outlives the sub-benchmark's reruns (b.N 1, then N)
	b.Run("manager-push-limits", func(b *testing.B) {
		run(b, func(int) {
			gen++
			for h := range limits {
				l := limits[h]
				l.Generation = gen
				if err := r.WriteLimits(ctx, "az1", "h"+strconv.Itoa(h), 10*time.Second, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("agents-poll-generation", func(b *testing.B) {
		run(b, func(int) {
			for h := range limits {
				if _, _, err := r.LimitsGeneration(ctx, "az1", "h"+strconv.Itoa(h)); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("agents-read-limits", func(b *testing.B) {
		run(b, func(int) {
			for h := range limits {
				if _, ok, err := r.ReadLimits(ctx, "az1", "h"+strconv.Itoa(h)); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	})
	mem, _ := r.Client().Info(ctx, "memory").Result()
	for _, l := range strings.Split(mem, "\n") {
		if strings.HasPrefix(l, "used_memory_human:") {
			b.Logf("redis %s (100k EIPs, agents + %d edges reporting, limits for %d hosts)", strings.TrimSpace(l), benchEdges, benchHosts)
		}
	}
}

package bandwidth

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/model"
)

// BenchmarkRegionRound: one region round (read the zones' sums, estimate,
// allocate, split, budget, push) over npkg packages of 10 EIPs, each EIP
// reported by 3 zones, on the in-process store, in steady state.
func BenchmarkRegionRound(b *testing.B) {
	for _, npkg := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("eips=%d", npkg*10), func(b *testing.B) {
			clock := newClock()
			region := bwstore.NewMem(clock)
			st := model.NewState()
			var all []netip.Addr
			for p := range npkg {
				pk := &model.BandwidthPackage{Name: fmt.Sprintf("p%d", p), Capacity: 100 * mbit}
				for e := range 10 {
					n := p*10 + e
					a := netip.AddrFrom4([4]byte{198, 18 + byte(n>>16), byte(n >> 8), byte(n)})
					st.EIPs[a.String()] = &model.EIP{Address: a}
					pk.EIPs = append(pk.EIPs, model.PackageEIP{Address: a})
					all = append(all, a)
				}
				st.BandwidthPackages[pk.Name] = pk
			}
			rm, err := NewRegionManager(region, testCfg(clock))
			if err != nil {
				b.Fatal(err)
			}
			rm.SetState(st)
			ctx := context.Background()
			report := func(i int) {
				for z, zone := range []string{"az1", "az2", "az3"} {
					rates := make([]bwstore.Rate, len(all))
					for j, a := range all {
						rates[j] = egress(a, uint64(200_000+(j*7+z*13+i)%50_000))
					}
					if err := region.WriteReports(ctx, RegionTier, zone, 3*time.Second, rates); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := range 3 {
				report(i)
				if _, err := rm.Round(ctx, nil); err != nil {
					b.Fatal(err)
				}
				clock.Advance(time.Second)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				report(i)
				b.StartTimer()
				if _, err := rm.Round(ctx, nil); err != nil {
					b.Fatal(err)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

// BenchmarkZoneRound: one zone round over neip EIPs on 50 hosts (each
// EIP on one host), with the zone's shares from the region, on the
// in-process store, in steady state.
func BenchmarkZoneRound(b *testing.B) {
	for _, neip := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("eips=%d", neip), func(b *testing.B) {
			clock := newClock()
			zs, region := bwstore.NewMem(clock), bwstore.NewMem(clock)
			z, err := NewZoneManager("az1", zs, region, testCfg(clock))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			addr := func(n int) netip.Addr {
				return netip.AddrFrom4([4]byte{198, 18 + byte(n>>16), byte(n >> 8), byte(n)})
			}
			shares := make([]bwstore.Limit, neip)
			for i := range shares {
				shares[i] = eLimit(addr(i), 1_000_000)
			}
			gens := NewGenerations(clock.Now)
			step := func(i int) {
				for h := range 50 {
					var rates []bwstore.Rate
					for e := h; e < neip; e += 50 {
						rates = append(rates, egress(addr(e), uint64(200_000+(e*7+i)%50_000)))
					}
					if err := zs.WriteReports(ctx, "az1", fmt.Sprintf("h%d", h), 3*time.Second, rates); err != nil {
						b.Fatal(err)
					}
				}
				if err := region.WriteLimits(ctx, RegionTier, "az1", 10*time.Second, bwstore.Limits{Generation: gens.Next(), Limits: shares}); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 3 {
				step(i)
				if _, err := z.Round(ctx, nil); err != nil {
					b.Fatal(err)
				}
				clock.Advance(time.Second)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				step(i)
				b.StartTimer()
				if _, err := z.Round(ctx, nil); err != nil {
					b.Fatal(err)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

package bwalloc_test

import (
	"fmt"
	"net/netip"

	"github.com/azgate/azgate/internal/bwalloc"
)

// The worked example of docs/bandwidth.md: a 100 Mbit/s package of five
// EIPs, contended, then not, then one EIP's limit split over two hosts.
func Example() {
	const M = 1_000_000
	a := netip.MustParseAddr
	eips := []bwalloc.EIP{
		{Addr: a("198.51.100.1"), Weight: 1, Demand: 10 * M},
		{Addr: a("198.51.100.2"), Weight: 1, Demand: 80 * M},
		{Addr: a("198.51.100.3"), Weight: 2, Demand: 80 * M},
		{Addr: a("198.51.100.4"), Weight: 1, Min: 30 * M, Demand: 40 * M},
		{Addr: a("198.51.100.5"), Weight: 1, Max: 5 * M, Demand: 50 * M},
	}
	var al bwalloc.Allocator
	res, _ := al.Package(100*M, eips, bwalloc.Options{}, nil)
	fmt.Printf("contended %v, level %.0f bit/s per weight\n", res.Contended, res.Level)
	for _, g := range res.Grants {
		fmt.Println(g.Addr, g.Want, g.Limit)
	}

	for i, d := range []uint64{10 * M, 5 * M, 10 * M, 10 * M, 5 * M} {
		eips[i].Demand = d
	}
	res, _ = al.Package(100*M, eips, bwalloc.Options{}, nil)
	fmt.Println("contended", res.Contended)
	for _, g := range res.Grants {
		fmt.Println(g.Addr, g.Want, g.Limit)
	}

	shares, _ := bwalloc.SplitHosts(nil, 36_666_666, []bwalloc.HostShare{
		{Host: "az1-h1", Demand: 30 * M},
		{Host: "az2-h4", Demand: 0}, // just started carrying it
	}, bwalloc.DefaultHostFloor)
	for _, s := range shares {
		fmt.Println(s.Host, s.Limit)
	}

	plan := bwalloc.PlanPushes(
		map[bwalloc.HostKey]uint64{{Addr: a("198.51.100.3"), Host: "az1-h1"}: 40 * M},
		map[bwalloc.HostKey]uint64{
			{Addr: a("198.51.100.3"), Host: "az1-h1"}: shares[0].Limit,
			{Addr: a("198.51.100.3"), Host: "az2-h4"}: shares[1].Limit,
		})
	for _, p := range plan.Ordered() {
		fmt.Println(p.Host, p.Old, "->", p.New)
	}
	// Output:
	// contended true, level 18333333 bit/s per weight
	// 198.51.100.1 10000000 10000000
	// 198.51.100.2 80000000 18333333
	// 198.51.100.3 80000000 36666666
	// 198.51.100.4 40000000 30000000
	// 198.51.100.5 5000000 5000000
	// contended false
	// 198.51.100.1 10000000 22000000
	// 198.51.100.2 5000000 17000000
	// 198.51.100.3 10000000 34000000
	// 198.51.100.4 10000000 22000000
	// 198.51.100.5 5000000 5000000
	// az1-h1 34833333
	// az2-h4 1833333
	// az1-h1 40000000 -> 34833333
	// az2-h4 0 -> 1833333
}

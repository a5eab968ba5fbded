package bwalloc

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSplitHosts(t *testing.T) {
	cases := []struct {
		name   string
		limit  uint64
		floor  float64
		hosts  []HostShare
		limits []uint64 // in host-name order
		err    string
	}{
		{name: "one host takes all", limit: 1000, floor: 0.1,
			hosts: []HostShare{{Host: "a", Demand: 5}}, limits: []uint64{1000}},
		{name: "proportional with floor", limit: 1000, floor: 0.1,
			hosts:  []HostShare{{Host: "a", Demand: 300}, {Host: "b", Demand: 100}},
			limits: []uint64{50 + 675, 50 + 225}},
		{name: "new host gets the floor", limit: 1000, floor: 0.1,
			hosts:  []HostShare{{Host: "b", Demand: 0}, {Host: "a", Demand: 400}},
			limits: []uint64{950, 50}},
		{name: "no demand: equal, remainder to the first", limit: 1000, floor: 0,
			hosts:  []HostShare{{Host: "c"}, {Host: "b"}, {Host: "a"}},
			limits: []uint64{334, 333, 333}},
		{name: "largest remainder", limit: 10, floor: 0,
			hosts:  []HostShare{{Host: "a", Demand: 1}, {Host: "b", Demand: 1}, {Host: "c", Demand: 1}},
			limits: []uint64{4, 3, 3}},
		{name: "huge demands do not overflow", limit: 1 << 62, floor: 0.1,
			hosts:  []HostShare{{Host: "a", Demand: 1 << 63}, {Host: "b", Demand: 1 << 63}},
			limits: []uint64{1 << 61, 1 << 61}},
		{name: "zero limit", limit: 0, floor: 0.1,
			hosts: []HostShare{{Host: "a", Demand: 1}, {Host: "b"}}, limits: []uint64{0, 0}},
		{name: "duplicate host", limit: 10, floor: 0.1,
			hosts: []HostShare{{Host: "a"}, {Host: "a"}}, err: `host "a" given twice`},
		{name: "unnamed host", limit: 10, floor: 0.1,
			hosts: []HostShare{{Host: ""}}, err: "no name"},
		{name: "floor out of range", limit: 10, floor: 1.5,
			hosts: []HostShare{{Host: "a"}}, err: "floor 1.5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SplitHosts(nil, tc.limit, tc.hosts, tc.floor)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ls []uint64
			for _, s := range got {
				ls = append(ls, s.Limit)
			}
			if !slices.Equal(ls, tc.limits) {
				t.Fatalf("limits %v, want %v", ls, tc.limits)
			}
			checkSplit(t, tc.limit, tc.hosts, tc.floor, got)
		})
	}
}

// checkSplit: shares sum exactly to the limit, each host has its floor,
// sorted by host, and a host with more demand never gets less.
func checkSplit(t testing.TB, limit uint64, hosts []HostShare, floor float64, got []HostShare) {
	t.Helper()
	if len(got) != len(hosts) {
		t.Fatalf("%d shares for %d hosts", len(got), len(hosts))
	}
	var sum uint64
	n := uint64(len(hosts))
	per := mulFloor(limit, floor) / max(n, 1)
	for i, s := range got {
		sum += s.Limit
		if s.Limit < per {
			t.Fatalf("host %s: %d below its floor %d", s.Host, s.Limit, per)
		}
		if i > 0 && got[i-1].Host >= s.Host {
			t.Fatalf("not sorted at %d", i)
		}
		for _, o := range got {
			if o.Demand > s.Demand && o.Limit+1 < s.Limit {
				t.Fatalf("host %s (demand %d) got %d, less than %s (demand %d) with %d", o.Host, o.Demand, o.Limit, s.Host, s.Demand, s.Limit)
			}
		}
	}
	if n > 0 && sum != limit {
		t.Fatalf("shares sum to %d, limit %d", sum, limit)
	}
}

func TestSplitHostsProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 3))
	var dst []HostShare
	for it := 0; it < 20000; it++ {
		n := 1 + r.IntN(12)
		hosts := make([]HostShare, n)
		for i := range hosts {
			hosts[i] = HostShare{Host: "h" + strconv.Itoa(i), Demand: r.Uint64() >> r.IntN(64)}
			if r.IntN(4) == 0 {
				hosts[i].Demand = 0
			}
		}
		limit := r.Uint64() >> r.IntN(64)
		floor := r.Float64() * 0.5
		var err error
		dst, err = SplitHosts(dst, limit, hosts, floor)
		if err != nil {
			t.Fatal(err)
		}
		checkSplit(t, limit, hosts, floor, dst)
	}
}

// The hosts as the roles run them against
// the real zone and region managers, on in-process stores.

package bwenforce

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bandwidth"
	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestHostsAndManagers: two agents in az1 and one in az2 share a 100
// Mbit/s package; each EIP sends min(its demand, its limit) (the counters
// grow by that each interval). The hosts start on the static split, take
// the managers' limits within a few rounds, and the limits settle on the
// fair shares (the small EIP its demand and margin, the two others the
// rest), never above the capacity in total.
func TestHostsAndManagers(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	zs := bwstore.NewMem(clk)
	rs := bwstore.NewMem(clk)
	st := model.NewState()
	for _, o := range []model.Object{&model.AZ{Name: "az1"}, &model.AZ{Name: "az2"},
		&model.EdgeSet{Name: "pop", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, Edges: []model.EdgeNode{{Name: "e1", Underlay: ad("198.18.0.1")}}},
		&model.Host{Name: "h1", AZ: "az1", Underlay: ad("198.18.11.1"), Guests: []model.Guest{{Name: "g", Address: ad("198.19.11.1"), VSID: 5001}}},
		&model.Host{Name: "h2", AZ: "az1", Underlay: ad("198.18.12.1"), Guests: []model.Guest{{Name: "g", Address: ad("198.19.12.1"), VSID: 5002}}},
		&model.Host{Name: "h3", AZ: "az2", Underlay: ad("198.18.21.1"), Guests: []model.Guest{{Name: "g", Address: ad("198.19.21.1"), VSID: 5003}}},
		&model.EIP{Address: ad("198.51.100.1"), Binding: &model.Binding{Host: "h1", Guest: "g"}},
		&model.EIP{Address: ad("198.51.100.2"), Binding: &model.Binding{Host: "h2", Guest: "g"}},
		&model.EIP{Address: ad("198.51.100.3"), Binding: &model.Binding{Host: "h3", Guest: "g"}},
		&model.BandwidthPackage{Name: "shop", Capacity: 100_000_000, EIPs: []model.PackageEIP{
			{Address: ad("198.51.100.1")}, {Address: ad("198.51.100.2")}, {Address: ad("198.51.100.3")}}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := bandwidth.Config{Interval: time.Second, Now: clk.Now, Log: quiet}
	reg, err := bandwidth.NewRegionManager(rs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg.SetState(st)
	z1, err := bandwidth.NewZoneManager("az1", zs, rs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	z2, err := bandwidth.NewZoneManager("az2", zs, rs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		h   *Host
		dp  *dataplane.FakeBandwidth
		cnt *counters
		eip netip.Addr
	}
	var nodes []node
	for i, hn := range []string{"h1", "h2", "h3"} {
		eip := ad(fmt.Sprintf("198.51.100.%d", i+1))
		zone := st.Hosts[hn].AZ
		v, err := NewView(zone, st.BandwidthPackages, st.PackageOf, []netip.Addr{eip}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := node{dp: &dataplane.FakeBandwidth{}, cnt: &counters{clk: clk, m: map[netip.Addr]Reading{eip: {Slot: 1}}}, eip: eip}
		n.h, err = NewHost(HostConfig{Store: zs, Reporter: hn, Dir: bwstore.Egress, Counters: n.cnt, Limits: n.dp,
			View: func() View { return v }, Log: quiet, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	for round := 0; round < 15; round++ {
		clk.add(time.Second)
		for _, n := range nodes {
			// Demand: h1 and h3 want 80 Mbit/s, h2 10 Mbit/s; each sends
			// min(demand, limit).
			want := uint64(80_000_000)
			if n.eip == ad("198.51.100.2") {
				want = 10_000_000
			}
			lim := n.dp.Limits[n.eip].Rate
			if lim == 0 || lim > want {
				lim = want
			}
			n.cnt.add(n.eip, lim/8, lim/8/1000)
			n.h.Step(ctx)
		}
		for _, z := range []*bandwidth.ZoneManager{z1, z2} {
			if _, err := z.Round(ctx, alwaysActive); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reg.Round(ctx, alwaysActive); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		line := ""
		for _, n := range nodes {
			sum += n.dp.Limits[n.eip].Rate
			line += fmt.Sprintf(" %v=%dk/%s", n.eip, n.dp.Limits[n.eip].Rate/1000, n.h.Status().EIPs[n.eip].Mode)
		}
		t.Logf("round %d: sum %dk:%s", round, sum/1000, line)
		if sum > 100_000_000 {
			t.Errorf("round %d: sum of limits %d above the capacity", round, sum)
		}
	}
	want := map[netip.Addr]uint64{ad("198.51.100.1"): 44_500_000, ad("198.51.100.2"): 11_000_000, ad("198.51.100.3"): 44_500_000}
	for _, n := range nodes {
		got := n.dp.Limits[n.eip].Rate
		if n.h.Status().EIPs[n.eip].Mode != Managed || got+1000 < want[n.eip] || got > want[n.eip]+1000 {
			t.Errorf("%v: %d bit/s (%s) at the end, want about %d, managed", n.eip, got, n.h.Status().EIPs[n.eip].Mode, want[n.eip])
		}
	}
}

// alwaysActive is a claim that never ends (the managers' tests have theirs).
func alwaysActive() error { return nil }

package bandwidth

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/model"
)

// silentPkg: 120 Mbit/s over four EIPs of weight 1, so each EIP's static
// split is 30 Mbit/s (3,750,000 bytes/s).
func silentPkg(eips ...netip.Addr) *model.BandwidthPackage {
	p := &model.BandwidthPackage{Name: "p", Capacity: 120 * mbit}
	for _, a := range eips {
		p.EIPs = append(p.EIPs, model.PackageEIP{Address: a})
	}
	return p
}

// silentWorld: eip1 in az1 (busy) and az3 (light), eip2 and eip4 in az2
// (busy), eip3 in az3 (light). Warmed up.
func silentWorld(t *testing.T) *world {
	wd := newWorld(t, silentPkg(eip1, eip2, eip3, eip4))
	wd.set("az1", "h1", eip1, 9_000_000)
	wd.set("az2", "h1", eip2, 9_000_000)
	wd.set("az2", "h2", eip4, 9_000_000)
	wd.set("az3", "h1", eip3, 100_000)
	wd.set("az3", "h2", eip1, 100_000)
	for range 10 {
		wd.step()
	}
	return wd
}

// TestRegionSilentZone: three zones share a package and one zone's
// manager dies (its reports stop). Its hosts keep their last limits for
// the grace period, then enforce their static split; the region counts
// that, so in every round the live zones' shares (a lowered one at its
// old value for Settle) plus the silent zone's max(static split, last
// shares while they may be in force) stay within the capacity, while the
// live zones still share the rest. The zone's return goes back to the
// fair shares without going over; a second silence is forgotten after
// SilentGraces × grace.
func TestRegionSilentZone(t *testing.T) {
	// 15 s: back while the region still holds az3's last shares (2
	// graces) but its hosts are on their static split; 30 s: after.
	for _, silent := range []int{15, 30} {
		t.Run(fmt.Sprintf("silent %ds", silent), func(t *testing.T) { testRegionSilentZone(t, silent) })
	}
}

func testRegionSilentZone(t *testing.T, silent int) {
	wd := silentWorld(t)
	const capBytes = 120 * mbit / 8
	const static = capBytes / 4
	cfg, err := testCfg(wd.clock).check()
	if err != nil {
		t.Fatal(err)
	}
	f := newInForce(cfg.Settle) // zone/EIP: what the zone may enforce
	f.seedZones(wd.region, "az1", "az2", "az3")
	wd.region.take()
	az3Keys := []string{"az3/" + eip1.String(), "az3/" + eip3.String()}
	// silence: az3's manager stops. The region sees it silent a round
	// later (its last report is 2 intervals old); from then on az3's
	// keys count at their static split and their last shares for 2
	// graces. The first Settle after that is what no manager can
	// prevent (the live decreases it writes then may not be in force
	// below yet); az3's hosts fall to their static split only a grace
	// after the zone manager's last write, well after it.
	var excuse time.Time
	silence := func() {
		delete(wd.zones, "az3")
		detect := wd.clock.Now().Add(time.Second)
		excuse = detect.Add(cfg.Settle)
		for _, k := range az3Keys {
			f.old[k] = append(f.old[k], heldRate{f.cur[k], detect.Add(2 * cfg.Grace)})
			f.cur[k] = static
		}
	}
	round := func(phase string, i int) {
		t.Helper()
		now := wd.clock.Now()
		wd.step()
		f.record(now, wd.region.take(), false) // the round's writes, made at now
		if s := f.sum(now); !now.Before(excuse) && s > capBytes {
			t.Fatalf("%s, round %d: the live zones' shares and the silent zone's static split sum to %d bytes/s, above the capacity %d", phase, i, s, capBytes)
		}
		// What the hosts enforce now: their limits, or (expired) their
		// static split; no excuse.
		var hosts uint64
		for hk, dm := range wd.demand {
			zone, host, _ := strings.Cut(hk, "/")
			for a := range dm {
				if l, ok := limitOf(t, wd.zstore[zone], zone, host, a, bwstore.Egress); ok {
					hosts += l.RateBytes
				} else {
					hosts += static
				}
			}
		}
		if hosts > capBytes {
			t.Fatalf("%s, round %d: the hosts enforce %d bytes/s in sum, above the capacity %d", phase, i, hosts, capBytes)
		}
	}
	live := func() (e1, e2, e4 uint64) {
		l1, _ := limitOf(t, wd.region, RegionTier, "az1", eip1, bwstore.Egress)
		l2, _ := limitOf(t, wd.region, RegionTier, "az2", eip2, bwstore.Egress)
		l4, _ := limitOf(t, wd.region, RegionTier, "az2", eip4, bwstore.Egress)
		return l1.RateBytes, l2.RateBytes, l4.RateBytes
	}
	within := func(got, want uint64) bool {
		return float64(got) >= 0.9*float64(want) && float64(got) <= 1.1*float64(want)
	}

	silence()
	for i := range silent {
		round("az3 silent", i)
	}
	if l, ok := limitOf(t, wd.zstore["az3"], "az3", "h1", eip3, bwstore.Egress); ok {
		t.Fatalf("az3's host still holds a limit %d for eip3 after %d s: the test does not reach its static split", l.RateBytes, silent)
	}
	// Not starved: the live EIPs share the 60 Mbit/s the silent zone's
	// two static splits leave, 20 Mbit/s (2,500,000 bytes/s) each.
	if e1, e2, e4 := live(); !within(e1, 2_500_000) || !within(e2, 2_500_000) || !within(e4, 2_500_000) {
		t.Errorf("live shares while az3 is silent: eip1 %d, eip2 %d, eip4 %d: want 2500000 ± 10%% each (capacity less az3's static splits, shared)", e1, e2, e4)
	}

	// az3 returns (a new zone manager): its hosts are on their static
	// split until its shares come; back to the fair shares, never over.
	zm, err := NewZoneManager("az3", wd.zstore["az3"], wd.region, testCfg(wd.clock))
	if err != nil {
		t.Fatal(err)
	}
	wd.zones["az3"] = zm
	for i := range 20 {
		round("az3 back", i)
	}
	e1, e2, e4 := live()
	l3, _ := limitOf(t, wd.region, RegionTier, "az3", eip3, bwstore.Egress)
	l13, _ := limitOf(t, wd.region, RegionTier, "az3", eip1, bwstore.Egress)
	t.Logf("after az3's return (bytes/s): eip1 %d + %d, eip2 %d, eip3 %d, eip4 %d", e1, l13.RateBytes, e2, l3.RateBytes, e4)
	if l3.RateBytes >= static/2 || !within(e2, e4) || !within(e1+l13.RateBytes, e2) {
		t.Errorf("after az3's return: eip1 %d, eip2 %d, eip3 %d, eip4 %d: want eip1 ≈ eip2 ≈ eip4, eip3 its light demand", e1+l13.RateBytes, e2, l3.RateBytes, e4)
	}
	if tot := e1 + e2 + e4 + l3.RateBytes + l13.RateBytes; tot < capBytes*9/10 {
		t.Errorf("after az3's return the shares sum to %d: want at least 90%% of %d", tot, capBytes)
	}

	// Silent again, past the bound: counted until SilentGraces × grace
	// after its last report, then forgotten (the live zones take the
	// whole capacity again).
	last := wd.clock.Now().Add(-time.Second)
	silence()
	bound := last.Add(SilentGraces * cfg.Grace)
	for i := 0; wd.clock.Now().Before(bound); i++ {
		round("az3 silent again", i)
		if _, ok := wd.rm.seen["az3"]; !ok && wd.clock.Now().Before(bound) {
			t.Fatalf("az3 forgotten %v after its last report, before the bound %v", wd.clock.Now().Sub(last), SilentGraces*cfg.Grace)
		}
	}
	for range 12 {
		wd.step()
	}
	if _, ok := wd.rm.seen["az3"]; ok {
		t.Errorf("az3 still remembered %v after its last report: want forgotten after %v", wd.clock.Now().Sub(last), SilentGraces*cfg.Grace)
	}
	if e1, e2, e4 := live(); e1+e2+e4 < capBytes*9/10 {
		t.Errorf("after the bound the live shares sum to %d: want (nearly) the whole capacity %d again", e1+e2+e4, capBytes)
	}
}

// TestRegionSilentZoneLeavesPackage: a silent zone's EIP that leaves its
// package is forgotten at once (it takes no capacity any more).
func TestRegionSilentZoneLeavesPackage(t *testing.T) {
	wd := silentWorld(t)
	delete(wd.zones, "az3")
	for range 4 {
		wd.step()
	}
	keys := func() []netip.Addr {
		var out []netip.Addr
		for _, k := range wd.rm.seen["az3"].keys {
			out = append(out, k.EIP)
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return out
	}
	if got := keys(); !slices.Equal(got, []netip.Addr{eip1, eip3}) {
		t.Fatalf("silent az3 remembered %v: want [eip1 eip3]", got)
	}
	wd.rm.SetState(state([]netip.Addr{eip1, eip2, eip3, eip4}, silentPkg(eip1, eip2, eip4)))
	wd.step()
	if got := keys(); !slices.Equal(got, []netip.Addr{eip1}) {
		t.Errorf("after eip3 left the package, silent az3 remembered %v: want [eip1]", got)
	}
}

// TestRegionSilentZoneDrift: a package's only EIP drifts from az1 to az3.
// az1 then carries no packaged EIP and reports no rows, which reads as
// silent; the model says the EIP's egress is now in az3, so az1's memory
// of it is forgotten and az3 gets the whole capacity, not the capacity
// less a static split nobody enforces.
func TestRegionSilentZoneDrift(t *testing.T) {
	pkg := &model.BandwidthPackage{Name: "solo", Capacity: 120 * mbit, EIPs: []model.PackageEIP{{Address: eip1}}}
	placed := func(host, az string) *model.State {
		st := state([]netip.Addr{eip1}, pkg)
		st.Hosts[host] = &model.Host{Name: host, AZ: az}
		st.EIPs[eip1.String()].Binding = &model.Binding{Host: host, Guest: "g1"}
		return st
	}
	wd := newWorld(t, pkg)
	wd.rm.SetState(placed("az1-h1", "az1"))
	wd.set("az1", "h1", eip1, 20_000_000) // bytes/s: wants more than the capacity
	for range 10 {
		wd.step()
	}
	// The drift: the agent of az1 stops carrying it, az3's starts.
	wd.rm.SetState(placed("az3-h1", "az3"))
	delete(wd.demand, "az1/h1")
	wd.set("az3", "h1", eip1, 20_000_000)
	for range 15 {
		wd.step()
	}
	if _, ok := wd.rm.seen["az1"]; ok {
		t.Errorf("az1 still remembered after its only EIP drifted to az3: %+v", wd.rm.seen["az1"])
	}
	l, ok := limitOf(t, wd.zstore["az3"], "az3", "h1", eip1, bwstore.Egress)
	if !ok {
		t.Fatal("eip1 has no limit in az3")
	}
	if got, want := l.RateBytes, uint64(120*mbit/8); got < want*95/100 {
		t.Errorf("eip1 in az3 has %d bytes/s, want about the whole capacity %d", got, want)
	}
}

package lab

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// demoBandwidth is the demo's shared-bandwidth step: three EIPs in three
// AZs share a 100 Mbit/s package by weight 1, 1, 2 under a UDP load from
// the Internet (more than the package); then the active region manager
// is killed and the standby takes over. About 18 s (BENCHMARKS.md).
func (l *Lab) demoBandwidth(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	eips := []struct {
		addr, host, guest string
		weight            uint32
		rate              uint64
	}{
		{"198.51.100.7", "az1-h1", "az1-h1-g1", 1, 70e6},
		{"198.51.100.8", "az2-h2", "az2-h2-g1", 1, 70e6},
		{"198.51.100.9", "az3-h1", "az3-h1-g1", 2, 140e6},
	}
	const name = "demo-shared"
	pkg := &model.BandwidthPackage{Name: name, Capacity: 100e6, Description: "lab demo: three AZs share 100 Mbit/s"}
	var targets []LoadTarget
	var desc []string
	for _, e := range eips {
		w := e.weight
		pkg.EIPs = append(pkg.EIPs, model.PackageEIP{Address: netip.MustParseAddr(e.addr), Weight: &w})
		targets = append(targets, LoadTarget{EIP: e.addr, Guest: e.guest, Rate: e.rate, Flows: 64})
		desc = append(desc, fmt.Sprintf("%s on %s (weight %d)", e.addr, e.host, e.weight))
	}
	l.say("\n== 12. shared bandwidth: azgate bandwidth create %s --capacity 100M: %s", name, strings.Join(desc, ", "))
	for _, e := range eips {
		if _, err := c.BindEIP(ctx, e.addr, e.host, "g1"); err != nil {
			return err
		}
	}
	if _, err := c.Create(ctx, pkg); err != nil {
		return err
	}
	defer func() {
		c.Delete(context.WithoutCancel(ctx), model.KindBandwidthPackage, name)
		for _, e := range eips {
			c.UnbindEIP(context.WithoutCancel(ctx), e.addr)
		}
	}()
	for _, e := range eips {
		if _, err := l.WaitAnswer(ctx, "http://"+e.addr+"/", "hello from "+e.guest, 10*time.Second); err != nil {
			return err
		}
	}
	ld, err := l.StartLoad(targets)
	if err != nil {
		return err
	}
	defer ld.Stop()
	l.say("   UDP from inet: 70, 70 and 140 Mbit/s offered (64 flows each, spread over the prefix set's four edges); the guests count what arrives:")
	t0 := time.Now()
	for i := 0; i < 12 && ctx.Err() == nil; i++ {
		time.Sleep(time.Second)
		l.say("   +%2ds  %s", i+1, fmtLoadWindow(ld, time.Now().Add(-time.Second), time.Now()))
	}
	active, err := l.BWActive(ctx, BWRegionTier)
	if err != nil || active == "" {
		return fmt.Errorf("no active region bandwidth manager (%q): %v", active, err)
	}
	l.say("   kill the active region manager %s (SIGKILL); the standby takes over and the edges keep their limits meanwhile:", active)
	tk := time.Now()
	if err := l.KillBWManager(active, syscall.SIGKILL); err != nil {
		return err
	}
	var took time.Duration
	for deadline := tk.Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if h, err := l.BWActive(ctx, BWRegionTier); err == nil && h != "" && h != active {
			took = time.Since(tk)
			l.say("   %s active %v after the kill", h, took.Round(10*time.Millisecond))
			break
		}
	}
	if took == 0 {
		return fmt.Errorf("no region bandwidth manager took over within 15 s")
	}
	for time.Since(tk) < took+4*time.Second && ctx.Err() == nil {
		time.Sleep(time.Second)
		l.say("   +%4.1fs  %s", time.Since(tk).Seconds(), fmtLoadWindow(ld, time.Now().Add(-time.Second), time.Now()))
	}
	if err := l.StartBWManager(active); err != nil {
		return err
	}
	l.say("   %s restarted: the standby now (%v of load in all)", active, time.Since(t0).Round(time.Second))
	return nil
}

func fmtLoadWindow(ld *Load, from, to time.Time) string {
	r := ld.Received(from, to)
	var keys []string
	var total float64
	for k, v := range r {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "total %6.2f Mbit/s:", total/1e6)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %6.2f", k, r[k]/1e6)
	}
	return b.String()
}

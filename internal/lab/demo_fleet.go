package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"
)

// demoFleet is the fleet part of the demo: ECMP over the prefix set, a
// pull-out, a quarantine, an edge killed under traffic.
func (l *Lab) demoFleet(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	const eip = "198.51.100.8"
	url := "http://" + eip + "/"
	prefix, prefix6 := netip.MustParsePrefix(EIPPrefix), netip.MustParsePrefix(EIPPrefix6)
	all := EdgesOf(PrefixSet)

	l.say("\n== 8. ECMP over the edge set %s (POP a: edge-a1, edge-a2; POP b: edge-b1, edge-b2)", PrefixSet)
	if err := l.waitSessions(ctx, 30*time.Second); err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, prefix, all, 30*time.Second); err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, prefix6, all, 30*time.Second); err != nil {
		return err
	}
	l.say("   rtr$ ip route  ->  %s", l.routeLine(prefix))
	l.say("   rtr$ ip -6 route  ->  %s  (IPv6 over MP-BGP on the same sessions; an address of the prefix no IPv6 EIP or VIP takes ends at their discard routes)", l.routeLine(prefix6))
	if _, err := c.BindEIP(ctx, eip, "az1-h2", "g1"); err != nil {
		return err
	}
	if _, err := l.WaitAnswer(ctx, url, "hello from az1-h2-g1", 10*time.Second); err != nil {
		return err
	}
	spread, failed, err := l.SpreadByEdge(ctx, eip, url, 200)
	if err != nil {
		return err
	}
	l.say("   200 new connections to %s (%d failed); packets each edge forwarded: %s", url, failed, FormatSpread(spread))

	l.say("\n== 9. pull-out: azgate eip pullout %s --set %s (the dedicated set announces the /32; the longest prefix wins)", eip, DedicatedSet)
	if err := l.PullOut(ctx, eip, DedicatedSet); err != nil {
		return err
	}
	if err := l.showMove(ctx, eip, url, EdgesOf(DedicatedSet)); err != nil {
		return err
	}
	if err := l.PullOut(ctx, eip, ""); err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, host32(eip), nil, 10*time.Second); err != nil {
		return err
	}
	l.say("   azgate eip return %s: the /32 is withdrawn, the prefix set serves it again", eip)

	l.say("\n== 10. quarantine: azgate quarantine add %s (the quarantine set announces the /32)", eip)
	if err := l.Quarantine(ctx, eip, true); err != nil {
		return err
	}
	if err := l.showMove(ctx, eip, url, EdgesOf(QuarantineSet)); err != nil {
		return err
	}
	if err := l.Quarantine(ctx, eip, false); err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, host32(eip), nil, 10*time.Second); err != nil {
		return err
	}
	l.say("   azgate quarantine release %s: the /32 is withdrawn", eip)

	const victim = "edge-b1"
	l.say("\n== 11. kill %s (SIGKILL) under traffic: a new connection every 5 ms, and 64 UDP flows", victim)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan []Sample, 1)
	go func() { done <- l.Stream(sctx, "inet", url, 5*time.Millisecond, 2*time.Second) }()
	p, err := l.StartProbes([]string{eip + ":7000"}, 64, 5*time.Millisecond)
	if err != nil {
		stop()
		<-done
		return err
	}
	time.Sleep(time.Second)
	t0 := time.Now()
	pid, err := l.SignalRole(victim, syscall.SIGKILL)
	if err != nil {
		stop()
		<-done
		p.Stop()
		return err
	}
	rest := slices.DeleteFunc(slices.Clone(all), func(e string) bool { return e == victim })
	gone, werr := l.WaitRoute(ctx, prefix, rest, time.Duration(HoldTime)*time.Second+5*time.Second)
	time.Sleep(2 * time.Second)
	stop()
	samples := <-done
	probes := p.Stop()
	if werr != nil {
		return werr
	}
	nfail := 0
	for _, s := range samples {
		if s.Err != "" && s.Start.After(t0.Add(-time.Second)) {
			nfail++
		}
	}
	l.say("   the router dropped %s %v after the kill (hold time %d s; the kernel closed the dead process's BGP socket)",
		victim, gone.Round(time.Millisecond), HoldTime)
	l.say("   rtr$ ip route  ->  %s", l.routeLine(prefix))
	if _, err := l.WaitRoute(ctx, prefix6, rest, 5*time.Second); err != nil {
		return err
	}
	l.say("   rtr$ ip -6 route  ->  %s", l.routeLine(prefix6))
	l.say("   %d requests, %d failed; UDP: %d sent, %d lost, longest gap %v",
		len(samples), nfail, probes[0].Sent, probes[0].Lost, probes[0].Gap.Round(time.Millisecond))
	if !probes[0].FirstLoss.IsZero() {
		l.say("   (datagrams lost were sent between %v and %v after the kill, in %d of %d flows)",
			probes[0].FirstLoss.Sub(t0).Round(time.Millisecond), probes[0].LastLoss.Sub(t0).Round(time.Millisecond), probes[0].FlowsHit, probes[0].Flows)
	}
	if err := WaitGone(pid, 10*time.Second); err != nil {
		return err
	}
	if err := l.StartRole(victim); err != nil {
		return err
	}
	back, err := l.WaitRoute(ctx, prefix, all, 60*time.Second)
	if err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, prefix6, all, 10*time.Second); err != nil {
		return err
	}
	l.say("   %s restarted: announced again %v later", victim, back.Round(time.Millisecond))
	if _, err := c.UnbindEIP(ctx, eip); err != nil {
		return err
	}
	return nil
}

// showMove waits for the router to route eip's /32 to edges, and shows
// the route and who forwards a few requests.
func (l *Lab) showMove(ctx context.Context, eip, url string, edges []string) error {
	d, err := l.WaitRoute(ctx, host32(eip), edges, 10*time.Second)
	if err != nil {
		return err
	}
	l.say("   rtr$ ip route  ->  %s  (%v after the call)", l.routeLine(host32(eip)), d.Round(time.Millisecond))
	spread, failed, err := l.SpreadByEdge(ctx, eip, url, 50)
	if err != nil {
		return err
	}
	l.say("   50 new connections (%d failed); packets each edge forwarded: %s", failed, FormatSpread(spread))
	return nil
}

// routeLine is the router's route to p, as "P via EDGE, EDGE".
func (l *Lab) routeLine(p netip.Prefix) string {
	rs, err := l.RouterRoutes()
	if err != nil {
		return err.Error()
	}
	if len(rs[p]) == 0 {
		return fmt.Sprintf("no route to %v", p)
	}
	return fmt.Sprintf("%v via %s", p, strings.Join(rs[p], ", "))
}

// waitSessions waits until the router has an established BGP session
// with every edge.
func (l *Lab) waitSessions(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last map[string]string
	for {
		st, err := l.Sessions(ctx)
		if err == nil {
			last = st
			up := 0
			for _, e := range Edges {
				if st[e.Name] == "Established" {
					up++
				}
			}
			if up == len(Edges) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BGP sessions of the router after %v: %v (want every edge Established; logs in %s)", timeout, last, l.logDir())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

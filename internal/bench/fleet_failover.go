package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/azgate/azgate/internal/lab"
)

// FleetFailoverOptions tune `azgate-lab bench fleet --only failover`.
type FleetFailoverOptions struct {
	Binary string // azgate binary for the lab's roles (default: lab.DefaultBinary)
	// Causes to measure (default: every one, lab.Causes).
	Causes []string
	// Edge put through each failure (default edge-b1, a member of the
	// prefix set in POP b).
	Edge string
	// Conns long-lived TCP connections spread over the EIP, the encap and
	// the nat service (default 300); Flows UDP probe flows per target
	// (default 32), one datagram each Interval (default 10 ms): the gap's
	// resolution.
	Conns    int
	Flows    int
	Interval time.Duration
	Out      func(format string, a ...any)
}

// FleetFailover measures, for each failure cause, the traffic gap and the
// datagrams lost while the router's ECMP route drops a member of the
// prefix set and while it takes it back, with long-lived connections open
// through an EIP, an encap and a nat service. The figures depend on the
// lab's BGP timers (hold 3 s, keepalive 1 s), which every line's note
// repeats.
func FleetFailover(ctx context.Context, o FleetFailoverOptions) ([]Result, error) {
	if len(o.Causes) == 0 {
		o.Causes = lab.Causes
	}
	if o.Edge == "" {
		o.Edge = "edge-b1"
	}
	if o.Conns == 0 {
		o.Conns = 300
	}
	if o.Flows == 0 {
		o.Flows = 32
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	say := o.Out
	if say == nil {
		say = func(string, ...any) {}
	}
	cfg := benchLab(o.Binary)
	if err := cfg.CheckBinaries(); err != nil {
		return nil, err
	}
	lab.Down(cfg)
	say("bringing up a lab (prefix %s)", cfg.Prefix)
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer lab.Down(cfg)
	c, err := l.Client()
	if err != nil {
		return nil, err
	}
	const eip = "198.51.100.7"
	if _, err := c.BindEIP(ctx, eip, "az2-h1", "g2"); err != nil {
		return nil, err
	}
	if err := l.PutFleetServices(ctx); err != nil {
		return nil, err
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", "hello from az2-h1-g2", 20*time.Second); err != nil {
		return nil, err
	}
	targets := []string{eip + ":7000", lab.FleetVIP + ":7000", lab.FleetNATVIP + ":7000"}
	var conns *lab.Conns
	deadline := time.Now().Add(30 * time.Second)
	for {
		conns, err = l.OpenConns(ctx, targets, (o.Conns+len(targets)-1)/len(targets), time.Second)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return nil, err
	}
	defer conns.Close()
	hold := float64(lab.HoldTime * 1000)
	timers := fmt.Sprintf("BGP hold %d s, keepalive %d s", lab.HoldTime, lab.Keepalive)
	targetOf := map[string]string{
		lab.CauseDrain:    "0 lost packets",
		lab.CauseSIGTERM:  "0 lost packets",
		lab.CauseLinkDown: "<= 100 ms",
		lab.CauseSIGKILL:  fmt.Sprintf("<= hold + 200 ms = %d ms", lab.HoldTime*1000+200),
		lab.CauseHang:     fmt.Sprintf("<= hold + 200 ms = %d ms", lab.HoldTime*1000+200),
	}
	var rs []Result
	for _, cause := range o.Causes {
		say("failover: %s %s (%d connections, %d probe flows per target every %v)", cause, o.Edge, conns.Len(), o.Flows, o.Interval)
		r, err := l.MeasureFailover(ctx, lab.FailoverOptions{Edge: o.Edge, Cause: cause, ProbeTargets: targets,
			Flows: o.Flows, Interval: o.Interval, Conns: conns})
		if err != nil {
			return rs, fmt.Errorf("failover %s: %w", cause, err)
		}
		var sent uint64
		for _, p := range r.Probes {
			sent += p.Sent
		}
		gap := float64(r.Gap()) / 1e6
		rs = append(rs, Result{Suite: "fleet", Name: "failover gap, " + cause, Value: gap, Unit: "ms",
			Baseline: "BGP hold time", BaselineValue: hold, Ratio: gap / hold, Target: targetOf[cause],
			Note: fmt.Sprintf("%s; %s: route withdrawn after %.0f ms; %d of %d probe datagrams lost (resolution %v), %d of %d flows never recovered in the phase (gap then a lower bound); %d of %d connections lost; return: rejoined after %.0f ms, gap %.0f ms, %d lost",
				timers, o.Edge, float64(r.Withdrawn)/1e6, r.Lost(), sent, o.Interval, r.Unrecovered(), o.Flows*len(targets), r.LostConns(), conns.Len(),
				float64(r.Rejoined)/1e6, float64(r.ReturnGap())/1e6, r.ReturnLost())},
			Result{Suite: "fleet", Name: "failover lost datagrams, " + cause, Value: float64(r.Lost()), Unit: "datagrams", Target: targetOf[cause]},
		)
	}
	return rs, nil
}

package e2e

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// DDoS test settings: thresholds far below what the floods send and far
// above the client's traffic, a short cool-down.
const (
	ddosPPS      = "5000"
	ddosSYN      = "2000"
	ddosCooldown = 2 * time.Second
	floodPPS     = 20_000 // what the 2-core machine forwards through the lab with room to spare
	floodFor     = 5 * time.Second
)

// TestDDoSQuarantine: a SYN flood, then a UDP flood, from the attacker
// namespace at one EIP, while a client fetches another EIP of the same
// edge set in a loop. Each flood gets the attacked EIP quarantined (by
// ddos) within 2 s of its start, its /32 announced by the quarantine set
// only; it is released once the flood stopped and the cool-down passed.
// The client keeps at least 99 % of its requests; the other EIP is never
// quarantined; the decisions are events naming the figures.
func TestDDoSQuarantine(t *testing.T) {
	l := upLabWith(t, func(c *lab.Config) {
		c.ControllerArgs = []string{"--ddos-pps", ddosPPS, "--ddos-syn", ddosSYN, "--ddos-cooldown", ddosCooldown.String()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	const victim, bystander = "198.51.100.7", "198.51.100.8"
	if _, err := c.BindEIP(ctx, victim, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BindEIP(ctx, bystander, "az1-h2", "g1"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{victim, bystander} {
		if err := waitGet(ctx, l, "http://"+a+"/", 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// The legitimate client: one request (a new TCP connection) after
	// another, for the whole test.
	var ok, failed atomic.Int64
	var firstErrs sync.Map
	cctx, stopClient := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		for cctx.Err() == nil {
			if _, err := l.Get(cctx, "inet", "http://"+bystander+"/", 2*time.Second); err != nil {
				if cctx.Err() != nil {
					return
				}
				failed.Add(1)
				firstErrs.LoadOrStore(err.Error(), time.Now())
			} else {
				ok.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { stopClient(); cwg.Wait() }()

	victim32 := netip.PrefixFrom(netip.MustParseAddr(victim), 32)
	for _, kind := range []string{lab.FloodSYN, lab.FloodUDP} {
		t.Run(kind+" flood", func(t *testing.T) {
			spec := lab.FloodSpec{Kind: kind, Dst: netip.MustParseAddr(victim), Port: 81, PPS: floodPPS, Duration: floodFor, Payload: 64}
			if kind == lab.FloodUDP {
				spec.Port = 9
			}
			var st lab.FloodStats
			var ferr error
			done := make(chan struct{})
			t0 := time.Now()
			go func() {
				defer close(done)
				st, ferr = l.Flood(ctx, lab.AttackerNode, spec)
			}()
			q, tq := waitQuarantine(ctx, c, victim, true, 10*time.Second)
			if q == nil {
				t.Fatalf("%s not quarantined within 10 s of the flood starting", victim)
			}
			_, err := l.WaitRoute(ctx, victim32, lab.EdgesOf(lab.QuarantineSet), 10*time.Second)
			tr := time.Since(t0) // the route's move, from the flood's start
			if err != nil {
				t.Error(err)
			}
			t.Logf("quarantined %v after the flood started (route via %v at %v): %s", tq.Sub(t0).Round(time.Millisecond),
				lab.EdgesOf(lab.QuarantineSet), tr.Round(time.Millisecond), q.Reason)
			if d := tq.Sub(t0); d > 2*time.Second {
				t.Errorf("quarantined %v after the flood started, want within 2 s", d)
			}
			if q.By != "ddos" {
				t.Errorf("quarantine by %q, want ddos", q.By)
			}
			want := "pps "
			if kind == lab.FloodSYN {
				want = "SYN/s "
			}
			if !strings.Contains(q.Reason, want) {
				t.Errorf("reason %q does not name the %s figures", q.Reason, want)
			}
			<-done
			if ferr != nil {
				t.Fatal(ferr)
			}
			t.Logf("flood: %d packets in %v (%d send errors)", st.Sent, st.Ended.Sub(st.Started).Round(time.Millisecond), st.Errors)
			if _, tg := waitQuarantine(ctx, c, victim, false, 20*time.Second); tg.IsZero() {
				t.Fatalf("%s still quarantined 20 s after the flood stopped", victim)
			} else {
				d := tg.Sub(st.Ended)
				t.Logf("released %v after the flood stopped (cool-down %v)", d.Round(time.Millisecond), ddosCooldown)
				if d < ddosCooldown {
					t.Errorf("released %v after the flood stopped, before the %v cool-down", d, ddosCooldown)
				}
			}
			if _, err := l.WaitRoute(ctx, victim32, nil, 10*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	stopClient()
	cwg.Wait()
	n, f := ok.Load(), failed.Load()
	t.Logf("client: %d requests to %s, %d failed", n+f, bystander, f)
	firstErrs.Range(func(k, v any) bool {
		t.Logf("client error at %v: %v", v.(time.Time).Format(time.TimeOnly), k)
		return true
	})
	if n+f < 100 || float64(n) < 0.99*float64(n+f) {
		t.Errorf("client kept %d of %d requests, want at least 99 %%", n, n+f)
	}
	ev, err := c.DDoSEvents(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ev.Events {
		got = append(got, e.Action+" "+e.Address.String())
		t.Logf("event %d %s %s: %.0f pps %.0f SYN/s over %d edges: %s", e.Seq, e.Action, e.Address, e.PPS, e.SYNPS, e.Edges, e.Reason)
	}
	want := "quarantine " + victim + ",release " + victim + ",quarantine " + victim + ",release " + victim
	if strings.Join(got, ",") != want {
		t.Errorf("events %v, want %s", got, want)
	}
}

// waitGet fetches url from inet until it answers.
func waitGet(ctx context.Context, l *lab.Lab, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := l.Get(ctx, "inet", url, time.Second)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitQuarantine polls the address's quarantine until it exists (on) or
// is gone; it returns it (when on) and when that was first seen (zero on
// timeout).
func waitQuarantine(ctx context.Context, c *client.Client, addr string, on bool, timeout time.Duration) (*model.Quarantine, time.Time) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		o, err := c.Get(ctx, model.KindQuarantine, addr)
		now := time.Now()
		if on && err == nil {
			return o.(*model.Quarantine), now
		}
		if !on && client.IsNotFound(err) {
			return nil, now
		}
		time.Sleep(25 * time.Millisecond)
	}
	return nil, time.Time{}
}

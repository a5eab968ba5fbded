package lab

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// DriftReport is what a stream of requests saw while an EIP moved.
type DriftReport struct {
	EIP      string `json:"eip"`
	From     string `json:"from"`
	To       string `json:"to"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	// Answered by the old guest after the API call returned, and by the
	// new one: together they show traffic following the EIP.
	OldAfterMove int `json:"old_after_move"`
	NewAnswers   int `json:"new_answers"`
	// FirstNew is the time from the bind call returning to the first
	// request that started afterwards and was answered by the new guest.
	FirstNew time.Duration `json:"first_new_ns"`
	// LastOld is how long after the call returned the last request that
	// the old guest answered started.
	LastOld time.Duration `json:"last_old_ns"`
	// FailureWindow spans the starts of the first and the last failed
	// request (0: none): how long a new request could fail. A request in
	// flight at the move can still time out later (client timeout).
	FailureWindow time.Duration `json:"failure_window_ns"`
	// LastFailStart is when, relative to the bind call returning, the
	// last failed request started (negative: before the call returned).
	LastFailStart time.Duration `json:"last_fail_start_ns"`
	BindCall      time.Duration `json:"bind_call_ns"`
	Errors        []string      `json:"errors,omitempty"`
}

// Drift streams requests to eip (IPv4 or IPv6) from the Internet node, moves the EIP to
// toHost/toGuest with one API call halfway through and reports what the
// stream saw.
func (l *Lab) Drift(ctx context.Context, eip, toHost, toGuest string, before, after, interval time.Duration) (DriftReport, error) {
	c, err := l.Client()
	if err != nil {
		return DriftReport{}, err
	}
	cur, err := c.GetEIP(ctx, eip)
	if err != nil {
		return DriftReport{}, err
	}
	rep := DriftReport{EIP: eip, To: toHost + "/" + toGuest}
	if cur.Binding != nil {
		rep.From = cur.Binding.Host + "/" + cur.Binding.Guest
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan []Sample, 1)
	url := EIPURL(eip)
	go func() { done <- l.Stream(sctx, "inet", url, interval, time.Second) }()
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(before):
	}
	t0 := time.Now()
	if _, err := c.BindEIP(ctx, eip, toHost, toGuest); err != nil {
		cancel()
		<-done
		return rep, fmt.Errorf("bind %s to %s/%s: %w", eip, toHost, toGuest, err)
	}
	t1 := time.Now()
	rep.BindCall = t1.Sub(t0)
	select {
	case <-ctx.Done():
	case <-time.After(after):
	}
	cancel()
	samples := <-done
	sort.Slice(samples, func(i, j int) bool { return samples[i].Start.Before(samples[j].Start) })
	wantNew := "hello from " + toHost + "-" + toGuest
	var firstFail, lastFail time.Time
	errs := map[string]int{}
	for _, s := range samples {
		rep.Requests++
		switch {
		case s.Err != "":
			rep.Failed++
			errs[s.Err]++
			if firstFail.IsZero() {
				firstFail = s.Start
			}
			lastFail = s.Start
		case s.Answer == wantNew:
			rep.NewAnswers++
			if s.Start.After(t1) && rep.FirstNew == 0 {
				rep.FirstNew = s.End.Sub(t1)
			}
		case s.Start.After(t1):
			rep.OldAfterMove++
			rep.LastOld = s.Start.Sub(t1)
		}
	}
	if !firstFail.IsZero() {
		rep.FailureWindow = lastFail.Sub(firstFail)
		rep.LastFailStart = lastFail.Sub(t1)
	}
	for e, n := range errs {
		rep.Errors = append(rep.Errors, fmt.Sprintf("%d× %s", n, e))
	}
	sort.Strings(rep.Errors)
	return rep, nil
}

// demoEIP6 is the demo's IPv6 step: the lab's EIPs, an IPv6 EIP bound to
// the dual-stack guest az1-h1/g1 (translated to its address6), reached
// from the Internet client over IPv6, drifted to AZ 3 under a stream of
// requests as step 2 drifts the IPv4 one, and unbound.
func (l *Lab) demoEIP6(ctx context.Context, c *client.Client) error {
	eip := EIPs6[0]
	url := EIPURL(eip)
	l.say("\n== 4b. an IPv6 EIP: bind %s to az1-h1/g1 (address6 %v; the edges encapsulate it over the IPv4 underlay, the agent translates it, NAT66)", eip, GuestAddr6(1, 1, 1))
	if es, err := c.EIPs(ctx); err == nil {
		l.say("   the lab's EIPs (azgate eip list):")
		for _, line := range EIPLines(es, MaxEIPLines) {
			l.say("     %s", line)
		}
	}
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		return err
	}
	body, err := l.WaitAnswer(ctx, url, "hello from az1-h1-g1", 10*time.Second)
	if err != nil {
		return err
	}
	l.say("   inet$ curl -6 %s  ->  %q", url, body)
	rep, err := l.Drift(ctx, eip, "az3-h1", "g1", 2*time.Second, 3*time.Second, 2*time.Millisecond)
	if err != nil {
		return err
	}
	l.say("   drift to az3-h1/g1 under a stream (one request every 2ms): %d requests, %d failed, the last started %v after the call returned; first answer from az3-h1-g1 %v after it",
		rep.Requests, rep.Failed, rep.LastFailStart.Round(time.Millisecond), rep.FirstNew.Round(time.Millisecond))
	for _, e := range rep.Errors {
		l.say("   error: %s", e)
	}
	if _, err := c.UnbindEIP(ctx, eip); err != nil {
		return err
	}
	l.say("   unbound (azgate eip unbind %s)", eip)
	return nil
}

// EIPURL is the URL of the HTTP server behind an EIP, IPv4 or IPv6
// (bracketed: http://[2001:db8:e1::7]/).
func EIPURL(eip string) string {
	if a, err := netip.ParseAddr(eip); err == nil && a.Is6() {
		return "http://[" + a.String() + "]/"
	}
	return "http://" + eip + "/"
}

// Demo runs the README's scenario on a lab that is up.
func (l *Lab) Demo(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	const eip = "198.51.100.7"
	url := "http://" + eip + "/"
	l.say("\n== 1. bind EIP %s to guest g1 on az1-h1 (azgate eip bind %s --host az1-h1 --guest g1)", eip, eip)
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		return err
	}
	body, err := l.WaitAnswer(ctx, url, "hello from az1-h1-g1", 10*time.Second)
	if err != nil {
		return err
	}
	l.say("   inet$ curl %s  ->  %q", url, body)

	l.say("\n== 2. drift the EIP to AZ 3 (az3-h1/g1) with one API call, under a stream of requests (one every 2ms)")
	rep, err := l.Drift(ctx, eip, "az3-h1", "g1", 2*time.Second, 3*time.Second, 2*time.Millisecond)
	if err != nil {
		return err
	}
	l.say("   %d requests (new TCP connection each), %d failed; failed requests started within %v of each other, the last %v after the call returned",
		rep.Requests, rep.Failed, rep.FailureWindow.Round(time.Millisecond), rep.LastFailStart.Round(time.Millisecond))
	l.say("   bind call took %v; first answer from az3-h1-g1 %v after it returned; %d answers from the old guest after the call",
		rep.BindCall.Round(time.Millisecond), rep.FirstNew.Round(time.Millisecond), rep.OldAfterMove)
	l.say("   (make-before-break, docs/eip.md: each edge sends every packet to the old guest for its --drift-delay, then new connections to az3-h1/g1 and the open ones' segments to az1-h1/g1, whose agent drains the EIP for the controller's --drift-grace)")
	for _, e := range rep.Errors {
		l.say("   error: %s", e)
	}
	body, err = l.Get(ctx, "inet", url, 2*time.Second)
	if err != nil {
		return err
	}
	l.say("   inet$ curl %s  ->  %q", url, body)

	l.say("\n== 3. per-EIP counters on the edges (the router spreads connections over the set's members; replies leave by any member)")
	if st, err := l.NodeStatuses(ctx); err == nil {
		for _, n := range l.Topo.NodesByRole("edge") {
			e, ok := st[n.Name]
			if !ok {
				continue
			}
			ec := e.EIPs[eip]
			l.say("   %s %s: rx %d packets / %d bytes, tx %d packets / %d bytes; encap_tx %d decap_tx %d",
				n.Name, eip, ec.RxPackets, ec.RxBytes, ec.TxPackets, ec.TxBytes, e.Counters["encap_tx"].Packets, e.Counters["decap_tx"].Packets)
		}
	}

	l.say("\n== 4. unbind: the EIP stops answering")
	if _, err := c.UnbindEIP(ctx, eip); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := l.Get(ctx, "inet", url, 500*time.Millisecond)
		if err != nil {
			l.say("   inet$ curl %s  ->  %v", url, err)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still answers 5s after unbind", eip)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := l.demoEIP6(ctx, c); err != nil {
		return err
	}
	if err := l.demoServices(ctx); err != nil {
		return err
	}
	if err := l.demoFleet(ctx); err != nil {
		return err
	}
	if err := l.demoBandwidth(ctx); err != nil {
		return err
	}
	l.say("\nDone. Poke around: azgate-lab lab status; azgate status; azgate service status web;")
	l.say("azgate service lookup web --flow tcp:203.0.113.10:40000-198.51.100.20:80; azgate-lab lab exec inet -- curl -s http://198.51.100.20/")
	return nil
}

// Lab services of the demo.
const (
	DemoVIP    = "198.51.100.20"   // encap: 80 -> pool web, 443 -> pool tls
	DemoVIP6   = "2001:db8:e1::20" // encap, IPv6: the same pools (from EIPPrefix6)
	DemoNATVIP = "198.51.100.30"   // nat: 80 -> the DMZ servers
	// DemoNATVIP6 is the IPv6 nat VIP (NATPinned6): 80 -> the DMZ
	// servers' IPv6 addresses.
	DemoNATVIP6 = "2001:db8:e1::30"
)

func (l *Lab) demoServices(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	check := &model.HealthCheck{Type: "http", Path: "/", Interval: model.Duration(500 * time.Millisecond), Rise: 2, Fall: 2}
	var web, tls []model.Backend
	for az := 1; az <= l.Cfg.AZs; az++ {
		web = append(web, model.Backend{Host: HostName(az, 1), Guest: "g1"})
		tls = append(tls, model.Backend{Host: HostName(az, min(2, l.Cfg.HostsPerAZ)), Guest: "g2"})
	}
	svc := &model.Service{Name: "web", VIP: netip.MustParseAddr(DemoVIP), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "tcp", Port: 443, Pool: "tls"}},
		Pools:     []model.Pool{{Name: "web", Backends: web, Health: check}, {Name: "tls", Backends: tls, Health: check}}}
	l.say("\n== 5. a load-balanced service: VIP %s, port 80 -> pool web (g1 of az1-h1, az2-h1, az3-h1), 443 -> pool tls (g2 of the h2 hosts)", DemoVIP)
	l.say("   azgate service create web --vip %s --mode encap --listener tcp:80=web --listener tcp:443=tls --backend web=az1-h1/g1 ... --health web=http:/", DemoVIP)
	if _, err := c.PutService(ctx, svc); err != nil {
		return err
	}
	if err := l.waitTables(ctx, c, "web", 20*time.Second); err != nil {
		return err
	}
	for _, port := range []string{"", ":443"} {
		url := "http://" + DemoVIP + port + "/"
		if _, err := l.WaitAnswer(ctx, url, "", 10*time.Second); err != nil {
			return err
		}
		l.say("   10 new connections to %s: %s", url, l.spread(ctx, url, 10))
	}

	svc6 := &model.Service{Name: "web6", VIP: netip.MustParseAddr(DemoVIP6), Mode: model.ModeEncap, Listeners: svc.Listeners, Pools: svc.Pools}
	l.say("\n== 5b. the same pools behind an IPv6 VIP %s: the edges tunnel it over the IPv4 underlay to the same backend slots, the agents translate it to the guests' address6", DemoVIP6)
	l.say("   azgate service create web6 --vip %s --mode encap --listener tcp:80=web --listener tcp:443=tls ...", DemoVIP6)
	if _, err := c.PutService(ctx, svc6); err != nil {
		return err
	}
	if err := l.waitTables(ctx, c, "web6", 20*time.Second); err != nil {
		return err
	}
	url6 := "http://[" + DemoVIP6 + "]/"
	if _, err := l.WaitAnswer(ctx, url6, "", 10*time.Second); err != nil {
		return err
	}
	l.say("   10 new connections to %s: %s", url6, l.spread(ctx, url6, 10))

	l.say("\n== 6. a backend fails: stop the server of az2-h1-g1")
	if err := l.StopServer("az2-h1-g1"); err != nil {
		return err
	}
	t0 := time.Now()
	if err := l.waitHealth(ctx, c, "web", "web", "az2-h1/g1", true, 20*time.Second); err != nil {
		return err
	}
	l.say("   marked down by the edge's health checks and programmed %v later (the table repoints only its slots)", time.Since(t0).Round(100*time.Millisecond))
	l.say("   (the checks travel the NVGRE tunnel from %s: az1-h1-g1 has the same private address %v and stays up)", EdgeHealth, GuestAddr(1, 1, 1))
	l.say("   10 new connections to http://%s/: %s", DemoVIP, l.spread(ctx, "http://"+DemoVIP+"/", 10))
	if err := l.waitHealth(ctx, c, "web6", "web", "az2-h1/g1", true, 20*time.Second); err != nil {
		return err
	}
	l.say("   and to %s (web6's own checks): %s", url6, l.spread(ctx, url6, 10))
	if err := l.StartServer("az2-h1-g1"); err != nil {
		return err
	}
	if err := l.waitHealth(ctx, c, "web", "web", "az2-h1/g1", false, 20*time.Second); err != nil {
		return err
	}
	l.say("   server back: marked up again")

	var dmz []model.Backend
	for i := 1; i <= DMZServers; i++ {
		dmz = append(dmz, model.Backend{Address: DMZAddr(i)})
	}
	nat := &model.Service{Name: "dmz", VIP: netip.MustParseAddr(DemoNATVIP), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}}, Pools: []model.Pool{{Name: "web", Backends: dmz}}}
	l.say("\n== 7. nat mode: VIP %s -> plain servers dmz1..dmz3 that know nothing of tunnels (DNAT in, SNAT back)", DemoNATVIP)
	if _, err := c.PutService(ctx, nat); err != nil {
		return err
	}
	url := "http://" + DemoNATVIP + "/"
	if _, err := l.WaitAnswer(ctx, url, "", 10*time.Second); err != nil {
		return err
	}
	l.say("   10 new connections to %s: %s", url, l.spread(ctx, url, 10))

	var dmz6 []model.Backend
	for i := 1; i <= DMZServers; i++ {
		dmz6 = append(dmz6, model.Backend{Address: DMZAddr6(i)})
	}
	nat6 := &model.Service{Name: "dmz6", VIP: netip.MustParseAddr(DemoNATVIP6), Mode: model.ModeNAT,
		Listeners: nat.Listeners, Pools: []model.Pool{{Name: "web", Backends: dmz6}}}
	l.say("\n== 7b. nat mode over IPv6: VIP %s -> the same servers' IPv6 addresses (DNAT66 in, SNAT66 back); the set's NDP owner answers for the VIP and the servers' gateway %s", DemoNATVIP6, DMZGateway6)
	l.say("   azgate service create dmz6 --vip %s --mode nat --listener tcp:80=web --backend web=%v ...", DemoNATVIP6, DMZAddr6(1))
	if _, err := c.PutService(ctx, nat6); err != nil {
		return err
	}
	url6 = "http://[" + DemoNATVIP6 + "]/"
	if _, err := l.WaitAnswer(ctx, url6, "", 10*time.Second); err != nil {
		return err
	}
	l.say("   10 new connections to %s: %s", url6, l.spread(ctx, url6, 10))
	return nil
}

// spread fetches url n times (a new connection each) and summarises who
// answered.
func (l *Lab) spread(ctx context.Context, url string, n int) string {
	got := map[string]int{}
	for i := 0; i < n; i++ {
		body, err := l.Get(ctx, "inet", url, 2*time.Second)
		if err != nil {
			body = "error: " + err.Error()
		}
		got[strings.TrimPrefix(body, "hello from ")]++
	}
	var parts []string
	for k, v := range got {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// waitHealth waits until the controller's verdict on a backend is down
// (or up) and every edge holds a table that reflects it.
func (l *Lab) waitHealth(ctx context.Context, c *client.Client, svc, pool, key string, down bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st, err := c.ServiceStatus(ctx, svc)
		if err == nil && (st.Health != nil && st.Health.IsDown(pool, key)) == down {
			for _, p := range st.Pools {
				if p.Name != pool || !p.Agree || len(p.Tables) == 0 {
					continue
				}
				healthy := p.Tables[0].Backends
				if down {
					healthy--
				}
				if p.Tables[0].Healthy == healthy {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s/%s %s: not marked down=%v within %v", svc, pool, key, down, timeout)
}

// waitTables waits until every edge holds every pool of a service with
// all its backends healthy and the same table: with several edges, the
// checks' first verdicts (backends start down until they rise) reach the
// edges' tables at different times.
func (l *Lab) waitTables(ctx context.Context, c *client.Client, svc string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		st, err := c.ServiceStatus(ctx, svc)
		if err != nil {
			why = err.Error()
		} else {
			why = ""
			for _, p := range st.Pools {
				if !p.Agree {
					why = fmt.Sprintf("pool %s: the edges' tables differ", p.Name)
				}
				for _, t := range p.Tables {
					if t.Missing != "" || t.Healthy != t.Backends {
						why = fmt.Sprintf("pool %s: %s has %d of %d backends healthy (%s)", p.Name, t.Edge, t.Healthy, t.Backends, t.Missing)
					}
				}
			}
			if why == "" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("service %s not served by every edge within %v: %s", svc, timeout, why)
}

// WaitAnswer fetches url from the Internet node until it answers want
// (any answer if want is empty).
func (l *Lab) WaitAnswer(ctx context.Context, url, want string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last string
	var lastErr error
	for time.Now().Before(deadline) {
		body, err := l.Get(ctx, "inet", url, time.Second)
		if err == nil && (body == want || want == "") {
			return body, nil
		}
		last, lastErr = body, err
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("%s did not answer %q within %v (last: %q, %v)", url, want, timeout, last, lastErr)
}

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
)

const (
	vipWeb  = "198.51.100.20" // encap: 80 -> web (g1 guests), 443 -> tls (g2 guests), 7000 -> echo
	vipDMZ  = "198.51.100.30" // nat: 80 -> the DMZ servers, udp 5353 -> nothing listening
	vipDMZ2 = "198.51.100.31" // nat: 8080 -> the same DMZ servers' port 80
	// encap, IPv6 (issue 21): 80 -> web (g1 guests of the h1 hosts), 443
	// -> tls (g2 guests of the h2 hosts), 7000 -> echo (g1 of every
	// host), as vipWeb; from the prefix set's IPv6 prefix (lab.EIPPrefix6)
	vipWeb6 = "2001:db8:e1::20"
	vipDMZ6 = "2001:db8:e1::30" // nat, IPv6: 80 -> the DMZ servers' IPv6 addresses (lab.NATPinned6)
)

func encapBackends(guest string, hosts ...string) []model.Backend {
	var out []model.Backend
	for _, h := range hosts {
		out = append(out, model.Backend{Host: h, Guest: guest})
	}
	return out
}

var allHosts = []string{"az1-h1", "az2-h1", "az3-h1", "az1-h2", "az2-h2", "az3-h2"}

func services(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	web := &model.Service{Name: "web", VIP: netip.MustParseAddr(vipWeb), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "tcp", Port: 443, Pool: "tls"}, {Protocol: "tcp", Port: 7000, Pool: "echo"}},
		Pools: []model.Pool{
			{Name: "web", Backends: encapBackends("g1", "az1-h1", "az2-h1", "az3-h1")},
			{Name: "tls", Backends: encapBackends("g2", "az1-h2", "az2-h2", "az3-h2")},
			{Name: "echo", Backends: encapBackends("g1", allHosts...),
				Health: &model.HealthCheck{Type: "tcp", Interval: model.Duration(300 * time.Millisecond), Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 2}},
		}}
	var dmz []model.Backend
	for i := 1; i <= lab.DMZServers; i++ {
		dmz = append(dmz, model.Backend{Address: lab.DMZAddr(i)})
	}
	nat := &model.Service{Name: "dmz", VIP: netip.MustParseAddr(vipDMZ), Mode: model.ModeNAT,
		// udp:5353 keeps its port: nothing listens there, so the DMZ
		// servers answer with ICMP port unreachable.
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "udp", Port: 5353, Pool: "web"}},
		// Health-checked: the checks' answers come back to the edges
		// from the backends' service port and must not be taken for
		// replies to translate.
		Pools: []model.Pool{{Name: "web", Backends: dmz,
			Health: &model.HealthCheck{Type: "http", Path: "/", Interval: model.Duration(300 * time.Millisecond), Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 2}}}}
	// The same DMZ servers' port 80 behind a second VIP, on port 8080:
	// nat replies go by their connection, so one backend:port serves both.
	var dmz80 []model.Backend
	for _, b := range dmz {
		b.Port = 80
		dmz80 = append(dmz80, b)
	}
	nat2 := &model.Service{Name: "dmz2", VIP: netip.MustParseAddr(vipDMZ2), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 8080, Pool: "web"}}, Pools: []model.Pool{{Name: "web", Backends: dmz80}}}
	// The same pools behind an IPv6 VIP: the edges tunnel it over the
	// IPv4 underlay to the same backend slots, the agents translate it to
	// the guests' address6.
	web6 := &model.Service{Name: "web6", VIP: netip.MustParseAddr(vipWeb6), Mode: model.ModeEncap,
		Listeners: web.Listeners, Pools: web.Pools}
	// The DMZ servers behind an IPv6 nat VIP: DNAT66 to their IPv6
	// addresses, health-checked there, the set's NDP owner answering for
	// the VIP and the servers' IPv6 gateway.
	var dmz6 []model.Backend
	for i := 1; i <= lab.DMZServers; i++ {
		dmz6 = append(dmz6, model.Backend{Address: lab.DMZAddr6(i)})
	}
	nat6 := &model.Service{Name: "dmz6", VIP: netip.MustParseAddr(vipDMZ6), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: dmz6, Health: nat.Pools[0].Health}}}
	for _, s := range []*model.Service{web, nat, nat2, web6, nat6} {
		if _, err := c.PutService(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

// answers fetches url n times and counts the answers by body.
func answers(t *testing.T, ctx context.Context, l *lab.Lab, url string, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for i := 0; i < n; i++ {
		body, err := l.Get(ctx, "inet", url, 2*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		out[body]++
	}
	return out
}

func TestServices(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	services(t, ctx, c)
	waitServing(t, ctx, l, "http://"+vipWeb+"/")

	t.Run("port dispatch 80 and 443", func(t *testing.T) { checkDispatch(t, ctx, l, "http://"+vipWeb) })

	t.Run("nat mode with plain backends", func(t *testing.T) { natPlain(t, ctx, l, c, "dmz", "http://"+vipDMZ+"/") })
	t.Run("IPv6 nat mode with plain backends", func(t *testing.T) { natPlain(t, ctx, l, c, "dmz6", "http://["+vipDMZ6+"]/") })

	t.Run("nat is stateful: two VIPs on one backend port, own connections, ICMP errors", func(t *testing.T) {
		// One backend:port (each DMZ server's :80) serves vipDMZ:80 and
		// vipDMZ2:8080; every reply leaves from its own connection's VIP.
		waitServing(t, ctx, l, "http://"+vipDMZ2+":8080/")
		for _, url := range []string{"http://" + vipDMZ + "/", "http://" + vipDMZ2 + ":8080/"} {
			got := answers(t, ctx, l, url, 20)
			for body := range got {
				if !strings.HasPrefix(body, "hello from dmz") {
					t.Errorf("%s answered by %q", url, body)
				}
			}
			t.Logf("%s: %v", url, got)
		}

		// A DMZ server's own datagram from a service port (udp 5353, a
		// listener's port) to the client is its own: it arrives from the
		// server's address, not translated to the VIP.
		inetNS := l.Topo.Node("inet").Netns
		var pc net.PacketConn
		if err := netns.Do(inetNS, func() error {
			var err error
			pc, err = net.ListenPacket("udp4", lab.ClientAddr+":9999")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		dmzNS := l.Topo.Node("dmz1").Netns
		if err := netns.Do(dmzNS, func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: lab.DMZAddr(1).AsSlice(), Port: 5353}, &net.UDPAddr{IP: net.ParseIP(lab.ClientAddr), Port: 9999})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("own"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("the DMZ server's own datagram did not arrive: %v", err)
		}
		if want := lab.DMZAddr(1).String() + ":5353"; from.String() != want || string(buf[:n]) != "own" {
			t.Fatalf("own datagram arrived from %v (%q), want %s untranslated", from, buf[:n], want)
		}

		// A datagram to udp:5353 of the VIP reaches a DMZ server where
		// nothing listens: its ICMP port unreachable comes back from the
		// VIP, quote translated, so the client's connected socket sees
		// the refusal.
		var uc net.Conn
		if err := netns.Do(inetNS, func() error {
			var err error
			uc, err = net.Dial("udp4", vipDMZ+":5353")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		refused := false
		for i := 0; i < 5 && !refused; i++ {
			uc.Write([]byte("ping"))
			uc.SetReadDeadline(time.Now().Add(time.Second))
			_, err := uc.Read(buf)
			refused = err != nil && strings.Contains(err.Error(), "connection refused")
			if !refused {
				t.Logf("try %d: %v", i, err)
			}
		}
		if !refused {
			t.Fatal("no ICMP port unreachable reached the client's socket for the VIP: the error was not translated back")
		}
	})

	t.Run("long-lived connections: a failure breaks only its own, an added backend none", func(t *testing.T) {
		const n = 1000
		conns := openEcho(t, ctx, l, vipWeb+":7000", n)
		defer func() {
			for _, cn := range conns {
				cn.c.Close()
			}
		}()
		per := map[string]int{}
		for _, cn := range conns {
			per[cn.backend]++
		}
		t.Logf("%d connections: %v", n, per)
		if len(per) != len(allHosts) {
			t.Fatalf("connections reached %d of %d backends", len(per), len(allHosts))
		}
		survivors := failBackend(t, ctx, l, c, "web", vipWeb+":7000", conns, per, "az2-h1/g1", -1)

		// A planned change: a seventh backend joins. No established
		// connection breaks (they keep their backend through the
		// connection table); new ones reach it.
		before := tableChecksum(t, ctx, c, "web", "echo")
		if _, err := c.AddBackend(ctx, "web", "echo", model.Backend{Host: "az1-h1", Guest: "g2"}); err != nil {
			t.Fatal(err)
		}
		waitChecksumChange(t, ctx, c, "web", "echo", before)
		alive, dead := probe(survivors)
		t.Logf("after adding az1-h1/g2: %d alive, broken %v", alive, dead)
		if alive != len(survivors) {
			t.Fatalf("%d of %d established connections broke when a backend was added", len(survivors)-alive, len(survivors))
		}
		fresh := openEcho(t, ctx, l, vipWeb+":7000", 100)
		reached := false
		for _, cn := range fresh {
			reached = reached || cn.backend == "az1-h1-g2"
			cn.c.Close()
		}
		if !reached {
			t.Error("none of 100 new connections reached the added backend")
		}
	})

	// The IPv6 VIP (issue 21) passes what the IPv4 one does: port
	// dispatch, long-lived connections of which a failure breaks only its
	// own, new connections away from the failed backend.
	t.Run("IPv6 VIP: port dispatch, long-lived connections, a failure breaks only its own", func(t *testing.T) {
		// The subtest above stopped az2-h1-g1's server, which the web
		// pool (no health check) still holds: start it again (stopped
		// first, in case that subtest did not get so far).
		l.StopServer("az2-h1-g1")
		if err := l.StartServer("az2-h1-g1"); err != nil {
			t.Fatal(err)
		}
		base := "http://[" + vipWeb6 + "]"
		waitServing(t, ctx, l, base+"/")
		checkDispatch(t, ctx, l, base)

		healthy := waitHealthy(t, ctx, c, "web6", "echo", len(allHosts))
		const n = 300
		conns := openEcho(t, ctx, l, "["+vipWeb6+"]:7000", n)
		defer func() {
			for _, cn := range conns {
				cn.c.Close()
			}
		}()
		per := map[string]int{}
		for _, cn := range conns {
			per[cn.backend]++
		}
		t.Logf("%d connections over the IPv6 VIP: %v", n, per)
		if len(per) != healthy {
			t.Fatalf("connections reached %d backends, %d are healthy", len(per), healthy)
		}
		failBackend(t, ctx, l, c, "web6", "["+vipWeb6+"]:7000", conns, per, "az3-h2/g1", healthy-1)
	})

	// The IPv6 VIP's backends are checked at their IPv6 addresses (the
	// lab's edges have --health-source6): a guest whose IPv6 service is
	// down (its IPv6 port 7000 filtered in its own namespace) goes down in
	// web6's echo pool while its IPv4 service keeps it up in web's.
	t.Run("IPv6 VIP: a backend's IPv6 service is what its check sees", func(t *testing.T) {
		l.StopServer("az3-h2-g1") // the subtest above's victim, back
		if err := l.StartServer("az3-h2-g1"); err != nil {
			t.Fatal(err)
		}
		// web's echo pool has a seventh backend (az1-h1/g2, added above).
		web4 := waitHealthy(t, ctx, c, "web", "echo", len(allHosts)+1)
		waitHealthy(t, ctx, c, "web6", "echo", len(allHosts))
		const guest, table = "az1-h2-g1", "azghc6test"
		nft := func(args ...string) {
			t.Helper()
			cmd := l.Exec(guest, append([]string{"nft"}, args...))
			if cmd == nil {
				t.Fatalf("no node %s", guest)
			}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nft %v in %s: %v: %s", args, guest, err, out)
			}
		}
		nft("add", "table", "ip6", table)
		nft("add", "chain", "ip6", table, "in", "{", "type", "filter", "hook", "input", "priority", "0", ";", "}")
		nft("add", "rule", "ip6", table, "in", "tcp", "dport", "7000", "drop")
		defer nft("delete", "table", "ip6", table)
		waitHealthy(t, ctx, c, "web6", "echo", len(allHosts)-1)
		// Its IPv4 check still passes, several intervals later: the
		// IPv4 VIP's pool keeps all its backends.
		for i := 0; i < 6; i++ {
			time.Sleep(250 * time.Millisecond)
			st, err := c.ServiceStatus(ctx, "web")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range st.Pools {
				if p.Name == "echo" && len(p.Tables) > 0 && p.Tables[0].Healthy != web4 {
					t.Fatalf("web/echo: %d healthy backends, want %d: the IPv4 check failed too", p.Tables[0].Healthy, web4)
				}
			}
		}
		nft("delete", "table", "ip6", table)
		nft("add", "table", "ip6", table) // (for the deferred delete)
		waitHealthy(t, ctx, c, "web6", "echo", len(allHosts))
	})
}

// checkDispatch checks web's port dispatch at base (http://VIP): 60 new
// connections to port 80 reach the web pool (the h1 hosts' g1), 60 to
// port 443 the tls pool (the h2 hosts' g2), each spread.
func checkDispatch(t *testing.T, ctx context.Context, l *lab.Lab, base string) {
	t.Helper()
	got80 := answers(t, ctx, l, base+"/", 60)
	got443 := answers(t, ctx, l, base+":443/", 60)
	t.Logf("port 80: %v; port 443: %v", got80, got443)
	for body := range got80 {
		if !strings.HasSuffix(body, "-g1") || strings.Contains(body, "-h2-") {
			t.Errorf("port 80 answered by %q, not the web pool (the h1 hosts' g1)", body)
		}
	}
	for body := range got443 {
		if !strings.HasSuffix(body, "-g2:443") || strings.Contains(body, "-h1-") {
			t.Errorf("port 443 answered by %q, not the tls pool (the h2 hosts' g2)", body)
		}
	}
	if len(got80) < 2 || len(got443) < 2 {
		t.Errorf("60 new connections reached %d and %d backends: not spread", len(got80), len(got443))
	}
}

// failBackend stops the server of key (host/guest) behind svc's echo
// pool, whose echo connections conns (per: by backend) run to addr:
// exactly the victim's connections break, the edges program the pool
// with healthy backends (-1: one fewer than its table has), new
// connections avoid the victim, and the others' connections survive
// the table without it. It returns those.
func failBackend(t *testing.T, ctx context.Context, l *lab.Lab, c *client.Client, svc, addr string, conns []*echoConn, per map[string]int, key string, healthy int) []*echoConn {
	t.Helper()
	victim := strings.ReplaceAll(key, "/", "-")
	if err := l.StopServer(victim); err != nil {
		t.Fatal(err)
	}
	alive, dead := probe(conns)
	var wrong []string
	for b, k := range dead {
		if b != victim {
			wrong = append(wrong, fmt.Sprintf("%s: %d", b, k))
		}
	}
	t.Logf("after stopping %s: %d connections broke (it had %d), %d alive", victim, dead[victim], per[victim], alive)
	if len(wrong) > 0 {
		t.Fatalf("connections of healthy backends broke: %v", wrong)
	}
	if dead[victim] != per[victim] {
		t.Fatalf("%d of %s's %d connections broke", dead[victim], victim, per[victim])
	}
	waitDownN(t, ctx, c, svc, "echo", key, healthy)
	// New connections avoid the failed backend.
	fresh := openEcho(t, ctx, l, addr, 60)
	for _, cn := range fresh {
		if cn.backend == victim {
			t.Errorf("a new connection reached the failed %s", victim)
		}
		cn.c.Close()
	}
	survivors := conns[:0:0]
	for _, cn := range conns {
		if cn.backend != victim {
			survivors = append(survivors, cn)
		}
	}
	// The table without the failed backend moved no healthy flow.
	if alive, dead := probe(survivors); alive != len(survivors) {
		t.Fatalf("after the table dropped %s: %d of %d survivors alive, broken %v", victim, alive, len(survivors), dead)
	}
	return survivors
}

// waitHealthy waits until every edge programs svc/pool's table with want
// healthy backends, and returns it.
func waitHealthy(t *testing.T, ctx context.Context, c *client.Client, svc, pool string, want int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last := -1
	for time.Now().Before(deadline) {
		if st, err := c.ServiceStatus(ctx, svc); err == nil {
			for _, p := range st.Pools {
				if p.Name == pool && p.Agree && len(p.Tables) > 0 {
					if last = p.Tables[0].Healthy; last == want {
						return want
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s/%s: %d healthy backends programmed, want %d", svc, pool, last, want)
	return 0
}

// waitServing waits until url answers 20 new connections in a row: the
// router spreads them over the edge set's members, which program a new
// service (and the health checks' first verdicts) each at its own pace.
func waitServing(t *testing.T, ctx context.Context, l *lab.Lab, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for ok := 0; ; {
		if _, err := l.Get(ctx, "inet", url, time.Second); err == nil {
			if ok++; ok == 20 {
				return
			}
			continue
		}
		ok = 0
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer", url)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type echoConn struct {
	c       net.Conn
	r       *bufio.Reader
	backend string
}

// openEcho opens n echo connections from the Internet node; each learns
// its backend from the server's first line.
func openEcho(t *testing.T, ctx context.Context, l *lab.Lab, addr string, n int) []*echoConn {
	t.Helper()
	dial := lab.Dialer(l.Topo.Node("inet").Netns)
	out := make([]*echoConn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			c, err := dial(dctx, "tcp", addr)
			if err == nil {
				c.SetDeadline(time.Now().Add(3 * time.Second))
				r := bufio.NewReader(c)
				var line string
				if line, err = r.ReadString('\n'); err == nil {
					c.SetDeadline(time.Time{})
					out[i] = &echoConn{c: c, r: r, backend: strings.TrimSpace(line)}
					return
				}
				c.Close()
			}
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d connections failed to open: %v", len(errs), n, errs[0])
	}
	return out
}

// probe sends a line on every connection and counts those that echo it.
func probe(conns []*echoConn) (alive int, dead map[string]int) {
	dead = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, cn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("probe %d", i)
			cn.c.SetDeadline(time.Now().Add(3 * time.Second))
			_, err := fmt.Fprintf(cn.c, "%s\n", msg)
			var line string
			if err == nil {
				line, err = cn.r.ReadString('\n')
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil && strings.TrimSpace(line) == msg {
				alive++
			} else {
				dead[cn.backend]++
			}
		}()
	}
	wg.Wait()
	return alive, dead
}

func waitDown(t *testing.T, ctx context.Context, c *client.Client, svc, pool, key string) {
	t.Helper()
	waitDownN(t, ctx, c, svc, pool, key, -1)
}

// waitDownN waits until key is marked down in svc/pool and every edge
// programs its table with healthy backends (-1: one fewer than the table
// has, read at each poll: right after a change the edges' first tables
// may not hold every backend yet).
func waitDownN(t *testing.T, ctx context.Context, c *client.Client, svc, pool, key string, healthy int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.ServiceStatus(ctx, svc)
		if err == nil && st.Health != nil && st.Health.IsDown(pool, key) {
			for _, p := range st.Pools {
				if p.Name != pool || !p.Agree || len(p.Tables) == 0 {
					continue
				}
				want := healthy
				if want < 0 {
					want = p.Tables[0].Backends - 1
				}
				if p.Tables[0].Healthy == want {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s/%s %s never marked down and programmed", svc, pool, key)
}

func tableChecksum(t *testing.T, ctx context.Context, c *client.Client, svc, pool string) string {
	t.Helper()
	st, err := c.ServiceStatus(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pools {
		if p.Name == pool && len(p.Tables) > 0 {
			return p.Tables[0].Checksum
		}
	}
	return ""
}

func waitChecksumChange(t *testing.T, ctx context.Context, c *client.Client, svc, pool, before string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if cs := tableChecksum(t, ctx, c, svc, pool); cs != "" && cs != before {
			// and every edge agrees
			st, _ := c.ServiceStatus(ctx, svc)
			for _, p := range st.Pools {
				if p.Name == pool && p.Agree {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the table of %s/%s did not change", svc, pool)
}

// natPlain: a nat VIP's new connections reach more than one DMZ server,
// and every edge's health checks see every DMZ server up.
func natPlain(t *testing.T, ctx context.Context, l *lab.Lab, c *client.Client, svc, url string) {
	waitServing(t, ctx, l, url)
	got := answers(t, ctx, l, url, 60)
	t.Logf("nat VIP %s: %v", url, got)

	for body := range got {
		if !strings.HasPrefix(body, "hello from dmz") {
			t.Errorf("nat VIP %s answered by %q", url, body)
		}
	}
	if len(got) < 2 {
		t.Errorf("60 new connections reached %d DMZ servers", len(got))
	}
	// Every edge's checks see every DMZ server up.
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := c.ServiceStatus(ctx, svc)
		if err != nil {
			t.Fatal(err)
		}
		ok := st.Health == nil && len(st.Pools) == 1 && len(st.Pools[0].Backends) == lab.DMZServers
		last = fmt.Sprintf("health %v", st.Health)
		for _, b := range st.Pools[0].Backends {
			ok = ok && b.DownVotes == 0 && b.UpVotes == len(st.Pools[0].Tables) && b.UpVotes > 0
			last += fmt.Sprintf("; %s up %d down %d of %d edges", b.Key, b.UpVotes, b.DownVotes, len(st.Pools[0].Tables))
		}
		if ok {
			t.Logf("health-checked nat backends: %s", last)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nat backends not all seen up by every edge within 15 s: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

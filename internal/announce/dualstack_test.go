package announce

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bgp/birdtest"
)

// TestDualStackECMP: a dual-stack cluster's two servers each announce an
// IPv4 VIP and an IPv6 VIP (the A and AAAA of a DNS cluster) to a real
// BIRD router with an IPv6 channel: server 1 in this process over an
// IPv4 session (the IPv6 /128 over MP-BGP with its IPv6 next hop), server
// 2 the real `azgate announce` binary over an IPv6 session (--vip twice,
// --next-hop6, --peer [ADDR]:ASN). BIRD's kernel table has a multipath
// route for each VIP over both servers, each family over the servers'
// addresses of that family; server 1's failing heartbeat removes it from
// both routes and a good one brings it back; SIGTERM withdraws both of
// server 2's before it exits 0; the last one's Run returns with both
// routes gone.
func TestDualStackECMP(t *testing.T) {
	r := birdtest.New(t, "ds")
	var (
		router4 = netip.MustParseAddr("198.18.251.1")
		router6 = netip.MustParseAddr("2001:db8:251::1")
		v4      = []netip.Addr{netip.MustParseAddr("198.18.251.11"), netip.MustParseAddr("198.18.251.12")}
		v6      = []netip.Addr{netip.MustParseAddr("2001:db8:251::11"), netip.MustParseAddr("2001:db8:251::12")}
		vip4    = netip.MustParsePrefix("192.0.2.201/32")
		vip6    = netip.MustParsePrefix("2001:db8:53::53/128")
	)
	bin := buildAzgate(t)
	r.Link(t, "srv0", "azgtann6", netip.PrefixFrom(router4, 24), netip.PrefixFrom(v4[0], 24), netip.PrefixFrom(v4[1], 24),
		netip.PrefixFrom(v6[0], 64), netip.PrefixFrom(v6[1], 64))
	r.AddAddrs(t, "srv0", netip.PrefixFrom(router6, 64))
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: router4, HoldTime: int(hold / time.Second), IPv6: true,
		Peers: []birdtest.Peer{{Name: "srv1", Address: v4[0], ASN: clusterASN}, {Name: "srv2", Address: v6[1], ASN: clusterASN}}})

	srv := []*server{newServer(t, v4[0]), newServer(t, v4[1])}
	cfg := srv[0].config(t)
	cfg.VIPs = []netip.Prefix{vip4, vip6}
	cfg.BGP.NextHop6 = v6[0]
	cfg.BGP.Peers = []bgp.Peer{{Address: router4, ASN: routerASN}}
	cfg.Log = slog.New(slog.DiscardHandler)
	a1, err := New(cfg, bgp.New(cfg.Log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run1 := make(chan error, 1)
	go func() { run1 <- a1.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-run1
	})

	cmd := exec.Command(bin, "announce", "--vip", vip4.Addr().String(), "--vip", vip6.String(), "--asn", fmt.Sprint(clusterASN),
		"--peer", fmt.Sprintf("[%v]:%d", router6, routerASN),
		"--next-hop", v4[1].String(), "--next-hop6", v6[1].String(), "--local-address6", v6[1].String(),
		"--check", srv[1].hb.URL+"/healthz", "--check", fmt.Sprintf("tcp://127.0.0.1:%d", srv[1].port),
		"--interval", "200ms", "--timeout", "150ms", "--rise", "2", "--fall", "2",
		"--hold", hold.String(), "--keepalive", "1s", "--withdraw-wait", "3s")
	kid := startProcess(t, srv[1], cmd)

	both := func(n4, n6 []netip.Addr, timeout time.Duration) time.Duration {
		t.Helper()
		d := r.WaitNextHops(t, vip4, n4, timeout)
		return d + r.WaitNextHops(t, vip6, n6, timeout)
	}
	d := both(v4, v6, 30*time.Second)
	t.Logf("both VIPs over both servers after %v:\n%s", d, r.IPRoute())
	routes, err := r.Routes()
	if err != nil || !strings.Contains(routes, vip6.String()) {
		t.Fatalf("BIRD's table lacks %v (%v):\n%s", vip6, err, routes)
	}
	metrics := get(t, a1, "/metrics")
	for _, v := range []netip.Prefix{vip4, vip6} {
		if want := fmt.Sprintf(`azgate_announce_wanted{vip="%v"} 1`, v); !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	if st := status(t, a1); len(st.VIPs) != 2 || st.VIPs[0] != vip4.String() || st.VIPs[1] != vip6.String() || !st.Announced {
		t.Errorf("status: %+v", st)
	}

	// Server 1's heartbeat fails: it leaves both routes; back at 200.
	srv[0].status.Store(503)
	d = both(v4[1:], v6[1:], 5*time.Second)
	t.Logf("heartbeat 503: server 1 out of both routes after %v", d)
	srv[0].status.Store(200)
	both(v4, v6, 5*time.Second)

	// SIGTERM: the binary withdraws both VIPs and exits 0 (1 unless
	// every established peer was sent the withdrawal).
	if err := kid.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := kid.wait(t, 5*time.Second); err != nil {
		t.Fatalf("azgate announce exit after SIGTERM: %v", err)
	}
	d = both(v4[:1], v6[:1], time.Second)
	t.Logf("SIGTERM: server 2 out of both routes %v after its exit", d)

	cancel()
	if err := <-run1; err != nil {
		t.Fatalf("Run: %v", err)
	}
	run1 <- nil
	both(nil, nil, time.Second)
}

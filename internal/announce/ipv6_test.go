package announce

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bgp/birdtest"
	"github.com/azgate/azgate/internal/probe"
)

// TestIPv6Checks: checks of a real IPv6 documentation address. In the
// namespace the tests run in (birdtest.Main), 2001:db8:250::11 is put on
// lo and a heartbeat (HTTP) and a stand-in for Redis (TCP) listen on it;
// the announcer's checks http://[2001:db8:250::11]:PORT/healthz and
// tcp://[2001:db8:250::11]:PORT make it want the VIP announced, a 503
// heartbeat withdraws it, 200 brings it back, and the TCP listener closed
// withdraws it again.
func TestIPv6Checks(t *testing.T) {
	self := birdtest.Self(t)
	const addr = "2001:db8:250::11"
	// nodad: usable at once (no duplicate address detection to wait for).
	if out, err := self.Cmd("ip", "addr", "add", addr+"/128", "dev", "lo", "nodad").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s: %v: %s", addr, err, out)
	}
	t.Cleanup(func() { self.Cmd("ip", "addr", "del", addr+"/128", "dev", "lo").Run() })

	var code atomic.Int32
	code.Store(200)
	hb := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(code.Load()))
	}))
	ln, err := net.Listen("tcp6", "["+addr+"]:0")
	if err != nil {
		t.Fatal(err)
	}
	hb.Listener.Close()
	hb.Listener = ln
	hb.Start()
	defer hb.Close()
	redis, err := net.Listen("tcp6", "["+addr+"]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer redis.Close()
	go func() {
		for {
			c, err := redis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	base := probe.Spec{Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 1, Fall: 2}
	var checks []probe.Target
	for _, u := range []string{"http://" + hb.Listener.Addr().String() + "/healthz", "tcp://" + redis.Addr().String()} {
		if !strings.Contains(u, "://["+addr+"]:") {
			t.Fatalf("check URL %q: want the bracketed %s", u, addr)
		}
		c, err := ParseCheck(u, base)
		if err != nil {
			t.Fatal(err)
		}
		if c.Addr != netip.MustParseAddr(addr) {
			t.Fatalf("%s: addr %v", u, c.Addr)
		}
		checks = append(checks, c)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	nobody := netip.MustParseAddrPort(freePort(t)) // no BGP session: Announced is what the checks want
	cfg := Config{VIPs: []netip.Prefix{netip.MustParsePrefix("198.18.77.6/32")}, Checks: checks, WithdrawWait: time.Second, Log: slog.New(slog.DiscardHandler),
		BGP: bgp.Config{RouterID: lo, ASN: 64600, NextHop: lo, LocalAddress: lo, HoldTime: 3 * time.Second,
			Keepalive: time.Second, Peers: []bgp.Peer{{Address: nobody.Addr(), Port: nobody.Port(), ASN: 64601}}}}
	a, err := New(cfg, bgp.New(cfg.Log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for a.Announced() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: announced %v after 10 s, want %v (status %+v)", what, a.Announced(), want, status(t, a).Checks)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait(true, "both IPv6 checks up")
	code.Store(503)
	wait(false, "heartbeat 503")
	code.Store(200)
	wait(true, "heartbeat 200 again")
	redis.Close()
	wait(false, "the TCP check's listener closed")
	for _, c := range status(t, a).Checks {
		if strings.HasPrefix(c.Check, "tcp://") && (c.Up || !strings.Contains(c.LastErr, "refused")) {
			t.Errorf("tcp check: %+v, want down, refused", c)
		}
	}
}

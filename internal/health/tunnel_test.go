package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/model"
)

// A probe through the tunnel leaves bound to the health-check address with
// its backend's mark (what the policy rule and tc_edge_hc go by), for tcp,
// http and udp alike.
func TestTunnelDial(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: SO_MARK needs CAP_NET_ADMIN (run as root)")
	}
	const mark = 0xa2700042
	src := netip.MustParseAddr("127.0.0.2") // not what the kernel would choose
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	tg := Target{Service: "s", Pool: "p", Backend: "b", Tunnel: &Tunnel{Mark: mark, Source: src}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct{ network, addr string }{{"tcp", ln.Addr().String()}, {"udp", pc.LocalAddr().String()}} {
		conn, err := tg.dial(ctx, c.network, c.addr)
		if err != nil {
			t.Fatalf("%s: %v", c.network, err)
		}
		sc, err := conn.(interface {
			SyscallConn() (syscall.RawConn, error)
		}).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		sc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) })
		if gerr != nil || uint32(got) != mark {
			t.Errorf("%s: SO_MARK %#x (%v), want %#x", c.network, uint32(got), gerr, mark)
		}
		if la, _ := netip.ParseAddrPort(conn.LocalAddr().String()); la.Addr() != src {
			t.Errorf("%s: bound to %v, want %v", c.network, la, src)
		}
		conn.Close()
	}
	// A whole check goes through the same dialer.
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
	}()
	if err := ProbeWith(ctx, tg.dial, netip.MustParseAddrPort(ln.Addr().String()), model.HealthCheck{Type: "tcp"}, nil); err != nil {
		t.Errorf("tcp check through the dialer: %v", err)
	}
	// http and https: the transport dials through it too (the server sees
	// the health-check address as the client).
	for _, typ := range []string{"http", "https"} {
		var from string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { from = r.RemoteAddr })
		srv := httptest.NewUnstartedServer(h)
		if typ == "https" {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
		if err := ProbeWith(ctx, tg.dial, ap, model.HealthCheck{Type: typ}, nil); err != nil {
			t.Errorf("%s check through the dialer: %v", typ, err)
		}
		if fa, _ := netip.ParseAddrPort(from); fa.Addr() != src {
			t.Errorf("%s check came from %q, want %v", typ, from, src)
		}
		srv.Close()
	}
}

// An IPv6 probe through the tunnel (an IPv6 VIP's backend checked from
// the edge's IPv6 health-check address) is bound and marked the same way.
func TestTunnelDial6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: SO_MARK needs CAP_NET_ADMIN (run as root)")
	}
	const mark = 0xa2700043
	src := netip.MustParseAddr("::1")
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	tg := Target{Service: "s", Pool: "p", Backend: "b", Tunnel: &Tunnel{Mark: mark, Source: src}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct{ network, addr string }{{"tcp", ln.Addr().String()}, {"tcp6", ln.Addr().String()},
		{"udp", pc.LocalAddr().String()}, {"udp6", pc.LocalAddr().String()}} {
		conn, err := tg.dial(ctx, c.network, c.addr)
		if err != nil {
			t.Fatalf("%s: %v", c.network, err)
		}
		sc, err := conn.(interface {
			SyscallConn() (syscall.RawConn, error)
		}).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		sc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) })
		if gerr != nil || uint32(got) != mark {
			t.Errorf("%s: SO_MARK %#x (%v), want %#x", c.network, uint32(got), gerr, mark)
		}
		if la, _ := netip.ParseAddrPort(conn.LocalAddr().String()); la.Addr() != src {
			t.Errorf("%s: bound to %v, want %v", c.network, la, src)
		}
		conn.Close()
	}
}

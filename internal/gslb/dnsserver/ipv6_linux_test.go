//go:build linux

package dnsserver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestIPv6ResolverOnWire: TestIPv6ResolverLocated over real sockets. In a
// network namespace of its own (root), with 2001:db8:8000::53 and
// 2001:db8:8100::53 on lo, a resolver at each of them asks the server on
// [::1] without ECS, over UDP and TCP: its own address is located by the
// database (us; Singapore, which has no v6 target) and no ECS is
// answered.
func TestIPv6ResolverOnWire(t *testing.T) {
	inV6Namespace(t, []string{"2001:db8:8000::53", "2001:db8:8100::53"}, func() {
		h, _ := testHandler(t)
		s := NewServer(ServerConfig{Addr: "[::1]:0"}, h)
		if err := s.Start(); err != nil {
			t.Error(err)
			return
		}
		defer s.Shutdown(context.Background())
		for _, tc := range []struct {
			src   string
			qtype uint16
			want  string
		}{
			{"2001:db8:8000::53", dns.TypeAAAA, "AAAA 2001:db8::2"},
			{"2001:db8:8000::53", dns.TypeA, "A 198.51.100.2"},
			{"2001:db8:8100::53", dns.TypeA, "A 198.51.100.3"},
			{"2001:db8:8100::53", dns.TypeAAAA, "AAAA 2001:db8::1"},
		} {
			for _, proto := range []string{"udp", "tcp"} {
				var local net.Addr = &net.UDPAddr{IP: net.ParseIP(tc.src)}
				addr := s.UDPAddr().String()
				if proto == "tcp" {
					local, addr = &net.TCPAddr{IP: net.ParseIP(tc.src)}, s.TCPAddr().String()
				}
				c := &dns.Client{Net: proto, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}}
				r, _, err := c.Exchange(query("pathd.example.", tc.qtype, "", 9), addr)
				if err != nil {
					t.Errorf("from %s over %s: %v", tc.src, proto, err)
					continue
				}
				if got := answers(r); !slices.Equal(got, []string{tc.want}) || scope(r) != -1 {
					t.Errorf("from %s over %s, %s: %q scope %d, want %q without ECS", tc.src, proto, dns.TypeToString[tc.qtype], got, scope(r), tc.want)
				}
			}
		}
	})
}

// inV6Namespace runs fn on a thread of its own in a new network namespace
// with lo up and addrs (/128, no duplicate address detection) on it; the
// sockets fn opens are that namespace's. It skips the test without root.
func inV6Namespace(t *testing.T, addrs []string, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace with 2001:db8:: addresses")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		// The kernel completes a new IPv6 address (nodad too) in its
		// address-configuration work after AddrAdd returns and announces
		// it (RTM_NEWADDR) then. Without waiting for that, the first
		// answer to a resolver at a new address was lost in about one run
		// in five (5 iterations each) on the shared 2-core machine; with
		// the wait, in none of 40.
		updates, stop := make(chan netlink.AddrUpdate, 16), make(chan struct{})
		defer close(stop)
		if err := netlink.AddrSubscribe(updates, stop); err != nil {
			t.Errorf("subscribe to address updates: %v", err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		want := map[netip.Addr]bool{}
		for _, a := range addrs {
			if err != nil {
				break
			}
			ip := netip.MustParseAddr(a)
			want[ip] = true
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD})
		}
		if err != nil {
			t.Errorf("lo: %v", err)
			return
		}
		timeout := time.After(2 * time.Second)
		for len(want) > 0 {
			select {
			case u := <-updates:
				if a, ok := netip.AddrFromSlice(u.LinkAddress.IP); ok && u.NewAddr {
					delete(want, a)
				}
			case <-timeout:
				t.Errorf("no RTM_NEWADDR for %v after 2 s", want)
				return
			}
		}
		fn()
	}()
	<-done
}

// TestServerTCPPerNetIPv6: TestServerTCPPerNet for IPv6 sources, whose
// source network is the /56: two connections from 2001:db8:0:100::/56
// are served, a third from that /56 is closed at once and counted, and
// one from 2001:db8:0:200::/56 is served.
func TestServerTCPPerNetIPv6(t *testing.T) {
	inV6Namespace(t, []string{"2001:db8:0:100::1", "2001:db8:0:100::2", "2001:db8:0:1ff::3", "2001:db8:0:200::1"}, func() {
		h, _ := testHandler(t)
		s := NewServer(ServerConfig{Addr: "[::1]:0", MaxTCPConns: 4, MaxTCPConnsPerNet: 2, IdleTimeout: 5 * time.Second}, h)
		if err := s.Start(); err != nil {
			t.Error(err)
			return
		}
		defer s.Shutdown(context.Background())
		ask := func(from string, id uint16) error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
			c, err := d.Dial("tcp", s.TCPAddr().String())
			if err != nil {
				return err
			}
			t.Cleanup(func() { c.Close() }) // held open: the slots stay taken
			dc := &dns.Conn{Conn: c}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if err := dc.WriteMsg(query("www.example.", dns.TypeAAAA, "", id)); err != nil {
				return err
			}
			r, err := dc.ReadMsg()
			if err == nil && len(r.Answer) != 1 {
				err = fmt.Errorf("answer %v", r)
			}
			return err
		}
		for i, from := range []string{"2001:db8:0:100::1", "2001:db8:0:100::2"} {
			if err := ask(from, uint16(i+1)); err != nil {
				t.Errorf("connection %d from %s: %v", i, from, err)
				return
			}
		}
		if err := ask("2001:db8:0:1ff::3", 3); err == nil {
			t.Error("a third connection from one /56 was served (MaxTCPConnsPerNet 2)")
		}
		if s.RejectedTCP() != 1 {
			t.Errorf("RejectedTCP %d, want 1", s.RejectedTCP())
		}
		if err := ask("2001:db8:0:200::1", 4); err != nil {
			t.Errorf("a connection from another /56 while the first holds 2 of 4: %v", err)
		}
	})
}

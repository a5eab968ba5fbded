//go:build linux

package dnsserver

import (
	"context"
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
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace with 2001:db8:: resolver addresses")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		for _, a := range []string{"2001:db8:8000::53/128", "2001:db8:8100::53/128"} {
			if err != nil {
				break
			}
			p := netip.MustParsePrefix(a)
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD})
		}
		if err != nil {
			t.Errorf("lo: %v", err)
			return
		}
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
	}()
	<-done
}

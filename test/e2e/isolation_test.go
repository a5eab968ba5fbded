package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
)

// TestIsolation (issue 17): what a guest and the Internet must not reach
// in the lab, each path tried for real.
//
// Guests (part 2): the lab's agents had --local-prefix 198.18.0.0/15,
// which covers the guests and the underlay, so a guest's packet there went
// to its host's kernel: az1-h1/g1 reached az1-h1/g2 (another VSID) through
// it, the host's own listeners, and sent one-way into the underlay (fab,
// an edge's underlay address). The agents now run without --local-allow:
// each of these paths is closed, IPv6 link-local to the host as well.
//
// DMZ (part 5): rtr had a connected route to the DMZ segment, so the
// Internet client reached the nat-mode servers at their private addresses
// around the edges. rtr's address there is a /32 now: the servers'
// addresses are unreachable from the Internet.
func TestIsolation(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	// g1 has an EIP: its packets that are not the host's go to an edge
	// (which refuses the underlay); without one they would all be
	// drop_no_eip, and the test would prove less.
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", "hello from az1-h1-g1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	const g1 = "az1-h1-g1"
	host := l.Topo.Node("az1-h1").Netns

	t.Run("another VSID's guest on the same host", func(t *testing.T) {
		to := lab.GuestAddr(1, 1, 2).String() + ":80" // az1-h1/g2, VSID 5112, its lab server
		if err := tcpFrom(ctx, l, g1, to); err == nil {
			t.Fatalf("az1-h1/g1 reached az1-h1/g2 at %s", to)
		}
	})

	t.Run("listeners of the host", func(t *testing.T) {
		ln, port := listenIn(t, host, "tcp4", "0.0.0.0:0")
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		// The guest's gateway (the host's end of its link) and the
		// host's underlay address.
		for _, a := range []string{"198.19.11.0", lab.HostUnderlay(1, 1).String()} {
			if err := tcpFrom(ctx, l, g1, fmt.Sprintf("%s:%d", a, port)); err == nil {
				t.Errorf("az1-h1/g1 reached a listener of its host at %s:%d", a, port)
			}
		}
		// IPv6: the host's link-local address on the guest's link.
		ll, err := linkLocal(host, "g1")
		if err != nil {
			t.Logf("no IPv6 path to try: %v", err)
			return
		}
		ln6, port6 := listenIn(t, host, "tcp6", "[::]:0")
		defer ln6.Close()
		go func() {
			for {
				c, err := ln6.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		if err := tcpFrom(ctx, l, g1, fmt.Sprintf("[%s%%eth0]:%d", ll, port6)); err == nil {
			t.Errorf("az1-h1/g1 reached a listener of its host at [%s]:%d (IPv6 link-local)", ll, port6)
		}
	})

	t.Run("one-way into the underlay", func(t *testing.T) {
		// fab's end of the host's link, and edge-a1's underlay address
		// (the one its connection sync listens on, TCP; a UDP port
		// there shows the datagram arriving).
		for node, a := range map[string]netip.Addr{
			"fab":     lab.HostUnderlay(1, 1).Prev(),
			"edge-a1": lab.EdgeUnderlayOf("edge-a1"),
		} {
			pc, port := listenPacketIn(t, l.Topo.Node(node).Netns, a.String()+":0")
			if err := udpFrom(l, g1, fmt.Sprintf("%s:%d", a, port)); err != nil {
				pc.Close()
				t.Fatal(err)
			}
			pc.SetReadDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 64)
			if n, from, err := pc.ReadFrom(buf); err == nil {
				t.Errorf("%s received %q from %v: a guest reached the underlay", node, buf[:n], from)
			}
			pc.Close()
		}
		// The edge's sync port itself: a SYN the edge's kernel would
		// answer (the answer cannot come back: one-way).
		sync := fmt.Sprintf("%s:%d", lab.EdgeUnderlayOf("edge-a1"), lab.SyncPort)
		if err := tcpFrom(ctx, l, g1, sync); err == nil {
			t.Errorf("az1-h1/g1 connected to edge-a1's sync port %s", sync)
		}
	})

	t.Run("the guest still reaches the Internet through its EIP", func(t *testing.T) {
		outboundFrom(t, ctx, l, g1, eip)
	})

	t.Run("the Internet reaches no DMZ server's private address", func(t *testing.T) {
		for i := 1; i <= lab.DMZServers; i++ {
			to := lab.DMZAddr(i).String() + ":80"
			if err := tcpFrom(ctx, l, "inet", to); err == nil {
				t.Errorf("the Internet client reached dmz%d at its private address %s, around the edges", i, to)
			}
			// IPv6: the server answers there (an edge on the segment
			// connects), the Internet does not reach it.
			to6 := netip.AddrPortFrom(lab.DMZAddr6(i), 80).String()
			if err := tcpFrom(ctx, l, "edge-a1", to6); err != nil {
				t.Errorf("edge-a1 (on the DMZ segment) cannot reach dmz%d at %s: %v (the check below proves nothing)", i, to6, err)
			}
			if err := tcpFrom(ctx, l, "inet", to6); err == nil {
				t.Errorf("the Internet client reached dmz%d at its private IPv6 address %s, around the edges", i, to6)
			}
		}
	})
}

// tcpFrom connects from a lab node to addr (one second at most): nil if
// the connection was made.
func tcpFrom(ctx context.Context, l *lab.Lab, node, addr string) error {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := lab.Dialer(l.Topo.Node(node).Netns)(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// udpFrom sends three datagrams from a lab node to addr.
func udpFrom(l *lab.Lab, node, addr string) error {
	return netns.Do(l.Topo.Node(node).Netns, func() error {
		c, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < 3; i++ {
			c.Write([]byte("from a guest")) // an ICMP error may refuse a later one: ignored
		}
		return nil
	})
}

func listenIn(t *testing.T, ns, network, addr string) (net.Listener, int) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(ns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

func listenPacketIn(t *testing.T, ns, addr string) (net.PacketConn, int) {
	t.Helper()
	var pc net.PacketConn
	if err := netns.Do(ns, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return pc, pc.LocalAddr().(*net.UDPAddr).Port
}

// linkLocal is the IPv6 link-local address of a device in a namespace.
func linkLocal(ns, dev string) (netip.Addr, error) {
	var out netip.Addr
	err := netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
				out = p.Addr()
				return nil
			}
		}
		return fmt.Errorf("%s has no IPv6 link-local address", dev)
	})
	return out, err
}

package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestNDPOneOwnerOnASegment: two edges (real XDP on veths into one
// bridge) and a client on one segment, the IPv6 VIP on the client's
// /64; the edges elect their set's ARP owner through a real store. The
// client's kernel resolves the VIP (its neighbor solicitation to the
// VIP's solicited-node group) to the owner's MAC, and the gateway6 too;
// when the owner stops, the other member's unsolicited advertisements
// (Override) move the client's entries to its MAC without a new
// solicitation.
func TestNDPOneOwnerOnASegment(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and XDP")
	}
	const (
		vip6   = "2001:db8:e1::81"
		gw6    = "2001:db8:e1::1"
		client = "2001:db8:e1::10/64"
	)
	ttl, margin := 2*time.Second, 500*time.Millisecond
	prefix := fmt.Sprintf("azgt-ndp-%d-", os.Getpid())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	node := func(name string) *netlab.Node {
		n, err := netlab.NewNode(prefix + name)
		must(err)
		t.Cleanup(func() { n.Delete() })
		must(n.IPv6(false))
		return n
	}
	br, cl := node("br"), node("cl")
	edges := []*netlab.Node{node("e1"), node("e2")}
	// No multicast snooping: the solicitations to a solicited-node group
	// reach every port whether or not an MLD report was seen.
	off := false
	bridge := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: &off}
	must(br.Handle().LinkAdd(bridge))
	// A veth delivers XDP_TX'd frames only when its peer runs an XDP
	// program: XDP_PASS on the ports.
	pass, err := dataplane.LoadBench()
	must(err)
	t.Cleanup(func() { pass.Close() })
	port := func(dev string) {
		l, err := br.Handle().LinkByName(dev)
		must(err)
		must(br.Handle().LinkSetMaster(l, bridge))
		must(br.Do(func() error {
			xl, err := link.AttachXDP(link.XDPOptions{Program: pass.Pass(), Interface: l.Attrs().Index})
			if err == nil {
				t.Cleanup(func() { xl.Close() })
			}
			return err
		}))
	}
	macs := []string{"02:00:00:00:01:01", "02:00:00:00:02:01"}
	for i, e := range edges {
		must(netlab.Veth(netlab.End{Node: e, Dev: "dmz0", MAC: macs[i]}, netlab.End{Node: br, Dev: fmt.Sprintf("p%d", i)}, 0))
		port(fmt.Sprintf("p%d", i))
	}
	must(netlab.Veth(netlab.End{Node: cl, Dev: "eth0", MAC: "02:00:00:00:03:01"}, netlab.End{Node: br, Dev: "pc"}, 0))
	port("pc")
	bl, err := br.Handle().LinkByName("br0")
	must(err)
	must(br.Handle().LinkSetUp(bl))
	must(cl.Addr("eth0", client))

	st := embeddedtest.Store(t)
	quiet := slog.New(slog.DiscardHandler)
	dps := make([]*dataplane.Edge, len(edges))
	for i, e := range edges {
		dp, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1024, ConnMax: 1024})
		must(err)
		t.Cleanup(func() { dp.Close() })
		must(e.Do(func() error { return dp.Attach("dmz0") }))
		must(dp.PutVIP(netip.MustParseAddr(vip6)))
		dps[i] = dp
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type member struct {
		a      *arpOwner
		cancel func()
		done   chan struct{}
	}
	start := func(i int) *member {
		s, err := store.Connect(store.Options{Endpoints: st.Client.Endpoints(), Log: quiet})
		must(err)
		t.Cleanup(func() { s.Close() })
		m := &member{done: make(chan struct{})}
		cfg := ARPConfig{Ifaces: []string{"dmz0"}, Gateway6: netip.MustParseAddr(gw6), TTL: ttl, Margin: margin}
		must(edges[i].Do(func() error {
			var err error
			m.a, err = newARPOwner(dps[i], s, fmt.Sprintf("e%d", i+1), cfg, []string{"dmz0"}, quiet)
			return err
		}))
		ns, a := edges[i].Name, m.a
		m.a.send = func(ifc *net.Interface, ip netip.Addr) error {
			return netns.Do(ns, func() error { return a.announceOn(ifc, ip) })
		}
		m.a.update("dmz-set", []netip.Addr{netip.MustParseAddr(vip6)})
		mctx, mcancel := context.WithCancel(ctx)
		m.cancel = mcancel
		go func() {
			defer close(m.done)
			m.a.run(mctx)
		}()
		return m
	}
	// neigh is the client's neighbor entry for a: its MAC ("" while
	// unresolved) and state.
	cif, err := cl.Ifindex("eth0")
	must(err)
	neigh := func(a string) (string, int) {
		ns, err := cl.Handle().NeighList(cif, netlink.FAMILY_V6)
		must(err)
		for _, n := range ns {
			if n.IP.Equal(net.ParseIP(a)) {
				return n.HardwareAddr.String(), n.State
			}
		}
		return "", 0
	}
	// resolve has the client's kernel resolve a (a UDP datagram to it
	// makes it solicit), until it holds a MAC, and returns that MAC.
	resolve := func(a string, within time.Duration) string {
		t.Helper()
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			must(cl.Do(func() error {
				c, err := net.Dial("udp6", net.JoinHostPort(a, "9"))
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Write([]byte("x"))
				return err
			}))
			if mac, st := neigh(a); mac != "" && st&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0 {
				return mac
			}
		}
		mac, st := neigh(a)
		t.Fatalf("the client does not resolve %s within %v (entry %q, state %#x)", a, within, mac, st)
		return ""
	}

	ms := []*member{start(0), start(1)}
	var owner int
	waitWithin(t, 5*time.Second, "an owner", func() bool {
		for i, m := range ms {
			if s := m.a.Status(); s.Owner {
				owner = i
				return true
			}
		}
		return false
	})
	other := 1 - owner
	if mac := resolve(vip6, 3*time.Second); mac != macs[owner] {
		t.Fatalf("the client resolves the VIP to %s; want the owner's %s", mac, macs[owner])
	}
	if mac := resolve(gw6, 3*time.Second); mac != macs[owner] {
		t.Fatalf("the client resolves the gateway6 to %s; want the owner's %s", mac, macs[owner])
	}
	for i, dp := range dps {
		s, err := dp.Stats()
		must(err)
		if n := s["ndp_reply"].Packets; (i == owner) != (n > 0) {
			t.Errorf("e%d (owner %v) sent %d advertisements", i+1, i == owner, n)
		}
	}
	if s := ms[owner].a.Status(); len(s.IPv6) != 2 {
		t.Errorf("the owner's status lists %v as answered; want the VIP and the gateway6", s.IPv6)
	}

	// The owner stops: the other's unsolicited advertisements move the
	// client's entries, with no solicitation from it (none is sent to
	// an entry this fresh: REACHABLE or STALE until used).
	stopAt := time.Now()
	ms[owner].cancel()
	<-ms[owner].done
	waitWithin(t, 3*time.Second, "the client's entries move to the new owner", func() bool {
		v, _ := neigh(vip6)
		g, _ := neigh(gw6)
		return v == macs[other] && g == macs[other]
	})
	t.Logf("the client's entries moved %v after the owner stopped", time.Since(stopAt).Round(time.Millisecond))
	if mac := resolve(vip6, 3*time.Second); mac != macs[other] {
		t.Fatalf("the client resolves the VIP to %s after the takeover; want %s", mac, macs[other])
	}
	cancel()
	ms[other].cancel()
	<-ms[other].done
}

package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
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

// killableARP is an edge data plane's ARP maps whose daemon can be
// "killed": after kill, nothing writes them any more, as after a SIGKILL
// (the program stays attached with the deadline it holds).
type killableARP struct {
	dataplane.ARPMap
	dead atomic.Bool
}

func (k *killableARP) SetARPOwner(t time.Time) error {
	if k.dead.Load() {
		return errors.New("killed")
	}
	return k.ARPMap.SetARPOwner(t)
}

// TestARPOneOwnerOnASegment: two edges (real XDP on veths into one
// bridge) and a client on one segment; the edges elect their set's ARP
// owner through a real store. Exactly one answers each request, for the
// VIP and the gateway address; when the owner's daemon is killed (its
// program keeps running with the deadline it holds, its lease lapses) the
// other answers within the lease TTL plus etcd's expiry check, after a
// gratuitous ARP; the killed member, back, does not take ownership back;
// when the owner stops gracefully, the returning one takes over at once.
// At no time do two edges answer one request.
func TestARPOneOwnerOnASegment(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and XDP")
	}
	const (
		vip = "198.51.100.80"
		gw  = "198.51.100.254"
	)
	ttl, margin := 2*time.Second, 500*time.Millisecond
	prefix := fmt.Sprintf("azgt-arp-%d-", os.Getpid())
	node := func(name string) *netlab.Node {
		n, err := netlab.NewNode(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Delete() })
		return n
	}
	br, cl := node("br"), node("cl")
	edges := []*netlab.Node{node("e1"), node("e2")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	bridge := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	must(br.Handle().LinkAdd(bridge))
	// A veth delivers XDP_TX'd frames only when its peer runs an XDP
	// program (GRO alone leaves them in the ring): XDP_PASS on the ports.
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

	st := embeddedtest.Store(t)
	quiet := slog.New(slog.DiscardHandler)
	clientOf := func() *store.Store {
		s, err := store.Connect(store.Options{Endpoints: st.Client.Endpoints(), Log: quiet})
		must(err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	dps := make([]*dataplane.Edge, len(edges))
	for i, e := range edges {
		dp, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1024, ConnMax: 1024})
		must(err)
		t.Cleanup(func() { dp.Close() })
		must(e.Do(func() error { return dp.Attach("dmz0") }))
		must(dp.PutVIP(netip.MustParseAddr(vip)))
		dps[i] = dp
	}
	type member struct {
		a      *arpOwner
		dp     *killableARP
		s      *store.Store
		cancel func()
		done   chan struct{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// start runs edge i's ARP owner with its own store connection.
	start := func(i int) *member {
		m := &member{dp: &killableARP{ARPMap: dps[i]}, s: clientOf(), done: make(chan struct{})}
		cfg := ARPConfig{Ifaces: []string{"dmz0"}, Gateway: netip.MustParseAddr(gw), TTL: ttl, Margin: margin}
		must(edges[i].Do(func() error {
			var err error
			m.a, err = newARPOwner(m.dp, m.s, fmt.Sprintf("e%d", i+1), cfg, []string{"dmz0"}, quiet)
			return err
		}))
		ns := edges[i].Name
		m.a.send = func(ifc *net.Interface, ip netip.Addr) error {
			return netns.Do(ns, func() error { return gratuitousARP(ifc, ip) })
		}
		m.a.update("dmz-set", []netip.Addr{netip.MustParseAddr(vip)})
		mctx, mcancel := context.WithCancel(ctx)
		m.cancel = mcancel
		go func() {
			defer close(m.done)
			m.a.run(mctx)
		}()
		return m
	}

	c, err := netlab.OpenARPProbe(cl.Name, "eth0")
	must(err)
	defer c.Close()
	go c.Run(ctx)
	var seq atomic.Int64
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			<-tk.C
			n := int(seq.Add(1))
			target := vip
			if n%5 == 0 {
				target = gw
			}
			c.Request(netip.MustParseAddr(target), n)
		}
	}()
	// answeredBy waits until the last requests are answered by mac.
	answeredBy := func(mac string, within time.Duration) time.Time {
		t.Helper()
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			as := c.Answers()
			if n := len(as); n >= 3 && as[n-1].SHA.String() == mac && as[n-2].SHA.String() == mac && as[n-3].SHA.String() == mac {
				for i := n - 1; i >= 0; i-- {
					if as[i].SHA.String() != mac {
						return as[i+1].At
					}
				}
				return as[0].At
			}
		}
		t.Fatalf("%s does not answer within %v", mac, within)
		return time.Time{}
	}
	ms := []*member{start(0), start(1)}
	var owner int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if as := c.Answers(); len(as) > 0 {
			owner = map[string]int{macs[0]: 0, macs[1]: 1}[as[len(as)-1].SHA.String()]
			break
		}
		if time.Now().After(end) {
			n := c.Seen()
			for i, m := range ms {
				u, err := dps[i].ARPOwner()
				st, _ := dps[i].Stats()
				t.Logf("e%d: %+v, data plane until %v (%v), stats %v", i+1, m.a.Status(), u, err, st)
			}
			t.Fatalf("nobody answers ARP for the VIP (%d ARP frames seen, %d requests sent)", n, seq.Load())
		}
	}
	other := 1 - owner
	answeredBy(macs[owner], time.Second)
	time.Sleep(500 * time.Millisecond)
	if s := ms[owner].a.Status(); !s.Owner || s.Scope != "dmz-set" {
		t.Errorf("the owner's status %+v", s)
	}
	if s := ms[other].a.Status(); s.Owner || s.Scope != "dmz-set" {
		t.Errorf("the other's status %+v", s)
	}
	// announced returns what mac announced after a time, waiting up to
	// 2 s for both addresses (the gratuitous ARPs follow the first
	// answers by a scheduling delay on a busy machine).
	announced := func(mac string, after time.Time) map[string]bool {
		got := map[string]bool{}
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !(got[vip] && got[gw]); time.Sleep(20 * time.Millisecond) {
			for _, e := range c.Gratuitous() {
				if e.SHA.String() == mac && e.At.After(after) {
					got[e.SPA.String()] = true
				}
			}
		}
		return got
	}
	if g := announced(macs[owner], time.Time{}); !g[vip] || !g[gw] {
		t.Errorf("the first owner announced %v; want the VIP and the gateway", g)
	}
	if g := announced(macs[other], time.Time{}); len(g) != 0 {
		t.Errorf("the non-owner announced %v", g)
	}

	// Kill the owner's daemon: nothing renews its lease or touches its maps.
	ms[owner].dp.dead.Store(true)
	ms[owner].s.Close()
	killAt := time.Now()
	took := answeredBy(macs[other], ttl+margin+3*time.Second)
	last := time.Time{}
	for _, e := range c.Answers() {
		if e.SHA.String() == macs[owner] {
			last = e.At
		}
	}
	t.Logf("takeover after a kill: the new owner answers %v after the kill; the old one answered last %v after it (silence %v)",
		took.Sub(killAt).Round(time.Millisecond), last.Sub(killAt).Round(time.Millisecond), took.Sub(last).Round(time.Millisecond))
	if d := took.Sub(killAt); d > ttl+margin+time.Second {
		t.Errorf("takeover took %v; want at most TTL %v + margin %v + 1 s of etcd's expiry check and the campaign", d, ttl, margin)
	}
	if took.Sub(last) < margin/2 {
		t.Errorf("the new owner answered %v after the old one's last answer: want about the margin %v", took.Sub(last), margin)
	}
	if g := announced(macs[other], killAt); !g[vip] || !g[gw] {
		t.Errorf("the new owner announced %v; want the VIP and the gateway", g)
	}

	// The killed member returns: no preemption.
	ms[owner].cancel()
	<-ms[owner].done
	ms[owner] = start(owner)
	back := time.Now()
	time.Sleep(2 * ttl)
	for _, e := range c.Answers() {
		if e.At.After(back) && e.SHA.String() != macs[other] {
			t.Fatalf("the returning member answered at %v", e.At)
		}
	}
	if s := ms[owner].a.Status(); s.Owner {
		t.Errorf("the returning member's status %+v", s)
	}

	// The owner stops gracefully: it stops answering and revokes its claim;
	// the other takes over at once.
	stopAt := time.Now()
	ms[other].cancel()
	<-ms[other].done
	took = answeredBy(macs[owner], 3*time.Second)
	t.Logf("takeover after a graceful stop: %v", took.Sub(stopAt).Round(time.Millisecond))
	if d := took.Sub(stopAt); d > time.Second {
		t.Errorf("takeover after a graceful stop took %v", d)
	}
	if g := announced(macs[owner], stopAt); !g[vip] || !g[gw] {
		t.Errorf("the returning owner announced %v; want the VIP and the gateway", g)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()

	// Never two answers to one request; the gateway answered like the VIP.
	per := map[netip.Addr][]string{}
	gwBy := map[string]bool{}
	for _, e := range c.Answers() {
		per[e.TPA] = append(per[e.TPA], e.SHA.String())
		if e.SPA.String() == gw {
			gwBy[e.SHA.String()] = true
		}
	}
	if !gwBy[macs[0]] || !gwBy[macs[1]] {
		t.Errorf("the gateway address was answered by %v; want each edge while it owned the segment", gwBy)
	}
	for a, by := range per {
		if len(by) > 1 {
			t.Errorf("request from %v answered %d times, by %v", a, len(by), by)
		}
	}
	t.Logf("%d requests, %d answered once", seq.Load(), len(per))
}

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// syncBuf is a log buffer two goroutines may write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestARPOwnershipProcesses runs two `azgate edge` processes of one set
// on a DMZ segment (a bridge namespace) with --arp-iface and
// --arp-gateway, and a client there that asks for the VIP's and the
// gateway's MAC every 10 ms: one edge answers; SIGKILL it and the other
// answers within the lease TTL plus etcd's expiry check, after a
// gratuitous ARP; the killed edge restarted does not take ownership
// back; draining the owner hands ownership over at once. No request is
// ever answered twice. Namespaces azgt-arpe-PID-*, not the lab's.
func TestARPOwnershipProcesses(t *testing.T) {
	bin := labBinary(t)
	const (
		vip = "198.51.100.80"
		gw  = "198.51.100.254"
		ttl = 2 * time.Second
	)
	prefix := fmt.Sprintf("azgt-arpe-%d-", os.Getpid())
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
		return n
	}
	br, cl := node("br"), node("cl")
	edges := []*netlab.Node{node("e1"), node("e2")}
	bridge := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	must(br.Handle().LinkAdd(bridge))
	pass, err := dataplane.LoadBench()
	must(err)
	t.Cleanup(func() { pass.Close() })
	port := func(dev string) {
		l, err := br.Handle().LinkByName(dev)
		must(err)
		must(br.Handle().LinkSetMaster(l, bridge))
		// A veth delivers XDP_TX'd frames only when its peer runs XDP.
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
		must(e.Addr("dmz0", fmt.Sprintf("192.0.2.%d/24", i+1)))
		must(netlab.Veth(netlab.End{Node: e, Dev: "ul0"}, netlab.End{Node: br, Dev: fmt.Sprintf("u%d", i)}, 0))
		must(e.Addr("ul0", fmt.Sprintf("198.18.0.%d/24", i+1)))
	}
	must(netlab.Veth(netlab.End{Node: cl, Dev: "eth0", MAC: "02:00:00:00:03:01"}, netlab.End{Node: br, Dev: "pc"}, 0))
	port("pc")
	bl, err := br.Handle().LinkByName("br0")
	must(err)
	must(br.Handle().LinkSetUp(bl))

	st := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	set := func(drained string) {
		t.Helper()
		es := &model.EdgeSet{Name: "dmz", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}
		for i := range edges {
			name := fmt.Sprintf("e%d", i+1)
			es.Edges = append(es.Edges, model.EdgeNode{Name: name, Underlay: netip.MustParseAddr(fmt.Sprintf("198.18.0.%d", i+1)),
				Drained: name == drained})
		}
		svc := &model.Service{Name: "web", VIP: netip.MustParseAddr(vip), Mode: "nat",
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: netip.MustParseAddr("192.0.2.50")}}}}}
		for _, o := range []model.Object{es, svc} {
			if errs := o.Validate(); len(errs) > 0 {
				t.Fatalf("%s: %v", o.Key(), errs)
			}
		}
		// With their scopes' copies, as the controller writes them.
		_, err := placementtest.Put(ctx, st, es, svc)
		must(err)
	}
	set("")

	type proc struct {
		cmd *exec.Cmd
		log *syncBuf
	}
	procs := make([]*proc, len(edges))
	var pins []string
	var logs []*syncBuf
	start := func(i int) {
		pin := filepath.Join("/sys/fs/bpf/azgate", edges[i].Name)
		pins = append(pins, pin)
		p := &proc{log: &syncBuf{}}
		logs = append(logs, p.log)
		p.cmd = edges[i].Cmd(bin, "edge", "--name", fmt.Sprintf("e%d", i+1), "--attach", "dmz0,ul0",
			"--etcd-endpoints", st.Client.Endpoints()[0], "--pin-dir", pin, "--metrics-listen", "",
			"--arp-iface", "dmz0", "--arp-gateway", gw, "--arp-lease-ttl", ttl.String(), "--log-level", "debug")
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		must(p.cmd.Start())
		procs[i] = p
	}
	stop := func(i int, sig syscall.Signal) {
		p := procs[i]
		if p == nil || p.cmd.ProcessState != nil {
			return
		}
		p.cmd.Process.Signal(sig)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-done
			t.Errorf("e%d did not stop on %v", i+1, sig)
		}
	}
	t.Cleanup(func() {
		for i := range procs {
			stop(i, syscall.SIGKILL)
		}
		for _, p := range pins {
			os.RemoveAll(p)
		}
		if t.Failed() {
			for i, l := range logs {
				t.Logf("process %d log:\n%s", i, l.String())
			}
		}
	})

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
	// answeredBy waits until the last three answers come from mac and
	// returns when mac's run of answers began.
	answeredBy := func(mac string, within time.Duration) time.Time {
		t.Helper()
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			as := c.Answers()
			n := len(as)
			if n < 3 || as[n-1].SHA.String() != mac || as[n-2].SHA.String() != mac || as[n-3].SHA.String() != mac {
				continue
			}
			for i := n - 1; i >= 0; i-- {
				if as[i].SHA.String() != mac {
					return as[i+1].At
				}
			}
			return as[0].At
		}
		t.Fatalf("%s does not answer within %v (%d ARP frames seen)", mac, within, c.Seen())
		return time.Time{}
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
	arpStatus := func(name string) *model.ARPStatus {
		es, err := store.NodeStatuses(ctx, st, "edge")
		must(err)
		for _, e := range es {
			if e.Name == name {
				return e.Status.ARP
			}
		}
		return nil
	}

	start(0)
	start(1)
	var owner int
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if as := c.Answers(); len(as) > 0 {
			owner = map[string]int{macs[0]: 0, macs[1]: 1}[as[len(as)-1].SHA.String()]
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no edge answers ARP for the VIP (%d ARP frames seen)", c.Seen())
		}
	}
	other := 1 - owner
	answeredBy(macs[owner], time.Second)
	if g := announced(macs[owner], time.Time{}); !g[vip] || !g[gw] {
		t.Errorf("the first owner announced %v; want the VIP and the gateway (gratuitous ARPs seen: %+v)", g, c.Gratuitous())
	}
	// The statuses say who owns the segment (published every 2 s).
	waitStatus := func(name string, ok func(*model.ARPStatus) bool) {
		t.Helper()
		var s *model.ARPStatus
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if s = arpStatus(name); s != nil && ok(s) {
				return
			}
		}
		t.Errorf("%s's ARP status: %+v", name, s)
	}
	waitStatus(fmt.Sprintf("e%d", owner+1), func(s *model.ARPStatus) bool { return s.Owner && s.Scope == "dmz" })
	waitStatus(fmt.Sprintf("e%d", other+1), func(s *model.ARPStatus) bool { return !s.Owner && s.Scope == "dmz" })

	// SIGKILL the owner: its program keeps running, with its deadline.
	killAt := time.Now()
	stop(owner, syscall.SIGKILL)
	took := answeredBy(macs[other], ttl+3*time.Second)
	var last time.Time
	for _, e := range c.Answers() {
		if e.SHA.String() == macs[owner] {
			last = e.At
		}
	}
	t.Logf("SIGKILL: the old owner's program answered last %v after the kill; the new owner answers %v after it (silence %v)",
		last.Sub(killAt).Round(time.Millisecond), took.Sub(killAt).Round(time.Millisecond), took.Sub(last).Round(time.Millisecond))
	if d := took.Sub(killAt); d > ttl+1500*time.Millisecond {
		t.Errorf("takeover after SIGKILL took %v; want at most the lease TTL %v + 1.5 s", d, ttl)
	}
	if g := announced(macs[other], killAt); !g[vip] || !g[gw] {
		t.Errorf("the new owner announced %v; want the VIP and the gateway", g)
	}

	// The killed edge comes back (adopting its pinned data plane): no
	// preemption.
	start(owner)
	back := time.Now()
	time.Sleep(3 * ttl)
	for _, e := range c.Answers() {
		if e.At.After(back) && e.SHA.String() != macs[other] {
			t.Fatalf("the restarted edge answered at %v", e.At.Sub(back))
		}
	}

	// Drain the owner: it gives ownership up, the restarted edge takes over.
	drainAt := time.Now()
	set(fmt.Sprintf("e%d", other+1))
	took = answeredBy(macs[owner], 3*time.Second)
	t.Logf("drain: the other edge answers %v after the drain was written", took.Sub(drainAt).Round(time.Millisecond))
	if g := announced(macs[owner], drainAt); !g[vip] || !g[gw] {
		t.Errorf("the owner after the drain announced %v; want the VIP and the gateway", g)
	}
	waitStatus(fmt.Sprintf("e%d", other+1), func(s *model.ARPStatus) bool { return !s.Owner && s.Scope == "" })
	waitStatus(fmt.Sprintf("e%d", owner+1), func(s *model.ARPStatus) bool { return s.Owner && s.Scope == "dmz" })

	// SIGTERM: the owner stops answering and hands over (nobody else is
	// in the scope: nobody answers).
	stop(owner, syscall.SIGTERM)
	stop(other, syscall.SIGTERM)
	stopped := time.Now()
	time.Sleep(ttl)
	cancel()
	for _, e := range c.Answers() {
		if e.At.After(stopped) {
			t.Errorf("%s answered %v after the edges stopped (a stopped edge keeps forwarding, but answers no ARP)", e.SHA, e.At.Sub(stopped))
			break
		}
	}
	if d := c.DoubleAnswers(); len(d) > 0 {
		t.Errorf("%d requests answered twice: %v", len(d), d)
	}
	t.Logf("%d requests, %d answers", seq.Load(), len(c.Answers()))
}

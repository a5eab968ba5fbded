package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// bedLinks is the dptest bed's guest link: every guest is on g1; live,
// the guest program is attached to it.
type bedLinks struct {
	ifindex int
	env     *dptest.Env
	dp      *dataplane.Agent
	live    bool
}

func (b bedLinks) GuestInterface(netip.Addr) (string, int, error) {
	return dptest.GuestDev, b.ifindex, nil
}

func (b bedLinks) AttachGuest(ifname string) error {
	if !b.live {
		return nil
	}
	return b.env.Node.Do(func() error { return b.dp.AttachGuest(ifname) })
}

func (bedLinks) DetachGuest(string) error          { return nil }
func (bedLinks) KeepResolved(string, []netip.Addr) {}

// TestAgentSetsDataPlane is the whole agent side of issue 8 in one
// namespace: a real store with the edges' announce keys, the reconciler,
// the real agent data plane, and guest replies run through
// xdp_agent_guest (BPF_PROG_TEST_RUN). The replies of an EIP go to the
// announcing members of the set that serves it and nowhere else: a member
// whose key is revoked is never chosen again; pulled out, they go to the
// dedicated set's members once every live one announces the EIP's /32
// (the prefix set's meanwhile: make-before-break); quarantined, to the
// quarantine set's (statically routed: at once).
func TestAgentSetsDataPlane(t *testing.T) { setsScenario(t, false) }

// TestAgentSetsLive is the same with live packets: the guest program is
// attached to the guest's link, the guest's frames are sent into it from
// the guest's side and the tunnelled replies are read where the underlay
// router would forward them to the edges.
func TestAgentSetsLive(t *testing.T) { setsScenario(t, true) }

func setsScenario(t *testing.T, live bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, network namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	dp, err := dataplane.LoadAgent(dataplane.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		t.Fatal(err)
	}

	eip := a("198.51.100.7")
	st := model.NewState()
	for _, o := range []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "h1", AZ: "az1", Underlay: a(dptest.UlAddr), Guests: []model.Guest{{Name: "g1", Address: a(dptest.GuestAddr), VSID: 5000}}},
		&model.EdgeSet{Name: "pop", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, BGP: &model.SetBGP{ASN: 64512},
			Edges: []model.EdgeNode{bgpNode("e1", "198.18.1.1"), bgpNode("e2", "198.18.1.2"), bgpNode("e3", "198.18.1.3")}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, BGP: &model.SetBGP{ASN: 64512},
			Edges: []model.EdgeNode{bgpNode("h1", "198.18.2.1"), bgpNode("h2", "198.18.2.2")}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, Edges: []model.EdgeNode{{Name: "q1", Underlay: a("198.18.3.1")}}},
		&model.EIP{Address: eip, Binding: &model.Binding{Host: "h1", Guest: "g1"}},
	} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}

	s := embeddedtest.Store(t)
	var wire *liveWire
	if live {
		if wire, err = newLiveWire(env); err != nil {
			t.Fatal(err)
		}
		defer wire.Close()
		defer env.Node.Do(func() error { return dp.Detach(dptest.GuestDev) })
	}
	r, err := NewReconciler(Config{NoRetry: true, Name: "h1", Underlay: dptest.UlDev, Log: quiet}, dp, bedLinks{ifindex: g1, env: env, dp: dp, live: live})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); WatchAnnouncements(ctx, s, r, quiet, nil) }()
	defer func() { cancel(); <-done }()
	leases := map[string]store.LeaseID{}
	// announce writes edge's announce key (again, with the same lease,
	// when it holds one) listing routes.
	announce := func(set, edge, underlay string, routes ...string) {
		t.Helper()
		id, ok := leases[set+"/"+edge]
		if !ok {
			if id, err = s.Grant(ctx, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := s.KeepAlive(ctx, id); err != nil {
				t.Fatal(err)
			}
			leases[set+"/"+edge] = id
		}
		an := model.Announcement{Set: set, Edge: edge, Underlay: a(underlay)}
		for _, r := range routes {
			an.Prefixes = append(an.Prefixes, netip.MustParsePrefix(r))
		}
		v, _ := json.Marshal(an)
		if err := s.WriteLeased(ctx, id, []store.KV{{Key: store.AnnounceKey(set, edge), Value: v}}); err != nil {
			t.Fatal(err)
		}
	}
	revoke := func(key string) {
		t.Helper()
		if err := s.Revoke(ctx, leases[key]); err != nil {
			t.Fatal(err)
		}
		delete(leases, key)
	}
	// waitGroup waits until set's group holds exactly want.
	waitGroup := func(set string, want ...string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			gs, _ := r.Groups()
			if fmt.Sprint(gs[set].Members) == fmt.Sprint(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %s: %v, want %v", set, gs[set].Members, want)
			}
		}
	}
	// chosen runs 64 guest replies (distinct client ports) through
	// xdp_agent_guest and returns the edges they were tunnelled to.
	chosen := func() []string {
		t.Helper()
		seen := map[string]bool{}
		for port := 1; port <= 64; port++ {
			if live {
				for _, e := range wire.send(t, guestFrame(t, uint16(40000+port))) {
					seen[e] = true
				}
				continue
			}
			out := guestReply(t, env, dp, uint16(40000+port))
			seen[out] = true
		}
		var list []string
		for e := range seen {
			list = append(list, e)
		}
		sort.Strings(list)
		return list
	}
	expect := func(what string, want ...string) {
		t.Helper()
		if got := chosen(); !slices.Equal(got, want) {
			t.Fatalf("%s: replies went to %v, want %v", what, got, want)
		}
	}

	announce("pop", "e1", "198.18.1.1", "198.51.100.0/24")
	announce("pop", "e2", "198.18.1.2", "198.51.100.0/24")
	announce("hot", "h1", "198.18.2.1")
	announce("hot", "h2", "198.18.2.2")
	r.Handle(st, 1, nil, true)
	if errs := r.Status(time.Now(), nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	waitGroup("pop", "198.18.1.1", "198.18.1.2")
	waitGroup("hot", "198.18.2.1", "198.18.2.2")
	expect("e1 and e2 announce (e3 does not)", "198.18.1.1", "198.18.1.2")

	revoke("pop/e2")
	waitGroup("pop", "198.18.1.1")
	expect("e2 withdrew", "198.18.1.1")

	waitEIPGroup := func(set string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			r.mu.Lock()
			want := r.groupSlot[set]
			r.mu.Unlock()
			if e := r.Programmed()[eip]; e.Group == want && want != 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the EIP's group is %d, want %s's %d", r.Programmed()[eip].Group, set, want)
			}
		}
	}
	// Pulled out into hot: its replies stay with pop (which holds the
	// EIP) until every live member of hot announces its /32.
	put(t, st, &model.EIP{Address: eip, Binding: &model.Binding{Host: "h1", Guest: "g1"}, Set: "hot"})
	r.Handle(st, 2, nil, true)
	expect("pulled out into hot, which does not announce it yet", "198.18.1.1")
	announce("hot", "h1", "198.18.2.1", "198.51.100.7/32")
	waitAnnounced := func(set, edge string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			r.mu.Lock()
			ok := r.ann.Covers(set, edge, eip)
			r.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s's announcement of %v never reached the reconciler", set, edge, eip)
			}
		}
	}
	waitAnnounced("hot", "h1")
	expect("h1 announces the /32, h2 not yet", "198.18.1.1")
	announce("hot", "h2", "198.18.2.2", "198.51.100.7/32")
	waitEIPGroup("hot")
	expect("both of hot's members announce the /32", "198.18.2.1", "198.18.2.2")

	// Both of hot's members withdraw: upstream, pop's /24 takes the
	// EIP's traffic again, and so do pop's live members its replies.
	revoke("hot/h1")
	revoke("hot/h2")
	waitEIPGroup("pop")
	expect("hot has no live member: back to pop's", "198.18.1.1")
	announce("hot", "h2", "198.18.2.2", "198.51.100.7/32")
	waitEIPGroup("hot")
	waitGroup("hot", "198.18.2.2")
	expect("h2 announces again", "198.18.2.2")

	// quar's member has no BGP (statically routed): at once.
	put(t, st, &model.Quarantine{Address: eip})
	r.Handle(st, 3, nil, true)
	expect("quarantined", "198.18.3.1")

	if _, err := st.Delete(model.KindQuarantine, eip.String()); err != nil {
		t.Fatal(err)
	}
	put(t, st, &model.EIP{Address: eip, Binding: &model.Binding{Host: "h1", Guest: "g1"}})
	r.Handle(st, 4, nil, true)
	announce("pop", "e3", "198.18.1.3", "198.51.100.0/24")
	waitGroup("pop", "198.18.1.1", "198.18.1.3")
	expect("back in pop, e3 announcing now", "198.18.1.1", "198.18.1.3")
}

// guestFrame is a UDP reply of the bed's guest to client port dport.
func guestFrame(t *testing.T, dport uint16) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	udp := &layers.UDP{SrcPort: 53, DstPort: layers.UDPPort(dport)}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(dptest.GuestAddr).To4(), DstIP: net.ParseIP("203.0.113.50").To4()}
	udp.SetNetworkLayerForChecksum(ip)
	eth := &layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.VMMAC), DstMAC: dptest.MustMAC(dptest.GuestMAC), EthernetType: layers.EthernetTypeIPv4}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// guestReply runs one UDP reply of the bed's guest to client port dport
// through xdp_agent_guest and returns the outer destination (the edge).
func guestReply(t *testing.T, env *dptest.Env, dp *dataplane.Agent, dport uint16) string {
	t.Helper()
	res, err := env.Run(dp.GuestProgram(), dptest.GuestDev, guestFrame(t, dport))
	if err != nil {
		t.Fatal(err)
	}
	const xdpRedirect = 4
	if res.Action != xdpRedirect {
		st, _ := dp.Stats()
		t.Fatalf("guest reply: XDP action %d, want redirect (counters %v)", res.Action, nonZero(st))
	}
	p := gopacket.NewPacket(res.Out, layers.LayerTypeEthernet, gopacket.Default)
	outer, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if outer == nil || outer.Protocol != layers.IPProtocolGRE || outer.SrcIP.String() != dptest.UlAddr {
		t.Fatalf("not NVGRE from the host: %v", p)
	}
	return outer.DstIP.String()
}

func nonZero(m map[string]dataplane.Count) map[string]dataplane.Count {
	out := map[string]dataplane.Count{}
	for k, v := range m {
		if v != (dataplane.Count{}) {
			out[k] = v
		}
	}
	return out
}

// Package bgptest runs edges' reconcilers and announcers, with real BGP
// speakers, on a real embedded store against a real BIRD router: the
// router's kernel table shows one multipath route over the healthy
// members of the set, and a drained one leaves it. (A package of its own:
// its tests run in a namespace of their own, birdtest.Main.)
package bgptest

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bgp/birdtest"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

func TestMain(m *testing.M) { birdtest.Main(m, "azgt-edgebgp-") }

var (
	quiet      = slog.New(slog.DiscardHandler)
	routerAddr = netip.MustParseAddr("192.0.2.1")
	edgeAddrs  = []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")}
	setPrefix  = netip.MustParsePrefix("198.51.100.0/24")
	hotEIP     = netip.MustParseAddr("198.51.100.7")
)

const (
	routerASN = 64512
	setASN    = 64601
)

func region(drained map[string]bool) []model.Object {
	set := &model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{setPrefix}, BGP: &model.SetBGP{ASN: setASN, HoldTime: 3, Keepalive: 1}}
	for i, a := range edgeAddrs {
		name := []string{"edge-a1", "edge-a2"}[i]
		set.Edges = append(set.Edges, model.EdgeNode{Name: name, Underlay: netip.MustParseAddr("198.18.0." + []string{"1", "2"}[i]),
			Drained: drained[name],
			BGP:     &model.NodeBGP{RouterID: a, NextHop: a, Peers: []model.BGPPeer{{Address: routerAddr, ASN: routerASN, Password: "md5-pw"}}}})
	}
	return []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: netip.MustParseAddr("198.18.11.1"),
			Guests: []model.Guest{{Name: "g1", Address: netip.MustParseAddr("198.19.11.1"), VSID: 5001}}},
		set,
		&model.EIP{Address: hotEIP, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
	}
}

// write writes objs with their scopes' copies, as the controller does.
func write(t *testing.T, s *store.Store, objs ...model.Object) {
	t.Helper()
	if _, err := placementtest.Put(context.Background(), s, objs...); err != nil {
		t.Fatal(err)
	}
}

// runEdge runs one edge: a reconciler on fake maps following its set's
// share of the store,
// and its announcer with a real speaker dialling from its own address.
func runEdge(ctx context.Context, t *testing.T, s *store.Store, name string, local netip.Addr) *edge.Announcer {
	r := edge.NewReconciler(edge.Config{Name: name, Log: quiet}, dataplane.NewFakeEdge())
	t.Cleanup(r.Stop)
	spk := bgp.New(quiet)
	// Two edges share the test's namespace: each sources its session
	// from its own address (LocalAddress), as two machines would.
	ann := edge.NewAnnouncer(edge.AnnounceConfig{Name: name, Settle: 100 * time.Millisecond, Log: quiet},
		localSpeaker{spk, local}, s, r.AnnouncePlan, nil)
	r.OnApplied = func(int64) { ann.Kick() }
	go edge.FollowShare(ctx, s, name, r, quiet)
	ann.Start(ctx)
	return ann
}

// localSpeaker pins the session's source address.
type localSpeaker struct {
	*bgp.Speaker
	local netip.Addr
}

func (l localSpeaker) Configure(ctx context.Context, c bgp.Config) error {
	c.LocalAddress = l.local
	return l.Speaker.Configure(ctx, c)
}

func announced(t *testing.T, s *store.Store) map[string]bool {
	t.Helper()
	es, _, err := store.Announcements(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range es {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
		out[e.Announcement.Edge] = true
	}
	return out
}

func waitKeys(t *testing.T, s *store.Store, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := announced(t, s)
		ok := len(got) == len(want)
		for _, w := range want {
			ok = ok && got[w]
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("announce keys %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSetECMPDrainShutdown(t *testing.T) {
	r := birdtest.New(t, "r")
	r.Link(t, "up0", "azgtebgp0", netip.PrefixFrom(routerAddr, 24),
		netip.PrefixFrom(edgeAddrs[0], 24), netip.PrefixFrom(edgeAddrs[1], 24))
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, Peers: []birdtest.Peer{
		{Name: "edge_a1", Address: edgeAddrs[0], ASN: setASN, Password: "md5-pw"},
		{Name: "edge_a2", Address: edgeAddrs[1], ASN: setASN, Password: "md5-pw"},
	}})
	s := embeddedtest.Store(t)
	write(t, s, region(nil)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a1 := runEdge(ctx, t, s, "edge-a1", edgeAddrs[0])
	a2 := runEdge(ctx, t, s, "edge-a2", edgeAddrs[1])

	d := r.WaitNextHops(t, setPrefix, edgeAddrs, 20*time.Second)
	t.Logf("multipath route over both edges after %v:\n%s", d, r.IPRoute())
	waitKeys(t, s, "edge-a1", "edge-a2")
	if st := a1.Status(ctx); !st.Announcing || len(st.Sessions) != 1 || st.Sessions[0].State != "established" || len(st.Advertised) != 1 {
		t.Fatalf("edge-a1 status: %+v", st)
	}

	// Drain edge-a1 through the store: it leaves the route and the keys.
	write(t, s, region(map[string]bool{"edge-a1": true})...)
	d = r.WaitNextHops(t, setPrefix, edgeAddrs[1:], 5*time.Second)
	t.Logf("drained edge-a1 left the route %v after the write", d)
	waitKeys(t, s, "edge-a2")
	if st := a1.Status(ctx); st.Announcing || len(st.Failing) != 1 || st.Failing[0] != edge.CondDrained || st.Sessions[0].State != "established" {
		t.Fatalf("drained edge-a1 status: %+v", st)
	}

	// Undrained, it comes back.
	write(t, s, region(nil)...)
	r.WaitNextHops(t, setPrefix, edgeAddrs, 5*time.Second)

	// SIGTERM path: withdraw, wait, delete the key.
	start := time.Now()
	if err := a2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("edge-a2 shut down in %v", time.Since(start))
	r.WaitNextHops(t, setPrefix, edgeAddrs[:1], 2*time.Second)
	waitKeys(t, s, "edge-a1")
	if err := a1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, nil, 2*time.Second)
	waitKeys(t, s)
}

// A pulled-out /32 is announced by the dedicated set's edge only, and a
// quarantined /32 by the quarantine set's edge only; the prefix set keeps
// its /24. Both go away when the address returns or is released.
func TestPullOutAndQuarantine(t *testing.T) {
	prefixEdge, dedicated, quarantine := edgeAddrs[0], netip.MustParseAddr("192.0.2.4"), netip.MustParseAddr("192.0.2.5")
	r := birdtest.New(t, "r")
	r.Link(t, "up0", "azgtebgp1", netip.PrefixFrom(routerAddr, 24),
		netip.PrefixFrom(prefixEdge, 24), netip.PrefixFrom(dedicated, 24), netip.PrefixFrom(quarantine, 24))
	var peers []birdtest.Peer
	for i, a := range []netip.Addr{prefixEdge, dedicated, quarantine} {
		peers = append(peers, birdtest.Peer{Name: []string{"edge_a1", "edge_d1", "edge_q1"}[i], Address: a, ASN: setASN})
	}
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, Peers: peers})

	nodeBGP := func(a netip.Addr) *model.NodeBGP {
		return &model.NodeBGP{RouterID: a, NextHop: a, Peers: []model.BGPPeer{{Address: routerAddr, ASN: routerASN}}}
	}
	sb := &model.SetBGP{ASN: setASN, HoldTime: 3, Keepalive: 1}
	objs := []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: netip.MustParseAddr("198.18.11.1"),
			Guests: []model.Guest{{Name: "g1", Address: netip.MustParseAddr("198.19.11.1"), VSID: 5001}}},
		&model.EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{setPrefix}, BGP: sb,
			Edges: []model.EdgeNode{{Name: "edge-a1", Underlay: netip.MustParseAddr("198.18.0.1"), BGP: nodeBGP(prefixEdge)}}},
		&model.EdgeSet{Name: "hot", Role: model.RoleDedicated, BGP: sb,
			Edges: []model.EdgeNode{{Name: "edge-d1", Underlay: netip.MustParseAddr("198.18.0.4"), BGP: nodeBGP(dedicated)}}},
		&model.EdgeSet{Name: "quar", Role: model.RoleQuarantine, BGP: sb,
			Edges: []model.EdgeNode{{Name: "edge-q1", Underlay: netip.MustParseAddr("198.18.0.5"), BGP: nodeBGP(quarantine)}}},
		&model.EIP{Address: hotEIP, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}},
		&model.EIP{Address: netip.MustParseAddr("198.51.100.8")},
	}
	s := embeddedtest.Store(t)
	write(t, s, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runEdge(ctx, t, s, "edge-a1", prefixEdge)
	runEdge(ctx, t, s, "edge-d1", dedicated)
	runEdge(ctx, t, s, "edge-q1", quarantine)
	r.WaitNextHops(t, setPrefix, []netip.Addr{prefixEdge}, 20*time.Second)
	hot32 := netip.PrefixFrom(hotEIP, 32)
	attacked := netip.MustParseAddr("198.51.100.8")
	att32 := netip.PrefixFrom(attacked, 32)

	write(t, s, &model.EIP{Address: hotEIP, Set: "hot", Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	d := r.WaitNextHops(t, hot32, []netip.Addr{dedicated}, 10*time.Second)
	t.Logf("pulled-out /32 in the router %v after the write:\n%s", d, r.IPRoute())
	write(t, s, &model.Quarantine{Address: attacked, Reason: "test"})
	r.WaitNextHops(t, att32, []netip.Addr{quarantine}, 10*time.Second)
	if got, _ := r.NextHops(setPrefix); len(got) != 1 || got[0] != prefixEdge {
		t.Fatalf("the /24 changed: %v", got)
	}

	write(t, s, &model.EIP{Address: hotEIP, Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	r.WaitNextHops(t, hot32, nil, 5*time.Second)
	if _, err := placementtest.Delete(ctx, s, placement.Ref{Kind: model.KindQuarantine, Key: attacked.String()}); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, att32, nil, 5*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{prefixEdge}, time.Second)
}

// The edge daemon itself (real XDP data plane on the test's veth): its
// routes are gone from the router by the time it returns from SIGTERM
// (its context ending), and withdrawn when its data plane is unloaded
// under it.
func TestDaemonSIGTERMAndUnload(t *testing.T) {
	r := birdtest.New(t, "r")
	// The veth is both its Internet side and (holding its underlay
	// address) its underlay side.
	r.Link(t, "up0", "azgtebgp2", netip.PrefixFrom(routerAddr, 24), netip.PrefixFrom(edgeAddrs[0], 24),
		netip.MustParsePrefix("198.18.0.1/32"))
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, Peers: []birdtest.Peer{
		{Name: "edge_a1", Address: edgeAddrs[0], ASN: setASN, Password: "md5-pw"},
	}})
	s := embeddedtest.Store(t)
	objs := region(nil)
	set := objs[2].(*model.EdgeSet)
	set.Edges = set.Edges[:1]
	write(t, s, objs...)

	pins := dataplane.NodePinDir(fmt.Sprintf("azgt-edgebgp-%d", os.Getpid()))
	t.Cleanup(func() { dataplane.RemovePins(pins) })
	cfg := edge.Config{Name: "edge-a1", Interfaces: []string{"azgtebgp2"}, HashSeed: flowhash.DefaultHashSeed, Log: quiet,
		StatusInterval: 200 * time.Millisecond, AnnounceSettle: 100 * time.Millisecond}
	run := func() (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- edge.Run(ctx, cfg, s, dataplane.LoadOptions{PinDir: pins}, "") }()
		t.Cleanup(func() { cancel(); <-errc })
		return cancel, errc
	}

	stop, errc := run()
	d := r.WaitNextHops(t, setPrefix, edgeAddrs[:1], 20*time.Second)
	t.Logf("daemon's route in the router after %v", d)
	waitKeys(t, s, "edge-a1")
	stop() // what SIGTERM does
	if err := <-errc; err != nil && err != context.Canceled {
		t.Fatalf("edge.Run: %v", err)
	}
	errc <- nil // for the cleanup
	if got, _ := r.NextHops(setPrefix); len(got) != 0 {
		t.Fatalf("route still in the router when the daemon returned: %v", got)
	}
	waitKeys(t, s)
	if _, err := os.Stat(pins); err != nil {
		t.Fatalf("pins gone after SIGTERM: %v", err)
	}

	run()
	r.WaitNextHops(t, setPrefix, edgeAddrs[:1], 20*time.Second)
	if err := dataplane.RemovePins(pins); err != nil {
		t.Fatal(err)
	}
	d = r.WaitNextHops(t, setPrefix, nil, 5*time.Second)
	t.Logf("route withdrawn %v after the data plane was unloaded", d)
	waitKeys(t, s)
}

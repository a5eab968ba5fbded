package bgptest

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp/birdtest"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

var (
	routerAddr6 = netip.MustParseAddr("2001:db8:ff::1")
	edgeAddrs6  = []netip.Addr{netip.MustParseAddr("2001:db8:ff::2"), netip.MustParseAddr("2001:db8:ff::3")}
	setPrefix6  = netip.MustParsePrefix("2001:db8:a::/48")
)

// region6 is region with the set owning an IPv6 prefix beside its IPv4
// one, and each edge an IPv6 next hop.
func region6(drained map[string]bool) []model.Object {
	objs := region(drained)
	set := objs[2].(*model.EdgeSet)
	set.Prefixes = append(set.Prefixes, setPrefix6)
	for i := range set.Edges {
		set.Edges[i].BGP.NextHop6 = edgeAddrs6[i]
	}
	return objs
}

// A set's IPv6 prefix, from the store to the router: both edges announce
// it over MP-BGP, BIRD installs one multipath route over their IPv6 next
// hops beside the IPv4 one; a drained edge leaves both, a stopped one
// too. The announce keys list the IPv6 prefix for the agents.
func TestSetIPv6ECMPDrainShutdown(t *testing.T) {
	r := birdtest.New(t, "r6")
	r.Link(t, "up0", "azgtebgp6", netip.PrefixFrom(routerAddr, 24),
		netip.PrefixFrom(edgeAddrs[0], 24), netip.PrefixFrom(edgeAddrs[1], 24),
		netip.PrefixFrom(edgeAddrs6[0], 64), netip.PrefixFrom(edgeAddrs6[1], 64))
	r.AddAddrs(t, "up0", netip.PrefixFrom(routerAddr6, 64))
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, IPv6: true, Peers: []birdtest.Peer{
		{Name: "edge_a1", Address: edgeAddrs[0], ASN: setASN, Password: "md5-pw"},
		{Name: "edge_a2", Address: edgeAddrs[1], ASN: setASN, Password: "md5-pw"},
	}})
	s := embeddedtest.Store(t)
	write(t, s, region6(nil)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a1 := runEdge(ctx, t, s, "edge-a1", edgeAddrs[0])
	a2 := runEdge(ctx, t, s, "edge-a2", edgeAddrs[1])

	d := r.WaitNextHops(t, setPrefix6, edgeAddrs6, 20*time.Second)
	r.WaitNextHops(t, setPrefix, edgeAddrs, 5*time.Second)
	t.Logf("IPv6 multipath route over both edges after %v:\n%s", d, r.IPRoute())
	waitKeys(t, s, "edge-a1", "edge-a2")
	es, _, err := store.Announcements(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !slices.Contains(e.Announcement.Prefixes, setPrefix6) {
			t.Errorf("announce key of %s: %v, no %v", e.Announcement.Edge, e.Announcement.Prefixes, setPrefix6)
		}
	}
	if st := a1.Status(ctx); !st.Announcing || len(st.Advertised) != 2 || st.Sessions[0].Advertised != 2 {
		t.Fatalf("edge-a1 status: %+v", st)
	}

	// Drained: edge-a1 leaves both families' routes.
	write(t, s, region6(map[string]bool{"edge-a1": true})...)
	d = r.WaitNextHops(t, setPrefix6, edgeAddrs6[1:], 5*time.Second)
	r.WaitNextHops(t, setPrefix, edgeAddrs[1:], 5*time.Second)
	t.Logf("drained edge-a1 left the IPv6 route %v after the write", d)
	write(t, s, region6(nil)...)
	r.WaitNextHops(t, setPrefix6, edgeAddrs6, 5*time.Second)

	// Stopped (the SIGTERM path): edge-a2's go, edge-a1's stay.
	if err := a2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix6, edgeAddrs6[:1], 2*time.Second)
	r.WaitNextHops(t, setPrefix, edgeAddrs[:1], 2*time.Second)
	if err := a1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix6, nil, 2*time.Second)
	waitKeys(t, s)
}

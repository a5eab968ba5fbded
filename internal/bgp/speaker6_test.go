package bgp

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/azgate/azgate/internal/bgp/birdtest"
)

// IPv6 on the router's segment: router ::1, speakers ::2 and ::3.
var (
	routerAddr6 = netip.MustParseAddr("2001:db8:ff::1")
	spkA6       = netip.MustParseAddr("2001:db8:ff::2")
	spkB6       = netip.MustParseAddr("2001:db8:ff::3")
	setPrefix6  = netip.MustParsePrefix("2001:db8:a::/48")
	pulledOut6  = netip.MustParsePrefix("2001:db8:a::7/128")
)

// router6 is router with IPv6 on the segment and the IPv6 channel on
// every session.
func router6(t *testing.T, speakers ...netip.Addr) *birdtest.Router {
	t.Helper()
	r := birdtest.New(t, "r6")
	r.Link(t, "up0", "azgtbgp6", netip.PrefixFrom(routerAddr, 24),
		netip.PrefixFrom(spkA, 24), netip.PrefixFrom(spkB, 24), netip.PrefixFrom(spkA6, 64), netip.PrefixFrom(spkB6, 64))
	r.AddAddrs(t, "up0", netip.PrefixFrom(routerAddr6, 64))
	var peers []birdtest.Peer
	for _, a := range speakers {
		peers = append(peers, birdtest.Peer{Name: peerName(a), Address: a, ASN: edgeASN})
	}
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, Peers: peers, HoldTime: 3, IPv6: true})
	return r
}

// Two speakers announce a set's IPv4 and IPv6 prefixes over MP-BGP on
// their IPv4 sessions: BIRD installs both with two equal next hops, the
// IPv6 one over the speakers' IPv6 next hops. One speaker stopped leaves
// one next hop in each family. A /128 pull-out is announced and
// withdrawn (WaitWithdrawn reads the IPv6 adj-RIB-out).
func TestIPv6ECMPAndPullOut(t *testing.T) {
	r := router6(t, spkA, spkB)
	ctx := context.Background()
	ca, cb := config(spkA, ""), config(spkB, "")
	ca.NextHop6, cb.NextHop6 = spkA6, spkB6
	a, b := speaker(t, ca), speaker(t, cb)
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)
	r.WaitEstablished(t, peerName(spkB), 15*time.Second)
	for _, s := range []*Speaker{a, b} {
		if err := s.Announce(ctx, []netip.Prefix{setPrefix, setPrefix6}); err != nil {
			t.Fatal(err)
		}
	}
	d := r.WaitNextHops(t, setPrefix6, []netip.Addr{spkA6, spkB6}, 10*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA, spkB}, 5*time.Second)
	t.Logf("IPv6 multipath route over both speakers after %v:\n%s", d, r.IPRoute())
	// BIRD's own table: the /48 from both sessions, over IPv6 next hops.
	out, err := r.Routes()
	if err != nil {
		t.Fatalf("birdc show route: %v: %s", err, out)
	}
	for _, want := range []string{"2001:db8:a::/48", "via 2001:db8:ff::2 on up0", "via 2001:db8:ff::3 on up0", "BGP.next_hop: 2001:db8:ff::2", "BGP.next_hop: 2001:db8:ff::3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("birdc show route all: no %q in\n%s", want, out)
		}
	}
	if st := a.Status(ctx); strings.Join(st.Advertised, ",") != "198.51.100.0/24,2001:db8:a::/48" || st.Sessions[0].Advertised != 2 {
		t.Fatalf("status: %+v", st)
	}

	// The /128 pull-out, from b, over the set's /48.
	if err := b.Announce(ctx, []netip.Prefix{setPrefix, setPrefix6, pulledOut6}); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, pulledOut6, []netip.Addr{spkB6}, 5*time.Second)
	if err := b.Announce(ctx, []netip.Prefix{setPrefix, setPrefix6}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitWithdrawn(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, pulledOut6, nil, 3*time.Second)

	// a stops (Cease): one next hop left in each family.
	a.Stop()
	r.WaitNextHops(t, setPrefix6, []netip.Addr{spkB6}, 5*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkB}, 5*time.Second)

	// b withdraws everything: both families go.
	if err := b.WithdrawAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitWithdrawn(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix6, nil, 3*time.Second)
	r.WaitNextHops(t, setPrefix, nil, 3*time.Second)
}

// Without an IPv6 next hop the sessions stay IPv4-only, as before IPv6:
// an IPv6 prefix is refused with the reason while the IPv4 ones are
// advertised. Configured later, the next hop brings IPv6 up (the
// sessions reset to negotiate it) and the IPv6 prefix out; removed, it
// takes it back.
func TestIPv6NeedsNextHop6(t *testing.T) {
	r := router6(t, spkA)
	ctx := context.Background()
	c := config(spkA, "")
	if got := apiPeer(c.normalized(), c.Peers[0]).AfiSafis; len(got) != 1 || got[0].Config.Family.Afi != api.Family_AFI_IP {
		t.Fatalf("IPv4-only peer families: %v", got)
	}
	s := speaker(t, c)
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)
	err := s.Announce(ctx, []netip.Prefix{setPrefix, setPrefix6})
	if err == nil || !strings.Contains(err.Error(), "no IPv6 next hop") {
		t.Fatalf("Announce without NextHop6: %v", err)
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 5*time.Second)
	if got := s.Advertised(); !slices.Equal(got, []netip.Prefix{setPrefix}) {
		t.Fatalf("advertised %v", got)
	}

	c.NextHop6 = spkA6
	if err := s.Configure(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := apiPeer(c.normalized(), c.Peers[0]).AfiSafis; len(got) != 2 || got[1].Config.Family.Afi != api.Family_AFI_IP6 {
		t.Fatalf("dual-stack peer families: %v", got)
	}
	r.WaitNextHops(t, setPrefix6, []netip.Addr{spkA6}, 15*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 15*time.Second)

	c.NextHop6 = netip.Addr{}
	if err := s.Configure(ctx, c); err == nil || !strings.Contains(err.Error(), "no IPv6 next hop") {
		t.Fatalf("Configure without NextHop6, an IPv6 prefix wanted: %v", err)
	}
	r.WaitNextHops(t, setPrefix6, nil, 15*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 15*time.Second)
	if rib := rib6(t, s); len(rib) != 0 {
		t.Fatalf("IPv6 off, the global RIB still holds %v", rib)
	}

	// A path whose withdrawal failed when IPv6 went off stays in the RIB
	// with nothing naming it: the next sync takes it out.
	path, err := s.path(setPrefix6, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.srv.AddPath(ctx, &api.AddPathRequest{Path: path}); err != nil {
		t.Fatal(err)
	}
	if rib := rib6(t, s); len(rib) != 1 {
		t.Fatalf("the injected path is not in the RIB: %v", rib)
	}
	s.mu.Lock()
	s.stale[setPrefix6] = true
	s.mu.Unlock()
	if err := s.Announce(ctx, []netip.Prefix{setPrefix}); err != nil {
		t.Fatal(err)
	}
	if rib := rib6(t, s); len(rib) != 0 {
		t.Fatalf("a stale IPv6 path was not retried: the global RIB holds %v", rib)
	}
}

// rib6 lists the IPv6 prefixes of s's global RIB.
func rib6(t *testing.T, s *Speaker) []string {
	t.Helper()
	var rib []string
	if err := s.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: v6unicast},
		func(d *api.Destination) { rib = append(rib, d.GetPrefix()) }); err != nil {
		t.Fatal(err)
	}
	return rib
}

// A session over IPv6 (the peer's address is the router's IPv6 one)
// carries both families: the IPv4 prefix with the IPv4 next hop, the
// IPv6 prefix with the IPv6 one.
func TestIPv6Session(t *testing.T) {
	r := birdtest.New(t, "r6s")
	r.Link(t, "up0", "azgtbgp6s", netip.PrefixFrom(routerAddr, 24), netip.PrefixFrom(spkA, 24), netip.PrefixFrom(spkA6, 64))
	r.AddAddrs(t, "up0", netip.PrefixFrom(routerAddr6, 64))
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, IPv6: true,
		Peers: []birdtest.Peer{{Name: "edge_v6", Address: spkA6, ASN: edgeASN, Password: "md5-v6"}}})
	c := config(spkA, "md5-v6")
	c.Peers[0].Address = routerAddr6
	c.LocalAddress6, c.NextHop6 = spkA6, spkA6
	s := speaker(t, c)
	ctx := context.Background()
	r.WaitEstablished(t, "edge_v6", 15*time.Second)
	if err := s.Announce(ctx, []netip.Prefix{setPrefix, setPrefix6}); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix6, []netip.Addr{spkA6}, 5*time.Second)
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 5*time.Second)
	if st := s.Status(ctx); len(st.Sessions) != 1 || st.Sessions[0].Peer != routerAddr6.String() || st.Sessions[0].State != "established" {
		t.Fatalf("status: %+v", st.Sessions)
	}
	if err := s.WithdrawAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitWithdrawn(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix6, nil, 3*time.Second)
	r.WaitNextHops(t, setPrefix, nil, 3*time.Second)
}

package lbplan

import (
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/model"
)

// TestBuildIPv6VIP: an encap service with an IPv6 VIP is planned as an
// IPv4 one (issue 21): its listeners keyed by the IPv6 VIP, its VIP, its
// pool's backends with their hosts' underlay and guests' IPv4 addresses;
// Lookup hashes its flows with flowhash.Hash6, as the edge does (it
// panicked in flowhash.Hash4 before).
func TestBuildIPv6VIP(t *testing.T) {
	svcs := map[string]*model.Service{"web6": {Name: "web6", VIP: a("2001:db8:a::80"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 443, Pool: "web"}, {Protocol: "udp", Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}, {Host: "az2-h1", Guest: "g1"}}}}}}
	p := Build(Input{Services: svcs, Hosts: hosts(), Seed: 7})
	if len(p.Problems) != 0 || !p.VIPs[a("2001:db8:a::80")] || p.Services["web6"] != a("2001:db8:a::80") || p.NAT {
		t.Fatalf("plan %+v", p)
	}
	if _, ok := p.Listeners[Listener{VIP: a("2001:db8:a::80"), Proto: 6, Port: 443}]; !ok || len(p.Listeners) != 2 {
		t.Fatalf("listeners %v", p.Listeners)
	}
	for _, b := range p.Pool("web6/web").Backends {
		if !b.Target.Guest.Is4() || !b.Target.Addr.Is4() || b.Target.Mode != ModeEncap {
			t.Fatalf("backend %+v: want the guest's IPv4 address on the IPv4 underlay", b)
		}
	}
	f := flowhash.Tuple{Src: a("2001:db8:c::10"), Dst: a("2001:db8:a::80"), SrcPort: 40000, DstPort: 443, Proto: 6}
	ch, err := p.Lookup(f)
	if err != nil || ch.Hash != flowhash.Hash6(f, 7) {
		t.Fatalf("choice %+v %v: want flowhash.Hash6's %#x", ch, err, flowhash.Hash6(f, 7))
	}
	if ch.Slot != uint64(ch.Hash)%model.DefaultTableSize || ch.Listener.String() != "tcp:443" {
		t.Fatalf("choice %+v", ch)
	}
}

// TestBuildIPv6VIPCapacity: IPv6 VIPs' single-port listeners count against
// their own map (lb_listeners6: Listeners6Max, and at most the edge's
// --listener-max), IPv4 VIPs' against lb_listeners': a service that
// would overflow its family's map is left out and reported, the other
// family's are not.
func TestBuildIPv6VIPCapacity(t *testing.T) {
	svc := func(name, vip string, ports ...uint16) *model.Service {
		v := &model.Service{Name: name, VIP: a(vip), Mode: model.ModeEncap,
			Pools: []model.Pool{{Name: "p", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}}}}}
		for _, port := range ports {
			v.Listeners = append(v.Listeners, model.Listener{Protocol: "tcp", Port: port, Pool: "p"})
		}
		return v
	}
	svcs := map[string]*model.Service{
		"a6": svc("a6", "2001:db8:a::1", 1, 2),
		"b6": svc("b6", "2001:db8:a::2", 1, 2),
		"c4": svc("c4", "198.51.100.1", 1, 2, 3),
	}
	p := Build(Input{Services: svcs, Hosts: hosts(), ListenersMax: 3})
	if _, ok := p.Services["b6"]; ok || len(p.Services) != 2 || len(p.Problems) != 1 ||
		!strings.Contains(p.Problems[0].String(), "would take the edge to 4 of an IPv6 VIP, the data plane holds 3") {
		t.Fatalf("services %v, problems %q: want b6 left out, a6 and c4 programmed", p.Services, p.Problems)
	}
	if Listeners6Max >= ListenersMax {
		t.Fatalf("Listeners6Max %d is not below ListenersMax %d", Listeners6Max, ListenersMax)
	}
}

package lab

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
)

// TestRegionIsValid: the lab's region document passes the model's checks
// object by object and as a whole, and setplan gives each set the routes
// the lab expects its edges to announce.
func TestRegionIsValid(t *testing.T) {
	l := &Lab{Cfg: Config{AZs: 3, HostsPerAZ: 2, GuestsPerHost: 2}}
	d := l.Region()
	st := model.NewState()
	for _, p := range d.Placed() {
		if es := p.Obj.Validate(); len(es) > 0 {
			t.Fatalf("%s: %v", p.Place, es)
		}
		if _, err := st.Put(p.Obj); err != nil {
			t.Fatalf("%s: %v", p.Place, err)
		}
	}
	// Pull one EIP out and quarantine another: each moves to its own set.
	pulled, quar := netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("198.51.100.9")
	for _, o := range []model.Object{&model.EIP{Address: pulled, Set: DedicatedSet}, &model.Quarantine{Address: quar}} {
		if _, err := st.Put(o); err != nil {
			t.Fatal(err)
		}
	}
	in := setplan.FromState(st)
	for _, c := range []struct {
		edge string
		want []string
	}{
		{"edge-a1", []string{EIPPrefix, EIPPrefix6}}, {"edge-b2", []string{EIPPrefix, EIPPrefix6}},
		{"edge-d1", []string{"198.51.100.8/32"}}, {"edge-q1", []string{"198.51.100.9/32"}},
	} {
		var got []string
		for _, p := range in.Announcements(c.edge) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s announces %v, want %v", c.edge, got, c.want)
		}
	}
	if len(EdgesOf(PrefixSet)) != 4 {
		t.Errorf("prefix set: %v, want two POPs of two edges", EdgesOf(PrefixSet))
	}
	// The addresses BGP uses are the topology's.
	topo := Build("x-", 3, 2, 2)
	for _, e := range Edges {
		if got := topo.Node(e.Name).Addresses["ext0"]; got != EdgeExtOf(e.Name).String()+"/31" {
			t.Errorf("%s ext0 %s, next hop %v", e.Name, got, EdgeExtOf(e.Name))
		}
		if got := topo.Node("rtr").Addresses[e.Name]; got != RouterSideOf(e.Name).String()+"/31" {
			t.Errorf("rtr/%s %s, peer %v", e.Name, got, RouterSideOf(e.Name))
		}
		if got := topo.Node(e.Name).Addresses6["ext0"]; got != EdgeExt6Of(e.Name).String()+"/64" {
			t.Errorf("%s ext0 IPv6 %s, nextHop6 %v", e.Name, got, EdgeExt6Of(e.Name))
		}
	}
	// Every edge's nextHop6 is its ext0 IPv6 address.
	for _, s := range d.EdgeSets {
		for _, e := range s.Edges {
			if e.BGP == nil || e.BGP.NextHop6 != EdgeExt6Of(e.Name) {
				t.Errorf("set %s edge %s: bgp %+v, want nextHop6 %v", s.Name, e.Name, e.BGP, EdgeExt6Of(e.Name))
			}
		}
	}
	if EdgeUnderlayOf("edge-a1").String() != EdgeUnderlay {
		t.Errorf("edge-a1 underlay %v, want %s", EdgeUnderlayOf("edge-a1"), EdgeUnderlay)
	}
}

// TestBirdConfigParses runs Debian's bird2 on the generated configuration
// in parse-only mode (bird -p).
func TestBirdConfigParses(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatalf("bird (Debian bird2) is not installed: %v (scripts/setup.sh installs it)", err)
	}
	f := filepath.Join(t.TempDir(), "bird.conf")
	if err := os.WriteFile(f, []byte(BirdConfig()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bird", "-p", "-c", f).CombinedOutput(); err != nil {
		t.Fatalf("bird -p: %v: %s\n%s", err, out, BirdConfig())
	}
	// Both families: a kernel protocol each, merging equal routes, and
	// every session carrying IPv6 unicast beside IPv4 (MP-BGP).
	conf := BirdConfig()
	for _, want := range []string{"ipv4 { import none; export all; };", "ipv6 { import none; export all; };",
		"ipv4 { import all; export none; };", "ipv6 { import all; export none; };"} {
		if strings.Count(conf, want) != 1 {
			t.Errorf("bird.conf has %q %d times, want once:\n%s", want, strings.Count(conf, want), conf)
		}
	}
	if n := strings.Count(conf, "merge paths on;"); n != 2 {
		t.Errorf("bird.conf merges paths in %d kernel protocols, want 2 (IPv4 and IPv6)", n)
	}
	if n := strings.Count(conf, " from edge {"); n != len(Edges) {
		t.Errorf("bird.conf has %d sessions from the edge template, want %d", n, len(Edges))
	}
}

// TestAddressLayout6: the lab's IPv6 addresses come from 2001:db8::/32
// only and are unique; each edge's link to rtr is a /64 of its own with
// rtr ::1 and the edge ::2; no nextHop6 lies in the set's IPv6 prefix,
// and the layout is the one docs/lab.md gives.
func TestAddressLayout6(t *testing.T) {
	doc := netip.MustParsePrefix("2001:db8::/32")
	topo := Build("x-", 3, 2, 2)
	seen := map[netip.Addr]string{}
	for _, n := range topo.Nodes {
		for dev, cidr := range n.Addresses6 {
			p, err := netip.ParsePrefix(cidr)
			bits := 64
			if n.Name == "rtr" && dev == "dmz" {
				bits = 128 // rtr's address on the DMZ is a host route, as its IPv4 /32
			}
			if err != nil || !p.Addr().Is6() || !doc.Contains(p.Addr()) || p.Bits() != bits {
				t.Errorf("%s/%s: %q (%v), want an IPv6 /%d address in %v", n.Name, dev, cidr, err, bits, doc)
				continue
			}
			// az2-h1 and its guests reuse az1-h1's guest links'
			// addresses (overlapping tenants, as for IPv4): the same
			// address on the same device of the az1-h1 twin.
			if shared := SharedGuestHosts[1]; n.Name == shared || n.Host == shared {
				twin := SharedGuestHosts[0] + strings.TrimPrefix(n.Name, shared)
				if other := seen[p.Addr()]; other != twin+"/"+dev {
					t.Errorf("%v on %s/%s: want it on %s/%s only, found on %q", p.Addr(), n.Name, dev, twin, dev, other)
				}
				continue
			}
			if other, ok := seen[p.Addr()]; ok {
				t.Errorf("%v on %s/%s and %s", p.Addr(), n.Name, dev, other)
			}
			seen[p.Addr()] = n.Name + "/" + dev
		}
		// The Internet side and the guests (and the hosts' side of the
		// guest links) and the DMZ servers are dual-stack; the underlay
		// is not.
		want := n.Role == "internet" || n.Role == "router" || n.Role == "edge" || n.Role == "host" || n.Role == "guest" || n.Role == "server"
		if got := len(n.Addresses6) > 0; got != want {
			t.Errorf("%s (%s): IPv6 addresses %v, want some: %v", n.Name, n.Role, n.Addresses6, want)
		}
	}
	set6 := netip.MustParsePrefix(EIPPrefix6)
	if !doc.Contains(set6.Addr()) || set6.Bits() != 48 {
		t.Errorf("set prefix %v", set6)
	}
	links := map[netip.Prefix]string{}
	for _, e := range Edges {
		nh, rtr := EdgeExt6Of(e.Name), RouterSide6Of(e.Name)
		l, _ := nh.Prefix(64)
		if r, _ := rtr.Prefix(64); r != l {
			t.Errorf("%s: nextHop6 %v and rtr %v on different links", e.Name, nh, rtr)
		}
		if other, ok := links[l]; ok {
			t.Errorf("%s and %s share the link %v", e.Name, other, l)
		}
		links[l] = e.Name
		if set6.Contains(nh) {
			t.Errorf("%s: nextHop6 %v inside the set's prefix %v", e.Name, nh, set6)
		}
		if got := topo.Node("rtr").Addresses6[e.Name]; got != rtr.String()+"/64" {
			t.Errorf("rtr/%s IPv6 %q, want %v/64", e.Name, got, rtr)
		}
	}
	// docs/lab.md's table.
	for name, want := range map[string]string{"edge-a1": "2001:db8:100::2", "edge-a2": "2001:db8:100:1::2", "edge-q1": "2001:db8:100:5::2"} {
		if got := EdgeExt6Of(name).String(); got != want {
			t.Errorf("%s nextHop6 %s, want %s", name, got, want)
		}
	}
	if got := topo.Node("inet").Addresses6["eth0"]; got != ClientAddr6+"/64" {
		t.Errorf("inet eth0 IPv6 %q", got)
	}
}

// TestSetRoutes: of a router's routes, the set's prefixes (IPv4 and
// IPv6) and longer prefixes inside them are kept, every next hop named by
// its edge (an unknown one by its address), and RouteLines prints IPv4
// before IPv6.
func TestSetRoutes(t *testing.T) {
	ipn := func(s string) *net.IPNet { _, n, _ := net.ParseCIDR(s); return n }
	ip := func(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }
	rs := []netlink.Route{
		{Dst: ipn(EIPPrefix), MultiPath: []*netlink.NexthopInfo{{Gw: ip(EdgeExtOf("edge-a2"))}, {Gw: ip(EdgeExtOf("edge-a1"))}}},
		{Dst: ipn(EIPPrefix6), MultiPath: []*netlink.NexthopInfo{{Gw: ip(EdgeExt6Of("edge-b1"))}, {Gw: ip(EdgeExt6Of("edge-a1"))}}},
		{Dst: ipn("2001:db8:e1::8/128"), Gw: ip(EdgeExt6Of("edge-d1"))},
		{Dst: ipn("198.51.100.9/32"), Gw: net.ParseIP("198.18.100.99")},
		{Dst: ipn(NATPinned)},                                      // on-link
		{Dst: ipn("2001:db8:100::/64")},                            // a link
		{Dst: ipn("203.0.113.0/24")},                               // a link
		{Dst: ipn("2001:db8::/32"), Gw: ip(EdgeExt6Of("edge-a1"))}, // shorter than the set's
		{Gw: net.ParseIP("203.0.113.10")},                          // default
	}
	got := setRoutes(rs)
	want := map[string][]string{
		EIPPrefix:            {"edge-a1", "edge-a2"},
		EIPPrefix6:           {"edge-a1", "edge-b1"},
		"2001:db8:e1::8/128": {"edge-d1"},
		"198.51.100.9/32":    {"198.18.100.99"},
		NATPinned:            nil,
	}
	if len(got) != len(want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	for p, via := range want {
		if g := got[netip.MustParsePrefix(p)]; !slices.Equal(g, via) {
			t.Errorf("%s via %v, want %v", p, g, via)
		}
	}
	lines := RouteLines(got)
	wantLines := []string{
		"198.51.100.0/24 via edge-a1, edge-a2",
		"198.51.100.9/32 via 198.18.100.99",
		"198.51.100.30/31 on-link",
		"2001:db8:e1::/48 via edge-a1, edge-b1",
		"2001:db8:e1::8/128 via edge-d1",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("RouteLines:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
}

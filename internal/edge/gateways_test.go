package edge

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/azgate/azgate/internal/netlab"
)

// TestDefaultGateways: the next hops the edge keeps resolved besides its
// hosts are those of its IPv4 and IPv6 default routes, every path of a
// multipath one, a link-local IPv6 gateway zoned with its interface's
// index (nexthop.RouteGet takes it as on-link there); other routes'
// gateways are not listed.
func TestDefaultGateways(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	n, err := netlab.NewNode(fmt.Sprintf("azgt-gw-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Delete() })
	if err := n.IPv6(false); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"ip", "link", "add", "e0", "type", "veth", "peer", "name", "e1"},
		{"ip", "link", "set", "e0", "up"},
		{"ip", "link", "set", "e1", "up"},
		{"ip", "addr", "add", "198.51.100.1/24", "dev", "e0"},
		{"ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "e0", "nodad"},
		{"ip", "route", "add", "default", "via", "198.51.100.254", "dev", "e0"},
		{"ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.253", "dev", "e0"},
		{"ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "e0"},
		{"ip", "-6", "route", "add", "default", "metric", "2048", "nexthop", "via", "2001:db8:1::fd", "dev", "e0",
			"nexthop", "via", "2001:db8:1::fc", "dev", "e0"},
		{"ip", "-6", "route", "add", "2001:db8:9::/48", "via", "2001:db8:1::fe", "dev", "e0"},
	} {
		if out, err := n.Cmd(argv...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	e0, err := n.Ifindex("e0")
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	if err := n.Do(func() error { got = defaultGateways(); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("fe80::1").WithZone(strconv.Itoa(e0)),
		netip.MustParseAddr("2001:db8:1::fd"), netip.MustParseAddr("2001:db8:1::fc")}
	cmp := func(a, b netip.Addr) int { return a.Compare(b) }
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Errorf("defaultGateways() = %v, want %v", got, want)
	}
}

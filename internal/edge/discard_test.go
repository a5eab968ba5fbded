package edge

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netns"
)

// TestDiscardRoutesBothFamilies: in a namespace of its own, the set's
// IPv4 and IPv6 prefixes get their unreachable route, and a prefix the set
// no longer has loses its route in either family.
func TestDiscardRoutesBothFamilies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, routes)")
	}
	ns := fmt.Sprintf("azgt-discard-%d", os.Getpid())
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	v4, v4b := netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")
	v6, v6b := netip.MustParsePrefix("2001:db8:a::/48"), netip.MustParsePrefix("2001:db8:b::/48")
	var got []string
	discard := func(want ...netip.Prefix) {
		t.Helper()
		err := netns.Do(ns, func() error {
			if err := ensureDiscard(want); err != nil {
				return err
			}
			got = got[:0]
			for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
				rs, err := netlink.RouteListFiltered(family, &netlink.Route{Protocol: rtprotAzgate}, netlink.RT_FILTER_PROTOCOL)
				if err != nil {
					return err
				}
				for _, r := range rs {
					if r.Type == unix.RTN_UNREACHABLE && r.Dst != nil {
						got = append(got, r.Dst.String())
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var w []string
		for _, p := range want {
			w = append(w, p.String())
		}
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("discard routes %v, want %v", got, w)
		}
	}
	discard(v4, v4b, v6, v6b)
	discard(v4, v6) // one of each family gone
	discard()
}

package edge

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
)

// TestTopEIPs: above the status bound, the EIPs published are those with
// the most bytes (received plus sent), with their counters; a bound above
// the routes keeps them all.
func TestTopEIPs(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	routes := map[netip.Addr]dataplane.Route{}
	for i := range 50 {
		a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
		slot := uint32(100 - i) // slots out of address order
		routes[a] = dataplane.Route{Host: netip.MustParseAddr("198.18.0.1"), VSID: 1, StatsIdx: slot}
		// .1 has the fewest bytes, .50 the most; .7 receives little but sends a lot.
		c := dataplane.Counters{RxPackets: uint64(i), RxBytes: uint64(i * 100)}
		if i+1 == 7 {
			c.TxBytes = 1_000_000
		}
		fake.Counters[slot] = c
	}
	if err := fake.PutRoutes(routes); err != nil {
		t.Fatal(err)
	}
	top, err := topEIPs(fake, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"198.51.100.7", "198.51.100.50", "198.51.100.49", "198.51.100.48"}
	if len(top) != len(want) {
		t.Fatalf("top 4: %d EIPs %v", len(top), top)
	}
	for _, a := range want {
		if _, ok := top[a]; !ok {
			t.Errorf("top 4 lacks %s: %v", a, top)
		}
	}
	if c := top["198.51.100.50"]; c.RxBytes != 4900 || c.RxPackets != 49 {
		t.Errorf("198.51.100.50's counters %+v, want 49 packets, 4900 bytes", c)
	}
	all, err := topEIPs(fake, 4096)
	if err != nil || len(all) != 50 {
		t.Fatalf("top 4096 of 50: %d EIPs, %v", len(all), err)
	}
	for i := range 50 {
		if _, ok := all[fmt.Sprintf("198.51.100.%d", i+1)]; !ok {
			t.Errorf("top 4096 lacks 198.51.100.%d", i+1)
		}
	}
}

package edge

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// TestSpoofPrefixes: the edge programs every set's prefixes and every VIP
// as its own, and every host's and edge's underlay address as the
// underlay, so the data plane drops them as sources from the Internet
// side (an IPv6 set prefix in the IPv6 trie); a change to the sets or
// hosts reprograms them.
func TestSpoofPrefixes(t *testing.T) {
	objs := append(region(),
		&model.EdgeSet{Name: "pop-b", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25"), netip.MustParsePrefix("2001:db8:b::/48")},
			Edges: []model.EdgeNode{{Name: "edge-b1", Underlay: a("198.18.0.2")}}},
		&model.Service{Name: "web", VIP: a("192.0.2.80"), Mode: model.ModeNAT, TableSize: 101,
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}}}})
	fake := &spoofCounter{FakeEdge: dataplane.NewFakeEdge()}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, fake)
	load(t, r, 10, objs...)
	if fake.writes != 1 {
		t.Errorf("load: prefixes written %d times, want 1", fake.writes)
	}
	// An EIP's binding cannot change the prefixes: the commit does not
	// write the table.
	watched(t, r, 11, &model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az2-h1", Guest: "g1"}})
	if fake.writes != 1 {
		t.Errorf("after an EIP change: prefixes written %d times, want 1", fake.writes)
	}
	if got, want := fmt.Sprint(fake.SpoofOwn), "[192.0.2.0/25 192.0.2.80/32 198.51.100.0/24 2001:db8:b::/48]"; got != want {
		t.Errorf("own prefixes %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(fake.SpoofUnderlay), "[198.18.0.1/32 198.18.0.2/32 198.18.11.1/32 198.18.21.1/32]"; got != want {
		t.Errorf("underlay prefixes %s, want %s", got, want)
	}
	watched(t, r, 12, &model.Host{Name: "az2-h2", AZ: "az2", Underlay: a("198.18.21.2")})
	if got, want := fmt.Sprint(fake.SpoofUnderlay), "[198.18.0.1/32 198.18.0.2/32 198.18.11.1/32 198.18.21.1/32 198.18.21.2/32]"; got != want {
		t.Errorf("after a new host: underlay prefixes %s, want %s", got, want)
	}
}

// spoofCounter counts the writes of the anti-spoofing prefixes.
type spoofCounter struct {
	*dataplane.FakeEdge
	writes int
}

func (c *spoofCounter) SetSpoofPrefixes(own, underlay []netip.Prefix) error {
	c.writes++
	return c.FakeEdge.SetSpoofPrefixes(own, underlay)
}

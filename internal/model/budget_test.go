package model

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// bigService is a nat service of pools pools of m slots each, one backend
// per pool, at vip.
func bigService(name, vip string, pools int, m uint32) *Service {
	v := &Service{Name: name, VIP: addr(vip), Mode: ModeNAT, TableSize: m}
	for i := range pools {
		p := fmt.Sprintf("p%d", i)
		v.Listeners = append(v.Listeners, Listener{Protocol: ProtoTCP, Port: uint16(1000 + i), Pool: p})
		v.Pools = append(v.Pools, Pool{Name: p, Backends: []Backend{{Address: addr("198.19.9.1"), Port: 80}}})
	}
	return v
}

// TestTableSizeFollowsBackends: the issue 17 attack (4 pools of
// MaxTableSize slots for one backend each, a 40 KB POST) is refused on its
// own, naming tableSize and the bound; up to TableSizeFactor x the 100 x N
// size is accepted, and a pool with many backends may still reach
// MaxTableSize.
func TestTableSizeFollowsBackends(t *testing.T) {
	attack := bigService("attack", "198.51.100.50", 4, MaxTableSize)
	es := attack.Validate()
	wantErr(t, es.Err(), "tableSize", "4194301 is above 524296, 8 x the size 1 backends need (65537)")

	if es := bigService("ok", "198.51.100.50", 1, 524287).Validate(); len(es) != 0 {
		t.Errorf("M=524287 (below 8 x 65537) for 1 backend: %v", es)
	}
	if es := bigService("over", "198.51.100.50", 1, 524309).Validate(); len(es) == 0 {
		t.Errorf("M=524309 (above 8 x 65537) for 1 backend: accepted")
	}
	// 6,000 backends need 600,011 slots; 8 x that is above MaxTableSize.
	many := bigService("many", "198.51.100.50", 1, MaxTableSize)
	for i := range 6000 {
		many.Pools[0].Backends = append(many.Pools[0].Backends, Backend{Address: netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), Port: 80})
	}
	many.Pools[0].Backends = many.Pools[0].Backends[1:]
	if es := many.Validate(); len(es) != 0 {
		t.Errorf("M=MaxTableSize for 6000 backends: %v", es)
	}
}

// TestTableBudgets: the State refuses a service that takes its edge set
// or the region over the slot budget, with the figures (asked, in use,
// limit), and counts a changed service once (its new size replaces the
// old); a service pulled out into a dedicated set counts there too.
func TestTableBudgets(t *testing.T) {
	s := NewState()
	sets := []string{"pop-a", "pop-b", "pop-c", "pop-d", "pop-e"}
	for i, name := range sets {
		es := &EdgeSet{Name: name, Prefixes: []netip.Prefix{prefix(fmt.Sprintf("100.64.%d.0/24", i))},
			Edges: []EdgeNode{{Name: "edge-" + name, Underlay: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})}}}
		if _, err := s.Put(es); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(&EdgeSet{Name: "hot", Role: RoleDedicated, Edges: []EdgeNode{{Name: "edge-hot", Underlay: addr("198.18.0.99")}}}); err != nil {
		t.Fatal(err)
	}
	put := func(v *Service) error {
		if es := v.Validate(); len(es) != 0 {
			t.Fatalf("%s: %v", v.Name, es)
		}
		_, err := s.Put(v)
		return err
	}
	// 16 pools of 524,287 slots: 8,388,592, just within a set's budget.
	full := func(set int) *Service { return bigService(sets[set], fmt.Sprintf("100.64.%d.10", set), 16, 524287) }
	if err := put(full(0)); err != nil {
		t.Fatalf("a set's whole budget in one service: %v", err)
	}
	err := put(bigService("more", "100.64.0.11", 1, DefaultTableSize))
	wantErr(t, err, "tableSize", "asks 65537 Maglev slots (1 pools x 65537; 0.3 MiB of tables), edge set pop-a has 8388592 in use by other services, its limit is 8388608 (32.0 MiB)")
	// The same service again (an update) replaces itself: not counted twice.
	if err := put(full(0)); err != nil {
		t.Fatalf("updating the service: %v", err)
	}
	// Another set has its own budget.
	if err := put(bigService("more", "100.64.1.11", 1, DefaultTableSize)); err != nil {
		t.Fatalf("a service in another set: %v", err)
	}
	// Pulled out into hot: counts against hot and against its prefix set
	// (pop-a, full), whose edges carry it while routes converge.
	pulled := bigService("pulled", "100.64.0.12", 1, DefaultTableSize)
	pulled.Set = "hot"
	wantErr(t, put(pulled), "tableSize", "edge set pop-a has 8388592 in use")
	pulled.VIP = addr("100.64.2.12")
	if err := put(pulled); err != nil {
		t.Fatalf("pulled out: %v", err)
	}
	// The region: four sets at their budget leave no room for the fifth.
	for _, n := range []string{"more", "pulled"} {
		if _, err := s.Delete(KindService, n); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 4; i++ {
		if err := put(full(i)); err != nil {
			t.Fatalf("set %d: %v", i, err)
		}
	}
	err = put(bigService("last", "100.64.4.10", 1, DefaultTableSize))
	wantErr(t, err, "tableSize", "the region has 33554368 in use by other services, its limit is 33554432 (128.0 MiB)")
	if strings.Contains(err.Error(), "edge set pop-e") {
		t.Errorf("pop-e is empty, yet: %v", err)
	}
}

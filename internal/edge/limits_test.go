package edge

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

func TestPlanLimits(t *testing.T) {
	svc := func(name, vip string, l *model.Limits) *model.Service {
		return &model.Service{Name: name, VIP: a(vip), Limits: l}
	}
	for _, tc := range []struct {
		name     string
		eips     map[[4]byte]model.Limits
		services map[string]*model.Service
		want     string
	}{
		{"nothing", nil, nil, "map[]"},
		{"an EIP, bursts defaulted", map[[4]byte]model.Limits{{198, 51, 100, 7}: {SourcePPS: 100, SYNRate: 10, SYNBurst: 5}}, nil,
			"map[198.51.100.7:{100 100 10 5}]"},
		{"services with and without", nil, map[string]*model.Service{
			"web": svc("web", "192.0.2.80", &model.Limits{SYNRate: 1000}), "db": svc("db", "192.0.2.81", nil)},
			"map[192.0.2.80:{0 0 1000 1000}]"},
		{"a VIP's win over an EIP's at its address", map[[4]byte]model.Limits{{192, 0, 2, 80}: {SourcePPS: 1}},
			map[string]*model.Service{"web": svc("web", "192.0.2.80", &model.Limits{SYNRate: 7})}, "map[192.0.2.80:{0 0 7 7}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(planLimits(tc.eips, nil, tc.services)); got != tc.want {
				t.Errorf("plan %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDiffLimits(t *testing.T) {
	l1 := dataplane.Limits{SourcePPS: 10, SourceBurst: 10}
	l2 := dataplane.Limits{SYNRate: 5, SYNBurst: 5}
	x, y, z := a("198.51.100.1"), a("198.51.100.2"), a("198.51.100.3")
	put, del := diffLimits(map[netip.Addr]dataplane.Limits{x: l1, y: l2}, map[netip.Addr]dataplane.Limits{y: l1, z: l2, x: {SourcePPS: 10}})
	if got, want := fmt.Sprint(put, del), "map[198.51.100.2:{0 0 5 5}] [198.51.100.3]"; got != want {
		t.Errorf("diff %s, want %s (an entry read back without its default burst is the same)", got, want)
	}
}

// limitsEdge is a fake edge whose limit writes go through FaultyLimits.
type limitsEdge struct {
	*dataplane.FakeEdge
	fl dataplane.FaultyLimits
}

func (e limitsEdge) PutLimits(a netip.Addr, l dataplane.Limits) error { return e.fl.PutLimits(a, l) }
func (e limitsEdge) DeleteLimits(a netip.Addr) error                  { return e.fl.DeleteLimits(a) }
func (e limitsEdge) Limits() (map[netip.Addr]dataplane.Limits, error) { return e.fl.Limits() }

// TestReconcileLimits: the reconciler programs an EIP's and a VIP's
// limits from the model, follows changes and removals, and after a failed
// write redoes what is missing on the retry (the data plane read back).
func TestReconcileLimits(t *testing.T) {
	fake := dataplane.NewFakeEdge()
	faults := dataplane.NewFaults()
	e := limitsEdge{FakeEdge: fake, fl: dataplane.FaultyLimits{LimitMaps: fake, F: faults}}
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet}, e)
	objs := append(region(), &model.EIP{Address: a("198.51.100.9"), Limits: &model.Limits{SourcePPS: 100}},
		&model.Service{Name: "web", VIP: a("198.51.100.80"), Mode: model.ModeNAT, TableSize: 101, Limits: &model.Limits{SYNRate: 50, SYNBurst: 10},
			Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
			Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}}}})
	load(t, r, 10, objs...)
	check := func(what, want string) {
		t.Helper()
		got, _ := fake.Limits()
		if fmt.Sprint(got) != want {
			t.Errorf("%s: limits %v, want %s", what, got, want)
		}
	}
	check("loaded", "map[198.51.100.9:{100 100 0 0} 198.51.100.80:{0 0 50 10}]")

	watched(t, r, 11, &model.EIP{Address: a("198.51.100.9"), Limits: &model.Limits{SourcePPS: 100, SYNRate: 20}},
		&model.EIP{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}, Limits: &model.Limits{SYNRate: 5}})
	check("changed and added", "map[198.51.100.7:{0 0 5 5} 198.51.100.9:{100 100 20 20} 198.51.100.80:{0 0 50 10}]")

	// A failed write fails the commit; the retry finishes the job.
	faults.FailNth("PutLimits", 1)
	watched(t, r, 12, &model.EIP{Address: a("198.51.100.8"), Limits: &model.Limits{SourcePPS: 1}})
	if r.syncErr == nil {
		t.Fatal("a failed limits write did not fail the commit")
	}
	check("after the failure", "map[198.51.100.7:{0 0 5 5} 198.51.100.9:{100 100 20 20} 198.51.100.80:{0 0 50 10}]")
	faults.Off()
	r.Delete(model.KindEIP, "198.51.100.9", 13)
	r.Commit(13, false)
	check("retried, and an EIP deleted", "map[198.51.100.7:{0 0 5 5} 198.51.100.8:{1 1 0 0} 198.51.100.80:{0 0 50 10}]")

	// A restarted daemon adopts what the table holds and fixes the rest.
	fake.LimitMap[a("198.51.100.99")] = dataplane.Limits{SourcePPS: 3, SourceBurst: 3}
	r2 := NewReconciler(Config{Name: "edge-a1", Log: quiet}, e)
	load(t, r2, 14, append(region(), &model.EIP{Address: a("198.51.100.8"), Limits: &model.Limits{SourcePPS: 1}})...)
	check("a new daemon", "map[198.51.100.8:{1 1 0 0}]")
	if got := fmt.Sprint(r2.LimitedAddrs()); got != "[198.51.100.8]" {
		t.Errorf("limited addresses for the status: %s", got)
	}
}

// TestReconcileLimitsFullTable, on the real table (edge_limits: the
// compiled dataplane.LimitsMax addresses at an --eip-max above it, and
// --eip-max addresses below it): with the table full, moving limits from
// one address to another succeeds (the removal makes the room; written
// the other way round, every commit failed on the new address's write and
// never reached the removal), and a plan with more addresses than the
// table holds is refused naming the figures, before any write: the table
// keeps what it had.
func TestReconcileLimitsFullTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the edge's BPF maps")
	}
	for _, c := range []struct{ eipMax, holds int }{{1 << 17, dataplane.LimitsMax}, {1024, 1024}} {
		t.Run(fmt.Sprintf("eip-max %d", c.eipMax), func(t *testing.T) {
			e, err := dataplane.LoadEdgeMaps(dataplane.LoadOptions{EIPMax: uint32(c.eipMax)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			r := NewReconciler(Config{Name: "edge-a1", Log: quiet, EIPMax: uint32(c.eipMax)}, e)
			lim := &model.Limits{SourcePPS: 100}
			objs := region()
			for i := range c.holds {
				objs = append(objs, &model.EIP{Address: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Limits: lim})
			}
			load(t, r, 10, objs...)
			if r.syncErr != nil {
				t.Fatalf("a full table: %v", r.syncErr)
			}
			count := func() int {
				t.Helper()
				got, err := e.Limits()
				if err != nil {
					t.Fatal(err)
				}
				return len(got)
			}
			if n := count(); n != c.holds {
				t.Fatalf("%d addresses programmed, want %d", n, c.holds)
			}

			moved := a("198.19.255.1")
			watched(t, r, 11, &model.EIP{Address: a("198.18.0.0")}, &model.EIP{Address: moved, Limits: lim})
			if r.syncErr != nil {
				t.Fatalf("limits moved from one address to another in a full table: %v", r.syncErr)
			}
			if got, _ := e.Limits(); got[moved].SourcePPS != 100 {
				t.Errorf("the new address's limits are not programmed: %v", got[moved])
			}

			watched(t, r, 12, &model.EIP{Address: a("198.19.255.2"), Limits: lim})
			want := fmt.Sprintf("%d addresses have limits, the edge holds %d", c.holds+1, c.holds)
			if r.syncErr == nil || !strings.Contains(r.syncErr.Error(), want) {
				t.Fatalf("one address too many: error %v, want %q", r.syncErr, want)
			}
			if got, _ := e.Limits(); len(got) != c.holds || got[a("198.19.255.2")] != (dataplane.Limits{}) {
				t.Errorf("the refused plan was written in part: %d addresses", len(got))
			}
		})
	}
}

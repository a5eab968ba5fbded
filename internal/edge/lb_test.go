package edge

import (
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/maglev"
	"github.com/azgate/azgate/internal/model"
)

func svcRegion() []model.Object {
	hosts := []model.Object{
		&model.Host{Name: "az1-h1", AZ: "az1", Underlay: a("198.18.11.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.11.1"), VSID: 5001}}},
		&model.Host{Name: "az2-h1", AZ: "az2", Underlay: a("198.18.21.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.21.1"), VSID: 6001}}},
	}
	web := &model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}, {Protocol: "tcp", Port: 8000, PortEnd: 8002, Pool: "web"}},
		Pools: []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}, {Host: "az2-h1", Guest: "g1"}},
			Health: &model.HealthCheck{Type: "tcp"}}}}
	dmz := &model.Service{Name: "dmz", VIP: a("198.51.100.30"), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "udp", Pool: "p"}, {Protocol: "tcp", Port: 443, Pool: "q"}},
		Pools: []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.1")}}},
			{Name: "q", Backends: []model.Backend{{Address: a("198.19.200.3"), Port: 8443}}}}}
	return append(append(region(), hosts[1]), web, dmz)
}

func TestServicesProgrammed(t *testing.T) {
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	var checks []health.Target
	r.OnTargets = func(ts []health.Target) { checks = ts }
	load(t, r, 1, svcRegion()...)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	if !fake.VIPSet[a("198.51.100.20")] || !fake.VIPSet[a("198.51.100.30")] || !fake.LB.NAT {
		t.Fatalf("VIPs %v, nat %v", fake.VIPSet, fake.LB.NAT)
	}
	// tcp:80, the range 8000-8002 (one entry: ranges are not expanded)
	// and udp any port, tcp:443.
	if len(fake.ListenerM) != 1+1+1+1 {
		t.Fatalf("listeners %v", fake.ListenerM)
	}
	web, ok := fake.ListenerM[dataplane.Listener{VIP: a("198.51.100.20"), Proto: dataplane.ProtoTCP, Port: 8000, Last: 8002}]
	if !ok {
		t.Fatalf("range listener missing: %v", fake.ListenerM)
	}
	if fake.BackendM[fake.Tables[web.Table][0]].Mode != dataplane.ModeEncap || len(fake.Tables[web.Table]) != model.DefaultTableSize {
		t.Fatalf("web listener %+v", web)
	}
	if l, ok := fake.ListenerM[dataplane.Listener{VIP: a("198.51.100.30"), Proto: dataplane.ProtoUDP}]; !ok || fake.BackendM[fake.Tables[l.Table][0]].Mode != dataplane.ModeNAT {
		t.Fatal("any-port nat listener missing")
	}
	// The table is the Maglev table every node computes.
	want, _ := maglev.Build([]maglev.Backend{{Key: "az1-h1/g1", Weight: 1}, {Key: "az2-h1/g1", Weight: 1}}, model.DefaultTableSize, 7)
	got := fake.Tables[web.Table]
	for j, e := range want.Entry {
		b := fake.BackendM[got[j]]
		if (want.Backends[e].Key == "az1-h1/g1") != (b.Addr == a("198.18.11.1")) {
			t.Fatalf("slot %d: backend %+v, want %s", j, b, want.Backends[e].Key)
		}
	}
	// Encap backends carry host, guest and VSID; nat ones address and port.
	for _, b := range fake.BackendM {
		if b.Addr == a("198.18.21.1") && (b.Guest != a("198.19.21.1") || b.VSID != 6001) {
			t.Fatalf("encap backend %+v", b)
		}
	}
	// nat replies need nothing from the daemon: each connection installs
	// its own reverse entry in the data plane.
	for _, b := range fake.BackendM {
		if b.Addr == a("198.19.200.3") && (b.Port != 8443 || b.Mode != dataplane.ModeNAT) {
			t.Fatalf("nat backend %+v", b)
		}
	}
	if len(checks) != 2 || checks[0].Addr.Port() != 80 {
		t.Fatalf("health targets %+v", checks)
	}
	status := r.Status(want0(), nil)
	if status.Tables["web/web"].Checksum == "" || status.Tables["web/web"].Healthy != 2 {
		t.Fatalf("status tables %+v", status.Tables)
	}
	before := status.Tables["web/web"].Checksum

	// The majority finds az2-h1/g1 down: its slots go to az1-h1/g1, its
	// backend is flagged down (its connections move), nothing else moves.
	watched(t, r, 2, &model.Health{Service: "web", Down: map[string][]string{"web": {"az2-h1/g1"}}})
	after := r.Status(want0(), nil).Tables["web/web"]
	if after.Checksum == before || after.Healthy != 1 {
		t.Fatalf("after failure: %+v", after)
	}
	for idx, b := range fake.BackendM {
		if b.Addr == a("198.18.21.1") && !b.Down {
			t.Fatalf("failed backend %d not flagged down", idx)
		}
	}
	for j, idx := range fake.Tables[web.Table] {
		if fake.BackendM[idx].Addr != a("198.18.11.1") {
			t.Fatalf("slot %d still names the failed backend", j)
		}
	}

	// The service goes: listeners, VIP, table go; the nat one stays.
	r.Delete(model.KindService, "web", 3)
	r.Commit(3, false)
	if fake.VIPSet[a("198.51.100.20")] || len(fake.ListenerM) != 2 {
		t.Fatalf("after delete: VIPs %v listeners %v", fake.VIPSet, fake.ListenerM)
	}
	if _, ok := fake.Tables[web.Table]; ok {
		t.Fatal("table of a deleted service kept")
	}
}

func want0() time.Time { return time.Time{} }

// TestServicesAdoptedAfterRestart: a restarted edge daemon keeps every
// backend's slot and generation and every pool's table slot, so the
// connections the data plane holds keep their backends.
func TestServicesAdoptedAfterRestart(t *testing.T) {
	fake := dataplane.NewFakeLB()
	load(t, NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake), 1, svcRegion()...)
	backends := map[uint32]dataplane.LBBackend{}
	for k, v := range fake.BackendM {
		backends[k] = v
	}
	listeners, _ := fake.Listeners()

	// A new daemon; meanwhile a service was created before "web" in
	// order, which would take slot 0 first if nothing were adopted.
	extra := &model.Service{Name: "aaa", VIP: a("198.51.100.40"), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}},
		Pools:     []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.200.9")}}}}}
	r2 := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	load(t, r2, 2, append(svcRegion(), extra)...)
	for k, v := range backends {
		if got := fake.BackendM[k]; got != v {
			t.Fatalf("slot %d changed across a restart: %+v -> %+v", k, v, got)
		}
	}
	for l, v := range listeners {
		if got := fake.ListenerM[l]; got != v {
			t.Fatalf("listener %+v moved to another table: %+v -> %+v", l, v, got)
		}
	}
	// The new service got fresh slots.
	for k, v := range fake.BackendM {
		if v.Addr == a("198.19.200.9") {
			if _, old := backends[k]; old {
				t.Fatalf("new backend took an adopted slot %d", k)
			}
		}
	}
	// A backend gone while the daemon was away: its slot is freed (kept
	// as it was for its connections), reused last.
	r3 := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	regions := svcRegion()
	for _, o := range regions {
		if s, ok := o.(*model.Service); ok && s.Name == "dmz" {
			s.Pools = s.Pools[:1]
			s.Listeners = s.Listeners[:1]
		}
	}
	load(t, r3, 3, regions...)
	if len(r3.lb.freeBackend) == 0 {
		t.Fatal("the slot of a removed backend was not freed")
	}
}

// A service with more port ranges on its VIP than the data plane holds
// (model.MaxRanges, held equal to LB_RANGES_MAX) fails validation: read
// from the store, it is left out and reported; the others are programmed.
func TestServiceOverCapacityReported(t *testing.T) {
	fake := dataplane.NewFakeLB()
	r := NewReconciler(Config{Name: "edge-a1", Log: quiet, HashSeed: 7}, fake)
	t.Cleanup(r.Stop)
	var ranges []model.Listener
	for i := 0; i <= dataplane.LBRangesMax; i++ {
		ranges = append(ranges, model.Listener{Protocol: "tcp", Port: uint16(10000 + 10*i), PortEnd: uint16(10001 + 10*i), Pool: "p"})
	}
	big := &model.Service{Name: "big", VIP: a("198.51.100.40"), Mode: model.ModeNAT, Listeners: ranges,
		Pools: []model.Pool{{Name: "p", Backends: []model.Backend{{Address: a("198.19.201.1")}}}}}
	load(t, r, 1, append(svcRegion(), big)...)
	st := r.Status(time.Now(), nil)
	if model.MaxRanges != dataplane.LBRangesMax {
		t.Fatalf("model.MaxRanges %d, the data plane holds %d ranges per VIP and protocol", model.MaxRanges, dataplane.LBRangesMax)
	}
	found := false
	for _, e := range st.Invalid {
		if e.Kind == model.KindService && e.Key == "big" && strings.Contains(e.Reason, "port ranges") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no problem reported for the oversized service: %v %v", st.Errors, st.Invalid)
	}
	if _, ok := fake.ListenerM[dataplane.Listener{VIP: a("198.51.100.40"), Proto: dataplane.ProtoTCP, Port: 10000, Last: 10001}]; ok || fake.VIPSet[a("198.51.100.40")] {
		t.Fatal("the oversized service was programmed")
	}
	if !fake.VIPSet[a("198.51.100.20")] || !fake.VIPSet[a("198.51.100.30")] {
		t.Fatalf("the other services were not programmed: VIPs %v", fake.VIPSet)
	}
}

package edge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
)

// kernelView reads what the kernel's maps hold into a FakeLB, so the
// fault tests' checks apply to them (tables of the first slots only:
// the tests use few).
func kernelView(e *dataplane.Edge) (*dataplane.FakeLB, error) {
	f := dataplane.NewFakeLB()
	vips, err := e.VIPs()
	if err != nil {
		return nil, err
	}
	for _, v := range vips {
		f.VIPSet[v] = true
	}
	if f.ListenerM, err = e.Listeners(); err != nil {
		return nil, err
	}
	if f.TableOwn, err = e.TableOwners(); err != nil {
		return nil, err
	}
	for slot := uint32(0); slot < 64; slot++ {
		t, err := e.Table(slot)
		if err != nil {
			continue // no table in the slot
		}
		f.Tables[slot] = t
		for _, idx := range t {
			if _, ok := f.BackendM[idx]; ok || idx == noBackend {
				continue
			}
			if f.BackendM[idx], err = e.Backend(idx); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// TestLBConvergesOnKernelMaps runs the fault test against the real maps
// of a loaded edge object: the kernel's semantics (a range set rewritten
// whole, tables swapped as inner maps, VIP marks in the route map) keep
// the same guarantees as the fake's.
func TestLBConvergesOnKernelMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF objects needs root")
	}
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r := rand.New(rand.NewPCG(3, 1))
	faults := dataplane.NewFaults()
	faults.FailRandomly(3, 0.08)
	s := newLBState(dataplane.NewFaultyLB(e, faults), 7)
	poolOf := map[uint64]uint64{}
	var bad error
	for step := range 8 {
		x, _ := lbWorld(r)
		p := planOf(x, 7)
		for _, pl := range p.Pools {
			for _, b := range pl.Backends {
				poolOf[owner(b.ID)] = owner(pl.ID)
			}
		}
		v0, err := kernelView(e)
		if err != nil {
			t.Fatal(err)
		}
		faults.After = func(op string) {
			v, err := kernelView(e)
			if err == nil {
				err = checkPacketView(v, p, poolOf, v0.VIPSet, v0.ListenerM)
			}
			if err != nil && bad == nil {
				bad = fmt.Errorf("step %d after %s: %w", step, op, err)
			}
		}
		for try := 0; try < 100; try++ {
			if _, err = s.sync(x); err == nil {
				break
			}
			if !errors.Is(err, dataplane.ErrInjected) {
				t.Fatal(err)
			}
			if r.IntN(4) == 0 {
				s = newLBState(dataplane.NewFaultyLB(e, faults), 7)
			}
		}
		if err != nil {
			t.Fatalf("step %d: no convergence: %v", step, err)
		}
		if bad != nil {
			t.Fatal(bad)
		}
		v, err := kernelView(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkConverged(v, p); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if faults.Injected == 0 {
		t.Fatal("no failure was injected")
	}
}

// TestLBSizesOnKernelMaps: on an edge loaded with --listener-max 8
// (lb_listeners holds 8) or --backend-max 2 (lb_backends and the other
// backend maps hold 2), the plan leaves room for them: of three services
// of four single-port listeners and one backend, the first two in name
// order are programmed, the third is left out and reported, and the
// commit succeeds. A reconciler that plans for the compiled capacities on
// the same maps fails its commit on the write that does not fit: the plan
// must know the edge's capacities.
func TestLBSizesOnKernelMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF objects needs root")
	}
	var objs []model.Object
	objs = append(objs, region()...)
	for i, name := range []string{"s1", "s2", "s3"} {
		var ls []model.Listener
		for j := range 4 {
			ls = append(ls, model.Listener{Protocol: "tcp", Port: uint16(80 + j), Pool: "p"})
		}
		objs = append(objs, &model.Service{Name: name, VIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(50 + i)}), Mode: model.ModeNAT, Listeners: ls,
			Pools: []model.Pool{{Name: "p", Backends: []model.Backend{{Address: netip.AddrFrom4([4]byte{198, 19, 200, byte(1 + i)}), Port: 8080}}}}})
	}
	for _, c := range []struct {
		name    string
		load    dataplane.LoadOptions
		cfg     func(*Config)
		problem string // s3's; "": the commit fails
	}{
		{"listeners planned at the edge's capacity", dataplane.LoadOptions{ListenerMax: 8}, func(c *Config) { c.ListenerMax = 8 },
			"its 4 listener entries would take the edge to 12, the data plane holds 8"},
		{"listeners planned at the compiled capacity", dataplane.LoadOptions{ListenerMax: 8}, func(*Config) {}, ""},
		{"backends planned at the edge's capacity", dataplane.LoadOptions{BackendMax: 2}, func(c *Config) { c.BackendMax = 2 },
			"its 1 backends would take the edge to 3 backend slots, the data plane holds 2"},
		{"backends planned at the compiled capacity", dataplane.LoadOptions{BackendMax: 2}, func(*Config) {}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.load.EIPMax = 1024
			e, err := dataplane.LoadEdge(c.load)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			cfg := Config{Name: "edge-a1", Log: quiet, HashSeed: 7}
			c.cfg(&cfg)
			r := NewReconciler(cfg, e)
			t.Cleanup(r.Stop)
			load(t, r, 1, objs...)
			if c.problem == "" {
				if r.syncErr == nil {
					t.Fatal("three services committed into maps for two")
				}
				t.Logf("commit: %v", r.syncErr)
				return
			}
			if r.syncErr != nil {
				t.Fatalf("commit: %v", r.syncErr)
			}
			vips, err := e.VIPs()
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(vips, netip.Addr.Compare)
			if want := []netip.Addr{a("198.51.100.50"), a("198.51.100.51")}; !slices.Equal(vips, want) {
				t.Fatalf("VIPs %v programmed, want %v", vips, want)
			}
			ls, err := e.Listeners()
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != 8 {
				t.Fatalf("%d listeners programmed, want 8", len(ls))
			}
			st := r.Status(time.Now(), nil)
			if !slices.ContainsFunc(st.Errors, func(s string) bool {
				return strings.HasPrefix(s, "service s3: not programmed") && strings.Contains(s, c.problem)
			}) {
				t.Fatalf("s3 not reported left out with %q: %q", c.problem, st.Errors)
			}
		})
	}
}

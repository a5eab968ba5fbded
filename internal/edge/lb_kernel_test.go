package edge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/azgate/azgate/internal/dataplane"
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

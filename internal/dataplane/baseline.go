package dataplane

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// Loading the compiled objects of an earlier version, for before/after
// benchmarks in one run (`azgate-lab bench dataplane --baseline-objects DIR`).
// The Go side stays this version's: maps are filled through the current
// types, so a map whose key or value layout changed since fails with the
// kernel's or cilium/ebpf's size error naming it, and one the old object
// does not have is listed in Missing.

// Missing lists the maps and programs this version expects that an object
// loaded with LoadEdgeObject or LoadAgentObject did not have (nil fields).
type Missing []string

// LoadEdgeObject loads an edge object file (edge_bpfel.o of any version)
// with o's capacities, unpinned. Objects the file lacks stay nil and are
// returned in Missing.
func LoadEdgeObject(path string, o LoadOptions) (*Edge, Missing, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, nil, fmt.Errorf("edge object %s: %w", path, err)
	}
	edgeCapacities(spec, o)
	if err := setBwClock(spec); err != nil {
		return nil, nil, fmt.Errorf("edge object %s: %w", path, err)
	}
	e := &Edge{}
	missing, err := loadAvailable(spec, &e.objs)
	if err != nil {
		return nil, nil, fmt.Errorf("edge object %s: %w", path, err)
	}
	return e, missing, nil
}

// LoadAgentObject is LoadEdgeObject for an agent object (agent_bpfel.o).
func LoadAgentObject(path string) (*Agent, Missing, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, nil, fmt.Errorf("agent object %s: %w", path, err)
	}
	if err := setBwClock(spec); err != nil {
		return nil, nil, fmt.Errorf("agent object %s: %w", path, err)
	}
	a := &Agent{}
	missing, err := loadAvailable(spec, &a.objs)
	if err != nil {
		return nil, nil, fmt.Errorf("agent object %s: %w", path, err)
	}
	return a, missing, nil
}

// loadAvailable loads every map and program of spec, unpinned, and assigns
// them to the `ebpf:"name"` fields of to (a bpf2go objects struct); fields
// with no counterpart in spec are returned by name.
func loadAvailable(spec *ebpf.CollectionSpec, to any) (Missing, error) {
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, loadErr("object", err)
	}
	defer coll.Close()
	var missing Missing
	eachTagged(to, func(name string, fv reflect.Value) {
		switch fv.Type() {
		case reflect.TypeOf((*ebpf.Map)(nil)):
			if m := coll.DetachMap(name); m != nil {
				fv.Set(reflect.ValueOf(m))
				return
			}
		case reflect.TypeOf((*ebpf.Program)(nil)):
			if p := coll.DetachProgram(name); p != nil {
				fv.Set(reflect.ValueOf(p))
				return
			}
		case reflect.TypeOf((*ebpf.Variable)(nil)):
			if x, ok := coll.Variables[name]; ok {
				fv.Set(reflect.ValueOf(x))
				return
			}
		default:
			return
		}
		missing = append(missing, name)
	})
	return missing, nil
}

// Maps returns the edge's maps by name (the benchmarks' instruction-count
// replay reads them).
func (e *Edge) Maps() map[string]*ebpf.Map { return mapsOf(&e.objs) }

// Maps returns the agent's maps by name.
func (a *Agent) Maps() map[string]*ebpf.Map { return mapsOf(&a.objs) }

// ProgramSpecs returns this build's edge and agent programs as compiled
// (before the verifier), by program name.
func ProgramSpecs() (map[string]*ebpf.ProgramSpec, error) {
	out := map[string]*ebpf.ProgramSpec{}
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadEdge, loadAgent} {
		spec, err := load()
		if err != nil {
			return nil, err
		}
		for n, p := range spec.Programs {
			out[n] = p
		}
	}
	return out, nil
}

func mapsOf(objs any) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	eachTagged(objs, func(name string, fv reflect.Value) {
		if m, ok := fv.Interface().(*ebpf.Map); ok && m != nil {
			out[name] = m
		}
	})
	return out
}

// eachTagged calls fn with every `ebpf:"name"` field of objs, a pointer to
// a bpf2go objects struct (its embedded maps and programs structs
// included).
func eachTagged(objs any, fn func(name string, fv reflect.Value)) {
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f, fv := t.Field(i), v.Field(i)
			if f.Anonymous && fv.Kind() == reflect.Struct {
				walk(fv)
				continue
			}
			if name := f.Tag.Get("ebpf"); name != "" {
				fn(name, fv)
			}
		}
	}
	walk(reflect.ValueOf(objs).Elem())
}

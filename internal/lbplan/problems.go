package lbplan

import "fmt"

// ProblemKind says what a Problem left out.
type ProblemKind string

// Kinds of problems.
const (
	// ProblemBackend: a backend that does not resolve (no such host or
	// guest); it gets no slots, the rest of its pool is programmed.
	ProblemBackend ProblemKind = "backend"
	// ProblemTable: a pool whose Maglev table could not be built; its
	// listeners are left out.
	ProblemTable ProblemKind = "table"
	// ProblemCapacity: a service left out whole because it would exceed a
	// data-plane capacity (listeners, port ranges, tables, backends).
	ProblemCapacity ProblemKind = "capacity"
	// ProblemCheck: a pool's health check that cannot be run (no port).
	ProblemCheck ProblemKind = "check"
)

// Problem is one thing of the desired state an edge cannot program. Its
// fields let callers pick the problems of one service or kind without
// matching text (`azgate service status` lists those of its service).
type Problem struct {
	Kind    ProblemKind
	Service string
	Pool    string // "" for a capacity problem
	Backend string // the backend's key, for a backend problem
	Detail  string // what is wrong, without the service/pool/backend prefix
}

// String is the problem as the edge reports it in its status
// (model.NodeStatus.Errors).
func (p Problem) String() string {
	switch p.Kind {
	case ProblemBackend:
		return fmt.Sprintf("service %s: backend %s: %s", p.Service, p.Backend, p.Detail)
	case ProblemCapacity:
		return fmt.Sprintf("service %s: not programmed: %s", p.Service, p.Detail)
	default: // table, check
		return fmt.Sprintf("service %s pool %s: %s", p.Service, p.Pool, p.Detail)
	}
}

// Problems are a plan's problems, in the order Build found them.
type Problems []Problem

// Strings are the problems' texts (Problem.String), nil for none.
func (ps Problems) Strings() []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Of are the problems of one service.
func (ps Problems) Of(service string) Problems {
	var out Problems
	for _, p := range ps {
		if p.Service == service {
			out = append(out, p)
		}
	}
	return out
}

// OfKind are the problems of one kind.
func (ps Problems) OfKind(k ProblemKind) Problems {
	var out Problems
	for _, p := range ps {
		if p.Kind == k {
			out = append(out, p)
		}
	}
	return out
}

package lbplan

import (
	"slices"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestProblems: each kind of problem reads as the edge has always
// reported it, and a plan's problems carry the service, pool and backend
// they concern, so callers pick them without matching text.
func TestProblems(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		for _, c := range []struct {
			p    Problem
			want string
		}{
			{Problem{Kind: ProblemBackend, Service: "web", Pool: "p", Backend: "h1/g1", Detail: `host "h1" does not exist`},
				`service web: backend h1/g1: host "h1" does not exist`},
			{Problem{Kind: ProblemTable, Service: "web", Pool: "p", Detail: "maglev: no backends"},
				"service web pool p: maglev: no backends"},
			{Problem{Kind: ProblemCapacity, Service: "web", Detail: "its 3 pools would take the edge to 9 tables, the data plane holds 8"},
				"service web: not programmed: its 3 pools would take the edge to 9 tables, the data plane holds 8"},
			{Problem{Kind: ProblemCheck, Service: "web", Pool: "p", Detail: "the health check needs a port (the pool only has any-port listeners)"},
				"service web pool p: the health check needs a port (the pool only has any-port listeners)"},
		} {
			if got := c.p.String(); got != c.want {
				t.Errorf("%s: %q, want %q", c.p.Kind, got, c.want)
			}
		}
	})

	t.Run("plan", func(t *testing.T) {
		svcs := services()
		// Any-port listeners only, with a check without a port: a check problem.
		svcs["anyp"] = &model.Service{Name: "anyp", VIP: a("198.51.100.40"), Mode: model.ModeNAT,
			Listeners: []model.Listener{{Protocol: "tcp", Pool: "q"}},
			Pools:     []model.Pool{{Name: "q", Backends: []model.Backend{{Address: a("198.19.200.5")}}, Health: &model.HealthCheck{Type: "tcp"}}}}
		p := Build(Input{Services: svcs, Hosts: hosts(), Seed: 7})
		want := Problems{
			{Kind: ProblemCheck, Service: "anyp", Pool: "q", Detail: "the health check needs a port (the pool only has any-port listeners)"},
			{Kind: ProblemBackend, Service: "web", Pool: "web", Backend: "az9-h1/g1", Detail: `host "az9-h1" does not exist`},
		}
		if !slices.Equal(p.Problems, want) {
			t.Fatalf("problems %+v, want %+v", p.Problems, want)
		}
		wantText := []string{
			"service anyp pool q: the health check needs a port (the pool only has any-port listeners)",
			`service web: backend az9-h1/g1: host "az9-h1" does not exist`,
		}
		if got := p.Problems.Strings(); !slices.Equal(got, wantText) {
			t.Errorf("strings %q, want %q", got, wantText)
		}
		if got := p.Problems.Of("web"); !slices.Equal(got, want[1:]) {
			t.Errorf("of web: %+v", got)
		}
		if got := p.Problems.Of("we"); len(got) != 0 {
			t.Errorf("of we (a prefix of web): %+v, want none", got)
		}
		if got := p.Problems.OfKind(ProblemCheck); !slices.Equal(got, want[:1]) {
			t.Errorf("of kind check: %+v", got)
		}
		if got := (Problems)(nil).Strings(); got != nil {
			t.Errorf("no problems: %q, want nil", got)
		}
	})
}

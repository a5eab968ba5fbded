package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// placedService is a service of a write and the place its fields are
// named from ("" for a single object, "services[2]" in a document).
type placedService struct {
	place string
	svc   *model.Service
}

// checkCommands refuses (422) a service whose command check names a
// command the edges do not list. Edges publish the names of their
// --health-command list in their node status (leased: a stopped edge's
// vanishes), so "registered" means "live" here. The rule:
//
//   - the live edges of the edge sets covering the VIP (as stored, or as
//     the same document writes them) must each list the command: every
//     one of them runs the check;
//   - when none of those is live but other edges are, at least one live
//     edge must list it (a name no edge knows is a typo);
//   - when no edge is live, the service is accepted: a fleet is often
//     described before its edges start. Each edge then judges for itself:
//     it never runs a command it does not list and reports the service in
//     its status errors.
//
// The edges' own lists are the security boundary; this check only turns a
// mistake into an error at write time.
func (s *Core) checkCommands(ctx context.Context, svcs []placedService, docSets []*model.EdgeSet) error {
	var withCmd []placedService
	for _, ps := range svcs {
		for _, p := range ps.svc.Pools {
			if p.Health != nil && p.Health.Type == model.CheckCommand {
				withCmd = append(withCmd, ps)
				break
			}
		}
	}
	if len(withCmd) == 0 {
		return nil
	}
	live, err := s.edgeCommands(ctx)
	if err != nil {
		return &errStore{fmt.Errorf("reading the edges' health commands to check the service's command check: %w", err)}
	}
	if len(live) == 0 {
		return nil
	}
	sets := map[string]*model.EdgeSet{}
	v := s.view
	v.mu.RLock()
	for n, set := range v.st.EdgeSets {
		sets[n] = set
	}
	v.mu.RUnlock()
	for _, set := range docSets {
		sets[set.Name] = set
	}
	var es model.Errors
	for _, ps := range withCmd {
		var covering []string
		for _, set := range sets {
			if !set.Contains(ps.svc.VIP) {
				continue
			}
			for _, e := range set.Edges {
				if _, ok := live[e.Name]; ok {
					covering = append(covering, e.Name)
				}
			}
		}
		sort.Strings(covering)
		covering = slices.Compact(covering)
		for j, p := range ps.svc.Pools {
			if p.Health == nil || p.Health.Type != model.CheckCommand {
				continue
			}
			name := string(p.Health.Command)
			field := fmt.Sprintf("pools[%d].health.command", j)
			if ps.place != "" {
				field = ps.place + "." + field
			}
			if len(covering) > 0 {
				var lack []string
				for _, e := range covering {
					if !slices.Contains(live[e], name) {
						lack = append(lack, e)
					}
				}
				if len(lack) > 0 {
					es = append(es, model.FieldError{Field: field, Msg: fmt.Sprintf(
						"service %s pool %s: health check command %q is not listed by edge %s, which serves the VIP %s (each must run it with --health-command %s=/path)",
						ps.svc.Name, p.Name, name, strings.Join(lack, ", "), ps.svc.VIP, name)})
				}
				continue
			}
			listed := false
			for _, names := range live {
				listed = listed || slices.Contains(names, name)
			}
			if !listed {
				es = append(es, model.FieldError{Field: field, Msg: fmt.Sprintf(
					"service %s pool %s: health check command %q is not listed by any of the %d live edges (start them with --health-command %s=/path)",
					ps.svc.Name, p.Name, name, len(live), name)})
			}
		}
	}
	if len(es) == 0 {
		return nil
	}
	return &InvalidError{Fields: es, Msg: "health check command not listed by the edges: " + summary(es)}
}

// edgeCommands reads the live edges' node statuses (through the store)
// and returns each edge's health command names. A status that does not
// decode is logged and left out.
func (s *Core) edgeCommands(ctx context.Context) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, s.store, "edge")
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, n := range nodes {
		if n.Err != nil {
			s.log.Warn("edge status does not decode", "key", n.Key, "err", n.Err)
			continue
		}
		out[n.Name] = n.Status.HealthCommands
	}
	return out, nil
}

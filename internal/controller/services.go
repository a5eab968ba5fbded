package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// modifyService replaces the service at the path key with a changed copy
// (completed with its defaults); change may refuse with an error.
func (s *Server) modifyService(w http.ResponseWriter, r *http.Request, change func(v *model.Service) error) error {
	key := r.PathValue("key")
	m, err := parseIfMatch(r)
	if err != nil {
		return err
	}
	var (
		action string
		stored *model.Service
		orev   int64
	)
	rev, err := s.write(r.Context(), func(t *txn) (err error) {
		if err := t.require(model.KindService, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(model.KindService, key)
		v, ok := t.st.Services[key]
		if !ok {
			return &model.NotFoundError{Kind: model.KindService, Key: key}
		}
		cp := v.Clone() // never change the stored service
		if err := change(cp); err != nil {
			return err
		}
		cp.Defaults()
		stored = cp
		action, err = t.put(cp)
		return invalid(model.KindService, key, err)
	})
	if err != nil {
		return err
	}
	s.logChange(model.KindService, key, action, rev)
	if action != api.Unchanged {
		orev = rev
	}
	setETag(w, orev)
	writeJSON(w, http.StatusOK, rev, writeBody{rev, action, stored})
	return nil
}

// pathPool finds the pool named in the path.
func pathPool(r *http.Request, v *model.Service) (*model.Pool, error) {
	name := r.PathValue("pool")
	p, _ := v.Pool(name)
	if p == nil {
		var names []string
		for _, p := range v.Pools {
			names = append(names, p.Name)
		}
		return nil, &httpError{status: http.StatusNotFound,
			msg: fmt.Sprintf("service %q has no pool %q (pools: %s)", v.Name, name, strings.Join(names, ", "))}
	}
	return p, nil
}

// pathBackend finds the backend named (by key) in the path.
func pathBackend(r *http.Request, v *model.Service) (*model.Pool, int, error) {
	p, err := pathPool(r, v)
	if err != nil {
		return nil, 0, err
	}
	key := r.PathValue("backend")
	i, ok := p.Backend(key)
	if !ok {
		return nil, 0, &httpError{status: http.StatusNotFound,
			msg: fmt.Sprintf("pool %q of service %q has no backend %q (keys are host/guest[:port] or address[:port])", p.Name, v.Name, key)}
	}
	return p, i, nil
}

func (s *Server) addBackend(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON backend {"host": "...", "guest": "..."} or {"address": "..."}`)
	if err != nil {
		return err
	}
	var b model.Backend
	if err := model.UnmarshalStrict(body, &b); err != nil {
		return decodeError("backend in the request body", err)
	}
	return s.modifyService(w, r, func(v *model.Service) error {
		p, err := pathPool(r, v)
		if err != nil {
			return err
		}
		if _, dup := p.Backend(b.Key()); dup {
			return &httpError{status: http.StatusConflict,
				msg: fmt.Sprintf("pool %q of service %q already has backend %s (POST .../backends/KEY/weight changes its weight)", p.Name, v.Name, b.Key())}
		}
		p.Backends = append(p.Backends, b)
		return nil
	})
}

func (s *Server) removeBackend(w http.ResponseWriter, r *http.Request) error {
	return s.modifyService(w, r, func(v *model.Service) error {
		p, i, err := pathBackend(r, v)
		if err != nil {
			return err
		}
		p.Backends = slices.Delete(p.Backends, i, i+1)
		return nil
	})
}

func (s *Server) setWeight(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON weight {"weight": N} (0 drains the backend)`)
	if err != nil {
		return err
	}
	var wt api.Weight
	if err := model.UnmarshalStrict(body, &wt); err != nil {
		return decodeError("weight in the request body", err)
	}
	if wt.Weight == nil {
		return &httpError{status: http.StatusBadRequest, msg: `weight in the request body: weight: required ({"weight": N}, 0 drains the backend)`,
			fields: []model.FieldError{{Field: "weight", Msg: "required"}}}
	}
	return s.modifyService(w, r, func(v *model.Service) error {
		p, i, err := pathBackend(r, v)
		if err != nil {
			return err
		}
		n := *wt.Weight
		p.Backends[i].Weight = &n // a new pointer: the stored service shares the old one
		return nil
	})
}

// serviceStatus answers GET /v1/services/{name}/status: the service, its
// stored verdict, every edge's reports on each backend and, per pool, the
// table every edge reports (model.NodeStatus.Tables) and whether they agree.
// The edges listed for a pool are those of the sets covering the VIP and
// any other edge that reports a table for it.
func (s *Server) serviceStatus(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("key")
	v := s.view
	v.mu.RLock()
	svc, ok := v.st.Services[name]
	h := v.st.Health[name]
	rev := v.rev
	var expected []string
	if ok {
		for _, set := range v.st.EdgeSets {
			if set.Contains(svc.VIP) {
				for _, e := range set.Edges {
					expected = append(expected, e.Name)
				}
			}
		}
	}
	v.mu.RUnlock()
	if !ok {
		return &model.NotFoundError{Kind: model.KindService, Key: name}
	}
	reports, bad := s.health.reportsOn(name)
	out := api.ServiceStatus{Revision: rev, Service: svc, Health: h, Errors: bad, Pools: []api.PoolStatus{}}

	edges := map[string]model.NodeStatus{}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, s.store, "edge")
	if err != nil {
		out.Errors = append(out.Errors, fmt.Sprintf("reading edge statuses from the store: %v", err))
	}
	for _, n := range nodes {
		if n.Err != nil {
			out.Errors = append(out.Errors, n.Err.Error())
			continue
		}
		for _, msg := range n.Status.Errors { // e.g. a health command the edge does not list
			if strings.HasPrefix(msg, "service "+name+" ") {
				out.Errors = append(out.Errors, "edge "+n.Name+": "+msg)
			}
		}
		edges[n.Name] = n.Status
	}

	out.Agree = true
	for _, p := range svc.Pools {
		ps := api.PoolStatus{Name: p.Name, Backends: []api.BackendStatus{}, Tables: []api.EdgeTable{}}
		for _, b := range p.Backends {
			k := b.Key()
			bs := api.BackendStatus{Key: k, Weight: b.W(), Down: h.IsDown(p.Name, k)}
			for _, er := range reports[p.Name][k] {
				if er.r.Up {
					bs.UpVotes++
				} else {
					bs.DownVotes++
				}
				bs.Reports = append(bs.Reports, api.EdgeReport{Edge: er.edge, HealthReport: er.r})
			}
			ps.Backends = append(ps.Backends, bs)
		}
		tk := model.TableKey(name, p.Name)
		names := map[string]bool{}
		for _, e := range expected {
			names[e] = true
		}
		for e, ns := range edges {
			if _, has := ns.Tables[tk]; has {
				names[e] = true
			}
		}
		order := make([]string, 0, len(names))
		for e := range names {
			order = append(order, e)
		}
		sort.Strings(order)
		agree, held, first := true, 0, ""
		for _, e := range order {
			et := api.EdgeTable{Edge: e}
			ns, has := edges[e]
			if !has {
				et.Missing = "no status"
				agree = false
				ps.Tables = append(ps.Tables, et)
				continue
			}
			et.AppliedRevision, et.Updated = ns.AppliedRevision, ns.Updated
			ts, has := ns.Tables[tk]
			switch {
			case !has:
				et.Missing = "no table"
				agree = false
			default:
				et.TableStatus = ts
				if held == 0 {
					first = ts.Checksum
				} else if ts.Checksum != first {
					agree = false
				}
				held++
			}
			ps.Tables = append(ps.Tables, et)
		}
		ps.Agree = agree && held > 0
		out.Agree = out.Agree && ps.Agree
		out.Pools = append(out.Pools, ps)
	}
	writeJSON(w, http.StatusOK, rev, out)
	return nil
}

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// writeBody answers a write (api.Write on the client side).
type writeBody struct {
	Revision int64        `json:"revision"`
	Action   string       `json:"action"`
	Object   model.Object `json:"object,omitempty"`
}

// keyField names the field holding an object's key.
func keyField(kind string) string {
	if kind == model.KindEIP {
		return "address"
	}
	return "name"
}

func (s *Server) list(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		v := s.view
		v.mu.RLock()
		keys := v.st.Keys(kind)
		items := make([]model.Object, len(keys))
		for i, k := range keys {
			items[i], _ = v.st.Get(kind, k)
		}
		rev := v.rev
		v.mu.RUnlock()
		writeJSON(w, http.StatusOK, rev, struct {
			Revision int64          `json:"revision"`
			Items    []model.Object `json:"items"`
		}{rev, items})
		return nil
	}
}

func (s *Server) get(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key := r.PathValue("key")
		v := s.view
		v.mu.RLock()
		o, ok := v.st.Get(kind, key)
		rev, orev := v.rev, v.revs.Get(kind, key)
		v.mu.RUnlock()
		if !ok {
			return &model.NotFoundError{Kind: kind, Key: key}
		}
		setETag(w, orev)
		writeJSON(w, http.StatusOK, rev, o)
		return nil
	}
}

// decodeObject reads an object of kind from the body and checks it on its own.
func (s *Server) decodeObject(w http.ResponseWriter, r *http.Request, kind string) (model.Object, error) {
	body, err := s.readBody(w, r, "a JSON "+model.Singular(kind))
	if err != nil {
		return nil, err
	}
	o, err := model.Decode(kind, body)
	if err != nil {
		return nil, decodeError(model.Singular(kind)+" in the request body", err)
	}
	defaults(o)
	if es := o.Validate(); len(es) > 0 {
		return nil, invalid(kind, o.Key(), es)
	}
	if svc, ok := o.(*model.Service); ok {
		if err := s.checkCommands(r.Context(), []placedService{{svc: svc}}, nil); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// defaults completes an object with its defaults (services), so that what
// is stored says explicitly what the nodes do.
func defaults(o model.Object) {
	if d, ok := o.(interface{ Defaults() }); ok {
		d.Defaults()
	}
}

// decodeError is a 400 naming what was decoded and the field at fault.
func decodeError(what string, err error) error {
	he := &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s: %v", what, err)}
	if fe, ok := err.(model.FieldError); ok {
		he.fields = []model.FieldError{fe}
	}
	return he
}

func (s *Server) create(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		o, err := s.decodeObject(w, r, kind)
		if err != nil {
			return err
		}
		key := o.Key()
		rev, err := s.write(r.Context(), func(t *txn) error {
			if _, ok := t.st.Get(kind, key); ok {
				return &httpError{status: http.StatusConflict,
					msg: fmt.Sprintf("%s %q already exists (PUT /v1/%s/%s replaces it)", model.Singular(kind), key, kind, key)}
			}
			_, err := t.put(o)
			return invalid(kind, key, err)
		})
		if err != nil {
			return err
		}
		s.logChange(kind, key, api.Created, rev)
		setETag(w, rev)
		writeJSON(w, http.StatusCreated, rev, writeBody{rev, api.Created, o})
		return nil
	}
}

func (s *Server) replace(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key := r.PathValue("key")
		m, err := parseIfMatch(r)
		if err != nil {
			return err
		}
		o, err := s.decodeObject(w, r, kind)
		if err != nil {
			return err
		}
		if o.Key() != key {
			f := keyField(kind)
			msg := fmt.Sprintf("%q does not match %q, the key in the path", o.Key(), key)
			return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s in the request body: %s: %s", model.Singular(kind), f, msg),
				fields: []model.FieldError{{Field: f, Msg: msg}}}
		}
		var (
			action string
			orev   int64
		)
		rev, err := s.write(r.Context(), func(t *txn) (err error) {
			if err := t.require(kind, key, m); err != nil {
				return err
			}
			orev = t.revs.Get(kind, key)
			action, err = t.put(o)
			return invalid(kind, key, err)
		})
		if err != nil {
			return err
		}
		s.logChange(kind, key, action, rev)
		status := http.StatusOK
		if action == api.Created {
			status = http.StatusCreated
		}
		if action != api.Unchanged {
			orev = rev // one object: its own commit
		}
		setETag(w, orev)
		writeJSON(w, status, rev, writeBody{rev, action, o})
		return nil
	}
}

func (s *Server) remove(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key := r.PathValue("key")
		m, err := parseIfMatch(r)
		if err != nil {
			return err
		}
		rev, err := s.write(r.Context(), func(t *txn) error {
			if err := t.require(kind, key, m); err != nil {
				return err
			}
			if err := t.delete(kind, key); err != nil {
				return err
			}
			if kind == model.KindService {
				t.removeHealth(key) // the verdict goes with its service
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.logChange(kind, key, api.Deleted, rev)
		writeJSON(w, http.StatusOK, rev, writeBody{Revision: rev, Action: api.Deleted})
		return nil
	}
}

// modifyEIP replaces the EIP at the path key with a changed copy.
func (s *Server) modifyEIP(w http.ResponseWriter, r *http.Request, change func(e *model.EIP)) error {
	key := r.PathValue("key")
	m, err := parseIfMatch(r)
	if err != nil {
		return err
	}
	var (
		action string
		stored *model.EIP
		orev   int64
	)
	rev, err := s.write(r.Context(), func(t *txn) (err error) {
		if err := t.require(model.KindEIP, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(model.KindEIP, key)
		e, ok := t.st.EIPs[key]
		if !ok {
			return &model.NotFoundError{Kind: model.KindEIP, Key: key}
		}
		cp := *e
		change(&cp)
		stored = &cp
		action, err = t.put(&cp)
		return invalid(model.KindEIP, key, err)
	})
	if err != nil {
		return err
	}
	s.logChange(model.KindEIP, key, action, rev)
	if action != api.Unchanged {
		orev = rev
	}
	setETag(w, orev)
	writeJSON(w, http.StatusOK, rev, writeBody{rev, action, stored})
	return nil
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, `a JSON binding {"host": "...", "guest": "..."}`)
	if err != nil {
		return err
	}
	var b api.Bind
	if err := model.UnmarshalStrict(body, &b); err != nil {
		return decodeError("binding in the request body", err)
	}
	return s.modifyEIP(w, r, func(e *model.EIP) { e.Binding = &model.Binding{Host: b.Host, Guest: b.Guest} })
}

func (s *Server) unbind(w http.ResponseWriter, r *http.Request) error {
	return s.modifyEIP(w, r, func(e *model.EIP) { e.Binding = nil })
}

// modifyHost replaces the host at the path key with a changed copy; change
// may refuse with an error.
func (s *Server) modifyHost(w http.ResponseWriter, r *http.Request, change func(st *model.State, h *model.Host) error) error {
	key := r.PathValue("key")
	m, err := parseIfMatch(r)
	if err != nil {
		return err
	}
	var (
		action string
		stored *model.Host
		orev   int64
	)
	rev, err := s.write(r.Context(), func(t *txn) (err error) {
		if err := t.require(model.KindHost, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(model.KindHost, key)
		h, ok := t.st.Hosts[key]
		if !ok {
			return &model.NotFoundError{Kind: model.KindHost, Key: key}
		}
		cp := *h
		cp.Guests = slices.Clone(h.Guests) // never change the stored host's array
		if err := change(t.st, &cp); err != nil {
			return err
		}
		stored = &cp
		action, err = t.put(&cp)
		return invalid(model.KindHost, key, err)
	})
	if err != nil {
		return err
	}
	s.logChange(model.KindHost, key, action, rev)
	if action != api.Unchanged {
		orev = rev
	}
	setETag(w, orev)
	writeJSON(w, http.StatusOK, rev, writeBody{rev, action, stored})
	return nil
}

func (s *Server) addGuest(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, "a JSON guest")
	if err != nil {
		return err
	}
	var g model.Guest
	if err := model.UnmarshalStrict(body, &g); err != nil {
		return decodeError("guest in the request body", err)
	}
	return s.modifyHost(w, r, func(_ *model.State, h *model.Host) error {
		if _, dup := h.Guest(g.Name); dup {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("host %q already has a guest %q", h.Name, g.Name)}
		}
		h.Guests = append(h.Guests, g)
		return nil
	})
}

func (s *Server) removeGuest(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("guest")
	return s.modifyHost(w, r, func(st *model.State, h *model.Host) error {
		if _, ok := h.Guest(name); !ok {
			return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("host %q has no guest %q", h.Name, name)}
		}
		if eip, bound := st.BoundEIP(h.Name, name); bound {
			return &model.ConflictError{Msg: fmt.Sprintf("guest %s/%s is bound to EIP %s: unbind it first", h.Name, name, eip)}
		}
		if svcs := st.BackendOf(h.Name, name); len(svcs) > 0 {
			return &model.ConflictError{Msg: fmt.Sprintf("guest %s/%s is a backend of service %s: remove it from the pools first", h.Name, name, strings.Join(svcs, ", "))}
		}
		h.Guests = slices.DeleteFunc(h.Guests, func(g model.Guest) bool { return g.Name == name })
		return nil
	})
}

// apply stores a whole document: every object is checked against the
// state with the document's earlier objects already in it (dependency
// order: AZs, hosts, edge sets, EIPs); one error and nothing is written.
// Objects equal to the stored ones are not written again.
//
// A document larger than one transaction is committed in several: if a
// conflicting write lands between two of them, the retry finds the objects
// of the first ones already stored and reports them unchanged.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r, "a YAML or JSON document")
	if err != nil {
		return err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		if !json.Valid(body) {
			var raw json.RawMessage
			return badRequest("document: not valid JSON: %v", json.Unmarshal(body, &raw))
		}
	case "", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain", "application/octet-stream":
	default:
		return &httpError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("Content-Type %q: send application/json or application/yaml", ct)}
	}
	doc, err := model.ParseDocument(body)
	if es, ok := err.(model.Errors); ok {
		return &httpError{status: http.StatusUnprocessableEntity, fields: es, msg: "document not applied: " + summary(es)}
	} else if err != nil {
		return decodeError("document", err)
	}
	placed := doc.Placed()
	var svcs []placedService
	var sets []*model.EdgeSet
	for _, p := range placed {
		defaults(p.Obj)
		switch o := p.Obj.(type) {
		case *model.Service:
			svcs = append(svcs, placedService{p.Place, o})
		case *model.EdgeSet:
			sets = append(sets, o)
		}
	}
	if err := s.checkCommands(r.Context(), svcs, sets); err != nil {
		return err
	}
	var objs []api.AppliedObject
	rev, err := s.write(r.Context(), func(t *txn) error {
		objs = make([]api.AppliedObject, len(placed))
		var es model.Errors
		for i, p := range placed {
			action, err := t.put(p.Obj)
			if err != nil {
				es = append(es, placeErrors(p.Place, err)...)
				continue
			}
			objs[i] = api.AppliedObject{Kind: model.KindOf(p.Obj), Key: p.Obj.Key(), Action: action}
		}
		if len(es) > 0 {
			return &httpError{status: http.StatusUnprocessableEntity, fields: es, msg: "document not applied, nothing was written: " + summary(es)}
		}
		return nil
	})
	if err != nil {
		return err
	}
	res := api.ApplyResult{Revision: rev, Objects: objs}
	for _, o := range objs {
		switch o.Action {
		case api.Created:
			res.Created++
		case api.Updated:
			res.Updated++
		default:
			res.Unchanged++
		}
	}
	s.log.Info("applied a document", "created", res.Created, "updated", res.Updated, "unchanged", res.Unchanged, "rev", rev)
	writeJSON(w, http.StatusOK, rev, res)
	return nil
}

// placeErrors prefixes an object's errors with its place in the document.
func placeErrors(place string, err error) model.Errors {
	if es, ok := err.(model.Errors); ok {
		out := make(model.Errors, len(es))
		for i, e := range es {
			out[i] = model.FieldError{Field: place + "." + e.Field, Msg: e.Msg}
		}
		return out
	}
	return model.Errors{{Field: place, Msg: err.Error()}}
}

// summary names the first few errors of a long list.
func summary(es model.Errors) string {
	const show = 3
	if len(es) <= show {
		return fmt.Sprintf("%d error(s): %v", len(es), es)
	}
	return fmt.Sprintf("%d errors: %v; and %d more", len(es), es[:show], len(es)-show)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	out := api.Status{
		Controller: api.Controller{Version: s.cfg.Version, Started: s.started, Revision: s.view.revision(),
			Store: s.storeKind(), Objects: s.view.counts()},
		Nodes: map[string][]model.NodeStatus{},
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, s.store, "")
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	for _, n := range nodes {
		if n.Err != nil {
			out.Errors = append(out.Errors, n.Err.Error())
			continue
		}
		out.Nodes[n.Role] = append(out.Nodes[n.Role], n.Status)
	}
	// Objects in the store that fail validation (written past the API):
	// left out of the view, so the API neither serves nor counts them.
	if inv, n := s.store.Invalid(); n > 0 {
		for _, o := range inv {
			out.Errors = append(out.Errors, fmt.Sprintf("store: %s %q is invalid and ignored: %s", o.Kind, o.Key, o.Reason))
		}
		if n > len(inv) {
			out.Errors = append(out.Errors, fmt.Sprintf("store: and %d more invalid objects", n-len(inv)))
		}
	}
	for _, ns := range out.Nodes {
		sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	}
	writeJSON(w, http.StatusOK, out.Controller.Revision, out)
	return nil
}

func (s *Server) logChange(kind, key, action string, rev int64) {
	if action == api.Unchanged {
		return
	}
	s.log.Info("object "+action, "kind", kind, "key", key, "rev", rev)
}

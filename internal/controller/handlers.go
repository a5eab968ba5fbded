package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// writeBody answers a write (api.Write on the client side).
type writeBody struct {
	Revision int64        `json:"revision"`
	Action   string       `json:"action"`
	Object   model.Object `json:"object,omitempty"`
	Warnings []string     `json:"warnings,omitempty"`
	DryRun   bool         `json:"dryRun,omitempty"`
	Refusals []string     `json:"refusals,omitempty"`
}

// answerWrite answers a write of one object with its ETag.
func answerWrite(w http.ResponseWriter, status int, wr Written) {
	if wr.DryRun {
		status = http.StatusOK
	} else {
		setETag(w, wr.ETag)
	}
	var o model.Object
	if wr.Object != nil {
		o = model.Redacted(wr.Object) // secrets are write-only
	}
	writeJSON(w, status, wr.Revision, writeBody{wr.Revision, wr.Action, o, wr.Warnings, wr.DryRun, wr.Refusals})
}

func (s *Server) list(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		o, err := listOptionsOf(r)
		if err != nil {
			return err
		}
		items, rev, next, err := s.Core.ListPage(kind, o)
		if err != nil {
			return err
		}
		items = redactAll(items)
		writeJSON(w, http.StatusOK, rev, struct {
			Revision int64          `json:"revision"`
			Items    []model.Object `json:"items"`
			Continue string         `json:"continue,omitempty"`
		}{rev, items, next})
		return nil
	}
}

// listOptionsOf reads a list's query: limit, continue and the EIP
// filters set, host and prefix.
func listOptionsOf(r *http.Request) (ListOptions, error) {
	q := r.URL.Query()
	var o ListOptions
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, badRequest("query parameter limit=%q: want a count, 0 or more (0: all)", v)
		}
		o.Limit = n
	}
	o.Continue = q.Get("continue")
	o.EIP.Set, o.EIP.Host = q.Get("set"), q.Get("host")
	if v := q.Get("prefix"); v != "" {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return o, badRequest("query parameter prefix=%q: not a prefix (ADDRESS/BITS)", v)
		}
		o.EIP.Prefix = p.Masked()
	}
	return o, nil
}

// deleteEIPs: POST /v1/eips/delete with a selector {set, host, prefix}.
func (s *Server) deleteEIPs(w http.ResponseWriter, r *http.Request) error {
	var f EIPFilter
	if err := s.decodeBody(w, r, `a JSON selector {"set": "...", "host": "...", "prefix": "..."}`, "selector", &f); err != nil {
		return err
	}
	res, err := s.Core.DeleteEIPs(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res.Revision, res)
	return nil
}

// pathKey is the object key in the path. An address (the key of an EIP
// or a quarantine) is put in the form its object's Key writes: an IPv6
// address has many spellings (2001:DB8:0::7 is 2001:db8::7), an IPv4
// one a single one. A name never parses as an address (no ':' or '.').
func pathKey(r *http.Request) string {
	k := r.PathValue("key")
	if a, err := netip.ParseAddr(k); err == nil && a.Zone() == "" {
		return a.String()
	}
	return k
}

func (s *Server) get(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		o, rev, orev, err := s.Core.Get(kind, pathKey(r))
		if err != nil {
			return err
		}
		setETag(w, orev)
		writeJSON(w, http.StatusOK, rev, model.Redacted(o))
		return nil
	}
}

// decodeObject reads an object of kind from the body (the Core checks it).
func (s *Server) decodeObject(w http.ResponseWriter, r *http.Request, kind string) (model.Object, error) {
	body, err := s.readBody(w, r, "a JSON "+model.Singular(kind))
	if err != nil {
		return nil, err
	}
	o, err := model.Decode(kind, body)
	if err != nil {
		return nil, decodeError(model.Singular(kind)+" in the request body", err)
	}
	return o, nil
}

// decodeError is a 400 naming what was decoded and the field at fault.
func decodeError(what string, err error) error {
	he := &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s: %v", what, err)}
	if fe, ok := err.(model.FieldError); ok {
		he.fields = []model.FieldError{fe}
	}
	return he
}

// decodeBody reads the body into v, strictly (unknown fields refused);
// what describes the expected body, name what it holds.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, what, name string, v any) error {
	body, err := s.readBody(w, r, what)
	if err != nil {
		return err
	}
	if err := model.UnmarshalStrict(body, v); err != nil {
		return decodeError(name+" in the request body", err)
	}
	return nil
}

func (s *Server) create(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		o, err := s.decodeObject(w, r, kind)
		if err != nil {
			return err
		}
		wr, err := s.Core.Create(r.Context(), o)
		if err != nil {
			return err
		}
		answerWrite(w, http.StatusCreated, wr)
		return nil
	}
}

func (s *Server) replace(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		m, err := parseIfMatch(r)
		if err != nil {
			return err
		}
		o, err := s.decodeObject(w, r, kind)
		if err != nil {
			return err
		}
		wr, err := s.Core.Replace(r.Context(), pathKey(r), m, o)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if wr.Action == api.Created {
			status = http.StatusCreated
		}
		answerWrite(w, status, wr)
		return nil
	}
}

func (s *Server) remove(kind string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		m, err := parseIfMatch(r)
		if err != nil {
			return err
		}
		wr, err := s.Core.Delete(r.Context(), kind, pathKey(r), m)
		if err != nil {
			return err
		}
		answerWrite(w, http.StatusOK, wr)
		return nil
	}
}

// edit answers a narrow edit of the object at the path key: the If-Match
// header, then the Core's method.
func (s *Server) edit(w http.ResponseWriter, r *http.Request, call func(ctx context.Context, key string, m IfMatch) (Written, error)) error {
	m, err := parseIfMatch(r)
	if err != nil {
		return err
	}
	wr, err := call(r.Context(), pathKey(r), m)
	if err != nil {
		return err
	}
	answerWrite(w, http.StatusOK, wr)
	return nil
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request) error {
	var b api.Bind
	if err := s.decodeBody(w, r, `a JSON binding {"host": "...", "guest": "..."}`, "binding", &b); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.Bind(ctx, key, m, model.Binding{Host: b.Host, Guest: b.Guest})
	})
}

func (s *Server) unbind(w http.ResponseWriter, r *http.Request) error {
	return s.edit(w, r, s.Core.Unbind)
}

func (s *Server) addGuest(w http.ResponseWriter, r *http.Request) error {
	var g model.Guest
	if err := s.decodeBody(w, r, "a JSON guest", "guest", &g); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.AddGuest(ctx, key, m, g)
	})
}

func (s *Server) removeGuest(w http.ResponseWriter, r *http.Request) error {
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.RemoveGuest(ctx, key, m, r.PathValue("guest"))
	})
}

// apply: POST /v1/apply with a YAML or JSON document (Core.Apply).
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
		return &InvalidError{Fields: es, Msg: "document not applied: " + summary(es)}
	} else if err != nil {
		return decodeError("document", err)
	}
	var opts ApplyOptions
	if opts.Prune, err = queryBool(r, "prune"); err != nil {
		return err
	}
	if opts.Diff, err = queryBool(r, "diff"); err != nil {
		return err
	}
	res, err := s.Core.Apply(r.Context(), doc, opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res.Revision, res)
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	out := s.Core.Status(r.Context())
	writeJSON(w, http.StatusOK, out.Controller.Revision, out)
	return nil
}

// queryBool reads a boolean query parameter (absent: false).
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

// writeOptionsOf reads the options every write takes: force=true (do
// what the guards refuse, guard.go) and dryRun=true (check, write
// nothing).
func writeOptionsOf(r *http.Request) (WriteOptions, error) {
	var o WriteOptions
	var err error
	if o.Force, err = queryBool(r, "force"); err != nil {
		return o, err
	}
	o.DryRun, err = queryBool(r, "dryRun")
	return o, err
}

// redactAll returns items with their secrets redacted (model.Redacted):
// items itself when none has one (the Core's list is not changed).
func redactAll(items []model.Object) []model.Object {
	var out []model.Object
	for i, o := range items {
		r := model.Redacted(o)
		if r != o && out == nil {
			out = slices.Clone(items[:i:i])
		}
		if out != nil {
			out = append(out, r)
		}
	}
	if out == nil {
		return items
	}
	return out
}

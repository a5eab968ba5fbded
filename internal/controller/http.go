package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/nodemetrics"
)

// handlerFunc is an API handler; an error it returns becomes the JSON
// error response (see writeError).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handler builds the API's routes: /healthz is open, /metrics too unless
// Config.MetricsAuth, every /v1 route needs the bearer token, /ui (the
// status page) the token as a bearer or as a Basic password.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	// Every route goes through handle, so s.routes lists them all:
	// TestEveryRouteNeedsToken calls each one but /healthz (and /metrics
	// without MetricsAuth) without a token.
	s.routes = s.routes[:0]
	handle := func(pattern string, h http.Handler) {
		s.routes = append(s.routes, pattern)
		mux.Handle(pattern, h)
	}
	handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	}))
	metrics := promhttp.HandlerFor(nodemetrics.WithNode(s.metrics.reg, s.cfg.Node), promhttp.HandlerOpts{})
	if s.cfg.MetricsAuth {
		handle("GET /metrics", s.authorized(func(w http.ResponseWriter, r *http.Request) error {
			metrics.ServeHTTP(w, r)
			return nil
		}))
	} else {
		handle("GET /metrics", metrics)
	}
	v1 := func(pattern string, h handlerFunc) { handle(pattern, s.authorized(h)) }
	v1("GET /v1/status", s.status)
	v1("GET /v1/audit", s.audit)
	v1("GET /v1/ddos/events", s.ddosEvents)
	v1("GET /v1/ddos/rates", s.ddosRates)
	v1("POST /v1/apply", s.apply)
	v1("GET /v1/export", s.export)
	for _, kind := range model.UserKinds {
		v1("GET /v1/"+kind, s.list(kind))
		v1("POST /v1/"+kind, s.create(kind))
		v1("GET /v1/"+kind+"/{key}", s.get(kind))
		v1("PUT /v1/"+kind+"/{key}", s.replace(kind))
		v1("DELETE /v1/"+kind+"/{key}", s.remove(kind))
	}
	v1("POST /v1/eips/delete", s.deleteEIPs)
	v1("POST /v1/eips/{key}/bind", s.bind)
	v1("POST /v1/eips/{key}/unbind", s.unbind)
	v1("POST /v1/eips/{key}/limits", s.setEIPLimits)
	v1("DELETE /v1/eips/{key}/limits", s.clearEIPLimits)
	v1("POST /v1/bandwidthpackages/{key}/eips", s.addPackageEIP)
	v1("DELETE /v1/bandwidthpackages/{key}/eips/{address}", s.removePackageEIP)
	v1("POST /v1/dnszones/{key}/records", s.addZoneRecord)
	v1("POST /v1/gslbrecords/{key}/targets", s.addGSLBTarget)
	v1("DELETE /v1/gslbrecords/{key}/targets/{vip}", s.removeGSLBTarget)
	v1("POST /v1/hosts/{key}/guests", s.addGuest)
	v1("DELETE /v1/hosts/{key}/guests/{guest}", s.removeGuest)
	// Health objects are the controller's: read only.
	v1("GET /v1/"+model.KindHealth, s.list(model.KindHealth))
	v1("GET /v1/"+model.KindHealth+"/{key}", s.get(model.KindHealth))
	v1("POST /v1/services/{key}/pools/{pool}/backends", s.addBackend)
	v1("DELETE /v1/services/{key}/pools/{pool}/backends/{backend}", s.removeBackend)
	v1("POST /v1/services/{key}/pools/{pool}/backends/{backend}/weight", s.setWeight)
	v1("GET /v1/services/{key}/status", s.serviceStatus)
	// The status page (ui.go): read-only, and the only routes that take
	// HTTP Basic credentials.
	handle("GET /ui", s.uiAuthorized(s.ui))
	return s.instrument(mux)
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	timeout time.Duration // Config.WriteTimeout, for writeJSON
}

func (r *statusRecorder) writeTimeout() time.Duration { return r.timeout }

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// instrument counts and logs every request by its route pattern (set by
// the mux on the request it was handed).
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, timeout: s.cfg.WriteTimeout}
		// The token is looked up once a request, here: authorized
		// reads the identity from the context (whoami).
		// bearerOf: a /ui read may carry the token as a Basic password.
		id := s.tokens.lookup(bearerOf(r))
		r = r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
		if id.role == RoleNone {
			// A request without the token (/healthz, /metrics, a 401)
			// ends its connection: connections are capped before any
			// token is checked, and an unauthenticated client must not
			// keep slots by keep-alive (the idle timeout is minutes).
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		d := time.Since(start)
		s.metrics.observe(route, rec.code, d.Seconds())
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "route", route, "code", rec.code, "dur", d)
	})
}

// authorized checks the bearer token, and its role against the one the
// request needs (requiredRole), before h. The 401 answers do not say
// where the token is: an unauthenticated client learns nothing of the
// controller's files.
func (s *Server) authorized(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="azgate"`)
			s.writeError(w, r, &httpError{status: http.StatusUnauthorized,
				msg: "missing Authorization header: send \"Authorization: Bearer TOKEN\" with an API token"})
			return
		}
		id := whoami(r) // instrument's lookup
		if id.role == RoleNone {
			w.Header().Set("WWW-Authenticate", `Bearer realm="azgate", error="invalid_token"`)
			s.writeError(w, r, &httpError{status: http.StatusUnauthorized,
				msg: "wrong bearer token: not one of the controller's API tokens"})
			return
		}
		if need := requiredRole(r); id.role < need {
			s.writeError(w, r, &httpError{status: http.StatusForbidden,
				msg: fmt.Sprintf("token %q has role %s; %s %s needs role %s", id.name, id.role, r.Method, r.URL.Path, need)})
			return
		}
		r = r.WithContext(WithActor(r.Context(), Actor{Name: id.name, Role: id.role.String(), Method: r.Method, Path: r.URL.RequestURI()}))
		if large(r) {
			release, err := s.takeLargeBody(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			defer release()
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			o, err := writeOptionsOf(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			r = r.WithContext(WithWriteOptions(r.Context(), o))
		}
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// largeBody: a request body larger than this (or of unknown length) is
// large. Large requests are served one at a time (their bodies are held in
// memory, parsed and planned; writes are serialized anyway), so
// --max-conns connections cost at most one body of --max-body-bytes and
// the others of 16 MiB at most.
const largeBody = 16 << 20

func large(r *http.Request) bool {
	return r.ContentLength > largeBody || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// takeLargeBody waits for the one slot of large requests, until the
// client goes away.
func (s *Server) takeLargeBody(r *http.Request) (release func(), err error) {
	select {
	case s.largeBodies <- struct{}{}:
		return func() { <-s.largeBodies }, nil
	default:
	}
	s.largeWaiting.Add(1)
	defer s.largeWaiting.Add(-1)
	select {
	case s.largeBodies <- struct{}{}:
		return func() { <-s.largeBodies }, nil
	case <-r.Context().Done():
		return nil, &httpError{status: http.StatusServiceUnavailable,
			msg: "gave up waiting for another large request to finish (large requests are served one at a time)"}
	}
}

// httpError is an error of the HTTP layer itself (a body it cannot read
// or decode, a header, a query parameter) with its status. The Core
// never returns one.
type httpError struct {
	status int
	msg    string
	fields []model.FieldError
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// byteSize writes n in bytes, with MiB when it is that large.
func byteSize(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d bytes (%d MiB)", n, n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// maxErrorFields caps the field errors of one answer: a million-object
// document with one mistake in each would otherwise answer with a body
// larger than itself.
const maxErrorFields = 100

// maxErrorMessage caps an error answer's message (the fields carry the
// details).
const maxErrorMessage = 16 << 10

// writeError answers a failed request (errorAnswer) and logs the
// failures of the controller itself (5xx).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if status := errorAnswer(w, err); status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", status, "err", err)
	}
}

// errorAnswer writes err as the JSON error answer and returns its status:
// the Core's typed errors (errors.go) map to 404, 409, 412 (with the
// current revision), 422 and 400, the store's failures to 503, the HTTP
// layer's own (httpError) carry theirs; anything else is a 500. The field
// errors are capped at maxErrorFields (Omitted counts the rest).
func errorAnswer(w http.ResponseWriter, err error) int {
	body := api.Error{Error: err.Error()}
	status := http.StatusInternalServerError
	var (
		he  *httpError
		nf  *NotFoundError
		mnf *model.NotFoundError
		ce  *ConflictError
		mce *model.ConflictError
		se  *errStore
		re  *RevisionError
		ie  *InvalidError
		ke  *KeyMismatchError
		fo  *ForceError
		es  model.Errors
		fe  model.FieldError
	)
	switch {
	case errors.As(err, &he):
		status, body.Fields = he.status, he.fields
	case errors.As(err, &fo):
		status, body.Force = http.StatusConflict, true
	case errors.As(err, &nf), errors.As(err, &mnf):
		status = http.StatusNotFound
	case errors.As(err, &ce), errors.As(err, &mce):
		status = http.StatusConflict
	case errors.As(err, &se):
		status = http.StatusServiceUnavailable
	case errors.As(err, &re):
		status, body.Revision = http.StatusPreconditionFailed, re.Current
		if re.Current > 0 {
			w.Header().Set("ETag", etag(re.Current))
		}
	case errors.As(err, &ie):
		status, body.Fields = http.StatusUnprocessableEntity, ie.Fields
	case errors.As(err, &ke):
		status, body.Fields = http.StatusBadRequest, []model.FieldError{ke.Field()}
	case errors.As(err, &es):
		status, body.Fields = http.StatusUnprocessableEntity, es
	case errors.As(err, &fe):
		status, body.Fields = http.StatusBadRequest, []model.FieldError{fe}
	}
	if n := len(body.Fields); n > maxErrorFields {
		body.Fields = body.Fields[:maxErrorFields:maxErrorFields]
		body.Omitted = n - maxErrorFields
		body.Error = fmt.Sprintf("%s (%d field errors; the first %d are listed, and %d more)", body.Error, n, maxErrorFields, n-maxErrorFields)
	}
	if len(body.Error) > maxErrorMessage {
		body.Error = strings.ToValidUTF8(body.Error[:maxErrorMessage], "") + fmt.Sprintf("... (%d more bytes)", len(body.Error)-maxErrorMessage)
	}
	writeJSON(w, status, 0, body)
	return status
}

// writeJSON writes v with the revision header (when rev > 0). The write
// deadline (Config.WriteTimeout) counts from here, not from the end of the
// request's headers: a write that waited for a long commit still gets the
// whole timeout to send its answer.
func writeJSON(w http.ResponseWriter, status int, rev int64, v any) {
	if d, ok := w.(interface{ writeTimeout() time.Duration }); ok && d.writeTimeout() > 0 {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d.writeTimeout()))
	}
	w.Header().Set("Content-Type", "application/json")
	if rev > 0 {
		w.Header().Set(api.RevisionHeader, strconv.FormatInt(rev, 10))
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // a write error means the client went away
}

// readBody reads the whole body within the configured limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, what string) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &httpError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body is larger than %s, the controller's --max-body-bytes: split the document, or raise the limit", byteSize(mbe.Limit))}
	case err != nil:
		return nil, badRequest("reading the request body: %v", err)
	case len(bytes.TrimSpace(b)) == 0:
		return nil, badRequest("request body is empty: expected %s", what)
	}
	return b, nil
}

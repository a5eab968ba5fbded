package pathd

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// Handler serves the API (docs/pathd.md, "API").
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reports", s.auth(s.cfg.Token, s.handleReports))
	mux.HandleFunc("POST /v1/forward", s.authPeer(s.handleForward))
	mux.HandleFunc("GET /v1/paths", s.auth(s.cfg.Token, s.handlePaths))
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.Handle("GET /metrics", s.auth(s.cfg.MetricsToken, s.metricsHandler().ServeHTTP))
	return mux
}

// auth requires "Authorization: Bearer TOKEN", compared in constant time.
func (s *Server) auth(token string, h http.HandlerFunc) http.HandlerFunc {
	want := []byte("Bearer " + token)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			s.mu.Lock()
			s.cnt.unauth++
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Bearer realm="azgate-pathd"`)
			httpError(w, http.StatusUnauthorized, "%s needs \"Authorization: Bearer TOKEN\" with the right token", r.URL.Path)
			return
		}
		h(w, r)
	}
}

// authPeer requires "Authorization: Bearer TOKEN" with one of the peer
// tokens and passes the region it names to h. Every token is compared,
// each in constant time, so the time taken does not tell which one (or
// how much of one) matched.
func (s *Server) authPeer(h func(w http.ResponseWriter, r *http.Request, from string)) http.HandlerFunc {
	type cred struct {
		region string
		want   []byte
	}
	var creds []cred
	for _, r := range slices.Sorted(maps.Keys(s.cfg.PeerTokens)) {
		creds = append(creds, cred{r, []byte("Bearer " + s.cfg.PeerTokens[r])})
	}
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		from := ""
		for _, c := range creds {
			if subtle.ConstantTimeCompare(got, c.want) == 1 {
				from = c.region
			}
		}
		if from == "" {
			s.mu.Lock()
			s.cnt.unauth++
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Bearer realm="azgate-pathd"`)
			httpError(w, http.StatusUnauthorized, "%s needs \"Authorization: Bearer TOKEN\" with the token of the sender's region pair", r.URL.Path)
			return
		}
		h(w, r, from)
	}
}

func httpError(w http.ResponseWriter, code int, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, a...)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// decodeList reads a JSON array of at most maxN values from r's body (or
// null: none): at most maxBody bytes (413 beyond), more than maxN values
// 413, no unknown fields, nothing after it. It decodes one element at a
// time and stops at the (maxN+1)-th, so what a request makes the server
// hold is bounded by maxN, not by the body: a MiB of "{}," would
// otherwise be ~350,000 empty reports (tens of MB) before the count is
// checked. It writes the error reply and returns false when the body is
// refused.
func decodeList[T any](w http.ResponseWriter, r *http.Request, maxBody int64, maxN int) ([]T, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	var out []T
	tooMany := false
	err := func() error {
		t, err := dec.Token()
		if err != nil || t == nil { // t nil: null
			return err
		}
		if d, ok := t.(json.Delim); !ok || d != '[' {
			return fmt.Errorf("want a JSON array, got %v", t)
		}
		for dec.More() {
			if len(out) == maxN {
				tooMany = true
				return nil
			}
			var x T
			if err := dec.Decode(&x); err != nil {
				return err
			}
			out = append(out, x)
		}
		_, err = dec.Token() // the closing ]
		return err
	}()
	if err == nil && !tooMany {
		if _, e := dec.Token(); !errors.Is(e, io.EOF) {
			err = errors.New("data after the JSON value")
		}
	}
	var mb *http.MaxBytesError
	switch {
	case tooMany:
		httpError(w, http.StatusRequestEntityTooLarge, "body: more than %d reports per request", maxN)
	case errors.As(err, &mb):
		httpError(w, http.StatusRequestEntityTooLarge, "body: more than %d bytes", maxBody)
	case err != nil:
		httpError(w, http.StatusBadRequest, "body: %v", err)
	default:
		return out, true
	}
	return nil, false
}

// ReportsReply is the answer to POST /v1/reports and /v1/forward: what
// became of the reports (Duplicate: forwards only). Errors holds the first
// few reasons for Stale and Rejected.
type ReportsReply struct {
	Applied   int      `json:"applied"`
	Stale     int      `json:"stale"`
	Rejected  int      `json:"rejected"`
	Duplicate int      `json:"duplicate,omitempty"`
	Errors    []string `json:"errors,omitempty"`
}

const maxReplyErrors = 8

func (r *ReportsReply) count(err error, o *outcome) {
	switch {
	case err == nil:
		r.Applied++
		o.applied++
		return
	case errors.Is(err, pathcomp.ErrStale):
		r.Stale++
		o.stale++
	default:
		r.Rejected++
		o.rejected++
	}
	if len(r.Errors) < maxReplyErrors {
		r.Errors = append(r.Errors, err.Error())
	}
}

// handleReports takes a prober's reports: a JSON array of
// pathcomp.Measurement. The whole body is refused (400, naming the report
// and the field) when one report is invalid or stamped too far in the
// future; otherwise each gets the next ReportID, is applied, and if applied
// is queued to every peer (under the same lock, so the peers receive this
// server's reports in the order they were applied here).
func (s *Server) handleReports(w http.ResponseWriter, r *http.Request) {
	ms, ok := decodeList[pathcomp.Measurement](w, r, s.cfg.MaxBody, s.cfg.MaxReports)
	if !ok {
		s.countInvalid(0)
		return
	}
	now := s.cfg.Now()
	skew := s.store.Config().MaxSkew
	for i, m := range ms {
		err := m.Validate()
		if err == nil && m.At.After(now.Add(skew)) {
			err = fmt.Errorf("measurement %s→%s: at: %v is more than %v after this server's clock (%v)", m.From, m.To, m.At, skew, now.UTC())
		}
		if err != nil {
			s.countInvalid(0)
			httpError(w, http.StatusBadRequest, "report %d: %v (nothing applied)", i, err)
			return
		}
	}
	writeJSON(w, s.ingestLocal(ms, now))
}

// ingestLocal applies validated prober reports and queues the applied
// ones to every peer. Each applied one takes the next sequence of this server's own
// source, so it needs no Dedup: the ID is new by construction, and this
// server never takes it back (handleForward refuses its region's
// sources). Keeping the own source out of the seen-set also means peers
// filling it (ErrTooManySources) cannot stop local reports.
func (s *Server) ingestLocal(ms []pathcomp.Measurement, now time.Time) ReportsReply {
	var rep ReportsReply
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		err := s.store.Ingest(m, now)
		rep.count(err, &s.cnt.local)
		if err != nil {
			continue // dropped here: the other regions would drop it too
		}
		// Only forwarded reports take a sequence, so a peer sees gaps
		// only where its queue dropped reports (the receivers' window
		// takes up to pathcomp.SeqAhead at once).
		s.seq++
		id := pathcomp.ReportID{Source: s.source, Seq: s.seq}
		if s.cfg.Hops != nil {
			s.dirty[[2]string{m.From, m.To}] = struct{}{}
		}
		for _, p := range s.peers {
			p.push(fwdReport{ID: id, M: m})
		}
	}
	return rep
}

// fwdReport is one report on the wire between regions.
type fwdReport struct {
	ID pathcomp.ReportID    `json:"id"`
	M  pathcomp.Measurement `json:"m"`
}

// handleForward takes another region's reports: a JSON array of
// {id, m}, from the region its token names (from). Invalid: the whole
// body is refused (400). A report whose source is not of region from is
// rejected: a region forwards only the reports its own servers took from
// probers (ingestLocal; a forward is never forwarded again), so any other
// source is forged, and taking it would let one region raise another's
// sequences or fill its source table. Each other report not seen before
// (Dedup) is applied and never forwarded again.
func (s *Server) handleForward(w http.ResponseWriter, r *http.Request, from string) {
	fs, ok := decodeList[fwdReport](w, r, s.cfg.MaxBody, s.cfg.MaxReports)
	if !ok {
		s.countInvalid(1)
		return
	}
	for i, f := range fs {
		err := pathcomp.ValidateSource(f.ID.Source)
		if err == nil && f.ID.Seq == 0 {
			err = fmt.Errorf("report %s: seq: 0 (sequences start at 1)", f.ID.Source)
		}
		if err == nil {
			err = f.M.Validate()
		}
		if err != nil {
			s.countInvalid(1)
			httpError(w, http.StatusBadRequest, "report %d: %v (nothing applied)", i, err)
			return
		}
	}
	now := s.cfg.Now()
	var rep ReportsReply
	s.mu.Lock()
	own := s.cfg.Region + "/"
	for _, f := range fs {
		switch {
		case strings.HasPrefix(f.ID.Source, own):
			// Taken from a prober in this region and forwarded back: a
			// --peer URL points at this region. Applying it here would
			// apply it twice in the region (the server that took it
			// already did).
			rep.count(fmt.Errorf("report %s/%d: source: from this region (%s): a --peer URL of the sender points back here", f.ID.Source, f.ID.Seq, s.cfg.Region), &s.cnt.fwd)
			continue
		case !strings.HasPrefix(f.ID.Source, from+"/"):
			s.cnt.wrongRegion++
			rep.count(fmt.Errorf("report %s/%d: source: not of region %s, whose peer token sent it (a region forwards its own sources only)", f.ID.Source, f.ID.Seq, from), &s.cnt.fwd)
			continue
		}
		apply, _, err := s.dedup.Decide(f.ID, false)
		if err != nil {
			rep.count(err, &s.cnt.fwd)
			continue
		}
		s.sources[f.ID.Source] = now
		if !apply {
			rep.Duplicate++
			s.cnt.fwd.duplicate++
			continue
		}
		err = s.store.Ingest(f.M, now)
		rep.count(err, &s.cnt.fwd)
		if err == nil && s.cfg.Hops != nil {
			s.dirty[[2]string{f.M.From, f.M.To}] = struct{}{}
		}
	}
	s.mu.Unlock()
	writeJSON(w, rep)
}

func (s *Server) countInvalid(i int) {
	s.mu.Lock()
	s.cnt.invalid[i]++
	s.mu.Unlock()
}

// PathReply is one chosen path.
type PathReply struct {
	Edge   string    `json:"edge"`
	Origin string    `json:"origin"`
	Path   []string  `json:"path"`    // edge, relays..., origin
	Relays int       `json:"relays"`  // 0: direct
	CostMS float64   `json:"cost_ms"` // as of the last recompute
	Since  time.Time `json:"since"`   // when this path was chosen
}

// PathsReply is the bulk answer: every origin's path from one edge.
type PathsReply struct {
	Edge  string      `json:"edge"`
	Paths []PathReply `json:"paths"`
}

// handlePaths answers GET /v1/paths?edge=E&origin=O (one path) and
// ?edge=E (every origin's). An edge asked for the first time is computed
// at once on the last snapshot and then at every recompute.
func (s *Server) handlePaths(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	edge, origin := q.Get("edge"), q.Get("origin")
	if err := pathcomp.ValidateName(edge); err != nil {
		httpError(w, http.StatusBadRequest, "edge: %v", err)
		return
	}
	if origin != "" {
		if err := pathcomp.ValidateName(origin); err != nil {
			httpError(w, http.StatusBadRequest, "origin: %v", err)
			return
		}
	}
	if !s.touchEdge(edge) {
		httpError(w, http.StatusNotFound, "edge %s: unknown here, or over the bound of %d edges", edge, s.cfg.MaxEdges)
		return
	}
	s.selMu.RLock()
	defer s.selMu.RUnlock()
	if origin != "" {
		p, since, ok := s.sel.PathSince(edge, origin)
		if !ok || p.N == 0 || math.IsInf(p.Cost, 0) {
			httpError(w, http.StatusNotFound, "edge %s, origin %s: no live path known", edge, origin)
			return
		}
		writeJSON(w, pathReply(edge, origin, p, since))
		return
	}
	out := PathsReply{Edge: edge, Paths: []PathReply{}}
	s.sel.EachPath(edge, func(o string, p pathcomp.Path, since time.Time) {
		if p.N > 0 && !math.IsInf(p.Cost, 0) {
			out.Paths = append(out.Paths, pathReply(edge, o, p, since))
		}
	})
	sort.Slice(out.Paths, func(i, j int) bool { return out.Paths[i].Origin < out.Paths[j].Origin })
	writeJSON(w, out)
}

func pathReply(edge, origin string, p pathcomp.Path, since time.Time) PathReply {
	return PathReply{Edge: edge, Origin: origin, Path: p.Nodes(), Relays: p.Relays(), CostMS: p.Cost, Since: since.UTC()}
}

// touchEdge records a query for edge and, the first time, computes its
// paths on the last Graph. It returns false when the edge is not a node
// of that Graph (unknown, or an origin) or the edge bound is reached.
func (s *Server) touchEdge(edge string) bool {
	now := s.cfg.Now().UnixNano()
	s.selMu.RLock()
	t := s.edges[edge]
	s.selMu.RUnlock()
	if t != nil {
		t.Store(now)
		return true
	}
	s.selMu.Lock()
	defer s.selMu.Unlock()
	if t := s.edges[edge]; t != nil {
		t.Store(now)
		return true
	}
	if s.graph == nil || !s.graph.Has(edge) || len(s.edges) >= s.cfg.MaxEdges {
		return false
	}
	if _, err := s.sel.Update(s.graph, edge); err != nil {
		return false // an origin
	}
	t = new(atomic.Int64)
	t.Store(now)
	s.edges[edge] = t
	return true
}

// handleHealth is the announcer's heartbeat check: 200 once the hop store
// was loaded (or tried) and while the store answers; 503 otherwise, so a
// server that cannot keep its cluster's figures stops taking traffic.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	loaded := s.loaded
	s.mu.Unlock()
	if !loaded {
		httpError(w, http.StatusServiceUnavailable, "loading the hop store")
		return
	}
	if s.cfg.Hops != nil { // without one there is nothing to be unreachable
		if err := s.storeHealth(); err != nil {
			httpError(w, http.StatusServiceUnavailable, "hop store: %v", err)
			return
		}
	}
	writeJSON(w, map[string]string{"status": "ok", "source": s.source})
}

// healthTTL is how long /healthz reuses a hop-store Ping's result.
const healthTTL = 500 * time.Millisecond

// storeHealth pings the hop store (1 s bound) at most once per healthTTL,
// one Ping at a time, and answers every /healthz in between with that
// result. /healthz is open: a Ping per request would let anyone who
// reaches the port fill the Redis client's small pool (4 connections),
// stall the flushes and syncs, and time out /healthz itself so the
// announcer withdraws the server.
func (s *Server) storeHealth() error {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < healthTTL {
		return h.err
	}
	// Not the request's context: its cancellation is not the store's state.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.err, h.at = s.cfg.Hops.Ping(ctx), time.Now()
	return h.err
}

package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/store"
)

// DefaultAuditKeep is how many audit records the controller keeps (the
// newest; --audit-keep).
const DefaultAuditKeep = 10000

// maxAuditObjects bounds the objects one record names (a million-EIP
// apply names the first ones and counts the others).
const maxAuditObjects = 100

// Actor is who makes a change through the API, and how: the audit
// record's who and what.
type Actor struct {
	Name, Role   string
	Method, Path string
}

type actorKey struct{}

// WithActor returns ctx carrying a, for the writes made with it: they are
// recorded in the audit log. Writes without an actor (the controller's
// own health verdicts) are not.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actorOf(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// auditOp is the audit record of a change planned at revision base, made
// of ops (the primary ones: the objects the change puts and deletes).
func auditOp(a Actor, base int64, ops []store.Op) store.Op {
	rec := api.AuditRecord{Who: a.Name, Role: a.Role, Method: a.Method, Path: a.Path, Time: time.Now().UTC()}
	for _, o := range ops {
		if o.Scope != "" || o.Raw != "" {
			continue
		}
		if len(rec.Objects) == maxAuditObjects {
			rec.Omitted++
			continue
		}
		act := "put"
		if o.Value == nil {
			act = "delete"
		}
		rec.Objects = append(rec.Objects, api.AuditObject{Kind: o.Kind, Key: o.Key, Action: act})
	}
	b, _ := json.Marshal(rec) // strings, ints and a time: cannot fail
	return store.Op{Raw: store.AuditKey(base), Value: b}
}

// trimAudit keeps the newest Config.AuditKeep records: the trimmer runs
// it after every auditTrimEvery audited commits, outside the write lock
// (its three etcd round trips delay no write), so the log holds
// AuditKeep+auditTrimEvery-1 records once the trimmer is done, and
// briefly more by the writes committed while a trim runs.
func (s *Core) trimAudit(ctx context.Context) {
	if s.store == nil {
		return
	}
	if s.beforeTrim != nil {
		s.beforeTrim()
	}
	// The loop's context: a shutdown does not wait out a hung store.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := s.store.TrimAudit(ctx, s.cfg.AuditKeep); err != nil {
		s.log.Warn("audit log: trimming failed", "err", err)
	} else if n > 0 {
		s.log.Debug("audit log trimmed", "deleted", n)
	}
}

// wakeTrimmer asks the trimmer for a trim (several asks before it runs
// make one trim). A Core without its loops trims at once.
func (s *Core) wakeTrimmer() {
	n := s.trimAsked.Add(1)
	if s.trimWake == nil {
		s.trimAudit(context.Background())
		s.trimDone.Store(n)
		return
	}
	select {
	case s.trimWake <- struct{}{}:
	default: // a wake-up is pending: its trim covers this one
	}
}

// trimLoop trims the audit log when woken, until ctx ends.
func (s *Core) trimLoop(ctx context.Context) {
	defer close(s.trimmerDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.trimWake:
		}
		n := s.trimAsked.Load()
		s.trimAudit(ctx)
		s.trimDone.Store(n)
	}
}

// auditTrimEvery is how many audited commits pass between trims.
func (s *Core) auditTrimEvery() int64 { return int64(max(1, min(64, s.cfg.AuditKeep/16))) }

// maxAuditPage bounds GET /v1/audit's limit.
const maxAuditPage = 1000

// audit: GET /v1/audit?limit=N&continue=TOKEN, the newest records first.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditPage {
			return badRequest("query parameter limit=%q: want a count from 1 to %d", v, maxAuditPage)
		}
		limit = n
	}
	before := ""
	if v := q.Get("continue"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("query parameter continue=%q: want the continue value of the previous page", v)
		}
		before = store.AuditKey(n)
	}
	recs, next, err := s.store.AuditPage(r.Context(), limit, before)
	if err != nil {
		return &errStore{err}
	}
	out := api.AuditPage{Items: []api.AuditRecord{}}
	for _, rec := range recs {
		var a api.AuditRecord
		if err := json.Unmarshal(rec.Value, &a); err != nil {
			a.Who = "(unreadable record)"
		}
		a.Revision = rec.Rev
		out.Items = append(out.Items, a)
	}
	if next != "" {
		n, _ := strconv.ParseInt(next[len(store.AuditRoot):], 10, 64)
		out.Continue = strconv.FormatInt(n, 10)
	}
	writeJSON(w, http.StatusOK, s.Core.Revision(), out)
	return nil
}

package controller

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/azgate/azgate/internal/model"
)

// Optimistic concurrency (docs/api.md, "Concurrent edits"): every object's
// ETag is its mod revision in the store, as a strong entity tag ("1234").
// A PUT or DELETE (or a narrow edit: bind, guests, backends) with If-Match
// is applied only if the object is still at one of the listed revisions;
// otherwise it answers 412 with the current revision, and nothing changes.

// etag formats a revision as a strong entity tag.
func etag(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }

// ifMatch is a request's If-Match header: any (*), or a list of revisions.
type ifMatch struct {
	raw  string // as sent ("": no header)
	any  bool
	revs []int64
}

func (m ifMatch) none() bool { return m.raw == "" }

// matches says whether an object at revision cur (0: absent) satisfies m.
func (m ifMatch) matches(cur int64) bool {
	if m.none() {
		return true
	}
	if cur == 0 {
		return false // no current representation: RFC 9110, 13.1.1
	}
	if m.any {
		return true
	}
	for _, r := range m.revs {
		if r == cur {
			return true
		}
	}
	return false
}

// parseIfMatch reads If-Match: "*" or comma-separated strong entity tags
// holding revisions. A weak tag (W/"5") never matches (If-Match compares
// strongly) and is refused, as is anything that is not a revision, so a
// typo is not taken for a stale revision.
func parseIfMatch(r *http.Request) (ifMatch, error) {
	vals := r.Header.Values("If-Match")
	raw := strings.TrimSpace(strings.Join(vals, ", "))
	if len(vals) == 0 {
		return ifMatch{}, nil
	}
	m := ifMatch{raw: raw}
	if raw == "*" {
		m.any = true
		return m, nil
	}
	for _, t := range strings.Split(raw, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		q, ok := strings.CutPrefix(t, `"`)
		q, ok2 := strings.CutSuffix(q, `"`)
		rev, err := strconv.ParseInt(q, 10, 64)
		if !ok || !ok2 || err != nil || rev <= 0 {
			return ifMatch{}, badRequest(`If-Match: %q is not "*" nor a list of revisions as the ETag header gives them ("1234")`, raw)
		}
		m.revs = append(m.revs, rev)
	}
	if len(m.revs) == 0 {
		return ifMatch{}, badRequest(`If-Match: %q is not "*" nor a list of revisions as the ETag header gives them ("1234")`, raw)
	}
	return m, nil
}

// preconditionError is a 412: the object is not at the revision the
// client read. current is its revision now (0: it does not exist).
type preconditionError struct {
	kind, key string
	current   int64
	sent      string // the If-Match header, if known
}

func (e *preconditionError) Error() string {
	what := fmt.Sprintf("%s %q", model.Singular(e.kind), e.key)
	sent := ""
	if e.sent != "" {
		sent = " (If-Match: " + e.sent + ")"
	}
	if e.current == 0 {
		return fmt.Sprintf("%s does not exist any more: it was deleted since you read it%s; nothing was written", what, sent)
	}
	return fmt.Sprintf("%s changed since you read it%s: it is now at revision %d; read it again, redo the change and send If-Match: %s; nothing was written",
		what, sent, e.current, etag(e.current))
}

// setETag sets the ETag header of an answer about one object (none for
// an unknown revision).
func setETag(w http.ResponseWriter, rev int64) {
	if rev > 0 {
		w.Header().Set("ETag", etag(rev))
	}
}

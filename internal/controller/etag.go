package controller

import (
	"net/http"
	"strconv"
	"strings"
)

// Optimistic concurrency (docs/api.md, "Concurrent edits"): every object's
// ETag is its mod revision in the store, as a strong entity tag ("1234").
// A PUT or DELETE (or a narrow edit: bind, guests, backends) with If-Match
// is applied only if the object is still at one of the listed revisions;
// otherwise it answers 412 with the current revision, and nothing changes.

// etag formats a revision as a strong entity tag.
func etag(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }

// IfMatch is a request's If-Match header: any (*), or a list of revisions.
// The zero IfMatch (no header) requires nothing; Core writes take one
// and fail with a RevisionError when the object is not at a revision it
// lists.
type IfMatch struct {
	raw  string // as sent ("": no header)
	any  bool
	revs []int64
}

func (m IfMatch) none() bool { return m.raw == "" }

// AnyRevision is If-Match: *, met by any existing object.
func AnyRevision() IfMatch { return IfMatch{raw: "*", any: true} }

// AtRevision is If-Match with the revisions given (the ETags read).
func AtRevision(revs ...int64) IfMatch {
	parts := make([]string, len(revs))
	for i, r := range revs {
		parts[i] = etag(r)
	}
	return IfMatch{raw: strings.Join(parts, ", "), revs: revs}
}

// matches says whether an object at revision cur (0: absent) satisfies m.
func (m IfMatch) matches(cur int64) bool {
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
func parseIfMatch(r *http.Request) (IfMatch, error) {
	vals := r.Header.Values("If-Match")
	raw := strings.TrimSpace(strings.Join(vals, ", "))
	if len(vals) == 0 {
		return IfMatch{}, nil
	}
	m := IfMatch{raw: raw}
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
			return IfMatch{}, badRequest(`If-Match: %q is not "*" nor a list of revisions as the ETag header gives them ("1234")`, raw)
		}
		m.revs = append(m.revs, rev)
	}
	if len(m.revs) == 0 {
		return IfMatch{}, badRequest(`If-Match: %q is not "*" nor a list of revisions as the ETag header gives them ("1234")`, raw)
	}
	return m, nil
}

// setETag sets the ETag header of an answer about one object (none for
// an unknown revision).
func setETag(w http.ResponseWriter, rev int64) {
	if rev > 0 {
		w.Header().Set("ETag", etag(rev))
	}
}

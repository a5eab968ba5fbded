package controller

import (
	"net/http"

	"github.com/azgate/azgate/internal/model"
)

// Export returns every object the users write (not the health verdicts)
// as one document, and the store revision it is at: the objects are
// taken from the view in one read, under its lock, so the document is
// the region at that one revision whatever writes follow (the objects
// are never changed in place: a write replaces them). Secrets are
// redacted, as in every answer.
func (c *Core) Export() (*model.Document, int64) {
	v := c.view
	var objs []model.Object
	v.mu.RLock()
	rev := v.rev
	for _, kind := range model.UserKinds {
		for _, k := range v.st.Keys(kind) {
			o, _ := v.st.Get(kind, k)
			objs = append(objs, o)
		}
	}
	v.mu.RUnlock()
	if c.afterExportRead != nil {
		c.afterExportRead()
	}
	doc := &model.Document{}
	for _, o := range objs {
		doc.Add(model.Redacted(o)) // every user kind has its list
	}
	return doc, rev
}

// export serves GET /v1/export: {"revision": N, "document": {...}}.
// Exports are served one at a time: each holds the whole region twice
// (the document and its JSON, which the encoder buffers whole: tens of
// MB for 100,000 EIPs), which --max-conns concurrent exports would
// multiply, the very cost --max-list-page bounds for lists.
func (s *Server) export(w http.ResponseWriter, r *http.Request) error {
	select {
	case s.exports <- struct{}{}:
	default:
		s.exportWaiting.Add(1)
		select {
		case s.exports <- struct{}{}:
			s.exportWaiting.Add(-1)
		case <-r.Context().Done():
			s.exportWaiting.Add(-1)
			return &httpError{status: http.StatusServiceUnavailable,
				msg: "gave up waiting for another export to finish (exports are served one at a time)"}
		}
	}
	defer func() { <-s.exports }()
	doc, rev := s.Core.Export()
	writeJSON(w, http.StatusOK, rev, struct {
		Revision int64           `json:"revision"`
		Document *model.Document `json:"document"`
	}{rev, doc})
	return nil
}

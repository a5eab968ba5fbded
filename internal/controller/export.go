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
func (s *Server) export(w http.ResponseWriter, r *http.Request) error {
	doc, rev := s.Core.Export()
	writeJSON(w, http.StatusOK, rev, struct {
		Revision int64           `json:"revision"`
		Document *model.Document `json:"document"`
	}{rev, doc})
	return nil
}

package controller

import (
	"context"
	"net/http"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// The HTTP side of the backend edits and the service status (Core).

func (s *Server) addBackend(w http.ResponseWriter, r *http.Request) error {
	var b model.Backend
	if err := s.decodeBody(w, r, `a JSON backend {"host": "...", "guest": "..."} or {"address": "..."}`, "backend", &b); err != nil {
		return err
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.AddBackend(ctx, key, m, r.PathValue("pool"), b)
	})
}

func (s *Server) removeBackend(w http.ResponseWriter, r *http.Request) error {
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.RemoveBackend(ctx, key, m, r.PathValue("pool"), r.PathValue("backend"))
	})
}

func (s *Server) setWeight(w http.ResponseWriter, r *http.Request) error {
	var wt api.Weight
	if err := s.decodeBody(w, r, `a JSON weight {"weight": N} (0 drains the backend)`, "weight", &wt); err != nil {
		return err
	}
	if wt.Weight == nil {
		return &httpError{status: http.StatusBadRequest, msg: `weight in the request body: weight: required ({"weight": N}, 0 drains the backend)`,
			fields: []model.FieldError{{Field: "weight", Msg: "required"}}}
	}
	return s.edit(w, r, func(ctx context.Context, key string, m IfMatch) (Written, error) {
		return s.Core.SetWeight(ctx, key, m, r.PathValue("pool"), r.PathValue("backend"), *wt.Weight)
	})
}

// serviceStatus answers GET /v1/services/{name}/status (Core.ServiceStatus).
func (s *Server) serviceStatus(w http.ResponseWriter, r *http.Request) error {
	out, err := s.Core.ServiceStatus(r.Context(), r.PathValue("key"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out.Revision, out)
	return nil
}

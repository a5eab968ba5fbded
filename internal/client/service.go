package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// Services lists the services by name.
func (c *Client) Services(ctx context.Context) ([]model.Service, error) {
	var l []model.Service
	_, err := c.list(ctx, model.KindService, &l)
	return l, err
}

// GetService returns one service (as stored: with its defaults filled in).
func (c *Client) GetService(ctx context.Context, name string) (*model.Service, error) {
	var v model.Service
	if _, err := c.do(ctx, http.MethodGet, objectPath(model.KindService, name), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// CreateService stores a new service; it fails with 409 if the name is taken.
func (c *Client) CreateService(ctx context.Context, v *model.Service) (Result, error) {
	return c.Create(ctx, v)
}

// PutService creates or replaces a service.
func (c *Client) PutService(ctx context.Context, v *model.Service) (Result, error) {
	return c.Put(ctx, v)
}

// DeleteService removes a service (and its Health object).
func (c *Client) DeleteService(ctx context.Context, name string) (Result, error) {
	return c.Delete(ctx, model.KindService, name)
}

func backendsPath(svc, pool string) string {
	return objectPath(model.KindService, svc) + "/pools/" + url.PathEscape(pool) + "/backends"
}

// AddBackend adds a backend to a pool of a service; it fails with 409 if
// the pool has a backend with the same key.
func (c *Client) AddBackend(ctx context.Context, svc, pool string, b model.Backend) (Result, error) {
	return c.write(ctx, http.MethodPost, backendsPath(svc, pool), b)
}

// RemoveBackend removes the backend with a key (model.Backend.Key) from a
// pool of a service.
func (c *Client) RemoveBackend(ctx context.Context, svc, pool, key string) (Result, error) {
	return c.write(ctx, http.MethodDelete, backendsPath(svc, pool)+"/"+url.PathEscape(key), nil)
}

// SetBackendWeight sets a backend's weight; 0 drains it (it keeps its
// established connections and gets no new ones).
func (c *Client) SetBackendWeight(ctx context.Context, svc, pool, key string, weight uint32) (Result, error) {
	return c.write(ctx, http.MethodPost, backendsPath(svc, pool)+"/"+url.PathEscape(key)+"/weight", api.Weight{Weight: &weight})
}

// ServiceStatus is a service with its health verdict, the edges' reports
// and tables.
type ServiceStatus = api.ServiceStatus

// ServiceStatus returns a service's status.
func (c *Client) ServiceStatus(ctx context.Context, name string) (*ServiceStatus, error) {
	var st ServiceStatus
	if _, err := c.do(ctx, http.MethodGet, objectPath(model.KindService, name)+"/status", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GetHealth returns a service's Health object: which backends the majority
// of the edges finds down. A service with nothing down has none: GetHealth
// then returns an empty Health and no error.
func (c *Client) GetHealth(ctx context.Context, service string) (*model.Health, error) {
	var h model.Health
	if _, err := c.do(ctx, http.MethodGet, objectPath(model.KindHealth, service), nil, &h); err != nil {
		if IsNotFound(err) {
			return &model.Health{Service: service}, nil
		}
		return nil, err
	}
	return &h, nil
}

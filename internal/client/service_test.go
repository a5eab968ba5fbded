package client

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/model"
)

// TestServiceHelpers runs the typed service helpers against a controller,
// over the unix socket (backend keys with '/' must survive the path).
func TestServiceHelpers(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: dir, Listen: "", ListenUnix: dir + "/api.sock", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := New("unix://"+dir+"/api.sock", s.Token())
	a := netip.MustParseAddr
	doc := &model.Document{
		AZs:      []model.AZ{{Name: "az1"}},
		Hosts:    []model.Host{{Name: "h1", AZ: "az1", Underlay: a("198.18.1.1"), Guests: []model.Guest{{Name: "g1", Address: a("198.19.1.1"), VSID: 5001}, {Name: "g2", Address: a("198.19.1.2"), VSID: 5001}}}},
		EdgeSets: []model.EdgeSet{{Name: "pop-a", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}},
	}
	if _, err := c.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	v := &model.Service{Name: "web", VIP: a("198.51.100.20"), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "h1", Guest: "g1", Port: 8080}}}}}
	if res, err := c.CreateService(ctx, v); err != nil || res.Action != "created" {
		t.Fatalf("create: %+v %v", res, err)
	}
	if _, err := c.CreateService(ctx, v); err == nil || err.(*APIError).Status != 409 {
		t.Errorf("create twice: %v", err)
	}
	v.Description = "front"
	if res, err := c.PutService(ctx, v); err != nil || res.Action != "updated" {
		t.Errorf("put: %+v %v", res, err)
	}
	if _, err := c.AddBackend(ctx, "web", "web", model.Backend{Host: "h1", Guest: "g2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetBackendWeight(ctx, "web", "web", "h1/g1:8080", 0); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetService(ctx, "web")
	if err != nil || len(got.Pools[0].Backends) != 2 || got.Pools[0].Backends[0].W() != 0 || got.Description != "front" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := c.RemoveBackend(ctx, "web", "web", "h1/g1:8080"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Services(ctx); err != nil || len(l) != 1 || len(l[0].Pools[0].Backends) != 1 {
		t.Errorf("list: %+v %v", l, err)
	}
	if objs, err := c.List(ctx, model.KindService); err != nil || len(objs) != 1 {
		t.Errorf("List(services): %v %v", objs, err)
	}
	if h, err := c.GetHealth(ctx, "web"); err != nil || h.DownCount() != 0 {
		t.Errorf("health of a service with nothing down: %+v %v", h, err)
	}
	st, err := c.ServiceStatus(ctx, "web")
	if err != nil || st.Service.Name != "web" || len(st.Pools) != 1 || st.Agree {
		t.Errorf("status: %+v %v", st, err)
	}
	if _, err := c.DeleteService(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetService(ctx, "web"); !IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}

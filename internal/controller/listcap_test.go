package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// TestListServerCap: a list without a limit, or with one above the
// server's cap, is cut at the cap with a continue token; the client's
// List follows the tokens to every object.
func TestListServerCap(t *testing.T) {
	s := startServer(t, Config{MaxListPage: 5})
	doc := &model.Document{}
	for i := range 12 {
		doc.AZs = append(doc.AZs, model.AZ{Name: fmt.Sprintf("az-%02d", i)})
	}
	if _, err := s.Core.Apply(context.Background(), doc, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "?limit=100"} {
		var l struct {
			Items    []model.AZ `json:"items"`
			Continue string     `json:"continue"`
		}
		call(t, s, "GET", "/v1/azs"+q, nil).decode(t, &l)
		if len(l.Items) != 5 || l.Continue != "az-04" {
			t.Errorf("GET /v1/azs%s: %d items, continue %q; want 5 and az-04", q, len(l.Items), l.Continue)
		}
	}
	var l api.List
	call(t, s, "GET", "/v1/azs?limit=3", nil).decode(t, &l)
	if l.Continue != "az-02" {
		t.Errorf("a limit below the cap: continue %q", l.Continue)
	}
	objs, err := newClient(s).List(context.Background(), model.KindAZ)
	if err != nil || len(objs) != 12 || objs[11].Key() != "az-11" {
		t.Fatalf("client List: %d objects, %v", len(objs), err)
	}
	azs, err := newClient(s).AZs(context.Background())
	if err != nil || len(azs) != 12 {
		t.Errorf("client AZs: %d, %v", len(azs), err)
	}
}

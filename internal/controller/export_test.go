package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestExportOneRevision: the export is the region at one revision: a
// write committed while the export builds its document (the hook) is
// not in it, and the revision it names is the one before that write;
// the next export has it. Every user kind is exported.
func TestExportOneRevision(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	before := c.Revision()
	var mid int64
	c.afterExportRead = func() {
		c.afterExportRead = nil
		w, err := c.Create(ctx, &model.AZ{Name: "az-mid"})
		if err != nil {
			t.Error(err)
		}
		mid = w.Revision
	}
	doc, rev := c.Export()
	if rev != before || mid <= before {
		t.Fatalf("export at revision %d, before %d, the write in the middle at %d", rev, before, mid)
	}
	for _, a := range doc.AZs {
		if a.Name == "az-mid" {
			t.Fatal("the export holds the AZ written while it was built")
		}
	}
	// testdata/everykind.yaml holds one object of every user kind.
	if named := doc.Named(); len(named) != len(model.UserKinds) {
		t.Errorf("export names the kinds %v, want every user kind %v", named, model.UserKinds)
	}
	doc, rev = c.Export()
	if rev != mid || len(doc.AZs) != 3 {
		t.Errorf("second export at revision %d (want %d) with %d AZs", rev, mid, len(doc.AZs))
	}
}

// TestExportHTTP: GET /v1/export answers the revision and the document.
func TestExportHTTP(t *testing.T) {
	s := startServer(t, Config{})
	if r := call(t, s, "POST", "/v1/apply", `{"azs":[{"name":"az1"}]}`); r.code != 200 {
		t.Fatalf("apply: HTTP %d %s", r.code, r.body)
	}
	r := call(t, s, "GET", "/v1/export", nil)
	var out struct {
		Revision int64           `json:"revision"`
		Document json.RawMessage `json:"document"`
	}
	if err := json.Unmarshal(r.body, &out); r.code != 200 || err != nil || out.Revision != s.Core.Revision() {
		t.Fatalf("GET /v1/export: HTTP %d %s", r.code, r.body)
	}
	doc, err := model.ParseDocument(out.Document)
	if err != nil || len(doc.AZs) != 1 {
		t.Errorf("exported document %s: %v", out.Document, err)
	}
}

// TestExportOneAtATime: exports are served one at a time (each holds the
// whole region, its document and its JSON: concurrent ones would
// multiply that by --max-conns): a second export waits while the first
// builds its document, and both answer once it is done.
func TestExportOneAtATime(t *testing.T) {
	s := startServer(t, Config{})
	var inside atomic.Int32
	entered, release := make(chan struct{}, 2), make(chan struct{})
	s.Core.afterExportRead = func() {
		inside.Add(1)
		entered <- struct{}{}
		<-release
	}
	codes := make(chan int, 2)
	get := func() {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/v1/export", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			codes <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go get()
	<-entered
	go get()
	// The second export either waits for the slot (the bound) or builds
	// its document beside the first (no bound).
	for s.exportWaiting.Load() == 0 && inside.Load() < 2 {
		runtime.Gosched()
	}
	if n := inside.Load(); n != 1 {
		t.Errorf("%d exports built their documents at once, want 1", n)
	}
	close(release)
	for range 2 {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("an export answered HTTP %d", c)
		}
	}
}

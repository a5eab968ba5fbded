package controller

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// TestInvalidStoredObjects: an object written straight into etcd that
// fails validation is left out of the controller's view (not served, not
// counted) and named in /v1/status and the status page; a valid write of the key is served.
func TestInvalidStoredObjects(t *testing.T) {
	s := startServer(t, Config{})
	ctx := context.Background()
	if _, err := newClient(s).Apply(ctx, readDoc(t)); err != nil {
		t.Fatal(err)
	}
	kv := s.Store().Client.KV
	key := store.Key(model.KindEIP, "198.51.100.99")
	if _, err := kv.Put(ctx, key, `{"address":"198.51.100.99","description":"`+strings.Repeat("x", 2000)+`"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, n := s.Store().Invalid(); return n == 1 })
	if r := call(t, s, http.MethodGet, "/v1/eips/198.51.100.99", nil); r.code != http.StatusNotFound {
		t.Errorf("GET of the invalid EIP: %d %s", r.code, r.body)
	}
	st, err := newClient(s).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Errors, "\n"), `eips "198.51.100.99" is invalid and ignored: invalid: description: longer than 1024`) {
		t.Errorf("status errors %q do not name the invalid EIP", st.Errors)
	}
	if p := s.StatusPage(ctx); !strings.Contains(strings.Join(p.Errors.Items, "\n"), `eips "198.51.100.99" is invalid and ignored`) {
		t.Errorf("status page errors %q do not name the invalid EIP", p.Errors.Items)
	}
	if _, err := kv.Put(ctx, key, `{"address":"198.51.100.99"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return call(t, s, http.MethodGet, "/v1/eips/198.51.100.99", nil).code == http.StatusOK })
	if _, n := s.Store().Invalid(); n != 0 {
		t.Errorf("%d invalid objects still listed", n)
	}
}

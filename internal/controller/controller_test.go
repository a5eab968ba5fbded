package controller

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/promcheck"
	"github.com/azgate/azgate/internal/store"
)

var quiet = slog.New(slog.DiscardHandler)

// startServer starts a controller with an embedded etcd in a fresh (or the
// given) data dir, listening on a free loopback port.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" && cfg.ListenUnix == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.Logger = quiet
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type reply struct {
	code int
	body []byte
	hdr  http.Header
}

// apiError decodes an error body, failing the test if it is not one.
func (r reply) apiError(t *testing.T) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" {
		t.Fatalf("HTTP %d: not a JSON error body: %s", r.code, r.body)
	}
	return e
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("HTTP %d: decoding %s: %v", r.code, r.body, err)
	}
}

// call sends a request with the server's token (token "" sends none).
// body may be a string or []byte (sent as is) or anything else (JSON).
func call(t *testing.T, s *Server, method, path string, body any, token ...string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Token()
	if len(token) > 0 {
		tok = token[0]
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, b, resp.Header}
}

func newClient(s *Server) *client.Client { return client.New(s.URL(), s.Token()) }

func readDoc(t testing.TB) *model.Document {
	t.Helper()
	b, err := os.ReadFile("testdata/region.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAuth(t *testing.T) {
	s := startServer(t, Config{})
	for _, tc := range []struct {
		name, method, path, token string
		want                      int
	}{
		{"no token", "GET", "/v1/azs", "", 401},
		{"wrong token", "GET", "/v1/azs", strings.Repeat("0", 64), 401},
		{"token of another length", "GET", "/v1/status", "x", 401},
		{"no token on a write", "POST", "/v1/azs", "", 401},
		{"right token", "GET", "/v1/azs", s.Token(), 200},
		{"healthz needs none", "GET", "/healthz", "", 200},
		{"metrics need none", "GET", "/metrics", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, tc.method, tc.path, nil, tc.token)
			if r.code != tc.want {
				t.Fatalf("HTTP %d, want %d: %s", r.code, tc.want, r.body)
			}
			if tc.want == 401 {
				if e := r.apiError(t); strings.Contains(e.Error, s.cfg.DataDir) {
					t.Errorf("unauthenticated error %q names the token's directory", e.Error)
				}
			}
		})
	}
}

func TestTokenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	tok, err := loadToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q: want 64 hex digits", tok)
	}
	fi, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	di, _ := os.Stat(dir)
	if di.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v, want 0700", di.Mode().Perm())
	}
	again, err := loadToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second load: %q, %v; want the same token", again, err)
	}
	os.Chmod(filepath.Join(dir, TokenFile), 0o644)
	if _, err := loadToken(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable token was accepted (err %v)", err)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // error substring, "" for none
	}{
		{"defaults", Config{}, ""},
		{"unix only", Config{ListenUnix: "/run/x.sock"}, ""},
		{"bad listen", Config{Listen: "7080"}, "listen address"},
		{"cert without key", Config{TLSCert: "c.pem"}, "both a certificate and a key"},
		{"txn ops 1", Config{TxnOps: 1}, "at least 2"},
		{"txn ops above embedded", Config{TxnOps: 10000}, "at most 4096"},
		{"etcd listen with external", Config{EtcdEndpoints: []string{"127.0.0.1:2379"}, EtcdListen: "unix:///run/azgate-etcd.sock"}, "embedded"},
		{"etcd listen on TCP", Config{EtcdListen: "http://127.0.0.1:2379"}, "no TCP"},
		{"etcd listen on a relative socket", Config{EtcdListen: "unix://etcd.sock"}, "want unix:///path"},
		{"etcd listen on a socket", Config{EtcdListen: "unix:///run/azgate-etcd.sock"}, ""},
		{"negative body limit", Config{MaxBodyBytes: -1}, "max body bytes"},
		{"negative connection cap", Config{MaxConns: -1}, "max connections"},
		{"negative write timeout", Config{WriteTimeout: -time.Second}, "write timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.cfg.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			case tc.want == "" && tc.cfg.ListenUnix == "" && c.Listen != DefaultListen:
				t.Errorf("listen %q, want %q", c.Listen, DefaultListen)
			case tc.want == "" && tc.cfg.ListenUnix != "" && c.Listen != "":
				t.Errorf("listen %q with only a unix socket asked for", c.Listen)
			}
		})
	}
}

// TestObjects runs create, get, list, replace and delete for every kind,
// then the error cases, against one controller.
func TestObjects(t *testing.T) {
	s := startServer(t, Config{})
	objs := []struct {
		kind, key string
		create    any
		update    any
	}{
		{"azs", "az1", model.AZ{Name: "az1", Region: "r1"}, model.AZ{Name: "az1", Region: "r1", Description: "first"}},
		{"hosts", "az1-h1", map[string]any{"name": "az1-h1", "az": "az1", "underlay": "198.18.1.1",
			"guests": []any{map[string]any{"name": "g1", "address": "198.19.1.1", "vsid": 5001}}},
			map[string]any{"name": "az1-h1", "az": "az1", "underlay": "198.18.1.2",
				"guests": []any{map[string]any{"name": "g1", "address": "198.19.1.1", "vsid": 5001}}}},
		{"edgesets", "pop-a", map[string]any{"name": "pop-a", "prefixes": []string{"198.51.100.0/24"},
			"edges": []any{map[string]any{"name": "edge-a1", "underlay": "198.18.0.1"}}},
			map[string]any{"name": "pop-a", "prefixes": []string{"198.51.100.0/24", "192.0.2.0/24"},
				"edges": []any{map[string]any{"name": "edge-a1", "underlay": "198.18.0.1"}}}},
		{"eips", "198.51.100.7", map[string]any{"address": "198.51.100.7"},
			map[string]any{"address": "198.51.100.7", "description": "web", "binding": map[string]any{"host": "az1-h1", "guest": "g1"}}},
	}
	var lastRev int64
	for _, o := range objs {
		t.Run("create "+o.kind, func(t *testing.T) {
			r := call(t, s, "POST", "/v1/"+o.kind, o.create)
			if r.code != 201 {
				t.Fatalf("HTTP %d: %s", r.code, r.body)
			}
			var w api.Write
			r.decode(t, &w)
			if w.Action != api.Created || w.Revision <= lastRev {
				t.Errorf("answer %+v, want created after revision %d", w, lastRev)
			}
			lastRev = w.Revision
			if r.hdr.Get(api.RevisionHeader) != fmt.Sprint(w.Revision) {
				t.Errorf("revision header %q, body %d", r.hdr.Get(api.RevisionHeader), w.Revision)
			}
			if r := call(t, s, "POST", "/v1/"+o.kind, o.create); r.code != 409 {
				t.Errorf("second create: HTTP %d, want 409: %s", r.code, r.body)
			} else if e := r.apiError(t); !strings.Contains(e.Error, o.key) || !strings.Contains(e.Error, "already exists") {
				t.Errorf("conflict error %q does not name %s", e.Error, o.key)
			}
			g := call(t, s, "GET", "/v1/"+o.kind+"/"+o.key, nil)
			if g.code != 200 {
				t.Fatalf("get: HTTP %d: %s", g.code, g.body)
			}
			got, err := model.Decode(o.kind, g.body)
			if err != nil || got.Key() != o.key {
				t.Fatalf("get: %v, key %v", err, got)
			}
		})
	}
	for _, o := range objs {
		t.Run("replace "+o.kind, func(t *testing.T) {
			r := call(t, s, "PUT", "/v1/"+o.kind+"/"+o.key, o.update)
			var w api.Write
			r.decode(t, &w)
			if r.code != 200 || w.Action != api.Updated {
				t.Fatalf("HTTP %d: %s", r.code, r.body)
			}
			again := call(t, s, "PUT", "/v1/"+o.kind+"/"+o.key, o.update)
			var w2 api.Write
			again.decode(t, &w2)
			if w2.Action != api.Unchanged || w2.Revision != w.Revision {
				t.Errorf("same object again: %+v, want unchanged at %d", w2, w.Revision)
			}
		})
	}
	t.Run("put creates", func(t *testing.T) {
		r := call(t, s, "PUT", "/v1/azs/az2", model.AZ{Name: "az2"})
		if r.code != 201 {
			t.Fatalf("HTTP %d: %s", r.code, r.body)
		}
	})
	t.Run("list ordered", func(t *testing.T) {
		for _, a := range []string{"198.51.100.10", "198.51.100.9", "192.0.2.1"} {
			if r := call(t, s, "POST", "/v1/eips", map[string]string{"address": a}); r.code != 201 {
				t.Fatalf("HTTP %d: %s", r.code, r.body)
			}
		}
		eips, err := newClient(s).EIPs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range eips {
			got = append(got, e.Address.String())
		}
		if want := "192.0.2.1 198.51.100.7 198.51.100.9 198.51.100.10"; strings.Join(got, " ") != want {
			t.Errorf("EIPs in order %v, want %s", got, want)
		}
		azs, err := newClient(s).List(context.Background(), "azs")
		if err != nil || len(azs) != 2 || azs[0].Key() != "az1" || azs[1].Key() != "az2" {
			t.Errorf("AZs %v, %v", azs, err)
		}
	})

	for _, tc := range []struct {
		name, method, path string
		body               any
		code               int
		field              string // a field the error must name
		msg                string // and a message substring
	}{
		{"invalid name", "POST", "/v1/azs", map[string]string{"name": "AZ 3"}, 422, "name", `"AZ 3"`},
		{"missing underlay", "POST", "/v1/hosts", map[string]string{"name": "h9", "az": "az1"}, 422, "underlay", "required"},
		{"unknown AZ", "POST", "/v1/hosts", map[string]string{"name": "h9", "az": "az9", "underlay": "198.18.9.9"}, 422, "az", `AZ "az9" does not exist`},
		{"duplicate underlay", "POST", "/v1/hosts", map[string]string{"name": "h9", "az": "az1", "underlay": "198.18.0.1"}, 422, "underlay", "edge pop-a/edge-a1"},
		{"bad vsid", "POST", "/v1/hosts", map[string]any{"name": "h9", "az": "az1", "underlay": "198.18.9.9",
			"guests": []any{map[string]any{"name": "g1", "address": "198.19.9.1", "vsid": 1}}}, 422, "guests[0].vsid", "RFC 7637"},
		{"EIP outside every set", "POST", "/v1/eips", map[string]string{"address": "203.0.113.5"}, 422, "address", "not inside a prefix"},
		{"unknown field", "POST", "/v1/azs", `{"name": "az3", "colour": "blue"}`, 400, "colour", "unknown field"},
		{"unknown nested field", "POST", "/v1/hosts", `{"name": "h9", "az": "az1", "underlay": "198.18.9.9", "guests": [{"name": "g1", "adress": "198.19.9.1"}]}`, 400, "guests[0].adress", "unknown field"},
		{"bad address", "POST", "/v1/eips", `{"address": "198.51.100.300"}`, 400, "address", "198.51.100.300"},
		{"wrong type", "POST", "/v1/hosts", `{"name": "h9", "az": "az1", "underlay": "198.18.9.9", "guests": [{"name": "g1", "address": "198.19.9.1", "vsid": "x"}]}`, 400, "guests[0].vsid", "string"},
		{"malformed JSON", "POST", "/v1/azs", `{"name": `, 400, "", "JSON"},
		{"empty body", "POST", "/v1/azs", ``, 400, "", "empty"},
		{"key mismatch", "PUT", "/v1/azs/az1", map[string]string{"name": "az7"}, 400, "name", `"az7" does not match "az1"`},
		{"EIP key mismatch", "PUT", "/v1/eips/198.51.100.7", map[string]string{"address": "198.51.100.8"}, 400, "address", "does not match"},
		{"get missing", "GET", "/v1/hosts/nope", nil, 404, "", `host "nope" not found`},
		{"delete missing", "DELETE", "/v1/edgesets/nope", nil, 404, "", `edge set "nope" not found`},
		{"delete AZ with hosts", "DELETE", "/v1/azs/az1", nil, 409, "", "AZ az1 still has host az1-h1"},
		{"delete host with bound EIP", "DELETE", "/v1/hosts/az1-h1", nil, 409, "", "198.51.100.7"},
		{"delete the only set of EIPs", "DELETE", "/v1/edgesets/pop-a", nil, 409, "", "only one covering"},
		{"shrink the set under EIPs", "PUT", "/v1/edgesets/pop-a", map[string]any{"name": "pop-a", "prefixes": []string{"192.0.2.0/24"},
			"edges": []any{map[string]any{"name": "edge-a1", "underlay": "198.18.0.1"}}}, 422, "prefixes", "198.51.100.7"},
		{"remove a bound guest by PUT", "PUT", "/v1/hosts/az1-h1", map[string]any{"name": "az1-h1", "az": "az1", "underlay": "198.18.1.2"}, 422, "guests", "bound to EIP 198.51.100.7"},
		{"remove a bound guest", "DELETE", "/v1/hosts/az1-h1/guests/g1", nil, 409, "", "bound to EIP 198.51.100.7"},
		{"unknown kind", "GET", "/v1/firewalls", nil, 404, "", ""},
		{"health is read only", "POST", "/v1/health", map[string]any{"service": "web"}, 405, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.view.revision()
			r := call(t, s, tc.method, tc.path, tc.body)
			if r.code != tc.code {
				t.Fatalf("HTTP %d, want %d: %s", r.code, tc.code, r.body)
			}
			if (tc.code == 404 || tc.code == 405) && tc.msg == "" {
				return // the mux's own answer
			}
			e := r.apiError(t)
			if !strings.Contains(e.Error, tc.msg) {
				t.Errorf("error %q does not say %q", e.Error, tc.msg)
			}
			if tc.field != "" {
				found := false
				for _, f := range e.Fields {
					found = found || f.Field == tc.field
				}
				if !found {
					t.Errorf("fields %+v do not name %q", e.Fields, tc.field)
				}
				if !strings.Contains(e.Error, tc.field) {
					t.Errorf("error %q does not name field %q", e.Error, tc.field)
				}
			}
			if s.view.revision() != before {
				t.Errorf("a failed request moved the revision from %d to %d", before, s.view.revision())
			}
		})
	}

	t.Run("delete", func(t *testing.T) {
		c := newClient(s)
		ctx := context.Background()
		for _, k := range []struct{ kind, key string }{{"eips", "198.51.100.7"}, {"hosts", "az1-h1"}, {"azs", "az1"}} {
			res, err := c.Delete(ctx, k.kind, k.key)
			if err != nil || res.Action != api.Deleted {
				t.Fatalf("delete %s/%s: %+v, %v", k.kind, k.key, res, err)
			}
			if _, err := c.Get(ctx, k.kind, k.key); !client.IsNotFound(err) {
				t.Errorf("after delete: %v, want not found", err)
			}
		}
		st, _, err := s.Store().Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Hosts["az1-h1"]; ok {
			t.Error("deleted host still in the store")
		}
	})
}

func TestBindUnbind(t *testing.T) {
	s := startServer(t, Config{})
	c := newClient(s)
	ctx := context.Background()
	if _, err := c.Apply(ctx, readDoc(t)); err != nil {
		t.Fatal(err)
	}
	res, err := c.BindEIP(ctx, "198.51.100.8", "az2-h1", "g1")
	if err == nil {
		t.Fatalf("bound a second EIP to az2-h1/g1: %+v", res)
	}
	if ae, ok := err.(*client.APIError); !ok || ae.Status != 422 || !strings.Contains(err.Error(), "binding.guest") || !strings.Contains(err.Error(), "198.51.100.7") {
		t.Errorf("double binding: %v", err)
	}
	if _, err := c.BindEIP(ctx, "198.51.100.8", "az9-h1", "g1"); err == nil || !strings.Contains(err.Error(), `binding.host: host "az9-h1" does not exist`) {
		t.Errorf("binding to a missing host: %v", err)
	}
	if _, err := c.BindEIP(ctx, "198.51.100.8", "az2-h1", "g7"); err == nil || !strings.Contains(err.Error(), `binding.guest: host "az2-h1" has no guest "g7"`) {
		t.Errorf("binding to a missing guest: %v", err)
	}
	if _, err := c.BindEIP(ctx, "198.51.100.99", "az2-h1", "g1"); !client.IsNotFound(err) {
		t.Errorf("binding a missing EIP: %v", err)
	}
	if r := call(t, s, "POST", "/v1/eips/198.51.100.8/bind", `{"host": "az1-h1", "gest": "g1"}`); r.code != 400 || !strings.Contains(string(r.body), "gest") {
		t.Errorf("misspelt bind body: HTTP %d %s", r.code, r.body)
	}

	// Drift: move 198.51.100.7 from az2-h1/g1 to az1-h1/g1.
	res, err = c.BindEIP(ctx, "198.51.100.7", "az1-h1", "g1")
	if err != nil || res.Action != api.Updated {
		t.Fatalf("moving an EIP: %+v, %v", res, err)
	}
	e, err := c.GetEIP(ctx, "198.51.100.7")
	if err != nil || e.Binding == nil || *e.Binding != (model.Binding{Host: "az1-h1", Guest: "g1"}) {
		t.Fatalf("after the move: %+v, %v", e, err)
	}
	// az2-h1/g1 is free now.
	if _, err := c.BindEIP(ctx, "198.51.100.8", "az2-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnbindEIP(ctx, "198.51.100.8"); err != nil {
		t.Fatal(err)
	}
	res, err = c.UnbindEIP(ctx, "198.51.100.8")
	if err != nil || res.Action != api.Unchanged {
		t.Errorf("unbinding twice: %+v, %v", res, err)
	}
	if e, _ := c.GetEIP(ctx, "198.51.100.8"); e.Binding != nil {
		t.Errorf("still bound: %+v", e.Binding)
	}

	// Guests.
	if _, err := c.AddGuest(ctx, "az2-h2", model.Guest{Name: "g1", Address: mustAddr("198.19.2.9"), VSID: 5002}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddGuest(ctx, "az2-h2", model.Guest{Name: "g1", Address: mustAddr("198.19.2.8"), VSID: 5002}); err == nil || err.(*client.APIError).Status != 409 {
		t.Errorf("adding a guest twice: %v", err)
	}
	if _, err := c.RemoveGuest(ctx, "az2-h2", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveGuest(ctx, "az2-h2", "g1"); !client.IsNotFound(err) {
		t.Errorf("removing a missing guest: %v", err)
	}
}

func TestApply(t *testing.T) {
	s := startServer(t, Config{})
	c := newClient(s)
	ctx := context.Background()
	doc := readDoc(t)
	n := len(doc.Objects())
	res, err := c.Apply(ctx, doc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != n || len(res.Objects) != n || !reflect.DeepEqual(res.Objects[0], api.AppliedObject{Kind: "azs", Key: "az1", Action: "created"}) {
		t.Fatalf("first apply: %+v", res)
	}

	t.Run("idempotent", func(t *testing.T) {
		again, err := c.Apply(ctx, readDoc(t))
		if err != nil {
			t.Fatal(err)
		}
		if again.Unchanged != n || again.Revision != res.Revision {
			t.Errorf("second apply: %d unchanged of %d, revision %d -> %d", again.Unchanged, n, res.Revision, again.Revision)
		}
	})

	t.Run("update", func(t *testing.T) {
		d := readDoc(t)
		d.EIPs[1].Description = "changed"
		r, err := c.Apply(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if r.Updated != 1 || r.Unchanged != n-1 || r.Revision <= res.Revision {
			t.Errorf("apply with one change: %+v", r)
		}
	})

	t.Run("one bad object writes nothing", func(t *testing.T) {
		before, beforeRev, err := s.Store().Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := readDoc(t)
		d.AZs = append(d.AZs, model.AZ{Name: "az3"})
		d.EIPs = append(d.EIPs, model.EIP{Address: mustAddr("198.51.100.20"), Binding: &model.Binding{Host: "az3-h1", Guest: "g1"}})
		d.EIPs[0].Description = "would change"
		_, err = c.Apply(ctx, d)
		ae, ok := err.(*client.APIError)
		if !ok || ae.Status != 422 {
			t.Fatalf("apply: %v, want a 422", err)
		}
		if len(ae.Fields) != 1 || ae.Fields[0].Field != "eips[3].binding.host" || !strings.Contains(ae.Fields[0].Msg, `host "az3-h1" does not exist`) {
			t.Errorf("fields %+v", ae.Fields)
		}
		after, afterRev, err := s.Store().Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := after.AZs["az3"]; ok || len(after.AZs) != len(before.AZs) || after.EIPs["198.51.100.7"].Description != before.EIPs["198.51.100.7"].Description {
			t.Error("the store changed")
		}
		if c, _ := s.Store().CommitRevision(ctx); c > beforeRev {
			t.Errorf("commit at %d after the load at %d (load after: %d)", c, beforeRev, afterRev)
		}
		// The view was rolled back as well.
		if _, err := newClient(s).Get(ctx, "azs", "az3"); !client.IsNotFound(err) {
			t.Errorf("az3 in the controller's view: %v", err)
		}
	})

	t.Run("every error", func(t *testing.T) {
		doc := `{"hosts": [{"name": "h8", "az": "az8", "underlay": "198.18.8.8"}], "eips": [{"address": "198.51.100.30", "binding": {"host": "h8", "guest": "g1"}}, {"address": "203.0.113.1"}]}`
		r := call(t, s, "POST", "/v1/apply", doc)
		if r.code != 422 {
			t.Fatalf("HTTP %d: %s", r.code, r.body)
		}
		var got []string
		for _, f := range r.apiError(t).Fields {
			got = append(got, f.Field)
		}
		if want := "hosts[0].az eips[0].binding.host eips[1].address"; strings.Join(got, " ") != want {
			t.Errorf("fields %v, want %s", got, want)
		}
	})

	t.Run("invalid on its own", func(t *testing.T) {
		r := call(t, s, "POST", "/v1/apply", "eips:\n  - address: 198.51.100.40\n  - address: 300.1.1.1\n")
		if r.code != 400 || !strings.Contains(r.apiError(t).Error, "eips[1].address") {
			t.Errorf("HTTP %d: %s", r.code, r.body)
		}
		r = call(t, s, "POST", "/v1/apply", "eips:\n  - address: 198.51.100.40\n  - address: 198.51.100.40\n")
		if r.code != 422 || !strings.Contains(r.apiError(t).Error, "eips[1]: EIP 198.51.100.40 also appears at eips[0]") {
			t.Errorf("HTTP %d: %s", r.code, r.body)
		}
	})

	t.Run("YAML body", func(t *testing.T) {
		b, _ := os.ReadFile("testdata/region.yaml")
		req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/v1/apply", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+s.Token())
		req.Header.Set("Content-Type", "application/yaml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("HTTP %d", resp.StatusCode)
		}
	})
}

func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	s := startServer(t, Config{DataDir: dir})
	ctx := context.Background()
	res, err := newClient(s).Apply(ctx, readDoc(t))
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Token()
	s.Close()

	// The second run serves on a unix socket only.
	s2 := startServer(t, Config{DataDir: dir, ListenUnix: sock})
	if s2.Token() != tok {
		t.Error("the token changed across a restart")
	}
	if s2.Addr() != "" || s2.URL() != "unix://"+sock {
		t.Errorf("addr %q, url %q: want the socket only", s2.Addr(), s2.URL())
	}
	c := client.New(s2.URL(), tok)
	eips, err := c.EIPs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(eips) != 3 || eips[0].Binding == nil || eips[0].Binding.Host != "az2-h1" {
		t.Errorf("after restart: %+v", eips)
	}
	again, err := c.Apply(ctx, readDoc(t))
	if err != nil || again.Unchanged != len(res.Objects) || again.Revision != res.Revision {
		t.Errorf("apply after restart: %+v, %v; want all unchanged at %d", again, err, res.Revision)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, %v", fi, err)
	}
}

// TestConflictRetry has another writer commit between the controller's
// planning and its commit: the controller must undo, catch up and retry.
func TestConflictRetry(t *testing.T) {
	s := startServer(t, Config{})
	ctx := context.Background()
	az := func(name string) []store.Op {
		b, _ := store.Encode(&model.AZ{Name: name})
		return []store.Op{{Kind: model.KindAZ, Key: name, Value: b}}
	}
	s.beforeCommit = func(attempt int) {
		if attempt > 1 {
			return
		}
		rev, err := s.Store().CommitRevision(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := s.Store().Commit(ctx, rev, az("az-other")); err != nil {
			t.Error(err)
		}
	}
	r := call(t, s, "POST", "/v1/azs", model.AZ{Name: "az-mine"})
	if r.code != 201 {
		t.Fatalf("HTTP %d: %s", r.code, r.body)
	}
	azs, err := newClient(s).AZs(ctx)
	if err != nil || len(azs) != 2 {
		t.Fatalf("AZs %+v, %v: want both writers' AZs", azs, err)
	}
	m := call(t, s, "GET", "/metrics", nil)
	promcheck.Lint(t, m.body)
	if !strings.Contains(string(m.body), "azgate_controller_commit_conflicts_total 1") {
		t.Error("conflict not counted in /metrics")
	}

	// A writer that always loses gives up with a 503.
	s.beforeCommit = func(int) {
		rev, _ := s.Store().CommitRevision(ctx)
		s.Store().Commit(ctx, rev, az(fmt.Sprintf("az-x%d", rev)))
	}
	r = call(t, s, "POST", "/v1/azs", model.AZ{Name: "az-loser"})
	if r.code != 503 || !strings.Contains(r.apiError(t).Error, "conflicting") {
		t.Errorf("HTTP %d: %s", r.code, r.body)
	}
	s.beforeCommit = nil
	if _, err := newClient(s).Get(ctx, "azs", "az-loser"); !client.IsNotFound(err) {
		t.Errorf("the losing write is in the view: %v", err)
	}
}

// TestTwoControllers runs a second controller on the first one's etcd:
// each sees the other's writes through the watch.
func TestTwoControllers(t *testing.T) {
	a := startServer(t, Config{})
	b := startServer(t, Config{EtcdEndpoints: []string{"unix://" + filepath.Join(a.cfg.DataDir, "etcd.sock")}})
	ctx := context.Background()
	ca, cb := newClient(a), newClient(b)
	if _, err := ca.Apply(ctx, readDoc(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { e, err := cb.GetEIP(ctx, "198.51.100.9"); return err == nil && e.Binding != nil })
	if _, err := cb.UnbindEIP(ctx, "198.51.100.9"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { e, err := ca.GetEIP(ctx, "198.51.100.9"); return err == nil && e.Binding == nil })
	st, err := cb.Status(ctx)
	if err != nil || st.Controller.Store != "external" {
		t.Errorf("status %+v, %v", st, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 10s")
		}
	}
}

func TestStatus(t *testing.T) {
	s := startServer(t, Config{Version: "v9.9"})
	ctx := context.Background()
	ns := model.NodeStatus{Role: "edge", Name: "edge-a1", AppliedRevision: 7, Interfaces: []string{"ext0"}, Routes: 3,
		Counters: map[string]model.Count{"encap_tx": {Packets: 5}}}
	b, _ := json.Marshal(ns)
	kv := s.Store().Client.KV
	for k, v := range map[string]string{
		store.StatusRoot + "edge/edge-a1":  string(b),
		store.StatusRoot + "agent/az1-h1":  `{"name": "az1-h1", "routes": 2}`,
		store.StatusRoot + "agent/broken":  `{"name": `,
		store.StatusRoot + "edge/edge-b1":  `{"role": "edge", "name": "edge-b1"}`,
		store.StatusRoot + "nonsense-no-n": `{}`,
	} {
		if _, err := kv.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newClient(s).Apply(ctx, readDoc(t)); err != nil {
		t.Fatal(err)
	}
	st, err := newClient(s).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := st.Controller
	if c.Version != "v9.9" || c.Store != "embedded" || c.Revision == 0 || c.Objects["eips"] != 3 || c.Objects["hosts"] != 3 {
		t.Errorf("controller %+v", c)
	}
	if e := st.Nodes["edge"]; len(e) != 2 || e[0].Name != "edge-a1" || e[0].Counters["encap_tx"].Packets != 5 || e[1].Name != "edge-b1" {
		t.Errorf("edges %+v", e)
	}
	if a := st.Nodes["agent"]; len(a) != 1 || a[0].Role != "agent" || a[0].Routes != 2 {
		t.Errorf("agents %+v", a)
	}
	if len(st.Errors) != 2 {
		t.Errorf("errors %q: want the broken entry and the bad key", st.Errors)
	}
	m := string(call(t, s, "GET", "/metrics", nil).body)
	promcheck.Lint(t, []byte(m))
	for _, want := range []string{
		`azgate_controller_objects{kind="eips"} 3`,
		`azgate_controller_http_requests_total{code="200",route="GET /v1/status"} 1`,
		`azgate_controller_store_revision `,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestApply100k applies 100,000 EIPs at once and again (all unchanged).
func TestApply100k(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := startServer(t, Config{})
	ctx := context.Background()
	c := newClient(s)
	doc := bigDoc(100000)
	start := time.Now()
	res, err := c.Apply(ctx, doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("100k EIPs applied in %v", time.Since(start))
	if res.Created != len(doc.Objects()) {
		t.Fatalf("created %d of %d", res.Created, len(doc.Objects()))
	}
	start = time.Now()
	res2, err := c.Apply(ctx, doc)
	if err != nil || res2.Unchanged != len(doc.Objects()) || res2.Revision != res.Revision {
		t.Fatalf("second apply: %d unchanged, rev %d->%d, %v", res2.Unchanged, res.Revision, res2.Revision, err)
	}
	t.Logf("and again (unchanged) in %v", time.Since(start))
	if got := s.view.counts()["eips"]; got != 100000 {
		t.Errorf("view has %d EIPs", got)
	}
}

// bigDoc is one AZ, one host and one edge set covering n EIPs taken
// from 100.64.0.0/10 (RFC 6598 shared space: never routed on the Internet,
// and the documentation ranges hold only a few hundred addresses).
func bigDoc(n int) *model.Document {
	d := &model.Document{
		AZs:      []model.AZ{{Name: "az1"}},
		Hosts:    []model.Host{{Name: "h1", AZ: "az1", Underlay: mustAddr("198.18.1.1"), Guests: []model.Guest{{Name: "g1", Address: mustAddr("198.19.1.1"), VSID: 5001}}}},
		EdgeSets: []model.EdgeSet{{Name: "big", Prefixes: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}, Edges: []model.EdgeNode{{Name: "e1", Underlay: mustAddr("198.18.0.1")}}}},
		EIPs:     make([]model.EIP, n),
	}
	base := uint32(100)<<24 | uint32(64)<<16
	for i := range d.EIPs {
		v := base + uint32(i)
		d.EIPs[i].Address = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	d.EIPs[0].Binding = &model.Binding{Host: "h1", Guest: "g1"}
	return d
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// BenchmarkApply applies b.N fresh EIPs in one document: ns/op is the
// cost of one EIP through parse, check, commit and the watch
// (go test -bench Apply -benchtime 1000000x for the million-EIP case).
func BenchmarkApply(b *testing.B) {
	s := startServer(b, Config{})
	c := newClient(s)
	doc := bigDoc(b.N)
	b.ResetTimer()
	res, err := c.Apply(context.Background(), doc)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if res.Created != len(doc.Objects()) {
		b.Fatalf("created %d of %d", res.Created, len(doc.Objects()))
	}
}

// TestTLSAndBodyLimit serves HTTPS with a self-signed certificate and
// refuses a body over the configured limit with 413.
func TestTLSAndBodyLimit(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	s := startServer(t, Config{DataDir: dir, TLSCert: certFile, TLSKey: keyFile, MaxBodyBytes: 1024})
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("URL %s", s.URL())
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	post := func(body string) (int, string) {
		req, _ := http.NewRequest("POST", s.URL()+"/v1/apply", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.Token())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("azs:\n  - name: az1\n"); code != 200 {
		t.Errorf("apply over TLS: HTTP %d %s", code, body)
	}
	if code, body := post("azs:\n" + strings.Repeat("  - name: az1\n", 100)); code != 413 || !strings.Contains(body, "larger than 1024 bytes") {
		t.Errorf("large body: HTTP %d %s", code, body)
	}
	if _, err := http.Get(s.URL() + "/healthz"); err == nil {
		t.Error("an unknown certificate was trusted")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "azgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

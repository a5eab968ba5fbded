package controller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// The Core is driven here without any HTTP server: open, then its methods
// with model values, as the handlers call them.

// openCore opens a Core on an embedded etcd in a fresh data dir and
// applies testdata/everykind.yaml.
func openCore(t *testing.T) *Core {
	t.Helper()
	cfg, err := Config{DataDir: t.TempDir(), Logger: quiet}.check()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	b, err := os.ReadFile("testdata/everykind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Apply(ctx, doc, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created == 0 || res.Revision != c.Revision() {
		t.Fatalf("applied %+v at revision %d", res, c.Revision())
	}
	return c
}

// TestCoreErrors: each refusal is its typed error, and errorAnswer gives
// it the status the API has always answered with.
func TestCoreErrors(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	_, _, eipRev, err := c.Get(model.KindEIP, "198.51.100.7")
	if err != nil {
		t.Fatal(err)
	}
	eip := func(addr string) *model.EIP { return &model.EIP{Address: mustAddr(addr)} }
	var (
		mnf *model.NotFoundError
		nf  *NotFoundError
		ce  *ConflictError
		mce *model.ConflictError
		re  *RevisionError
		ie  *InvalidError
		ke  *KeyMismatchError
	)
	for _, tc := range []struct {
		name   string
		call   func() error
		as     any // a pointer to the error type wanted
		status int
		check  func(t *testing.T)
	}{
		{"get missing", func() error { _, _, _, err := c.Get(model.KindEIP, "192.0.2.1"); return err }, &mnf, http.StatusNotFound, nil},
		{"edit missing", func() error { _, err := c.Unbind(ctx, "192.0.2.1", IfMatch{}); return err }, &mnf, http.StatusNotFound, nil},
		{"missing guest", func() error { _, err := c.RemoveGuest(ctx, "az1-h1", IfMatch{}, "g9"); return err }, &nf, http.StatusNotFound, nil},
		{"missing pool", func() error {
			_, err := c.AddBackend(ctx, "web", IfMatch{}, "api", model.Backend{Address: mustAddr("198.19.9.9")})
			return err
		}, &nf, http.StatusNotFound, nil},
		{"create existing", func() error { _, err := c.Create(ctx, eip("198.51.100.7")); return err }, &ce, http.StatusConflict, nil},
		{"guest twice", func() error { _, err := c.AddGuest(ctx, "az1-h1", IfMatch{}, model.Guest{Name: "g1"}); return err }, &ce, http.StatusConflict, nil},
		{"remove a backend's guest", func() error { _, err := c.RemoveGuest(ctx, "az1-h1", IfMatch{}, "g1"); return err }, &mce, http.StatusConflict, nil},
		{"delete a referenced AZ", func() error { _, err := c.Delete(ctx, model.KindAZ, "az1", IfMatch{}); return err }, &mce, http.StatusConflict, nil},
		{"stale revision", func() error {
			_, err := c.Replace(ctx, "198.51.100.7", AtRevision(eipRev-1), eip("198.51.100.7"))
			return err
		}, &re, http.StatusPreconditionFailed, func(t *testing.T) {
			if re.Current != eipRev {
				t.Errorf("current revision %d, want %d", re.Current, eipRev)
			}
		}},
		{"any revision of a missing object", func() error { _, err := c.Delete(ctx, model.KindEIP, "192.0.2.1", AnyRevision()); return err }, &re, http.StatusPreconditionFailed,
			func(t *testing.T) {
				if re.Current != 0 {
					t.Errorf("current revision %d, want 0", re.Current)
				}
			}},
		{"invalid object", func() error {
			_, err := c.Create(ctx, &model.Host{Name: "az1-h9", AZ: "az1"})
			return err
		}, &ie, http.StatusUnprocessableEntity, func(t *testing.T) {
			if len(ie.Fields) == 0 {
				t.Error("no fields")
			}
		}},
		{"dangling reference", func() error {
			_, err := c.Bind(ctx, "198.51.100.9", IfMatch{}, model.Binding{Host: "az9-h1", Guest: "g1"})
			return err
		}, &ie, http.StatusUnprocessableEntity, func(t *testing.T) {
			if len(ie.Fields) == 0 {
				t.Error("no fields")
			}
		}},
		{"key mismatch", func() error { _, err := c.Replace(ctx, "198.51.100.7", IfMatch{}, eip("198.51.100.8")); return err }, &ke, http.StatusBadRequest,
			func(t *testing.T) {
				if f := ke.Field(); f.Field != "address" {
					t.Errorf("field %+v, want address", f)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Revision()
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.As(err, tc.as) {
				t.Fatalf("error %T (%v), want %T", err, err, tc.as)
			}
			rec := httptest.NewRecorder()
			if got := errorAnswer(rec, err); got != tc.status || rec.Code != tc.status {
				t.Errorf("status %d (written %d), want %d", got, rec.Code, tc.status)
			}
			if tc.check != nil {
				tc.check(t)
			}
			if after := c.Revision(); after != before {
				t.Errorf("a refused change moved the revision from %d to %d", before, after)
			}
		})
	}
}

// TestCoreEdits: each narrow edit changes its part of the object and
// answers with the object and its new ETag; an edit that changes nothing
// is unchanged and keeps the ETag.
func TestCoreEdits(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	for _, e := range []struct {
		name  string
		edit  func(m IfMatch) (Written, error)
		kind  string
		key   string
		check func(o model.Object) bool
	}{
		{"bind", func(m IfMatch) (Written, error) {
			return c.Bind(ctx, "198.51.100.9", m, model.Binding{Host: "az1-h1", Guest: "g1"})
		}, model.KindEIP, "198.51.100.9", func(o model.Object) bool {
			b := o.(*model.EIP).Binding
			return b != nil && b.Host == "az1-h1" && b.Guest == "g1"
		}},
		{"limits", func(m IfMatch) (Written, error) {
			return c.SetEIPLimits(ctx, "198.51.100.7", m, model.Limits{SourcePPS: 1000, SourceBurst: 2000})
		}, model.KindEIP, "198.51.100.7", func(o model.Object) bool {
			l := o.(*model.EIP).Limits
			return l != nil && l.SourcePPS == 1000
		}},
		{"add guest", func(m IfMatch) (Written, error) {
			return c.AddGuest(ctx, "az1-h1", m, model.Guest{Name: "g2", Address: mustAddr("198.19.1.2"), VSID: 5001})
		}, model.KindHost, "az1-h1", func(o model.Object) bool { _, ok := o.(*model.Host).Guest("g2"); return ok }},
		{"add backend", func(m IfMatch) (Written, error) {
			return c.AddBackend(ctx, "web", m, "web", model.Backend{Host: "az1-h1", Guest: "g2", Port: 8080})
		}, model.KindService, "web", func(o model.Object) bool { _, ok := o.(*model.Service).Pools[0].Backend("az1-h1/g2:8080"); return ok }},
		{"drain", func(m IfMatch) (Written, error) {
			return c.SetWeight(ctx, "web", m, "web", "az1-h1/g2:8080", 0)
		}, model.KindService, "web", func(o model.Object) bool {
			i, _ := o.(*model.Service).Pools[0].Backend("az1-h1/g2:8080")
			return o.(*model.Service).Pools[0].Backends[i].W() == 0
		}},
		{"remove backend", func(m IfMatch) (Written, error) {
			return c.RemoveBackend(ctx, "web", m, "web", "az1-h1/g2:8080")
		}, model.KindService, "web", func(o model.Object) bool { _, ok := o.(*model.Service).Pools[0].Backend("az1-h1/g2:8080"); return !ok }},
		{"remove guest", func(m IfMatch) (Written, error) {
			return c.RemoveGuest(ctx, "az1-h1", m, "g2")
		}, model.KindHost, "az1-h1", func(o model.Object) bool { _, ok := o.(*model.Host).Guest("g2"); return !ok }},
		{"add package EIP", func(m IfMatch) (Written, error) {
			return c.AddPackageEIP(ctx, "shop", m, model.PackageEIP{Address: mustAddr("198.51.100.9")})
		}, model.KindBandwidthPackage, "shop", func(o model.Object) bool { return len(o.(*model.BandwidthPackage).EIPs) == 2 }},
		{"remove package EIP", func(m IfMatch) (Written, error) {
			return c.RemovePackageEIP(ctx, "shop", m, mustAddr("198.51.100.9"))
		}, model.KindBandwidthPackage, "shop", func(o model.Object) bool { return len(o.(*model.BandwidthPackage).EIPs) == 1 }},
		{"add zone record", func(m IfMatch) (Written, error) {
			return c.AddZoneRecord(ctx, "example.com", m, model.ZoneRecord{Name: "www", Type: "A", Value: "192.0.2.80"})
		}, model.KindDNSZone, "example.com", func(o model.Object) bool { return len(o.(*model.DNSZone).Records) == 2 }},
		{"add GSLB target", func(m IfMatch) (Written, error) {
			return c.AddGSLBTarget(ctx, "w.example.com", m, model.GSLBTarget{VIP: mustAddr("198.51.100.11"), Region: "eu-east", Weight: 1})
		}, model.KindGSLBRecord, "w.example.com", func(o model.Object) bool { return len(o.(*model.GSLBRecord).Targets) == 2 }},
		{"remove GSLB target", func(m IfMatch) (Written, error) {
			return c.RemoveGSLBTarget(ctx, "w.example.com", m, mustAddr("198.51.100.11"))
		}, model.KindGSLBRecord, "w.example.com", func(o model.Object) bool { return len(o.(*model.GSLBRecord).Targets) == 1 }},
		{"unbind", func(m IfMatch) (Written, error) { return c.Unbind(ctx, "198.51.100.9", m) },
			model.KindEIP, "198.51.100.9", func(o model.Object) bool { return o.(*model.EIP).Binding == nil }},
		{"clear limits", func(m IfMatch) (Written, error) { return c.ClearEIPLimits(ctx, "198.51.100.7", m) },
			model.KindEIP, "198.51.100.7", func(o model.Object) bool { return o.(*model.EIP).Limits == nil }},
	} {
		t.Run(e.name, func(t *testing.T) {
			_, _, etag, err := c.Get(e.kind, e.key)
			if err != nil {
				t.Fatal(err)
			}
			w, err := e.edit(AtRevision(etag))
			if err != nil {
				t.Fatal(err)
			}
			if w.Action != api.Updated || w.ETag != w.Revision || w.Revision != c.Revision() || !e.check(w.Object) {
				t.Fatalf("written %+v (view at %d)", w, c.Revision())
			}
			o, _, got, err := c.Get(e.kind, e.key)
			if err != nil || got != w.ETag || !e.check(o) {
				t.Fatalf("read back %+v at %d (%v), want the edit at %d", o, got, err, w.ETag)
			}
			// The same edit again on the old revision: stale.
			if _, err := e.edit(AtRevision(etag)); !errors.As(err, new(*RevisionError)) {
				t.Errorf("edit at the old revision: %v, want a RevisionError", err)
			}
		})
	}
	// An edit that changes nothing is unchanged and keeps the ETag.
	_, _, etag, _ := c.Get(model.KindEIP, "198.51.100.7")
	w, err := c.ClearEIPLimits(ctx, "198.51.100.7", IfMatch{})
	if err != nil || w.Action != api.Unchanged || w.ETag != etag {
		t.Errorf("clearing no limits: %+v (%v), want unchanged at %d", w, err, etag)
	}
}

// TestCoreApplyInvalid: a document with an invalid object is refused
// whole with an InvalidError naming the object's place; nothing is
// written.
func TestCoreApplyInvalid(t *testing.T) {
	c := openCore(t)
	before := c.Revision()
	doc := &model.Document{
		EIPs: []model.EIP{{Address: mustAddr("198.51.100.50")}, {Address: mustAddr("198.51.100.51"), Binding: &model.Binding{Host: "az9-h1", Guest: "g1"}}},
	}
	_, err := c.Apply(context.Background(), doc, ApplyOptions{})
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v, want an InvalidError", err)
	}
	found := false
	for _, f := range ie.Fields {
		found = found || strings.HasPrefix(f.Field, "eips[1]")
	}
	if !found {
		t.Errorf("fields %+v: none names eips[1]", ie.Fields)
	}
	if c.Revision() != before {
		t.Errorf("revision %d, want %d: something was written", c.Revision(), before)
	}
	if _, _, _, err := c.Get(model.KindEIP, "198.51.100.50"); err == nil {
		t.Error("the valid EIP of the refused document was stored")
	}
}

// TestCoreServiceStatus: with no edge publishing, the pool lists the
// edges of the set covering the VIP as without status and does not agree;
// a missing service is not found.
func TestCoreServiceStatus(t *testing.T) {
	c := openCore(t)
	ctx := context.Background()
	st, err := c.ServiceStatus(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != c.Revision() || st.Service == nil || st.Service.Name != "web" || st.Agree || len(st.Pools) != 1 {
		t.Fatalf("status %+v", st)
	}
	p := st.Pools[0]
	if p.Agree || len(p.Backends) != 1 || p.Backends[0].Key != "az1-h1/g1:8080" || len(p.Tables) != 1 || p.Tables[0].Edge != "edge-a1" || p.Tables[0].Missing != "no status" {
		t.Errorf("pool %+v", p)
	}
	if _, err := c.ServiceStatus(ctx, "nope"); !errors.As(err, new(*model.NotFoundError)) {
		t.Errorf("missing service: %v, want not found", err)
	}
}

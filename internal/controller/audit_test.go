package controller

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/store"
)

// TestAuditLog: a write through the API is recorded with the token's
// name, the request and the objects, in the same etcd transaction as the
// change (the record's revision is the object's mod revision); dry runs
// and refused writes are not; the log keeps the newest AuditKeep records
// and pages newest first; only an admin reads it.
func TestAuditLog(t *testing.T) {
	dir := t.TempDir()
	const ops = "operator-token-0123456789"
	tf := writeTokens(t, dir, "ops operator "+ops+"\n")
	s := startServer(t, Config{TokensFile: tf, AuditKeep: 4})
	page := func(q string) api.AuditPage {
		t.Helper()
		r := call(t, s, "GET", "/v1/audit"+q, nil)
		if r.code != 200 {
			t.Fatalf("GET /v1/audit%s: HTTP %d: %s", q, r.code, r.body)
		}
		var p api.AuditPage
		r.decode(t, &p)
		return p
	}
	if p := page(""); len(p.Items) != 0 {
		t.Fatalf("audit log before any write: %+v", p)
	}
	r := call(t, s, "POST", "/v1/azs", map[string]any{"name": "az-a"}, ops)
	if r.code != 201 {
		t.Fatalf("create: HTTP %d: %s", r.code, r.body)
	}
	rev, _ := strconv.ParseInt(r.hdr.Get(api.RevisionHeader), 10, 64)
	// Not recorded: a dry run, a write refused by its role, an invalid one.
	call(t, s, "POST", "/v1/azs?dryRun=true", map[string]any{"name": "az-dry"}, ops)
	call(t, s, "POST", "/v1/azs?force=true", map[string]any{"name": "az-forced"}, ops)
	call(t, s, "POST", "/v1/azs", map[string]any{"name": "AZ NOT VALID"}, ops)
	p := page("")
	if len(p.Items) != 1 {
		t.Fatalf("after one write: %d records: %+v", len(p.Items), p.Items)
	}
	a := p.Items[0]
	if a.Who != "ops" || a.Role != "operator" || a.Method != "POST" || a.Path != "/v1/azs" || a.Revision != rev ||
		len(a.Objects) != 1 || a.Objects[0] != (api.AuditObject{Kind: "azs", Key: "az-a", Action: "put"}) || a.Time.IsZero() {
		t.Errorf("record: %+v, want ops/operator POST /v1/azs az-a at revision %d", a, rev)
	}
	kv, err := s.Store().Client.Get(t.Context(), store.Key("azs", "az-a"))
	if err != nil || len(kv.Kvs) != 1 || kv.Kvs[0].ModRevision != a.Revision {
		t.Errorf("object's mod revision %v (err %v), record's %d: not one transaction", kv.Kvs, err, a.Revision)
	}

	// Bounded: ten more writes (by the data directory's token) leave 4.
	for i := range 10 {
		if r := call(t, s, "POST", "/v1/azs", map[string]any{"name": fmt.Sprintf("az-%d", i)}); r.code != 201 {
			t.Fatalf("create %d: HTTP %d: %s", i, r.code, r.body)
		}
	}
	if r := call(t, s, "DELETE", "/v1/azs/az-9", nil); r.code != 200 {
		t.Fatalf("delete: HTTP %d: %s", r.code, r.body)
	}
	waitTrimmed(t, s.Core)
	all := page("?limit=1000")
	if len(all.Items) != 4 || all.Continue != "" {
		t.Fatalf("after 12 writes with AuditKeep 4: %d records (continue %q)", len(all.Items), all.Continue)
	}
	if d := all.Items[0]; d.Who != DataDirTokenName || d.Method != "DELETE" || d.Objects[0].Action != "delete" || d.Objects[0].Key != "az-9" {
		t.Errorf("newest record: %+v", d)
	}
	for i := 1; i < len(all.Items); i++ {
		if all.Items[i].Revision >= all.Items[i-1].Revision {
			t.Errorf("records not newest first: %d then %d", all.Items[i-1].Revision, all.Items[i].Revision)
		}
	}
	first := page("?limit=3")
	if len(first.Items) != 3 || first.Continue == "" {
		t.Fatalf("page of 3: %+v", first)
	}
	rest := page("?limit=3&continue=" + first.Continue)
	if len(rest.Items) != 1 || rest.Continue != "" || rest.Items[0].Revision != all.Items[3].Revision {
		t.Errorf("second page: %+v, want the oldest record %d", rest, all.Items[3].Revision)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?continue=x"} {
		if r := call(t, s, "GET", "/v1/audit"+q, nil); r.code != 400 {
			t.Errorf("GET /v1/audit%s: HTTP %d, want 400", q, r.code)
		}
	}
}

// waitTrimmed waits until the audit trimmer has done every trim asked.
func waitTrimmed(t *testing.T, c *Core) {
	t.Helper()
	waitFor(t, func() bool { return c.trimDone.Load() == c.trimAsked.Load() })
}

// TestAuditTrimOutsideWriteLock: the audit trim runs in the background,
// not under the write lock: while a trim is held up, writes still
// commit; once it runs, the log is bounded again (AuditKeep +
// auditTrimEvery - 1 records at most).
func TestAuditTrimOutsideWriteLock(t *testing.T) {
	s := startServer(t, Config{AuditKeep: 32}) // a trim every 2 audited writes
	every := int(s.Core.auditTrimEvery())
	if every != 2 {
		t.Fatalf("auditTrimEvery %d, want 2", every)
	}
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	s.Core.beforeTrim = func() {
		select {
		case held <- struct{}{}:
		default:
		}
		<-hold
	}
	create := func(i int) {
		t.Helper()
		if r := call(t, s, "POST", "/v1/azs", map[string]any{"name": fmt.Sprintf("az-%d", i)}); r.code != 201 {
			t.Fatalf("create %d: HTTP %d: %s", i, r.code, r.body)
		}
	}
	for i := range every {
		create(i)
	}
	<-held // a trim has started and is held up
	// Writes commit meanwhile: the trim holds no write lock. (Under the
	// lock, the first of these would wait for the trim forever.)
	for i := every; i < 100; i++ {
		create(i)
	}
	close(hold)
	waitTrimmed(t, s.Core)
	var p api.AuditPage
	call(t, s, "GET", "/v1/audit?limit=1000", nil).decode(t, &p)
	recs := p.Items
	if len(recs) > 32+every-1 || len(recs) < 32 {
		t.Errorf("%d audit records after 100 writes with AuditKeep 32: want 32..%d", len(recs), 32+every-1)
	}
}

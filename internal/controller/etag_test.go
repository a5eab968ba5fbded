package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// concurrentEdits changes one object of each user kind in a way that two
// editors' changes can both be seen afterwards: editor n (1 or 2) adds
// the marker "etag-m" (a description suffix, a guest, an edge, a record
// or a target). A kind added to the registry without an entry here fails
// TestConcurrentEdits.
var concurrentEdits = map[string]struct {
	key  string
	edit func(o model.Object, m string, n int)
}{
	model.KindAZ: {"az1", func(o model.Object, m string, _ int) { o.(*model.AZ).Description += " " + m }},
	model.KindHost: {"az1-h1", func(o model.Object, m string, n int) {
		h := o.(*model.Host)
		h.Guests = append(h.Guests, model.Guest{Name: m, Address: netip.MustParseAddr(fmt.Sprintf("198.19.1.%d", 100+n)), VSID: 5001})
	}},
	model.KindEdgeSet: {"pop-a", func(o model.Object, m string, n int) {
		s := o.(*model.EdgeSet)
		s.Edges = append(s.Edges, model.EdgeNode{Name: m, Underlay: netip.MustParseAddr(fmt.Sprintf("198.18.0.%d", 100+n))})
	}},
	model.KindEIP:          {"198.51.100.7", func(o model.Object, m string, _ int) { o.(*model.EIP).Description += " " + m }},
	model.KindService:      {"web", func(o model.Object, m string, _ int) { o.(*model.Service).Description += " " + m }},
	model.KindQuarantine:   {"198.51.100.8", func(o model.Object, m string, _ int) { o.(*model.Quarantine).Reason += " " + m }},
	model.KindFirewallRule: {"block", func(o model.Object, m string, _ int) { o.(*model.FirewallRule).Description += " " + m }},
	model.KindBandwidthPackage: {"shop", func(o model.Object, m string, _ int) {
		o.(*model.BandwidthPackage).Description += " " + m
	}},
	model.KindDNSZone: {"example.com", func(o model.Object, m string, _ int) {
		z := o.(*model.DNSZone)
		z.Records = append(z.Records, model.ZoneRecord{Name: m, Type: "TXT", Value: m})
	}},
	model.KindDDoSPolicy: {"region", func(o model.Object, m string, _ int) { o.(*model.DDoSPolicy).Description += " " + m }},
	model.KindGSLBRecord: {"w.example.com", func(o model.Object, m string, n int) {
		r := o.(*model.GSLBRecord)
		r.Targets = append(r.Targets, model.GSLBTarget{VIP: netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", 100+n)), Region: m, Weight: 1})
	}},
}

// TestConcurrentEdits races two read-modify-write edits of an object of
// every user kind: with If-Match, the second PUT of the same revision gets
// 412 with the current revision (header and body) and changes nothing;
// edits through client.Edit, run at once, both survive.
func TestConcurrentEdits(t *testing.T) {
	s := startServer(t, Config{})
	ctx := context.Background()
	cl := newClient(s)
	b, err := os.ReadFile("testdata/everykind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	for _, kind := range model.UserKinds {
		t.Run(kind, func(t *testing.T) {
			ce, ok := concurrentEdits[kind]
			if !ok {
				t.Fatalf("no concurrent edit for kind %s: add one to concurrentEdits and an object to testdata/everykind.yaml", kind)
			}
			path := "/v1/" + kind + "/" + ce.key

			// Two editors read the same revision.
			g1, g2 := call(t, s, "GET", path, nil), call(t, s, "GET", path, nil)
			if g1.code != 200 || g2.code != 200 {
				t.Fatalf("GET: HTTP %d, %d: %s", g1.code, g2.code, g1.body)
			}
			tag := g1.hdr.Get("ETag")
			if tag == "" || tag != g2.hdr.Get("ETag") || !strings.HasPrefix(tag, `"`) {
				t.Fatalf("ETags %q, %q: want one strong tag", tag, g2.hdr.Get("ETag"))
			}
			o1, o2 := decodeObj(t, kind, g1.body), decodeObj(t, kind, g2.body)
			ce.edit(o1, "etag-x", 1)
			ce.edit(o2, "etag-y", 2)

			p1 := callIf(t, s, "PUT", path, tag, o1)
			if p1.code != 200 {
				t.Fatalf("first PUT If-Match %s: HTTP %d: %s", tag, p1.code, p1.body)
			}
			newTag := p1.hdr.Get("ETag")
			if newTag == "" || newTag == tag {
				t.Fatalf("first PUT answered ETag %q (read %q): want the new revision", newTag, tag)
			}
			p2 := callIf(t, s, "PUT", path, tag, o2)
			if p2.code != http.StatusPreconditionFailed {
				t.Fatalf("second PUT of revision %s: HTTP %d: %s; want 412", tag, p2.code, p2.body)
			}
			e := p2.apiError(t)
			if p2.hdr.Get("ETag") != newTag || strconv.Quote(strconv.FormatInt(e.Revision, 10)) != newTag {
				t.Errorf("412 carries ETag %q, revision %d: want the current %s", p2.hdr.Get("ETag"), e.Revision, newTag)
			}
			if !strings.Contains(e.Error, ce.key) || !strings.Contains(e.Error, "changed since you read it") {
				t.Errorf("412 message %q: want the object named and what happened", e.Error)
			}
			// The refused edit changed nothing: the first one is stored.
			cur := call(t, s, "GET", path, nil)
			if cur.hdr.Get("ETag") != newTag || !strings.Contains(string(cur.body), "etag-x") || strings.Contains(string(cur.body), "etag-y") {
				t.Errorf("after the 412: ETag %q, %s; want the first edit only at %s", cur.hdr.Get("ETag"), cur.body, newTag)
			}
			// A stale DELETE is refused too, and deletes nothing.
			if d := callIf(t, s, "DELETE", path, tag, nil); d.code != http.StatusPreconditionFailed || d.hdr.Get("ETag") != newTag {
				t.Errorf("DELETE with a stale If-Match: HTTP %d, ETag %q: %s", d.code, d.hdr.Get("ETag"), d.body)
			}
			if g := call(t, s, "GET", path, nil); g.code != 200 {
				t.Errorf("the stale DELETE removed the object: HTTP %d", g.code)
			}

			// Two editors through client.Edit at once, both reading the
			// same revision before either writes (the barrier): one PUT
			// gets 412 and Edit redoes it on the new version, so both
			// edits survive. Without If-Match one would be lost.
			var wg, read sync.WaitGroup
			read.Add(2)
			errs := make([]error, 2)
			rounds := make([]int, 2)
			for i, m := range []string{"etag-a", "etag-b"} {
				wg.Go(func() {
					_, _, errs[i] = cl.Edit(ctx, kind, ce.key, func(o model.Object) error {
						if rounds[i]++; rounds[i] == 1 {
							read.Done()
							read.Wait()
						}
						ce.edit(o, m, i+3)
						return nil
					})
				})
			}
			wg.Wait()
			if rounds[0]+rounds[1] != 3 {
				t.Errorf("edit rounds %v: want one editor to redo its edit once after a 412", rounds)
			}
			for _, err := range errs {
				if err != nil {
					t.Fatalf("Edit: %v", err)
				}
			}
			o, rev, err := cl.GetRevision(ctx, kind, ce.key)
			if err != nil {
				t.Fatal(err)
			}
			js, _ := json.Marshal(o)
			for _, m := range []string{"etag-x", "etag-a", "etag-b"} {
				if !strings.Contains(string(js), m) {
					t.Errorf("after two concurrent Edits: %s lacks %s", js, m)
				}
			}
			if rev <= 0 {
				t.Errorf("GetRevision: revision %d", rev)
			}
		})
	}
}

func decodeObj(t *testing.T, kind string, body []byte) model.Object {
	t.Helper()
	o, err := model.New(kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, o); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return o
}

// callIf is call with an If-Match header.
func callIf(t *testing.T, s *Server, method, path, ifMatch string, body any) reply {
	t.Helper()
	var js []byte
	if body != nil {
		var err error
		if js, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, strings.NewReader(string(js)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token())
	req.Header.Set("If-Match", ifMatch)
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

// TestIfMatchCheckedInStore: a write to the object that bypasses the
// controller (no commit marker, so the view cannot know) lands between
// the planning of an If-Match PUT and its commit: the store's revision
// compare refuses the commit with 412, and the view keeps the state it
// had (the PUT passed validation but must not show).
func TestIfMatchCheckedInStore(t *testing.T) {
	s := startServer(t, Config{})
	ctx := context.Background()
	if r := call(t, s, "POST", "/v1/azs", model.AZ{Name: "az1"}); r.code != 201 {
		t.Fatalf("HTTP %d: %s", r.code, r.body)
	}
	g := call(t, s, "GET", "/v1/azs/az1", nil)
	tag := g.hdr.Get("ETag")
	var sneaked int64
	s.beforeCommit = func(int) {
		resp, err := s.Store().Client.Put(ctx, store.Key(model.KindAZ, "az1"), `{"name":"az1","description":"sneaked"}`)
		if err != nil {
			t.Error(err)
			return
		}
		sneaked = resp.Header.Revision
	}
	r := callIf(t, s, "PUT", "/v1/azs/az1", tag, model.AZ{Name: "az1", Description: "mine"})
	s.beforeCommit = nil
	if r.code != http.StatusPreconditionFailed {
		t.Fatalf("HTTP %d: %s; want 412", r.code, r.body)
	}
	if e := r.apiError(t); e.Revision != sneaked || r.hdr.Get("ETag") != strconv.Quote(strconv.FormatInt(sneaked, 10)) {
		t.Errorf("412 with revision %d, ETag %q: want %d, the sneaked write's", e.Revision, r.hdr.Get("ETag"), sneaked)
	}
	// The view never shows "mine"; the watch brings "sneaked".
	waitFor(t, func() bool {
		g := call(t, s, "GET", "/v1/azs/az1", nil)
		if strings.Contains(string(g.body), "mine") {
			t.Fatalf("the refused PUT shows in the view: %s", g.body)
		}
		return strings.Contains(string(g.body), "sneaked")
	})
	m := call(t, s, "GET", "/metrics", nil)
	if !strings.Contains(string(m.body), `azgate_controller_commits_total{result="precondition"} 1`) {
		t.Error("the refused commit is not counted as precondition in /metrics")
	}
}

// TestIfMatchHeader: the header's forms (docs/api.md, "Concurrent edits").
func TestIfMatchHeader(t *testing.T) {
	s := startServer(t, Config{})
	if r := call(t, s, "POST", "/v1/azs", model.AZ{Name: "az1"}); r.code != 201 {
		t.Fatalf("HTTP %d: %s", r.code, r.body)
	}
	tag := call(t, s, "GET", "/v1/azs/az1", nil).hdr.Get("ETag")
	az := model.AZ{Name: "az1", Description: "d"}
	for _, c := range []struct {
		path, ifMatch string
		code          int
	}{
		{"/v1/azs/az1", "5", 400},        // not quoted
		{"/v1/azs/az1", `W/` + tag, 400}, // weak: never matches a strong compare
		{"/v1/azs/az1", `"abc"`, 400},
		{"/v1/azs/az2", "*", 412},           // no such object
		{"/v1/azs/az2", tag, 412},           // no such object
		{"/v1/azs/az1", `"1", ` + tag, 200}, // one of a list
		{"/v1/azs/az1", "*", 200},           // any revision
	} {
		body := az
		body.Name = strings.TrimPrefix(c.path, "/v1/azs/")
		if r := callIf(t, s, "PUT", c.path, c.ifMatch, body); r.code != c.code {
			t.Errorf("PUT %s If-Match %s: HTTP %d: %s; want %d", c.path, c.ifMatch, r.code, r.body, c.code)
		}
	}
}

// TestNarrowEdits: the server-side edits of EIP limits and bandwidth
// package members change the current version, so two made at once both
// stay without any read-modify-write; they honour If-Match like PUT.
func TestNarrowEdits(t *testing.T) {
	s := startServer(t, Config{})
	ctx := context.Background()
	b, err := os.ReadFile("testdata/everykind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(s).Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	tag := call(t, s, "GET", "/v1/bandwidthpackages/shop", nil).hdr.Get("ETag")
	// Two members added at once, from the same read: both stay.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, a := range []string{"198.51.100.8", "198.51.100.9"} {
		wg.Go(func() {
			codes[i] = call(t, s, "POST", "/v1/bandwidthpackages/shop/eips", map[string]any{"address": a, "weight": 2}).code
		})
	}
	wg.Wait()
	g := call(t, s, "GET", "/v1/bandwidthpackages/shop", nil)
	if codes[0] != 200 || codes[1] != 200 || !strings.Contains(string(g.body), "198.51.100.8") || !strings.Contains(string(g.body), "198.51.100.9") {
		t.Errorf("two member additions: HTTP %v, stored %s", codes, g.body)
	}
	if r := call(t, s, "POST", "/v1/bandwidthpackages/shop/eips", map[string]any{"address": "198.51.100.8"}); r.code != 409 {
		t.Errorf("adding a member twice: HTTP %d: %s", r.code, r.body)
	}
	// With the revision read before those: 412, nothing removed.
	if r := callIf(t, s, "DELETE", "/v1/bandwidthpackages/shop/eips/198.51.100.8", tag, nil); r.code != 412 || r.hdr.Get("ETag") != g.hdr.Get("ETag") {
		t.Errorf("stale member removal: HTTP %d, ETag %q (current %q): %s", r.code, r.hdr.Get("ETag"), g.hdr.Get("ETag"), r.body)
	}
	r := callIf(t, s, "DELETE", "/v1/bandwidthpackages/shop/eips/198.51.100.8", g.hdr.Get("ETag"), nil)
	if r.code != 200 || strings.Contains(string(r.body), "198.51.100.8") || r.hdr.Get("ETag") == g.hdr.Get("ETag") {
		t.Errorf("member removal: HTTP %d, ETag %q: %s", r.code, r.hdr.Get("ETag"), r.body)
	}
	if r := call(t, s, "DELETE", "/v1/bandwidthpackages/shop/eips/198.51.100.8", nil); r.code != 404 {
		t.Errorf("removing a member twice: HTTP %d: %s", r.code, r.body)
	}

	// EIP limits beside a description change: both stay.
	wg.Go(func() {
		codes[0] = call(t, s, "POST", "/v1/eips/198.51.100.7/limits", model.Limits{SourcePPS: 1234}).code
	})
	wg.Go(func() {
		_, _, err := newClient(s).Edit(ctx, model.KindEIP, "198.51.100.7", func(o model.Object) error { o.(*model.EIP).Description = "desc"; return nil })
		if err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	e := call(t, s, "GET", "/v1/eips/198.51.100.7", nil)
	if codes[0] != 200 || !strings.Contains(string(e.body), `"sourcePps":1234`) || !strings.Contains(string(e.body), "desc") {
		t.Errorf("limits and description at once: HTTP %d, stored %s", codes[0], e.body)
	}
	if r := call(t, s, "POST", "/v1/eips/198.51.100.7/limits", `{"sourcePps": 1, "bogus": 2}`); r.code != 400 || !strings.Contains(r.apiError(t).Error, "bogus") {
		t.Errorf("limits with an unknown field: HTTP %d: %s", r.code, r.body)
	}
	if r := call(t, s, "DELETE", "/v1/eips/198.51.100.7/limits", nil); r.code != 200 || strings.Contains(string(r.body), "sourcePps") {
		t.Errorf("clearing the limits: HTTP %d: %s", r.code, r.body)
	}
}

// TestNarrowEditsDNS: records added to a zone and targets added to a GSLB
// record by two writers at once all stay; a target is removed by VIP.
func TestNarrowEditsDNS(t *testing.T) {
	s := startServer(t, Config{})
	b, err := os.ReadFile("testdata/everykind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := model.ParseDocument(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(s).Apply(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i, n := range []string{"one", "two"} {
		wg.Go(func() {
			codes[i] = call(t, s, "POST", "/v1/dnszones/example.com/records", model.ZoneRecord{Name: n, Type: "TXT", Value: n + "-text"}).code
		})
		wg.Go(func() {
			codes[2+i] = call(t, s, "POST", "/v1/gslbrecords/w.example.com/targets",
				map[string]any{"vip": fmt.Sprintf("198.51.100.%d", 30+i), "region": n + "-region", "weight": 1}).code
		})
	}
	wg.Wait()
	z := string(call(t, s, "GET", "/v1/dnszones/example.com", nil).body)
	g := string(call(t, s, "GET", "/v1/gslbrecords/w.example.com", nil).body)
	for i, c := range codes {
		if c != 200 {
			t.Errorf("edit %d: HTTP %d", i, c)
		}
	}
	for _, want := range []string{"one-text", "two-text"} {
		if !strings.Contains(z, want) {
			t.Errorf("zone %s lacks %s", z, want)
		}
	}
	for _, want := range []string{"one-region", "two-region"} {
		if !strings.Contains(g, want) {
			t.Errorf("GSLB record %s lacks %s", g, want)
		}
	}
	if r := call(t, s, "POST", "/v1/dnszones/example.com/records", model.ZoneRecord{Name: "one", Type: "TXT", Value: "one-text"}); r.code != 409 {
		t.Errorf("the same record twice: HTTP %d: %s", r.code, r.body)
	}
	if r := call(t, s, "POST", "/v1/dnszones/example.com/records", model.ZoneRecord{Name: "bad", Type: "A", Value: "not-an-address"}); r.code != 422 {
		t.Errorf("an A record that is no address: HTTP %d: %s", r.code, r.body)
	}
	if r := call(t, s, "DELETE", "/v1/gslbrecords/w.example.com/targets/198.51.100.30", nil); r.code != 200 || strings.Contains(string(r.body), "one-region") {
		t.Errorf("removing a target: HTTP %d: %s", r.code, r.body)
	}
	if r := call(t, s, "DELETE", "/v1/gslbrecords/w.example.com/targets/198.51.100.30", nil); r.code != 404 {
		t.Errorf("removing a target twice: HTTP %d: %s", r.code, r.body)
	}
}

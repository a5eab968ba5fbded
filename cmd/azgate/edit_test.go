//go:build !node

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/model"
)

// interferer sits between the CLI and the controller: before forwarding
// each of the first n conditional PUTs (If-Match) it lets another writer
// change the object first, as an operator editing at the same moment
// would. The CLI's PUT then carries a stale revision.
type interferer struct {
	s     *controller.Server
	proxy *httputil.ReverseProxy
	edit  func(model.Object)
	n     int32 // interfere with this many PUTs
	puts  atomic.Int32
	t     *testing.T
}

func (f *interferer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && r.Header.Get("If-Match") != "" {
		if f.puts.Add(1) <= f.n {
			kind, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
			key, _ = url.PathUnescape(key)
			cl := client.New(f.s.URL(), f.s.Token())
			if _, _, err := cl.Edit(r.Context(), kind, key, func(o model.Object) error { f.edit(o); return nil }); err != nil {
				f.t.Errorf("the other writer's edit: %v", err)
			}
		}
	}
	f.proxy.ServeHTTP(w, r)
}

// TestCLIEditRetry runs each read-modify-write command while another
// writer changes the same object between the command's read and its
// write: the command's PUT gets 412, it redoes its edit on the new
// version, and both changes are stored. A writer that always gets there
// first makes the command fail with a clear message, writing nothing.
func TestCLIEditRetry(t *testing.T) {
	s := startController(t)
	must(t, s, "apply", "-f", "testdata/edits.yaml")
	target, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		kind   string
		key    string
		other  func(model.Object)
		mine   string // in the stored object's JSON after the command
		theirs string // in it after the other writer's edit
	}{
		{"bandwidth", []string{"bandwidth", "set", "shop", "--description", "cli-edit"}, model.KindBandwidthPackage, "shop",
			func(o model.Object) {
				p := o.(*model.BandwidthPackage)
				p.EIPs = append(p.EIPs, model.PackageEIP{Address: netip.MustParseAddr("198.51.100.8")})
			}, `"cli-edit"`, `"198.51.100.8"`},
		{"dns zone", []string{"dns", "zone", "add-record", "example.com", "cli", "TXT", "cli-edit"}, model.KindDNSZone, "example.com",
			func(o model.Object) {
				z := o.(*model.DNSZone)
				z.Records = append(z.Records, model.ZoneRecord{Name: "other", Type: "TXT", Value: "other-edit"})
			}, "cli-edit", "other-edit"},
		{"gslb record", []string{"gslb", "record", "set", "w.example.com", "--ttl", "33"}, model.KindGSLBRecord, "w.example.com",
			func(o model.Object) {
				r := o.(*model.GSLBRecord)
				r.Targets = append(r.Targets, model.GSLBTarget{VIP: netip.MustParseAddr("198.51.100.11"), Region: "other-edit", Weight: 2})
			}, `"ttl":33`, "other-edit"},
		{"eip limits", []string{"eip", "limits", "198.51.100.7", "--source-pps", "1234"}, model.KindEIP, "198.51.100.7",
			func(o model.Object) { o.(*model.EIP).Description = "other-edit" }, "1234", "other-edit"},
		{"pullout", []string{"eip", "pullout", "198.51.100.8", "--set", "ded"}, model.KindEIP, "198.51.100.8",
			func(o model.Object) { o.(*model.EIP).Description = "other-edit" }, `"set":"ded"`, "other-edit"},
		{"set bgp", []string{"set", "bgp", "pop-a", "--asn", "65001"}, model.KindEdgeSet, "pop-a",
			func(o model.Object) {
				e := o.(*model.EdgeSet)
				e.Edges = append(e.Edges, model.EdgeNode{Name: "other-edit", Underlay: netip.MustParseAddr("198.18.0.9")})
			}, "65001", "other-edit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &interferer{s: s, proxy: httputil.NewSingleHostReverseProxy(target), edit: c.other, n: 1, t: t}
			ps := httptest.NewServer(f)
			defer ps.Close()
			out, err := azgateAt(t, ps.URL, s, c.args...)
			if err != nil {
				t.Fatalf("azgate %s: %v\n%s", strings.Join(c.args, " "), err, out)
			}
			if got := f.puts.Load(); got != 2 {
				t.Errorf("%d conditional PUTs: want 2 (one refused with 412, one after reading again)", got)
			}
			js := stored(t, s, c.kind, c.key)
			if !strings.Contains(js, c.mine) || !strings.Contains(js, c.theirs) {
				t.Errorf("stored %s: want both the command's change (%s) and the other writer's (%s)", js, c.mine, c.theirs)
			}
		})
	}

	// A writer that always gets there first: the command gives up.
	f := &interferer{s: s, proxy: httputil.NewSingleHostReverseProxy(target), n: 1 << 30, t: t,
		edit: func(o model.Object) { o.(*model.EIP).Description += "x" }}
	ps := httptest.NewServer(f)
	defer ps.Close()
	_, err = azgateAt(t, ps.URL, s, "eip", "limits", "198.51.100.7", "--syn-rate", "777")
	if err == nil || !strings.Contains(err.Error(), `EIP "198.51.100.7" changed under this edit 5 times`) || !strings.Contains(err.Error(), "nothing was written") {
		t.Errorf("edit against a writer that always wins: %v", err)
	}
	if got := f.puts.Load(); got != client.EditAttempts {
		t.Errorf("%d conditional PUTs: want %d", got, client.EditAttempts)
	}
	if js := stored(t, s, model.KindEIP, "198.51.100.7"); strings.Contains(js, "777") {
		t.Errorf("the abandoned edit was stored: %s", js)
	}
}

// azgateAt runs the CLI against the API at apiURL with s's token.
func azgateAt(t *testing.T, apiURL string, s *controller.Server, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--api", apiURL, "--token-file", s.TokenFile()}, args...))
	err := root.Execute()
	return out.String(), err
}

// stored is an object's JSON as the controller serves it.
func stored(t *testing.T, s *controller.Server, kind, key string) string {
	t.Helper()
	o, err := client.New(s.URL(), s.Token()).Get(context.Background(), kind, key)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

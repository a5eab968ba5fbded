package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseDocument(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // fields (or, for errors without fields, message parts)
	}{
		{"empty", ``, nil},
		{"null", `null`, nil},
		{"yaml", "azs:\n  - name: az1\neips:\n  - address: 198.51.100.7\n", nil},
		{"json", `{"azs": [{"name": "az1"}], "eips": [{"address": "198.51.100.7"}]}`, nil},
		{"yaml flow mapping", `{azs: [{name: az1}]}`, nil},
		{"invalid objects with places", "azs:\n  - name: az1\n  - name: Bad\nhosts:\n  - name: h1\n    az: az1\n    underlay: 198.18.1.1\n  - name: h2\n    az: az1\n",
			[]string{"azs[1].name", "hosts[1].underlay"}},
		{"duplicates", "eips:\n  - address: 198.51.100.7\n  - address: 198.51.100.8\n  - address: 198.51.100.7\n", []string{"eips[2]"}},
		{"same key, other kinds", "azs:\n  - name: x1\nhosts:\n  - {name: x1, az: x1, underlay: 198.18.1.1}\n", nil},
		{"unknown list", "firewalls:\n  - name: web\n", []string{"firewalls: unknown field"}},
		{"unknown field in place", "hosts:\n  - name: h1\n    guests:\n      - name: g1\n        vsid: 5001\n        mac: 02:00:00:00:00:01\n", []string{"hosts[0].guests[0].mac: unknown field"}},
		{"bad address in place", "eips:\n  - address: 198.51.100.7\n  - address: 198.51.100.\n", []string{"eips[1].address"}},
		{"bad prefix in place", "edgesets:\n  - name: p\n    prefixes: [198.51.100.0/24, 10.0.0.0/99]\n", []string{"edgesets[0].prefixes[1]"}},
		{"wrong type", "hosts:\n  - name: h1\n    guests: g1\n", []string{"hosts[0].guests: must be a JSON array"}},
		{"a list", "- name: az1\n", []string{"must be a JSON object, not an array"}},
		{"not YAML", "azs: [\n", []string{"not valid YAML or JSON"}},
		{"bad JSON falls back to YAML", `{"azs": [}`, []string{"not valid YAML or JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDocument([]byte(tc.doc))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if d == nil {
					t.Fatal("nil document")
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", d)
			}
			if es, ok := err.(Errors); ok && !strings.Contains(tc.want[0], ":") {
				if got := strings.Join(fields(es), " "); got != strings.Join(tc.want, " ") {
					t.Errorf("fields %q, want %q (%v)", got, tc.want, err)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestParseDocumentOrder: Placed lists objects in dependency order with
// their places, whatever order the document has them in.
func TestParseDocumentOrder(t *testing.T) {
	d, err := ParseDocument([]byte("eips:\n  - address: 198.51.100.7\nazs:\n  - name: az1\n  - name: az2\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range d.Placed() {
		got = append(got, p.Place+"="+p.Obj.Key())
	}
	if want := "azs[0]=az1 azs[1]=az2 eips[0]=198.51.100.7"; strings.Join(got, " ") != want {
		t.Errorf("placed %v, want %s", got, want)
	}
	if len(d.Objects()) != 3 {
		t.Errorf("objects %v", d.Objects())
	}
}

// FuzzParseDocument: no input panics, and an accepted document marshals
// to JSON that parses back to the same objects.
func FuzzParseDocument(f *testing.F) {
	seeds, err := filepath.Glob("testdata/documents/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDocument(data)
		if err != nil {
			if d != nil {
				t.Fatal("a document and an error")
			}
			return
		}
		js, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		d2, err := ParseDocument(js)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", js, err)
		}
		js2, err := json.Marshal(d2)
		if err != nil {
			t.Fatal(err)
		}
		if string(js) != string(js2) {
			t.Fatalf("round trip changed the document:\n%s\n%s", js, js2)
		}
		if len(d.Objects()) != len(d2.Objects()) {
			t.Fatalf("%d objects, %d after the round trip", len(d.Objects()), len(d2.Objects()))
		}
	})
}

// TestParseDocumentKeys: YAML documents get the same key checks as JSON
// after their conversion, and JSON ones at every depth.
func TestParseDocumentKeys(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"JSON duplicate", `{"azs": [{"name": "a1"}], "azs": []}`, "azs: duplicate key"},
		{"JSON nested duplicate", `{"hosts": [{"name": "h1", "az": "a1", "underlay": "198.18.1.1", "az": "a2"}]}`, "hosts[0].az: duplicate key"},
		{"JSON case", `{"eips": [{"Address": "198.51.100.7"}]}`, `eips[0].Address: key "Address" differs from field "address"`},
		{"YAML case", "services:\n- name: web\n  VIP: 198.51.100.7\n", `services[0].VIP: key "VIP" differs from field "vip"`},
		{"YAML duplicate", "azs:\n- name: a1\n  name: a2\n", "name"},
		{"JSON trailing", `{"azs": []} {"azs": []}`, "trailing data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDocument([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestParseDocumentYAMLQuotedKey(t *testing.T) {
	if _, err := ParseDocument([]byte("\"azs\":\n- name: a1\n")); err != nil {
		t.Fatalf("a YAML document beginning with a quoted key: %v", err)
	}
}

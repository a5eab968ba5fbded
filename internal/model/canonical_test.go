package model

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// decodeStoredSlow is DecodeStored without its fast path: what it was
// before decodeCanonical, and what it must keep answering.
func decodeStoredSlow(kind, key string, data []byte) (Object, error) {
	o, err := Decode(kind, data)
	if err != nil {
		return nil, fmt.Errorf("does not decode: %w", err)
	}
	if o.Key() != key {
		return nil, fmt.Errorf("stored under key %q but names itself %q", key, o.Key())
	}
	if es := o.Validate(); len(es) > 0 {
		return nil, fmt.Errorf("invalid: %w", es)
	}
	return o, nil
}

// sameAsSlow fails t unless DecodeStored and decodeStoredSlow agree on
// data: the same object, or the same error text.
func sameAsSlow(t *testing.T, kind, key string, data []byte) {
	t.Helper()
	got, err := DecodeStored(kind, key, data)
	want, werr := decodeStoredSlow(kind, key, data)
	if fmt.Sprint(err) != fmt.Sprint(werr) {
		t.Fatalf("%s %q: error %v, the full checks say %v", kind, data, err, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %q: decoded %+v, the full checks %+v", kind, data, got, want)
	}
}

func canonicalSamples() []struct {
	kind string
	o    Object
} {
	lim := &Limits{SourcePPS: 100, SYNRate: 50}
	return []struct {
		kind string
		o    Object
	}{
		{KindAZ, &AZ{Name: "az1", Region: "r1", Description: "a <b> & c"}},
		{KindHost, benchHost(3)},
		{KindHost, &Host{Name: "h0", AZ: "az1", Underlay: netip.MustParseAddr("198.18.0.1")}},
		{KindEdgeSet, &EdgeSet{Name: "p", Prefixes: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")},
			Edges: []EdgeNode{{Name: "e1", Underlay: netip.MustParseAddr("198.19.255.1")}}}},
		{KindEIP, benchEIP()},
		{KindEIP, &EIP{Address: netip.MustParseAddr("100.64.0.9"), Description: "x", Set: "d1", Limits: lim}},
		{KindService, benchService()},
		{KindService, natService()},
		{KindHealth, &Health{Service: "web", Down: map[string][]string{"p": {"h1/g1"}, "q": nil}}},
	}
}

// TestDecodeCanonicalHits: what the store writes (json.Marshal) takes
// the fast path for every kind sampled, and decodes to the object.
func TestDecodeCanonicalHits(t *testing.T) {
	for _, s := range canonicalSamples() {
		data, err := json.Marshal(s.o)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := decodeCanonical(s.kind, data)
		if !ok {
			t.Errorf("%s %s: not decoded canonically", s.kind, data)
			continue
		}
		if !reflect.DeepEqual(o, s.o) {
			t.Errorf("%s: decoded %+v, want %+v", s.kind, o, s.o)
		}
		sameAsSlow(t, s.kind, s.o.Key(), data)
	}
}

// TestCanonicalTypes: every kind's type admits the fast path (a kind
// that does not is correct, only slow: this says so).
func TestCanonicalTypes(t *testing.T) {
	for _, k := range Kinds {
		o, _ := New(k)
		if !canonicalType(reflect.TypeOf(o)) {
			t.Errorf("%s (%T): not a canonical type", k, o)
		}
	}
	type rec struct {
		A    string `json:"a"`
		Next *rec   `json:"next"`
	}
	type withAny struct {
		V any `json:"v"`
	}
	type withRaw struct {
		V json.RawMessage `json:"v"`
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*rec](), reflect.TypeFor[*withAny](), reflect.TypeFor[*withRaw]()} {
		if canonicalType(typ) {
			t.Errorf("%v: a canonical type", typ)
		}
	}
}

// TestDecodeStoredRejectsAsBefore: inputs that hold what the fast path
// must not let through (duplicate keys, case variants, unknown fields,
// trailing data, values that do not fit), each a small edit of what the
// store writes. DecodeStored answers as the full checks do, error text
// included.
func TestDecodeStoredRejectsAsBefore(t *testing.T) {
	for _, tc := range []struct {
		kind, key, json, want string
	}{
		{KindAZ, "az1", `{"name":"az1","name":"az1"}`, "name: duplicate key"},
		{KindAZ, "az1", `{"name":"az1","\u006eame":"az1"}`, "duplicate key"},
		{KindAZ, "az1", `{"name":"az1","Name":"az1"}`, `key "Name" differs from field "name" only by case`},
		{KindAZ, "az1", `{"NAME":"az1"}`, `key "NAME" differs`},
		{KindAZ, "az1", `{"name":"az1","colour":"red"}`, "colour: unknown field"},
		{KindAZ, "az1", `{"name":"az1"} `, ""},
		{KindAZ, "az1", ` {"name":"az1"}`, ""},
		{KindAZ, "az1", `{"name":"az1"}{}`, "trailing data"},
		{KindAZ, "az1", `{"name":"az1"}x`, "trailing data"},
		{KindAZ, "az1", `{"name":"az1","region":""}`, ""},
		{KindAZ, "Az1", `{"name":"Az1"}`, "not a valid name"},
		{KindAZ, "az2", `{"name":"az1"}`, "stored under key"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":4096},{"name":"g2","address":"198.19.0.2","vsid":4097,"vsid":4097}]}`, "guests[1].vsid: duplicate key"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vſid":4096}]}`, `key "vſid" differs from field "vsid"`},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":4096,"port":1}]}`, "guests[0].port: unknown field"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":4096}],"guests":[]}`, "guests: duplicate key"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[]}`, ""},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":null}`, ""},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":1}]}`, "guests[0].vsid: 1 is outside"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1"}]}`, "guests[0].vsid: 0 is outside"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":4096},{"name":"g1","address":"198.19.0.1","vsid":4096}]}`, `guests[1].name: guest "g1" appears twice; guests[1].address: 198.19.0.1 is used by another guest`},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0.1","guests":[{"name":"g1","address":"198.19.0.1","vsid":-1}]}`, "must not be the number -1"},
		{KindHost, "h1", `{"name":"h1","az":"az1","underlay":"198.18.0"}`, `underlay: ParseAddr`},
		{KindHost, "h1", `null`, "stored under key"},
		{KindHost, "", `null`, "invalid: name: required"},
		{KindEIP, "100.64.3.7", `{"address":"100.64.3.7","binding":{"host":"h7","guest":"g7","Guest":"g8"}}`, `binding.Guest: key "Guest" differs`},
		{KindEIP, "100.64.3.7", `{"address":"100.64.3.7","binding":{"host":"h7","guest":"g7"},"binding":{"host":"h7","guest":"g7"}}`, "binding: duplicate key"},
		{KindEIP, "100.64.3.7", `{"address":"100.64.3.7","limits":{"synRate":5,"synBurſt":9}}`, `limits.synBurſt: key "synBurſt" differs`},
		{KindEIP, "100.64.3.7", `{"address":"100.64.3.7","limits":{"synRate":5}}`, ""},
		{KindHealth, "web", `{"service":"web","down":{"p":["h1/g1"],"p":[]}}`, "down.p: duplicate key"},
		{KindHealth, "web", `{"service":"web","down":{"p":["h1/g1"],"\u0070":["h1/g1"]}}`, "down.p: duplicate key"},
		{KindService, "web", `{"name":"web","vip":"198.51.100.20","mode":"encap","listeners":[{"protocol":"tcp","port":80,"pool":"p"}],"pools":[{"name":"p","backends":[{"host":"h1","guest":"g1"}],"health":{"type":"tcp","interval":"2s","interval":"3s"}}]}`, "pools[0].health.interval: duplicate key"},
		{KindService, "web", `{"name":"web","vip":"198.51.100.20","mode":"encap","listeners":[{"protocol":"tcp","port":80,"pool":"p"}],"pools":[{"name":"p","backends":[{"host":"h1","guest":"g1"}],"health":{"type":"command","command":["/bin/true"]}}]}`, "no longer carries a program"},
	} {
		t.Run(tc.json, func(t *testing.T) {
			_, err := DecodeStored(tc.kind, tc.key, []byte(tc.json))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			sameAsSlow(t, tc.kind, tc.key, []byte(tc.json))
		})
	}
}

// FuzzDecodeStored holds DecodeStored to the full checks' answer on any
// input, seeded with what the store writes and edits of it.
func FuzzDecodeStored(f *testing.F) {
	kinds := []string{}
	for _, s := range canonicalSamples() {
		data, _ := json.Marshal(s.o)
		kinds = append(kinds, s.kind)
		f.Add(uint8(len(kinds)-1), s.o.Key(), data)
		f.Add(uint8(len(kinds)-1), s.o.Key(), []byte(strings.Replace(string(data), `"name"`, `"Name"`, 1)))
		f.Add(uint8(len(kinds)-1), s.o.Key(), []byte(strings.Replace(string(data), `{`, `{"name":"x",`, 1)))
	}
	f.Fuzz(func(t *testing.T, k uint8, key string, data []byte) {
		kind := kinds[int(k)%len(kinds)]
		sameAsSlow(t, kind, key, data)
	})
}

func TestIsName(t *testing.T) {
	for _, s := range []string{"", "a", "-", "a-", "-a", "a-b", "A", "ab", "a.b", "a_b", "é", "a\n", "a\x00", "0", "00-00",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b", "a" + strings.Repeat("-", 62) + "b"} {
		if got, want := isName(s), nameRE.MatchString(s); got != want {
			t.Errorf("isName(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}

func FuzzIsName(f *testing.F) {
	f.Add("a-b")
	f.Add("a\n")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isName(s), nameRE.MatchString(s); got != want {
			t.Errorf("isName(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}

func TestIsUnicast4(t *testing.T) {
	addrs := []netip.Addr{{}, netip.IPv6Loopback(), netip.MustParseAddr("::ffff:198.18.0.1"), netip.MustParseAddr("2001:db8::1")}
	for _, b := range []byte{0, 1, 10, 100, 126, 127, 128, 169, 192, 198, 223, 224, 239, 240, 254, 255} {
		for _, c := range []byte{0, 1, 254, 255} {
			addrs = append(addrs, netip.AddrFrom4([4]byte{b, c, c, c}), netip.AddrFrom4([4]byte{b, 254, 0, 1}), netip.AddrFrom4([4]byte{b, 0, 0, c}))
		}
	}
	for _, a := range addrs {
		var es Errors
		checkUnicast4(&es, "a", a)
		if isUnicast4(a) != (len(es) == 0) {
			t.Errorf("%v: isUnicast4 %v, checkUnicast4 %v", a, isUnicast4(a), es)
		}
	}
}

// TestHostValid: valid() says true only when validate finds nothing
// (and Validate then answers nil), on hosts with one thing or none wrong.
func TestHostValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	edits := []func(h *Host){
		func(h *Host) {},
		func(h *Host) { h.Name = "" },
		func(h *Host) { h.AZ = "AZ" },
		func(h *Host) { h.Underlay = netip.MustParseAddr("127.0.0.1") },
		func(h *Host) { h.Underlay = netip.Addr{} },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Name = "g-" },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Name = h.Guests[r.IntN(len(h.Guests))].Name },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address = h.Guests[r.IntN(len(h.Guests))].Address },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address = netip.MustParseAddr("224.0.0.1") },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address = netip.MustParseAddr("::1") },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].VSID = VSIDMin - 1 },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].VSID = VSIDMax + 1 },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].VSID = VSIDMax },
		func(h *Host) { h.Guests = nil },
		// IPv6 addresses (Guest.Address6): valid, duplicated, refused.
		func(h *Host) {
			for i := range h.Guests {
				h.Guests[i].Address6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1), 14: byte((i + 1) >> 8)})
			}
		},
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address6 = netip.MustParseAddr("2001:db8::1") },
		func(h *Host) {
			h.Guests[0].Address6 = netip.MustParseAddr("2001:db8::1")
			h.Guests[len(h.Guests)-1].Address6 = netip.MustParseAddr("2001:db8::1")
		},
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address6 = netip.MustParseAddr("fe80::1") },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address6 = netip.MustParseAddr("fc00::1") },
		func(h *Host) { h.Guests[r.IntN(len(h.Guests))].Address6 = netip.MustParseAddr("198.51.100.1") },
	}
	for i := range 2000 {
		h := benchHost(1 + r.IntN(40))
		e := i % len(edits)
		edits[e](h)
		es := h.validate()
		if h.valid() && len(es) > 0 {
			t.Fatalf("edit %d: valid, but validate says %v", e, es)
		}
		if got := h.Validate(); !reflect.DeepEqual(got, es) && !(len(got) == 0 && len(es) == 0) {
			t.Fatalf("edit %d: Validate %v, validate %v", e, got, es)
		}
		if len(es) == 0 && !h.valid() {
			t.Fatalf("edit %d: a valid host that valid() does not pass: %+v", e, h)
		}
	}
}

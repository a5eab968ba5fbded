package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// fields lists the fields named by errs.
func fields(es Errors) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Field)
	}
	return out
}

// checkErrors compares the fields named by es with want; a want entry
// "field~text" also requires the message to contain text.
func checkErrors(t *testing.T, es Errors, want []string) {
	t.Helper()
	if len(es) != len(want) {
		t.Fatalf("errors %v, want fields %v", es, want)
	}
	for i, w := range want {
		f, text, _ := strings.Cut(w, "~")
		if es[i].Field != f || !strings.Contains(es[i].Msg, text) {
			t.Errorf("error %d is %q, want field %q saying %q", i, es[i], f, text)
		}
	}
}

func TestValidateAZ(t *testing.T) {
	for _, tc := range []struct {
		name string
		az   AZ
		want []string
	}{
		{"ok", AZ{Name: "az1", Region: "r1"}, nil},
		{"no name", AZ{}, []string{"name~required"}},
		{"upper case", AZ{Name: "AZ1"}, []string{"name~not a valid name"}},
		{"trailing dash", AZ{Name: "az-"}, []string{"name"}},
		{"64 characters", AZ{Name: strings.Repeat("a", 64)}, []string{"name"}},
		{"63 characters", AZ{Name: strings.Repeat("a", 63)}, nil},
		{"bad region", AZ{Name: "az1", Region: "R 1"}, []string{"region"}},
		{"long description", AZ{Name: "az1", Description: strings.Repeat("x", 1025)}, []string{"description~1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.az.Validate(), tc.want) })
	}
}

func TestValidateHost(t *testing.T) {
	g := func(name, a string, vsid uint32) Guest { return Guest{Name: name, Address: addr(a), VSID: vsid} }
	for _, tc := range []struct {
		name string
		h    Host
		want []string
	}{
		{"ok", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", 5001)}}, nil},
		{"nothing", Host{}, []string{"name~required", "az~required", "underlay~required"}},
		{"IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("2001:db8::1")}, nil},
		{"unique local IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("fd00:1::1")}, nil},
		{"unspecified IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("::")}, []string{"underlay~not a global unicast"}},
		{"loopback IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("::1")}, []string{"underlay~not a global unicast"}},
		{"link-local IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("fe80::1")}, []string{"underlay~not a global unicast"}},
		{"multicast IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("ff05::1")}, []string{"underlay~not a global unicast"}},
		{"v4-mapped underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("::ffff:198.18.1.1")}, []string{"underlay"}},
		{"zoned IPv6 underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("2001:db8::1%eth0")}, []string{"underlay~zone"}},
		{"underlay in 0.0.0.0/8", Host{Name: "h1", AZ: "az1", Underlay: addr("0.0.0.5")}, []string{"underlay~0.0.0.0/8"}},
		{"loopback underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("127.0.0.1")}, []string{"underlay~not a unicast"}},
		{"multicast underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("224.0.0.5")}, []string{"underlay~not a unicast"}},
		{"class E underlay", Host{Name: "h1", AZ: "az1", Underlay: addr("240.0.0.1")}, []string{"underlay~240.0.0.0/4"}},
		{"guest name", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("G 1", "198.19.1.1", 5001)}}, []string{"guests[0].name"}},
		{"guest twice", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", 5001), g("g1", "198.19.1.2", 5001)}},
			[]string{"guests[1].name~appears twice"}},
		{"guest address twice", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", 5001), g("g2", "198.19.1.1", 5001)}},
			[]string{"guests[1].address~another guest"}},
		{"guest without address", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{{Name: "g1", VSID: 5001}}}, []string{"guests[0].address~required"}},
		{"reserved low vsid", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", 0xFFF)}}, []string{"guests[0].vsid~RFC 7637"}},
		{"reserved high vsid", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", 0xFFFFFF)}}, []string{"guests[0].vsid"}},
		{"vsid bounds ok", Host{Name: "h1", AZ: "az1", Underlay: addr("198.18.1.1"), Guests: []Guest{g("g1", "198.19.1.1", VSIDMin), g("g2", "198.19.1.2", VSIDMax)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.h.Validate(), tc.want) })
	}
}

func TestValidateEdgeSet(t *testing.T) {
	e := func(name, a string) EdgeNode { return EdgeNode{Name: name, Underlay: addr(a)} }
	for _, tc := range []struct {
		name string
		s    EdgeSet
		want []string
	}{
		{"ok", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{e("edge-a1", "198.18.0.1")}}, nil},
		{"no prefix", EdgeSet{Name: "pop-a"}, []string{"prefixes~at least one"}},
		{"host bits", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.1/24")}}, []string{"prefixes[0]~did you mean 198.51.100.0/24"}},
		{"IPv6", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("2001:db8::/32")}}, nil},
		{"too short", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("0.0.0.0/0")}}, []string{"prefixes[0]~shorter than /8"}},
		{"invalid prefix", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{{}}}, []string{"prefixes[0]~invalid"}},
		{"reserved this network", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("0.0.0.0/8")}}, []string{"prefixes[0]~this network"}},
		{"reserved loopback", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("127.0.0.0/8")}}, []string{"prefixes[0]~loopback"}},
		{"reserved loopback /32", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("127.0.0.1/32")}}, []string{"prefixes[0]~loopback"}},
		{"reserved link-local", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("169.254.0.0/16")}}, []string{"prefixes[0]~link-local"}},
		{"reserved IETF", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.0.0.0/24")}}, []string{"prefixes[0]~IETF protocol"}},
		{"reserved 6to4", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.88.99.0/24")}}, []string{"prefixes[0]~6to4"}},
		{"reserved multicast", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("224.0.0.0/8")}}, []string{"prefixes[0]~multicast"}},
		{"reserved multicast /24", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("239.1.2.0/24")}}, []string{"prefixes[0]~multicast"}},
		{"reserved reserved", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("240.0.0.0/8")}}, []string{"prefixes[0]~reserved"}},
		{"reserved broadcast", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("255.255.255.255/32")}}, []string{"prefixes[0]~reserved"}},
		{"reserved covering IETF", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.0.0.0/16")}}, []string{"prefixes[0]~IETF"}},
		{"allowed 198.51.100.0/24", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}}, nil},
		{"allowed 192.0.2.0/24", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.0.2.0/24")}}, nil},
		{"allowed 203.0.113.0/24", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("203.0.113.0/24")}}, nil},
		{"allowed 198.18.0.0/15", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.18.0.0/15")}}, nil},
		{"allowed 10.0.0.0/8", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("10.0.0.0/8")}}, nil},
		{"allowed 100.64.0.0/10", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("100.64.0.0/10")}}, nil},
		{"allowed 192.0.1.0/24", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("192.0.1.0/24")}}, nil},
		{"edge twice", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{e("e1", "198.18.0.1"), e("e1", "198.18.0.2")}},
			[]string{"edges[1].name~appears twice"}},
		{"underlay twice", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{e("e1", "198.18.0.1"), e("e2", "198.18.0.1")}},
			[]string{"edges[1].underlay~another edge"}},
		{"edge with an IPv6 underlay", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("2001:db8:ff::1")}}}, []string{"edges[0].underlay~its IPv6 underlay address is underlay6"}},
		{"edge with an underlay6", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), Underlay6: addr("2001:db8:ff::1")}}}, nil},
		{"underlay6 IPv4", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), Underlay6: addr("198.18.0.2")}}}, []string{"edges[0].underlay6~IPv6 address is required"}},
		{"underlay6 link-local", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), Underlay6: addr("fe80::1")}}}, []string{"edges[0].underlay6~not a global unicast"}},
		{"underlay6 v4-mapped", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("198.18.0.1"), Underlay6: addr("::ffff:198.18.0.2")}}}, []string{"edges[0].underlay6~IPv4-mapped"}},
		{"underlay6 twice", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{
			{Name: "e1", Underlay: addr("198.18.0.1"), Underlay6: addr("2001:db8:ff::1")}, {Name: "e2", Underlay: addr("198.18.0.2"), Underlay6: addr("2001:db8:ff::1")}}},
			[]string{"edges[1].underlay6~another edge"}},
		{"edge underlay in 0.0.0.0/8", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1", Underlay: addr("0.1.2.3")}}}, []string{"edges[0].underlay~0.0.0.0/8"}},
		{"edge without underlay", EdgeSet{Name: "pop-a", Prefixes: []netip.Prefix{prefix("198.51.100.0/24")}, Edges: []EdgeNode{{Name: "e1"}}}, []string{"edges[0].underlay~required"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.s.Validate(), tc.want) })
	}
}

func TestValidateEIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    EIP
		want []string
	}{
		{"ok", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h1", Guest: "g1"}}, nil},
		{"no address", EIP{}, []string{"address~required"}},
		// IPv6: the address on its own (the state checks the set's
		// prefix, the guest, and refuses IPv6 EIPs for now:
		// TestIPv6EIPState).
		{"IPv6", EIP{Address: addr("2001:db8::7"), Binding: &Binding{Host: "h1", Guest: "g1"}}, nil},
		{"IPv6 benchmarking", EIP{Address: addr("2001:2::7")}, nil},
		{"IPv6 mapped", EIP{Address: addr("::ffff:198.51.100.7")}, []string{"address~IPv4-mapped"}},
		{"IPv6 zoned", EIP{Address: addr("2001:db8::7%eth0")}, []string{"address~has a zone"}},
		{"IPv6 link-local", EIP{Address: addr("fe80::7")}, []string{"address~not a global unicast"}},
		{"IPv6 multicast", EIP{Address: addr("ff0e::7")}, []string{"address~not a global unicast"}},
		{"IPv6 loopback", EIP{Address: addr("::1")}, []string{"address~not a global unicast"}},
		{"IPv6 unspecified", EIP{Address: addr("::")}, []string{"address~not a global unicast"}},
		{"IPv6 ULA", EIP{Address: addr("fd00::7")}, []string{"address~lies in fc00::/7 (unique local addresses, RFC 4193), which cannot be announced"}},
		{"IPv6 6to4", EIP{Address: addr("2002:c633:6407::1")}, []string{"address~lies in 2002::/16 (6to4"}},
		{"IPv6 Teredo", EIP{Address: addr("2001::7")}, []string{"address~lies in 2001::/23"}},
		{"IPv6 NAT64", EIP{Address: addr("64:ff9b::c633:6407")}, []string{"address~lies in 64:ff9b::/96"}},
		{"IPv6 outside 2000::/3", EIP{Address: addr("4000::7")}, []string{"address~lies outside 2000::/3"}},
		{"IPv6 limits", EIP{Address: addr("2001:db8::7"), Limits: &Limits{SourcePPS: 100}}, nil},
		{"broadcast", EIP{Address: addr("255.255.255.255")}, []string{"address~not a unicast"}},
		{"unspecified", EIP{Address: addr("0.0.0.0")}, []string{"address"}},
		{"link local", EIP{Address: addr("169.254.1.1")}, []string{"address"}},
		{"empty binding", EIP{Address: addr("198.51.100.7"), Binding: &Binding{}}, []string{"binding.host~required", "binding.guest~required"}},
		{"bad binding names", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "H", Guest: "g_1"}}, []string{"binding.host", "binding.guest"}},
		{"long description", EIP{Address: addr("198.51.100.7"), Description: strings.Repeat("é", 600)}, []string{"description"}},
		{"draining", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"},
			Previous: &PreviousBinding{Host: "h1", Guest: "g1", Underlay: addr("198.18.1.1"), VSID: 5001, Until: time.Unix(1, 0)}}, nil},
		{"previous without a binding", EIP{Address: addr("198.51.100.7"),
			Previous: &PreviousBinding{Host: "h1", Guest: "g1", Underlay: addr("198.18.1.1"), VSID: 5001, Until: time.Unix(1, 0)}}, []string{"previous~set without a binding"}},
		{"previous on the binding's host", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h1", Guest: "g2"},
			Previous: &PreviousBinding{Host: "h1", Guest: "g1", Underlay: addr("198.18.1.1"), VSID: 5001, Until: time.Unix(1, 0)}}, []string{"previous.host~is the binding's host too"}},
		{"bad previous", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"},
			Previous: &PreviousBinding{Host: "H", Guest: "", Underlay: addr("2001:db8::1"), VSID: 7}},
			[]string{"previous.host", "previous.guest~required", "previous.vsid~outside", "previous.until~missing"}},
		{"previous on an IPv6 underlay", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"},
			Previous: &PreviousBinding{Host: "h1", Guest: "g1", Underlay: addr("2001:db8:f0::21"), VSID: 5001, Until: time.Unix(1, 0)}}, nil},
		{"previous underlay link-local", EIP{Address: addr("198.51.100.7"), Binding: &Binding{Host: "h2", Guest: "g1"},
			Previous: &PreviousBinding{Host: "h1", Guest: "g1", Underlay: addr("fe80::1"), VSID: 5001, Until: time.Unix(1, 0)}}, []string{"previous.underlay~not a global unicast"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.e.Validate(), tc.want) })
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		kind, json string
		want       string // error text, "" for none
	}{
		{KindHost, `{"name": "h1", "az": "az1", "underlay": "198.18.1.1", "guests": [{"name": "g1", "address": "198.19.1.1", "vsid": 5001}]}`, ""},
		{KindHost, `{"name": "h1", "colour": "red"}`, "colour: unknown field"},
		{KindHost, `{"name": "h1", "guests": [{"name": "g1"}, {"name": "g2", "adress": "x"}]}`, "guests[1].adress: unknown field"},
		{KindHost, `{"name": "h1", "underlay": "198.18.1"}`, `underlay: ParseAddr("198.18.1")`},
		{KindHost, `{"name": "h1", "guests": [{"name": "g1", "vsid": -1}]}`, "guests[0].vsid: must not be the number -1 (want uint32)"},
		{KindHost, `{"name": "h1", "guests": {"name": "g1"}}`, "guests: must be a JSON array, not an object"},
		{KindHost, `{"name": 7}`, "name: must not be the number 7"},
		{KindEdgeSet, `{"name": "p", "prefixes": ["198.51.100.0/33"]}`, "prefixes[0]: netip.ParsePrefix"},
		{KindEIP, `{"address": "198.51.100.7", "binding": {"host": "h1", "guest": "g1", "port": 80}}`, "binding.port: unknown field"},
		{KindEIP, `["198.51.100.7"]`, "must be a JSON object, not an array"},
		{KindEIP, `{"address": "198.51.100.7"} {}`, "trailing data"},
		{KindEIP, `{"address": `, "invalid JSON"},
		{KindAZ, `{"NAME": "az1"}`, `NAME: key "NAME" differs from field "name" only by case`},
		{KindService, `{"name": "web", "VIP": "198.51.100.7"}`, `VIP: key "VIP" differs from field "vip" only by case`},
		{KindHost, `{"name": "h1", "guests": [{"name": "g1", "Vsid": 5}]}`, `guests[0].Vsid: key "Vsid" differs from field "vsid"`},
		// encoding/json folds keys the Unicode way (bytes.EqualFold): "ſ"
		// (U+017F) is an "s", the Kelvin sign "K" a "k"; and a folded key
		// after the real one is a duplicate that would win.
		{KindEIP, `{"address": "198.51.100.7", "addreſs": "198.51.100.9"}`, `addreſs: key "addreſs" differs from field "address" only by case`},
		{KindService, `{"name": "web", "limits": {"synRate": 5, "synBurſt": 9}}`, `limits.synBurſt: key "synBurſt" differs from field "synBurst"`},
		{KindAZ, `{"name": "az1", "name": "az2"}`, "name: duplicate key"},
		{KindHost, `{"name": "h1", "guests": [{"name": "g1"}, {"name": "g2", "vsid": 5, "vsid": 6}]}`, "guests[1].vsid: duplicate key"},
		{KindHealth, `{"service": "web", "down": {"p": ["h1/g1"], "p": []}}`, "down.p: duplicate key"},
		{KindEIP, `{"address": "198.51.100.7"} }`, "trailing data"},
		{KindEIP, `{"address": "198.51.100.7"} x`, "trailing data"},
		{KindEIP, `{"address": "198.51.100.7"}  `, ""},
		{"firewalls", `{}`, `unknown kind "firewalls"`},
		{KindService, `{"name": "web", "pools": [{"name": "p", "backends": [{"host": "h1", "guest": "g1", "weight": -1}]}]}`, "pools[0].backends[0].weight: must not be the number -1"},
		{KindService, `{"name": "web", "pools": [{"name": "p", "health": {"type": "tcp", "interval": 2}}]}`, `pools[0].health.interval: a duration is a string such as "2s"`},
		{KindService, `{"name": "web", "pools": [{"name": "p", "health": {"type": "tcp", "interval": "2 s"}}]}`, `pools[0].health.interval: duration "2 s"`},
		{KindService, `{"name": "web", "listeners": [{"protocol": "tcp", "port": 70000}]}`, "listeners[0].port: must not be the number 70000 (want uint16)"},
		{KindHealth, `{"service": "web", "down": {"p": ["h1/g1"]}}`, ""},
	} {
		t.Run(tc.json, func(t *testing.T) {
			_, err := Decode(tc.kind, []byte(tc.json))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestCheckKeysDepth: the key walk bounds its own nesting, even on input
// that json.Valid has not vetted (unterminated or not).
func TestCheckKeysDepth(t *testing.T) {
	for _, in := range []string{
		`{"name":` + strings.Repeat("[", 100000),
		`{"name":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}",
		`{"name":` + strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100) + "}",
	} {
		err := checkKeys([]byte(in), reflect.TypeFor[AZ]())
		if err == nil || !strings.Contains(err.Error(), "nested deeper than 64") {
			t.Errorf("%.20q...: %v, want the depth error", in, err)
		}
	}
}

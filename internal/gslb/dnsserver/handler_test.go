package dnsserver

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/gslb"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/geo/mmdbtest"
)

var (
	vipEU  = netip.MustParseAddr("198.51.100.1")
	vipUS  = netip.MustParseAddr("198.51.100.2")
	vipAP  = netip.MustParseAddr("198.51.100.3")
	vip6EU = netip.MustParseAddr("2001:db8::1")
	vip6US = netip.MustParseAddr("2001:db8::2")
	vipW1  = netip.MustParseAddr("203.0.113.1")
	vipW3  = netip.MustParseAddr("203.0.113.2")
	vipF1  = netip.MustParseAddr("203.0.113.10")
	vipF2  = netip.MustParseAddr("203.0.113.11")
	vipF3  = netip.MustParseAddr("203.0.113.12")
)

func regionTargets() []gslb.Target {
	return []gslb.Target{
		{VIP: vipEU, Region: "eu", Lat: 50.1, Lon: 8.7, Order: 1},   // Frankfurt
		{VIP: vipUS, Region: "us", Lat: 40.7, Lon: -74.0, Order: 2}, // New York
		{VIP: vipAP, Region: "ap", Lat: 1.35, Lon: 103.8, Order: 3}, // Singapore
		{VIP: vip6EU, Region: "eu", Lat: 50.1, Lon: 8.7, Order: 1},
		{VIP: vip6US, Region: "us", Lat: 40.7, Lon: -74.0, Order: 2},
	}
}

func testConfig() gslb.Config {
	recs := []gslb.Record{
		{Name: "ns1", Type: "A", Value: "192.0.2.53"},
		{Name: "www", Type: "A", Value: "192.0.2.10"},
		{Name: "www", Type: "AAAA", Value: "2001:db8::10"},
		{Name: "alias", Type: "CNAME", Value: "www"},
		{Name: "@", Type: "MX", Value: "10 mail.example."},
		{Name: "@", Type: "TXT", Value: "v=spf1 -all"},
		{Name: "a.b", Type: "A", Value: "192.0.2.11"},
		{Name: "pathd", Type: "TXT", Value: "gslb name with a TXT too"},
	}
	for i := range 40 { // ~4 KB of TXT: over 512 and 1232 bytes
		recs = append(recs, gslb.Record{Name: "big", Type: "TXT", Value: fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 90))})
	}
	return gslb.Config{Zones: []gslb.Zone{{
		Origin: "Example.",
		SOA: gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 7,
			Refresh: 3600, Retry: 600, Expire: 86400, Minimum: 60},
		NS:      []string{"ns1.example.", "ns2.example."},
		Records: recs,
		GSLB: []gslb.GSLBRecord{
			{Name: "pathd", Policy: gslb.PolicyNearest, Targets: regionTargets()},
			{Name: "strict", Policy: gslb.PolicyNearest, AllDown: gslb.AllDownServfail, Targets: regionTargets()},
			{Name: "w", Policy: gslb.PolicyWeighted, Targets: []gslb.Target{
				{VIP: vipW1, Region: "eu", Weight: 1}, {VIP: vipW3, Region: "us", Weight: 3}}},
			{Name: "fo", Policy: gslb.PolicyFailover, TTL: 10, Targets: []gslb.Target{
				{VIP: vipF2, Region: "us", Order: 2, Lat: 40.7, Lon: -74},
				{VIP: vipF1, Region: "eu", Order: 1, Lat: 50.1, Lon: 8.7},
				{VIP: vipF3, Region: "ap", Order: 3, Lat: 1.35, Lon: 103.8}}},
			{Name: "fo-strict", Policy: gslb.PolicyFailover, AllDown: gslb.AllDownServfail, Targets: []gslb.Target{
				{VIP: vipF1, Region: "eu", Order: 1}}},
		},
	}}}
}

// testLocator is where the test clients are: a real geo.PrefixMap (longest
// match, scope = the covering prefix narrowed past more specific entries,
// and on a miss the uncovered range around the address) chained with a
// real MaxMind-format database written by mmdbtest that holds a London
// network with coordinates only (a prefix map always names a region) and
// two IPv6 networks: a New York /48 in region us and a Singapore /44 with
// coordinates only (region ap has no IPv6 target).
func testLocator(t testing.TB) *countingLocator {
	t.Helper()
	e := func(p, region string, lat, lon float64, coords bool) geo.PrefixEntry {
		return geo.PrefixEntry{Prefix: netip.MustParsePrefix(p), Region: region, Lat: lat, Lon: lon, HasCoords: coords}
	}
	m, err := geo.NewPrefixMap([]geo.PrefixEntry{
		e("198.18.1.0/24", "eu", 48.9, 2.35, true),     // Paris, region eu
		e("198.18.2.0/23", "us", 37.8, -122.4, true),   // San Francisco, region us
		e("198.18.4.0/24", "sa", -23.5, -46.6, true),   // São Paulo: no sa target
		e("198.18.8.0/22", "in", 19.1, 72.9, true),     // Mumbai: no in target
		e("127.0.0.0/8", "us", 37.8, -122.4, true),     // the test resolver
		e("2001:db8:100::/40", "eu", 48.9, 2.35, true), // IPv6 clients in Paris
	})
	if err != nil {
		t.Fatal(err)
	}
	w := mmdbtest.New("GeoIP2-City")
	london := mmdbtest.Record{"location": map[string]any{"latitude": 51.5, "longitude": -0.1}}
	if err := w.Insert(netip.MustParsePrefix("198.18.12.0/24"), london); err != nil {
		t.Fatal(err)
	}
	// IPv6 networks of the database (an IPv6 tree, as MaxMind's are):
	// clients in them get the network's length as their scope, not /128.
	// 2001:db8:8000::/33 is far from the prefix map's 2001:db8:100::/40,
	// so the map's miss around them is shorter than these networks.
	for _, n := range []struct {
		p   string
		rec mmdbtest.Record
	}{
		{"2001:db8:8000::/48", mmdbtest.City("us", "NA", "US", "New York", 5128581, 40.7, -74.0)},
		{"2001:db8:8100::/44", mmdbtest.Record{"location": map[string]any{"latitude": 1.35, "longitude": 103.8}}}, // Singapore, coordinates only
	} {
		if err := w.Insert(netip.MustParsePrefix(n.p), n.rec); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "london.mmdb")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	db, err := geo.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &countingLocator{Locator: geo.Chain{m, db}}
}

func testHandler(t testing.TB, down ...netip.Addr) (*Handler, *countingLocator) {
	t.Helper()
	c, err := gslb.Compile(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := testHealth{}
	for _, d := range down {
		h[d] = true
	}
	loc := testLocator(t)
	return NewHandler(c, loc, h), loc
}

func query(name string, qtype uint16, ecs string, id uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = id
	if ecs != "" {
		p := netip.MustParsePrefix(ecs)
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(1232)
		e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()}
		if p.Addr().Is6() {
			e.Family = 2
		}
		o.Option = append(o.Option, e)
		m.Extra = append(m.Extra, o)
	}
	return m
}

// answers renders the answer section as "TYPE value" strings.
func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		f := strings.SplitN(rr.String(), "\t", 5)
		out = append(out, dns.TypeToString[rr.Header().Rrtype]+" "+f[len(f)-1])
	}
	return out
}

// scope returns the ECS scope in m, -1 without an ECS option.
func scope(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*dns.EDNS0_SUBNET); ok {
				return int(s.SourceScope)
			}
		}
	}
	return -1
}

func TestHandlerTable(t *testing.T) {
	src := netip.MustParseAddr("127.0.0.1")
	unknownSrc := netip.MustParseAddr("192.0.2.200") // in no prefix
	tests := []struct {
		name  string
		q     string
		qtype uint16
		ecs   string
		src   netip.Addr
		down  []netip.Addr
		want  []string
		rcode int
		scope int  // -1: no ECS option in the answer
		soaNS bool // SOA in the authority section
		notAA bool
	}{
		// nearest, by region
		{name: "nearest region eu", q: "pathd.example.", ecs: "198.18.1.0/24", want: []string{"A 198.51.100.1"}, scope: 24},
		{name: "nearest region us", q: "pathd.example.", ecs: "198.18.3.0/24", want: []string{"A 198.51.100.2"}, scope: 23},
		{name: "nearest region us, host ECS /32", q: "pathd.example.", ecs: "198.18.3.77/32", want: []string{"A 198.51.100.2"}, scope: 23},
		{name: "nearest region down: distance from Paris", q: "pathd.example.", ecs: "198.18.1.0/24", down: []netip.Addr{vipEU}, want: []string{"A 198.51.100.2"}, scope: 24},
		// nearest, by distance
		{name: "distance: Sao Paulo → us", q: "pathd.example.", ecs: "198.18.4.0/24", want: []string{"A 198.51.100.2"}, scope: 24},
		{name: "distance: Mumbai → ap", q: "pathd.example.", ecs: "198.18.9.0/24", want: []string{"A 198.51.100.3"}, scope: 22},
		{name: "distance: Mumbai, ap down → eu", q: "pathd.example.", ecs: "198.18.9.0/24", down: []netip.Addr{vipAP}, want: []string{"A 198.51.100.1"}, scope: 22},
		{name: "scope longer than source (RFC 7871 §7.2.1)", q: "pathd.example.", ecs: "198.18.8.0/21", want: []string{"A 198.51.100.3"}, scope: 22},
		{name: "distance: London, coords only → eu", q: "pathd.example.", ecs: "198.18.12.0/24", want: []string{"A 198.51.100.1"}, scope: 24},
		// 198.19.0.0/16 is the uncovered range (198.18.0.0/16 holds entries).
		{name: "unknown client: lowest order, scope of the miss", q: "pathd.example.", ecs: "198.19.0.0/24", want: []string{"A 198.51.100.1"}, scope: 16},
		{name: "only one healthy: scope 0", q: "pathd.example.", ecs: "198.18.3.0/24", down: []netip.Addr{vipEU, vipUS}, want: []string{"A 198.51.100.3"}, scope: 0},
		{name: "no ECS: resolver address (us)", q: "pathd.example.", src: src, want: []string{"A 198.51.100.2"}, scope: -1},
		{name: "no ECS, unknown resolver: lowest order", q: "pathd.example.", src: unknownSrc, want: []string{"A 198.51.100.1"}, scope: -1},
		{name: "ECS source 0: resolver address, scope 0", q: "pathd.example.", ecs: "0.0.0.0/0", src: src, want: []string{"A 198.51.100.2"}, scope: 0},
		{name: "AAAA by ECS v6", q: "pathd.example.", qtype: dns.TypeAAAA, ecs: "2001:db8:100:100::/56", want: []string{"AAAA 2001:db8::1"}, scope: 40},
		// 2001:db8:200::/39 holds no entry (2001:db8:100::/40 is the
		// nearest): the uncovered range is the scope.
		{name: "AAAA unknown v6 client: scope of the miss", q: "pathd.example.", qtype: dns.TypeAAAA, ecs: "2001:db8:200::/48", want: []string{"AAAA 2001:db8::1"}, scope: 39},
		{name: "AAAA from a v4 ECS client in us", q: "pathd.example.", qtype: dns.TypeAAAA, ecs: "198.18.2.0/24", want: []string{"AAAA 2001:db8::2"}, scope: 23},
		{name: "query name case kept (0x20)", q: "PaThD.eXample.", ecs: "198.18.1.0/24", want: []string{"A 198.51.100.1"}, scope: 24},
		// all down
		{name: "all down: fail open to nearest", q: "pathd.example.", ecs: "198.18.3.0/24", down: []netip.Addr{vipEU, vipUS, vipAP}, want: []string{"A 198.51.100.2"}, scope: 23},
		{name: "all down: servfail", q: "strict.example.", ecs: "198.18.3.0/24", down: []netip.Addr{vipEU, vipUS, vipAP}, rcode: dns.RcodeServerFailure, scope: 0},
		{name: "servfail record with one up", q: "strict.example.", ecs: "198.18.3.0/24", down: []netip.Addr{vipEU, vipUS}, want: []string{"A 198.51.100.3"}, scope: 0},
		{name: "failover all down: servfail", q: "fo-strict.example.", down: []netip.Addr{vipF1}, rcode: dns.RcodeServerFailure, scope: -1},
		{name: "failover all down: fail open to nearest", q: "fo.example.", ecs: "198.18.9.0/24", down: []netip.Addr{vipF1, vipF2, vipF3}, want: []string{"A 203.0.113.12"}, scope: 22},
		// failover
		{name: "failover: order 1", q: "fo.example.", ecs: "198.18.3.0/24", want: []string{"A 203.0.113.10"}, scope: 0},
		{name: "failover: order 1 down → 2", q: "fo.example.", ecs: "198.18.3.0/24", down: []netip.Addr{vipF1}, want: []string{"A 203.0.113.11"}, scope: 0},
		{name: "failover: 1 and 2 down → 3", q: "fo.example.", down: []netip.Addr{vipF1, vipF2}, want: []string{"A 203.0.113.12"}, scope: -1},
		{name: "failover AAAA: no v6 targets → NODATA", q: "fo.example.", qtype: dns.TypeAAAA, ecs: "198.18.3.0/24", soaNS: true, scope: 0},
		// static, apex, negative
		{name: "SOA at apex", q: "example.", qtype: dns.TypeSOA, want: []string{"SOA ns1.example. hostmaster.example. 7 3600 600 86400 60"}, scope: -1},
		{name: "NS at apex", q: "example.", qtype: dns.TypeNS, want: []string{"NS ns1.example.", "NS ns2.example."}, scope: -1},
		{name: "MX at apex", q: "example.", qtype: dns.TypeMX, want: []string{"MX 10 mail.example."}, scope: -1},
		{name: "static A", q: "www.example.", ecs: "198.18.1.0/24", want: []string{"A 192.0.2.10"}, scope: 0},
		{name: "static AAAA", q: "www.example.", qtype: dns.TypeAAAA, want: []string{"AAAA 2001:db8::10"}, scope: -1},
		{name: "CNAME for A", q: "alias.example.", want: []string{"CNAME www.example."}, scope: -1},
		{name: "TXT beside a GSLB name", q: "pathd.example.", qtype: dns.TypeTXT, want: []string{`TXT "gslb name with a TXT too"`}, scope: -1},
		{name: "NODATA: A at apex", q: "example.", soaNS: true, scope: -1},
		{name: "NODATA: empty non-terminal", q: "b.example.", soaNS: true, scope: -1},
		{name: "NODATA: MX at a GSLB name", q: "pathd.example.", qtype: dns.TypeMX, ecs: "198.18.1.0/24", soaNS: true, scope: 0},
		{name: "NXDOMAIN", q: "nope.example.", rcode: dns.RcodeNameError, soaNS: true, scope: -1},
		{name: "NXDOMAIN below a GSLB name", q: "x.pathd.example.", ecs: "198.18.1.0/24", rcode: dns.RcodeNameError, soaNS: true, scope: 0},
		{name: "REFUSED outside zones", q: "example.org.", rcode: dns.RcodeRefused, notAA: true, scope: -1},
		{name: "REFUSED AXFR", q: "example.", qtype: dns.TypeAXFR, rcode: dns.RcodeRefused, notAA: true, scope: -1},
		{name: "ANY: RFC 8482 HINFO", q: "www.example.", qtype: dns.TypeANY, want: []string{`HINFO "RFC8482" ""`}, scope: -1},
		// malformed ECS → FORMERR (RFC 7871 §7.1.1)
		{name: "ECS bits beyond source prefix", q: "pathd.example.", ecs: "198.18.1.1/24", rcode: dns.RcodeFormatError, notAA: true, scope: -1},
		{name: "ECS v6 bits beyond source prefix", q: "pathd.example.", ecs: "2001:db8:100:1::/48", rcode: dns.RcodeFormatError, notAA: true, scope: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := testHandler(t, tt.down...)
			qt := tt.qtype
			if qt == 0 {
				qt = dns.TypeA
			}
			s := tt.src
			if !s.IsValid() {
				s = unknownSrc
			}
			resp := h.Answer(query(tt.q, qt, tt.ecs, 4242), s, false)
			if _, err := resp.Pack(); err != nil {
				t.Fatalf("response does not pack: %v", err)
			}
			if resp.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			}
			if got := answers(resp); !slices.Equal(got, tt.want) {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
			if got := scope(resp); got != tt.scope {
				t.Errorf("ECS scope %d, want %d", got, tt.scope)
			}
			hasSOA := len(resp.Ns) == 1 && resp.Ns[0].Header().Rrtype == dns.TypeSOA
			if hasSOA != tt.soaNS {
				t.Errorf("authority %v, want SOA: %v", resp.Ns, tt.soaNS)
			}
			if hasSOA && resp.Ns[0].Header().Ttl != 60 {
				t.Errorf("negative SOA TTL %d, want min(ttl, minimum) = 60", resp.Ns[0].Header().Ttl)
			}
			if resp.Authoritative == tt.notAA {
				t.Errorf("AA %v, want %v", resp.Authoritative, !tt.notAA)
			}
			if resp.RecursionAvailable || resp.Id != 4242 || !resp.Response {
				t.Errorf("header: RA %v id %d QR %v", resp.RecursionAvailable, resp.Id, resp.Response)
			}
			for _, rr := range resp.Answer {
				if rr.Header().Name != tt.q {
					t.Errorf("owner %q, want the query's spelling %q", rr.Header().Name, tt.q)
				}
			}
		})
	}
}

// TestWeightedSpread: over many queries (random-looking and sequential
// IDs), each target's share is within 2 points of its weight's share, and
// a down target gets nothing. Weighted answers do not depend on location.
func TestWeightedSpread(t *testing.T) {
	for _, tc := range []struct {
		name string
		down []netip.Addr
		want map[string]float64
	}{
		{"1:3", nil, map[string]float64{"A 203.0.113.1": 0.25, "A 203.0.113.2": 0.75}},
		{"heavy one down", []netip.Addr{vipW3}, map[string]float64{"A 203.0.113.1": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, loc := testHandler(t, tc.down...)
			counts := map[string]int{}
			const n = 20000
			for id := range n {
				r := h.Answer(query("w.example.", dns.TypeA, "198.18.1.0/24", uint16(id*7919)), netip.Addr{}, false)
				if scope(r) != 0 || len(r.Answer) != 1 {
					t.Fatalf("id %d: scope %d answer %v", id, scope(r), r.Answer)
				}
				counts[answers(r)[0]]++
			}
			for a, share := range tc.want {
				got := float64(counts[a]) / n
				if got < share-0.02 || got > share+0.02 {
					t.Errorf("%s: share %.3f, want %.2f±0.02 (counts %v)", a, got, share, counts)
				}
			}
			if len(counts) != len(tc.want) {
				t.Errorf("answers %v, want only %v", counts, tc.want)
			}
			if loc.calls.Load() != 0 {
				t.Errorf("weighted answers with healthy targets looked the client up %d times", loc.calls.Load())
			}
			// Deterministic per query ID: the TCP retry of a truncated
			// UDP query gets the same target.
			a := h.Answer(query("w.example.", dns.TypeA, "", 99), netip.Addr{}, false)
			b := h.Answer(query("w.example.", dns.TypeA, "", 99), netip.Addr{}, true)
			if !slices.Equal(answers(a), answers(b)) {
				t.Errorf("same id, different answers: %v %v", answers(a), answers(b))
			}
		})
	}
}

func TestMalformedQueries(t *testing.T) {
	h, _ := testHandler(t)
	two := query("pathd.example.", dns.TypeA, "", 1)
	two.Question = append(two.Question, two.Question[0])
	none := query("pathd.example.", dns.TypeA, "", 1)
	none.Question = nil
	twoOPT := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1)
	twoOPT.Extra = append(twoOPT.Extra, twoOPT.Extra[0])
	twoECS := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1)
	twoECS.Extra[0].(*dns.OPT).Option = append(twoECS.Extra[0].(*dns.OPT).Option, twoECS.Extra[0].(*dns.OPT).Option[0])
	badFam := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1)
	badFam.Extra[0].(*dns.OPT).Option[0].(*dns.EDNS0_SUBNET).Family = 3
	longPfx := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1)
	longPfx.Extra[0].(*dns.OPT).Option[0].(*dns.EDNS0_SUBNET).SourceNetmask = 33
	notify := query("example.", dns.TypeSOA, "", 1)
	notify.Opcode = dns.OpcodeNotify
	badVers := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1)
	badVers.Extra[0].(*dns.OPT).SetVersion(1)
	for _, tc := range []struct {
		name  string
		m     *dns.Msg
		rcode int
	}{
		{"two questions", two, dns.RcodeFormatError},
		{"no question", none, dns.RcodeFormatError},
		{"two OPT", twoOPT, dns.RcodeFormatError},
		{"two ECS", twoECS, dns.RcodeFormatError},
		{"ECS family 3", badFam, dns.RcodeFormatError},
		{"ECS v4 /33", longPfx, dns.RcodeFormatError},
		{"NOTIFY", notify, dns.RcodeNotImplemented},
		{"EDNS version 1", badVers, dns.RcodeBadVers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.Answer(tc.m, netip.Addr{}, false)
			if r.Rcode != tc.rcode || len(r.Answer) != 0 {
				t.Errorf("rcode %s answers %d, want %s", dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tc.rcode])
			}
			b, err := r.Pack()
			if err != nil {
				t.Fatal(err)
			}
			var back dns.Msg
			if err := back.Unpack(b); err != nil || back.Rcode != tc.rcode {
				t.Errorf("on the wire: rcode %s err %v", dns.RcodeToString[back.Rcode], err)
			}
		})
	}
	resp := query("pathd.example.", dns.TypeA, "", 1)
	resp.Response = true
	if r := h.Answer(resp, netip.Addr{}, false); r != nil {
		t.Errorf("answered a response: %v", r)
	}
	if h.Stats.FormErr.Load() != 6 {
		t.Errorf("FormErr counter %d, want 6", h.Stats.FormErr.Load())
	}
}

func TestTruncation(t *testing.T) {
	h, _ := testHandler(t)
	for _, tc := range []struct {
		name  string
		edns  uint16 // 0: no EDNS
		tcp   bool
		tc    bool
		limit int
	}{
		{"UDP no EDNS: 512", 0, false, true, 512},
		{"UDP EDNS 1232", 1232, false, true, 1232},
		{"UDP EDNS 65000 capped at 1232", 65000, false, true, 1232},
		{"UDP EDNS 100 treated as 512", 100, false, true, 512},
		{"TCP full", 0, true, false, MaxResponseSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := query("big.example.", dns.TypeTXT, "", 5)
			if tc.edns != 0 {
				q.SetEdns0(tc.edns, false)
			}
			r := h.Answer(q, netip.Addr{}, tc.tcp)
			b, err := r.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > tc.limit || r.Truncated != tc.tc {
				t.Errorf("%d bytes TC %v, want ≤ %d TC %v", len(b), r.Truncated, tc.limit, tc.tc)
			}
			if !tc.tc && len(r.Answer) != 40 {
				t.Errorf("%d answers over TCP, want 40", len(r.Answer))
			}
			if tc.edns != 0 && r.IsEdns0() == nil {
				t.Error("truncation dropped the OPT record")
			}
		})
	}
}

// TestLongestZone: a child zone on the same server answers for its names.
func TestLongestZone(t *testing.T) {
	cfg := testConfig()
	cfg.Zones = append(cfg.Zones, gslb.Zone{Origin: "sub.example.", NS: []string{"ns1.example."},
		SOA:     gslb.SOA{MName: "ns1.example.", RName: "h.example.", Serial: 99, Minimum: 30},
		Records: []gslb.Record{{Name: "x", Type: "A", Value: "192.0.2.99"}}})
	c, err := gslb.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(c, nil, nil)
	r := h.Answer(query("x.sub.example.", dns.TypeA, "", 1), netip.Addr{}, false)
	if got := answers(r); !slices.Equal(got, []string{"A 192.0.2.99"}) {
		t.Errorf("child zone answer %v", got)
	}
	r = h.Answer(query("y.sub.example.", dns.TypeA, "", 1), netip.Addr{}, false)
	if r.Rcode != dns.RcodeNameError || r.Ns[0].(*dns.SOA).Serial != 99 {
		t.Errorf("child zone NXDOMAIN: %v", r)
	}
	// No locator: nearest falls back to the failover order, scope 0.
	r = h.Answer(query("pathd.example.", dns.TypeA, "198.18.3.0/24", 1), netip.Addr{}, false)
	if got := answers(r); !slices.Equal(got, []string{"A 198.51.100.1"}) || scope(r) != 0 {
		t.Errorf("no locator: %v scope %d", got, scope(r))
	}
}

// TestHealthAndCatalogLive: the handler reads Health on every query (a
// VIP marked down leaves the very next answer) and serves a swapped
// Catalog at once.
func TestHealthAndCatalogLive(t *testing.T) {
	c, err := gslb.Compile(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	health := testHealth{}
	h := NewHandler(c, testLocator(t), health)
	ask := func() []string {
		return answers(h.Answer(query("pathd.example.", dns.TypeA, "198.18.1.0/24", 1), netip.Addr{}, false))
	}
	if got := ask(); !slices.Equal(got, []string{"A 198.51.100.1"}) {
		t.Fatalf("before: %v", got)
	}
	health[vipEU] = true
	if got := ask(); !slices.Equal(got, []string{"A 198.51.100.2"}) {
		t.Errorf("eu down: %v, want us (nearest to Paris after eu)", got)
	}
	delete(health, vipEU)
	cfg := testConfig()
	cfg.Zones[0].GSLB[0].Targets = cfg.Zones[0].GSLB[0].Targets[2:3]
	c2, err := gslb.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.SetCatalog(c2)
	if got := ask(); !slices.Equal(got, []string{"A 198.51.100.3"}) {
		t.Errorf("after SetCatalog: %v, want the only target left", got)
	}
}

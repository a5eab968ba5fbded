package dnsserver

import (
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// listenV6 skips the test when the machine has no IPv6 loopback (IPv6
// disabled in the kernel or the namespace).
func listenV6(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): these tests serve on [::1]", err)
	}
	ln.Close()
}

// TestDualStackRegionsOverIPv6: the real server listening on [::1],
// queried over IPv6 (UDP and TCP) with miekg/dns clients. The record
// pathd.example. has, per region, eu: v4 and v6, us: v4 and v6, ap: v4
// only (handler_test.go). A queries get v4 targets and AAAA queries v6
// ones; a v6 target down is not answered while the v4 target of its
// region still is; a client of a region without a v6 target gets the
// nearest region that has one (not NODATA); IPv6 clients located by the
// MaxMind database get the database network's length as the ECS scope,
// not /128; IPv4-mapped ECS clients are located as IPv4.
func TestDualStackRegionsOverIPv6(t *testing.T) {
	listenV6(t)
	up, _ := startServer(t, ServerConfig{Addr: "[::1]:0"})
	v6down, _ := startServer(t, ServerConfig{Addr: "[::1]:0"}, vip6EU)
	for _, s := range []*Server{up, v6down} {
		if a := s.UDPAddr().(*net.UDPAddr); a.IP.To4() != nil || !a.IP.IsLoopback() {
			t.Fatalf("UDP bound to %v, want [::1]", a)
		}
	}
	for _, tc := range []struct {
		name  string
		srv   *Server
		qtype uint16
		ecs   string
		want  string
		scope int // -1: no ECS option
	}{
		{"A, eu client (prefix map)", up, dns.TypeA, "198.18.1.0/24", "198.51.100.1", 24},
		{"AAAA, eu client (prefix map)", up, dns.TypeAAAA, "198.18.1.0/24", "2001:db8::1", 24},
		{"AAAA, eu IPv6 client (prefix map /40)", up, dns.TypeAAAA, "2001:db8:100:1::/64", "2001:db8::1", 40},
		// The database's IPv6 network is a /48: that is the scope, whatever
		// the source length (RFC 7871 §7.2.1 lets SCOPE exceed SOURCE).
		{"AAAA, us IPv6 client (database /48), source /56", up, dns.TypeAAAA, "2001:db8:8000:ff00::/56", "2001:db8::2", 48},
		{"AAAA, us IPv6 client (database /48), source /128", up, dns.TypeAAAA, "2001:db8:8000::77/128", "2001:db8::2", 48},
		// 2001:db8::/40 is in no network (the map's 2001:db8:100::/40 is
		// its neighbour): lowest order, the miss's length as scope.
		{"AAAA, IPv6 client in no network, source /32", up, dns.TypeAAAA, "2001:db8::/32", "2001:db8::1", 40},
		{"A, us IPv6 client (database /48)", up, dns.TypeA, "2001:db8:8000::/48", "198.51.100.2", 48},
		// Singapore: ap's v4 target for A; ap has no v6 target, so AAAA
		// gets the nearest region with one (eu), not NODATA.
		{"A, Singapore IPv6 client (database /44, coordinates)", up, dns.TypeA, "2001:db8:8100::/48", "198.51.100.3", 44},
		{"AAAA, Singapore IPv6 client: ap has no v6 → nearest v6 (eu)", up, dns.TypeAAAA, "2001:db8:8100::/48", "2001:db8::1", 44},
		{"AAAA, Singapore IPv4 client (prefix map Mumbai)", up, dns.TypeAAAA, "198.18.9.0/24", "2001:db8::1", 22},
		// Health per target: eu's v6 down, eu's v4 still answered.
		{"eu v6 down: A still eu v4", v6down, dns.TypeA, "2001:db8:100::/48", "198.51.100.1", 40},
		{"eu v6 down: AAAA us v6 (only v6 up: scope 0)", v6down, dns.TypeAAAA, "2001:db8:100::/48", "2001:db8::2", 0},
		{"eu v6 down: AAAA, Singapore → us (only v6 up: scope 0)", v6down, dns.TypeAAAA, "2001:db8:8100::/48", "2001:db8::2", 0},
		// ECS family 2 holding an IPv4-mapped address: located as IPv4
		// (198.18.1.0/24, eu), the scope the /24 inside ::ffff:0:0/96.
		{"A, IPv4-mapped ECS (family 2)", up, dns.TypeA, "::ffff:198.18.1.0/120", "198.51.100.1", 120},
		{"AAAA, IPv4-mapped ECS (family 2), us", up, dns.TypeAAAA, "::ffff:198.18.2.0/120", "2001:db8::2", 119},
	} {
		for _, proto := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				c := &dns.Client{Net: proto, Timeout: 2 * time.Second}
				addr := tc.srv.UDPAddr().String()
				if proto == "tcp" {
					addr = tc.srv.TCPAddr().String()
				}
				r, _, err := c.Exchange(query("pathd.example.", tc.qtype, tc.ecs, 77), addr)
				if err != nil {
					t.Fatalf("exchange with %s over %s: %v", addr, proto, err)
				}
				want := []string{dns.TypeToString[tc.qtype] + " " + tc.want}
				if r.Rcode != dns.RcodeSuccess || !r.Authoritative || !slices.Equal(answers(r), want) {
					t.Fatalf("%s AA %v answer %q, want NOERROR AA %q", dns.RcodeToString[r.Rcode], r.Authoritative, answers(r), want)
				}
				if got := scope(r); got != tc.scope {
					t.Errorf("ECS scope %d, want %d", got, tc.scope)
				}
			})
		}
	}
}

// TestIPv6ResolverLocated: without ECS, an IPv6 resolver's own address
// locates the client (the database's /48 here), and no ECS option is
// answered.
func TestIPv6ResolverLocated(t *testing.T) {
	h, loc := testHandler(t)
	for _, tc := range []struct {
		src   string
		qtype uint16
		want  string
	}{
		{"2001:db8:8000::53", dns.TypeAAAA, "AAAA 2001:db8::2"},
		{"2001:db8:8000::53", dns.TypeA, "A 198.51.100.2"},
		{"2001:db8:8100::53", dns.TypeA, "A 198.51.100.3"},
		{"2001:db8:8100::53", dns.TypeAAAA, "AAAA 2001:db8::1"},
	} {
		before := loc.calls.Load()
		r := h.Answer(query("pathd.example.", tc.qtype, "", 9), netip.MustParseAddr(tc.src), false)
		if got := answers(r); !slices.Equal(got, []string{tc.want}) || scope(r) != -1 {
			t.Errorf("from %s %s: %q scope %d, want %q without ECS", tc.src, dns.TypeToString[tc.qtype], got, scope(r), tc.want)
		}
		if loc.calls.Load() == before {
			t.Errorf("from %s: the resolver's address was not located", tc.src)
		}
	}
}

// TestNoV6TargetNoData: a record with no IPv6 target at all answers AAAA
// with NODATA (NOERROR, the SOA, no answer) over IPv6 transport, and the
// A query of the same name still answers.
func TestNoV6TargetNoData(t *testing.T) {
	listenV6(t)
	s, _ := startServer(t, ServerConfig{Addr: "[::1]:0"})
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.Exchange(query("fo.example.", dns.TypeAAAA, "2001:db8:8000::/48", 3), s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("AAAA of a v4-only record: %v, want NODATA with the SOA", r)
	}
	r, _, err = c.Exchange(query("fo.example.", dns.TypeA, "2001:db8:8000::/48", 4), s.UDPAddr().String())
	if err != nil || !slices.Equal(answers(r), []string{"A 203.0.113.10"}) {
		t.Fatalf("A of the same record: %v %v", r, err)
	}
}

// TestDigAAAAOverIPv6 runs the system's dig against the server on [::1]:
// AAAA over UDP and TCP, with an IPv6 ECS subnet whose answer's scope is
// the database network's /48.
func TestDigAAAAOverIPv6(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatal("dig is not installed: Debian package dnsutils (scripts/setup.sh test installs it)")
	}
	listenV6(t)
	up, _ := startServer(t, ServerConfig{Addr: "[::1]:0"})
	v6down, _ := startServer(t, ServerConfig{Addr: "[::1]:0"}, vip6EU)
	for _, tc := range []struct {
		srv       *Server
		args      []string
		want, ecs string
		qtype     string
	}{
		{srv: up, args: []string{"+subnet=2001:db8:8000::/56"}, qtype: "AAAA", want: "2001:db8::2", ecs: "2001:db8:8000::/56/48"},
		{srv: up, args: []string{"+tcp", "+subnet=2001:db8:8000::/56"}, qtype: "AAAA", want: "2001:db8::2", ecs: "2001:db8:8000::/56/48"},
		{srv: up, args: []string{"+subnet=2001:db8:8000::/56"}, qtype: "A", want: "198.51.100.2", ecs: "2001:db8:8000::/56/48"},
		// eu client: eu's v6 is down → us v6 (the only v6 up: scope 0);
		// eu's v4 is still answered.
		{srv: v6down, args: []string{"+subnet=2001:db8:100::/48"}, qtype: "AAAA", want: "2001:db8::2", ecs: "2001:db8:100::/48/0"},
		{srv: v6down, args: []string{"+subnet=2001:db8:100::/48"}, qtype: "A", want: "198.51.100.1", ecs: "2001:db8:100::/48/40"},
	} {
		port := strconv.Itoa(tc.srv.UDPAddr().(*net.UDPAddr).Port)
		args := append([]string{"-6", "@::1", "-p", port, "+norec", "+time=2", "+tries=1"}, tc.args...)
		args = append(args, "pathd.example.", tc.qtype)
		out, err := exec.Command(dig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		o := string(out)
		if !strings.Contains(o, "status: NOERROR") || !strings.Contains(o, " aa") ||
			!strings.Contains(o, "IN\t"+tc.qtype+"\t"+tc.want) || !strings.Contains(o, "CLIENT-SUBNET: "+tc.ecs) ||
			!strings.Contains(o, "SERVER: ::1#"+port) {
			t.Errorf("dig %v: want %s %s with ECS %s from ::1, got:\n%s", args, tc.qtype, tc.want, tc.ecs, o)
		}
	}
}

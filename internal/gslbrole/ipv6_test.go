package gslbrole

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/probe"
)

// askType queries addr for name/qtype with an ECS subnet and returns the
// addresses answered.
func askType(t *testing.T, addr, name string, qtype uint16, subnet string) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	p := netip.MustParsePrefix(subnet)
	o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	o.SetUDPSize(1232)
	o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()})
	m.Extra = append(m.Extra, o)
	r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s %s: %v", name, dns.TypeToString[qtype], err)
	}
	var out []string
	for _, rr := range r.Answer {
		switch a := rr.(type) {
		case *dns.A:
			out = append(out, a.A.String())
		case *dns.AAAA:
			out = append(out, a.AAAA.String())
		}
	}
	return out
}

func waitType(t *testing.T, addr, name string, qtype uint16, subnet, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := askType(t, addr, name, qtype, subnet)
		if slices.Equal(got, []string{want}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s from %s: %v, want %s", name, dns.TypeToString[qtype], subnet, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRoleDualStack: a record with an IPv4 and an IPv6 VIP in each of
// two regions, created through the API and served by the running role
// listening on [::1]. The IPv6 VIPs (2001:db8::11 and ::12) are probed
// over IPv6: the monitor's dial takes [2001:db8::11]:PORT to a real
// listener of its own on [::1] (a test cannot own a documentation
// address outside a namespace). A queries get the region's v4 VIP, AAAA
// its v6 VIP; when eu's v6 listener closes, the probe's verdict takes
// eu's v6 VIP out of the AAAA answers (us's v6 instead) while eu's v4 VIP
// stays in the A answers.
func TestRoleDualStack(t *testing.T) {
	v6ln := func() net.Listener {
		ln, err := net.Listen("tcp6", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback here (%v)", err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	lnEU6, lnUS6 := v6ln(), v6ln()
	ctrl := startController(t)
	cl := client.New(ctrl.URL(), ctrl.Token())
	ctx := context.Background()
	_, port := listenSamePort(t, "127.0.0.11", "127.0.0.12")
	vipEU6, vipUS6 := netip.MustParseAddr("2001:db8::11"), netip.MustParseAddr("2001:db8::12")
	route := map[string]string{ // what the probes dial → the listener standing for it
		netip.AddrPortFrom(vipEU6, port).String(): lnEU6.Addr().String(),
		netip.AddrPortFrom(vipUS6, port).String(): lnUS6.Addr().String(),
	}
	var (
		mu     sync.Mutex
		dialed = map[string]bool{}
	)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := route[addr]; ok {
			mu.Lock()
			dialed[addr] = true
			mu.Unlock()
			addr = to
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	zone := &model.DNSZone{Name: "example", NS: []string{"ns1.example"},
		Records: []model.ZoneRecord{{Name: "ns1", Type: "A", Value: "192.0.2.53"}}}
	if _, err := cl.Create(ctx, zone); err != nil {
		t.Fatal(err)
	}
	eu6, us6 := targetEU, targetUS
	eu6.VIP, us6.VIP = vipEU6, vipUS6
	if _, err := cl.Create(ctx, record(port, targetEU, eu6, targetUS, us6)); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "gslb-1", Locator: testLocator(t)}
	cfg.Server.Addr = "[::1]:0"
	cfg.Monitor.Dial = dial
	r := startRole(t, ctrl.Store(), cfg)
	if ap := netip.MustParseAddrPort(r.addr); ap.Addr() != netip.IPv6Loopback() {
		t.Fatalf("role serving on %s, want [::1]", r.addr)
	}
	const eu, us = "198.51.100.0/24", "203.0.113.0/24"
	waitType(t, r.addr, "pathd.example.", dns.TypeA, eu, "127.0.0.11")
	waitType(t, r.addr, "pathd.example.", dns.TypeAAAA, eu, "2001:db8::11")
	waitType(t, r.addr, "pathd.example.", dns.TypeAAAA, us, "2001:db8::12")
	waitType(t, r.addr, "pathd.example.", dns.TypeA, us, "127.0.0.12")

	lnEU6.Close()
	var down probe.State
	deadline := time.After(10 * time.Second)
	for down.Key != "pathd.example/eu/ipv6" {
		select {
		case down = <-r.change:
		case <-deadline:
			t.Fatal("eu's v6 VIP never went down")
		}
	}
	if down.Up || down.Addr != vipEU6 {
		t.Fatalf("change %+v, want pathd.example/eu/ipv6 (2001:db8::11) down", down)
	}
	if got := askType(t, r.addr, "pathd.example.", dns.TypeAAAA, eu); !slices.Equal(got, []string{"2001:db8::12"}) {
		t.Errorf("AAAA for eu with eu's v6 down: %v, want us's 2001:db8::12", got)
	}
	if got := askType(t, r.addr, "pathd.example.", dns.TypeA, eu); !slices.Equal(got, []string{"127.0.0.11"}) {
		t.Errorf("A for eu with eu's v6 down: %v, want eu's v4 127.0.0.11 still", got)
	}
	if v := r.metric(t, "azgate_gslb_target_up", "source=combined,target=pathd.example/eu/ipv6,vip=2001:db8::11"); v != 0 {
		t.Errorf("eu/ipv6 up %v, want 0", v)
	}
	if v := r.metric(t, "azgate_gslb_target_up", "source=combined,target=pathd.example/eu,vip=127.0.0.11"); v != 1 {
		t.Errorf("eu (v4) up %v, want 1", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 2 {
		t.Errorf("probes dialed %v, want both IPv6 VIPs", dialed)
	}
}

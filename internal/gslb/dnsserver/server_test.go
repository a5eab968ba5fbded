package dnsserver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/gslb"

	"github.com/miekg/dns"
)

func startServer(t *testing.T, cfg ServerConfig, down ...netip.Addr) (*Server, *Handler) {
	t.Helper()
	h, _ := testHandler(t, down...)
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s := NewServer(cfg, h)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, h
}

// TestServerTruncatedThenTCP: a real dns.Client gets TC over UDP (no
// EDNS: 512 bytes), then the full answer over TCP on the same port.
func TestServerTruncatedThenTCP(t *testing.T) {
	s, h := startServer(t, ServerConfig{})
	if s.UDPAddr().(*net.UDPAddr).Port != s.TCPAddr().(*net.TCPAddr).Port {
		t.Fatalf("UDP %v and TCP %v on different ports", s.UDPAddr(), s.TCPAddr())
	}
	q := new(dns.Msg)
	q.SetQuestion("big.example.", dns.TypeTXT)
	udp := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := udp.Exchange(q, s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || len(r.Answer) >= 40 {
		t.Fatalf("UDP: TC %v with %d answers, want TC and fewer than 40", r.Truncated, len(r.Answer))
	}
	if b, _ := r.Pack(); len(b) > 512 {
		t.Errorf("UDP answer %d bytes, want ≤ 512", len(b))
	}
	tcp := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	r, _, err = tcp.Exchange(q, s.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 40 || !r.Authoritative {
		t.Errorf("TCP: TC %v AA %v with %d answers, want 40", r.Truncated, r.Authoritative, len(r.Answer))
	}
	if h.Stats.Truncated.Load() != 1 {
		t.Errorf("Truncated counter %d, want 1", h.Stats.Truncated.Load())
	}

	// A GSLB answer with ECS over UDP, through the real sockets.
	q = query("pathd.example.", dns.TypeA, "198.18.3.0/24", 7)
	r, _, err = udp.Exchange(q, s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := answers(r); !slices.Equal(got, []string{"A 198.51.100.2"}) || scope(r) != 23 {
		t.Errorf("UDP ECS answer %v scope %d, want us VIP with scope 23", got, scope(r))
	}
}

// TestServerMalformedECSOnWire: an ECS option miekg/dns cannot unpack
// (family 3) gets FORMERR from the server; one with bits set beyond the
// prefix gets FORMERR from the handler.
func TestServerMalformedECSOnWire(t *testing.T) {
	s, _ := startServer(t, ServerConfig{})
	good := query("pathd.example.", dns.TypeA, "198.18.1.0/24", 9)
	b, err := good.Pack()
	if err != nil {
		t.Fatal(err)
	}
	// The ECS option is the last 4+4+3 bytes: code, length, family,
	// source, scope, 3 address bytes. Patch the family.
	fam := len(b) - 3 - 4
	for _, tc := range []struct {
		name  string
		patch func([]byte)
	}{
		{"family 3", func(p []byte) { p[fam+1] = 3 }},
		{"bits beyond prefix", func(p []byte) { p[fam+2] = 20 }}, // 198.18.1/20: the 1 is beyond
		{"source 40 for IPv4", func(p []byte) { p[fam+2] = 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := slices.Clone(b)
			tc.patch(p)
			c, err := net.Dial("udp", s.UDPAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 2048)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			var r dns.Msg
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeFormatError || len(r.Answer) != 0 || r.Id != 9 {
				t.Errorf("rcode %s answers %d id %d, want FORMERR", dns.RcodeToString[r.Rcode], len(r.Answer), r.Id)
			}
		})
	}
}

// TestServerTCPLimits: connections beyond MaxTCPConns are closed at once
// and counted; an idle connection is closed after IdleTimeout.
func TestServerTCPLimits(t *testing.T) {
	s, _ := startServer(t, ServerConfig{MaxTCPConns: 2, MaxTCPConnsPerNet: 2, IdleTimeout: 300 * time.Millisecond})
	// Two connections, each asks one query and then stays idle.
	var held []*dns.Conn
	for range 2 {
		c, err := dns.Dial("tcp", s.TCPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if err := c.WriteMsg(query("www.example.", dns.TypeA, "", 1)); err != nil {
			t.Fatal(err)
		}
		if r, err := c.ReadMsg(); err != nil || len(r.Answer) != 1 {
			t.Fatalf("held connection query: %v %v", r, err)
		}
		held = append(held, c)
	}
	// Let the server accept both before the third arrives.
	time.Sleep(50 * time.Millisecond)
	c3, err := net.Dial("tcp", s.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	c3.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c3.Read(make([]byte, 1)); err == nil {
		t.Error("third connection was not closed")
	}
	if s.RejectedTCP() != 1 {
		t.Errorf("RejectedTCP %d, want 1", s.RejectedTCP())
	}
	// The held ones are idle: the server closes them after 300 ms (well
	// before the 2 s read timeout that applies to a first query).
	start := time.Now()
	held[0].SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err == nil || time.Since(start) > time.Second {
		t.Errorf("idle connection: err %v after %v, want closed by the server within 1 s", err, time.Since(start))
	}
	// Once they are gone a new connection is served.
	time.Sleep(100 * time.Millisecond)
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	r, _, err := c.Exchange(query("www.example.", dns.TypeA, "", 3), s.TCPAddr().String())
	if err != nil || len(r.Answer) != 1 {
		t.Errorf("after idle close: %v %v", r, err)
	}
}

// TestServerTCPPerNet: one source network cannot hold every TCP slot:
// beyond MaxTCPConnsPerNet its connections are closed at once and counted,
// while another network's are served. 127.0.0.1 and 127.0.0.2 share a /24;
// 127.0.1.1 is another one (all loopback).
func TestServerTCPPerNet(t *testing.T) {
	s, _ := startServer(t, ServerConfig{MaxTCPConns: 4, MaxTCPConnsPerNet: 2, IdleTimeout: 5 * time.Second})
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", s.TCPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ask := func(c net.Conn, id uint16) error {
		dc := &dns.Conn{Conn: c}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if err := dc.WriteMsg(query("www.example.", dns.TypeA, "", id)); err != nil {
			return err
		}
		r, err := dc.ReadMsg()
		if err == nil && len(r.Answer) != 1 {
			err = fmt.Errorf("answer %v", r)
		}
		return err
	}
	for i, from := range []string{"127.0.0.1", "127.0.0.2"} {
		if err := ask(dial(from), uint16(i+1)); err != nil {
			t.Fatalf("connection %d from %s: %v", i, from, err)
		}
	}
	if err := ask(dial("127.0.0.3"), 3); err == nil {
		t.Error("a third connection from one /24 was served (MaxTCPConnsPerNet 2)")
	}
	if s.RejectedTCP() != 1 {
		t.Errorf("RejectedTCP %d, want 1", s.RejectedTCP())
	}
	if err := ask(dial("127.0.1.1"), 4); err != nil {
		t.Errorf("a connection from another /24 while the first holds 2 of 4: %v", err)
	}
}

// TestDig runs the system's dig with +subnet against the real server.
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatal("dig is not installed: Debian package dnsutils (scripts/setup.sh test installs it)")
	}
	s, _ := startServer(t, ServerConfig{}, vipUS)
	port := s.UDPAddr().(*net.UDPAddr).Port
	for _, tc := range []struct {
		subnet, want, scope string
	}{
		{"198.18.3.0/24", "198.51.100.1", "/24/23"}, // San Francisco, us down: eu is nearer than ap
		{"198.18.9.0/24", "198.51.100.3", "/24/22"},
	} {
		out, err := exec.Command(dig, "@127.0.0.1", "-p", strconv.Itoa(port), "+subnet="+tc.subnet,
			"+norec", "+time=2", "+tries=1", "pathd.example.", "A").CombinedOutput()
		if err != nil {
			t.Fatalf("dig: %v\n%s", err, out)
		}
		o := string(out)
		if !strings.Contains(o, "status: NOERROR") || !strings.Contains(o, " aa") ||
			!strings.Contains(o, "IN\tA\t"+tc.want) || !strings.Contains(o, "CLIENT-SUBNET: "+strings.Split(tc.subnet, "/")[0]+tc.scope) {
			t.Errorf("dig +subnet=%s: want %s with scope %s, got:\n%s", tc.subnet, tc.want, tc.scope, o)
		}
	}
	// NXDOMAIN with the SOA, through dig.
	out, err := exec.Command(dig, "@127.0.0.1", "-p", strconv.Itoa(port), "+norec", "+time=2", "+tries=1", "nope.example.", "A").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "status: NXDOMAIN") || !strings.Contains(string(out), "SOA\tns1.example.") {
		t.Errorf("dig NXDOMAIN: %v\n%s", err, out)
	}
}

// flipHealth is TEST CODE: a concurrency-safe Health with eu down when set.
type flipHealth struct{ euDown atomic.Bool }

func (f *flipHealth) Up(a netip.Addr) bool { return a != vipEU || !f.euDown.Load() }

// TestServerConcurrent: parallel clients over UDP and TCP while health
// flips and the catalog is swapped; every answer is one of the valid ones.
// Run with -race.
func TestServerConcurrent(t *testing.T) {
	c, err := gslb.Compile(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	fh := &flipHealth{}
	h := NewHandler(c, testLocator(t), fh)
	s := NewServer(ServerConfig{Addr: "127.0.0.1:0"}, h)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			fh.euDown.Store(i%2 == 0)
			h.SetCatalog(c)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			proto, addr := "udp", s.UDPAddr().String()
			if g%2 == 1 {
				proto, addr = "tcp", s.TCPAddr().String()
			}
			cl := &dns.Client{Net: proto, Timeout: 2 * time.Second}
			for i := range 100 {
				r, _, err := cl.Exchange(query("pathd.example.", dns.TypeA, "198.18.1.0/24", uint16(g*1000+i)), addr)
				if err != nil {
					errs <- err.Error()
					return
				}
				got := answers(r)
				if len(got) != 1 || (got[0] != "A 198.51.100.1" && got[0] != "A 198.51.100.2") || scope(r) != 24 {
					errs <- fmt.Sprintf("answer %v scope %d", got, scope(r))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

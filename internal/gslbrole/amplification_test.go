package gslbrole

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
)

// amplification sends n queries with EDNS (1232 bytes) for a large TXT set
// to a real server on loopback from one socket, in rounds of 50 (so the
// sockets' buffers drop nothing), and returns the bytes sent and received
// and the answers that were not slips.
func amplification(t *testing.T, rrl RRL, n int) (in, out, full, fullBytes int, took time.Duration) {
	t.Helper()
	zone := gslb.Zone{Origin: "example.", NS: []string{"ns1.example."},
		SOA: gslb.SOA{MName: "ns1.example.", RName: "hostmaster.example.", Serial: 1, Minimum: 60}}
	for i := range 11 { // ~1150 bytes of TXT: under 1232, not truncated
		zone.Records = append(zone.Records, gslb.Record{Name: "big", Type: "TXT", Value: fmt.Sprintf("%02d-%s", i, strings.Repeat("x", 90))})
	}
	cat, err := gslb.Compile(gslb.Config{Zones: []gslb.Zone{zone}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dnsserver.ServerConfig{Addr: "127.0.0.1:0"}
	if l := newRateLimiter(rrl); l != nil {
		cfg.Allow = l.Allow
	}
	s := dnsserver.NewServer(cfg, dnsserver.NewHandler(cat, nil, nil))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	c, err := net.Dial("udp", s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion("big.example.", dns.TypeTXT)
	q.SetEdns0(1232, false)
	buf := make([]byte, 65536)
	start := time.Now()
	for sent := 0; sent < n; {
		for range min(50, n-sent) {
			q.Id = uint16(sent + 1)
			b, err := q.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			in += len(b)
			sent++
		}
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			k, err := c.Read(buf)
			if err != nil {
				break
			}
			out += k
			var m dns.Msg
			if err := m.Unpack(buf[:k]); err != nil {
				t.Fatal(err)
			}
			if !m.Truncated {
				full++
				fullBytes = k
			}
		}
	}
	return in, out, full, fullBytes, time.Since(start)
}

// TestAmplificationCapped: a flood of queries for a large record set from
// one client network. Without RRL (the default before it) every query is
// answered in full, about 30 times its size; with the default RRL the
// answers are capped at the rate over the flood's duration plus the
// window, and bytes out / bytes in stays small.
func TestAmplificationCapped(t *testing.T) {
	const n = 1000
	in, out, full, _, _ := amplification(t, RRL{}, n)
	off := float64(out) / float64(in)
	t.Logf("RRL off: %d queries, %d bytes in, %d bytes out (%.1fx), %d full answers", n, in, out, off, full)
	if off < 20 {
		t.Errorf("without RRL the amplification is %.1fx: the test's record set is not large", off)
	}
	in, out, full, size, took := amplification(t, DefaultRRL, n)
	on := float64(out) / float64(in)
	t.Logf("default RRL: %d queries in %v, %d bytes in, %d bytes out (%.2fx), %d full answers", n, took.Round(time.Millisecond), in, out, on, full)
	// At most the window's depth plus the rate over the flood's time (a
	// loaded machine makes the flood longer, so the bound follows it);
	// the rest are slips (a header and the question: the query's size
	// less its OPT record) on every other one, or nothing.
	maxFull := DefaultRRL.ResponsesPerSecond*int(DefaultRRL.Window/time.Second) + int(float64(DefaultRRL.ResponsesPerSecond)*took.Seconds()) + 1
	if full > maxFull {
		t.Errorf("%d full answers in %v, want at most %d", full, took, maxFull)
	}
	qsize := in / n
	bound := float64(maxFull*size+(n-full)/DefaultRRL.Slip*qsize+qsize) / float64(in)
	if on > bound {
		t.Errorf("with RRL the amplification is %.2fx, want at most %.2fx", on, bound)
	}
	if on > off/5 {
		t.Errorf("with RRL %.2fx, without %.1fx: not capped", on, off)
	}
}

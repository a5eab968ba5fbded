package lab

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestEchoSocketRidesOutAStall: the servers' UDP echo socket keeps what
// arrives while the server is not scheduled. 4,000 datagrams reach it
// with nobody reading (1.25 s of the failover probes' 3,200 a second
// into one EIP's server); every one is then read. A socket with the
// default buffer (208 kB) holds about 200-250 of them (60 ms of the
// probes): it is shown dropping, so the test can tell.
func TestEchoSocketRidesOutAStall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: SO_RCVBUFFORCE past net.core.rmem_max")
	}
	const n = 4000
	burst := func(c *net.UDPConn) (got int) {
		t.Helper()
		s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		msg := make([]byte, 16)
		for i := 0; i < n; i++ {
			if _, err := s.Write(msg); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		buf := make([]byte, 2048)
		for {
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, _, err := c.ReadFrom(buf); err != nil {
				return got
			}
			got++
		}
	}

	c, err := listenEchoUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := burst(c); got != n {
		t.Errorf("echo socket: %d of %d datagrams sent while it was not read were kept", got, n)
	}

	plain, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if got := burst(plain); got == n {
		t.Logf("a socket with the default buffer kept all %d too (net.core.rmem_default raised?): this run shows nothing", n)
	} else {
		t.Logf("a socket with the default buffer kept %d of %d", got, n)
	}
}

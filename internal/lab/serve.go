package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netns"
)

// ServePorts are the ports every lab server (guests and DMZ servers)
// listens on: HTTP on 80 and 443 (plain HTTP: the lab shows port
// dispatch, not TLS), and a line echo on 7000 for long-lived connections.
var ServePorts = struct{ HTTP, HTTPAlt, Echo uint16 }{80, 443, 7000}

// Serve runs a lab server until ctx ends: GET / on the HTTP ports answers
// "hello from NAME" (":443" appended on 443); a connection to the echo
// port first receives "NAME\n" and then every line it sends, back; a UDP
// datagram to the echo port is answered with "NAME: " and the datagram
// (UDP health checks and probes tell the servers apart by it).
func Serve(ctx context.Context, name string, httpAddrs []string, echoAddr string) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(httpAddrs)+1)
	for _, a := range httpAddrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		suffix := ""
		if strings.HasSuffix(a, fmt.Sprintf(":%d", ServePorts.HTTPAlt)) {
			suffix = fmt.Sprintf(":%d", ServePorts.HTTPAlt)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s%s\n", name, suffix)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		go func() {
			<-ctx.Done()
			srv.Close()
		}()
	}
	if echoAddr != "" {
		ln, err := net.Listen("tcp", echoAddr)
		if err != nil {
			return err
		}
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go echo(ctx, c, name)
			}
		}()
		pc, err := listenEchoUDP(echoAddr)
		if err != nil {
			return err
		}
		go func() {
			<-ctx.Done()
			pc.Close()
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(append([]byte(name+": "), buf[:n]...), from)
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	wg.Wait()
	return nil
}

// EchoRcvBuf is the receive buffer the servers' UDP echo socket asks for
// (the kernel doubles it for its bookkeeping). The failover probes send
// 32 flows x 100 datagrams/s to one EIP's server: 3,200 datagrams/s into
// one socket, each costing the socket about 1 kB of buffer whatever its
// 16 bytes (1,076 B measured in the lab: TestFleetFailover's "stalled
// server" case). The default buffer (net.core.rmem_default, 208 kB) held
// about 200 of them, 60 ms: a server not scheduled for longer on a loaded
// machine (an edge restarting next to it is enough) dropped a burst
// (Udp RcvbufErrors in the guest), which the probes counted as the
// gateway's loss. The demo's 64 flows every 5 ms (12,800 a second) had
// 15 ms. 8 MB (16 MB with the kernel's share) hold about 15,000: over a
// second of the demo's probes.
const EchoRcvBuf = 8 << 20

// listenEchoUDP opens the UDP echo socket with EchoRcvBuf: forced past
// net.core.rmem_max when the process may (CAP_NET_ADMIN: the lab runs as
// root), else as large as rmem_max allows.
func listenEchoUDP(addr string) (*net.UDPConn, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	if err := setRcvBuf(c, EchoRcvBuf); err != nil {
		c.Close()
		return nil, fmt.Errorf("udp echo %s: %w", addr, err)
	}
	return c, nil
}

// setRcvBuf sets a UDP socket's receive buffer to n bytes, with
// SO_RCVBUFFORCE if allowed, else SO_RCVBUF (capped by rmem_max).
func setRcvBuf(c *net.UDPConn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	if serr != nil {
		return c.SetReadBuffer(n)
	}
	return nil
}

func echo(ctx context.Context, c net.Conn, name string) {
	defer c.Close()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	fmt.Fprintf(c, "%s\n", name)
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if _, err := fmt.Fprintf(c, "%s\n", sc.Text()); err != nil {
			return
		}
	}
}

// StallServer stops a lab server's process (SIGSTOP) for d, as a loaded
// machine may leave it unscheduled, and returns how many bytes of buffer
// its UDP echo socket held at the end (the kernel's rx_queue, which counts
// each datagram's whole buffer, not its payload) before it goes on
// (SIGCONT).
func (l *Lab) StallServer(name string, d time.Duration) (queued uint64, err error) {
	n := l.Topo.Node(name)
	if n == nil || n.Process == nil || (n.Role != "guest" && n.Role != "server") || !alive(n.Process.PID) {
		return 0, fmt.Errorf("no running server on %q", name)
	}
	pid := n.Process.PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return 0, err
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	time.Sleep(d)
	err = netns.Do(n.Netns, func() error {
		// The echo socket may be IPv6 (dual-stack): both tables.
		b4, err := os.ReadFile("/proc/thread-self/net/udp")
		if err != nil {
			return err
		}
		b6, _ := os.ReadFile("/proc/thread-self/net/udp6")
		port := fmt.Sprintf(":%04X", ServePorts.Echo)
		lines := append(strings.Split(string(b4), "\n")[1:], strings.Split(string(b6), "\n")[1:]...)
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) < 5 || !strings.HasSuffix(f[1], port) {
				continue
			}
			_, rx, _ := strings.Cut(f[4], ":")
			v, err := strconv.ParseUint(rx, 16, 64)
			if err != nil {
				return fmt.Errorf("%s: udp rx_queue %q: %w", name, f[4], err)
			}
			queued += v
		}
		return nil
	})
	return queued, err
}

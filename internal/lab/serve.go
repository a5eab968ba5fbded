package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
// one socket, each frame delivered through the agent's XDP redirect
// costing about 4 kB of buffer (a page, whatever its 16 bytes). The
// default buffer (net.core.rmem_default, 208 kB) held about 16 ms of that:
// a server not scheduled for longer on a loaded machine (an edge
// restarting next to it is enough) dropped a burst of probes
// (Udp RcvbufErrors in the guest), which the probes counted as the
// gateway's loss. 4 MB hold over half a second.
const EchoRcvBuf = 4 << 20

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

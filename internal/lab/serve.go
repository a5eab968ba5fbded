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
		pc, err := net.ListenPacket("udp", echoAddr)
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

package gslbbench

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// TEMPORARY until the i11-probe merge: a minimal TCP-connect checker with
// internal/probe's contract semantics (initially up, down after Fall
// consecutive failures, up after Rise consecutive successes, one ticker
// per target). Replaced by probe.Monitor when internal/probe lands.
type tcpHealth struct {
	p    ProbeSettings
	vips []netip.Addr
	mu   sync.Mutex
	up   map[netip.Addr]bool
}

func newHealth(p ProbeSettings, vips []netip.Addr) (*tcpHealth, error) {
	h := &tcpHealth{p: p, vips: vips, up: map[netip.Addr]bool{}}
	for _, v := range vips {
		h.up[v] = true
	}
	return h, nil
}

func (h *tcpHealth) Up(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	up, ok := h.up[a]
	return up || !ok
}

func (h *tcpHealth) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, v := range h.vips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(h.p.Interval)
			defer t.Stop()
			ok, bad := 0, 0
			addr := net.JoinHostPort(v.String(), strconv.Itoa(int(h.p.Port)))
			for {
				d := net.Dialer{Timeout: h.p.Timeout}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					c.Close()
					ok, bad = ok+1, 0
				} else {
					ok, bad = 0, bad+1
				}
				h.mu.Lock()
				if ok >= h.p.Rise {
					h.up[v] = true
				} else if bad >= h.p.Fall {
					h.up[v] = false
				}
				h.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
}

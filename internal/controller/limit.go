package controller

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// maxHeaderBytes bounds a request's headers: the API's are a token, a
// content type and a few standard ones.
const maxHeaderBytes = 64 << 10

// connLimit caps one listener's open connections, like
// golang.org/x/net/netutil.LimitListener. Each listener has its own (the
// unix socket's is not shared with TCP: clients over TCP, who connect
// before any token is checked, cannot lock the local admin out). Accept
// waits for a slot after accepting (taking it before would let an idle
// listener hold one): at the cap the listener holds at most one accepted
// connection unserved, and the others wait in the kernel's listen backlog
// (refused by it once that is full) instead of each costing a goroutine
// and buffers.
//
// perSource > 0 also caps the connections from one source address (TCP):
// one beyond it is closed at once, so that one client cannot take every
// slot. Loopback clients (the CLI, the lab) all share 127.0.0.1, hence
// the generous default (see Config.MaxConnsPerSource).
type connLimit struct {
	slots     chan struct{}
	perSource int
	open      atomic.Int64
	waiting   atomic.Int64 // Accepts blocked on a slot (0 or 1)
	refused   atomic.Int64 // connections closed over the per-source cap

	mu     sync.Mutex
	source map[netip.Addr]int
}

func newConnLimit(n, perSource int) *connLimit {
	return &connLimit{slots: make(chan struct{}, n), perSource: perSource, source: map[netip.Addr]int{}}
}

// listener wraps ln so its connections count against the limit.
func (l *connLimit) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l, done: make(chan struct{})}
}

// sourceOf is a connection's source address; invalid for a unix socket's.
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// takeSource counts a connection from src; false if src is at its cap.
func (l *connLimit) takeSource(src netip.Addr) bool {
	if l.perSource <= 0 || !src.IsValid() {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.source[src] >= l.perSource {
		return false
	}
	l.source[src]++
	return true
}

func (l *connLimit) releaseSource(src netip.Addr) {
	if l.perSource <= 0 || !src.IsValid() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.source[src]--; l.source[src] <= 0 {
		delete(l.source, src)
	}
}

type limitListener struct {
	net.Listener
	l         *connLimit
	done      chan struct{}
	closeOnce sync.Once
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c)
		if !ll.l.takeSource(src) {
			// Closed, not kept waiting: waiting would stall the accept
			// loop for every other client.
			ll.l.refused.Add(1)
			c.Close()
			continue
		}
		select {
		case ll.l.slots <- struct{}{}:
		default:
			ll.l.waiting.Add(1)
			select {
			case ll.l.slots <- struct{}{}:
				ll.l.waiting.Add(-1)
			case <-ll.done:
				ll.l.waiting.Add(-1)
				ll.l.releaseSource(src)
				c.Close()
				return nil, net.ErrClosed
			}
		}
		ll.l.open.Add(1)
		return &limitConn{Conn: c, l: ll.l, src: src}, nil
	}
}

func (ll *limitListener) Close() error {
	ll.closeOnce.Do(func() { close(ll.done) })
	return ll.Listener.Close()
}

// limitConn gives its slot back when closed (once).
type limitConn struct {
	net.Conn
	l        *connLimit
	src      netip.Addr
	released atomic.Bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		c.l.releaseSource(c.src)
		c.l.open.Add(-1)
		<-c.l.slots
	}
	return err
}

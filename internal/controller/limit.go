package controller

import (
	"net"
	"sync"
	"sync/atomic"
)

// maxHeaderBytes bounds a request's headers: the API's are a token, a
// content type and a few standard ones.
const maxHeaderBytes = 64 << 10

// connLimit caps the API's open connections across its listeners, like
// golang.org/x/net/netutil.LimitListener does for one. Accept waits for a
// slot after accepting (taking it before would let an idle listener hold
// one): at the cap each listener holds at most one accepted connection
// unserved, and the others wait in the kernel's listen backlog (refused
// by it once that is full) instead of each costing a goroutine and
// buffers.
type connLimit struct {
	slots   chan struct{}
	open    atomic.Int64
	waiting atomic.Int64 // Accepts blocked on a slot (0 or 1 per listener)
}

func newConnLimit(n int) *connLimit { return &connLimit{slots: make(chan struct{}, n)} }

// listener wraps ln so its connections count against the limit.
func (l *connLimit) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l, done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	l         *connLimit
	done      chan struct{}
	closeOnce sync.Once
}

func (ll *limitListener) Accept() (net.Conn, error) {
	c, err := ll.Listener.Accept()
	if err != nil {
		return nil, err
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
			c.Close()
			return nil, net.ErrClosed
		}
	}
	ll.l.open.Add(1)
	return &limitConn{Conn: c, l: ll.l}, nil
}

func (ll *limitListener) Close() error {
	ll.closeOnce.Do(func() { close(ll.done) })
	return ll.Listener.Close()
}

// limitConn gives its slot back when closed (once).
type limitConn struct {
	net.Conn
	l        *connLimit
	released atomic.Bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		<-c.l.slots
	}
	return err
}

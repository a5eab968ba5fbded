package dnsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// ServerConfig is the listener side of the DNS server.
type ServerConfig struct {
	// Addr is host:port for both UDP and TCP. Port 0 picks a free TCP port
	// and binds UDP to the same one. A public authoritative server must be
	// reachable from the Internet: that is its job, so the limits below are
	// what protects it.
	Addr         string
	ReadTimeout  time.Duration // per message; 0 means 2 s
	WriteTimeout time.Duration // per message; 0 means 2 s
	// IdleTimeout closes a TCP connection with no query for this long
	// (RFC 7766 §6.2.3 suggests seconds); 0 means 10 s.
	IdleTimeout time.Duration
	// MaxTCPConns bounds open TCP connections; further ones are closed at
	// once and counted. 0 means 256.
	MaxTCPConns int
	// MaxTCPConnsPerNet bounds open TCP connections from one source
	// network (SourceNet: /24, /56), so one client holding connections
	// open cannot take every slot (TC=1 answers and rate-limit slips send
	// clients to TCP). 0 means MaxTCPConns/8, at least 1.
	MaxTCPConnsPerNet int
	// MaxTCPQueries bounds queries on one TCP connection; 0 means 128.
	MaxTCPQueries int
	// UDPSockets is how many UDP sockets share the port (SO_REUSEPORT),
	// each read by its own goroutine; the kernel spreads clients over
	// them. 0 or 1: one socket, no SO_REUSEPORT. One per GOMAXPROCS uses
	// every core (udp_linux.go).
	UDPSockets int
	// Allow, when set, is asked before every UDP answer resp (packed) is
	// sent to src (TCP is not asked: its source cannot be spoofed).
	// answer false drops it, or with slip sends an empty answer with TC=1
	// instead (the response rate limit, RRL, of internal/gslbrole).
	Allow func(src netip.Addr, resp []byte) (answer, slip bool)
}

// Server runs a Handler on UDP (batched, udp_linux.go) and TCP
// (miekg/dns) listeners.
type Server struct {
	cfg     ServerConfig
	h       dns.Handler
	udp     *udpServer
	tcp     *dns.Server
	tcpLn   *limitListener
	wg      sync.WaitGroup
	errs    chan error
	started bool
}

// NewServer returns a server for h; Start opens the listeners.
func NewServer(cfg ServerConfig, h dns.Handler) *Server {
	d := func(v, def time.Duration) time.Duration {
		if v <= 0 {
			return def
		}
		return v
	}
	cfg.ReadTimeout = d(cfg.ReadTimeout, 2*time.Second)
	cfg.WriteTimeout = d(cfg.WriteTimeout, 2*time.Second)
	cfg.IdleTimeout = d(cfg.IdleTimeout, 10*time.Second)
	if cfg.MaxTCPConns <= 0 {
		cfg.MaxTCPConns = 256
	}
	if cfg.MaxTCPConnsPerNet <= 0 {
		cfg.MaxTCPConnsPerNet = max(cfg.MaxTCPConns/8, 1)
	}
	if cfg.MaxTCPQueries <= 0 {
		cfg.MaxTCPQueries = 128
	}
	idle := cfg.IdleTimeout
	mk := func() *dns.Server {
		return &dns.Server{Handler: h, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
			IdleTimeout: func() time.Duration { return idle }, MaxTCPQueries: cfg.MaxTCPQueries,
			UDPSize: MaxUDPSize, DecorateReader: func(r dns.Reader) dns.Reader {
				gh, _ := h.(*Handler)
				return tcpReader{Reader: r, h: gh, max: cfg.MaxTCPQueries, wtimeout: cfg.WriteTimeout}
			}}
	}
	return &Server{cfg: cfg, h: h, tcp: mk(), errs: make(chan error, 2)}
}

// Start binds TCP then UDP on the same port and serves until Shutdown.
func (s *Server) Start() error {
	if s.started {
		return errors.New("gslb server: already started")
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("gslb server: listen tcp %s: %w", s.cfg.Addr, err)
	}
	u, err := listenUDP(s.cfg, ln.Addr().String(), s.h)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gslb server: %w", err)
	}
	s.udp = u
	s.tcpLn = &limitListener{Listener: ln, max: s.cfg.MaxTCPConns, perNet: s.cfg.MaxTCPConnsPerNet, open: map[netip.Prefix]int{}}
	s.tcp.Listener = s.tcpLn
	u.start()
	var ready sync.WaitGroup
	for _, srv := range []*dns.Server{s.tcp} {
		ready.Add(1)
		var once sync.Once
		srv.NotifyStartedFunc = func() { once.Do(ready.Done) }
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.ActivateAndServe(); err != nil {
				once.Do(ready.Done)
				s.errs <- err
			}
		}()
	}
	ready.Wait()
	s.started = true
	select {
	case err := <-s.errs:
		_ = s.Shutdown(context.Background())
		return fmt.Errorf("gslb server: %w", err)
	default:
	}
	return nil
}

// UDPAddr and TCPAddr are the bound addresses (useful with port 0).
func (s *Server) UDPAddr() net.Addr { return s.udp.laddr }

// UDPStats are the UDP loops' counters.
func (s *Server) UDPStats() *UDPStats { return &s.udp.stats }

// TCPAddr is the bound TCP address.
func (s *Server) TCPAddr() net.Addr { return s.tcpLn.Addr() }

// RejectedTCP counts TCP connections closed because MaxTCPConns were open
// (or MaxTCPConnsPerNet from the client's network).
func (s *Server) RejectedTCP() uint64 { return uint64(s.tcpLn.rejected.Load()) }

// Shutdown stops both listeners and waits for the serve loops to end.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.started {
		return nil
	}
	s.started = false
	err := errors.Join(s.udp.shutdown(ctx), s.tcp.ShutdownContext(ctx))
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// Source networks: what one client is taken to control (an IPv4 /24, an
// IPv6 /56, the usual end-site assignments). The TCP connection bound and
// the role's UDP rate limit count per source network.
const (
	SourceNetV4Bits = 24
	SourceNetV6Bits = 56
)

// SourceNet is a's source network.
func SourceNet(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := SourceNetV6Bits
	if a.Is4() {
		bits = SourceNetV4Bits
	}
	p, _ := a.Prefix(bits)
	return p
}

// limitListener closes connections beyond max, or beyond perNet from one
// source network, at once (instead of letting them wait in the backlog
// like x/net/netutil.LimitListener), so a client holding connections open
// can neither queue everyone else nor take every slot; the idle timeout
// reclaims the held ones.
type limitListener struct {
	net.Listener
	max, perNet int
	mu          sync.Mutex
	active      int
	open        map[netip.Prefix]int // by source network
	rejected    atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var src netip.Prefix
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			src = SourceNet(a.AddrPort().Addr())
		}
		l.mu.Lock()
		ok := l.active < l.max && l.open[src] < l.perNet
		if ok {
			l.active++
			l.open[src]++
		}
		l.mu.Unlock()
		if !ok {
			l.rejected.Add(1)
			c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l, src: src}, nil
	}
}

func (l *limitListener) done(src netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active--
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

type countedConn struct {
	net.Conn
	l    *limitListener
	src  netip.Prefix
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.done(c.src) })
	return c.Conn.Close()
}

// tcpReader answers the queries earlyReject rejects itself, as the UDP
// path does, and hands the others to miekg/dns's server (whose own
// rejections carry no OPT record and keep AD and CD). miekg/dns reads and
// answers one query at a time on a connection, so writing here does not
// race its writes. Rejected queries count against MaxTCPQueries.
type tcpReader struct {
	dns.Reader
	h        *Handler // nil: not counted
	max      int
	wtimeout time.Duration
}

func (r tcpReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	for range r.max {
		m, err := r.Reader.ReadTCP(conn, timeout)
		if err != nil {
			return m, err
		}
		resp, kind := earlyReject(m, nil) // allocates only to reject
		if kind == rejectNone || kind == rejectIgnore {
			return m, nil // ignored ones: miekg/dns ignores them too
		}
		if r.h != nil {
			r.h.countReject(kind)
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		out = append(out, resp...)
		if err := conn.SetWriteDeadline(time.Now().Add(r.wtimeout)); err != nil {
			return nil, err
		}
		if _, err := conn.Write(out); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("gslb tcp: query limit reached on one connection")
}

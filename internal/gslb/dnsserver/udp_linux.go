//go:build linux

package dnsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The UDP side of Server (TCP stays on miekg/dns's server). miekg/dns reads
// and writes one datagram per system call and starts a goroutine per
// query; at the rates an authoritative server sees, those two and the
// unpack/pack of every message were most of the CPU (docs/bench-gslb.md,
// "Where azgate's CPU goes"). Here each socket has one goroutine that
// reads up to udpBatch datagrams with one recvmmsg(2), answers them in
// place into buffers it owns and sends the answers with one sendmmsg(2).
// Common queries are answered by the wire-level fast path (fastpath.go)
// without allocating; everything else goes through the same steps as
// miekg/dns's server (reference), which stays the definition of the
// answers.

// udpBatch is how many datagrams one system call moves. 32 covers the
// bursts a loaded server sees; the buffers are 32 × ~1.4 KB per socket.
const udpBatch = 32

// maxUDPSockets bounds ServerConfig.UDPSockets (each holds ~80 KB of
// buffers and a goroutine).
const maxUDPSockets = 256

// UDPStats counts what the UDP loop dropped before the handler.
type UDPStats struct {
	Oversize    atomic.Uint64 // datagrams over MaxUDPSize (cut by the kernel): not answered
	Short       atomic.Uint64 // datagrams shorter than a DNS header: not answered
	WriteErrors atomic.Uint64 // answers the kernel refused or that timed out (WriteTimeout)
	Fast        atomic.Uint64 // answers built by the wire-level fast path
	Reads       atomic.Uint64 // recvmmsg calls that returned datagrams (datagrams / Reads = batch size)
}

// mmsghdr is struct mmsghdr (linux/socket.h).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

type udpServer struct {
	h       dns.Handler
	fast    *Handler // h when it is a *Handler: the fast path needs its catalog
	allow   func(netip.Addr, []byte) (bool, bool)
	laddr   *net.UDPAddr
	loops   []*udpLoop
	wg      sync.WaitGroup
	stats   UDPStats
	closing atomic.Bool
	// woken is closed when shutdown has called shutdown(2) on every
	// socket: a loop closes its socket only then, so that call never
	// meets a descriptor number already reused by another file.
	woken chan struct{}
}

// udpRecvTimeout bounds a blocked read (SO_RCVTIMEO), so a loop notices
// Shutdown even if the wake-up by shutdown(2) were lost.
const udpRecvTimeout = time.Second

// udpBusyWait is how long a loop's read may block while it holds its P.
//
// A read is an ordinary system call (the runtime's entersyscall and
// exitsyscall around it) only when the socket was idle: then, with
// GOMAXPROCS=1, sysmon sees no idle P and, once the call has lasted a
// sysmon tick (20 µs), hands the P to another thread, which the read
// takes back when it returns: futex wake-ups and context switches on every
// read that waits, most of the difference to gdnsd in CPU per query
// (docs/bench-gslb.md, "Where azgate's CPU goes"). While queries keep
// coming the read is a raw system call instead, which keeps the P, with
// SO_RCVTIMEO at udpBusyWait so that other goroutines (TCP, probes,
// timers) wait at most that long while the socket is quiet; the loop also
// yields once per udpBusyWait while busy. A signal (the runtime asking to
// preempt this goroutine, e.g. to stop the world for the garbage
// collector) ends the read with EINTR (SO_RCVTIMEO makes recvmmsg not
// restartable, signal(7)) and the loop yields. A read that times out in
// this mode switches the socket back to the idle one (udpRecvTimeout).
const udpBusyWait = time.Millisecond

// listenUDP binds n sockets to addr (SO_REUSEPORT when n > 1: the kernel
// spreads queries over them by flow hash).
//
// The sockets are blocking file descriptors of our own, outside Go's
// network poller: each loop sleeps in recvmmsg(2) itself (MSG_WAITFORONE)
// instead of parking its goroutine and waking through epoll and the
// scheduler, which cost more than the read at high rates (a perf profile
// of the poller version spent 13 % of the server's CPU in context
// switches of the scheduler and netpoll). SO_SNDTIMEO is WriteTimeout.
func listenUDP(cfg ServerConfig, addr string, h dns.Handler) (*udpServer, error) {
	n := max(cfg.UDPSockets, 1)
	if n > maxUDPSockets {
		return nil, fmt.Errorf("UDPSockets %d: at most %d", n, maxUDPSockets)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("udp %s: %w", addr, err)
	}
	s := &udpServer{h: h, allow: cfg.Allow, woken: make(chan struct{})}
	s.fast, _ = h.(*Handler)
	for i := range n {
		fd, wildcard, err := udpSocket(ua, n > 1, cfg.WriteTimeout)
		if err != nil {
			s.closeFDs()
			return nil, fmt.Errorf("listen udp %s (socket %d of %d): %w", addr, i+1, n, err)
		}
		l := newUDPLoop(s, fd, wildcard)
		s.loops = append(s.loops, l)
		if s.laddr == nil {
			sa, err := unix.Getsockname(fd)
			if err != nil {
				s.closeFDs()
				return nil, fmt.Errorf("udp %s: getsockname: %w", addr, err)
			}
			s.laddr = udpAddrOf(sa)
			ua = &net.UDPAddr{IP: ua.IP, Port: s.laddr.Port, Zone: ua.Zone}
		}
	}
	return s, nil
}

// udpSocket opens and binds one blocking UDP socket. A wildcard address
// (or none) is dual-stack [::] as Go's net package binds it, and asks for
// each query's destination address (IP_PKTINFO, IPV6_RECVPKTINFO) so the
// answer leaves from it, as miekg/dns does: a multi-homed host must not
// answer from another address than the one asked.
func udpSocket(ua *net.UDPAddr, reuse bool, wtime time.Duration) (int, bool, error) {
	var fam int
	var sa unix.Sockaddr
	wildcard := ua.IP == nil || ua.IP.IsUnspecified()
	switch ip4 := ua.IP.To4(); {
	case wildcard:
		fam, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: ua.Port}
	case ip4 != nil:
		fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: ua.Port, Addr: [4]byte(ip4)}
	default:
		s6 := &unix.SockaddrInet6{Port: ua.Port, Addr: [16]byte(ua.IP.To16())}
		if ua.Zone != "" {
			ifi, err := net.InterfaceByName(ua.Zone)
			if err != nil {
				return -1, false, err
			}
			s6.ZoneId = uint32(ifi.Index)
		}
		fam, sa = unix.AF_INET6, s6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil && wildcard {
		// No IPv6 on this host: IPv4 only.
		fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: ua.Port}
		fd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return -1, false, err
	}
	fail := func(what string, err error) (int, bool, error) {
		unix.Close(fd)
		return -1, false, fmt.Errorf("%s: %w", what, err)
	}
	if fam == unix.AF_INET6 && wildcard {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
	}
	if reuse {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fail("SO_REUSEPORT", err)
		}
	}
	rt := unix.NsecToTimeval(udpRecvTimeout.Nanoseconds())
	wt := unix.NsecToTimeval(wtime.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &rt); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &wt); err != nil {
		return fail("SO_SNDTIMEO", err)
	}
	if wildcard {
		e4 := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		if fam == unix.AF_INET6 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				return fail("IPV6_RECVPKTINFO", err)
			}
		} else if e4 != nil {
			return fail("IP_PKTINFO", e4)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	return fd, wildcard, nil
}

func udpAddrOf(sa unix.Sockaddr) *net.UDPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.UDPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		ua := &net.UDPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				ua.Zone = ifi.Name
			}
		}
		return ua
	}
	return &net.UDPAddr{}
}

func (s *udpServer) start() {
	// A loop may hold its P in a blocked read (udpBusyWait) only when
	// every loop can have a P of its own: otherwise a quiet socket's read
	// would delay a busy one's.
	raw := len(s.loops) <= runtime.GOMAXPROCS(0)
	for _, l := range s.loops {
		l.rawOK = raw
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run()
			// Only here: no read can be using it, and shutdown is
			// done with the number.
			<-s.woken
			unix.Close(l.fd)
		}()
	}
}

// closeFDs closes the sockets of loops never started.
func (s *udpServer) closeFDs() {
	for _, l := range s.loops {
		unix.Close(l.fd)
	}
}

// shutdown wakes the loops (shutdown(2) on a UDP socket ends a blocked
// read; SO_RCVTIMEO is the backstop) and waits for them: they finish the
// batch in hand and close their sockets.
func (s *udpServer) shutdown(ctx context.Context) error {
	s.closing.Store(true)
	for _, l := range s.loops {
		_ = unix.Shutdown(l.fd, unix.SHUT_RD) // ENOTCONN on UDP, and it wakes readers
	}
	close(s.woken)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// udpLoop is one socket's reader and everything it reuses.
type udpLoop struct {
	s       *udpServer
	fd      int
	pktinfo bool // bound to a wildcard address: answer from the query's destination

	rx, tx   [udpBatch]mmsghdr
	rxv, txv [udpBatch]unix.Iovec
	names    [udpBatch]unix.RawSockaddrInet6
	in       [udpBatch][MaxUDPSize + 1]byte
	out      [udpBatch][]byte
	oob      [udpBatch][64]byte
	txoob    [udpBatch][64]byte
	nsent    int

	rawOK    bool // may use the raw read (udpServer.start)
	rawReads int  // raw reads that returned datagrams (tests: read after the loop ended)

	fp fastState
}

func newUDPLoop(s *udpServer, fd int, pktinfo bool) *udpLoop {
	l := &udpLoop{s: s, fd: fd, pktinfo: pktinfo}
	for i := range udpBatch {
		l.out[i] = make([]byte, 0, MaxUDPSize)
		l.rxv[i].Base = &l.in[i][0]
		l.rxv[i].SetLen(len(l.in[i]))
		l.rx[i].hdr.Name = (*byte)(unsafe.Pointer(&l.names[i]))
		l.rx[i].hdr.Iov = &l.rxv[i]
		l.rx[i].hdr.SetIovlen(1)
	}
	return l
}

func (l *udpLoop) run() {
	idle := true // the socket's SO_RCVTIMEO is udpRecvTimeout (as opened)
	yielded := time.Now()
	for !l.s.closing.Load() {
		for i := range udpBatch {
			h := &l.rx[i].hdr
			h.Namelen = uint32(unsafe.Sizeof(l.names[i]))
			h.Flags = 0
			if l.pktinfo {
				h.Control = &l.oob[i][0]
				h.SetControllen(len(l.oob[i]))
			}
		}
		// Blocks until one datagram is there, then takes what else is
		// queued, up to udpBatch. See udpBusyWait for why the read is a
		// raw system call while queries keep coming.
		var r uintptr
		var e unix.Errno
		if idle {
			r, _, e = unix.Syscall6(unix.SYS_RECVMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.rx[0])), udpBatch, unix.MSG_WAITFORONE, 0, 0)
		} else {
			r, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.rx[0])), udpBatch, unix.MSG_WAITFORONE, 0, 0)
		}
		if e != 0 {
			if e == unix.EBADF || e == unix.ENOTSOCK {
				return
			}
			if !idle && e == unix.EAGAIN {
				// udpBusyWait without a query: back to the read that
				// gives the P up, with the long timeout.
				idle = !l.setRecvTimeout(udpRecvTimeout)
			}
			// EAGAIN (SO_RCVTIMEO), EINTR (a signal: the runtime may be
			// asking for this goroutine, e.g. to stop the world), ICMP
			// errors: let the scheduler run, then read on.
			runtime.Gosched()
			yielded = time.Now()
			continue
		}
		if idle {
			idle = !l.rawOK || !l.setRecvTimeout(udpBusyWait)
		} else {
			l.rawReads++
		}
		n := int(r)
		l.s.stats.Reads.Add(1)
		l.nsent = 0
		for i := range n {
			l.serveOne(i)
		}
		l.send()
		if now := time.Now(); now.Sub(yielded) >= udpBusyWait {
			// Under a steady load the raw read rarely blocks: give the
			// other goroutines (TCP, probes, timers) their turn.
			runtime.Gosched()
			yielded = now
		}
	}
}

// setRecvTimeout sets the socket's SO_RCVTIMEO and reports whether it did.
func (l *udpLoop) setRecvTimeout(d time.Duration) bool {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	return unix.SetsockoptTimeval(l.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) == nil
}

// serveOne answers datagram i of the batch into tx[nsent].
func (l *udpLoop) serveOne(i int) {
	m := &l.rx[i]
	if m.hdr.Flags&unix.MSG_TRUNC != 0 || int(m.n) > MaxUDPSize {
		l.s.stats.Oversize.Add(1)
		return
	}
	src, ok := sockaddrAddr(&l.names[i], m.hdr.Namelen)
	if !ok {
		return
	}
	q := l.in[i][:m.n]
	resp := l.s.answer(q, src, l.out[i][:0], &l.fp)
	if resp == nil {
		return
	}
	l.out[i] = resp[:0] // keep a grown buffer
	j := l.nsent
	l.nsent++
	t := &l.tx[j]
	t.hdr.Name = m.hdr.Name
	t.hdr.Namelen = m.hdr.Namelen
	l.txv[j].Base = &resp[0]
	l.txv[j].SetLen(len(resp))
	t.hdr.Iov = &l.txv[j]
	t.hdr.SetIovlen(1)
	t.hdr.Control = nil
	t.hdr.SetControllen(0)
	if l.pktinfo {
		if c := replyPktinfo(l.oob[i][:m.hdr.Controllen], l.txoob[j][:]); c > 0 {
			t.hdr.Control = &l.txoob[j][0]
			t.hdr.SetControllen(c)
		}
	}
}

// send writes tx[:nsent]; a message the kernel refuses is skipped and
// counted. It first sends without waiting (MSG_DONTWAIT) as a raw system
// call: on loopback or a fast NIC sendmmsg does all the transmit work in
// our context, often longer than a sysmon tick, and as an ordinary system
// call the runtime would hand our P to another thread meanwhile (see
// udpBusyWait). Only a full socket buffer (EAGAIN) takes the ordinary,
// blocking call, which waits up to WriteTimeout (SO_SNDTIMEO); then the
// rest of the batch is dropped and counted.
func (l *udpLoop) send() {
	wait := false
	for first := 0; first < l.nsent; {
		var r uintptr
		var e unix.Errno
		if wait {
			r, _, e = unix.Syscall6(unix.SYS_SENDMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.tx[first])), uintptr(l.nsent-first), 0, 0, 0)
		} else {
			r, _, e = unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.tx[first])), uintptr(l.nsent-first), unix.MSG_DONTWAIT, 0, 0)
		}
		switch {
		case e == 0:
			first += int(r)
		case e == unix.EINTR:
		case e == unix.EAGAIN && !wait:
			wait = true
		case e == unix.EAGAIN, e == unix.EBADF, e == unix.ENOTSOCK:
			l.s.stats.WriteErrors.Add(uint64(l.nsent - first))
			return
		default:
			l.s.stats.WriteErrors.Add(1)
			first++
		}
	}
}

// sockaddrAddr reads the source address the kernel wrote.
func sockaddrAddr(sa *unix.RawSockaddrInet6, n uint32) (netip.Addr, bool) {
	switch sa.Family {
	case unix.AF_INET:
		if n < unix.SizeofSockaddrInet4 {
			return netip.Addr{}, false
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrFrom4(s4.Addr), true
	case unix.AF_INET6:
		if n < unix.SizeofSockaddrInet6 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16(sa.Addr).Unmap(), true
	}
	return netip.Addr{}, false
}

// replyPktinfo turns the query's IP_PKTINFO / IPV6_PKTINFO control message
// into the one that sends the answer from the query's destination address
// (interface left to routing, as miekg/dns does). It returns the control
// length written to out, 0 for none.
func replyPktinfo(oob, out []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		ln := int(h.Len)
		if ln < unix.SizeofCmsghdr || ln > len(oob) {
			return 0
		}
		data := oob[unix.CmsgLen(0):ln]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			in := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			sp := unix.CmsgSpace(unix.SizeofInet4Pktinfo)
			clear(out[:sp])
			oh := (*unix.Cmsghdr)(unsafe.Pointer(&out[0]))
			oh.Level, oh.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
			oh.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
			op := (*unix.Inet4Pktinfo)(unsafe.Pointer(&out[unix.CmsgLen(0)]))
			op.Spec_dst = in.Addr
			return sp
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			in := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			sp := unix.CmsgSpace(unix.SizeofInet6Pktinfo)
			clear(out[:sp])
			oh := (*unix.Cmsghdr)(unsafe.Pointer(&out[0]))
			oh.Level, oh.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
			oh.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
			op := (*unix.Inet6Pktinfo)(unsafe.Pointer(&out[unix.CmsgLen(0)]))
			op.Addr = in.Addr
			return sp
		}
		// The kernel pads every message but a cut last one; a cut one
		// ends the walk instead of slicing past oob.
		next := unix.CmsgSpace(ln - unix.CmsgLen(0))
		if next > len(oob) {
			return 0
		}
		oob = oob[next:]
	}
	return 0
}

// answer is the whole UDP message path for one datagram q from src: the
// fast path, else the reference path, then the response rate limit. It returns the
// answer's bytes (in out when they fit) or nil for no answer.
func (s *udpServer) answer(q []byte, src netip.Addr, out []byte, fp *fastState) []byte {
	if len(q) < 12 {
		s.stats.Short.Add(1)
		return nil // miekg/dns: "let client hang, they are sending crap"
	}
	if q[2]&0x80 != 0 {
		return nil // a response: never answered (no reflection loops)
	}
	var r []byte
	if s.fast != nil {
		if r = s.fast.fastAnswer(q, src, out, fp); r != nil {
			s.stats.Fast.Add(1)
		}
	}
	if r == nil {
		r = referenceAnswer(s.h, q, src, out)
	}
	// Response rate limiting is on answers (their class: name and type,
	// NXDOMAIN, error), so it is asked once the answer is built.
	if r != nil && s.allow != nil {
		ok, slip := s.allow(src, r)
		if !ok {
			if slip {
				return slipAnswer(q, out)
			}
			return nil
		}
	}
	return r
}

// slipAnswer is the rate limiter's empty answer with TC=1, which sends a
// real client to TCP: the query's ID, opcode and RD, its question when it
// is one plain (uncompressed) question, nothing else.
func slipAnswer(q, out []byte) []byte {
	out = append(out[:0], q[0], q[1], 0x80|q[2]&0x79|0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	if binary.BigEndian.Uint16(q[4:]) == 1 {
		if end, ok := plainName(q, 12); ok && end+4 <= len(q) {
			out[5] = 1
			out = append(out, q[12:end+4]...)
		}
	}
	return out
}

// plainName walks the uncompressed name at q[off:] and returns the offset
// after it.
func plainName(q []byte, off int) (int, bool) {
	start := off
	for off < len(q) {
		ln := int(q[off])
		if ln == 0 {
			return off + 1, off+1-start <= 255
		}
		if ln > 63 {
			return 0, false
		}
		off += 1 + ln
	}
	return 0, false
}

// referenceAnswer answers q as miekg/dns's server and h do, after
// earlyReject: the default accept function (FORMERR, NOTIMP or silence
// for messages it refuses), Unpack (FORMERR when it fails), then h.ServeDNS with a writer that packs
// into out. It allocates; it is the definition the fast path is tested
// against (FuzzFastPath).
func referenceAnswer(h dns.Handler, q []byte, src netip.Addr, out []byte) []byte {
	// First what is rejected from the wire (reject.go), as for TCP; the
	// fast path answers only queries it passes.
	if r, kind := earlyReject(q, out); kind != rejectNone {
		if gh, ok := h.(*Handler); ok {
			gh.countReject(kind)
		}
		return r
	}
	dh := dns.Header{Id: binary.BigEndian.Uint16(q), Bits: binary.BigEndian.Uint16(q[2:]),
		Qdcount: binary.BigEndian.Uint16(q[4:]), Ancount: binary.BigEndian.Uint16(q[6:]),
		Nscount: binary.BigEndian.Uint16(q[8:]), Arcount: binary.BigEndian.Uint16(q[10:])}
	req := new(dns.Msg)
	action := dns.DefaultMsgAcceptFunc(dh)
	switch action {
	case dns.MsgAccept:
		if req.Unpack(q) == nil {
			w := &udpWriter{src: src, out: out}
			h.ServeDNS(w, req)
			return w.msg
		}
		fallthrough // Unpack set the header and what it could read
	case dns.MsgReject, dns.MsgRejectNotImplemented:
		if action != dns.MsgAccept {
			setHdr(req, dh)
		}
		opcode := req.Opcode
		req.SetRcodeFormatError(req)
		req.Zero = false
		if action == dns.MsgRejectNotImplemented {
			req.Opcode = opcode
			req.Rcode = dns.RcodeNotImplemented
		}
		req.Ns, req.Answer, req.Extra = nil, nil, nil
		b, err := req.PackBuffer(out[:cap(out)])
		if err != nil {
			return nil
		}
		return b
	}
	return nil // MsgIgnore
}

// setHdr is miekg/dns's Msg.setHdr (unexported): the header fields from
// the wire header.
func setHdr(m *dns.Msg, dh dns.Header) {
	m.Id = dh.Id
	m.Response = dh.Bits&(1<<15) != 0
	m.Opcode = int(dh.Bits>>11) & 0xF
	m.Authoritative = dh.Bits&(1<<10) != 0
	m.Truncated = dh.Bits&(1<<9) != 0
	m.RecursionDesired = dh.Bits&(1<<8) != 0
	m.RecursionAvailable = dh.Bits&(1<<7) != 0
	m.Zero = dh.Bits&(1<<6) != 0
	m.AuthenticatedData = dh.Bits&(1<<5) != 0
	m.CheckingDisabled = dh.Bits&(1<<4) != 0
	m.Rcode = int(dh.Bits & 0xF)
}

// udpWriter is the dns.ResponseWriter of the reference path: WriteMsg
// packs (as miekg/dns's writer does) into the loop's buffer.
type udpWriter struct {
	src netip.Addr
	out []byte
	msg []byte
}

func (w *udpWriter) LocalAddr() net.Addr { return &net.UDPAddr{} }
func (w *udpWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: w.src.AsSlice()}
}
func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.out[:cap(w.out)])
	if err != nil {
		return err
	}
	return w.set(b)
}
func (w *udpWriter) Write(b []byte) (int, error) {
	return len(b), w.set(append(w.out[:0], b...))
}
func (w *udpWriter) set(b []byte) error {
	if w.msg != nil {
		return errors.New("gslb udp: one answer per query")
	}
	w.msg = b
	return nil
}
func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}

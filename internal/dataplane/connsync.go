package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Connection sync (internal/connsync, docs/connsync.md): the edge program
// writes a ConnEvent into the ct_events ring buffer when it makes a
// connection entry or changes its TCP state (bpf/lib/lb.h ct_emit), while
// SetConnSync(true) holds; the members of an edge set stream the entries
// to each other and apply what they receive with ApplyConns.

// Event kinds (CT_EV_* in bpf/lib/consts.h).
const (
	ConnEventNew   = 1 // an entry made, or replaced with another backend
	ConnEventState = 2 // an entry's TCP state changed
)

// Connection states (CT_* in bpf/lib/consts.h).
const (
	ConnSYN = 1
	ConnEST = 2
	ConnFIN = 3
	ConnUDP = 4
)

// ConnKey is a connection-table key as the data plane stores it: the
// addresses and ports are the raw words of the map (network byte order in
// memory), so keys travel and compare without conversion. An IPv4 flow's
// key (lb_conns) has Src and Dst; an IPv6 VIP's flow (lb_conns6, issue
// 21) has V6 set and its addresses in Src6 and Dst6 (Src and Dst zero).
type ConnKey struct {
	Src, Dst     uint32
	Sport, Dport uint16
	Proto        uint8
	V6           bool
	Src6, Dst6   [4]uint32 // raw words of the 16-byte addresses (struct ip_addr)
}

// MakeConnKey builds a key from addresses and host-order ports (both of
// one family).
func MakeConnKey(src, dst netip.Addr, sport, dport uint16, proto uint8) ConnKey {
	if src.Is6() && !src.Is4In6() {
		s, _, _ := addrTo(src)
		d, _, _ := addrTo(dst)
		return ConnKey{V6: true, Src6: s.A, Dst6: d.A, Sport: be16(sport), Dport: be16(dport), Proto: proto}
	}
	return ConnKey{Src: ip4word(src), Dst: ip4word(dst), Sport: be16(sport), Dport: be16(dport), Proto: proto}
}

// Addrs returns the key's client and VIP with host-order ports.
func (k ConnKey) Addrs() (src, dst netip.AddrPort) {
	if k.V6 {
		return netip.AddrPortFrom(addrFrom(edgeIpAddr{A: k.Src6}, 10), be16(k.Sport)),
			netip.AddrPortFrom(addrFrom(edgeIpAddr{A: k.Dst6}, 10), be16(k.Dport))
	}
	return netip.AddrPortFrom(wordIP4(k.Src), be16(k.Sport)), netip.AddrPortFrom(wordIP4(k.Dst), be16(k.Dport))
}

func (k *ConnKey) ct6() edgeCtKey6 {
	var c edgeCtKey6
	c.Src.A, c.Dst.A = k.Src6, k.Dst6
	c.Sport, c.Dport, c.Proto = k.Sport, k.Dport, k.Proto
	return c
}

func connKey6(c *edgeCtKey6) ConnKey {
	return ConnKey{V6: true, Src6: c.Src.A, Dst6: c.Dst.A, Sport: c.Sport, Dport: c.Dport, Proto: c.Proto}
}

func (k ConnKey) String() string {
	s, d := k.Addrs()
	return fmt.Sprintf("%v->%v/%d", s, d, k.Proto)
}

// ConnEvent is one record of the ring buffer (struct ct_event): the entry
// as this edge holds it (its backend slot and generation, jiffies).
type ConnEvent struct {
	Key        ConnKey
	Backend    uint16
	Gen        uint16
	Last       uint32 // jiffies (low 32 bits)
	State, FID uint8
	Kind       uint8
}

// ConnEventSize is the size of a ring-buffer record's payload (the ring
// adds an 8-byte header and rounds to 8: 40 bytes a record).
const ConnEventSize = 28

// ConnEvent6Size is an IPv6 VIP's record (struct ct_event6, ct_emit6): the
// 40-byte key, then the same 12 bytes; 64 bytes in the ring. The two share
// the ring and are told apart by their length.
const ConnEvent6Size = 52

func decodeConnEvent(b []byte, ev *ConnEvent) error {
	le := binary.LittleEndian
	switch len(b) {
	case ConnEventSize:
		ev.Key = ConnKey{Src: le.Uint32(b[0:]), Dst: le.Uint32(b[4:]), Sport: le.Uint16(b[8:]), Dport: le.Uint16(b[10:]), Proto: b[12]}
		b = b[16:]
	case ConnEvent6Size:
		ev.Key = ConnKey{V6: true, Sport: le.Uint16(b[32:]), Dport: le.Uint16(b[34:]), Proto: b[36]}
		for i := range 4 {
			ev.Key.Src6[i] = le.Uint32(b[4*i:])
			ev.Key.Dst6[i] = le.Uint32(b[16+4*i:])
		}
		b = b[40:]
	default:
		return fmt.Errorf("connection event: %d bytes, want %d or %d", len(b), ConnEventSize, ConnEvent6Size)
	}
	ev.Backend = le.Uint16(b[0:])
	ev.Gen = le.Uint16(b[2:])
	ev.Last = le.Uint32(b[4:])
	ev.State, ev.FID, ev.Kind = b[8], b[9], b[10]
	return nil
}

// ConnEventReader reads the connection events of one loaded edge.
type ConnEventReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
}

// OpenConnEvents opens the edge's connection-event ring buffer. One reader
// at a time: the ring has one consumer position.
func (e *Edge) OpenConnEvents() (*ConnEventReader, error) {
	r, err := ringbuf.NewReader(e.objs.CtEvents)
	if err != nil {
		return nil, fmt.Errorf("connection events: %w", err)
	}
	return &ConnEventReader{r: r}, nil
}

// ErrNoEvent is returned by Read when the deadline passed with no event.
var ErrNoEvent = os.ErrDeadlineExceeded

// Read reads the next event into ev, waiting until the deadline set with
// SetDeadline (ErrNoEvent) or Close (ErrClosed).
func (c *ConnEventReader) Read(ev *ConnEvent) error {
	if err := c.r.ReadInto(&c.rec); err != nil {
		if errors.Is(err, ringbuf.ErrClosed) {
			return ErrClosed
		}
		return err
	}
	return decodeConnEvent(c.rec.RawSample, ev)
}

// Buffered is how many bytes wait in the ring.
func (c *ConnEventReader) Buffered() int { return c.rec.Remaining }

// SetDeadline bounds the next Reads (zero: wait forever).
func (c *ConnEventReader) SetDeadline(t time.Time) { c.r.SetDeadline(t) }

// Close wakes a waiting Read and releases the ring.
func (c *ConnEventReader) Close() error { return c.r.Close() }

// ErrClosed is returned by a Read after Close.
var ErrClosed = errors.New("connection events: reader closed")

// SetConnSync switches the program's event writing on or off (the global
// ct_sync_on of the loaded object: a program loaded by a daemon that does
// not sync writes nothing).
func (e *Edge) SetConnSync(on bool) error {
	if e.objs.CtSyncOn == nil {
		return errors.New("connection sync: the edge program is not loaded (LoadEdgeMaps)")
	}
	var v uint32
	if on {
		v = 1
	}
	return e.objs.CtSyncOn.Set(v)
}

// ConnEventsLost is how many events the program could not write because
// the ring was full (since it was loaded).
func (e *Edge) ConnEventsLost() (uint64, error) {
	if e.objs.CtEventsLost == nil {
		return 0, errors.New("connection sync: the edge program is not loaded (LoadEdgeMaps)")
	}
	var v uint64
	err := e.objs.CtEventsLost.Get(&v)
	return v, err
}

// SyncedConn is a connection entry to write on this edge, already
// translated to it: Backend and Gen are this edge's slot, Last its
// jiffies. A nat-mode backend's entry also gets its reverse entry, as the
// data plane installs it: replies from BAddr:BPort (the backend's port, or
// the VIP's when the backend has none) to the client leave as from the VIP.
type SyncedConn struct {
	Key        ConnKey
	Backend    uint16
	Gen        uint16
	Last       uint32
	State, FID uint8
	NAT        bool
	BAddr      uint32    // raw word, as ConnKey
	BAddr6     [4]uint32 // an IPv6 VIP's (Key.V6) nat backend: raw words, as ConnKey's Src6
	BPort      uint16    // raw (network order), as ConnKey
}

// connBufs are ApplyConns' batch buffers (one caller at a time per buffer set).
type connBufs struct {
	keys   []edgeCtKey
	vals   []edgeCtEntry
	nkeys  []edgeNatRkey
	nvals  []edgeNatRentry
	keys6  []edgeCtKey6
	vals6  []edgeCtEntry
	nkeys6 []edgeNatRkey6
	nvals6 []edgeNatRentry6
}

// ApplyConns writes entries received from a peer (last writer wins: a
// flow is carried by one member at a time, the one whose events these
// are). Their listener generation is 0, which no current VIP has: the
// first packet of a taken-over flow finds its listener once, as after a
// listener change (bpf/lib/lb.h lb_decide). The writes are batched (one
// system call per map); an error leaves the entries written before it.
func (e *Edge) ApplyConns(cs []SyncedConn) error {
	if len(cs) == 0 {
		return nil
	}
	b := &e.syncBufs
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	b.keys, b.vals, b.nkeys, b.nvals = b.keys[:0], b.vals[:0], b.nkeys[:0], b.nvals[:0]
	b.keys6, b.vals6, b.nkeys6, b.nvals6 = b.keys6[:0], b.vals6[:0], b.nkeys6[:0], b.nvals6[:0]
	for i := range cs {
		c := &cs[i]
		if c.Key.V6 {
			if c.NAT {
				b.nkeys6 = append(b.nkeys6, edgeNatRkey6{Baddr: edgeIpAddr{A: c.BAddr6}, Caddr: edgeIpAddr{A: c.Key.Src6},
					Bport: c.BPort, Cport: c.Key.Sport, Proto: c.Key.Proto})
				b.nvals6 = append(b.nvals6, edgeNatRentry6{Vip: edgeIpAddr{A: c.Key.Dst6}, Vport: c.Key.Dport})
			}
			b.keys6 = append(b.keys6, c.Key.ct6())
			b.vals6 = append(b.vals6, edgeCtEntry{Backend: c.Backend, Gen: c.Gen, State: c.State, Fid: c.FID, Last: c.Last})
			continue
		}
		k := edgeCtKey{Src: c.Key.Src, Dst: c.Key.Dst, Sport: c.Key.Sport, Dport: c.Key.Dport, Proto: c.Key.Proto}
		b.keys = append(b.keys, k)
		b.vals = append(b.vals, edgeCtEntry{Backend: c.Backend, Gen: c.Gen, State: c.State, Fid: c.FID, Last: c.Last})
		if c.NAT {
			b.nkeys = append(b.nkeys, edgeNatRkey{Baddr: c.BAddr, Caddr: c.Key.Src, Bport: c.BPort, Cport: c.Key.Sport, Proto: c.Key.Proto})
			b.nvals = append(b.nvals, edgeNatRentry{Vip: c.Key.Dst, Vport: c.Key.Dport})
		}
	}
	// The reverse entries first: a connection entry never serves a nat
	// flow whose replies would not be translated.
	if len(b.nkeys) > 0 {
		if _, err := e.objs.LbNatConns.BatchUpdate(b.nkeys, b.nvals, nil); err != nil {
			return fmt.Errorf("apply synced nat reverse entries: %w", err)
		}
	}
	if len(b.keys) > 0 {
		if _, err := e.objs.LbConns.BatchUpdate(b.keys, b.vals, nil); err != nil {
			return fmt.Errorf("apply synced connection entries: %w", err)
		}
	}
	if len(b.nkeys6) > 0 {
		if e.objs.LbNatConns6 == nil {
			return errors.New("apply synced IPv6 nat reverse entries: these objects have none")
		}
		if _, err := e.objs.LbNatConns6.BatchUpdate(b.nkeys6, b.nvals6, nil); err != nil {
			return fmt.Errorf("apply synced IPv6 nat reverse entries: %w", err)
		}
	}
	if len(b.keys6) > 0 {
		if _, err := e.objs.LbConns6.BatchUpdate(b.keys6, b.vals6, nil); err != nil {
			return fmt.Errorf("apply synced IPv6 connection entries: %w", err)
		}
	}
	return nil
}

// ConnEntry is a connection-table entry as this edge holds it (a dump).
type ConnEntry struct {
	Key        ConnKey
	Backend    uint16
	Gen        uint16
	Last       uint32
	State, FID uint8
}

// DumpConns walks the connection tables (lb_conns, then lb_conns6) in
// chunks of up to chunk entries (BPF batch lookups), calling f with each
// chunk (reused: copy what you keep; a chunk holds one family). A table
// that changes meanwhile may show an entry twice or not at all, as any
// walk of a live hash map.
func (e *Edge) DumpConns(chunk int, f func([]ConnEntry) error) error {
	if chunk <= 0 {
		chunk = 4096
	}
	if err := e.dumpConns4(chunk, f); err != nil {
		return err
	}
	keys := make([]edgeCtKey6, chunk)
	vals := make([]edgeCtEntry, chunk)
	out := make([]ConnEntry, 0, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns6.BatchLookup(&cursor, keys, vals, nil)
		out = out[:0]
		for i := 0; i < n; i++ {
			v := vals[i]
			out = append(out, ConnEntry{Key: connKey6(&keys[i]), Backend: v.Backend, Gen: v.Gen, Last: v.Last, State: v.State, FID: v.Fid})
		}
		if len(out) > 0 {
			if ferr := f(out); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dump IPv6 connection table: %w", err)
		}
	}
}

func (e *Edge) dumpConns4(chunk int, f func([]ConnEntry) error) error {
	if chunk <= 0 {
		chunk = 4096
	}
	keys := make([]edgeCtKey, chunk)
	vals := make([]edgeCtEntry, chunk)
	out := make([]ConnEntry, 0, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns.BatchLookup(&cursor, keys, vals, nil)
		out = out[:0]
		for i := 0; i < n; i++ {
			k, v := keys[i], vals[i]
			out = append(out, ConnEntry{Key: ConnKey{Src: k.Src, Dst: k.Dst, Sport: k.Sport, Dport: k.Dport, Proto: k.Proto},
				Backend: v.Backend, Gen: v.Gen, Last: v.Last, State: v.State, FID: v.Fid})
		}
		if len(out) > 0 {
			if ferr := f(out); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dump connection table: %w", err)
		}
	}
}

// LookupConn reads one entry (tests, `azgate` diagnostics).
func (e *Edge) LookupConn(k ConnKey) (ConnEntry, error) {
	var v edgeCtEntry
	if k.V6 {
		k6 := k.ct6()
		if err := e.objs.LbConns6.Lookup(&k6, &v); err != nil {
			return ConnEntry{}, err
		}
		return ConnEntry{Key: k, Backend: v.Backend, Gen: v.Gen, Last: v.Last, State: v.State, FID: v.Fid}, nil
	}
	if err := e.objs.LbConns.Lookup(&edgeCtKey{Src: k.Src, Dst: k.Dst, Sport: k.Sport, Dport: k.Dport, Proto: k.Proto}, &v); err != nil {
		return ConnEntry{}, err
	}
	return ConnEntry{Key: k, Backend: v.Backend, Gen: v.Gen, Last: v.Last, State: v.State, FID: v.Fid}, nil
}

// LookupNATConn reads the reverse entry of replies from backend to client
// (lb_nat_conns, or lb_nat_conns6 for IPv6 addresses).
func (e *Edge) LookupNATConn(backend, client netip.AddrPort, proto uint8) (netip.AddrPort, error) {
	if natFamily(backend.Addr(), client.Addr()) == 6 && e.objs.LbNatConns6 != nil {
		k, _ := natConnKV6(NATConn{Backend: backend, Client: client, Proto: proto})
		var v edgeNatRentry6
		if err := e.objs.LbNatConns6.Lookup(&k, &v); err != nil {
			return netip.AddrPort{}, err
		}
		return netip.AddrPortFrom(addrFrom(v.Vip, 10), be16(v.Vport)), nil
	}
	k := edgeNatRkey{Baddr: ip4word(backend.Addr()), Caddr: ip4word(client.Addr()), Bport: be16(backend.Port()), Cport: be16(client.Port()), Proto: proto}
	var v edgeNatRentry
	if err := e.objs.LbNatConns.Lookup(&k, &v); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(wordIP4(v.Vip), be16(v.Vport)), nil
}

// AddrWord is an IPv4 address as the maps store it (ConnKey's words).
func AddrWord(a netip.Addr) uint32 { return ip4word(a) }

// AddrWords6 is an IPv6 address as the maps store it (ConnKey's Src6
// words); false for any other address.
func AddrWords6(a netip.Addr) ([4]uint32, bool) {
	if !plain6(a) {
		return [4]uint32{}, false
	}
	return ip6addr(a).A, true
}

// PortWord is a host-order port as the maps store it (network order).
func PortWord(p uint16) uint16 { return be16(p) }

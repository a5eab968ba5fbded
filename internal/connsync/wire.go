package connsync

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"time"
)

// The wire protocol (docs/connsync.md), over TCP between two members of
// an edge set. A session starts with a challenge-response over the
// region's shared secret (HMAC-SHA256 over fresh nonces from both sides
// and both names); nothing else is read before it succeeds. Then each
// side sends frames:
//
//	length u32 | body (length bytes, at most maxBody) | MAC (32 bytes)
//
// where MAC = HMAC-SHA256(direction key, sequence u64 | length | body),
// the direction keys are derived from the secret and both nonces, and the
// sequence counts the frames of the direction from 0 (never sent: a
// replayed, dropped or reordered frame fails its MAC). A frame that fails
// its MAC or does not parse ends the session and is counted.

const (
	magic        = "AZGS"
	version      = 1
	nonceSize    = 32
	macSize      = sha256.Size
	maxName      = 255
	maxBody      = 1 << 20
	entrySize    = 28 // one entry on the wire (encodeEntry)
	entry6Size   = 52 // one IPv6 VIP's entry (frameBatch6)
	batchHeader  = 1 + 8 + 2
	maxBatchWire = (maxBody - batchHeader) / entry6Size // either family's batch fits a frame
)

// Frame types (the body's first byte).
const (
	frameBatch   = 1 // entries: seq u64 (the sender's batch number), n u16, n entries
	frameAck     = 2 // a batch applied: seq u64, applied u32, unmapped u32
	frameDumpReq = 3 // send me your whole table
	frameDumpEnd = 4 // the dump is complete: entries u64
	framePing    = 5 // keeps an idle session's reads within their timeout
	frameBatch6  = 6 // as frameBatch, entries of entry6Size: only to a peer that announced featV6
)

// Features a member announces in a ping sent first on every session
// (framePing, 'F', bits): a release before them ignores a ping's body,
// so the hello and version 1 stay as they were (a rolling upgrade), and a
// member sends frameBatch6 only to a peer that announced featV6 (an old
// one would end the session on the unknown frame type).
const (
	featMark = 'F'
	featV6   = 1 // takes frameBatch6 (IPv6 VIPs' entries, lb_conns6)
)

// featuresFrame is the ping that announces this release's features.
var featuresFrame = []byte{framePing, featMark, featV6}

// pingFeatures reads the features of a ping body (0: none announced).
func pingFeatures(body []byte) byte {
	if len(body) >= 3 && body[1] == featMark {
		return body[2]
	}
	return 0
}

// Entry kinds on the wire: the data plane's (dataplane.ConnEventNew,
// ConnEventState) and the two the daemon adds.
const (
	kindNew     = 1
	kindState   = 2
	kindRefresh = 3 // an entry still in use, sent again (periodic refresh)
	kindDump    = 4 // an entry of a full copy
)

// entry is a connection entry as it travels: nothing in it is local to
// the sender. The backend is its identity (the owner hash the daemon
// gives every backend slot, the same on every edge: FNV-1a of
// "service/pool/key"), the time an age.
type entry struct {
	v6           bool      // an IPv6 VIP's entry: src6, dst6 (entry6Size on the wire)
	src6, dst6   [4]uint32 // raw words, as dataplane.ConnKey
	src, dst     uint32    // raw words, as dataplane.ConnKey
	sport, dport uint16
	proto        uint8
	kind         uint8
	state        uint8
	fid          uint8
	owner        uint64
	ageMS        uint32
}

func encodeEntry(b []byte, e *entry) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], e.src)
	le.PutUint32(b[4:], e.dst)
	le.PutUint16(b[8:], e.sport)
	le.PutUint16(b[10:], e.dport)
	b[12], b[13], b[14], b[15] = e.proto, e.kind, e.state, e.fid
	le.PutUint64(b[16:], e.owner)
	le.PutUint32(b[24:], e.ageMS)
}

// encodeEntry6 writes an IPv6 entry: client (16), VIP (16), ports, then
// the same 16 bytes as an IPv4 entry's tail.
func encodeEntry6(b []byte, e *entry) {
	le := binary.LittleEndian
	for i := range 4 {
		le.PutUint32(b[4*i:], e.src6[i])
		le.PutUint32(b[16+4*i:], e.dst6[i])
	}
	le.PutUint16(b[32:], e.sport)
	le.PutUint16(b[34:], e.dport)
	b[36], b[37], b[38], b[39] = e.proto, e.kind, e.state, e.fid
	le.PutUint64(b[40:], e.owner)
	le.PutUint32(b[48:], e.ageMS)
}

func decodeEntry6(b []byte, e *entry) error {
	le := binary.LittleEndian
	e.v6, e.src, e.dst = true, 0, 0
	var zs, zd uint32
	for i := range 4 {
		e.src6[i], e.dst6[i] = le.Uint32(b[4*i:]), le.Uint32(b[16+4*i:])
		zs |= e.src6[i]
		zd |= e.dst6[i]
	}
	e.sport, e.dport = le.Uint16(b[32:]), le.Uint16(b[34:])
	e.proto, e.kind, e.state, e.fid = b[36], b[37], b[38], b[39]
	e.owner = le.Uint64(b[40:])
	e.ageMS = le.Uint32(b[48:])
	if e.kind < kindNew || e.kind > kindDump || e.state < 1 || e.state > 4 || e.owner == 0 || zs == 0 || zd == 0 {
		return errMalformed
	}
	return nil
}

// put appends e to the batch (its family's encoding).
func (b *batch) put(e *entry) {
	if e.v6 {
		b.buf = b.buf[:len(b.buf)+entry6Size]
		encodeEntry6(b.buf[len(b.buf)-entry6Size:], e)
	} else {
		b.buf = b.buf[:len(b.buf)+entrySize]
		encodeEntry(b.buf[len(b.buf)-entrySize:], e)
	}
	b.n++
}

var errMalformed = errors.New("malformed")

func decodeEntry(b []byte, e *entry) error {
	le := binary.LittleEndian
	e.v6, e.src6, e.dst6 = false, [4]uint32{}, [4]uint32{}
	e.src, e.dst = le.Uint32(b[0:]), le.Uint32(b[4:])
	e.sport, e.dport = le.Uint16(b[8:]), le.Uint16(b[10:])
	e.proto, e.kind, e.state, e.fid = b[12], b[13], b[14], b[15]
	e.owner = le.Uint64(b[16:])
	e.ageMS = le.Uint32(b[24:])
	if e.kind < kindNew || e.kind > kindDump || e.state < 1 || e.state > 4 || e.owner == 0 || e.src == 0 || e.dst == 0 {
		return errMalformed
	}
	return nil
}

// parseBatch checks a batch body (frameBatch or frameBatch6) and returns
// its sequence and entries.
func parseBatch(body []byte) (seq uint64, entries []byte, err error) {
	if len(body) < batchHeader || (body[0] != frameBatch && body[0] != frameBatch6) {
		return 0, nil, fmt.Errorf("%w batch: %d bytes", errMalformed, len(body))
	}
	size := entrySize
	if body[0] == frameBatch6 {
		size = entry6Size
	}
	seq = binary.LittleEndian.Uint64(body[1:])
	n := int(binary.LittleEndian.Uint16(body[9:]))
	entries = body[batchHeader:]
	if len(entries) != n*size {
		return 0, nil, fmt.Errorf("%w batch: %d entries in %d bytes", errMalformed, n, len(entries))
	}
	return seq, entries, nil
}

// session is an authenticated connection: frames out and in, each
// direction with its key and sequence.
type session struct {
	c       net.Conn
	r       *bufio.Reader
	peer    string // the other side's name, as it proved it
	timeout time.Duration
	outMAC  hash.Hash
	inMAC   hash.Hash
	outSeq  uint64
	inSeq   uint64
	// Scratch of each direction: a session is read by one goroutine and
	// written by another.
	outHdr   [4]byte
	outSeqb  [8]byte
	inHdr    [4]byte
	inSeqb   [8]byte
	sum      [macSize]byte
	inBuf    []byte
	outFrame []byte
}

var errAuth = errors.New("authentication failed")

func mac(secret []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func writeHello(w io.Writer, name string, nonce []byte, proof []byte) error {
	b := make([]byte, 0, 4+1+1+len(name)+nonceSize+len(proof))
	b = append(b, magic...)
	b = append(b, version, byte(len(name)))
	b = append(b, name...)
	b = append(b, nonce...)
	b = append(b, proof...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader, withProof bool) (name string, nonce, proof []byte, err error) {
	var h [6]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	if string(h[:4]) != magic || h[4] != version {
		return "", nil, nil, fmt.Errorf("%w hello: magic %q version %d", errMalformed, h[:4], h[4])
	}
	n := int(h[5])
	rest := make([]byte, n+nonceSize)
	if withProof {
		rest = make([]byte, n+nonceSize+macSize)
	}
	if _, err = io.ReadFull(r, rest); err != nil {
		return
	}
	name = string(rest[:n])
	if n == 0 {
		return "", nil, nil, fmt.Errorf("%w hello: no name", errMalformed)
	}
	nonce = rest[n : n+nonceSize]
	if withProof {
		proof = rest[n+nonceSize:]
	}
	return
}

func transcript(role string, nc, ns []byte, client, server string) [][]byte {
	return [][]byte{[]byte("azgate-sync/1 " + role), nc, ns, []byte{byte(len(client))}, []byte(client), []byte{byte(len(server))}, []byte(server)}
}

func newNonce() []byte {
	n := make([]byte, nonceSize)
	if _, err := rand.Read(n); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux (Go 1.24+)
	}
	return n
}

// clientHandshake authenticates both sides of a connection this edge
// dialled: the server proves the secret over our nonce first, then we
// prove it over the server's.
func clientHandshake(c net.Conn, name string, secret []byte, timeout time.Duration) (*session, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 64<<10)
	nc := newNonce()
	if err := writeHello(c, name, nc, nil); err != nil {
		return nil, err
	}
	sname, ns, proof, err := readHello(r, true)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(proof, mac(secret, transcript("server", nc, ns, name, sname)...)) {
		return nil, fmt.Errorf("%w: %s does not hold the region's sync secret", errAuth, sname)
	}
	if _, err := c.Write(mac(secret, transcript("client", nc, ns, name, sname)...)); err != nil {
		return nil, err
	}
	return newSession(c, r, sname, secret, nc, ns, true, timeout), nil
}

// serverHandshake authenticates a connection a peer opened.
func serverHandshake(c net.Conn, name string, secret []byte, timeout time.Duration) (*session, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 64<<10)
	cname, nc, _, err := readHello(r, false)
	if err != nil {
		return nil, err
	}
	ns := newNonce()
	if err := writeHello(c, name, ns, mac(secret, transcript("server", nc, ns, cname, name)...)); err != nil {
		return nil, err
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(r, proof); err != nil {
		return nil, err
	}
	if !hmac.Equal(proof, mac(secret, transcript("client", nc, ns, cname, name)...)) {
		return nil, fmt.Errorf("%w: %s (%v) does not hold the region's sync secret", errAuth, cname, c.RemoteAddr())
	}
	return newSession(c, r, cname, secret, nc, ns, false, timeout), nil
}

func newSession(c net.Conn, r *bufio.Reader, peer string, secret, nc, ns []byte, client bool, timeout time.Duration) *session {
	c2s := mac(secret, []byte("azgate-sync/1 c2s"), nc, ns)
	s2c := mac(secret, []byte("azgate-sync/1 s2c"), nc, ns)
	s := &session{c: c, r: r, peer: peer, timeout: timeout}
	if client {
		s.outMAC, s.inMAC = hmac.New(sha256.New, c2s), hmac.New(sha256.New, s2c)
	} else {
		s.outMAC, s.inMAC = hmac.New(sha256.New, s2c), hmac.New(sha256.New, c2s)
	}
	return s
}

// writeFrame sends one frame (one caller at a time).
func (s *session) writeFrame(body ...[]byte) error {
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if n > maxBody {
		return fmt.Errorf("frame of %d bytes: at most %d", n, maxBody)
	}
	binary.LittleEndian.PutUint32(s.outHdr[:], uint32(n))
	binary.LittleEndian.PutUint64(s.outSeqb[:], s.outSeq)
	s.outSeq++
	s.outMAC.Reset()
	s.outMAC.Write(s.outSeqb[:])
	s.outMAC.Write(s.outHdr[:])
	f := append(s.outFrame[:0], s.outHdr[:]...)
	for _, b := range body {
		s.outMAC.Write(b)
		f = append(f, b...)
	}
	f = s.outMAC.Sum(f)
	s.outFrame = f[:0]
	s.c.SetWriteDeadline(time.Now().Add(s.timeout))
	_, err := s.c.Write(f)
	return err
}

// readFrame reads and checks one frame; the body is valid until the next
// call. A frame that fails its MAC is errAuth; a length over the bound,
// errMalformed.
func (s *session) readFrame(timeout time.Duration) ([]byte, error) {
	s.c.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(s.r, s.inHdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(s.inHdr[:])
	if n > maxBody || n == 0 {
		return nil, fmt.Errorf("%w frame: length %d", errMalformed, n)
	}
	if cap(s.inBuf) < int(n)+macSize {
		s.inBuf = make([]byte, int(n)+macSize)
	}
	b := s.inBuf[:int(n)+macSize]
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(s.inSeqb[:], s.inSeq)
	s.inMAC.Reset()
	s.inMAC.Write(s.inSeqb[:])
	s.inMAC.Write(s.inHdr[:])
	s.inMAC.Write(b[:n])
	if !hmac.Equal(s.inMAC.Sum(s.sum[:0]), b[n:]) {
		return nil, fmt.Errorf("%w: frame %d from %s fails its MAC", errAuth, s.inSeq, s.peer)
	}
	s.inSeq++
	return b[:n], nil
}

package connsync

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"
)

// FuzzFrames feeds arbitrary bytes to every parser of the wire: the hello
// (as a server reads it, and as a client with the server's proof), the
// frame reader of an established session, and the batch and entry
// decoders (as if the bytes had passed the MAC). Nothing may panic, and a
// batch that parses has exactly its count of entries.
func FuzzFrames(f *testing.F) {
	f.Add([]byte("AZGS\x01\x01a0123456789012345678901234567890"))
	f.Add(batchFrame(1, wireEntry(1, 5)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{frameBatch, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{frameBatch6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		readHello(bytes.NewReader(b), false)
		readHello(bytes.NewReader(b), true)

		c1, c2 := net.Pipe()
		defer c1.Close()
		go func() { c2.Write(b); c2.Close() }()
		s := newSession(c1, bufio.NewReader(c1), "peer", make([]byte, 32), make([]byte, 32), make([]byte, 32), false, time.Second)
		for {
			if _, err := s.readFrame(time.Second); err != nil {
				break
			}
		}

		if seq, entries, err := parseBatch(b); err == nil {
			_ = seq
			size, decode := entrySize, decodeEntry
			if b[0] == frameBatch6 {
				size, decode = entry6Size, decodeEntry6
			}
			if len(entries)%size != 0 {
				t.Fatalf("batch of type %d parsed with %d bytes of entries", b[0], len(entries))
			}
			var e entry
			for off := 0; off < len(entries); off += size {
				decode(entries[off:off+size], &e)
			}
		}
		if len(b) >= entry6Size {
			var e entry
			if decodeEntry6(b[:entry6Size], &e) == nil {
				var out [entry6Size]byte
				encodeEntry6(out[:], &e)
				if !bytes.Equal(out[:], b[:entry6Size]) {
					t.Fatalf("IPv6 entry does not round-trip: %x -> %x", b[:entry6Size], out)
				}
			}
		}
		if len(b) >= entrySize {
			var e entry
			if decodeEntry(b[:entrySize], &e) == nil {
				var out [entrySize]byte
				encodeEntry(out[:], &e)
				if !bytes.Equal(out[:], b[:entrySize]) {
					t.Fatalf("entry does not round-trip: %x -> %x", b[:entrySize], out)
				}
			}
		}
	})
}

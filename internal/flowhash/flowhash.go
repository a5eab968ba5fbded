// Package flowhash is the Go twin of bpf/lib/hash.h: the seeded 5-tuple hash
// every edge and agent uses to pick a FlowID, an edge and (for services) a
// backend. Tools use it to say where a given flow goes; a test runs the C
// version through BPF_PROG_TEST_RUN and holds the two together.
//
//	hash = jhash_3words(saddr, daddr, ports, seed ^ proto)
//
// saddr, daddr and ports are the packet's 32-bit words loaded little-endian,
// ports being the source port followed by the destination port as on the
// wire (0 for fragments and protocols without ports); jhash_3words is Bob
// Jenkins' lookup3 as in Linux include/linux/jhash.h.
package flowhash

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// DefaultHashSeed is the cluster-wide flow hash seed every edge and agent
// uses unless told otherwise (--hash-seed: all nodes must agree).
const DefaultHashSeed = 0x61a9a7e5

const initval = 0xdeadbeef

// Jhash3 is Linux's jhash_3words.
func Jhash3(a, b, c, seed uint32) uint32 {
	iv := seed + initval + (3 << 2)
	a += iv
	b += iv
	c += iv
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// Tuple is a flow's addresses, ports and protocol.
type Tuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // zero for fragments and port-less protocols
	Proto            uint8
}

func word4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:])
}

// PortsWord is the ports as the data plane loads them.
func PortsWord(sport, dport uint16) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	return binary.LittleEndian.Uint32(b[:])
}

// Hash4 is flow_hash4 for an IPv4 tuple.
func Hash4(t Tuple, seed uint32) uint32 {
	return Jhash3(word4(t.Src), word4(t.Dst), PortsWord(t.SrcPort, t.DstPort), seed^uint32(t.Proto))
}

// fold6 is an IPv6 address folded to one word as addr6_fold does (the
// XOR of its four words as loaded).
func fold6(a netip.Addr) uint32 {
	b := a.As16()
	var w uint32
	for i := 0; i < 16; i += 4 {
		w ^= binary.LittleEndian.Uint32(b[i:])
	}
	return w
}

// Hash6 is flow_hash6 for an IPv6 tuple (bpf/lib/hash.h).
func Hash6(t Tuple, seed uint32) uint32 {
	return Jhash3(fold6(t.Src), fold6(t.Dst), PortsWord(t.SrcPort, t.DstPort), seed^uint32(t.Proto))
}

// FlowID is the NVGRE FlowID (RFC 7637) of a tuple: the hash's low byte.
func FlowID(t Tuple, seed uint32) uint8 { return uint8(Hash4(t, seed)) }

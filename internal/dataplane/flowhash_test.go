package dataplane

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/flowhash"
)

// TestFlowHashMatchesC holds bpf/lib/hash.h (through bench.c's xdp_flowhash,
// which parses the frame with the data plane's own parser) and
// internal/flowhash together: for several seeds and thousands of random
// IPv4 tuples the kernel's hash must equal flowhash.Hash4.
func TestFlowHashMatchesC(t *testing.T) {
	requireRoot(t)
	b, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	r := rand.New(rand.NewSource(20240611)) // fixed: failures reproduce
	seeds := []uint32{0, 1, testSeed, 0xffffffff, 0x80000000, r.Uint32(), r.Uint32()}
	const perSeed = 3000
	kinds := map[string]int{}
	for _, seed := range seeds {
		if err := b.SetHashSeed(seed); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perSeed; i++ {
			f, tuple, kind := randHashFlow(r)
			kinds[kind]++
			in := f.frame(t, "02:00:00:00:00:01", "02:00:00:00:00:02")
			opts := &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+64)}
			ret, err := b.FlowHash().Run(opts)
			if err != nil {
				t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
			}
			desc := fmt.Sprintf("seed %#x, %s %+v (src %s dst %s sport %d dport %d proto %d mf %v fragoff %d)",
				seed, kind, tuple, f.src, f.dst, f.sport, f.dport, f.proto, f.mf, f.fragOff)
			if ret != xdpTX {
				t.Fatalf("xdp_flowhash returned %s, want TX, for %s\n%s", actionNames[ret], desc, decode(in).Dump())
			}
			if len(opts.DataOut) < 4 {
				t.Fatalf("output is %d bytes for %s", len(opts.DataOut), desc)
			}
			got := binary.LittleEndian.Uint32(opts.DataOut[:4])
			if want := flowhash.Hash4(tuple, seed); got != want {
				t.Fatalf("C flow hash %#08x, Go %#08x for %s\n%s", got, want, desc, decode(in).Dump())
			}
		}
	}
	t.Logf("%d tuples per seed over %d seeds: %v", perSeed, len(seeds), kinds)
}

// randHashFlow is a random IPv4 packet and the tuple the data plane hashes
// it as: TCP, UDP, ICMP, another protocol, or a fragment (first with MF,
// or later with an offset) of TCP/UDP, whose ports are hashed as 0.
func randHashFlow(r *rand.Rand) (flow, flowhash.Tuple, string) {
	src, dst := randUnicast(r), randAnyAddr(r)
	f := flow{src: src.String(), dst: dst.String(), ttl: uint8(1 + r.Intn(255)), tos: uint8(r.Intn(256)),
		df: r.Intn(2) == 0, payload: make([]byte, r.Intn(64))}
	r.Read(f.payload)
	tu := flowhash.Tuple{Src: src, Dst: dst}
	var kind string
	switch n := r.Intn(10); {
	case n < 3:
		kind, f.proto = "tcp", layers.IPProtocolTCP
	case n < 6:
		kind, f.proto = "udp", layers.IPProtocolUDP
	case n < 7:
		kind, f.proto = "icmp", layers.IPProtocolICMPv4
		f.icmpType = uint8(r.Intn(20))
	case n < 8:
		kind = "other"
		for f.proto == 0 || f.proto == layers.IPProtocolTCP || f.proto == layers.IPProtocolUDP || f.proto == layers.IPProtocolICMPv4 {
			f.proto = layers.IPProtocol(r.Intn(256))
		}
	default:
		kind, f.proto = "frag-tcp", layers.IPProtocolTCP
		if r.Intn(2) == 0 {
			kind, f.proto = "frag-udp", layers.IPProtocolUDP
		}
		f.df = false
		if r.Intn(2) == 0 {
			kind += "-first"
			f.mf = true
		} else {
			kind += "-later"
			f.fragOff = uint16(1 + r.Intn(0x1fff))
			f.mf = r.Intn(2) == 0
		}
	}
	if f.proto == layers.IPProtocolTCP || f.proto == layers.IPProtocolUDP {
		f.sport, f.dport = uint16(r.Uint32()), uint16(r.Uint32())
		if !f.mf && f.fragOff == 0 {
			tu.SrcPort, tu.DstPort = f.sport, f.dport
		}
	}
	tu.Proto = uint8(f.proto)
	return f, tu, kind
}

// randUnicast is a random source the parser accepts (not 0/8, 127/8 or
// 224/4 and above, which it drops as martians).
func randUnicast(r *rand.Rand) netip.Addr {
	for {
		a := randAnyAddr(r)
		b := a.As4()
		if b[0] != 0 && b[0] != 127 && b[0] < 224 {
			return a
		}
	}
}

func randAnyAddr(r *rand.Rand) netip.Addr {
	var b [4]byte
	r.Read(b[:])
	return netip.AddrFrom4(b)
}

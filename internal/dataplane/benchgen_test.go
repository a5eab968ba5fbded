package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// genUDP is an Ethernet/IP/UDP frame of size bytes from port sport to 9
// (IPv4 when src is, else IPv6) with the UDP checksum computed (a
// computed 0 sent as 0xffff) or, with noCsum, zero; word, if not zero, is
// the payload's first 16 bits.
func genUDP(t *testing.T, src, dst string, sport uint16, size int, word uint16, noCsum bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 9}
	var ip gopacket.SerializableLayer
	hdr := 14 + 8
	if a := net.ParseIP(src); a.To4() != nil {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: a.To4(), DstIP: net.ParseIP(dst).To4()}
		udp.SetNetworkLayerForChecksum(ip4)
		ip, hdr = ip4, hdr+20
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: a, DstIP: net.ParseIP(dst)}
		udp.SetNetworkLayerForChecksum(ip6)
		ip, hdr = ip6, hdr+40
	}
	pay := make([]byte, size-hdr)
	binary.BigEndian.PutUint16(pay, word)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(pay)); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	c := b[hdr-8+6:]
	switch {
	case noCsum:
		c[0], c[1] = 0, 0
	case c[0] == 0 && c[1] == 0:
		c[0], c[1] = 0xff, 0xff // RFC 768: a computed 0 is sent as all ones
	}
	return append([]byte(nil), b...)
}

// onOneCPU pins the calling goroutine's thread to one CPU for the rest of
// the test (the thread ends with it), so a per-CPU counter counts every
// run.
func onOneCPU(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
}

// TestGenCyclesPortsKeepingChecksums runs xdp_gen (the lab suites'
// generator) on IPv4 and IPv6 templates: every run must leave the frame
// byte for byte as built for its flow's source port (base + run % flows):
// the IPv4 frame with its zero UDP checksum ("none") untouched, the IPv6
// frame (whose checksum is mandatory) with the checksum of its port, one
// of them 0xffff where the sum comes to zero.
func TestGenCyclesPortsKeepingChecksums(t *testing.T) {
	requireRoot(t)
	onOneCPU(t)
	const base, flows = 1024, 5
	// The payload word that makes port base+1's checksum compute to 0:
	// the checksum of the frame without it.
	zero := genUDP(t, "2001:db8:203::10", "2001:db8:e1::7", base+1, 78, 0, false)
	w := binary.BigEndian.Uint16(zero[14+40+6:])
	for _, c := range []struct {
		name     string
		src, dst string
		size     int
		word     uint16
		noCsum   bool
	}{
		{"IPv4, no checksum", "203.0.113.10", "198.51.100.7", 64, 0, true},
		{"IPv6", "2001:db8:203::10", "2001:db8:e1::7", 78, 0, false},
		{"IPv6, a port whose checksum sums to 0", "2001:db8:203::10", "2001:db8:e1::7", 78, w, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := LoadBench() // its per-CPU run counter starts at 0
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			in := genUDP(t, c.src, c.dst, base, c.size, c.word, c.noCsum)
			if err := b.SetGen(in[:64], flows, base); err != nil {
				t.Fatal(err)
			}
			sawFFFF := false
			for i := 0; i < 2*flows+1; i++ {
				opts := &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+64)}
				ret, err := b.Gen().Run(opts)
				if err != nil {
					t.Fatal(err)
				}
				if ret != xdpTX {
					t.Fatalf("run %d: xdp_gen returned %s, want TX", i, actionNames[ret])
				}
				port := uint16(base + i%flows)
				want := genUDP(t, c.src, c.dst, port, c.size, c.word, c.noCsum)
				if !bytes.Equal(opts.DataOut, want) {
					t.Fatalf("run %d: frame for source port %d\n got %x\nwant %x", i, port, opts.DataOut, want)
				}
				sawFFFF = sawFFFF || (!c.noCsum && binary.BigEndian.Uint16(want[14+40+6:]) == 0xffff)
			}
			if c.word != 0 && !sawFFFF {
				t.Fatalf("no run had the checksum 0xffff: the case does not test it")
			}
		})
	}
	b, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tcp := genUDP(t, "2001:db8:203::10", "2001:db8:e1::7", base, 78, 0, false)
	tcp[14+6] = 6
	if err := b.SetGen(tcp[:64], flows, base); err == nil {
		t.Errorf("SetGen took an IPv6 template carrying TCP")
	}
	if err := b.SetGen(genUDP(t, "2001:db8:203::10", "2001:db8:e1::7", base+1, 78, 0, false)[:64], flows, base); err == nil {
		t.Errorf("SetGen took a template whose source port is not the first flow's")
	}
}

// TestSinkCapturesOneFrame: xdp_sink counts and drops every frame; after
// CaptureNext it copies the next one it counts (its first 128 bytes, and
// its length), and only that one; ARP it passes, neither counted nor
// copied.
func TestSinkCapturesOneFrame(t *testing.T) {
	requireRoot(t)
	b, err := LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	run := func(frame []byte, want uint32) {
		t.Helper()
		ret, err := b.Sink().Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatal(err)
		}
		if ret != want {
			t.Fatalf("xdp_sink returned %s, want %s", actionNames[ret], actionNames[want])
		}
	}
	small := genUDP(t, "2001:db8:203::10", "2001:db8:e1::7", 1024, 78, 0, false)
	large := genUDP(t, "2001:db8:203::10", "2001:db8:e1::8", 1025, 200, 0, false)
	run(small, xdpDrop)
	if f, n, err := b.Captured(); err != nil || f != nil || n != 0 {
		t.Fatalf("captured %x (%d bytes, %v) without being asked", f, n, err)
	}
	arp := append([]byte(nil), small...)
	arp[12], arp[13] = 0x08, 0x06
	for _, c := range []struct {
		name  string
		frame []byte
	}{{"78-byte frame", small}, {"200-byte frame", large}} {
		if err := b.CaptureNext(); err != nil {
			t.Fatal(err)
		}
		if f, _, err := b.Captured(); err != nil || f != nil {
			t.Fatalf("%s: a capture (%x, %v) before any frame", c.name, f, err)
		}
		run(arp, xdpPass)
		run(c.frame, xdpDrop)
		run(small, xdpDrop) // not copied: the first one is kept
		f, n, err := b.Captured()
		if err != nil {
			t.Fatal(err)
		}
		want := c.frame[:min(len(c.frame), 128)]
		if n != len(c.frame) || !bytes.Equal(f, want) {
			t.Fatalf("%s: captured %d bytes of a %d-byte frame\n got %x\nwant %x", c.name, len(f), n, f, want)
		}
	}
	cnt, err := b.SinkCount()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.Packets != 5 || cnt.Bytes != 78*4+200 {
		t.Errorf("sink counted %d packets, %d bytes; want 5, %d (ARP not counted)", cnt.Packets, cnt.Bytes, 78*4+200)
	}
}

package dataplane

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// XDP actions.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

var actionNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

func mac(s string) net.HardwareAddr { return dptest.MustMAC(s) }

func ip4(s string) net.IP { return net.ParseIP(s).To4() }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// ser serializes layers, fixing lengths and checksums.
func ser(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// flow describes an IPv4 packet to build.
type flow struct {
	src, dst     string
	proto        layers.IPProtocol
	sport, dport uint16
	ttl          uint8
	tos          uint8
	df           bool
	mf           bool
	fragOff      uint16 // in 8-byte units
	options      []layers.IPv4Option
	payload      []byte
	syn, rst     bool
	ack          bool // with syn: a SYN-ACK
	fin          bool // with ACK
	icmpType     uint8
}

func (f flow) layers(t testing.TB) []gopacket.SerializableLayer {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: f.ttl, TOS: f.tos, Protocol: f.proto,
		SrcIP: ip4(f.src), DstIP: ip4(f.dst), Options: f.options, FragOffset: f.fragOff, Id: 0x1234}
	if ip.TTL == 0 {
		ip.TTL = 64
	}
	if f.df {
		ip.Flags |= layers.IPv4DontFragment
	}
	if f.mf {
		ip.Flags |= layers.IPv4MoreFragments
	}
	out := []gopacket.SerializableLayer{ip}
	payload := f.payload
	if payload == nil {
		payload = []byte("azgate test payload")
	}
	if f.fragOff != 0 {
		return append(out, gopacket.Payload(payload))
	}
	switch f.proto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), Seq: 1000, Window: 65535, SYN: f.syn, RST: f.rst, FIN: f.fin, ACK: f.ack || !f.syn && !f.rst}
		tcp.SetNetworkLayerForChecksum(ip)
		out = append(out, tcp)
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
		udp.SetNetworkLayerForChecksum(ip)
		out = append(out, udp)
	case layers.IPProtocolICMPv4:
		ty := f.icmpType
		if ty == 0 {
			ty = layers.ICMPv4TypeEchoRequest
		}
		out = append(out, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(ty, 0), Id: 7, Seq: 1})
	}
	return append(out, gopacket.Payload(payload))
}

// ip returns the IPv4 packet bytes of the flow.
func (f flow) ip(t testing.TB) []byte { return ser(t, f.layers(t)...) }

// frame returns the flow in an Ethernet frame from src to dst MAC.
func (f flow) frame(t testing.TB, srcMAC, dstMAC string) []byte {
	eth := &layers.Ethernet{SrcMAC: mac(srcMAC), DstMAC: mac(dstMAC), EthernetType: layers.EthernetTypeIPv4}
	return ser(t, append([]gopacket.SerializableLayer{eth}, f.layers(t)...)...)
}

// nvgre wraps an inner frame (Ethernet onwards) in outer Ethernet/IPv4/GRE.
func nvgre(t testing.TB, srcMAC, dstMAC, src, dst string, key uint32, tos uint8, inner []byte) []byte {
	return ser(t,
		&layers.Ethernet{SrcMAC: mac(srcMAC), DstMAC: mac(dstMAC), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: tos, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE,
			SrcIP: ip4(src), DstIP: ip4(dst)},
		&layers.GRE{KeyPresent: true, Protocol: layers.EthernetTypeTransparentEthernetBridging, Key: key},
		gopacket.Payload(inner))
}

// ethFrame puts an IPv4 packet behind an Ethernet header, without the
// padding to 60 bytes gopacket would add.
func ethFrame(t testing.TB, srcMAC, dstMAC string, ip []byte) []byte {
	out := append([]byte{}, mac(dstMAC)...)
	out = append(out, mac(srcMAC)...)
	out = append(out, 0x08, 0x00)
	return append(out, ip...)
}

// decTTL returns a copy of an IPv4 packet with the TTL decremented and the
// header checksum recomputed from scratch (the reference for the program's
// incremental update).
func decTTL(ip []byte) []byte {
	out := append([]byte(nil), ip...)
	out[8]--
	setIPCsum(out)
	return out
}

func setIPCsum(ip []byte) {
	hl := int(ip[0]&0xf) * 4
	ip[10], ip[11] = 0, 0
	c := csum(ip[:hl])
	ip[10], ip[11] = byte(c>>8), byte(c)
}

func csum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// writePcap saves frames for a failed fixture next to the test output.
func writePcap(t testing.TB, name string, frames map[string][]byte) {
	dir := os.Getenv("AZGATE_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join("testdata", "failed")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("pcap: %v", err)
		return
	}
	safe := strings.NewReplacer("/", "_", " ", "_").Replace(name)
	path := filepath.Join(dir, safe+".pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Logf("pcap: %v", err)
		return
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	ts := time.Unix(0, 0)
	for _, k := range []string{"input", "expected", "got"} {
		b, ok := frames[k]
		if !ok || b == nil {
			continue
		}
		ts = ts.Add(time.Second)
		w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(b), Length: len(b)}, b)
	}
	t.Logf("frames written to %s (input, expected, got)", path)
}

// diffBytes describes the first difference between two byte strings.
func diffBytes(want, got []byte) string {
	if bytes.Equal(want, got) {
		return ""
	}
	n := min(len(want), len(got))
	for i := 0; i < n; i++ {
		if want[i] != got[i] {
			return fmt.Sprintf("first difference at byte %d: want %#02x got %#02x (lengths %d/%d)\nwant %x\ngot  %x", i, want[i], got[i], len(want), len(got), want, got)
		}
	}
	return fmt.Sprintf("lengths differ: want %d got %d\nwant %x\ngot  %x", len(want), len(got), want, got)
}

// decode parses a frame with gopacket for assertions and error messages.
func decode(b []byte) gopacket.Packet {
	return gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
}

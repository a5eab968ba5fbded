package bench

import (
	"net"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// tcpFrame is an Ethernet/IPv4/TCP frame of exactly size bytes.
func tcpFrame(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Ack: 1, ACK: true, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-20-20, 0))
	return serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv4}, ip, tcp, gopacket.Payload(pay))
}

// tcpFrame6 is tcpFrame for IPv6 (hop limit 64): an Ethernet/IPv6/TCP
// ACK of exactly size bytes.
func tcpFrame6(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Ack: 1, ACK: true, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-40-20, 0))
	return serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv6}, ip, tcp, gopacket.Payload(pay))
}

// udpFrame is an Ethernet/IPv4/UDP frame of exactly size bytes with no UDP
// checksum (so a generator may change ports without fixing it).
func udpFrame(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-20-8, 0))
	b := serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload(pay))
	b[14+20+6], b[14+20+7] = 0, 0
	return b
}

// udpFrame6 is udpFrame for IPv6 (hop limit 64), with its UDP checksum,
// which IPv6 requires (RFC 8200 8.1; a computed 0 sent as 0xffff): the
// generator keeps it valid as it changes the source port.
func udpFrame6(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-40-8, 0))
	b := serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv6}, ip, udp, gopacket.Payload(pay))
	if b[14+40+6] == 0 && b[14+40+7] == 0 {
		b[14+40+6], b[14+40+7] = 0xff, 0xff
	}
	return b
}

// nvgreFrame wraps an inner frame in outer Ethernet/IPv4/GRE.
func nvgreFrame(srcMAC, dstMAC, src, dst string, key uint32, inner []byte) []byte {
	return serialize(
		&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE,
			SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()},
		&layers.GRE{KeyPresent: true, Protocol: layers.EthernetTypeTransparentEthernetBridging, Key: key},
		gopacket.Payload(inner))
}

// nvgre6Frame wraps an inner frame in outer Ethernet/IPv6/GRE (hop
// limit 64, no flow label).
func nvgre6Frame(srcMAC, dstMAC, src, dst string, key uint32, inner []byte) []byte {
	return serialize(
		&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolGRE, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)},
		&layers.GRE{KeyPresent: true, Protocol: layers.EthernetTypeTransparentEthernetBridging, Key: key},
		gopacket.Payload(inner))
}

// tcpFrameFlags is tcpFrame with "syn", "ack" or "rst".
func tcpFrameFlags(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int, flags string) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Window: 65535,
		SYN: flags == "syn", ACK: flags == "ack", RST: flags == "rst"}
	tcp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-20-20, 0))
	return serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv4}, ip, tcp, gopacket.Payload(pay))
}

// tcpFrameFlags6 is tcpFrameFlags for IPv6 (hop limit 64).
func tcpFrameFlags6(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int, flags string) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Window: 65535,
		SYN: flags == "syn", ACK: flags == "ack", RST: flags == "rst"}
	tcp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-40-20, 0))
	return serialize(&layers.Ethernet{SrcMAC: mustMAC(srcMAC), DstMAC: mustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv6}, ip, tcp, gopacket.Payload(pay))
}

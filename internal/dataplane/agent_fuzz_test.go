package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// FuzzAgentGuest runs frames a guest sends (tenant input) through
// xdp_agent_guest, with a guest that has an EIP and serves a VIP, three
// flows recorded, and a second address of its port without an EIP. What
// comes out must obey the agent's rules whatever went in:
//
//   - tunnelled (XDP_REDIRECT): NVGRE from this host to one of the edges,
//     the guest's VSID, an inner source that is the EIP (only for a packet
//     from the EIP's guest) or the VIP (only for a reply of a recorded
//     flow: its public port, its remote, or for an ICMP error a quote of
//     it), never a private address, with a valid inner header checksum;
//   - to the kernel (XDP_PASS): unchanged, and if IPv4 from an address of
//     the port to a local destination;
//   - sent back (XDP_TX): ICMP fragmentation needed to an address of the
//     port;
//   - anything else is dropped.
//
// Under plain go test only the seeds run. Fuzz with
//
//	go test -run XXX -fuzz FuzzAgentGuest -fuzztime 3m ./internal/dataplane/
func FuzzAgentGuest(f *testing.F) {
	env, a := newAgentBed(f)
	g1 := uint32(mustIfindex(f, env, dptest.GuestDev))
	if err := a.PutEIP(AgentEIP{EIP: addr(eip), Private: addr(dptest.GuestAddr), VSID: vsid, StatsIdx: agentIdx, Ifindex: g1, Service: true}); err != nil {
		f.Fatal(err)
	}
	for _, s := range []AgentService{
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 80, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoTCP, VPort: 443, BPort: 8443, VSID: vsid},
		{VIP: addr(vipEncap), Guest: addr(dptest.GuestAddr), Proto: ProtoUDP, VSID: vsid},
	} {
		if err := a.PutService(s); err != nil {
			f.Fatal(err)
		}
	}
	in := []flow{
		{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40000, dport: 80, ttl: 63, syn: true},
		{src: client, dst: vipEncap, proto: layers.IPProtocolTCP, sport: 40002, dport: 443, ttl: 63, syn: true},
		{src: client, dst: vipEncap, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 63},
	}
	for _, fl := range in {
		frame := nvgre(f, dptest.FabMAC, dptest.UlMAC, edgeA, dptest.UlAddr, vsid<<8, 0, ethFrame(f, gwMAC, "02:01:c6:13:15:01", fl.ip(f)))
		if res, err := env.Run(a.UnderlayProgram(), dptest.UlDev, frame); err != nil || res.Action != xdpRedirect {
			f.Fatalf("VIP flow %+v: action %d %v", fl, res.Action, err)
		}
	}
	flows, err := a.Flows(0)
	if err != nil || len(flows) != len(in) {
		f.Fatalf("flows %+v %v", flows, err)
	}

	g := func(fl flow) []byte { return fl.frame(f, dptest.VMMAC, dptest.GuestMAC) }
	quote := flow{src: client, dst: dptest.GuestAddr, proto: layers.IPProtocolUDP, sport: 5000, dport: 7777, ttl: 62}.ip(f)[:28]
	seeds := [][]byte{
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 80, dport: 40000}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 8443, dport: 40002}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolTCP, sport: 33000, dport: 443, syn: true}),
		g(flow{src: "198.19.21.99", dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000}),
		g(flow{src: "198.19.21.99", dst: "198.18.5.5", proto: layers.IPProtocolUDP, sport: 1, dport: 2}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, fragOff: 10}),
		g(flow{src: dptest.GuestAddr, dst: client, proto: layers.IPProtocolUDP, sport: 7777, dport: 5000, df: true, payload: make([]byte, 1500-28)}),
		ethFrame(f, dptest.VMMAC, dptest.GuestMAC, icmpError(f, dptest.GuestAddr, client, 3, 3, 0, quote)),
	}
	// The checker itself: a VIP reply passes with its flow, not without;
	// the same output with a private inner source does not pass.
	res, err := env.Run(a.GuestProgram(), dptest.GuestDev, seeds[0])
	if err != nil || res.Action != xdpRedirect {
		f.Fatalf("VIP reply: action %d %v", res.Action, err)
	}
	if err := checkAgentGuestOut(seeds[0], res.Action, res.Out, flows); err != nil {
		f.Fatalf("checker refuses a good VIP reply: %v", err)
	}
	if checkAgentGuestOut(seeds[0], res.Action, res.Out, nil) == nil {
		f.Fatal("checker accepts a VIP reply without its flow")
	}
	leak := append([]byte(nil), res.Out...)
	copy(leak[56+12:56+16], ip4(dptest.GuestAddr))
	if checkAgentGuestOut(seeds[0], res.Action, leak, flows) == nil {
		f.Fatal("checker accepts a private inner source")
	}
	for _, s := range seeds {
		f.Add(append([]byte{0}, s...))
		f.Add(append([]byte{selAllFixes}, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1+fuzzMinFrame || len(data)-1 > fuzzMaxFrame {
			return
		}
		frame := append([]byte(nil), data[1:]...)
		fixUp(data[0]&selAllFixes, frame)
		res, err := env.Run(a.GuestProgram(), dptest.GuestDev, frame)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAgentGuestOut(frame, res.Action, res.Out, flows); err != nil {
			t.Fatalf("%v\ninput:\n%s\noutput:\n%s", err, decode(frame).Dump(), decode(res.Out).Dump())
		}
	})
}

// ipv4Of finds the IPv4 header of a frame behind up to two VLAN tags.
func ipv4Of(b []byte) []byte {
	off := 12
	for i := 0; i < 2 && len(b) >= off+2; i++ {
		if et := binary.BigEndian.Uint16(b[off:]); et != 0x8100 && et != 0x88a8 {
			break
		}
		off += 4
	}
	if len(b) < off+2+20 || binary.BigEndian.Uint16(b[off:]) != 0x0800 {
		return nil
	}
	return b[off+2:]
}

func checkAgentGuestOut(in []byte, action uint32, out []byte, flows []AgentFlow) error {
	guestAddrs := map[netip.Addr]bool{addr(dptest.GuestAddr): true, addr("198.19.21.99"): true}
	local := netip.MustParsePrefix("198.18.5.0/24") // bedLocal: UDP and ICMP
	ip := ipv4Of(in)
	var src, dst netip.Addr
	if ip != nil {
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	}
	switch action {
	case xdpDrop:
		return nil
	case xdpPass:
		if !bytes.Equal(in, out) {
			return fmt.Errorf("passed to the kernel, but changed")
		}
		if ip != nil && (!guestAddrs[src] || !local.Contains(dst) || (ip[9] != 17 && ip[9] != 1)) {
			return fmt.Errorf("passed to the kernel: %v -> %v protocol %d (not from the port's addresses to what a local rule allows)", src, dst, ip[9])
		}
		if ip == nil && len(in) >= 14 && binary.BigEndian.Uint16(in[12:]) == 0x86dd {
			return fmt.Errorf("IPv6 from a guest passed to the kernel")
		}
		return nil
	case xdpTX:
		o := ipv4Of(out)
		if o == nil || o[9] != 1 || len(o) < 22 || o[20] != 3 || o[21] != 4 {
			return fmt.Errorf("sent back, but not ICMP fragmentation needed")
		}
		if to := netip.AddrFrom4([4]byte(o[16:20])); !guestAddrs[to] || to != src {
			return fmt.Errorf("ICMP sent back to %v, not to the sender %v of the port", to, src)
		}
		return nil
	case xdpRedirect:
	default:
		return fmt.Errorf("action %d", action)
	}
	// NVGRE: outer IPv4 from this host to an edge, GRE with the guest's
	// VSID, then the inner frame.
	if len(out) < 56+20 || binary.BigEndian.Uint16(out[12:]) != 0x0800 || out[14] != 0x45 || out[14+9] != 47 {
		return fmt.Errorf("tunnelled, but not NVGRE over IPv4")
	}
	osrc, odst := netip.AddrFrom4([4]byte(out[26:30])), netip.AddrFrom4([4]byte(out[30:34]))
	if osrc != addr(dptest.UlAddr) || (odst != addr(edgeA) && odst != addr(edgeB)) {
		return fmt.Errorf("tunnel %v -> %v: not from this host to an edge", osrc, odst)
	}
	if binary.BigEndian.Uint16(out[34:]) != 0x2000 || binary.BigEndian.Uint16(out[36:]) != 0x6558 || binary.BigEndian.Uint32(out[38:])>>8 != vsid {
		return fmt.Errorf("GRE header % x: not NVGRE of VSID %d", out[34:42], vsid)
	}
	inner := out[56:]
	if inner[0]>>4 != 4 || binary.BigEndian.Uint16(out[54:]) != 0x0800 {
		return fmt.Errorf("inner frame is not IPv4")
	}
	hl := int(inner[0]&0xf) * 4
	if len(inner) < hl || csum(inner[:hl]) != 0 {
		return fmt.Errorf("inner IPv4 header checksum wrong")
	}
	isrc, idst := netip.AddrFrom4([4]byte(inner[12:16])), netip.AddrFrom4([4]byte(inner[16:20]))
	if src != addr(dptest.GuestAddr) {
		return fmt.Errorf("tunnelled a packet from %v, which has no EIP and no flow", src)
	}
	switch isrc {
	case addr(eip):
		return nil
	case addr(vipEncap):
	default:
		return fmt.Errorf("tunnelled with source %v: neither the EIP nor the VIP", isrc)
	}
	// The VIP: only for a recorded flow.
	proto := inner[9]
	frag := binary.BigEndian.Uint16(inner[6:])&0x3fff != 0
	var pport, rport uint16
	remote := idst
	switch {
	case frag:
		return fmt.Errorf("a fragment left from the VIP")
	case (proto == 6 || proto == 17) && len(inner) >= hl+4:
		pport, rport = binary.BigEndian.Uint16(inner[hl:]), binary.BigEndian.Uint16(inner[hl+2:])
	case proto == 1 && len(inner) >= hl+8+20+4:
		q := inner[hl+8:]
		qhl := int(q[0]&0xf) * 4
		if len(q) < qhl+4 || netip.AddrFrom4([4]byte(q[16:20])) != addr(vipEncap) {
			return fmt.Errorf("ICMP error from the VIP that does not quote a packet to it")
		}
		proto = q[9]
		remote = netip.AddrFrom4([4]byte(q[12:16]))
		if remote != idst {
			return fmt.Errorf("ICMP error to %v quoting a packet from %v", idst, remote)
		}
		rport, pport = binary.BigEndian.Uint16(q[qhl:]), binary.BigEndian.Uint16(q[qhl+2:])
	default:
		return fmt.Errorf("protocol %d left from the VIP", proto)
	}
	for _, fl := range flows {
		if fl.Proto == proto && fl.Public.Port() == pport && fl.Remote == netip.AddrPortFrom(remote, rport) {
			return nil
		}
	}
	return fmt.Errorf("left from VIP port %d to %v:%d (protocol %d): no such flow", pport, remote, rport, proto)
}

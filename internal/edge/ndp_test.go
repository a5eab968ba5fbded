package edge

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/store/embeddedtest"
)

var (
	vip6a = netip.MustParseAddr("2001:db8:e1::81")
	gw6   = netip.MustParseAddr("fe80::1")
)

// TestUnsolicitedNA: the advertisement a new owner sends for an IPv6
// address, byte for byte against gopacket's (checksum included): to
// all-nodes, hop limit 255, Override, Router for a gateway only, the
// target link-layer address option with the interface's MAC.
func TestUnsolicitedNA(t *testing.T) {
	hw, _ := net.ParseMAC("02:dd:00:00:00:01")
	for _, c := range []struct {
		ip     netip.Addr
		router bool
		flags  uint8
	}{
		{vip6a, false, 0x20},
		{gw6, true, 0xa0},
	} {
		ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255,
			SrcIP: c.ip.AsSlice(), DstIP: net.ParseIP("ff02::1")}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
		if err := ic.SetNetworkLayerForChecksum(ip6); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			&layers.Ethernet{SrcMAC: hw, DstMAC: net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv6},
			ip6, ic, &layers.ICMPv6NeighborAdvertisement{Flags: c.flags, TargetAddress: c.ip.AsSlice(),
				Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: hw}}}); err != nil {
			t.Fatal(err)
		}
		got := unsolicitedNA(hw, c.ip, c.router)
		if !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%v (router %v):\n got % x\nwant % x", c.ip, c.router, got, buf.Bytes())
		}
	}
}

// TestNDPOwnerAnnounces: the IPv6 VIPs and the gateway6 are answered
// under the ARP election: the data plane holds the gateway6 beside the
// IPv4 gateway, the owner (and only it) announces every address of both
// families twice, the status lists the IPv6 addresses answered, and the
// member that takes over announces them all again.
func TestNDPOwnerAnnounces(t *testing.T) {
	st := embeddedtest.Store(t)
	cfg := ARPConfig{Ifaces: []string{"lo"}, Gateway: gwAddr, Gateway6: gw6, TTL: 2 * time.Second, Margin: 500 * time.Millisecond}
	ms := []*fakeMember{startFake(t, st, "e1", cfg), startFake(t, st, "e2", cfg)}
	vips := []netip.Addr{vip1, vip6a}
	for _, m := range ms {
		if got := sorted(m.dp.Addrs); !slices.Equal(got, []netip.Addr{gwAddr, gw6}) {
			t.Fatalf("the data plane's extra addresses are %v; want the gateway and the gateway6", got)
		}
		m.a.update("s1", vips)
	}
	waitWithin(t, 5*time.Second, "an owner", func() bool { return ms[0].answering() || ms[1].answering() })
	o := 0
	if ms[1].answering() {
		o = 1
	}
	owner, other := ms[o], ms[1-o]
	all := []netip.Addr{vip1, gwAddr, vip6a, gw6}
	slices.SortFunc(all, netip.Addr.Compare)
	waitWithin(t, time.Second, "the first announcements", func() bool { return len(owner.announced()) >= 4 })
	if got := sorted(owner.announced()); !slices.Equal(got, all) {
		t.Fatalf("the owner announced %v; want %v", got, all)
	}
	time.Sleep(AnnounceInterval + 500*time.Millisecond)
	var twice []netip.Addr
	for _, a := range all {
		twice = append(twice, a, a)
	}
	if got := sorted(owner.announced()); !slices.Equal(got, twice) {
		t.Fatalf("the owner announced %v; want each address twice", got)
	}
	if len(other.announced()) != 0 {
		t.Fatalf("the non-owner announced %v", other.announced())
	}
	want6 := []netip.Addr{gw6, vip6a}
	slices.SortFunc(want6, netip.Addr.Compare)
	for _, m := range ms {
		if s := m.a.Status(); !slices.Equal(s.IPv6, want6) {
			t.Fatalf("status IPv6 %v; want %v", s.IPv6, want6)
		}
	}
	owner.a.update("", vips) // drained
	waitWithin(t, time.Second, "the other takes over", other.answering)
	waitWithin(t, time.Second, "the new owner announces", func() bool { return len(other.announced()) >= 4 })
	if got := sorted(other.announced()[:4]); !slices.Equal(got, all) {
		t.Fatalf("the new owner announced %v first; want %v", got, all)
	}
}

package dataplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestARPOwnership: the edge answers ARP for its VIPs and its extra
// addresses (a set's gateway) only while it owns its set's ARP scope, up
// to the deadline it was given, which the program enforces by itself.
func TestARPOwnership(t *testing.T) {
	b := newLBBed(t)
	e := b.edge
	const gw = "198.51.100.254"
	req := func(target string) []byte {
		return ser(t, &layers.Ethernet{SrcMAC: mac(dptest.RtrMAC), DstMAC: mac("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
			&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: layers.ARPRequest, SourceHwAddress: mac(dptest.RtrMAC), SourceProtAddress: ip4(client),
				DstHwAddress: make([]byte, 6), DstProtAddress: ip4(target)})
	}
	answered := func(name, target string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: req(target), action: xdpTX, check: arpCheck(target),
			stats: map[string]uint64{"arp_reply": 1}}
	}
	passed := func(name, target string) fixture {
		return fixture{name: name, dev: dptest.ExtDev, in: req(target), action: xdpPass, stats: map[string]uint64{"pass_non_ip": 1}}
	}
	if err := e.SetARPAddrs([]netip.Addr{netip.MustParseAddr(gw)}); err != nil {
		t.Fatal(err)
	}
	// Owner (newLBBed made it one).
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		answered("owner: a VIP", vipNAT),
		answered("owner: the gateway address", gw),
		passed("owner: another address", "198.51.100.99"),
	})
	until, err := e.ARPOwner()
	if err != nil || time.Until(until) < time.Hour {
		t.Fatalf("ARPOwner = %v, %v; want a day from now", until, err)
	}
	// Not the owner.
	if err := e.SetARPOwner(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if until, err := e.ARPOwner(); err != nil || !until.IsZero() {
		t.Fatalf("ARPOwner = %v, %v; want zero", until, err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		passed("not owner: a VIP", vipNAT),
		passed("not owner: the gateway address", gw),
	})
	// An owner whose deadline passed, with nobody to clear the map.
	if err := e.SetARPOwner(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{answered("before its deadline: a VIP", vipNAT)})
	time.Sleep(150 * time.Millisecond)
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{
		passed("past its deadline: a VIP", vipNAT),
		passed("past its deadline: the gateway address", gw),
	})
	// The extra addresses are replaced whole.
	if err := e.SetARPOwner(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.SetARPAddrs(nil); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{passed("a removed gateway address", gw)})
	if err := e.SetARPAddrs([]netip.Addr{netip.MustParseAddr("ff02::1")}); err == nil {
		t.Error("a multicast extra address was accepted")
	}
	// The interfaces answered on are listed, and removed one by one.
	ext := mustIfindex(t, b.env, dptest.ExtDev)
	ifs, err := e.ARPIfaces()
	if err != nil || len(ifs) != 1 || ifs[ext].String() != dptest.ExtMAC {
		t.Fatalf("ARPIfaces = %v, %v; want %s on %d", ifs, err, dptest.ExtMAC, ext)
	}
	if err := e.SetARP(ext, nil); err != nil {
		t.Fatal(err)
	}
	if ifs, err := e.ARPIfaces(); err != nil || len(ifs) != 0 {
		t.Fatalf("ARPIfaces = %v, %v after removal", ifs, err)
	}
	runFixtures(t, b.env, edgeProg{e}, e, []fixture{passed("an interface no longer configured: a VIP", vipNAT)})
}

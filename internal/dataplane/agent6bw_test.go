package dataplane

import (
	"testing"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestAgentIPv6Bandwidth: guest -> Internet from an IPv6 EIP through the
// agent's real program (agent_guest6, bw6_over_eip): at the smallest rate
// (1 kB/s) and burst (1,500 bytes) the first 1,000-byte packet passes and
// the next ones are dropped (drop_bw, counted in the EIP's eip_bw6
// bucket); the limit reads back; another guest's IPv6 EIP is untouched;
// a new setting keeps the bucket's counters and PutEIP of the EIP again
// the guest's flag; removed, packets pass again. (Ten packets in a row: the
// bucket refills 1,000 bytes a second, so only a pause of seconds between
// two of them would let a second one through; the test asserts drops.)
func TestAgentIPv6Bandwidth(t *testing.T) {
	env, a := newAgent6Bed(t)
	e := addr(agentEIP6)
	ip := ip6Hdr(agentPriv6, v6Client, nhUDP, udp6(5000, 53, bwPkt-48))
	setL4Csum6(ip)
	frame := eth6(dptest.VMMAC, dptest.GuestMAC, false, ip)
	slot := ptr[uint32](agentIdx6)
	pass := func(name string) fixture {
		return fixture{name: name, dev: dptest.GuestDev, in: frame, action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: slot, eipTx: 1}
	}
	prog := agentProg{a: a, guest: true}
	runFixtures(t, env, prog, a, []fixture{pass("before the limit")})

	// burst sends n packets, checking each one's verdict against drop_bw:
	// how many were dropped.
	burst := func(n int) uint64 {
		t.Helper()
		var drops uint64
		for i := range n {
			before, err := a.Stats()
			if err != nil {
				t.Fatal(err)
			}
			res, err := env.Run(a.GuestProgram(), dptest.GuestDev, frame)
			if err != nil {
				t.Fatal(err)
			}
			after, err := a.Stats()
			if err != nil {
				t.Fatal(err)
			}
			d := after["drop_bw"].Packets - before["drop_bw"].Packets
			if (res.Action == xdpDrop) != (d == 1) || (res.Action != xdpDrop && res.Action != xdpRedirect) {
				t.Fatalf("packet %d: action %d with %d drop_bw", i, res.Action, d)
			}
			drops += d
		}
		return drops
	}

	if err := a.SetEIPBandwidth(e, MinBandwidthRate, MinBandwidthBurst); err != nil {
		t.Fatal(err)
	}
	got, err := a.EIPBandwidths()
	if err != nil || len(got) != 1 || got[e] != (Bandwidth{Rate: MinBandwidthRate, Burst: MinBandwidthBurst}) {
		t.Fatalf("limits read back %v %v", got, err)
	}
	runFixtures(t, env, prog, a, []fixture{pass("the first packet of the burst")})
	drops := burst(10)
	if drops == 0 {
		t.Fatal("ten 1,000-byte packets at 1 kB/s after the burst: none dropped")
	}
	c, ok, err := a.EIPBandwidthDrops(e)
	if err != nil || !ok || c.Packets != drops || c.Bytes != drops*bwPkt {
		t.Fatalf("bucket drops %+v %v %v, want %d packets of %d bytes", c, ok, err, drops, bwPkt)
	}
	// Another guest's IPv6 EIP has no limit: its packets pass.
	other := ip6Hdr(agentPriv6NoNbr, v6Client, nhUDP, udp6(5000, 53, bwPkt-48))
	setL4Csum6(other)
	var others []fixture
	for range 3 {
		others = append(others, fixture{name: "another IPv6 EIP is untouched", dev: dptest.GuestDev,
			in: eth6(dptest.VMMAC, dptest.GuestMAC, false, other), action: xdpRedirect,
			stats: map[string]uint64{"encap_tx": 1}, eipSlot: ptr[uint32](agentIdx6b), eipTx: 1})
	}
	runFixtures(t, env, prog, a, others)

	// A new setting keeps the bucket's state and counters; PutEIP keeps
	// the guest's flag.
	if err := a.SetEIPBandwidth(e, 2*MinBandwidthRate, MinBandwidthBurst); err != nil {
		t.Fatal(err)
	}
	eips, err := a.EIPs()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutEIP(eips[e]); err != nil {
		t.Fatal(err)
	}
	more := burst(5)
	if more < 4 {
		t.Fatalf("after a new setting and PutEIP again: %d of 5 dropped, want at least 4", more)
	}
	if c, _, _ := a.EIPBandwidthDrops(e); c.Packets != drops+more {
		t.Fatalf("bucket drops %d after a new setting, want %d (carried over)", c.Packets, drops+more)
	}

	if err := a.SetEIPBandwidth(e, 0, 0); err != nil {
		t.Fatal(err)
	}
	runFixtures(t, env, prog, a, []fixture{pass("limit removed: 1"), pass("limit removed: 2"), pass("limit removed: 3")})
	if got, _ := a.EIPBandwidths(); len(got) != 0 {
		t.Fatalf("limits left after removal: %v", got)
	}
	if _, ok, _ := a.EIPBandwidthDrops(e); ok {
		t.Fatal("drops read back after removal")
	}
}

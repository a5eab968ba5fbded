package dataplane

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// TestAgentPutEIPFailureLeavesNoGuest: when the EIP's entry cannot be
// written (agent_eips full), the guest entry PutEIP wrote first goes back
// to what it was: none for a new guest (it would name an EIP and a
// counter slot EIPs never lists, so no reconciler would delete it), the
// previous EIP's for a guest that had one.
func TestAgentPutEIPFailureLeavesNoGuest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the agent data plane")
	}
	a, err := LoadAgent(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old := AgentEIP{EIP: netip.MustParseAddr("198.51.100.1"), Private: netip.MustParseAddr("198.19.0.1"), VSID: 7, StatsIdx: 1}
	if err := a.PutEIP(old); err != nil {
		t.Fatal(err)
	}
	// Fill agent_eips with other keys.
	for i, n := uint32(1), 1; n < int(a.objs.AgentEips.MaxEntries()); i, n = i+1, n+1 {
		k, _ := keyOf(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if err := a.objs.AgentEips.Update(akey(k), &agentAgentEip{Family: 2}, ebpf.UpdateNoExist); err != nil {
			t.Fatalf("filling agent_eips at %d: %v", n, err)
		}
	}
	guest := func(p netip.Addr) (agentAgentGuest, bool) {
		pk, _ := keyOf(p)
		var g agentAgentGuest
		return g, a.objs.AgentGuests.Lookup(akey(pk), &g) == nil
	}
	before, _ := guest(old.Private)

	// A new EIP of a new guest: refused, and no guest entry is left.
	fresh := AgentEIP{EIP: netip.MustParseAddr("198.51.100.2"), Private: netip.MustParseAddr("198.19.0.2"), VSID: 8, StatsIdx: 2}
	if err := a.PutEIP(fresh); err == nil {
		t.Fatal("PutEIP into a full agent_eips succeeded")
	}
	if g, ok := guest(fresh.Private); ok {
		t.Fatalf("guest entry %+v left by a failed PutEIP", g)
	}
	// A new EIP of a guest that has one: refused, its entry unchanged.
	moved := AgentEIP{EIP: netip.MustParseAddr("198.51.100.3"), Private: old.Private, VSID: 7, StatsIdx: 3}
	if err := a.PutEIP(moved); err == nil {
		t.Fatal("PutEIP into a full agent_eips succeeded")
	}
	if g, ok := guest(old.Private); !ok || g != before {
		t.Fatalf("guest entry %+v (present %v) after a failed PutEIP, want %+v", g, ok, before)
	}
}

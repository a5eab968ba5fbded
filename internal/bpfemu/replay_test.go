package bpfemu

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// TestReplayInstructions: a small hand-written program (bounds check on
// the packet, a byte read, a BPF-to-BPF call, a packet write, both
// branches of a jump) replays to the action, bytes and counts it executes,
// instruction by instruction. No kernel: the program is never loaded.
func TestReplayInstructions(t *testing.T) {
	drop := asm.JGT.Reg(asm.R4, asm.R3, "")
	drop.Offset = 5 // to "r0 = XDP_DROP"
	prog := &ebpf.ProgramSpec{Name: "t", Type: ebpf.XDP, Instructions: asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word).WithSymbol("t"), // r2 = ctx->data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word),                 // r3 = ctx->data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 2),
		drop, // data + 2 > data_end: drop
		asm.LoadMem(asm.R1, asm.R2, 0, asm.Byte),
		asm.Call.Label("double"), // r0 = 2 * pkt[0]
		asm.StoreMem(asm.R2, 1, asm.R0, asm.Byte),
		asm.Mov.Imm(asm.R0, 2), // XDP_PASS
		asm.Return(),
		asm.Mov.Imm(asm.R0, 1), // XDP_DROP
		asm.Return(),
		asm.Mov.Reg(asm.R0, asm.R1).WithSymbol("double"),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.Return(),
	}}
	got, err := Replay(prog, Env{}, []byte{21, 0, 7})
	if err != nil {
		t.Fatal(err)
	}
	// 7 before the call, 3 in it, 3 after it.
	if got.Action != 2 || !bytes.Equal(got.Out, []byte{21, 42, 7}) || got.Insns != 13 || got.Subprog != 1 || len(got.Calls) != 0 {
		t.Errorf("long frame: action %d, %x, %v; want XDP_PASS, 21 42 7, 13 instructions, one BPF-to-BPF call", got.Action, got.Out, got)
	}
	got, err = Replay(prog, Env{}, []byte{21})
	if err != nil {
		t.Fatal(err)
	}
	if got.Action != 1 || !bytes.Equal(got.Out, []byte{21}) || got.Insns != 7 || got.Subprog != 0 {
		t.Errorf("short frame: action %d, %x, %v; want XDP_DROP after 7 instructions, frame unchanged", got.Action, got.Out, got)
	}
	// A read the bounds check would not have allowed is refused.
	bad := &ebpf.ProgramSpec{Name: "bad", Type: ebpf.XDP, Instructions: asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.LoadMem(asm.R0, asm.R2, 4, asm.Byte),
		asm.Return(),
	}}
	if got, err := Replay(bad, Env{}, []byte{1, 2}); err == nil {
		t.Errorf("read past data_end replayed: %+v", got)
	}
}

// Addresses of the test (the dptest bed's, as the benchmarks use them).
const (
	testEIP    = "198.51.100.7"
	testHost   = "198.18.21.1"
	testClient = "203.0.113.10"
	testVSID   = 5001
)

// TestReplayMatchesKernel: the replay of the edge, loaded with a
// full-size route table, on the encap and the pass frames ends with the
// action and the bytes the kernel's run of the same frame gives.
func TestReplayMatchesKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	e, err := dataplane.LoadEdge(dataplane.LoadOptions{EIPMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.SetConfig(dataplane.EdgeConfig{Underlay: netip.MustParseAddr(dptest.UlAddr), ICMPSource: netip.MustParseAddr(dptest.ExtAddr),
		HashSeed: 1, ICMPRate: 1000, ICMPBurst: 100, ICMPTimeExceeded: true, GatewayMAC: dptest.MustMAC("02:00:00:00:00:fe")}); err != nil {
		t.Fatal(err)
	}
	// A full-size route table, so lookups hit a populated hash.
	routes := map[netip.Addr]dataplane.Route{}
	for i := 0; i < 100_000; i++ {
		a := netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)})
		routes[a] = dataplane.Route{Host: netip.MustParseAddr(testHost), VSID: testVSID, StatsIdx: uint32(i + 1)}
	}
	routes[netip.MustParseAddr(testEIP)] = dataplane.Route{Host: netip.MustParseAddr(testHost), VSID: testVSID, StatsIdx: 0}
	if err := e.PutRoutes(routes); err != nil {
		t.Fatal(err)
	}
	specs, err := dataplane.ProgramSpecs()
	if err != nil {
		t.Fatal(err)
	}
	b, err := dataplane.LoadBench()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	j, err := b.Jiffies()
	if err != nil {
		t.Fatal(err)
	}
	inet := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, testClient, testEIP, 40000, 80, 128)
	idx, _ := env.Node.Ifindex(dptest.ExtDev)
	// Warm the next-hop cache with a real run first.
	want, err := env.Run(e.Program(), dptest.ExtDev, inet)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Replay(specs["xdp_edge"], Env{Maps: e.Maps(), CPU: firstCPU(), Ifindex: uint32(idx), Jiffies: j}, inet)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("edge encap: %v", got)
	if got.Action != want.Action || !bytes.Equal(got.Out, want.Out[:len(got.Out)]) {
		t.Errorf("replay: action %d, %x\nkernel: action %d, %x", got.Action, got.Out, want.Action, want.Out)
	}

	// Not an EIP: the pass path reads the global hc_address (.bss) too.
	pass := tcpFrame(dptest.RtrMAC, dptest.ExtMAC, testClient, "198.51.100.250", 40000, 80, 128)
	want, err = env.Run(e.Program(), dptest.ExtDev, pass)
	if err != nil {
		t.Fatal(err)
	}
	got, err = Replay(specs["xdp_edge"], Env{Maps: e.Maps(), CPU: firstCPU(), Ifindex: uint32(idx), Jiffies: j}, pass)
	if err != nil {
		t.Fatalf("edge pass: %v", err)
	}
	if got.Action != want.Action {
		t.Errorf("edge pass: replay action %d, kernel %d", got.Action, want.Action)
	}
}

// firstCPU is the CPU dptest's runs are pinned to: the first this process
// may use.
func firstCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			return c
		}
	}
	return 0
}

// tcpFrame is an Ethernet/IPv4/TCP frame of exactly size bytes.
func tcpFrame(srcMAC, dstMAC, src, dst string, sport, dport uint16, size int) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Flags: layers.IPv4DontFragment,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Ack: 1, ACK: true, Window: 65535}
	tcp.SetNetworkLayerForChecksum(ip)
	pay := make([]byte, max(size-14-20-20, 0))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: dptest.MustMAC(srcMAC), DstMAC: dptest.MustMAC(dstMAC), EthernetType: layers.EthernetTypeIPv4},
		ip, tcp, gopacket.Payload(pay)); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}
